"""A/B (experiment): forced row plans against the baselines at the models suite's misses.

Row sum forward at wide odd and aligned widths (looped chunk x warps) against
torch; RMSNorm / residual RMSNorm forward at few rows (block warps) against
Liger and torch. Events timer, cold L2, visits interleaved in a seeded order,
each implementation checked first (runner.check). Prints medians and ratios.

    PYTHONPATH=$PWD/src python scripts/ab_rows.py
"""

from __future__ import annotations

import random
import statistics
import sys

from sweep_support import start_run

VISITS, SAMPLES = 4, 5
ROW_SUM = [(4096, n) for n in (50256, 50257, 51865, 128256, 151936, 65536, 32000)] + [
    (1024, 50257),
    (16384, 50257),
    (2048, 151936),
]
NORM = []  # the row sum only: old against new, same run


def before_row_sum(plan):
    """The row sum of 04396fd (``_row_sum_before``) at ``plan`` (None: its auto plan)."""
    import torch
    from _row_sum_before import _launch_row_sum

    from kernel_portfolio import plans

    def call(x):
        out = torch.empty(x.shape[:-1], dtype=x.dtype, device=x.device)
        _launch_row_sum(x, out, plan or plans.choose_for(x))
        return out

    return call


def main() -> int:
    import kernel_portfolio as kp
    from kernel_portfolio.bench import runner
    from kernel_portfolio.bench.suites import Case
    from kernel_portfolio.plans import RowPlan, choose

    run = start_run(False, "python scripts/ab_rows.py")
    copy = run.copy["gbps"]
    cells = []
    for shape in ROW_SUM:
        impls = {
            "torch": runner.implementation(
                Case("row_sum", "fwd", shape, "float16", "events", ("ours",)), "torch"
            )
        }
        for chunk in (8192, 16384):
            for warps in (4, 8, 16):
                p = RowPlan("looped", chunk, warps)
                impls[f"looped {chunk} w{warps}"] = lambda x, p=p: kp.row_sum(x, plan=p)
        impls["auto"] = lambda x: kp.row_sum(x)
        impls["before auto"] = before_row_sum(None)
        impls["before looped 8192 w16"] = before_row_sum(RowPlan("looped", 8192, 16))
        cells.append((Case("row_sum", "fwd", shape, "float16", "events", ("ours",)), impls))
    for op in ("rms_norm", "residual_rms_norm"):
        for shape in NORM:
            base = Case(op, "fwd", shape, "bfloat16", "events", ("ours",))
            impls = {n: runner.implementation(base, n) for n in ("torch", "liger")}
            impls["auto"] = runner.implementation(base, "ours")
            cols = shape[1]
            for warps in (2, 4, 8, 16):
                p = RowPlan("block", 1 << (cols - 1).bit_length(), warps)
                if op == "rms_norm":
                    impls[f"block w{warps}"] = lambda x, w, p=p: kp.rms_norm(
                        x, w, eps=runner.EPS, plan=p
                    )
                else:
                    impls[f"block w{warps}"] = lambda x, r, w, p=p: kp.residual_rms_norm(
                        x, r, w, eps=runner.EPS, plan=p
                    )
            cells.append((base, impls))
    for case, impls in cells:
        inputs = runner.make_inputs(case, 7, device="cuda")
        ready = {}
        for name, fn in impls.items():
            try:
                runner.check(case, fn, inputs)
                call, prep = runner.make_call(case, fn, inputs)
                ready[name] = call if prep is None else (lambda c=call, p=prep: (p(), c()))
            except Exception as exc:  # noqa: BLE001
                run.log(f"{case.id} {name}: {type(exc).__name__}: {str(exc)[:200]}")
        run.busy(20.0)
        samples = {n: [] for n in ready}
        order = list(ready)
        rng = random.Random(case.id)
        for _ in range(VISITS):
            rng.shuffle(order)
            for n in order:
                samples[n] += run.time(ready[n], SAMPLES, cold=True)
        med = {n: statistics.median(s) for n, s in samples.items()}
        basel = min(v for n, v in med.items() if n in ("torch", "liger"))
        auto_plan = choose(*case.shape, elem_bytes=2, sm_count=run.sm_count)
        run.log(f"== {case.id} bytes {case.bytes} auto={auto_plan}")
        for n, v in sorted(med.items(), key=lambda kv: kv[1]):
            gbps = case.bytes / v / 1e6
            pct = 100 * gbps / copy
            run.log(
                f"  {n:22s} {v * 1e3:9.2f} us  {pct:5.1f}% copy  {basel / v:.3f}x best baseline"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
