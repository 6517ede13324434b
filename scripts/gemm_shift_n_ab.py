"""A/B of the last column of GEMM tiles shifted inside ``B`` (``matmul.SHIFT_COLUMNS``) or not.

About two minutes in one process; prints a table and writes nothing else::

    python scripts/gemm_shift_n_ab.py > results/<gpu>/checks/gemm-shift-n-ab-<stamp>.log

A last row of tiles mostly past ``M`` ran far slower than a full one, and
starting it at ``M - BLOCK_M`` fixed that
(``checks/gemm-shift-ab-20261207T0838Z.log``). Tiles of 144 and 192 columns
leave a last column of tiles partly past ``N`` at widths of a multiple of
128 (4096: 21 and a third tiles of 192 columns). With ``SHIFT_COLUMNS`` that
column starts at ``N - tile_n``, inside ``B``. This times, bfloat16, ``B``
row-major and transposed, at 256 to 1024 rows of 4096x4096, 14336x4096,
4096x14336, 3584x18944 and 6144x4096 (whose 6144 columns are 32 tiles of
192: the control), the plan and four tiles of 144 or 192 columns forced
(Triton 64x192, Gluon 128x144, 128x192 and 192x192; one-wave forms where one
wave), each shifted and not (the last row of tiles shifted inside ``A``
always), beside cuBLAS. Each call with a cold L2 behind a device spin,
visited in alternating order (four visits of fifteen samples); a speed is
the median over visits of each visit's ratio against cuBLAS (paired). Every
output, poisoned with NaN first, is checked against cuBLAS's.
"""

from __future__ import annotations

import math
import statistics

import torch
from copy_floor import setup

from kernel_portfolio.bench import timing
from kernel_portfolio.ops import matmul as mm

VISITS, SAMPLES = 4, 15
LAYERS = ((4096, 4096), (14336, 4096), (4096, 14336), (3584, 18944), (6144, 4096))
ROWS = (256, 320, 384, 448, 512, 640, 768, 896, 1024)
TILES = (
    ("t64x192", "64x128+64x64 w4 s6"),
    ("g128x144", "128x128+16x64 s5 gluon"),
    ("g128x192", "128x128+64x64 s4 gluon"),
    ("g192x192", "192x128+64x64 s3 gluon"),
)


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
                            mm.SHIFT_COLUMNS = shift
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
                mm.SHIFT_COLUMNS = False
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
