"""A/B of the warps of block-plan forwards on a GPU.

About two minutes in one process; prints a table and writes nothing else::

    python scripts/block_warps_ab.py > results/h200/checks/block-warps-ab-<UTC stamp>.log

``plans.warps_for`` gave a block plan about two 16-byte vectors per thread, but
never fewer than four warps (this A/B removed the floor): a row of 1024 half-
precision columns got one vector per thread, and a 64-warp SM holds 16 such
programs, 32 KiB of loads in flight. Fewer warps per row let more rows in
flight (up to the SM's 32 programs). At 8192 columns the rule's 16 warps hold
16 columns a thread, and ``torch.compile``'s kernels ran faster than ours in
the suite (row sum 16384x8192, RMSNorm 8192x8192 bfloat16). This times the
forwards of softmax, RMSNorm, residual RMSNorm and row sum with explicit block
plans (``RowPlan("block", width, warps)``) at 1024, 2048, 4096 and 8192
float16 columns, and at 8192 also ``LOOPED``, Inductor's structure for such a
reduction: each plan on the same inputs, visited in alternating order (six
visits of twenty samples), each call with a cold L2 and a device spin ahead of
its start event. Outputs are checked against torch. The last lines give, per
shape, the plan with the lowest mean median time over the four operators
against the shipped one. A diagnostic for the performance notes: the site
quotes the benchmark results, never this.
"""

from __future__ import annotations

import statistics

import torch
import torch.nn.functional as F
from ab_support import interleaved_medians, setup

import kernel_portfolio as kp
from kernel_portfolio import plans
from kernel_portfolio.bench import timing

SHAPES = ((32768, 1024), (16384, 2048), (16384, 4096), (16384, 8192), (8192, 8192))
WARPS = (1, 2, 4, 8, 16)
#: Also timed where a row has four of its chunks: what Inductor launches for an
#: inner reduction of that width (torch 2.13: chunks of 2048 columns summed
#: element-wise, one row a program, 16 warps).
LOOPED = plans.RowPlan("looped", 2048, 16)


def _cases(m: int, n: int):
    """``(name, call with a plan, reference call, bytes moved)`` of each forward at ``m x n``."""
    x, r = (torch.randn(m, n, device="cuda", dtype=torch.float16) for _ in range(2))
    w = torch.randn(n, device="cuda", dtype=torch.float16)
    size = x.element_size()
    return [
        ("softmax", lambda p: kp.softmax(x, plan=p), lambda: x.softmax(-1), 2 * m * n * size),
        (
            "rms_norm",
            lambda p: kp.rms_norm(x, w, plan=p),
            lambda: F.rms_norm(x, (n,), w, 1e-6),
            (2 * m * n + n) * size,
        ),
        (
            "residual_rms_norm",
            lambda p: kp.residual_rms_norm(x, r, w, plan=p)[0],
            lambda: F.rms_norm(x + r, (n,), w, 1e-6),
            (4 * m * n + n) * size,
        ),
        ("row_sum", lambda p: kp.row_sum(x, plan=p), lambda: x.sum(-1), (m * n + m) * size),
    ]


def _time(call, ref, options: list, shipped, flush) -> tuple[dict, dict]:
    """Median time (ms) and largest difference from ``ref`` of ``call`` per plan."""
    want = ref().float()
    diffs = {p: (call(p).float() - want).abs().max().item() for p in options}
    lead = timing.lead_for(lambda: call(shipped))
    calls = {p: (lambda p=p: call(p)) for p in options}
    return interleaved_medians(calls, flush, lead), diffs


def _label(plan: plans.RowPlan) -> str:
    return f"{plan.kind}-{plan.block}-w{plan.num_warps}"


def main() -> None:
    flush, copy_gbps = setup("block_warps_ab")
    print(f"\n{'case':<34} {'plan':>17} {'median us':>10} {'% copy':>7} {'max diff':>9}")
    summary = []
    sms = plans.sm_count(torch.device("cuda"))
    for m, n in SHAPES:
        shipped = plans.choose(m, n, elem_bytes=2, sm_count=sms)
        assert shipped.kind == "block", shipped
        options = [
            plans.RowPlan("block", shipped.block, w)
            for w in WARPS
            if w * 32 * 8 <= shipped.block or w == shipped.num_warps
        ]
        if n >= 4 * LOOPED.block:
            options.append(LOOPED)
        changes = {p: [] for p in options}
        for name, call, ref, moved in _cases(m, n):
            medians, diffs = _time(call, ref, options, shipped, flush)
            for p in options:
                pct = 100 * moved / medians[p] / 1e6 / copy_gbps
                label = f"{name} {m}x{n}" + (" (shipped)" if p == shipped else "")
                row = f"{label:<34} {_label(p):>17} {medians[p] * 1e3:>10.1f}"
                print(f"{row} {pct:>6.1f}% {diffs[p]:>9.2e}")
                changes[p].append(medians[p] / medians[shipped] - 1)
        mean = {p: 100 * statistics.mean(c) for p, c in changes.items()}
        best = min(options, key=mean.get)
        summary.append(
            f"{m}x{n}: shipped {_label(shipped)}, best {_label(best)}: {mean[best]:+.2f}%"
        )
        torch.cuda.empty_cache()
    print("\nmean change of the median time against the shipped plan, per shape:")
    print("\n".join(summary))


if __name__ == "__main__":
    main()
