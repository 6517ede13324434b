"""A/B of the looped row sum's chunk, warps and chunks a step at wide rows, against torch.sum.

About a minute in one process; prints a table and writes nothing else::

    python scripts/row_sum_wide_ab.py > results/<gpu>/checks/row-sum-wide-ab-<UTC stamp>.log

The held-out scan (``../archive/h100-80gb-hbm3/heldout-20261207T104736Z.json``)
found the float16 row sum at 4096 rows of 119547 columns and wider a few
percent behind ``torch.sum``, which read them at about the copy bandwidth.
Those rows take the looped plan: persistent programs, each walking a row in
chunks of 16384 columns over 16 warps, one chunk a step. This times the
launcher (``row_sum._launch_row_sum``) under that plan and under narrower
chunks, fewer warps (more programs an SM) and two chunks a step
(``row_sum.LOOPED_STEP``), beside ``torch.sum``, at 1024, 4096 and 16384 rows
of 50257 to 256000 columns: CUDA events, a cold L2, the settings visited in
alternating order (six visits of twenty samples), every output compared with
the float64 sum. The share of copy bandwidth counts the bytes of ``x`` read.
A diagnostic for a plan rule: the site quotes the benchmark results, never
this.
"""

from __future__ import annotations

import torch
from copy_floor import interleaved_medians, setup

from kernel_portfolio import plans
from kernel_portfolio.bench import timing
from kernel_portfolio.ops import row_sum

ROWS = (1024, 4096, 16384)
WIDTHS = (50257, 65024, 100277, 119547, 151936, 256000)
#: (chunk columns, warps, chunks a step): the shipped plan first.
SETTINGS = ((16384, 16, 1), (16384, 16, 2), (8192, 8, 1), (8192, 8, 2), (8192, 16, 2))


def _call(x: torch.Tensor, out: torch.Tensor, block: int, warps: int, step: int):
    plan = plans.RowPlan("looped", block, warps)

    def run():
        row_sum.LOOPED_STEP = step
        row_sum._launch_row_sum(x, out, plan)

    return run


def main() -> None:
    flush, copy_gbps = setup()
    print(f"{'rows x cols':>14} {'setting':>16} {'us':>9} {'/shipped':>9} {'%copy':>7}")
    for m in ROWS:
        for n in WIDTHS:
            x = torch.randn(m, n, device="cuda", dtype=torch.float16)
            ref = x.double().sum(-1)
            calls, outs = {}, {}
            for block, warps, step in SETTINGS:
                out = torch.full((m,), float("nan"), device="cuda", dtype=torch.float16)
                call = _call(x, out, block, warps, step)
                call()
                err = ((out.double() - ref).abs() / ref.abs().clamp_min(1.0)).max().item()
                if not err < 1e-2:
                    raise SystemExit(f"{m}x{n} {block}/{warps}/{step}: error {err:.1e}")
                calls[f"{block} w{warps} s{step}"] = call
                outs[f"{block} w{warps} s{step}"] = out
            calls["torch.sum"] = lambda x=x: x.sum(-1)
            lead = max(timing.lead_for(c) for c in calls.values())
            med = interleaved_medians(calls, flush, lead)
            shipped = med[next(iter(med))]
            for name, ms in med.items():
                pct = 100 * m * n * 2 / (ms * 1e-3) / 1e9 / copy_gbps
                ratio = ms / shipped
                print(f"{f'{m}x{n}':>14} {name:>16} {ms * 1e3:>9.1f} {ratio:>9.3f} {pct:>6.1f}%")
            del x, calls, outs
            torch.cuda.empty_cache()
    row_sum.LOOPED_STEP = 1


if __name__ == "__main__":
    main()
