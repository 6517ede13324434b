"""A/B of the block plan for rows of 16385 to 32768 columns against ``auto``'s looped plan.

About two minutes in one process; prints a table and writes nothing else::

    python scripts/wide_block_ab.py > results/<gpu>/checks/wide-block-ab-<UTC stamp>.log

``plan_rule.MAX_BLOCK_BYTES`` ends the block plan at 16384 half-precision
columns: the chunk-rules sweep, which fitted it, had no width between 16384
and 32769, so rows such as a vocabulary of 32000 take the looped plan and
read each row twice. This times, at :data:`WIDTHS` and :data:`ROWS`, the
softmax forward and forward+backward (float16) and the RMSNorm forward,
forward+backward and residual forward (bfloat16) under ``auto`` and under
the block plan of 32768 columns with 16 and 32 warps, on fresh random
inputs, visited in alternating order (six visits of twenty samples), each
call with a cold L2 behind a device spin; outputs are checked against
``auto``'s. Per case it prints the medians and ``auto``'s time over each
block plan's; last, per operator, the geometric means. A diagnostic for the
rule's constant: the site quotes the benchmark results, never this.
"""

from __future__ import annotations

import math
from collections import defaultdict

import torch
from copy_floor import interleaved_medians, setup

import kernel_portfolio as kp
from kernel_portfolio.bench import timing
from kernel_portfolio.plans import RowPlan

WIDTHS = (20000, 24576, 30522, 32000, 32064, 32768)
ROWS = (1024, 4096, 16384)
PLANS = {
    "auto": "auto",
    "block w16": RowPlan("block", 32768, 16),
    "block w32": RowPlan("block", 32768, 32),
}
OPS = ("softmax fwd", "softmax fwdbwd", "rms_norm fwd", "rms_norm fwdbwd", "residual fwd")


def _calls(op: str, n_rows: int, n_cols: int) -> dict:
    dtype = torch.float16 if op.startswith("softmax") else torch.bfloat16
    x = torch.randn(n_rows, n_cols, device="cuda", dtype=dtype)
    w = torch.randn(n_cols, device="cuda", dtype=dtype)
    r = torch.randn_like(x)
    dy = torch.randn_like(x)
    xg = x.clone().requires_grad_()

    def make(plan):
        if op == "softmax fwd":
            return lambda: kp.softmax(x, plan=plan)
        if op == "rms_norm fwd":
            return lambda: kp.rms_norm(x, w, plan=plan)
        if op == "residual fwd":
            return lambda: kp.residual_rms_norm(x, r, w, plan=plan)[0]

        def fwdbwd():
            xg.grad = None
            y = (
                kp.softmax(xg, plan=plan)
                if op == "softmax fwdbwd"
                else kp.rms_norm(xg, w, plan=plan)
            )
            y.backward(dy)
            return xg.grad

        return fwdbwd

    calls = {name: make(plan) for name, plan in PLANS.items()}
    want = calls["auto"]().float().clone()
    for name, call in calls.items():
        got = call().float()
        diff = ((got - want).abs().max() / want.abs().max()).item()
        if not diff <= 2e-2:
            raise SystemExit(f"{op} {n_rows}x{n_cols} {name}: off auto's output by {diff:.1e}")
    return calls


def main() -> None:
    flush, _ = setup()
    print(f"{'op':<16} {'rows x N':>12}  us: auto, block w16, block w32; auto over each block")
    gains = defaultdict(lambda: defaultdict(list))
    for op in OPS:
        for n_rows in ROWS:
            for n_cols in WIDTHS:
                calls = _calls(op, n_rows, n_cols)
                lead = max(timing.lead_for(call) for call in calls.values())
                med = interleaved_medians(calls, flush, lead)
                ratios = {k: med["auto"] / med[k] for k in ("block w16", "block w32")}
                print(f"{op:<16} {f'{n_rows}x{n_cols}':>12}  {med['auto'] * 1e3:8.1f} "
                      f"{med['block w16'] * 1e3:8.1f} {med['block w32'] * 1e3:8.1f}   "
                      f"{ratios['block w16']:.3f} {ratios['block w32']:.3f}")  # fmt: skip
                for k, v in ratios.items():
                    gains[op][k].append(v)
    print("\nper operator: geometric mean of auto's time over the block plan's")
    for op, by_plan in gains.items():
        for k, got in by_plan.items():
            mean = math.exp(sum(map(math.log, got)) / len(got))
            wins = sum(g > 1 for g in got)
            print(f"  {op} {k}: {mean:.3f} over {len(got)} shapes, faster at {wins}")


if __name__ == "__main__":
    main()
