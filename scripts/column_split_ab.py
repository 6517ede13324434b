"""A/B of the Hopper GEMM plan with its columns split (``matmul._column_split``) and without.

About two minutes in one process; prints a table and writes nothing else::

    python scripts/column_split_ab.py > results/<gpu>/checks/column-split-ab-<stamp>.log

Where the plan's tile leaves the last of several waves part-empty (1024 x
14336: 448 tiles of 128x256 for 132 SMs, four waves 85% busy), the split plan
runs the tile over the columns of its full waves and the remaining columns as
a second product with a plan of its own. This times both plans beside cuBLAS
at every row count from 256 to 3712 (128 apart) of the four models layer
shapes where the split plan differs (``gemm_rule.COLUMN_SPLIT_FILL`` at 1:
every part-empty last wave the rule's cost check lets through), bfloat16,
``B`` row-major and transposed, with the fill of the unsplit plan's waves,
so that the constant can be read off the table. Each call with a cold L2
behind a device spin, visited in alternating order (six visits of twenty
samples); a speed is the median over visits of each visit's ratio against
cuBLAS (paired). Every output, poisoned with NaN first, is checked against
cuBLAS's.
"""

from __future__ import annotations

import statistics

import torch
from copy_floor import SAMPLES, VISITS, setup

from kernel_portfolio import plans
from kernel_portfolio.bench import timing
from kernel_portfolio.ops import gemm_rule
from kernel_portfolio.ops import matmul as mm

LAYERS = ((4096, 4096), (6144, 4096), (14336, 4096), (4096, 14336))
ROWS = range(256, 3713, 128)


def plan_text(plan: mm.TmaPlan) -> str:
    text = plan.tile.name + (f" k{plan.split_k}" if plan.split_k > 1 else "")
    return text + (f" [{plan.cols}] + {plan_text(plan.rest)}" if plan.rest else "")


def fill(plan: mm.TmaPlan, m: int, n: int, sms: int) -> float:
    items = plans.cdiv(m, plan.tile.block_m) * plans.cdiv(n, plan.tile.tile_n) * plan.split_k
    return items / (plans.cdiv(items, sms) * sms)


def main() -> None:
    flush, _ = setup()
    sms = mm._sm_count(0)
    print("bfloat16 forward; speed against cuBLAS (paired median); fill: the unsplit plan's")
    print(f"{'shape':>16} {'B':>3} {'fill':>5} {'whole':>6} {'split':>6} {'split/whole':>11}  plan")
    for n, k in LAYERS:
        for m in ROWS:
            gemm_rule.COLUMN_SPLIT_FILL = 0.0
            whole = mm._tma_plan(m, n, k, sms)
            gemm_rule.COLUMN_SPLIT_FILL = 1.0
            split = mm._tma_plan(m, n, k, sms)
            if split == whole:
                continue
            for b_t in (False, True):
                a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
                b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
                b = b.T if b_t else b.T.contiguous()
                ref = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
                calls = {"cublas": lambda a=a, b=b, ref=ref: torch.matmul(a, b, out=ref)}
                outs = {}
                for name, plan in (("whole", whole), ("split", split)):
                    out = outs[name] = torch.full_like(ref, float("nan"))
                    calls[name] = lambda a=a, b=b, out=out, p=plan: mm._launch_matmul(
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
                speed = {
                    x: statistics.median(
                        c / o for c, o in zip(visits["cublas"], visits[x], strict=True)
                    )
                    for x in ("whole", "split")
                }
                gain = statistics.median(
                    w / s for w, s in zip(visits["whole"], visits["split"], strict=True)
                )
                label = f"{m}x{n}x{k}"
                print(
                    f"{label:>16} {'W.T' if b_t else 'B':>3} {fill(whole, m, n, sms):>5.2f} "
                    f"{speed['whole']:>6.3f} {speed['split']:>6.3f} {gain:>11.3f}  "
                    f"{plan_text(split)}",
                    flush=True,
                )
                del a, b, ref, outs, calls
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
