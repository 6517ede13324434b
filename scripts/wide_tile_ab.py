"""A/B of output tiles of two accumulators side by side in ``N``, against the GEMM plan and cuBLAS.

About two minutes in one process; prints a table and writes nothing else::

    python scripts/wide_tile_ab.py > results/<gpu>/checks/wide-tile-ab-<UTC stamp>.log

Triton's tiles are powers of two, so at a few hundred rows no tile of the
plan table fills the 132 SMs in whole waves: a 384 x 6144 output is 72
tiles of 128x256 (one wave, 55% busy) or 144 of 128x128 (two, the second
9% full). A tile of ``block_n + block_n2`` columns (``matmul.TmaTile.block_n2``:
two float32 accumulators sharing the tile of ``A``, each a product with its
own slice of ``B``) steps ``N`` by a width that is not a power of two:
128x(128+16) covers 384 x 6144 in 129 tiles. This times, at the models
layer shapes of 256 to 1024 rows (bfloat16, ``B`` row-major), the shipped
plan, cuBLAS and such tiles, each with the fraction of the SMs' time its
tiles keep busy. Each call with a cold L2 behind a device spin, visited in
alternating order (six visits of twenty samples); speeds are the median over
visits of each visit's ratio against cuBLAS (paired). Every output is
checked against cuBLAS's. Such a tile runs its tile and ``K`` loops apart
(``FLATTEN`` off): fused, ptxas serialised its wgmma instructions (warning
C7515), and a first run at 82fbdd2 timed them that way.
"""

from __future__ import annotations

import statistics

import torch
from copy_floor import SAMPLES, VISITS, setup

from kernel_portfolio import plans
from kernel_portfolio.bench import timing
from kernel_portfolio.ops import matmul as mm

ROWS = (256, 320, 384, 448, 512, 640, 768, 1024)
LAYERS = ((4096, 4096), (6144, 4096), (14336, 4096), (4096, 14336))
T = mm.TmaTile
TILES = (
    T(128, 128, 64, 8, 4, block_n2=16),
    T(128, 128, 64, 4, 4, block_n2=16),
    T(128, 128, 64, 8, 4, block_n2=32),
    T(128, 128, 64, 8, 4, block_n2=64),
    T(128, 64, 64, 4, 5, block_n2=32),
    T(64, 128, 64, 4, 6, block_n2=64),
    T(64, 64, 64, 4, 8, block_n2=32),
)


def _busy(tile: mm.TmaTile, m: int, n: int, split: int, sms: int) -> float:
    items = plans.cdiv(m, tile.block_m) * plans.cdiv(n, tile.tile_n) * split
    return items / (plans.cdiv(items, sms) * sms)


def main() -> None:
    flush, _ = setup()
    sms = mm._sm_count(0)
    print("bfloat16 forward, B row-major; busy: the share of the SMs' time the tiles fill;")
    print("speed against cuBLAS (paired median); <- the fastest")
    for m in ROWS:
        for n, k in LAYERS:
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
                if not err < 1e-2:
                    raise SystemExit(f"{m}x{n}x{k} {label}: relative error {err:.3g}")
            lead = timing.lead_for(calls["cublas"])
            names = list(calls)
            visits = {x: [] for x in names}
            for visit in range(VISITS):
                for x in names if visit % 2 == 0 else names[::-1]:
                    t = timing.time_events(calls[x], SAMPLES, flush=flush, lead_ms=lead)
                    visits[x].append(statistics.median(t))
            speed = {
                x: statistics.median(
                    c / o for c, o in zip(visits["cublas"], visits[x], strict=True)
                )
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
