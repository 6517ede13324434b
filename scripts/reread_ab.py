"""A/B of reading a row twice instead of holding it, at the block plans' widths, on a GPU.

About two minutes in one process; prints a table and writes nothing else::

    python scripts/reread_ab.py > results/h200/checks/reread-ab-<UTC stamp>.log

``torch.compile``'s RMSNorm forward at 8192 columns reads each row twice (one
chunk, ``evict_last`` and then ``evict_first``, one row a program) and beat
our block plan, which holds the row in registers. This times, for the
softmax, RMSNorm and residual RMSNorm forwards at the suite's block shapes:
the shipped ``auto`` (block) plan; a looped plan whose one chunk covers the
row, on the looped plans' persistent grid, holding the row in registers
(RMSNorm) or reading it twice (softmax, whose looped kernel always does); and
for RMSNorm that plan reading the row twice
(``rms_norm.REREAD_ONE_CHUNK``), as wider rows are read. Each plan runs on
the same inputs, visited in alternating order (six visits of twenty samples),
each call with a cold L2 and a device spin ahead of its start event; outputs
are checked against the shipped plan's. The last lines give the mean change
of the median time per operator and variant. A diagnostic for the
performance notes: the site quotes the benchmark results, never this.
"""

from __future__ import annotations

import statistics

import torch
from ab_support import compare_settings, setup

from kernel_portfolio import plans
from kernel_portfolio.ops import rms_norm, softmax

F16, BF16 = torch.float16, torch.bfloat16
SHAPES = ((8192, 8192, F16), (8192, 8192, BF16), (32768, 8192, F16), (16384, 4104, F16))
SHAPES += ((16384, 4096, F16), (32768, 1024, F16))
OPS = ("softmax fwd", "rms_norm fwd", "residual fwd")
MOVED = {"softmax fwd": 2, "rms_norm fwd": 2, "residual fwd": 4}


def _call(op: str, x, r, w, y, h, rstd):
    """The forward launcher of ``op`` as a function of the plan."""
    if op == "softmax fwd":
        return lambda plan: softmax._launch_forward(x, y, plan)
    res, hh = (r, h) if op == "residual fwd" else (None, None)
    return lambda plan: rms_norm._forward(x, res, w, 1e-6, plan, y, hh, rstd)


def main() -> None:
    flush, copy_gbps = setup("reread_ab")
    print(
        f"\n{'op':<13} {'shape':<12} {'dtype':<9} {'variant':<32} {'median us':>10} {'% copy':>7}"
    )
    changes = {}
    for m, n, dtype in SHAPES:
        x, r = (torch.randn(m, n, device="cuda", dtype=dtype) for _ in range(2))
        w = torch.randn(n, device="cuda", dtype=dtype)
        y, h = torch.empty_like(x), torch.empty_like(x)
        rstd = torch.empty(m, device="cuda")
        shipped = plans.choose_for(x)
        assert shipped.kind == "block", (m, n, shipped)
        looped = plans.RowPlan("looped", shipped.block, shipped.num_warps)
        for op in OPS:
            call = _call(op, x, r, w, y, h, rstd)
            variants = {"block (shipped)": (shipped, False), "looped, one chunk": (looped, False)}
            if op != "softmax fwd":
                variants["looped, one chunk, reread"] = (looped, True)

            def apply(name, variants=variants, call=call):
                plan, reread = variants[name]
                rms_norm.REREAD_ONE_CHUNK = reread
                return plan

            state = {"plan": shipped}
            timed = compare_settings(
                lambda call=call, state=state: call(state["plan"]),
                (y, h, rstd) if op == "residual fwd" else (y,),
                lambda name, apply=apply, state=state: state.update(plan=apply(name)),
                list(variants),
                "block (shipped)",
                flush,
            )
            for name in variants:
                median, diff = timed[name]
                pct = 100 * MOVED[op] * m * n * dtype.itemsize / median / 1e6 / copy_gbps
                label = f"{name} {variants[name][0].block}-w{variants[name][0].num_warps}"
                row = f"{op:<13} {f'{m}x{n}':<12} {str(dtype)[6:]:<9} {label:<32}"
                print(f"{row} {median * 1e3:>10.1f} {pct:>6.1f}%  max diff {diff:.2e}")
                changes.setdefault((op, name), []).append(median / timed["block (shipped)"][0] - 1)
        torch.cuda.empty_cache()
    print("\nmean change of the median time against the shipped plan:")
    for (op, name), c in changes.items():
        print(f"  {op}, {name}: {100 * statistics.mean(c):+.2f}% (worst {100 * max(c):+.2f}%)")


if __name__ == "__main__":
    main()
