"""A/B of the softmax's full block against its looped plan at rows that fill 80-95% of it.

About a minute in one process; prints a table and writes nothing else::

    [KP_AB_DTYPE=float32] python scripts/softmax_fill_ab.py \
        > results/<gpu>/checks/softmax-fill-ab-<UTC stamp>.log

``plan_rule.FULL_BLOCK_MIN_FILL`` (15/16) holds a row in one block of 32768
half-precision columns when it fills at least that share of it: the wide-block
A/B found the block faster at 32000 to 32768 columns and slower at 20000 and
24576, and timed nothing between. The held-out scans found the softmax
forward+backward at 28992 columns (88% of the block, looped) behind
Liger-Kernel, which holds the row in one block. This times the softmax
forward and forward+backward launchers (``softmax._launch_forward``,
``_launch_backward``; ``DTYPE``) under ``auto``'s plan and under the full
block (forward in ``FULL_BLOCK_FWD_WARPS``, backward in
``FULL_BLOCK_BWD_WARPS``), beside Liger-Kernel, at 1024, 4096 and 16384 rows
of widths that fill 81-95% of the block (64 KiB: 32768 half-precision
columns, or 16384 of ``KP_AB_DTYPE=float32`` at half the widths), aligned
and not: CUDA events, a
cold L2, visited in alternating order (six visits of twenty samples),
outputs compared with ``auto``'s. Last, per width, the geometric mean of
``auto``'s time over the block's. A diagnostic for the rule's constant: the
site quotes the benchmark results, never this.
"""

from __future__ import annotations

import math
import os
from collections import defaultdict

import torch
from copy_floor import interleaved_medians, setup

from kernel_portfolio import plans
from kernel_portfolio.bench import timing
from kernel_portfolio.ops import softmax

DTYPE = getattr(torch, os.environ.get("KP_AB_DTYPE", "float16"))
BLOCK = 65536 // DTYPE.itemsize
WIDTHS = tuple(n * BLOCK // 32768 for n in (26624, 28000, 28992, 28996, 30000, 30520, 30522, 31000))
ROWS = (1024, 4096, 16384)


def _calls(n_rows: int, n_cols: int) -> dict:
    from liger_kernel.ops.softmax import LigerSoftmaxFunction

    x = torch.randn(n_rows, n_cols, device="cuda", dtype=DTYPE)
    dy = torch.randn_like(x)
    y, dx = torch.empty_like(x), torch.empty_like(x)
    xg = x.clone().requires_grad_()
    auto = plans.choose_for(x)
    fwd_block = plans.RowPlan("block", BLOCK, softmax.FULL_BLOCK_FWD_WARPS)
    bwd_block = plans.RowPlan("block", BLOCK, softmax.FULL_BLOCK_BWD_WARPS)

    def ours(fwd_plan, bwd_plan, backward):
        def run():
            softmax._launch_forward(x, y, fwd_plan)
            if backward:
                softmax._launch_backward(y, dy, dx, bwd_plan)
                return dx
            return y

        return run

    def liger(backward):
        def run():
            if not backward:
                return LigerSoftmaxFunction.apply(x)
            xg.grad = None
            LigerSoftmaxFunction.apply(xg).backward(dy)
            return xg.grad

        return run

    calls = {}
    for mode, backward in (("fwd", False), ("fwdbwd", True)):
        calls[(mode, f"auto {auto.kind}")] = ours(auto, auto, backward)
        calls[(mode, "block")] = ours(fwd_block, bwd_block, backward)
        calls[(mode, "liger")] = liger(backward)
        want = None
        for key in [k for k in calls if k[0] == mode]:
            got = calls[key]().float().clone()
            if want is None:
                want = got
            diff = ((got - want).abs().max() / want.abs().max()).item()
            if not diff <= 2e-2:
                raise SystemExit(f"{n_rows}x{n_cols} {key}: off auto's output by {diff:.1e}")
    return calls


def main() -> None:
    flush, _ = setup()
    print(f"{DTYPE}, block {BLOCK}")
    print(f"{'mode':<7} {'rows x N':>12}  us of each; auto over block, auto over liger")
    gains = defaultdict(list)
    for n_rows in ROWS:
        for n_cols in WIDTHS:
            calls = _calls(n_rows, n_cols)
            lead = max(timing.lead_for(call) for call in calls.values())
            med = interleaved_medians(calls, flush, lead)
            for mode in ("fwd", "fwdbwd"):
                got = {k[1]: v for k, v in med.items() if k[0] == mode}
                auto = next(v for k, v in got.items() if k.startswith("auto"))
                cells = "  ".join(f"{k} {v * 1e3:7.1f}" for k, v in got.items())
                ratio = auto / got["block"]
                print(f"{mode:<7} {f'{n_rows}x{n_cols}':>12}  {cells}  {ratio:.3f} "
                      f"{auto / got['liger']:.3f}")  # fmt: skip
                gains[(mode, n_cols)].append(ratio)
            torch.cuda.empty_cache()
    print("\nauto's time over the block's, geometric mean over the row counts (> 1: block faster)")
    for (mode, n_cols), got in gains.items():
        fill = n_cols / BLOCK
        mean = math.exp(sum(map(math.log, got)) / len(got))
        print(f"  {mode:<7} {n_cols} (fills {fill:.3f}): {mean:.3f}, worst {min(got):.3f}")


if __name__ == "__main__":
    main()
