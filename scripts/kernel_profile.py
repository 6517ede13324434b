"""The kernels of one call of a suite case, each timed apart, for every implementation.

Under a minute on a GPU for a few cases; prints a table and writes nothing else::

    python scripts/kernel_profile.py CASE_ID ... > results/h200/checks/kernel-profile-<stamp>.log

For each case of the default suite named, each implementation's call (as the
suite makes it: ``runner.make_call``, forward or forward + backward) runs
:data:`CALLS` times under ``torch.profiler``, each with a cold L2 (the
flusher's own kernel is left out of the table); the table gives, per kernel
name, its launches a call and the median of its device time, and per
implementation the sum of those medians. A wall-clock figure of the same calls
is not the suite's (the profiler adds host time between launches); the sum
says how much of the suite's time is in kernels and which kernel holds it. A
diagnostic for the performance notes: the site quotes the benchmark results,
never this.
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict

import torch
from ab_support import setup
from torch.profiler import ProfilerActivity, profile

from kernel_portfolio.bench import runner, suites

CALLS = 20
SEED = 0


def kernel_times(call, prepare, flush) -> dict[str, list[float]]:
    """Device microseconds of each kernel name, one value per call (launches of a call summed)."""
    for _ in range(3):
        if prepare is not None:
            prepare()
        call()
    torch.cuda.synchronize()
    per_call = []
    for _ in range(CALLS):
        flush()
        if prepare is not None:
            prepare()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            call()
            torch.cuda.synchronize()
        sums = defaultdict(float)
        counts = defaultdict(int)
        for event in prof.events():
            if event.device_type == torch.autograd.DeviceType.CUDA:
                sums[event.name] += event.time_range.elapsed_us()
                counts[event.name] += 1
        per_call.append((sums, counts))
    names = {name for sums, _ in per_call for name in sums}
    return {
        name: (
            statistics.median(counts[name] for _, counts in per_call),
            [sums.get(name, 0.0) for sums, _ in per_call],
        )
        for name in names
    }


def main() -> None:
    flush, _ = setup("kernel_profile")
    by_id = {case.id: case for case in suites.SUITES["default"].cases}
    for case_id in sys.argv[1:]:
        case = by_id[case_id]
        inputs = runner.make_inputs(case, SEED)
        print(f"\n{case_id}")
        for name in case.impls:
            print(f"  {name}")
            try:
                call, prepare = runner.make_call(case, runner.implementation(case, name), inputs)
                times = kernel_times(call, prepare, flush)
            except Exception as err:  # a baseline that cannot run this case
                print(f"    not run: {type(err).__name__}: {str(err)[:120]}")
                continue
            total = 0.0
            for kernel, (count, values) in sorted(times.items(), key=lambda kv: -sum(kv[1][1])):
                median = statistics.median(values)
                total += median
                print(f"    {median:>9.2f} us  x{count:<3g} {kernel[:90]}")
            print(f"    {total:>9.2f} us  in all")


if __name__ == "__main__":
    main()
