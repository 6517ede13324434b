"""A/B of warp-specialised tiles of two accumulators against unspecialised ones, and cuBLAS.

About a minute in one process; prints a table and writes nothing else::

    python scripts/wide_ws_ab.py > results/<gpu>/checks/wide-ws-ab-<UTC stamp>.log

An Nsight Compute profile (``checks/wide-ncu-20261206T1012Z.log``) found the
warps of the plan's 128-row tiles, those of two accumulators among them,
stalled most at a CTA barrier each ``K`` step, where cuBLAS's producer and
consumer warps do not wait on each other. Triton 3.6 compiles a tile of two
accumulators with ``warp_specialize`` into a producer group and two 4-warp
consumer groups (12 warps). This times, at the models layer shapes where the
plan takes a tile of two accumulators and at two where it could (bfloat16,
``B`` row-major), the plan, those tiles warp-specialised at 3 and 4 stages,
the 128x128 and 128x256 warp-specialised tiles of ``matmul.TMA_TILES``, and
cuBLAS. Each call with a cold L2 behind a device spin, visited in
alternating order (six visits of twenty samples); speeds are the median over
visits of each visit's ratio against cuBLAS (paired). Every output is
checked against cuBLAS's; a tile whose output is wrong is named and not timed.
"""

from __future__ import annotations

import statistics

import torch
from copy_floor import SAMPLES, VISITS, setup

from kernel_portfolio import plans
from kernel_portfolio.bench import timing
from kernel_portfolio.ops import matmul as mm

SHAPES = (
    (256, 6144, 4096),
    (384, 4096, 4096),
    (384, 6144, 4096),
    (384, 4096, 14336),
    (448, 6144, 4096),
    (640, 4096, 4096),
    (768, 4096, 4096),
    (768, 6144, 4096),
    (768, 4096, 14336),
    (1024, 6144, 4096),
)
T = mm.TmaTile
TILES = (
    T(128, 128, 64, 4, 4, block_n2=16),
    T(128, 128, 64, 8, 4, block_n2=64),
    T(128, 128, 64, 4, 4, warp_specialize=True, block_n2=16),
    T(128, 128, 64, 4, 4, warp_specialize=True, block_n2=64),
    T(128, 128, 64, 4, 3, warp_specialize=True, block_n2=64),
    T(128, 128, 64, 4, 4, warp_specialize=True),
    T(128, 256, 64, 4, 3, warp_specialize=True),
)


def _busy(tile: mm.TmaTile, m: int, n: int, split: int, sms: int) -> float:
    items = plans.cdiv(m, tile.block_m) * plans.cdiv(n, tile.tile_n) * split
    return items / (plans.cdiv(items, sms) * sms)


def main() -> None:
    flush, _ = setup()
    sms = mm._sm_count(0)
    print("bfloat16 forward, B row-major; busy: the share of the SMs' time the tiles fill;")
    print("speed against cuBLAS (paired median); <- the fastest")
    for m, n, k in SHAPES:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        ref = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        calls = {"cublas": lambda a=a, b=b, ref=ref: torch.matmul(a, b, out=ref)}
        busy = {}
        outs = {}
        shipped = mm._tma_plan(m, n, k, sms)
        plans_by_label = {f"plan {shipped.tile.name} s{shipped.split_k}": shipped}
        for tile in TILES:
            plans_by_label[tile.name] = mm.TmaPlan(tile)
        for label, plan in plans_by_label.items():
            busy[label] = _busy(plan.tile, m, n, plan.split_k, sms)
            outs[label] = out = torch.full((m, n), float("nan"), device="cuda", dtype=a.dtype)
            calls[label] = lambda a=a, b=b, out=out, plan=plan: mm._launch_matmul(
                a, b, out, allow_tf32=False, path="tma", plan=plan
            )
        for call in calls.values():
            call()
        torch.cuda.synchronize()
        for label, out in outs.items():
            err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
            if not err < 1e-2:  # a wrong tile is named and left out of the timing
                print(f"{m}x{n}x{k} {label}: wrong output, relative error {err:.3g}")
                del calls[label]
        lead = timing.lead_for(calls["cublas"])
        names = list(calls)
        visits = {x: [] for x in names}
        for visit in range(VISITS):
            for x in names if visit % 2 == 0 else names[::-1]:
                t = timing.time_events(calls[x], SAMPLES, flush=flush, lead_ms=lead)
                visits[x].append(statistics.median(t))
        speed = {
            x: statistics.median(c / o for c, o in zip(visits["cublas"], visits[x], strict=True))
            for x in names
        }
        best = max(names[1:], key=speed.get)
        print(f"{m}x{n}x{k}  cuBLAS {statistics.median(visits['cublas']) * 1e3:.1f} us")
        for x in names[1:]:
            mark = "  <-" if x == best else ""
            us = statistics.median(visits[x]) * 1e3
            print(f"    {x:<30} busy {busy[x]:.2f} {us:8.1f} us  {speed[x]:.3f}{mark}")
        del a, b, ref, outs, calls
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
