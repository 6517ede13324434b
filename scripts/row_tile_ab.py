"""A/B of several rows a block-plan program (``BLOCK_TILE_BYTES``) on a GPU.

About two minutes in one process; prints a table and writes nothing else::

    python scripts/row_tile_ab.py > results/h200/checks/row-tile-ab-<UTC stamp>.log

A block-plan program of the row sum, and of the softmax forward, takes as many
whole rows as fit in its module's ``BLOCK_TILE_BYTES``
(:func:`kernel_portfolio.plans.block_tile`; 0: one row a program). This times
each operator's ``auto`` plan at the suite's block shapes, and at narrower
rows, with the tile at :data:`TILES` bytes: the same inputs under each
setting, visited in alternating order (six visits of twenty samples), each
call with a cold L2 and a device spin ahead of its start event; the outputs of
the settings are compared with the shipped one's. The share of copy bandwidth
counts the compulsory bytes, as the suite does. The last lines give, per
operator and setting, the mean change of the median time against the shipped
setting. A diagnostic for the performance notes: the site quotes the benchmark
results, never this.
"""

from __future__ import annotations

import statistics

import torch
from ab_support import compare_settings, setup

from kernel_portfolio import plans
from kernel_portfolio.ops import row_sum, softmax

F16, BF16, F32 = torch.float16, torch.bfloat16, torch.float32
TILES = (0, 8192, 16384, 32768)
#: ``(operator, rows, columns, dtype)``
CASES = (
    *(("row_sum", 16384, 8192, d) for d in (F16, BF16, F32)),
    ("row_sum", 16384, 4104, F16),
    *(("row_sum", 32768, 1024, d) for d in (F16, F32)),
    ("row_sum", 16384, 2048, F16),
    ("row_sum", 512, 4096, F16),
    ("row_sum", 32, 127, F16),
    *(("softmax fwd", 32768, 1024, d) for d in (F16, BF16, F32)),
    *(("softmax fwd", 16384, n, F16) for n in (2048, 4096, 4104)),
    *(("softmax fwd", 8192, 8192, d) for d in (F16, F32)),
    ("softmax fwd", 512, 4096, F16),
    ("softmax fwd", 32, 127, F16),
)
MODULES = {"row_sum": row_sum, "softmax fwd": softmax}
#: Row elements each operator must move per element (its compulsory bytes).
MOVED = {"row_sum": 1, "softmax fwd": 2}


def _case(op: str, m: int, n: int, dtype: torch.dtype):
    """``(call, outputs, plan)`` of ``op``'s launcher on fresh random rows."""
    x = torch.randn(m, n, device="cuda", dtype=dtype)
    plan = plans.choose_for(x)
    if op == "row_sum":
        out = torch.empty(m, device="cuda", dtype=dtype)
        return lambda: row_sum._launch_row_sum(x, out, plan), (out,), plan
    y = torch.empty_like(x)
    return lambda: softmax._launch_forward(x, y, plan), (y,), plan


def main() -> None:
    flush, copy_gbps = setup("row_tile_ab")
    shipped = {op: module.BLOCK_TILE_BYTES for op, module in MODULES.items()}
    print(f"\nBLOCK_TILE_BYTES shipped: {shipped}; timed: {TILES}")
    head = f"{'op':<12} {'shape':<12} {'dtype':<9} {'plan':<15} {'tile':>6} {'rows':>4}"
    print(f"{head} {'warps':>5} {'median us':>10} {'% copy':>7} {'max diff':>9}")
    changes = {}
    for op, m, n, dtype in CASES:
        module = MODULES[op]
        call, outs, plan = _case(op, m, n, dtype)
        assert plan.kind == "block", (op, m, n, plan)
        settings = (shipped[op], *(t for t in TILES if t != shipped[op]))
        timed = compare_settings(
            call,
            outs,
            lambda t, mod=module: setattr(mod, "BLOCK_TILE_BYTES", t),
            settings,
            shipped[op],
            flush,
        )
        pieces = sum(plans.block_pieces(n, plan.block))
        for tile in settings:
            median, diff = timed[tile]
            rows, warps = plans.block_tile(pieces, outs[0].element_size(), plan.num_warps, tile)
            pct = 100 * MOVED[op] * m * n * dtype.itemsize / median / 1e6 / copy_gbps
            label = f"{plan.kind}-{plan.block}-w{plan.num_warps}"
            row = f"{op:<12} {f'{m}x{n}':<12} {str(dtype)[6:]:<9} {label:<15} {tile:>6} {rows:>4}"
            print(f"{row} {warps:>5} {median * 1e3:>10.1f} {pct:>6.1f}% {diff:>9.2e}")
            base = timed[shipped[op]][0]
            changes.setdefault((op, tile), []).append(median / base - 1)
        torch.cuda.empty_cache()
    print("\nmean change of the median time against the shipped setting, per operator and tile:")
    for (op, tile), c in changes.items():
        print(f"  {op} {tile}: {100 * statistics.mean(c):+.2f}% (worst {100 * max(c):+.2f}%)")


if __name__ == "__main__":
    main()
