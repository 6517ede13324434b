"""A/B of several rows a row-sum block-plan program on a GPU.

About a minute in one process; prints a table and writes nothing else::

    python scripts/row_tile_ab.py > results/h200/checks/row-tile-ab-<UTC stamp>.log

A block-plan program of the row sum takes as many whole rows as fit in
``BLOCK_TILE_BYTES``, at most ``BLOCK_TILE_ROWS``
(:func:`kernel_portfolio.ops.row_sum.block_tile`; a tile of 0: one row a
program). This times the ``auto`` plan at the suite's block shapes and at
narrower rows under each of :data:`SETTINGS`: the same inputs under each, visited in
alternating order (six visits of twenty samples), each call with a cold L2
and a device spin ahead of its start event; the outputs are compared with
the shipped setting's. The share of copy bandwidth counts the compulsory
bytes, as the suite does. The last lines give, per setting, the mean change
of the median time against the shipped one. A diagnostic for the performance
notes: the site quotes the benchmark results, never this.
"""

from __future__ import annotations

import statistics

import torch
from ab_support import compare_settings, setup

from kernel_portfolio import plans
from kernel_portfolio.ops import row_sum

F16, BF16, F32 = torch.float16, torch.bfloat16, torch.float32
#: ``(BLOCK_TILE_BYTES, BLOCK_TILE_ROWS)``
SETTINGS = ((0, 1), (8192, 4), (8192, 64), (16384, 8), (16384, 64))
#: ``(rows, columns, dtype)``
CASES = (
    *((16384, 8192, d) for d in (F16, BF16, F32)),
    (16384, 4104, F16),
    *((32768, 1024, d) for d in (F16, F32)),
    (65536, 512, F16),
    (16384, 2048, F16),
    (4096, 1024, F16),
    (512, 4096, F16),
    (512, 1024, F16),
    (32, 127, F16),
    (4, 1000, F16),
)


def _apply(setting: tuple[int, int]) -> None:
    row_sum.BLOCK_TILE_BYTES, row_sum.BLOCK_TILE_ROWS = setting


def main() -> None:
    flush, copy_gbps = setup("row_tile_ab")
    shipped = (row_sum.BLOCK_TILE_BYTES, row_sum.BLOCK_TILE_ROWS)
    settings = (shipped, *(s for s in SETTINGS if s != shipped))
    print(f"\nrow sum, (BLOCK_TILE_BYTES, BLOCK_TILE_ROWS) {shipped} shipped")
    head = f"{'shape':<12} {'dtype':<9} {'plan':<15} {'tile':>6} {'cap':>4} {'rows':>4}"
    print(f"{head} {'warps':>5} {'median us':>10} {'% copy':>7} {'max diff':>9}")
    changes = {s: [] for s in settings}
    for m, n, dtype in CASES:
        x = torch.randn(m, n, device="cuda", dtype=dtype)
        out = torch.empty(m, device="cuda", dtype=dtype)
        plan = plans.choose_for(x)
        assert plan.kind == "block", (m, n, plan)
        timed = compare_settings(
            lambda x=x, out=out, plan=plan: row_sum._launch_row_sum(x, out, plan),
            (out,),
            _apply,
            settings,
            shipped,
            flush,
        )
        pieces = sum(plans.block_pieces(n, plan.block))
        for setting in settings:
            median, diff = timed[setting]
            _apply(setting)
            rows, warps = row_sum.block_tile(pieces, x.element_size(), plan.num_warps)
            pct = 100 * m * n * x.element_size() / median / 1e6 / copy_gbps
            label = f"{plan.kind}-{plan.block}-w{plan.num_warps}"
            row = f"{f'{m}x{n}':<12} {str(dtype)[6:]:<9} {label:<15} {setting[0]:>6}"
            row += f" {setting[1]:>4} {rows:>4} {warps:>5}"
            print(f"{row} {median * 1e3:>10.2f} {pct:>6.1f}% {diff:>9.2e}")
            changes[setting].append(median / timed[shipped][0] - 1)
        _apply(shipped)
        torch.cuda.empty_cache()
    print("\nmean change of the median time against the shipped setting:")
    for setting, c in changes.items():
        print(f"  {setting}: {100 * statistics.mean(c):+.2f}% (worst {100 * max(c):+.2f}%)")


if __name__ == "__main__":
    main()
