"""A/B of the softmax split forward as one cooperative launch against its two launches.

About a minute on a GPU in one process; prints a table and writes nothing else::

    python scripts/coop_split_ab.py > results/h200/checks/coop-split-ab-<UTC stamp>.log

Few wide rows take the split plan. Where each program's slice is one chunk
and the grid fits the SMs (``softmax._cooperative``), the forward runs as one
launch whose programs wait for their row's others on a counter; otherwise as
a stats launch and a write launch. This times both on the shipped plan
(``_cooperative`` patched to False for the second) with ``torch.softmax``
beside them, as the suite times latency-bound cases: twenty back-to-back calls
captured in a CUDA graph, replayed (warm L2), six visits of twenty replays in
alternating order. The outputs of the two must be equal bit for bit. A
diagnostic for the performance notes: the site quotes the benchmark results,
never this.
"""

from __future__ import annotations

import statistics

import torch
from ab_support import interleaved_medians, setup

from kernel_portfolio import plans
from kernel_portfolio.bench import timing
from kernel_portfolio.ops import softmax

CASES = [(4, 32769), (1, 65536), (2, 131072), (8, 32769), (16, 20000), (26, 20000)]
DTYPES = (torch.float16, torch.bfloat16)
CALLS = 20  # calls a graph


def _time(calls: dict) -> dict:
    """Median ms a call of each, captured ``CALLS`` times in a graph, replayed, interleaved."""
    graphs = {name: timing.capture_graph(call, CALLS) for name, call in calls.items()}
    medians = interleaved_medians({n: g.replay for n, g in graphs.items()}, None, 0.0)
    return {name: ms / CALLS for name, ms in medians.items()}


def main() -> None:
    setup("coop_split_ab")
    cooperative = softmax._cooperative
    apart = lambda *args: False  # noqa: E731
    print(
        f"\n{'shape':<10} {'dtype':<9} {'plan':<20} {'one':>7} {'two':>7} {'torch':>7}  us a call"
    )
    changes = []
    for dtype in DTYPES:
        for m, n in CASES:
            x = torch.randn(m, n, device="cuda", dtype=dtype)
            plan = plans.choose_for(x)
            per_program, n_splits = plans.split_segments(n, plan)
            if plan.kind != "split" or not cooperative(m, n_splits, per_program, x.device):
                print(f"{m}x{n:<8} {str(dtype)[6:]:<9} {plan.kind}: not cooperative, skipped")
                continue
            outs = {"one": torch.empty_like(x), "two": torch.empty_like(x)}

            def one(y=outs["one"], x=x, plan=plan):
                softmax._launch_forward(x, y, plan)

            def two(y=outs["two"], x=x, plan=plan):
                softmax._cooperative = apart
                try:
                    softmax._launch_forward(x, y, plan)
                finally:
                    softmax._cooperative = cooperative

            calls = {"one": one, "two": two, "torch": lambda x=x: torch.softmax(x, -1)}
            for call in calls.values():
                call()
            equal = torch.equal(outs["one"], outs["two"])
            us = {name: ms * 1e3 for name, ms in _time(calls).items()}
            name = f"split-{plan.block}-w{plan.num_warps}x{n_splits}"
            print(
                f"{m}x{n:<8} {str(dtype)[6:]:<9} {name:<20} {us['one']:>7.2f} {us['two']:>7.2f}"
                f" {us['torch']:>7.2f}  torch/one {us['torch'] / us['one']:.2f}x"
                f"  {'equal' if equal else 'DIFFERENT'}"
            )
            changes.append(us["one"] / us["two"] - 1)
    print(f"\nmean change, one launch against two: {100 * statistics.mean(changes):+.2f}%")


if __name__ == "__main__":
    main()
