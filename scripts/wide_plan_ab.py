"""A/B of the GEMM plan table with its tiles of two accumulators against the table without them.

About a minute in one process; prints a table and writes nothing else::

    python scripts/wide_plan_ab.py > results/<gpu>/checks/wide-plan-ab-<UTC stamp>.log

``gemm_rule.WIDE_TILES_FEW`` and ``WIDE_TILES_MORE`` end the plan table's
rows of 129 to 1024 rows; their order comes from an A/B at 256, 320, 384,
448, 512, 640, 768 and 1024 rows (``checks/wide-tile-ab-20261206T0937Z.log``).
This times the table against the same table without them at other row
counts, wherever the two plan differently, at the models layer shapes: in
bfloat16 and float16 with ``B`` row-major, and in bfloat16 with ``B`` a
transposed view (a linear layer's ``x @ W.T``), beside cuBLAS. Each call with
a cold L2 behind a device spin, visited in alternating order (six visits of
twenty samples); speeds are the median over visits of each visit's ratio
against cuBLAS (paired). Every output is checked against cuBLAS's.
"""

from __future__ import annotations

import dataclasses
import statistics

import torch
from copy_floor import SAMPLES, VISITS, setup

from kernel_portfolio.bench import timing
from kernel_portfolio.ops import gemm_rule
from kernel_portfolio.ops import matmul as mm

ROWS = (160, 200, 288, 352, 416, 544, 576, 704, 832)
LAYERS = ((4096, 4096), (6144, 4096), (14336, 4096), (4096, 14336))
SETTINGS = ((torch.bfloat16, False), (torch.float16, False), (torch.bfloat16, True))
WIDE = (*gemm_rule.WIDE_TILES_FEW, *gemm_rule.WIDE_TILES_MORE)


def _plan(m: int, n: int, k: int, sms: int, rules) -> mm.TmaPlan:
    shipped = gemm_rule.TMA_RULES
    gemm_rule.TMA_RULES = rules
    try:
        return mm._tma_plan(m, n, k, sms)
    finally:
        gemm_rule.TMA_RULES = shipped


def main() -> None:
    flush, _ = setup()
    sms = mm._sm_count(0)
    without = tuple(
        dataclasses.replace(r, tiles=tuple(t for t in r.tiles if t not in WIDE))
        for r in gemm_rule.TMA_RULES
    )
    print("speed against cuBLAS (paired median): the table without the wide tiles, then with")
    for dtype, w_t in SETTINGS:
        print(f"{str(dtype).removeprefix('torch.')}, B {'W.T' if w_t else 'row-major'}")
        for m in ROWS:
            for n, k in LAYERS:
                plans = {
                    "without": _plan(m, n, k, sms, without),
                    "with": _plan(m, n, k, sms, gemm_rule.TMA_RULES),
                }
                if plans["with"] == plans["without"]:
                    print(f"  {m}x{n}x{k}  same plan: {plans['with'].tile.name}")
                    continue
                a = torch.randn(m, k, device="cuda", dtype=dtype)
                b = (
                    torch.randn(n, k, device="cuda", dtype=dtype).T
                    if w_t
                    else torch.randn(k, n, device="cuda", dtype=dtype)
                )
                ref = torch.empty(m, n, device="cuda", dtype=dtype)
                calls = {"cublas": lambda a=a, b=b, ref=ref: torch.matmul(a, b, out=ref)}
                outs = {}
                for label, plan in plans.items():
                    outs[label] = out = torch.full((m, n), float("nan"), device="cuda", dtype=dtype)
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
                print(
                    f"  {m}x{n}x{k}  cuBLAS {statistics.median(visits['cublas']) * 1e3:.1f} us"
                    f"  without {plans['without'].tile.name}: {speed['without']:.3f}"
                    f"  with {plans['with'].tile.name}: {speed['with']:.3f}"
                    f"  ({speed['with'] / speed['without']:.3f}x)"
                )
                del a, b, ref, outs, calls
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
