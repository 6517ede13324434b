"""Host cost per eager call, with the Triton launches stubbed out (CPU only).

Runs under the Triton interpreter with ``InterpretedFunction.run`` replaced by a
no-op, so a call of ``kp.<op>`` does everything on the host (checks, plan
choice, allocations, autograd, the route to the launcher) except run a
kernel. What is left is the Python host cost that the H200's event timings
see, less Triton's own launcher. Each operator is called as the benchmark
harness calls it (:func:`kernel_portfolio.bench.runner.make_call`: the
forward, or the forward and ``torch.autograd.backward``, the gradients dropped
before each call)::

    python scripts/host_profile.py                       # every op, fwd and fwdbwd
    python scripts/host_profile.py --ops rms_norm --profile rms_norm/fwdbwd

torch's own operators are timed the same way, at the same small shapes, for
reference. Their CPU kernels do real work, and so do the parts of our
backward that are torch operations, so that comparison is rough. One
intra-op thread: a shared machine's thread pool otherwise adds milliseconds
of noise.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import time

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported

import torch  # noqa: E402
from triton.runtime.interpreter import InterpretedFunction  # noqa: E402

from kernel_portfolio.bench.runner import implementation, make_call, make_inputs  # noqa: E402
from kernel_portfolio.bench.suites import Case  # noqa: E402

#: One small shape per operator, for ours and torch alike: with the launches
#: stubbed our cost does not depend on it, but the real CPU work in autograd
#: (accumulating gradients, torch's kernels) does, so it is kept small.
SHAPES = {
    "add": (4096,),
    "row_sum": (32, 127),
    "softmax": (32, 127),
    "rms_norm": (32, 127),
    "residual_rms_norm": (32, 127),
    "matmul": (64, 64, 64),
}


def case_call(op: str, mode: str, impl: str, dtype: str):
    """``(call, prepare)`` for one implementation of one case, on CPU tensors."""
    case = Case(op, mode, SHAPES[op], dtype, "cuda_graph", ("ours", "torch"))
    inputs = make_inputs(case, seed=0, device="cpu")
    return make_call(case, implementation(case, impl), inputs)


def run_calls(call, prepare, calls: int) -> None:
    for _ in range(calls):
        if prepare is not None:
            prepare()
        call()


def per_call_us(call, prepare, calls: int, repeats: int) -> float:
    """Median over ``repeats`` loops of ``calls`` calls, after a warm-up: us per call."""
    run_calls(call, prepare, max(10, calls // 20))
    values = []
    for _ in range(repeats):
        start = time.perf_counter()
        run_calls(call, prepare, calls)
        values.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(values)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", nargs="*", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument("--modes", nargs="*", default=["fwd", "fwdbwd"], choices=["fwd", "fwdbwd"])
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-torch", action="store_true", help="time ours only")
    parser.add_argument("--profile", metavar="OP/MODE", help="cProfile ours on this case")
    parser.add_argument("--top", type=int, default=25, help="profile entries to print")
    args = parser.parse_args(argv)
    if args.profile is not None:
        op, _, mode = args.profile.partition("/")
        if op not in SHAPES or mode not in ("fwd", "fwdbwd"):
            parser.error(f"--profile must be OP/fwd or OP/fwdbwd, OP one of {list(SHAPES)}")

    threads, run = torch.get_num_threads(), InterpretedFunction.run
    torch.set_num_threads(1)
    InterpretedFunction.run = lambda self, *a, **k: None  # launches do nothing
    try:
        _report(args)
    finally:
        InterpretedFunction.run = run
        torch.set_num_threads(threads)
    return 0


def _report(args: argparse.Namespace) -> None:
    """Time every selected case, then profile one if asked."""
    print(
        f"torch {torch.__version__}, {args.dtype}, launches stubbed, {args.calls} calls x "
        f"{args.repeats} repeats; us per call (median of the repeats)"
    )
    print(f"{'case':<30} {'ours':>8} {'torch':>8}")
    for op in args.ops:
        for mode in args.modes:
            cells = [
                per_call_us(*case_call(op, mode, "ours", args.dtype), args.calls, args.repeats)
            ]
            if not args.no_torch:
                call, prepare = case_call(op, mode, "torch", args.dtype)
                cells.append(per_call_us(call, prepare, args.calls, args.repeats))
            name = f"{op}/{mode}/{'x'.join(map(str, SHAPES[op]))}"
            print(f"{name:<30} {' '.join(f'{c:8.1f}' for c in cells)}", flush=True)

    if args.profile:
        op, mode = args.profile.split("/")
        call, prepare = case_call(op, mode, "ours", args.dtype)
        run_calls(call, prepare, 50)
        profiler = cProfile.Profile()
        profiler.runcall(run_calls, call, prepare, args.calls)
        stats = pstats.Stats(profiler, stream=sys.stdout)
        stats.sort_stats("tottime").print_stats(args.top)
        stats.sort_stats("cumulative").print_stats(args.top)


if __name__ == "__main__":
    sys.exit(main())
