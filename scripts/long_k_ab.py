"""A/B of Hopper GEMM tiles at a few hundred rows and a long ``K``.

About a minute in one process; prints a table and writes nothing else::

    python scripts/long_k_ab.py > results/<gpu>/checks/long-k-ab-<stamp>.log

In the suites at 0e37a1e (descriptors built on the host) the plan's 64x128x64
tile (eight stages) ran 256x4096x14336 at 0.88 of cuBLAS, where the suite
before had 0.96, and the same tile rose at 256x4096x4096 (0.96 to 1.01). This
times that tile and seven others forced, beside cuBLAS, at 192 and 256 rows
of the down projection (4096x14336) and of 4096x4096, bfloat16, ``B``
row-major and transposed. Each call with a cold L2 behind a device spin,
visited in alternating order (six visits of twenty samples); a speed is the
median over visits of each visit's ratio against cuBLAS (paired). Every
output, poisoned with NaN first, is checked against cuBLAS's.
"""

from __future__ import annotations

import statistics

import torch
from copy_floor import SAMPLES, VISITS, setup

from kernel_portfolio.bench import timing
from kernel_portfolio.ops import matmul as mm

SHAPES = ((256, 4096, 14336), (192, 4096, 14336), (256, 4096, 4096), (192, 4096, 4096))
TILES = (
    "64x128x64 w4 s8",
    "64x128x64 w4 s8 sw",
    "64x64x128 w4 s6",
    "64x128x128 w4 s4",
    "64x256x64 w4 s4",
    "64x128+64x64 w4 s6",
    "128x128x64 s6 gluon",
    "128x128+16x64 s5 gluon",
)


def main() -> None:
    flush, _ = setup()
    sms = mm._sm_count(0)
    print("bfloat16 forward; speed against cuBLAS (paired median); * marks the plan's tile")
    print(f"{'shape':>16} {'B':>3} " + " ".join(f"{t:>22}" for t in TILES))
    for m, n, k in SHAPES:
        plan = mm._tma_plan(m, n, k, sms).tile.name
        for b_t in (False, True):
            a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
            b = b.T if b_t else b.T.contiguous()
            ref = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            calls = {"cublas": lambda a=a, b=b, ref=ref: torch.matmul(a, b, out=ref)}
            outs = {}
            for name in TILES:
                out = outs[name] = torch.full_like(ref, float("nan"))
                tile_plan = mm.TmaPlan(mm._TILES_BY_NAME[name])
                calls[name] = lambda a=a, b=b, out=out, p=tile_plan: mm._launch_matmul(
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
            base = visits["cublas"]
            cells = []
            for name in TILES:
                speed = statistics.median(c / o for c, o in zip(base, visits[name], strict=True))
                cells.append(f"{speed:>21.3f}{'*' if name == plan else ' '}")
            label = f"{m}x{n}x{k}"
            print(f"{label:>16} {'W.T' if b_t else 'B':>3} " + " ".join(cells), flush=True)
            del a, b, ref, outs, calls
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
