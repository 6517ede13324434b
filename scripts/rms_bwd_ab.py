"""A/B of the RMSNorm backward's launch constants on a GPU.

About a minute in one process; prints a table and writes nothing else::

    python scripts/rms_bwd_ab.py > results/h200/checks/rms-bwd-ab-<UTC stamp>.log

Times the backward launcher (``ops.rms_norm._backward``: ``dx`` and the weight
gradient, float16) at the widths that take its first pass (looped and split
plans) with settings of ``(BWD_WARPS_PER_SM, BWD_HEAVY_WARPS_PER_SM,
BWD_DOT_STEP, BWD_LIGHT_MAX_WARPS, BWD_DOT_CHUNKS)``: the warps per SM of light and heavy programs
(:func:`kernel_portfolio.ops.rms_norm._bwd_launch`; ``(0, 0)`` is two programs
per SM whatever the width), the chunks a step of the looped and split plans'
first pass (``_bwd_dot_kernel``), the most warps of a light program (more
count as heavy: one resides an SM, with a register cap of 128), and the
most chunks a program of that first pass (``rms_norm._dot_slices``). All run on the same
inputs, visited in alternating order (six visits of twenty samples), each call with a cold L2
and a device spin ahead of its start event. Each setting's ``dx`` and weight
gradient are checked against the shipped setting's first. The share of copy
bandwidth counts ``3*M*N`` elements (``dy`` and ``h`` read, ``dx`` written),
not the float32 partials. The last line names the setting with the lowest mean
change of the median time against the shipped one. A diagnostic for the
performance notes: the site quotes the benchmark results, never this.
"""

from __future__ import annotations

import statistics

import torch
from ab_support import compare_settings, setup

from kernel_portfolio import plans
from kernel_portfolio.ops import rms_norm

# (light warps per SM, heavy warps per SM, dot-kernel chunks a step, light program's most
# warps, dot-kernel's most chunks a program)
SETTINGS = (
    (32, 16, 2, 8, 1),
    (32, 16, 2, 8, 2),
    (32, 16, 2, 8, 4),
    (32, 16, 4, 8, 4),
    (32, 16, 1, 8, 4),
)
SHAPES = (
    (1024, 131072),  # looped
    (256, 65536),
    (132, 65536),
    (64, 131072),  # split plans from here
    (16, 131072),
    (4, 32769),
    (4, 32769, 4096, 16),  # the split plan in chunks of 4096 columns with 16 warps
)


def _set(setting: tuple[int, int, int, int, int]) -> None:
    (
        rms_norm.BWD_WARPS_PER_SM,
        rms_norm.BWD_HEAVY_WARPS_PER_SM,
        rms_norm.BWD_DOT_STEP,
        rms_norm.BWD_LIGHT_MAX_WARPS,
        rms_norm.BWD_DOT_CHUNKS,
    ) = setting


def _measure(shape: tuple, shipped, flush, copy_gbps: float, changes: dict) -> None:
    """Time every setting at ``shape`` and print its rows; append each change to ``changes``.

    ``shape`` is ``(m, n)`` under ``auto``'s plan, or ``(m, n, block, warps)``
    under that split plan.
    """
    m, n = shape[:2]
    h, dy = (torch.randn(m, n, device="cuda", dtype=torch.float16) for _ in range(2))
    w = torch.randn(n, device="cuda", dtype=torch.float16)
    rstd = torch.rsqrt(h.float().pow(2).mean(-1) + 1e-6)
    plan = plans.choose_for(h)
    if len(shape) == 4:
        plan = plans.RowPlan("split", shape[2], shape[3], plans.cdiv(n, shape[2]))
    dx, dw = torch.empty_like(h), torch.empty_like(w)

    def call():
        rms_norm._backward(dy, h, w, rstd, None, plan, dx, None, dw)

    timed = compare_settings(call, (dx, dw), _set, SETTINGS, shipped, flush)
    for setting in SETTINGS:
        median, diff = timed[setting]
        _set(setting)
        launch = rms_norm._bwd_launch(plan, n, h.element_size(), False)
        prefetch = "p" if launch.prefetch else ""
        _set(shipped)
        pct = 100 * 3 * m * n * h.element_size() / median / 1e6 / copy_gbps
        case = f"{plan.kind}-{plan.block} {m}x{n}"
        row = f"{case:<28} {str(setting):>27} {launch.warps:>5} {launch.per_sm:>5}{prefetch:1}"
        row += f" {median * 1e3:>10.1f}"
        print(f"{row} {pct:>6.1f}% {diff:>9.2e}")
        changes[setting].append(median / timed[shipped][0] - 1)


def main() -> None:
    flush, copy_gbps = setup("rms_bwd_ab")
    shipped = (
        rms_norm.BWD_WARPS_PER_SM,
        rms_norm.BWD_HEAVY_WARPS_PER_SM,
        rms_norm.BWD_DOT_STEP,
        rms_norm.BWD_LIGHT_MAX_WARPS,
        rms_norm.BWD_DOT_CHUNKS,
    )
    print("\nRMSNorm backward, (light, heavy) warps per SM, dot step, light warps, dot chunks")
    head = f"{'case':<28} {'setting':>27} {'warps':>5} {'per SM':>6} {'median us':>10}"
    print(f"{head} {'% copy':>7} {'max diff':>9}")
    changes = {s: [] for s in SETTINGS}
    for shape in SHAPES:
        _measure(shape, shipped, flush, copy_gbps, changes)
        torch.cuda.empty_cache()
    mean = {s: 100 * statistics.mean(c) for s, c in changes.items()}
    best = min(SETTINGS, key=mean.get)
    print("\nmean change of the median time against the shipped setting:")
    for setting in SETTINGS:
        print(f"  {setting}: {mean[setting]:+.2f}%")
    print(f"best: {best}: {mean[best]:+.2f}%")


if __name__ == "__main__":
    main()
