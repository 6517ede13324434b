"""A/B of the Gluon GEMM tiles of two accumulators with ``A`` read from shared memory or registers.

About two minutes in one process; prints a table and writes nothing else::

    python scripts/a_regs_ab.py > results/<gpu>/checks/a-regs-ab-<stamp>.log

A consumer warpgroup of a tile of two accumulators (``matmul.TmaTile.block_n2``)
runs two wgmma a ``K`` step on the same rows of ``A``, each reading them from
shared memory. With ``A_REGS`` it loads them into registers once a step
(``ldmatrix``) and both wgmma take them from there. This times the plan
against the same plan with each such tile's ``a_regs`` twin, beside cuBLAS,
at every 32 rows from 128 to 4096 of the four models layer shapes where the
plan runs such a tile (in either part of a column split), bfloat16, ``B``
row-major and transposed, and each of the three tiles forced at three
products of one and of several waves. Each call with a cold L2 behind a
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
ROWS = range(128, 4097, 32)
FORCED = ((768, 6144, 4096), (1536, 6144, 4096), (4096, 4096, 4096))


def twin(tile: mm.TmaTile) -> mm.TmaTile:
    """The tile's twin that reads ``A`` from registers, or the tile itself."""
    return dataclasses.replace(tile, a_regs=True) if tile.gluon and tile.block_n2 else tile


def with_twins(plan: mm.TmaPlan) -> mm.TmaPlan:
    rest = with_twins(plan.rest) if plan.rest else None
    return dataclasses.replace(plan, tile=twin(plan.tile), rest=rest)


def plan_text(plan: mm.TmaPlan) -> str:
    text = plan.tile.name + (f" k{plan.split_k}" if plan.split_k > 1 else "")
    return text + (f" [{plan.cols}] + {plan_text(plan.rest)}" if plan.rest else "")


def products():
    """(kind, M, N, K, plan): the plan's products with a tile of two accumulators, then forced."""
    sms = mm._sm_count(0)
    for n, k in LAYERS:
        for m in ROWS:
            plan = mm._tma_plan(m, n, k, sms)
            if with_twins(plan) != plan:
                yield "plan", m, n, k, plan
    for m, n, k in FORCED:
        for tile in mm.TMA_TILES:
            if twin(tile) != tile and not tile.a_regs:
                yield "forced", m, n, k, mm.TmaPlan(tile)


def main() -> None:
    flush, _ = setup()
    print("bfloat16 forward; speed against cuBLAS (paired median); regs/smem: paired time ratio")
    print(f"{'':>6} {'shape':>16} {'B':>3} {'smem':>6} {'regs':>6} {'smem/regs':>9}  plan")
    for kind, m, n, k, plan in products():
        for b_t in (False, True):
            a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
            b = b.T if b_t else b.T.contiguous()
            ref = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            calls = {"cublas": lambda a=a, b=b, ref=ref: torch.matmul(a, b, out=ref)}
            outs = {}
            for name, p in (("smem", plan), ("regs", with_twins(plan))):
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
                for x in ("smem", "regs")
            }
            gain = statistics.median(
                s / r for s, r in zip(visits["smem"], visits["regs"], strict=True)
            )
            label = f"{m}x{n}x{k}"
            print(
                f"{kind:>6} {label:>16} {'W.T' if b_t else 'B':>3} {speed['smem']:>6.3f} "
                f"{speed['regs']:>6.3f} {gain:>9.3f}  {plan_text(plan)}",
                flush=True,
            )
            del a, b, ref, outs, calls
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
