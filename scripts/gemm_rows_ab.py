"""A/B of the Hopper GEMM tiles against cuBLAS at every row count class of the models layer shapes.

About four minutes in one process; prints a table and writes nothing else::

    python scripts/gemm_rows_ab.py > results/<gpu>/checks/gemm-rows-ab-<stamp>.log

The plan (``gemm_rule.TMA_RULES``) was fitted on an H100; the committed suites
now run on the H200, whose memory is faster while its SMs are the same, and
products of few rows lean on reading ``B``. This times, bfloat16, ``B``
row-major, at every 32 rows from 64 to 512, every 64 to 1024 and every 128 to
2048 of the four models layer shapes (M against 64-, 128- and 192-row tiles
and against the SMs), the plan and each candidate tile forced over the whole
product (its one-wave form where its tiles fit one wave,
``matmul._one_wave``), beside cuBLAS: the plan's tiles, the Triton kernel's
64-row tiles and its 128x128 tile at the split-K count ``_split_k`` gives it
with up to four runs, and three Gluon tiles the catalogue lacks (128x64, and
128x160 and 192x160 of a second accumulator of 32 columns). Each call with a
cold L2 behind a device spin, visited in alternating order (four visits of
fifteen samples); a speed is the median over visits of each visit's ratio
against cuBLAS (paired). Every output, poisoned with NaN first, is checked
against cuBLAS's. A tile whose launch fails prints ``err``.
"""

from __future__ import annotations

import statistics

import torch
from copy_floor import setup

from kernel_portfolio.bench import timing
from kernel_portfolio.ops import matmul as mm

VISITS, SAMPLES = 4, 15
LAYERS = ((4096, 4096), (6144, 4096), (14336, 4096), (4096, 14336))
ROWS = (*range(64, 513, 32), *range(576, 1025, 64), *range(1152, 2049, 128))
#: (label, tile, most split-K runs): the Triton tiles may split ``K`` (``_split_k``).
CANDIDATES = (
    ("t64x64k128", mm._TILES_BY_NAME["64x64x128 w4 s6"], 1),
    ("t64x128", mm._TILES_BY_NAME["64x128x64 w4 s8"], 1),
    ("t64x128k", mm._TILES_BY_NAME["64x128x64 w4 s8"], 4),
    ("t64x192", mm._TILES_BY_NAME["64x128+64x64 w4 s6"], 1),
    ("t128x128k", mm._TILES_BY_NAME["128x128x64 w4 s4"], 4),
    ("t128x256", mm._TILES_BY_NAME["128x256x64 w8 s4 e2"], 1),
    ("g128x64", mm.TmaTile(128, 64, 64, 4, 8, gluon=True), 1),
    ("g128x128", mm._TILES_BY_NAME["128x128x64 s6 gluon"], 1),
    ("g128x144", mm._TILES_BY_NAME["128x128+16x64 s5 gluon"], 1),
    ("g128x160", mm.TmaTile(128, 128, 64, 4, 5, block_n2=32, gluon=True), 1),
    ("g128x192", mm._TILES_BY_NAME["128x128+64x64 s4 gluon"], 1),
    ("g128x256", mm._TILES_BY_NAME["128x256x64 s3 gluon"], 1),
    ("g192x128", mm._TILES_BY_NAME["192x128x64 s4 gluon"], 1),
    ("g192x160", mm.TmaTile(192, 128, 64, 4, 3, block_n2=32, gluon=True), 1),
    ("g192x192", mm._TILES_BY_NAME["192x128+64x64 s3 gluon"], 1),
)


def plan_text(plan: mm.TmaPlan) -> str:
    text = plan.tile.name + (f" k{plan.split_k}" if plan.split_k > 1 else "")
    return text + (f" [{plan.cols}] + {plan_text(plan.rest)}" if plan.rest else "")


def forced(tile: mm.TmaTile, most: int, m: int, n: int, k: int, sms: int) -> mm.TmaPlan:
    count = tile.count(m, n)
    split = mm._split_k(tile, count, k, sms, most) if most > 1 else 1
    return mm.TmaPlan(mm._one_wave(tile, count * split, sms), split)


def main() -> None:
    flush, _ = setup()
    sms = mm._sm_count(0)
    names = [label for label, _, _ in CANDIDATES]
    print(f"SMs {sms}; bfloat16 forward, B row-major; speed against cuBLAS (paired median)")
    print("of the plan and of each tile forced (one-wave form where one wave; k: split-K")
    print("counted by _split_k up to 4 runs); us: cuBLAS's median time")
    print(f"{'shape':>16} {'us':>7} {'plan':>6} " + " ".join(f"{x:>10}" for x in names) + "  plan")
    for n, k in LAYERS:
        for m in ROWS:
            torch.manual_seed(m * 7 + n + k)
            a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
            ref = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            plan = mm._tma_plan(m, n, k, sms)
            plans = {"plan": plan}
            for label, tile, most in CANDIDATES:
                plans[label] = forced(tile, most, m, n, k, sms)
            calls = {"cublas": lambda a=a, b=b, ref=ref: torch.matmul(a, b, out=ref)}
            calls["cublas"]()
            torch.cuda.synchronize()
            failed = set()
            for name, p in plans.items():
                out = torch.full_like(ref, float("nan"))

                def call(a=a, b=b, out=out, p=p):
                    mm._launch_matmul(a, b, out, allow_tf32=False, path="tma", plan=p)

                try:
                    call()
                    torch.cuda.synchronize()
                except Exception as exc:  # a candidate tile that does not launch
                    print(f"  {m}x{n}x{k} {name}: {type(exc).__name__}: {str(exc)[:200]}")
                    failed.add(name)
                    continue
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
            cells = " ".join(
                f"{'err':>10}" if x in failed else f"{speed[x]:>6.3f}{'':>4}"
                if plans[x].split_k == 1 else f"{speed[x]:>6.3f} k{plans[x].split_k:<2}"
                for x in names
            )  # fmt: skip
            us, label = statistics.median(cublas) * 1e3, f"{m}x{n}x{k}"
            print(
                f"{label:>16} {us:>7.1f} {speed['plan']:>6.3f} {cells}  {plan_text(plan)}",
                flush=True,
            )
            del a, b, ref, calls
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
