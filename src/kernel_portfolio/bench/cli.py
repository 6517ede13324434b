"""``kp bench``, ``kp env`` and ``kp results``.

``kp bench`` checks and times a suite on the GPU and saves
``results/<gpu-slug>/<suite>.json`` with its log; ``--list`` and ``--dry-run``
need no GPU. ``kp env`` prints the environment block a result records.
``kp results`` lists the saved results, the commit each measured and whether
each is current or stale (an archived one against the sources at its commit);
``kp results --import FILE`` commits a result measured on another machine.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys

from kernel_portfolio.errors import UserError

#: Baselines that are packages of their own: implementation name -> what to install.
OPTIONAL_BASELINES = {"liger": "Liger-Kernel: pip install -e '.[bench]'"}


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``bench``, ``env`` and ``results`` to the ``kp`` command."""
    bench = sub.add_parser("bench", help="check and time a benchmark suite on the GPU")
    bench.add_argument("--list", action="store_true", help="list the suites and their cases")
    bench.add_argument("--suite", default="default", help="suite to run (default: default)")
    bench.add_argument(
        "--filter",
        help="run a subset: key=value terms joined by commas, keys op, mode, shape, dtype, "
        "impl, timer (e.g. op=softmax,dtype=float16; a key twice means either)",
    )
    bench.add_argument(
        "--dry-run", action="store_true", help="print the plan and time estimate, run nothing"
    )
    bench.add_argument("--out", help="results folder (default: results/<gpu-slug>/)")
    bench.add_argument(
        "--cache",
        choices=("cold", "warm"),
        default="cold",
        help="L2 before each event-timed call: cold (flushed, default) or warm",
    )
    bench.add_argument("--visits", type=int, help="visits per case (default: the suite's)")
    bench.add_argument("--seed", type=int, default=0, help="seed of inputs and visit order")
    bench.add_argument(
        "--allow-missing",
        action="append",
        default=[],
        choices=OPTIONAL_BASELINES,
        metavar="BASELINE",
        help="run although this baseline does not import here (its cases record it as "
        "skipped); without it a run refuses to start: "
        + ", ".join(f"{k} ({v})" for k, v in OPTIONAL_BASELINES.items()),
    )
    bench.set_defaults(func=_bench)

    env = sub.add_parser("env", help="print the environment block a result records")
    env.set_defaults(func=_env)

    results = sub.add_parser("results", help="list saved results: their commit, current or stale")
    results.add_argument(
        "--import",
        dest="import_path",
        metavar="FILE",
        help="commit a results file measured elsewhere (with its log) into results/<gpu>/",
    )
    results.set_defaults(func=_results)


def _list() -> int:
    from kernel_portfolio.bench.suites import SUITES

    for suite in SUITES.values():
        print(f"{suite.name}: {suite.description} ({len(suite.cases)} cases)")
        for case in suite.cases:
            print(f"  {case.id:<48} {case.timer:<10} {', '.join(case.impls)}")
    return 0


def _missing_baselines(cases, allowed: list[str]) -> dict[str, str]:
    """The selected cases' optional baselines that do not import here, unless ``allowed``.

    Each is looked up as the run would (:func:`kernel_portfolio.bench.runner.implementation`),
    once. A run without one would save its cases with that baseline skipped,
    and the pages would compare ours with fewer libraries than the suite names.

    Returns:
        Baseline name -> the import error.
    """
    from kernel_portfolio.bench.runner import implementation

    missing = {}
    for name in OPTIONAL_BASELINES.keys() - set(allowed):
        case = next((c for c in cases if name in c.impls), None)
        if case is None:
            continue
        try:
            implementation(case, name)
        except ImportError as err:
            missing[name] = f"{type(err).__name__}: {err}"
    return missing


def _bench(args: argparse.Namespace) -> int:
    from kernel_portfolio.bench.suites import SUITES, parse_filter, select

    if args.list:
        return _list()
    suite = SUITES.get(args.suite)
    if suite is None:
        raise UserError(f"unknown suite {args.suite!r} (known: {', '.join(SUITES)})")
    try:
        cases = select(suite.cases, parse_filter(args.filter))
    except ValueError as err:
        raise UserError(f"--filter: {err}") from err
    if args.visits is not None and args.visits < 1:
        raise UserError(f"--visits must be >= 1, got {args.visits}")
    visits = args.visits or suite.visits
    if args.dry_run:
        from kernel_portfolio.bench.plan import plan_text

        print(plan_text(suite, cases, visits=visits, cache=args.cache))
        return 0
    from kernel_portfolio.bench.env import require_gpu

    require_gpu("; --dry-run plans the run without one")
    missing = _missing_baselines(cases, args.allow_missing)
    if missing:
        raise UserError(
            "baselines of the selected cases do not import: "
            + "; ".join(
                f"{name} ({why}; install {OPTIONAL_BASELINES[name]})"
                for name, why in sorted(missing.items())
            )
            + ". Or pass --allow-missing NAME to record them as skipped"
        )
    from kernel_portfolio.bench.runner import run_suite

    run_suite(
        suite,
        cases,
        command="kp " + shlex.join(sys.argv[1:]),
        out_dir=args.out,
        cache=args.cache,
        visits=visits,
        seed=args.seed,
        filter_text=args.filter,
    )
    return 0


def _env(args: argparse.Namespace) -> int:
    from kernel_portfolio.bench.env import capture_env, gpu_slug, gpu_state, require_gpu

    props = require_gpu()
    block = {"gpu_slug": gpu_slug(props.name), **capture_env(props), "gpu_state": gpu_state(props)}
    print(json.dumps(block, indent=2))
    return 0


def _results(args: argparse.Namespace) -> int:
    from kernel_portfolio.results import (
        CommitMissing,
        ResultError,
        import_run,
        load,
        repo_root,
        result_id,
        result_paths,
    )

    try:
        root = repo_root()
    except ResultError as err:
        raise UserError(str(err)) from err
    if args.import_path:
        try:
            done = import_run(args.import_path, root)
        except ResultError as err:
            raise UserError(str(err)) from err
        if done.previous is not None:
            from kernel_portfolio.results import compare_runs

            changes = compare_runs(done.previous.data, load(done.path).data)
            print(f"changes vs the previous {done.path.name} ({len(changes)}):")
            for line in changes or ["none beyond the spread of the samples"]:
                print(f"  {line}")
        if done.archived is not None:
            print(f"archived the previous result as {done.archived}")
        for note in done.notes:
            print(note)
        print(f"wrote {done.path}")
        return 0
    paths = result_paths(root)
    if not paths:
        print(f"no benchmark results under {root / 'results'}")
        return 0
    bad = 0
    for path in paths:
        try:
            res = load(path)
        except ResultError as err:
            bad += 1
            print(f"{result_id(path):<48} INVALID  {err}")
            continue
        try:
            stale = res.staleness(root)
        except CommitMissing as err:
            bad += 1
            print(f"{res.id:<48} UNVERIFIED  {err}")
            continue
        state = "current" if stale.current else "stale"
        changed = f"  changed: {', '.join(stale.changed)}" if stale.changed else ""
        git = res.data["git"]
        commit = git["commit"] + (" (dirty)" if git["dirty"] else "")
        print(
            f"{res.id:<48} {state:<8} {commit}  {res.data['finished_utc']}  "
            f"{len(res.data['cases'])} cases{changed}"
        )
    return 1 if bad else 0
