"""A/B of the RMSNorm forwards' plan at rows of 16385 to 32768 columns: looped or one block.

About two minutes in one process; prints a table and writes nothing else::

    python scripts/wide_norm_ab.py > results/<gpu>/checks/wide-norm-ab-<stamp>.log

``plan_rule.FULL_BLOCK_MIN_FILL`` holds a row of 16385 to 32768 half-precision
columns in one block only where it fills 15/16 of the block, a bar that the
softmax forward set (``checks/wide-block-ab-20261205T2140Z.log`` under
``results/h100-80gb-hbm3/``); in that run the RMSNorm and residual forwards
ran faster as a block from 24576 columns up, at aligned widths, and the
residual forward slower at 30522 (peeled rows). The H200 suites found the
RMSNorm forward at 30522 bfloat16 columns at 0.88 of its aligned neighbour's
bandwidth, looped. A peeled block read the body's weight in place, in
narrow loads; it now reads the weight's shifted copies
(``rms_norm._shifts_weight``, ``SHIFT_W``), like the looped plan.

This times the launcher (``rms_norm._forward``, bfloat16, with a weight;
with and without a residual) at 4096 and 16384 rows of widths of 61% to 98%
of a block of 32768, each odd width beside its aligned neighbour (``N``
rounded down to a multiple of 8): the shipped plan, the looped plan, and the
block plan in 16 and 32 warps, with the shifted weight (where the rows are
peeled) and without (``SHIFT_W_MIN_ELEMENTS`` past every launch). Fresh random
inputs, each call with a cold L2 behind a device spin, visited in
alternating order (six visits of twenty samples); every setting's outputs
are compared with the shipped one's (to rounding). The share of copy
bandwidth counts ``x`` and ``y`` (plus ``residual`` and ``h``).
"""

from __future__ import annotations

import torch
from copy_floor import interleaved_medians, setup

from kernel_portfolio import plans
from kernel_portfolio.bench import timing
from kernel_portfolio.ops import rms_norm

ROWS = (4096, 16384)
#: Odd widths and their aligned neighbours, from 61% to 98% of a 32768 block.
WIDTHS = ((20001, 20000), (24577, 24576), (28673, 28672), (30522, 30520), (32001, 32000))
NO_SHIFT = {"SHIFT_W_MIN_ELEMENTS": 1 << 62}


def _settings(x: torch.Tensor, w: torch.Tensor, residual: bool) -> dict:
    """``name -> (plan, module constants)``: shipped first."""
    shipped = plans.choose_for(x) if residual else rms_norm._forward_plan(x, w, "auto")
    looped = plans.choose_for(x, "looped")
    if not residual:
        looped = rms_norm._forward_plan(x, w, looped)
    found = {"shipped": (shipped, {}), "looped": (looped, {})}
    peeled = x.shape[1] % 8 != 0
    for warps in (16, 32):
        block = plans.RowPlan("block", 32768, warps)
        found[f"block w{warps}"] = (block, {})
        if peeled:
            found[f"block w{warps} no shift"] = (block, NO_SHIFT)
    return found


def _call(t: dict, plan: plans.RowPlan, constants: dict):
    def run():
        saved = {name: getattr(rms_norm, name) for name in constants}
        for name, value in constants.items():
            setattr(rms_norm, name, value)
        try:
            rms_norm._forward(t["x"], t["r"], t["w"], 1e-6, plan, *t["outs"], None)
        finally:
            for name, value in saved.items():
                setattr(rms_norm, name, value)

    return run


def main() -> None:
    flush, copy_gbps = setup()
    print(f"{'op':<9} {'rows x cols':>12} {'setting':<19} {'us':>9} {'/shipped':>9} {'%copy':>7}"
          "  plan")  # fmt: skip
    for residual in (False, True):
        op = "residual" if residual else "rms_norm"
        for m in ROWS:
            for pair in WIDTHS:
                calls, info = {}, {}
                for n in pair:
                    torch.manual_seed(m + n)
                    t = {"x": torch.randn(m, n, device="cuda", dtype=torch.bfloat16)}
                    t["w"] = torch.randn(n, device="cuda", dtype=torch.bfloat16)
                    t["r"] = torch.randn_like(t["x"]) if residual else None
                    t["outs"] = (
                        torch.empty_like(t["x"]),
                        torch.empty_like(t["x"]) if residual else None,
                    )
                    ref = None
                    for name, (plan, constants) in _settings(t["x"], t["w"], residual).items():
                        call = _call(t, plan, constants)
                        outs = [o for o in t["outs"] if o is not None]
                        for o in outs:
                            o.fill_(float("nan"))
                        call()
                        torch.cuda.synchronize()
                        got = [o.float() for o in outs]
                        if ref is None:
                            ref = got
                        for a, b in zip(got, ref, strict=True):
                            if not torch.allclose(a, b, rtol=2e-2, atol=2e-2):
                                raise SystemExit(
                                    f"{op} {m}x{n} {name}: outputs differ from shipped"
                                )
                        del got
                        calls[(n, name)] = call
                        info[(n, name)] = plan
                    del ref
                lead = timing.lead_for(next(iter(calls.values())))
                med = interleaved_medians(calls, flush, lead)
                tensors = 4 if residual else 2
                for (n, name), ms in med.items():
                    pct = 100 * tensors * m * n * 2 / (ms * 1e-3) / 1e9 / copy_gbps
                    p = info[(n, name)]
                    ratio = ms / med[(n, "shipped")]
                    print(f"{op:<9} {f'{m}x{n}':>12} {name:<19} {ms * 1e3:>9.1f} {ratio:>9.3f}"
                          f" {pct:>6.1f}%  {p.kind} {p.block} w{p.num_warps}",
                          flush=True)  # fmt: skip
                del calls, t
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
