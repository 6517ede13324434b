"""A/B of the Gluon 128x128 tile where its tiles fill one wave only in part, against the plan.

About a minute in one process; prints a table and writes nothing else::

    python scripts/one_wave_ab.py > results/<gpu>/checks/one-wave-ab-<UTC stamp>.log

``_tma_plan`` takes a tile only where its work items keep ``WAVE_FILL`` (0.8)
of the SMs busy, else it passes on. In the Gluon A/B
(``checks/gluon-ws-ab-20261206T1232Z.log``) the Gluon kernel's 128x128 tile
ran faster than the plan at three shapes where its tiles are 96, one wave
three quarters full (256x6144x4096, 384x4096x4096, 384x4096x14336), and
slower at 256x4096x4096 (64 tiles, half a wave) and at 768x4096x4096 (192
tiles, a second wave half full). This times the plan, the Gluon 128x128
tile forced and cuBLAS at every 32 rows from 160 to 544 of the four layer
shapes, ``B`` row-major and transposed (a linear layer's ``x @ W.T``),
bfloat16, with the tile's count and the share of one wave it fills, to find
which fill of a wave the tile wins at on neighbouring row counts, not at the
suite's cells alone. Each call with a cold L2 behind a device spin, visited
in alternating order (six visits of twenty samples); a speed is the median
over visits of each visit's ratio against cuBLAS (paired). Every output,
poisoned with NaN first, is checked against cuBLAS's.
"""

from __future__ import annotations

import statistics

import torch
from copy_floor import SAMPLES, VISITS, setup

from kernel_portfolio import plans
from kernel_portfolio.bench import timing
from kernel_portfolio.ops import matmul as mm

ROWS = range(160, 545, 32)
LAYERS = ((4096, 4096), (6144, 4096), (14336, 4096), (4096, 14336))
GLUON = mm._TILES_BY_NAME["128x128x64 s6 gluon"]


def main() -> None:
    flush, _ = setup()
    sms = mm._sm_count(0)
    print("bfloat16 forward; speed against cuBLAS (paired median); tiles: the Gluon 128x128")
    print("tile's output tiles, fill: their share of the SMs' time in whole waves")
    print(f"{'shape':>18} {'B':>3} {'tiles':>5} {'fill':>5} {'plan':>24} {'plan':>6} {'gluon':>6}")
    wins = {}
    for m in ROWS:
        for n, k in LAYERS:
            for b_t in (False, True):
                a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
                b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
                b = b.T if b_t else b.T.contiguous()
                ref = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
                plan = mm._tma_plan(m, n, k, sms)
                outs = {name: torch.full_like(ref, float("nan")) for name in ("plan", "gluon")}
                calls = {
                    "cublas": lambda a=a, b=b, ref=ref: torch.matmul(a, b, out=ref),
                    "plan": lambda a=a, b=b, out=outs["plan"], p=plan: mm._launch_matmul(
                        a, b, out, allow_tf32=False, path="tma", plan=p
                    ),
                    "gluon": lambda a=a, b=b, out=outs["gluon"]: mm._launch_matmul(
                        a, b, out, allow_tf32=False, path="tma", plan=mm.TmaPlan(GLUON)
                    ),
                }
                for call in calls.values():
                    call()
                torch.cuda.synchronize()
                for name, out in outs.items():
                    err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
                    if not err < 1e-2:
                        raise SystemExit(f"{m}x{n}x{k} {name}: relative error {err:.3g}")
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
                tiles = plans.cdiv(m, 128) * plans.cdiv(n, 128)
                fill = tiles / (plans.cdiv(tiles, sms) * sms)
                waves = plans.cdiv(tiles, sms)
                key = (waves, round(fill, 1))
                wins.setdefault(key, []).append(speed["gluon"] / speed["plan"])
                print(
                    f"{f'{m}x{n}x{k}':>18} {'W.T' if b_t else 'B':>3} {tiles:>5} {fill:>5.2f} "
                    f"{plan.tile.name:>24} {speed['plan']:>6.3f} {speed['gluon']:>6.3f}",
                    flush=True,
                )
                del a, b, ref, outs, calls
                torch.cuda.empty_cache()
    print("gluon over plan by (waves, fill rounded to 0.1): shapes, median, min, max")
    for (waves, fill), ratios in sorted(wins.items()):
        print(
            f"  {waves} wave(s), fill {fill:.1f}: {len(ratios):>3} shapes, "
            f"{statistics.median(ratios):.3f}, {min(ratios):.3f}, {max(ratios):.3f}"
        )


if __name__ == "__main__":
    main()
