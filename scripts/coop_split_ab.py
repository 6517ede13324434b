"""A/B of the softmax split forward as one cooperative launch against its two launches.

About a minute on a GPU in one process; prints a table and writes nothing else::

    python scripts/coop_split_ab.py > results/h200/checks/coop-split-ab-<UTC stamp>.log

Few wide rows take the split plan. Where a program a chunk of
``plan_rule.COOP_CHUNK`` over all rows fits the SMs, ``auto`` picks that chunk
and ``plan_rule.COOP_WARPS``, and the forward runs as one launch whose
programs read their row's others' tagged partials (``softmax._cooperative``);
otherwise a stats launch and a write launch with ``SPLIT_CHUNK``. This times
the shipped plan (``one``) against the plan ``auto`` picks with
``COOP_CHUNK`` set to 0 (``two``: the two launches) with ``torch.softmax``
beside them, as the suite times latency-bound cases: twenty back-to-back calls
captured in a CUDA graph, replayed (warm L2), six visits of twenty replays in
alternating order. Both outputs are checked against the float64 reference. A
diagnostic for the performance notes: the site quotes the benchmark results,
never this.
"""

from __future__ import annotations

import statistics
from unittest.mock import patch

import torch
from ab_support import graph_medians, setup

from kernel_portfolio import plan_rule, plans, reference
from kernel_portfolio.bench.runner import tolerance
from kernel_portfolio.ops import softmax
from kernel_portfolio.reference import rel_error

CASES = [(4, 32769), (1, 65536), (2, 131072), (1, 262144), (6, 20000), (7, 32768)]
DTYPES = (torch.float16, torch.bfloat16)


def main() -> None:
    setup("coop_split_ab")
    print(
        f"\n{'shape':<10} {'dtype':<9} {'one':<18} {'two':<18} {'one':>7} {'two':>7} {'torch':>7}"
        "  us a call"
    )
    changes = []
    for dtype in DTYPES:
        for m, n in CASES:
            x = torch.randn(m, n, device="cuda", dtype=dtype)
            sms = plans.sm_count(x.device)
            one = plans.choose(m, n, elem_bytes=x.element_size(), sm_count=sms)
            with patch.object(plan_rule, "COOP_CHUNK", 0):
                two = plans.choose(m, n, elem_bytes=x.element_size(), sm_count=sms)
            if one == two or not softmax._cooperative(m, one.splits, 1, x.device):
                print(f"{m}x{n:<8} {str(dtype)[6:]:<9} {one}: not cooperative, skipped")
                continue
            outs = {"one": torch.empty_like(x), "two": torch.empty_like(x)}
            calls = {
                name: lambda x=x, y=outs[name], p=p: softmax._launch_forward(x, y, p)
                for name, p in (("one", one), ("two", two))
            }
            calls["torch"] = lambda x=x: torch.softmax(x, -1)
            for call in calls.values():
                call()
            want = reference.softmax(x)
            for y in outs.values():
                assert rel_error(y, want) <= tolerance(want, str(dtype)[6:]), (m, n, dtype)
            us = {name: ms * 1e3 for name, ms in graph_medians(calls).items()}
            print(
                f"{m}x{n:<8} {str(dtype)[6:]:<9} {_name(one):<18} {_name(two):<18}"
                f" {us['one']:>7.2f} {us['two']:>7.2f} {us['torch']:>7.2f}"
                f"  torch/one {us['torch'] / us['one']:.2f}x"
            )
            changes.append(us["one"] / us["two"] - 1)
    print(f"\nmean change, one launch against two: {100 * statistics.mean(changes):+.2f}%")


def _name(plan: plans.RowPlan) -> str:
    return f"split-{plan.block}-w{plan.num_warps}x{plan.splits}"


if __name__ == "__main__":
    main()
