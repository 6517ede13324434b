"""The benchmark harness behind ``kp bench``.

* :mod:`~kernel_portfolio.bench.suites`: the suites, as data, and the byte and FLOP formulas.
* :mod:`~kernel_portfolio.bench.runner`: checks and times a suite on the GPU, saves the result.
* :mod:`~kernel_portfolio.bench.timing`: CUDA-event and CUDA-graph timers, L2 flush, warm-up.
* :mod:`~kernel_portfolio.bench.records`: raw samples to result records (also for fixtures).
* :mod:`~kernel_portfolio.bench.plan`: the ``--dry-run`` plan and time estimate.
* :mod:`~kernel_portfolio.bench.env`: GPU, versions, clocks and load.
"""
