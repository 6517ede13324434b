"""A/B of the block plan's two pieces (``plans.block_pieces``) on a GPU.

About a minute in one process; prints a table and writes nothing else::

    python scripts/block_pieces_ab.py > results/h200/checks/block-pieces-ab-<UTC stamp>.log

Times the row launchers (float16) with ``plan_rule.PIECE_TAIL_DIVISOR`` as
shipped (a row just past a power of two held as a main block and a tail,
:func:`kernel_portfolio.plans.block_pieces`) against 0 (one power-of-two
block, half masked at 4104 columns): softmax
forward and backward, RMSNorm forward and backward (with a weight), the
residual RMSNorm forward and row sum, at widths with tails of 8 to 256 columns
and at 4096 (the control, where both settings launch the same kernel). Both run on
the same inputs, visited in alternating order (six visits of twenty samples),
each call with a cold L2 and a device spin ahead of its start event. Each
setting's outputs are checked against the shipped setting's. The share of copy
bandwidth counts the compulsory bytes (as the suite does; the backward
without its float32 weight-gradient partials). The last lines give the mean
change of the median time per operator. A diagnostic for the performance
notes: the site quotes the benchmark results, never this.
"""

from __future__ import annotations

import statistics

import torch
from ab_support import compare_settings, setup

from kernel_portfolio import plan_rule, plans
from kernel_portfolio.ops import rms_norm, row_sum, softmax

SETTINGS = (plan_rule.PIECE_TAIL_DIVISOR, 0)
SHAPES = (
    (16384, 4104),
    (16384, 4160),
    (16384, 4352),
    (8192, 8200),
    (32768, 2056),
    (32768, 1032),
    (16384, 4096),
)
OPS = ("softmax fwd", "softmax bwd", "rms_norm fwd", "rms_norm bwd", "residual fwd", "row_sum fwd")


def _set(divisor: int) -> None:
    plan_rule.PIECE_TAIL_DIVISOR = divisor


def _cases(m: int, n: int) -> dict:
    """Per operator of ``OPS``: ``(call, outputs, elements moved per row element)``."""
    x, r, dy = (torch.randn(m, n, device="cuda", dtype=torch.float16) for _ in range(3))
    w = torch.randn(n, device="cuda", dtype=torch.float16)
    plan = plans.choose_for(x)
    y, h, dx = torch.empty_like(x), torch.empty_like(x), torch.empty_like(x)
    rstd = torch.rsqrt(x.float().pow(2).mean(-1) + 1e-6)
    dw, sums = torch.empty_like(w), torch.empty(m, device="cuda", dtype=torch.float16)
    probs = torch.softmax(x.float(), -1).half()
    return {
        "softmax fwd": (lambda: softmax._launch_forward(x, y, plan), (y,), 2),
        "softmax bwd": (lambda: softmax._launch_backward(probs, dy, dx, plan), (dx,), 3),
        "rms_norm fwd": (
            lambda: rms_norm._forward(x, None, w, 1e-6, plan, y, None, rstd),
            (y, rstd),
            2,
        ),
        "rms_norm bwd": (
            lambda: rms_norm._backward(dy, x, w, rstd, None, plan, dx, None, dw),
            (dx, dw),
            3,
        ),
        "residual fwd": (lambda: rms_norm._forward(x, r, w, 1e-6, plan, y, h, None), (y, h), 4),
        "row_sum fwd": (lambda: row_sum._launch_row_sum(x, sums, plan), (sums,), 1),
    }


def _measure(m: int, n: int, shipped: int, flush, copy_gbps: float, changes: dict) -> None:
    for op, (call, outs, elems) in _cases(m, n).items():
        timed = compare_settings(call, outs, _set, SETTINGS, shipped, flush)
        pieces = plans.block_pieces(n, plans.choose(m, n, elem_bytes=2, sm_count=132).block)
        for setting in SETTINGS:
            median, diff = timed[setting]
            pct = 100 * elems * m * n * 2 / median / 1e6 / copy_gbps
            shown = str(pieces) if setting else "one block"
            row = f"{op:<13} {m}x{n:<7} {setting:>7} {shown:>12} {median * 1e3:>10.1f}"
            print(f"{row} {pct:>6.1f}% {diff:>9.2e}")
        changes[op].append(timed[0][0] / timed[shipped][0] - 1)


def main() -> None:
    flush, copy_gbps = setup("block_pieces_ab")
    shipped = plan_rule.PIECE_TAIL_DIVISOR
    print(f"\nblock pieces, PIECE_TAIL_DIVISOR shipped {shipped} against 0 (one block)")
    head = f"{'op':<13} {'shape':<13} {'divisor':>7} {'pieces':>12} {'median us':>10}"
    print(f"{head} {'% copy':>7} {'max diff':>9}")
    changes = {op: [] for op in OPS}
    for m, n in SHAPES:
        _measure(m, n, shipped, flush, copy_gbps, changes)
        torch.cuda.empty_cache()
    print("\nmean change of the median time of one block against the shipped pieces:")
    for op, c in changes.items():
        print(f"  {op}: {100 * statistics.mean(c):+.2f}%")


if __name__ == "__main__":
    main()
