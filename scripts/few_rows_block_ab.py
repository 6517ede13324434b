"""A/B of a block plan for few wide rows, where the rule splits them.

About a minute on a GPU in one process; prints a table and writes nothing else::

    python scripts/few_rows_block_ab.py > results/h200/checks/few-rows-block-ab-<UTC stamp>.log

Few rows wider than ``plan_rule.SPLIT_MIN_BYTES`` take a split plan: two
kernels a forward (slice statistics, then the write), each a launch and a
drain on a latency-bound call (4x32769 float16 is 256 KiB). A block plan does
the row in one kernel, one program a row holding it in registers (a row just
past a power of two as a main block and a tail, ``plans.block_pieces``), at
16 or 32 warps. Compiled for sm_90a on the CPU, the block forwards of 32768
(+1) float16 columns at 16 warps take 128 registers and spill nothing; the
softmax backward spills (56 bytes at 32768, 676 at 32769), so the backward
launchers are timed too, with the forward's plan as they take it.

Timed as the suite times latency-bound cases: twenty back-to-back calls
captured in a CUDA graph, replayed (warm L2), six visits of twenty replays in
alternating order of the settings. Outputs are compared with the shipped
plan's (the reductions differ in order, so the last bits may too). The last
lines give the mean change of the median time per operator and setting. A
diagnostic for the performance notes: the site quotes the benchmark results,
never this.
"""

from __future__ import annotations

import functools
import statistics

import torch
from ab_support import graph_medians, setup

from kernel_portfolio import plans
from kernel_portfolio.ops import rms_norm, softmax

CASES = [(m, n) for m in (1, 4, 16, 66) for n in (20000, 32769)] + [(4, 32768)]
DTYPE = torch.float16
SETTINGS = ("shipped", 16, 32)  # the rule's plan; a block plan of 16 or 32 warps


def _plan(setting, x: torch.Tensor) -> plans.RowPlan:
    if setting == "shipped":
        return plans.choose_for(x)
    block = plans.choose_for(x, "block").block
    return plans.RowPlan("block", block, setting)


def _cases(m: int, n: int) -> dict:
    """Per operator: ``call(plan)`` and its outputs."""
    x, r, dy = (torch.randn(m, n, device="cuda", dtype=DTYPE) for _ in range(3))
    w = torch.randn(n, device="cuda", dtype=DTYPE)
    p = torch.softmax(x.float(), -1).to(DTYPE)
    rstd = torch.rsqrt(x.float().pow(2).mean(-1) + 1e-6)
    y, h, dx, dx2 = (torch.empty_like(x) for _ in range(4))
    dw = torch.empty_like(w)
    return {
        "softmax fwd": (lambda plan: softmax._launch_forward(x, y, plan), (y,)),
        "softmax bwd": (lambda plan: softmax._launch_backward(p, dy, dx, plan), (dx,)),
        "rms_norm fwd": (
            lambda plan: rms_norm._forward(x, None, w, 1e-6, plan, y, None, rstd),
            (y,),
        ),
        "residual fwd": (lambda plan: rms_norm._forward(x, r, w, 1e-6, plan, y, h, rstd), (y, h)),
        "rms_norm bwd": (
            lambda plan: rms_norm._backward(dy, x, w, rstd, None, plan, dx, None, dw),
            (dx, dw),
        ),
    }


def main() -> None:
    setup("few_rows_block_ab")
    print(
        f"\nFew wide rows, {str(DTYPE)[6:]}: the rule's plan against a block plan of 16, 32 warps"
    )
    head = f"{'op':<13} {'shape':<9} {'plan':<22} {'median us':>10} {'max diff':>9}"
    print(head)
    changes = {}
    for m, n in CASES:
        for op, (call, outs) in _cases(m, n).items():
            x = outs[0]
            chosen = {s: _plan(s, x) for s in SETTINGS}
            results = {}
            for s in SETTINGS:
                call(chosen[s])
                results[s] = [t.clone() for t in outs]
            medians = graph_medians({s: functools.partial(call, chosen[s]) for s in SETTINGS})
            for s in SETTINGS:
                plan = chosen[s]
                diff = max(
                    (a.float() - b.float()).abs().max().item()
                    for a, b in zip(results[s], results["shipped"], strict=True)
                )
                name = f"{plan.kind}-{plan.block}-w{plan.num_warps}"
                if plan.kind == "split":
                    name += f"-s{plan.splits}"
                print(f"{op:<13} {m}x{n:<7} {name:<22} {medians[s] * 1e3:>10.2f} {diff:>9.2e}")
                if s != "shipped":
                    changes.setdefault((op, s), []).append(medians[s] / medians["shipped"] - 1)
    print("\nmean change of the median time against the rule's plan:")
    for (op, s), c in changes.items():
        print(f"  {op}, block plan of {s} warps: {100 * statistics.mean(c):+.2f}% ({len(c)} cases)")


if __name__ == "__main__":
    main()
