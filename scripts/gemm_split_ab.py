"""A/B of split-K in the Gluon GEMM kernel where the shifted plan still idles SMs.

About two minutes in one process; prints a table and writes nothing else::

    python scripts/gemm_split_ab.py > results/<gpu>/checks/gemm-split-shift-ab-<stamp>.log

Its first run (``results/h100-80gb-hbm3/checks/gemm-split-ab-20261207T0828Z.log``)
found the Gluon kernel's split tiles fastest at 224 to 448 rows of the
14336-deep projection, where the plan's last row of tiles lay mostly past
``M``; the shift of that row inside ``A`` (``matmul._row_start``,
``checks/gemm-shift-ab-20261207T0838Z.log``) then fixed most of those, and
left the plan under 0.90 of cuBLAS at row counts where the tiles leave
part of a wave of SMs idle (160, 288 to 352, 640, 1280 rows). This times,
with the shift in both kernels, bfloat16, ``B`` row-major and transposed, at
those row counts and their neighbours of the four models layer shapes and
3584x18944, the plan and each of the Gluon kernel's three tiles of one
accumulator at every split count up to four (runs of at least 512 of ``K``)
that fills the SMs' waves better than fewer runs (its one-wave form where
its items fit one wave, ``matmul._one_wave``), beside cuBLAS. Each call with
a cold L2 behind a device spin, visited in alternating order (four visits of
fifteen samples); a speed is the median over visits of each visit's ratio
against cuBLAS (paired). Every output, poisoned with NaN first, is checked
against cuBLAS's. The summary counts the products under 0.90 of cuBLAS for
the plan and for the best of plan and split tiles, per row class.
"""

from __future__ import annotations

import statistics

import torch
from copy_floor import setup

from kernel_portfolio.bench import timing
from kernel_portfolio.ops import matmul as mm

VISITS, SAMPLES = 4, 15
LAYERS = ((4096, 4096), (6144, 4096), (14336, 4096), (4096, 14336), (3584, 18944))
ROWS = (160, 176, 272, 288, 304, 320, 352, 400, 640, 656, 1280, 1296)
TILES = (("g128x128", "128x128x64 s6 gluon"), ("g192x128", "192x128x64 s4 gluon"),
         ("g128x256", "128x256x64 s3 gluon"))  # fmt: skip
MAX_SPLIT, MIN_RUN = 4, 512


def split_counts(tile: mm.TmaTile, m: int, n: int, k: int, sms: int) -> list[int]:
    """Each split count of ``tile`` that fills the waves better than every smaller count."""
    tiles, counts = tile.count(m, n), [1]
    for runs in range(2, MAX_SPLIT + 1):
        if runs * MIN_RUN > k:
            break
        if mm._fills_better(tiles * runs, sms, tiles * counts[-1]):
            counts.append(runs)
    return counts


def main() -> None:
    flush, _ = setup()
    sms = mm._sm_count(0)
    print(f"SMs {sms}; bfloat16 forward; speed against cuBLAS (paired median); us: cuBLAS's")
    print("median time. Columns: the plan, then each Gluon tile at each split count kN")
    print("(one-wave form where its items fit one wave); 'best' the fastest of them all")
    rows_under = {}
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
                    for runs in split_counts(tile, m, n, k, sms):
                        form = mm._one_wave(tile, tile.count(m, n) * runs, sms)
                        cands[f"{label}k{runs}"] = mm.TmaPlan(form, runs)
                calls = {"cublas": lambda a=a, b=b, ref=ref: torch.matmul(a, b, out=ref)}
                calls["cublas"]()
                torch.cuda.synchronize()
                for name, p in cands.items():
                    out = torch.full_like(ref, float("nan"))

                    def call(a=a, b=b, out=out, p=p):
                        mm._launch_matmul(a, b, out, allow_tf32=False, path="tma", plan=p)

                    call()
                    torch.cuda.synchronize()
                    err = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
                    if not err < 1e-2:
                        raise SystemExit(f"{m}x{n}x{k} {name}: relative error {err:.3g}")
                    calls[name] = call
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
                    for x in order
                    if x != "cublas"
                }
                best = max(speed, key=speed.get)
                us = statistics.median(cublas) * 1e3
                label = f"{m}x{n}x{k}{' B.T' if b_t else ''}"
                cells = " ".join(f"{x} {speed[x]:.3f}" for x in cands if x != "plan")
                print(
                    f"{label:>20} {us:7.1f} plan {speed['plan']:.3f} best {speed[best]:.3f}"
                    f" ({best})  {cells}",
                    flush=True,
                )
                cls = "<=512" if m <= 512 else ">512"
                tally = rows_under.setdefault(cls, [0, 0, 0])
                tally[0] += 1
                tally[1] += speed["plan"] < 0.90
                tally[2] += speed[best] < 0.90
                del a, w, b, ref, calls
                torch.cuda.empty_cache()
    for cls, (count, plan_under, best_under) in rows_under.items():
        print(f"rows {cls}: {count} products; under 0.90 of cuBLAS: plan {plan_under}, "
              f"best of plan and split Gluon tiles {best_under}")  # fmt: skip


if __name__ == "__main__":
    main()
