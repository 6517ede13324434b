"""A/B of the Gluon GEMM tiles with a stage more and their epilogue in halves.

About three minutes in one process; prints a table and writes nothing else::

    python scripts/gluon_stages_ab.py > results/<gpu>/checks/gluon-stages-ab-<stamp>.log

Each consumer warpgroup of the Gluon kernel stores its rows through a shared
buffer of the tile's width (and one more for a second accumulator), which
keeps a stage of operands out of shared memory. With ``epilogue_split=2`` it
stores the accumulator's two halves, then the second accumulator, one after
another through one buffer of half the width, and the stage fits: the
192x192 tile (cuBLAS's at 768x6144) gets four stages instead of three,
128x192 five instead of four, 192x128 five instead of four and 128x256
four instead of three. This times the plan against the same plan with each
of those tiles' twins, beside cuBLAS, at the plan's products that run one of
them (in either part of a column split): every 128 rows from 256 to 4096 of
the four models layer shapes, the rows where the 192x192 tile fills one wave
(672 to 768 of 6144 columns), and the cubes of 2048, 4096 and 8192;
bfloat16, ``B`` row-major and transposed. Each call with a cold L2 behind a
device spin, visited in alternating order (six visits of twenty samples); a
speed is the median over visits of each visit's ratio against cuBLAS
(paired). Every output, poisoned with NaN first, is checked against cuBLAS's.
"""

from __future__ import annotations

import dataclasses
import statistics

import torch
from copy_floor import SAMPLES, VISITS, setup

from kernel_portfolio.bench import timing
from kernel_portfolio.ops import matmul as mm

LAYERS = ((4096, 4096), (6144, 4096), (14336, 4096), (4096, 14336))
ROWS = (*range(256, 4097, 128), 672, 704, 736)
CUBES = (2048, 4096, 8192)
#: The tiles and their stages with the epilogue in halves.
STAGES = {
    "192x128+64x64 s3 gluon": 4,
    "128x128+64x64 s4 gluon": 5,
    "192x128x64 s4 gluon": 5,
    "128x256x64 s3 gluon": 4,
}


def twin(tile: mm.TmaTile) -> mm.TmaTile:
    """The tile's twin with a stage more and its epilogue in halves, or the tile itself."""
    if tile.name not in STAGES:
        return tile
    return dataclasses.replace(tile, stages=STAGES[tile.name], epilogue_split=2)


def with_twins(plan: mm.TmaPlan) -> mm.TmaPlan:
    rest = with_twins(plan.rest) if plan.rest else None
    return dataclasses.replace(plan, tile=twin(plan.tile), rest=rest)


def plan_text(plan: mm.TmaPlan) -> str:
    text = plan.tile.name + (f" k{plan.split_k}" if plan.split_k > 1 else "")
    return text + (f" [{plan.cols}] + {plan_text(plan.rest)}" if plan.rest else "")


def products():
    """(M, N, K, plan): the plan's products that run one of the tiles."""
    sms = mm._sm_count(0)
    shapes = [(m, n, k) for n, k in LAYERS for m in ROWS] + [(c, c, c) for c in CUBES]
    for m, n, k in shapes:
        plan = mm._tma_plan(m, n, k, sms)
        if with_twins(plan) != plan:
            yield m, n, k, plan


def main() -> None:
    flush, _ = setup()
    print("bfloat16 forward; speed against cuBLAS (paired median); gain: paired time ratio")
    print(f"{'shape':>16} {'B':>3} {'plan':>6} {'twins':>6} {'gain':>6}  plan")
    for m, n, k, plan in products():
        for b_t in (False, True):
            a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
            b = b.T if b_t else b.T.contiguous()
            ref = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            calls = {"cublas": lambda a=a, b=b, ref=ref: torch.matmul(a, b, out=ref)}
            outs = {}
            for name, p in (("plan", plan), ("twins", with_twins(plan))):
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
            names = list(calls)
            visits = {x: [] for x in names}
            for visit in range(VISITS):
                for x in names if visit % 2 == 0 else names[::-1]:
                    t = timing.time_events(calls[x], SAMPLES, flush=flush, lead_ms=lead)
                    visits[x].append(statistics.median(t))
            cublas = visits["cublas"]
            speed = {
                x: statistics.median(c / o for c, o in zip(cublas, visits[x], strict=True))
                for x in ("plan", "twins")
            }
            gain = statistics.median(
                p / t for p, t in zip(visits["plan"], visits["twins"], strict=True)
            )
            label = f"{m}x{n}x{k}"
            print(
                f"{label:>16} {'W.T' if b_t else 'B':>3} {speed['plan']:>6.3f} "
                f"{speed['twins']:>6.3f} {gain:>6.3f}  {plan_text(plan)}",
                flush=True,
            )
            del a, b, ref, outs, calls
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
