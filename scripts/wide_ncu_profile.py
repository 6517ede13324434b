"""One profiled launch each of the GEMM plan with and without its wide tiles, and cuBLAS.

Run under Nsight Compute, which profiles only what runs between the
profiler's start and stop (its default cache control flushes the L2 before
each profiled kernel)::

    ncu --clock-control none --profile-from-start off --section SpeedOfLight \\
        --section WarpStateStats --section Occupancy python scripts/wide_ncu_profile.py

At 384x6144x4096 (128x(128+16) tiles against 64x128) and 768x4096x4096
(128x(128+64) against 128x256), bfloat16, ``B`` row-major; each launch is
named on stdout before it runs.
"""

from __future__ import annotations

import dataclasses

import torch

from kernel_portfolio.ops import gemm_rule
from kernel_portfolio.ops import matmul as mm

SHAPES = ((384, 6144, 4096), (768, 4096, 4096))
WIDE = (*gemm_rule.WIDE_TILES_FEW, *gemm_rule.WIDE_TILES_MORE)


def _profile(m: int, n: int, k: int, sms: int, without) -> None:
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    with_wide = mm._tma_plan(m, n, k, sms)
    shipped, gemm_rule.TMA_RULES = gemm_rule.TMA_RULES, without
    plain = mm._tma_plan(m, n, k, sms)
    gemm_rule.TMA_RULES = shipped

    def run(plan):
        return lambda: mm._launch_matmul(a, b, out, allow_tf32=False, path="tma", plan=plan)

    calls = {
        f"plan without wide tiles: {plain.tile.name}": run(plain),
        f"plan: {with_wide.tile.name}": run(with_wide),
        "cuBLAS": lambda: torch.matmul(a, b, out=out),
    }
    for call in calls.values():  # compile and warm up outside the profile
        call()
    torch.cuda.synchronize()
    for label, call in calls.items():
        print(f"PROFILE {m}x{n}x{k} {label}", flush=True)
        torch.cuda.profiler.start()
        call()
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()


def main() -> None:
    sms = mm._sm_count(0)
    without = tuple(
        dataclasses.replace(r, tiles=tuple(t for t in r.tiles if t not in WIDE))
        for r in gemm_rule.TMA_RULES
    )
    for m, n, k in SHAPES:
        _profile(m, n, k, sms, without)


if __name__ == "__main__":
    main()
