"""A/B of the softmax split forward as one cooperative launch against its two launches.

About a minute on a GPU in one process; prints a table and writes nothing else::

    python scripts/coop_split_ab.py > results/h200/checks/coop-split-ab-<UTC stamp>.log

Few wide rows take the split plan. Where a program a chunk of
``plan_rule.COOP_CHUNK`` over all rows fits the SMs, ``auto`` picks that chunk
and ``plan_rule.COOP_WARPS``, and the forward runs as one launch whose
programs read their row's others' tagged partials (``softmax._cooperative``);
otherwise a stats launch and a write launch with ``SPLIT_CHUNK``. This times
the shipped plan and the cooperative chunks of ``CHUNKS`` (``one``; ``one-32``
the same polling 32 words at a time, ``softmax._coop_slots`` patched) against
the plan ``auto`` picks with ``COOP_CHUNK`` set to 0 (``two``: the two
launches) with ``torch.softmax`` beside them, as the suite times
latency-bound cases: twenty back-to-back calls captured in a CUDA graph,
replayed (warm L2), six visits of twenty replays in alternating order.
Every output is checked against the float64 reference. A diagnostic for the
performance notes: the site quotes the benchmark results, never this.
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
#: (columns, warps) of the cooperative chunks timed beside ``auto``'s.
CHUNKS = ((2048, 8), (4096, 16))


def main() -> None:
    setup("coop_split_ab")
    print(
        f"\n{'shape':<10} {'dtype':<9} {'one':<18} {'slots':>5} {'one':>7} {'one-32':>7}"
        f" {'two':>7} {'torch':>7}  us a call"
    )
    changes, wide = [], []
    for dtype in DTYPES:
        for m, n in CASES:
            x = torch.randn(m, n, device="cuda", dtype=dtype)
            sms = plans.sm_count(x.device)
            with patch.object(plan_rule, "COOP_CHUNK", 0):
                two = plans.choose(m, n, elem_bytes=x.element_size(), sm_count=sms)
            ones = [plans.choose(m, n, elem_bytes=x.element_size(), sm_count=sms)]
            ones += [plans.RowPlan("split", b, w, plans.cdiv(n, b)) for b, w in CHUNKS]
            ones = [p for p in dict.fromkeys(ones) if p.kind == "split" and p != two]
            ones = [p for p in ones if softmax._cooperative(m, p.splits, 1, x.device)]
            if not ones:
                print(f"{m}x{n:<8} {str(dtype)[6:]:<9} not cooperative, skipped")
                continue
            want = reference.softmax(x)
            calls = {"two": _call(x, two, want), "torch": lambda x=x: torch.softmax(x, -1)}
            for p in ones:
                calls[p] = _call(x, p, want)
                with patch.object(softmax, "_coop_slots", lambda _n: softmax.COOP_SLOTS):
                    calls[p, 32] = _call(x, p, want)
            us = {name: ms * 1e3 for name, ms in graph_medians(calls).items()}
            for p in ones:
                print(
                    f"{m}x{n:<8} {str(dtype)[6:]:<9} {_name(p):<18}"
                    f" {softmax._coop_slots(p.splits):>5} {us[p]:>7.2f} {us[p, 32]:>7.2f}"
                    f" {us['two']:>7.2f} {us['torch']:>7.2f}  torch/one {us['torch'] / us[p]:.2f}x"
                )
                changes.append(us[p] / us["two"] - 1)
                if p.splits > softmax.COOP_SLOTS:
                    wide.append(us[p] / us[p, 32] - 1)
    print(f"\nmean change, one launch against two: {100 * statistics.mean(changes):+.2f}%")
    if wide:
        mean = 100 * statistics.mean(wide)
        print(f"mean change past 32 programs a row, every slot at once against 32: {mean:+.2f}%")


def _call(x: torch.Tensor, plan: plans.RowPlan, want: torch.Tensor):
    """A call of the forward launcher under ``plan`` into its own output, checked once.

    ``softmax._coop_slots`` is read when the call is made: patched around
    :func:`_call`, the check runs with the patch, but the graph captured later
    would not; so the call binds the slots it was made with.
    """
    y = torch.empty_like(x)
    slots = softmax._coop_slots

    def call():
        with patch.object(softmax, "_coop_slots", slots):
            softmax._launch_forward(x, y, plan)

    call()
    assert rel_error(y, want) <= tolerance(want, str(x.dtype)[6:]), (x.shape, x.dtype, plan)
    return call


def _name(plan: plans.RowPlan) -> str:
    return f"split-{plan.block}-w{plan.num_warps}x{plan.splits}"


if __name__ == "__main__":
    main()
