from kernel_portfolio.cli import main

raise SystemExit(main())
