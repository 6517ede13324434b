"""A/B of the Gluon kernel's three tiles against the plan, by the share of the waves they fill.

About four minutes in one process; prints a table and writes nothing else::

    python scripts/gluon_tiles_ab.py [ROWS ...] > results/<gpu>/checks/gluon-tiles-ab-<stamp>.log

``_tma_plan`` takes a tile only where its work items keep ``WAVE_FILL`` (0.8)
of the SMs busy, else it passes on. In the Gluon A/B
(``checks/gluon-ws-ab-20261206T1232Z.log``) the Gluon kernel's 128x128 tile
ran faster than the plan at three shapes where its tiles fill one wave three
quarters full, and at 1024x14336x4096 (seven waves 97% full) faster than the
128x256 tile the plan takes there (four waves 85% full); cuBLAS runs 384 and
768 rows in tiles of 192 or 96 rows (``checks/wide-ncu-20261206T1012Z.log``).
This times the plan, each Gluon tile forced (128x256, 128x128, 192x128
with three consumer warpgroups, and 192x192 and 128x192 with a second
accumulator of 64 columns beside the first: cuBLAS runs 768x6144 in tiles of
192x192, 128 of them for 132 SMs; 128x144 and 128x96, whose tiles fill one
wave at 384x6144 and 384x4096, and 256x6144) and cuBLAS at every 32 rows from 160 to
1056 and at 1280, 1536, 2048 and 4096 rows of the four layer shapes, ``B``
row-major and transposed (a linear layer's ``x @ W.T``), bfloat16, with each
tile's waves and the share of them its tiles fill, so that a rule can be
read off neighbouring row counts, not the suite's cells alone (row counts
given as arguments replace these). Each call
with a cold L2 behind a device spin, visited in alternating order (six
visits of twenty samples); a speed is the median over visits of each visit's
ratio against cuBLAS (paired). Every output, poisoned with NaN first, is
checked against cuBLAS's.
"""

from __future__ import annotations

import statistics
import sys

import torch
from copy_floor import SAMPLES, VISITS, setup

from kernel_portfolio import plans
from kernel_portfolio.bench import timing
from kernel_portfolio.ops import matmul as mm

ROWS = tuple(map(int, sys.argv[1:])) or (*range(160, 1057, 32), 1280, 1536, 2048, 4096)
LAYERS = ((4096, 4096), (6144, 4096), (14336, 4096), (4096, 14336))
GLUON = {
    "g256": mm._TILES_BY_NAME["128x256x64 s3 gluon"],
    "g128": mm._TILES_BY_NAME["128x128x64 s6 gluon"],
    "g192": mm._TILES_BY_NAME["192x128x64 s4 gluon"],
    "g192w": mm._TILES_BY_NAME["192x128+64x64 s3 gluon"],
    "g128w": mm._TILES_BY_NAME["128x128+64x64 s4 gluon"],
    "g144": mm._TILES_BY_NAME["128x128+16x64 s5 gluon"],
    "g96": mm._TILES_BY_NAME["128x64+32x64 s6 gluon"],
}


def waves_fill(tile: mm.TmaTile, m: int, n: int, sms: int) -> tuple[int, float]:
    """The tile's waves over ``sms`` SMs and the share of them its output tiles fill."""
    tiles = plans.cdiv(m, tile.block_m) * plans.cdiv(n, tile.tile_n)
    waves = plans.cdiv(tiles, sms)
    return waves, tiles / (waves * sms)


def main() -> None:
    flush, _ = setup()
    sms = mm._sm_count(0)
    print("bfloat16 forward; speed against cuBLAS (paired median); for each Gluon tile its")
    print("waves and the share of them its output tiles fill (w/fill)")
    head = "".join(f" {x:>6} {x + ' w/fill':>11}" for x in GLUON)
    print(f"{'shape':>18} {'B':>3} {'plan':>24} {'plan':>6}{head}")
    for m in ROWS:
        for n, k in LAYERS:
            for b_t in (False, True):
                a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
                b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
                b = b.T if b_t else b.T.contiguous()
                ref = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
                plan = mm._tma_plan(m, n, k, sms)
                forced = {"plan": plan, **{x: mm.TmaPlan(t) for x, t in GLUON.items()}}
                outs = {x: torch.full_like(ref, float("nan")) for x in forced}
                calls = {"cublas": lambda a=a, b=b, ref=ref: torch.matmul(a, b, out=ref)}
                for x, p in forced.items():
                    calls[x] = lambda a=a, b=b, out=outs[x], p=p: mm._launch_matmul(
                        a, b, out, allow_tf32=False, path="tma", plan=p
                    )
                for call in calls.values():
                    call()
                torch.cuda.synchronize()
                for x, out in outs.items():
                    err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
                    if not err < 1e-2:
                        raise SystemExit(f"{m}x{n}x{k} {x}: relative error {err:.3g}")
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
                cols = ""
                for x, tile in GLUON.items():
                    waves, fill = waves_fill(tile, m, n, sms)
                    cols += f" {speed[x]:>6.3f} {f'{waves}/{fill:.2f}':>11}"
                print(
                    f"{f'{m}x{n}x{k}':>18} {'W.T' if b_t else 'B':>3} "
                    f"{plan.tile.name + f' s{plan.split_k}':>24} {speed['plan']:>6.3f}{cols}",
                    flush=True,
                )
                del a, b, ref, outs, calls
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
