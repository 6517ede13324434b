"""A/B of the looped plan's persistent grid: how many programs an SM runs at once.

About a minute on a GPU in one process; prints a table and writes nothing else::

    python scripts/looped_grid_ab.py > results/h200/checks/looped-grid-ab-<UTC stamp>.log

A looped plan reads each row twice (softmax: the max and sum, then the write;
RMSNorm: the sum of squares, then the scaled write; the residual RMSNorm
rereads ``h``; the softmax backward rereads ``y`` and ``dy``). The second read
comes from L2 only while the rows in flight fit in it, and
:func:`kernel_portfolio.plans.persistent_programs` keeps as many programs an
SM as the warps allow (4 of 16 warps: 528 rows of 256 KiB in flight at
1024x131072 float16). This times the looped launchers with at most 1, 2 and 4
programs an SM against the shipped grid, on the same inputs, visited in
alternating order (six visits of twenty samples), each call with a cold L2 and
a device spin ahead of its start event. Outputs are checked against the
shipped grid's (equal: a program's rows do not change what it computes). The
share of copy bandwidth counts the compulsory bytes, as the suite does. The
last lines give the mean change of the median time per setting. A diagnostic
for the performance notes: the site quotes the benchmark results, never this.
"""

from __future__ import annotations

import statistics

import torch
from ab_support import compare_settings, setup

from kernel_portfolio import plans
from kernel_portfolio.ops import rms_norm, softmax

CASES = (
    (1024, 131072, torch.float16),
    (2048, 65536, torch.float16),
    (256, 262144, torch.float16),
    (4096, 20000, torch.float16),
    (1024, 131072, torch.float32),
)
SHIPPED = None  # the shipped grid
SETTINGS = (SHIPPED, 1, 2, 4)
_PROGRAMS = plans.persistent_programs


def _set(per_sm: int | None) -> None:
    """Cap a looped plan's programs an SM at ``per_sm`` (None: as shipped)."""

    def capped(n_rows: int, plan: plans.RowPlan, sm_count: int) -> int:
        programs = _PROGRAMS(n_rows, plan, sm_count)
        if per_sm is None or plan.kind != "looped":
            return programs
        return min(programs, per_sm * sm_count)

    plans.persistent_programs = capped


def _cases(m: int, n: int, dtype: torch.dtype) -> dict:
    """Per operator: ``(call, outputs, bytes moved)``."""
    x, r, dy = (torch.randn(m, n, device="cuda", dtype=dtype) for _ in range(3))
    w = torch.randn(n, device="cuda", dtype=dtype)
    y, h, dx = (torch.empty_like(x) for _ in range(3))
    p = torch.softmax(x.float(), -1).to(dtype)
    plan = plans.choose_for(x)
    assert plan.kind == "looped", (m, n, plan)
    size = m * n * x.element_size()
    return {
        "softmax fwd": (lambda: softmax._launch_forward(x, y, plan), (y,), 2 * size),
        "softmax bwd": (lambda: softmax._launch_backward(p, dy, dx, plan), (dx,), 3 * size),
        "rms_norm fwd": (
            lambda: rms_norm._forward(x, None, w, 1e-6, plan, y, None, None),
            (y,),
            2 * size + n * x.element_size(),
        ),
        "residual fwd": (
            lambda: rms_norm._forward(x, r, w, 1e-6, plan, y, h, None),
            (y, h),
            4 * size + n * x.element_size(),
        ),
    }


def main() -> None:
    flush, copy_gbps = setup("looped_grid_ab")
    sms = plans.sm_count(torch.device("cuda"))
    print(f"\nLooped plans: programs an SM at most 1, 2, 4 against the shipped grid ({sms} SMs)")
    head = f"{'op':<13} {'shape':<11} {'dtype':<8} {'plan':<18} {'per SM':>7} {'programs':>8}"
    print(f"{head} {'median us':>10} {'% copy':>7} {'max diff':>9}")
    changes = {}
    for m, n, dtype in CASES:
        for op, (call, outs, nbytes) in _cases(m, n, dtype).items():
            plan = plans.choose_for(outs[0])
            timed = compare_settings(call, outs, _set, SETTINGS, SHIPPED, flush)
            for setting in SETTINGS:
                _set(setting)
                programs = plans.persistent_programs(m, plan, sms)
                _set(SHIPPED)
                median, diff = timed[setting]
                pct = 100 * nbytes / median / 1e6 / copy_gbps
                row = f"{op:<13} {m}x{n:<6} {str(dtype)[6:]:<8} {plan.kind}-{plan.block}-w"
                row += f"{plan.num_warps:<6} {setting!s:>7} {programs:>8}"
                print(f"{row} {median * 1e3:>10.1f} {pct:>6.1f}% {diff:>9.2e}")
                if setting is not SHIPPED:
                    changes.setdefault((op, setting), []).append(median / timed[SHIPPED][0] - 1)
        torch.cuda.empty_cache()
    print("\nmean change of the median time against the shipped grid, per op and cap:")
    for (op, setting), c in changes.items():
        print(f"  {op} at most {setting} an SM: {100 * statistics.mean(c):+.2f}% ({len(c)} cases)")


if __name__ == "__main__":
    main()
