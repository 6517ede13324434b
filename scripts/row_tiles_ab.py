"""A/B of the Gluon tiles at row counts that are no multiple of their rows (M against tiles).

About three minutes in one process; prints a table and writes nothing else::

    python scripts/row_tiles_ab.py > results/<gpu>/checks/row-tiles-ab-<stamp>.log

At 640 x 4096 the plan's 192x128 tiles fill one wave (128 tiles) but a sixth
of their rows lie past ``M``; 128x160 tiles (128 + 32 columns) would fill it
(130 tiles) with almost none. This times, at every 64 rows from 320 to 2048
of the four models layer shapes, bfloat16, ``B`` row-major, the plan and each
of eight Gluon tiles forced over the whole product (its one-wave form where
its tiles fit one wave, ``matmul._one_wave``), two of them new (128x160 and
192x160, a second accumulator of 32 columns), beside cuBLAS, with each
tile's share of the SMs' time spent on output elements inside the product
(``M x N`` over its waves' slots times its tile's area). Each call with a
cold L2 behind a device spin, visited in alternating order (six visits of
twenty samples); a speed is the median over visits of each visit's ratio
against cuBLAS (paired). Every output, poisoned with NaN first, is checked
against cuBLAS's.
"""

from __future__ import annotations

import statistics

import torch
from copy_floor import SAMPLES, VISITS, setup

from kernel_portfolio.bench import timing
from kernel_portfolio.ops import matmul as mm

LAYERS = ((4096, 4096), (6144, 4096), (14336, 4096), (4096, 14336))
ROWS = range(320, 2049, 64)
TILES = (
    *(
        mm._TILES_BY_NAME[name]
        for name in (
            "128x256x64 s3 gluon",
            "192x128x64 s4 gluon",
            "128x128x64 s6 gluon",
            "128x128+64x64 s4 gluon",
            "192x128+64x64 s3 gluon",
            "128x128+16x64 s5 gluon",
        )
    ),
    mm.TmaTile(128, 128, 64, 4, 5, block_n2=32, gluon=True),
    mm.TmaTile(192, 128, 64, 4, 3, block_n2=32, gluon=True),
)


def plan_text(plan: mm.TmaPlan) -> str:
    text = plan.tile.name + (f" k{plan.split_k}" if plan.split_k > 1 else "")
    return text + (f" [{plan.cols}] + {plan_text(plan.rest)}" if plan.rest else "")


def short(tile: mm.TmaTile) -> str:
    return f"{tile.block_m}x{tile.tile_n}"


def busy(tile: mm.TmaTile, m: int, n: int, sms: int) -> float:
    """Share of the waves' slots spent on output elements inside the product."""
    slots = -(-tile.count(m, n) // sms) * sms
    return m * n / (slots * tile.block_m * tile.tile_n)


def main() -> None:
    flush, _ = setup()
    sms = mm._sm_count(0)
    print("bfloat16 forward, B row-major; speed against cuBLAS (paired median) of the plan and")
    print("of each tile forced (one-wave form where one wave); busy: its slots' share in M x N")
    names = [short(t) for t in TILES]
    print(f"{'shape':>16} {'plan':>6} " + " ".join(f"{x:>7}" for x in names) + "  plan")
    print(f"{'busy':>23} " + " ".join(f"{'':>7}" for _ in names))
    for n, k in LAYERS:
        for m in ROWS:
            plan = mm._tma_plan(m, n, k, sms)
            a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
            ref = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            calls = {"cublas": lambda a=a, b=b, ref=ref: torch.matmul(a, b, out=ref)}
            plans = {"plan": plan}
            for tile in TILES:
                plans[short(tile)] = mm.TmaPlan(mm._one_wave(tile, tile.count(m, n), sms))
            outs = {}
            for name, p in plans.items():
                out = outs[name] = torch.full_like(ref, float("nan"))
                calls[name] = lambda a=a, b=b, out=out, p=p: mm._launch_matmul(
                    a, b, out, allow_tf32=False, path="tma", plan=p
                )
            for call in calls.values():
                call()
            torch.cuda.synchronize()
            for name, out in outs.items():
                err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
                if not err < 1e-2:
                    raise SystemExit(f"{m}x{n}x{k} {name}: relative error {err:.3g}")
            lead = timing.lead_for(calls["cublas"])
            order = list(calls)
            visits = {x: [] for x in order}
            for visit in range(VISITS):
                for x in order if visit % 2 == 0 else order[::-1]:
                    t = timing.time_events(calls[x], SAMPLES, flush=flush, lead_ms=lead)
                    visits[x].append(statistics.median(t))
            cublas = visits["cublas"]
            speed = {
                x: statistics.median(c / o for c, o in zip(cublas, visits[x], strict=True))
                for x in plans
            }
            label = f"{m}x{n}x{k}"
            row = " ".join(f"{speed[x]:>7.3f}" for x in names)
            print(f"{label:>16} {speed['plan']:>6.3f} {row}  {plan_text(plan)}", flush=True)
            fills = " ".join(f"{busy(t, m, n, sms):>7.2f}" for t in TILES)
            print(f"{'busy':>23} {fills}", flush=True)
            del a, b, ref, outs, calls
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
