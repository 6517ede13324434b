"""A/B of the Gluon split-K rule against the plan without it, at shapes its fit never saw.

Under a minute in one process; prints a table and writes nothing else::

    python scripts/gemm_split_rule_ab.py > results/<gpu>/checks/gemm-split-rule-ab-<stamp>.log

The rule (``matmul._gluon_split``, ``gemm_rule.GLUON_SPLIT_*``) was read off
``checks/gemm-split-ab-20261207T0828Z.log``: 32 rows apart at the four models
layer shapes. This times it where that A/B did not: every 16 rows from 144 to
512 (the odd multiples of 16 between its rows, and its rows) of five
down-projection shapes of open models, ``N x K`` = 4096 x 11008 (Llama 2 7B),
5120 x 13824 (Llama 2 13B), 3584 x 18944 (Qwen2 7B), 8192 x 28672 (Llama 3
70B) and 4096 x 14336 (Llama 3 8B, Mistral 7B), bfloat16, ``B`` row-major and
transposed (a linear layer's ``x @ W.T``); each product where the rule
changes the plan, the plan with the rule, the plan without it
(``GLUON_SPLIT_BELOW`` = 0) and cuBLAS. Each call with a cold L2 behind a
device spin, visited in alternating order (four visits of fifteen samples); a
speed is the median over visits of each visit's ratio against cuBLAS
(paired). Every output, poisoned with NaN first, is checked against cuBLAS's.
"""

from __future__ import annotations

import math
import statistics

import torch
from copy_floor import setup

from kernel_portfolio.bench import timing
from kernel_portfolio.ops import gemm_rule
from kernel_portfolio.ops import matmul as mm

VISITS, SAMPLES = 4, 15
LAYERS = ((4096, 11008), (5120, 13824), (3584, 18944), (8192, 28672), (4096, 14336))
ROWS = range(144, 513, 16)


def plan_text(plan: mm.TmaPlan) -> str:
    text = plan.tile.name + (f" k{plan.split_k}" if plan.split_k > 1 else "")
    return text + (f" [{plan.cols}] + {plan_text(plan.rest)}" if plan.rest else "")


def main() -> None:
    flush, _ = setup()
    sms = mm._sm_count(0)
    below = gemm_rule.GLUON_SPLIT_BELOW
    print(f"SMs {sms}; bfloat16 forward; speed against cuBLAS (paired median); us: cuBLAS's")
    print("median time; 'without': the plan with GLUON_SPLIT_BELOW = 0; 'rule': with it")
    same, ratios, under = 0, [], [0, 0]
    for b_t in (False, True):
        for n, k in LAYERS:
            for m in ROWS:
                rule = mm._tma_plan(m, n, k, sms)
                gemm_rule.GLUON_SPLIT_BELOW = 0
                without = mm._tma_plan(m, n, k, sms)
                gemm_rule.GLUON_SPLIT_BELOW = below
                if rule == without:
                    same += 1
                    continue
                torch.manual_seed(m * 7 + n + k + b_t)
                a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
                w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
                b = w.T if b_t else w.reshape(k, n)
                ref = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
                calls = {"cublas": lambda a=a, b=b, ref=ref: torch.matmul(a, b, out=ref)}
                calls["cublas"]()
                torch.cuda.synchronize()
                for name, p in (("without", without), ("rule", rule)):
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
                    for x in ("without", "rule")
                }
                ratios.append(speed["rule"] / speed["without"])
                under[0] += speed["without"] < 0.90
                under[1] += speed["rule"] < 0.90
                label = f"{m}x{n}x{k}{' B.T' if b_t else ''}"
                print(
                    f"{label:>21} {statistics.median(cublas) * 1e3:7.1f}"
                    f" without {speed['without']:.3f} rule {speed['rule']:.3f}"
                    f"  {plan_text(without)} -> {plan_text(rule)}",
                    flush=True,
                )
                del a, w, b, ref, calls
                torch.cuda.empty_cache()
    gm = math.exp(sum(map(math.log, ratios)) / len(ratios))
    print(
        f"{len(ratios)} products changed ({same} unchanged); rule over without: geometric mean "
        f"{gm:.3f}, min {min(ratios):.3f}, max {max(ratios):.3f}; under 0.90 of cuBLAS: "
        f"without {under[0]}, rule {under[1]}; rule slower by over 2%: "
        f"{sum(r < 0.98 for r in ratios)}"
    )


if __name__ == "__main__":
    main()
