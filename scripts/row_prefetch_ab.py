"""A/B of the RMSNorm backward's row prefetch on a GPU.

About a minute in one process; prints a table and writes nothing else::

    python scripts/row_prefetch_ab.py > results/h200/checks/row-prefetch-ab-<UTC stamp>.log

A backward program walks several rows; with the prefetch
(``rms_norm.BWD_PREFETCH_ELEMS``, up to that many columns a thread) it loads
its next row's ``dy``, ``h`` and ``rstd`` while it reduces the current one.
Times the RMSNorm backward and the residual RMSNorm's (which adds ``dh`` and
writes two ``dx``) with the setting as shipped against 0 (never), float16,
both on the same inputs, visited in alternating order (six visits of twenty
samples), each call with a cold L2 and a device spin ahead of its start
event. Each setting's outputs are checked against the shipped setting's (the
weight gradient may differ in its last bit: the settings keep different
numbers of partial rows). The share of copy bandwidth counts the compulsory
bytes (as the suite does; without the float32 weight-gradient partials). The
last lines give the mean change of the median time per operator. A
diagnostic for the performance notes: the site quotes the benchmark results,
never this.
"""

from __future__ import annotations

import statistics

import torch
from ab_support import compare_settings, setup

from kernel_portfolio import plans
from kernel_portfolio.ops import rms_norm

SHAPES = ((32768, 1024), (16384, 2048), (8192, 8192), (32768, 8192), (16384, 4104))


def _set(elems: int) -> None:
    rms_norm.BWD_PREFETCH_ELEMS = elems


def _cases(m: int, n: int) -> dict:
    """Per operator: ``(call, outputs, elements moved per row element)``."""
    x, dy, dh = (torch.randn(m, n, device="cuda", dtype=torch.float16) for _ in range(3))
    w = torch.randn(n, device="cuda", dtype=torch.float16)
    plan = plans.choose_for(x)
    dx, dx2 = torch.empty_like(x), torch.empty_like(x)
    rstd = torch.rsqrt(x.float().pow(2).mean(-1) + 1e-6)
    dw = torch.empty_like(w)
    return {
        "rms_norm bwd": (
            lambda: rms_norm._backward(dy, x, w, rstd, None, plan, dx, None, dw),
            (dx, dw),
            3,
        ),
        "residual bwd": (
            lambda: rms_norm._backward(dy, x, w, rstd, dh, plan, dx, dx2, dw),
            (dx, dx2, dw),
            5,
        ),
    }


def main() -> None:
    flush, copy_gbps = setup("row_prefetch_ab")
    shipped = rms_norm.BWD_PREFETCH_ELEMS
    settings = (shipped, 0)
    print(f"\nRMSNorm backward, BWD_PREFETCH_ELEMS shipped {shipped} against 0 (never)")
    print(f"{'op':<13} {'shape':<13} {'set':>4} {'median us':>10} {'% copy':>7} {'max diff':>9}")
    changes = {}
    for m, n in SHAPES:
        for op, (call, outs, elems) in _cases(m, n).items():
            timed = compare_settings(call, outs, _set, settings, shipped, flush)
            for setting in settings:
                median, diff = timed[setting]
                pct = 100 * elems * m * n * 2 / median / 1e6 / copy_gbps
                row = f"{op:<13} {m}x{n:<7} {setting:>4} {median * 1e3:>10.1f}"
                print(f"{row} {pct:>6.1f}% {diff:>9.2e}")
            changes.setdefault(op, []).append(timed[0][0] / timed[shipped][0] - 1)
        torch.cuda.empty_cache()
    print("\nmean change of the median time without the prefetch against the shipped setting:")
    for op, c in changes.items():
        print(f"  {op}: {100 * statistics.mean(c):+.2f}%")


if __name__ == "__main__":
    main()
