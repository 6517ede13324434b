"""A/B of the softmax backward at wide half-precision rows: warps, grid, plan, and Liger-Kernel.

About two minutes in one process; prints a table and writes nothing else::

    python scripts/softmax_bwd_ab.py > results/<gpu>/checks/softmax-bwd-ab-<UTC stamp>.log

On the H200 the softmax forward+backward at 4096 rows of 28992 and 32000
float16 columns ran 7-10% slower than Liger-Kernel's, whose forward it
matched (``results/h200/checks/softmax-fill-ab-20261207T1308Z.log``): the gap
is the backward. Liger-Kernel's backward holds a row in one block of 32
warps, one program a row; ours holds a row of a full block in
``softmax.FULL_BLOCK_BWD_WARPS`` (8) warps in persistent programs, chosen on
an H100, and walks a narrower row in the looped plan. This times the
backward launcher (``softmax._launch_backward``) alone on fresh ``y`` and
``dy``: the block plan in 8, 16 and 32 warps, each over the persistent grid
and over one program a row (``plans.persistent_programs`` replaced for the
launch), each with its product in float32 and in half precision
(``softmax.BWD_HALF_PRODUCT``, which spills nothing where the float32
product spills), and ``plans.choose_for``'s plan, beside Liger-Kernel's backward
(``liger_kernel.ops.softmax._softmax_backward``), at 1024, 4096 and 16384
rows of 20000 to 32768 float16 columns, aligned and not: CUDA events, a cold
L2, visited in alternating order (six visits of twenty samples), outputs
compared with the float64 reference. Last, per setting, the geometric mean of
its time over Liger-Kernel's, and its largest error against the reference
(the largest absolute difference over the largest absolute value). A
diagnostic for the backward's settings: the site quotes the benchmark
results, never this.
"""

from __future__ import annotations

import math
from collections import defaultdict

import torch
from copy_floor import interleaved_medians, setup

from kernel_portfolio import plans, reference
from kernel_portfolio.bench import timing
from kernel_portfolio.ops import softmax

WIDTHS = (20000, 24576, 28992, 30522, 32000, 32768)
ROWS = (1024, 4096, 16384)
WARPS = (8, 16, 32)
SHIPPED_HALF_PRODUCT = softmax.BWD_HALF_PRODUCT


def _one_program_a_row(n_rows: int, plan: plans.RowPlan, sm_count: int) -> int:
    return n_rows


def _launch(y, dy, dx, plan: plans.RowPlan, per_row: bool, half: bool):
    def run():
        persistent = plans.persistent_programs
        if per_row:
            plans.persistent_programs = _one_program_a_row
        softmax.BWD_HALF_PRODUCT = half
        try:
            softmax._launch_backward(y, dy, dx, plan)
        finally:
            plans.persistent_programs = persistent
            softmax.BWD_HALF_PRODUCT = SHIPPED_HALF_PRODUCT
        return dx

    return run


def _calls(n_rows: int, n_cols: int, errors: dict) -> dict:
    from liger_kernel.ops.softmax import _softmax_backward, calculate_settings

    x = torch.randn(n_rows, n_cols, device="cuda", dtype=torch.float16)
    y = torch.softmax(x.float(), -1).to(x.dtype)
    dy = torch.randn_like(y)
    dx = torch.empty_like(y)
    block, warps = calculate_settings(n_cols)
    auto = plans.choose_for(y)
    calls = {f"auto {auto.kind}": _launch(y, dy, dx, auto, False, SHIPPED_HALF_PRODUCT)}
    for w in WARPS:
        plan = plans.RowPlan("block", 32768, w)
        for half in (False, True):
            for per_row in (False, True):
                name = f"w{w}{' row' * per_row}{' half' * half}"
                calls[name] = _launch(y, dy, dx, plan, per_row, half)
    calls["liger"] = lambda: _softmax_backward(dy, y, block, warps, False)
    want = reference.softmax_backward(y, dy).to(y.device)
    for name, call in calls.items():
        dx.fill_(float("nan"))
        got = call().double()
        err = ((got - want).abs().max() / want.abs().max()).item()
        key = name.split(" ", 1)[0] if name.startswith("auto") else name
        errors[key] = max(errors.get(key, 0.0), err)
        if not err <= 2e-2:
            raise SystemExit(f"{n_rows}x{n_cols} {name}: off the reference by {err:.1e}")
    return calls


def main() -> None:
    flush, _ = setup()
    print(f"{'rows x N':>12}  us of each (backward alone)")
    ratios, errors = defaultdict(list), {}
    for n_rows in ROWS:
        for n_cols in WIDTHS:
            calls = _calls(n_rows, n_cols, errors)
            lead = max(timing.lead_for(call) for call in calls.values())
            med = interleaved_medians(calls, flush, lead)
            cells = "  ".join(f"{k} {v * 1e3:7.1f}" for k, v in med.items())
            print(f"{f'{n_rows}x{n_cols}':>12}  {cells}")
            for name, ms in med.items():
                ratios[name.split(" ", 1)[0] if name.startswith("auto") else name].append(
                    ms / med["liger"]
                )
            torch.cuda.empty_cache()
    print("\neach setting's time over Liger-Kernel's, geometric mean over every cell (< 1: faster)")
    for name, got in ratios.items():
        mean = math.exp(sum(map(math.log, got)) / len(got))
        print(f"  {name:<14} {mean:.3f}, best {min(got):.3f}, worst {max(got):.3f}, "
              f"error {errors[name]:.1e}")  # fmt: skip


if __name__ == "__main__":
    main()
