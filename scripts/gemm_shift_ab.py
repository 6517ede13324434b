"""A/B of the last row of GEMM tiles shifted inside ``A`` (``matmul.SHIFT_ROWS``) or not.

About three minutes in one process; prints a table and writes nothing else::

    python scripts/gemm_shift_ab.py > results/<gpu>/checks/gemm-shift-ab-<stamp>.log

In ``checks/gemm-split-ab-20261207T0828Z.log`` the Gluon 128x128 tile took
half as long again at 288 rows of 4096x14336 as at 384 rows, the same 96
tiles: a last row of tiles mostly past ``M`` ran slower than a full one. With
``SHIFT_ROWS`` the last row of tiles starts at ``M - BLOCK_M`` (where ``M`` is
at least a tile's rows), so that every box of ``A`` lies inside it; the rows
it shares with the row of tiles before are computed twice, the same values.
This run times the few-row class: bfloat16, ``B`` row-major and transposed,
at 24 to 144 rows of the four models layer shapes and 3584x18944 (swapped
tiles of 16 and 32 rows up to 64 rows, 64-row tiles above), the plan and
three tiles forced (Triton 64x128 and 64x64x128, the swapped 32x64), each
shifted and not, beside cuBLAS. Each call with a cold L2 behind a device
spin, visited in alternating order (four visits of fifteen samples); a speed
is the median over visits of each visit's ratio against cuBLAS (paired).
Every output, poisoned with NaN first, is checked against cuBLAS's.
"""

from __future__ import annotations

import math
import statistics

import torch
from copy_floor import setup

from kernel_portfolio.bench import timing
from kernel_portfolio.ops import matmul as mm

VISITS, SAMPLES = 4, 15
LAYERS = ((4096, 4096), (6144, 4096), (14336, 4096), (4096, 14336), (3584, 18944))
ROWS = (24, 40, 48, 56, 72, 80, 96, 112, 128, 136, 144)
TILES = (("t64", "64x128x64 w4 s8"), ("t64k128", "64x64x128 w4 s6"),
         ("s32", "32x64x256 w4 s4 sw"))  # fmt: skip


def main() -> None:
    flush, _ = setup()
    sms = mm._sm_count(0)
    print(f"SMs {sms}; bfloat16 forward; speed against cuBLAS (paired median); us: cuBLAS's")
    print("median time; each plan or tile as it is, then shifted (+s)")
    gains = {}
    under = [0, 0]
    for b_t in (False, True):
        for n, k in LAYERS:
            for m in ROWS:
                torch.manual_seed(m * 7 + n + k + b_t)
                a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
                w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
                b = w.T if b_t else w.reshape(k, n)
                ref = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
                cands = {"plan": mm._tma_plan(m, n, k, sms)}
                for label, name in TILES:
                    tile = mm._TILES_BY_NAME[name]
                    cands[label] = mm.TmaPlan(mm._one_wave(tile, tile.count(m, n), sms))
                calls = {"cublas": lambda a=a, b=b, ref=ref: torch.matmul(a, b, out=ref)}
                calls["cublas"]()
                torch.cuda.synchronize()
                for name, p in cands.items():
                    for shift in (False, True):
                        out = torch.full_like(ref, float("nan"))

                        def call(a=a, b=b, out=out, p=p, shift=shift):
                            mm.SHIFT_ROWS = shift
                            mm._launch_matmul(a, b, out, allow_tf32=False, path="tma", plan=p)

                        call()
                        torch.cuda.synchronize()
                        err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
                        label = name + "+s" * shift
                        if not err < 1e-2:
                            raise SystemExit(f"{m}x{n}x{k} {label}: relative error {err:.3g}")
                        calls[label] = call
                lead = timing.lead_for(calls["cublas"])
                order = list(calls)
                visits = {x: [] for x in order}
                for visit in range(VISITS):
                    for x in order if visit % 2 == 0 else order[::-1]:
                        t = timing.time_events(calls[x], SAMPLES, flush=flush, lead_ms=lead)
                        visits[x].append(statistics.median(t))
                mm.SHIFT_ROWS = False
                cublas = visits["cublas"]
                speed = {
                    x: statistics.median(c / o for c, o in zip(cublas, visits[x], strict=True))
                    for x in order
                    if x != "cublas"
                }
                for name in cands:
                    gains.setdefault(name, []).append(speed[name + "+s"] / speed[name])
                under[0] += speed["plan"] < 0.90
                under[1] += speed["plan+s"] < 0.90
                label = f"{m}x{n}x{k}{' B.T' if b_t else ''}"
                cells = " ".join(f"{x} {speed[x]:.3f}" for x in speed)
                print(
                    f"{label:>21} {statistics.median(cublas) * 1e3:7.1f}  {cells}"
                    f"  [{cands['plan'].tile.name}]",
                    flush=True,
                )
                del a, w, b, ref, calls
                torch.cuda.empty_cache()
    for name, ratios in gains.items():
        gm = math.exp(sum(map(math.log, ratios)) / len(ratios))
        print(
            f"{name}: shifted over as it is, {len(ratios)} products: geometric mean {gm:.3f}, "
            f"min {min(ratios):.3f}, max {max(ratios):.3f}, slower by over 2%: "
            f"{sum(r < 0.98 for r in ratios)}"
        )
    print(f"plan under 0.90 of cuBLAS: as it is {under[0]}, shifted {under[1]}")


if __name__ == "__main__":
    main()
