"""A/B of the row prefetch (a program loads its next row while it reduces the current one).

About two minutes in one process; prints a table and writes nothing else::

    python scripts/row_prefetch_ab.py > results/h200/checks/row-prefetch-ab-<UTC stamp>.log

Forwards (softmax, RMSNorm, residual RMSNorm, row sum, block plans): times
``plan_rule.BLOCK_ROWS_PER_PROGRAM`` at 1 (a program per row, no prefetch),
2, 4 and 8 (:func:`kernel_portfolio.plans.forward_programs`; more than one
row a program turns the kernels' ``PREFETCH`` on). Backward (RMSNorm, and the
residual RMSNorm's, which adds ``dh`` and writes two ``dx``): times
``rms_norm.BWD_PREFETCH_ELEMS`` as shipped against 0 (never). Float16, every
setting on the same inputs, visited in alternating order (six visits of
twenty samples), each call with a cold L2 and a device spin ahead of its start
event. Each setting's outputs are checked against the shipped setting's. The
share of copy bandwidth counts the compulsory bytes (as the suite does; the
backward without its float32 weight-gradient partials). The last lines give
the mean change of the median time per operator against the shipped setting.
A diagnostic for the performance notes: the site quotes the benchmark
results, never this.
"""

from __future__ import annotations

import statistics

import torch
from ab_support import interleaved_medians, setup

from kernel_portfolio import plan_rule, plans
from kernel_portfolio.bench import timing
from kernel_portfolio.ops import rms_norm, row_sum, softmax

SHAPES = ((32768, 1024), (16384, 2048), (8192, 8192), (32768, 8192), (16384, 4104))
FORWARD = ("softmax fwd", "rms_norm fwd", "residual fwd", "row_sum fwd")
BACKWARD = ("rms_norm bwd", "residual bwd")


def _set_rows(rows: int) -> None:
    plan_rule.BLOCK_ROWS_PER_PROGRAM = rows


def _set_bwd(elems: int) -> None:
    rms_norm.BWD_PREFETCH_ELEMS = elems


def _cases(m: int, n: int) -> dict:
    """Per operator: ``(call, outputs, elements moved per row element)``."""
    x, r, dy, dh = (torch.randn(m, n, device="cuda", dtype=torch.float16) for _ in range(4))
    w = torch.randn(n, device="cuda", dtype=torch.float16)
    plan = plans.choose_for(x)
    y, h, dx, dx2 = (torch.empty_like(x) for _ in range(4))
    rstd = torch.rsqrt(x.float().pow(2).mean(-1) + 1e-6)
    rstd_out = torch.empty_like(rstd)
    dw, sums = torch.empty_like(w), torch.empty(m, device="cuda", dtype=torch.float16)
    return {
        "softmax fwd": (lambda: softmax._launch_forward(x, y, plan), (y,), 2),
        "rms_norm fwd": (
            lambda: rms_norm._forward(x, None, w, 1e-6, plan, y, None, rstd_out),
            (y, rstd_out),
            2,
        ),
        "residual fwd": (lambda: rms_norm._forward(x, r, w, 1e-6, plan, y, h, None), (y, h), 4),
        "row_sum fwd": (lambda: row_sum._launch_row_sum(x, sums, plan), (sums,), 1),
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


def _measure(op, call, outs, elems, m, n, settings, set_, shipped, flush, copy_gbps) -> float:
    """Time one operator under each setting, print its rows; return each change against shipped."""
    results = {}
    for setting in settings:
        set_(setting)
        call()
        results[setting] = [t.clone() for t in outs]
    set_(shipped)
    lead = timing.lead_for(call)
    calls = {s: (lambda s=s: (set_(s), call())) for s in settings}
    medians = interleaved_medians(calls, flush, lead)
    set_(shipped)
    for setting in settings:
        diff = max(
            (a.float() - b.float()).abs().max().item()
            for a, b in zip(results[setting], results[shipped], strict=True)
        )
        median = medians[setting]
        pct = 100 * elems * m * n * 2 / median / 1e6 / copy_gbps
        mark = "*" if setting == shipped else " "
        row = f"{op:<13} {m}x{n:<7} {setting:>5}{mark} {median * 1e3:>10.1f}"
        print(f"{row} {pct:>6.1f}% {diff:>9.2e}")
    return {s: medians[s] / medians[shipped] - 1 for s in settings}


def main() -> None:
    flush, copy_gbps = setup("row_prefetch_ab")
    rows_shipped = plan_rule.BLOCK_ROWS_PER_PROGRAM
    elems_shipped = rms_norm.BWD_PREFETCH_ELEMS
    rows_settings = tuple(sorted({1, 2, 4, 8, rows_shipped}))
    elems_settings = (elems_shipped, 0)
    print(
        f"\nforwards: BLOCK_ROWS_PER_PROGRAM in {rows_settings} (shipped {rows_shipped}, *);"
        f" backwards: BWD_PREFETCH_ELEMS in {elems_settings} (shipped {elems_shipped}, *)"
    )
    print(f"{'op':<13} {'shape':<13} {'set':>6} {'median us':>10} {'% copy':>7} {'max diff':>9}")
    changes = {op: [] for op in (*FORWARD, *BACKWARD)}
    for m, n in SHAPES:
        for op, (call, outs, elems) in _cases(m, n).items():
            if op in FORWARD:
                args = (rows_settings, _set_rows, rows_shipped)
            else:
                args = (elems_settings, _set_bwd, elems_shipped)
            changes[op].append(
                _measure(op, call, outs, elems, m, n, *args, flush=flush, copy_gbps=copy_gbps)
            )
        torch.cuda.empty_cache()
    print("\nmean change of the median time against the shipped setting, per setting:")
    for op, per_shape in changes.items():
        settings = per_shape[0]
        means = {s: 100 * statistics.mean(c[s] for c in per_shape) for s in settings}
        print(f"  {op}: " + ", ".join(f"{s}: {v:+.2f}%" for s, v in means.items()))


if __name__ == "__main__":
    main()
