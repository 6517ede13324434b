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
float16 columns, each warp count on the same inputs, visited in alternating
order (six visits of twenty samples), each call with a cold L2 and a device
spin ahead of its start event. Outputs are checked against torch. The last
lines give, per width, the warp count with the lowest mean median time over the
four operators against the shipped count. A diagnostic for the performance
notes: the site quotes the benchmark results, never this.
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


def _time(call, ref, block: int, options: list[int], shipped: int, flush) -> tuple[dict, dict]:
    """Median time (ms) and largest difference from ``ref`` of ``call`` per warp count."""
    plan = {w: plans.RowPlan("block", block, w) for w in options}
    want = ref().float()
    diffs = {w: (call(plan[w]).float() - want).abs().max().item() for w in options}
    lead = timing.lead_for(lambda: call(plan[shipped]))
    calls = {w: (lambda w=w: call(plan[w])) for w in options}
    return interleaved_medians(calls, flush, lead), diffs


def main() -> None:
    flush, copy_gbps = setup("block_warps_ab")
    print(f"\n{'case':<34} {'warps':>5} {'median us':>10} {'% copy':>7} {'max diff':>9}")
    summary = []
    sms = plans.sm_count(torch.device("cuda"))
    for m, n in SHAPES:
        shipped = plans.choose(m, n, elem_bytes=2, sm_count=sms)
        assert shipped.kind == "block", shipped
        options = [w for w in WARPS if w * 32 * 8 <= shipped.block or w == shipped.num_warps]
        changes = {w: [] for w in options}
        for name, call, ref, moved in _cases(m, n):
            medians, diffs = _time(call, ref, shipped.block, options, shipped.num_warps, flush)
            for w in options:
                pct = 100 * moved / medians[w] / 1e6 / copy_gbps
                label = f"{name} {m}x{n}" + (" (shipped)" if w == shipped.num_warps else "")
                row = f"{label:<34} {w:>5} {medians[w] * 1e3:>10.1f}"
                print(f"{row} {pct:>6.1f}% {diffs[w]:>9.2e}")
                changes[w].append(medians[w] / medians[shipped.num_warps] - 1)
        mean = {w: 100 * statistics.mean(c) for w, c in changes.items()}
        best = min(options, key=mean.get)
        summary.append(
            f"{n} columns: shipped {shipped.num_warps} warps, best {best}: {mean[best]:+.2f}%"
        )
        torch.cuda.empty_cache()
    print("\nmean change of the median time against the shipped warps, per width:")
    print("\n".join(summary))


if __name__ == "__main__":
    main()
