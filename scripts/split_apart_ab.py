"""A/B of split-K with its partials added by a second kernel, against the GEMM plan and cuBLAS.

About a minute in one process; prints a table and writes nothing else::

    python scripts/split_apart_ab.py > results/<gpu>/checks/split-apart-ab-<UTC stamp>.log

The shipped split-K adds a tile's partials in the GEMM kernel itself: the
run that counts in last reads the others' (an atomic counter, a branch and
a loop in the epilogue). Compiled for sm_90a, that epilogue and the runs'
item-dependent ``K`` bounds keep Triton 3.6 from fusing the tile loop with
the ``K`` loop, so every work item fills and drains its pipeline. With the
partials only stored (``matmul.REDUCE_APART``: runs of one length, a
separate ``_split_reduce_kernel`` adding them in run order after the GEMM),
the loops fuse and pipeline as the unsplit kernel's do. This times, at the
models layer shapes of 256 to 1024 rows (bfloat16, ``B`` row-major), the
shipped plan, cuBLAS, and three tiles split in 2, 3 and 4 runs with the
partials added apart, plus the shipped in-kernel split of the 128x256 tile
in 3 runs. Each call with a cold L2 behind a device spin, visited in
alternating order (six visits of twenty samples); speeds are the median over
visits of each visit's ratio against cuBLAS (paired). Every output is
checked against cuBLAS's.
"""

from __future__ import annotations

import statistics

import torch
from copy_floor import SAMPLES, VISITS, setup

from kernel_portfolio.bench import timing
from kernel_portfolio.ops import matmul as mm

ROWS = (256, 384, 512, 768, 1024)
LAYERS = ((4096, 4096), (6144, 4096), (14336, 4096), (4096, 14336))
TILES = ("128x128x64 w4 s4", "64x128x64 w4 s8")
SPLITS = (2, 3, 4)


def _call(a, b, out, plan, apart: bool):
    def run():
        mm.REDUCE_APART = apart
        mm._launch_matmul(a, b, out, allow_tf32=False, path="tma", plan=plan)

    return run


def main() -> None:
    flush, _ = setup()
    print("bfloat16 forward, B row-major; speed against cuBLAS (paired median); the best apart")
    for m in ROWS:
        for n, k in LAYERS:
            a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
            ref = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            calls = {"cublas": lambda a=a, b=b, ref=ref: torch.matmul(a, b, out=ref)}
            outs = {}
            shipped = mm._tma_plan(m, n, k, mm._sm_count(0))
            settings = {f"plan {shipped.tile.name} s{shipped.split_k}": (None, False)}
            big = mm._TILES_BY_NAME["128x256x64 w8 s4 e2"]
            settings[f"{big.name} s3 in-kernel"] = (mm.TmaPlan(big, 3), False)
            for name in TILES:
                for s in SPLITS:
                    settings[f"{name} s{s} apart"] = (mm.TmaPlan(mm._TILES_BY_NAME[name], s), True)
            for label, (plan, apart) in settings.items():
                outs[label] = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
                calls[label] = _call(a, b, outs[label], plan, apart)
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
            mm.REDUCE_APART = False
            speed = {
                x: statistics.median(
                    c / o for c, o in zip(visits["cublas"], visits[x], strict=True)
                )
                for x in names
            }
            cublas_us = statistics.median(visits["cublas"]) * 1e3
            best = max((x for x in names if x.endswith("apart")), key=speed.get)
            print(f"{m}x{n}x{k}  cuBLAS {cublas_us:.1f} us")
            for x in names[1:]:
                mark = "  <- best apart" if x == best else ""
                us = statistics.median(visits[x]) * 1e3
                print(f"    {x:<32} {us:8.1f} us  {speed[x]:.3f}{mark}")
            del a, b, ref, outs, calls
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
