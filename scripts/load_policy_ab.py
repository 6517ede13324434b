"""A/B of the row kernels' load eviction policies on a GPU.

About two minutes in one process; prints a table and writes nothing else::

    python scripts/load_policy_ab.py > results/h200/checks/load-policy-ab-<UTC stamp>.log

Times each row operator as shipped against the same kernels with every load
at the hardware's default policy (``eviction_policy=""``): the row sum's
:data:`~kernel_portfolio.ops.row_sum.LOAD_POLICY`, and the two passes of a
looped softmax (forward and backward) and of a looped RMSNorm forward
(``LOOPED_FIRST_PASS`` and ``LOOPED_SECOND_PASS`` of
:mod:`~kernel_portfolio.ops.softmax` and :mod:`~kernel_portfolio.ops.rms_norm`).
The row sum is timed at the suite's block, looped and split shapes in three
dtypes (its float32 rows now keep the default under both settings: this A/B
timed the hint slower there), the others where their ``auto`` plan is
looped. Each case runs its ``auto`` plan on the same inputs under both
settings, visited in alternating order (six visits of twenty samples), each
call with a cold L2 and a device spin ahead of its start event; the outputs
of the two settings are compared.
The share of copy bandwidth counts the compulsory bytes, as the suite does.
The last lines give the mean change of the median time per operator. A
diagnostic for the performance notes: the site quotes the benchmark results,
never this.
"""

from __future__ import annotations

import statistics

import torch
from ab_support import compare_settings, setup

from kernel_portfolio import plans
from kernel_portfolio.ops import rms_norm, row_sum, softmax

F16, BF16, F32 = torch.float16, torch.bfloat16, torch.float32
#: ``(operator, rows, columns, dtype)``
CASES = (
    *(("row_sum", 16384, 8192, d) for d in (F16, BF16, F32)),
    *(("row_sum", 8192, 8192, d) for d in (F16, F32)),
    ("row_sum", 16384, 4104, F16),
    ("row_sum", 32768, 1024, F16),
    ("row_sum", 1024, 131072, F16),
    ("row_sum", 64, 131072, F16),
    *((op, 1024, 131072, F16) for op in ("softmax fwd", "softmax bwd")),
    *((op, 4096, 20000, d) for op in ("softmax fwd", "softmax bwd") for d in (F16, F32)),
    *((op, 1024, 131072, F16) for op in ("rms_norm fwd", "residual fwd")),
    *((op, 4096, 20000, d) for op in ("rms_norm fwd", "residual fwd") for d in (F16, F32)),
)
#: Row elements each operator must move per element (its compulsory bytes).
MOVED = {"row_sum": 1, "softmax fwd": 2, "softmax bwd": 3, "rms_norm fwd": 2, "residual fwd": 4}
SHIPPED = (
    row_sum.LOAD_POLICY,
    softmax.LOOPED_FIRST_PASS,
    softmax.LOOPED_SECOND_PASS,
    rms_norm.LOOPED_FIRST_PASS,
    rms_norm.LOOPED_SECOND_PASS,
)
DEFAULT = ("",) * len(SHIPPED)


def _set(setting: tuple[str, ...]) -> None:
    row_sum.LOAD_POLICY, *rest = setting
    softmax.LOOPED_FIRST_PASS, softmax.LOOPED_SECOND_PASS, *rest = rest
    rms_norm.LOOPED_FIRST_PASS, rms_norm.LOOPED_SECOND_PASS = rest


def _case(op: str, m: int, n: int, dtype: torch.dtype):
    """``(call, outputs, plan)`` of ``op``'s launcher on fresh random rows."""
    x, other = (torch.randn(m, n, device="cuda", dtype=dtype) for _ in range(2))
    w = torch.randn(n, device="cuda", dtype=dtype)
    plan = plans.choose_for(x)
    y, h = torch.empty_like(x), torch.empty_like(x)
    rstd = torch.empty(m, device="cuda")
    if op == "row_sum":
        out = torch.empty(m, device="cuda", dtype=dtype)
        return lambda: row_sum._launch_row_sum(x, out, plan), (out,), plan
    if op == "softmax fwd":
        return lambda: softmax._launch_forward(x, y, plan), (y,), plan
    if op == "softmax bwd":
        probs = torch.softmax(x.float(), -1).to(dtype)
        return lambda: softmax._launch_backward(probs, other, y, plan), (y,), plan
    if op == "rms_norm fwd":
        return lambda: rms_norm._forward(x, None, w, 1e-6, plan, y, None, rstd), (y, rstd), plan
    return lambda: rms_norm._forward(x, other, w, 1e-6, plan, y, h, rstd), (y, h, rstd), plan


def main() -> None:
    flush, copy_gbps = setup("load_policy_ab")
    print(f"\nsettings: shipped {SHIPPED} against default {DEFAULT}")
    print("(row_sum.LOAD_POLICY, softmax and rms_norm LOOPED_FIRST_PASS, LOOPED_SECOND_PASS)")
    head = f"{'op':<13} {'shape':<12} {'dtype':<9} {'plan':<17} {'setting':<8}"
    print(f"{head} {'median us':>10} {'% copy':>7} {'max diff':>9}")
    changes = {}
    for op, m, n, dtype in CASES:
        call, outs, plan = _case(op, m, n, dtype)
        timed = compare_settings(call, outs, _set, [SHIPPED, DEFAULT], SHIPPED, flush)
        for setting, name in ((SHIPPED, "shipped"), (DEFAULT, "default")):
            median, diff = timed[setting]
            pct = 100 * MOVED[op] * m * n * outs[0].element_size() / median / 1e6 / copy_gbps
            label = f"{plan.kind}-{plan.block}-w{plan.num_warps}"
            row = f"{op:<13} {f'{m}x{n}':<12} {str(dtype)[6:]:<9} {label:<17} {name:<8}"
            print(f"{row} {median * 1e3:>10.1f} {pct:>6.1f}% {diff:>9.2e}")
        changes.setdefault(op, []).append(timed[SHIPPED][0] / timed[DEFAULT][0] - 1)
        torch.cuda.empty_cache()
    print("\nmean change of the median time, shipped against default, per operator:")
    for op, c in changes.items():
        worst = max(c)
        print(
            f"  {op}: {100 * statistics.mean(c):+.2f}% ({len(c)} cases, worst {100 * worst:+.2f}%)"
        )


if __name__ == "__main__":
    main()
