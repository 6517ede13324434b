"""A/B of the softmax forward block plan's load ``cache_modifier`` on a GPU.

About a minute in one process; prints a table and writes nothing else::

    python scripts/load_cache_ab.py > results/h200/checks/load-cache-ab-<UTC stamp>.log

Liger-Kernel's softmax forward loads its row with ``cache_modifier=".ca"``
(``LDG.E.128.STRONG.SM`` in the SASS for sm_90, where ours is ``LDG.E.128``),
and ran faster than ours at 8192x8192 float16 in the suite. This times the
block-plan forward (:data:`kernel_portfolio.ops.softmax.BLOCK_LOAD_CACHE`) at
the suite's block shapes with each of :data:`MODIFIERS`: the same inputs under
each, visited in alternating order (six visits of twenty samples), each call
with a cold L2 and a device spin ahead of its start event; the outputs are
compared with the shipped setting's. The last lines give the mean change of
the median time per setting against the shipped one. A diagnostic for the
performance notes: the site quotes the benchmark results, never this.
"""

from __future__ import annotations

import statistics

import torch
from ab_support import compare_settings, setup

from kernel_portfolio import plans
from kernel_portfolio.ops import softmax

F16, BF16, F32 = torch.float16, torch.bfloat16, torch.float32
MODIFIERS = ("", ".ca", ".cg")
#: ``(rows, columns, dtype)``
CASES = (
    *((8192, 8192, d) for d in (F16, BF16, F32)),
    (32768, 8192, F16),
    (32768, 1024, F16),
    (16384, 4104, F16),
    (16384, 4096, F16),
)


def main() -> None:
    flush, copy_gbps = setup("load_cache_ab")
    shipped = softmax.BLOCK_LOAD_CACHE
    settings = (shipped, *(c for c in MODIFIERS if c != shipped))
    print(f"\nsoftmax forward, block plan: BLOCK_LOAD_CACHE {shipped!r} shipped")
    head = f"{'shape':<12} {'dtype':<9} {'plan':<15} {'cache':<6}"
    print(f"{head} {'median us':>10} {'% copy':>7} {'max diff':>9}")
    changes = {c: [] for c in settings}
    for m, n, dtype in CASES:
        x = torch.randn(m, n, device="cuda", dtype=dtype)
        y = torch.empty_like(x)
        plan = plans.choose_for(x)
        assert plan.kind == "block", (m, n, plan)
        timed = compare_settings(
            lambda x=x, y=y, plan=plan: softmax._launch_forward(x, y, plan),
            (y,),
            lambda c: setattr(softmax, "BLOCK_LOAD_CACHE", c),
            settings,
            shipped,
            flush,
        )
        for cache in settings:
            median, diff = timed[cache]
            pct = 100 * 2 * m * n * dtype.itemsize / median / 1e6 / copy_gbps
            label = f"{plan.kind}-{plan.block}-w{plan.num_warps}"
            row = f"{f'{m}x{n}':<12} {str(dtype)[6:]:<9} {label:<15} {cache or '-':<6}"
            print(f"{row} {median * 1e3:>10.1f} {pct:>6.1f}% {diff:>9.2e}")
            changes[cache].append(median / timed[shipped][0] - 1)
        torch.cuda.empty_cache()
    print("\nmean change of the median time against the shipped setting:")
    for cache, c in changes.items():
        print(f"  {cache or '-'}: {100 * statistics.mean(c):+.2f}% (worst {100 * max(c):+.2f}%)")


if __name__ == "__main__":
    main()
