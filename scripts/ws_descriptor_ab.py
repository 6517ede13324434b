"""A/B of the Hopper GEMM kernels' TMA descriptors built in the kernel (shipped) or on the host.

About two minutes in one process; prints a table and writes nothing else::

    python scripts/ws_descriptor_ab.py > results/<gpu>/checks/ws-descriptor-ab-<stamp>.log

With its tiles in one full wave the Gluon kernel trails cuBLAS (1024x4096x4096:
128 tiles of 128x256 at 0.93 of cuBLAS in the suites at fd8cf75), while at
16384x4096x4096 it runs level or ahead: a cost paid once a launch, not once a
tile, which weighs most in the shortest products (the few-row products the
Triton kernel runs: 64x4096x4096 float16 at 0.89). One such cost is the
descriptors: each program of either kernel writes its three (five with a
second accumulator) into global scratch (``tensormap.replace``) and fences the
tensor-map proxy before its first copy, where cuBLAS passes its descriptors as
kernel arguments. This times, at each product's plan (and the Gluon 128x256
tile forced at two products of a short ``K``, where the fixed cost weighs
most), cuBLAS, the shipped launch and the same plan with the descriptors
built on the host (``matmul.HOST_DESCRIPTORS``), ``B`` row-major and
transposed, bfloat16. Each call with a cold L2 behind a device spin, visited
in alternating order (six visits of twenty samples); a speed is the median
over visits of each visit's ratio against cuBLAS (paired). Also the host time
to queue one call of each (the mean of 50 back-to-back calls). Every output,
poisoned with NaN first, is checked against cuBLAS's.
"""

from __future__ import annotations

import statistics
import time

import torch
from copy_floor import SAMPLES, VISITS, setup

from kernel_portfolio.bench import timing
from kernel_portfolio.ops import matmul as mm

SHAPES = (
    (16, 4096, 4096),
    (64, 4096, 4096),
    (64, 14336, 4096),
    (128, 4096, 4096),
    (128, 4096, 14336),
    (256, 6144, 4096),
    (384, 4096, 4096),
    (512, 4096, 4096),
    (768, 6144, 4096),
    (1024, 4096, 4096),
    (1024, 6144, 4096),
    (1024, 14336, 4096),
    (2048, 4096, 4096),
    (4096, 4096, 4096),
    (8192, 8192, 512),
    (8192, 8192, 8192),
    (16384, 4096, 4096),
    (1024, 4096, 64),
    (4096, 4096, 256),
)
FORCED = mm._TILES_BY_NAME["128x256x64 s3 gluon"]


def launcher(a, b, out, plan: mm.TmaPlan, host: bool):
    """A call of the launcher with ``plan``, its descriptors built on the host or not."""

    def call():
        mm.HOST_DESCRIPTORS = host
        mm._launch_matmul(a, b, out, allow_tf32=False, path="tma", plan=plan)

    return call


def host_us(call, reps: int = 50) -> float:
    """Mean host time (us) to queue one call, ``reps`` back to back."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(reps):
        call()
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed / reps * 1e6


def main() -> None:
    flush, _ = setup()
    sms = mm._sm_count(0)
    print("bfloat16 forward; speed against cuBLAS (paired median); host us to queue one call;")
    print("each plan's split-K runs after its tile's name")
    head = f"{'device':>7} {'host':>7} {'dev us':>7} {'host us':>7}"
    print(f"{'shape':>18} {'B':>3} {'tile':>24} {head}")
    for m, n, k in SHAPES:
        for b_t in (False, True):
            a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
            b = b.T if b_t else b.T.contiguous()
            ref = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            plan = mm._tma_plan(m, n, k, sms)
            if k < 512:
                plan = mm.TmaPlan(FORCED)
            outs = {x: torch.full_like(ref, float("nan")) for x in ("device", "host")}
            calls = {"cublas": lambda a=a, b=b, ref=ref: torch.matmul(a, b, out=ref)}
            for x, out in outs.items():
                calls[x] = launcher(a, b, out, plan, host=x == "host")
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
            base = visits["cublas"]
            speed = {
                x: statistics.median(c / o for c, o in zip(base, visits[x], strict=True))
                for x in names
            }
            queue = {x: host_us(calls[x]) for x in ("device", "host")}
            label = f"{plan.tile.name} s{plan.split_k}"
            print(
                f"{f'{m}x{n}x{k}':>18} {'W.T' if b_t else 'B':>3} {label:>24} "
                f"{speed['device']:>7.3f} {speed['host']:>7.3f} "
                f"{queue['device']:>7.1f} {queue['host']:>7.1f}",
                flush=True,
            )
            del a, b, ref, outs, calls
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
