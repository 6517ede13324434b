"""A/B of the RMSNorm backward's programs a slice: whole waves against rounding up.

About a minute in one process; prints a table and writes nothing else::

    python scripts/bwd_waves_ab.py > results/<gpu>/checks/bwd-waves-ab-<UTC stamp>.log

The looped and split backward runs ``P`` programs on each of a row's ``S``
slices (:func:`kernel_portfolio.ops.rms_norm._partial_rows`). The old rule
took ``P = ceil(programs / S)``, rounded up to a multiple of ``VEC`` in a
peeled launch: at 4096x50256 (7 slices) 266 programs for 264 places, at
4096x30522 (8 slices, peeled) 320, so a few programs ran alone as one more
wave. The rule under test takes the count that fits or the next up,
whichever costs fewer waves times rows a program.

This times the RMSNorm and residual RMSNorm backwards (``dx``, and the
weight's gradient; bfloat16, and float16 at 64x131072) at every shape of
:data:`SHAPES` under both rules, on fresh random inputs, visited in
alternating order (six visits of twenty samples), each call with a cold L2
behind a device spin. Both outputs, poisoned with NaN first, must match a
float64 reference. Per case it prints each rule's grid and median and the
old time over the new; last, the geometric mean. A diagnostic for the
source's rule: the site quotes the benchmark results, never this.
"""

from __future__ import annotations

import math

import torch
from copy_floor import interleaved_medians, setup

from kernel_portfolio import plans
from kernel_portfolio.bench import timing
from kernel_portfolio.contracts import direct_launches
from kernel_portfolio.ops import rms_norm as rms_mod

#: ``(rows, columns, dtype)``: vocabularies of open models (odd and aligned) and
#: ``2^16 + 1`` at 4096 and 1024 rows, and a split row of 131072.
SHAPES = tuple((4096, n, torch.bfloat16) for n in (30522, 50256, 50257, 51865, 65537, 128257))
SHAPES += ((4096, 151936, torch.bfloat16), (1024, 50257, torch.bfloat16))
SHAPES += ((1024, 151936, torch.bfloat16), (64, 131072, torch.float16))
EPS = 1e-6
#: Largest difference from the float64 reference, relative to its largest magnitude.
MAX_REL_DIFF = 2e-2
NEW_RULE = rms_mod._partial_rows


def old_rule(n_rows, n_split, launch, sms, vec, peel):
    """The rule before: ``ceil(programs / S)``, rounded up to ``vec`` when peeled."""
    parts = min(n_rows, max(1, plans.cdiv(launch.per_sm * sms, n_split)))
    return min(n_rows, plans.cdiv(parts, vec) * vec) if peel else parts


def _reference(dy, h, w, dh):
    """``dx`` and ``dweight`` in float64 (``h`` the normalised input, as saved)."""
    hd, dyd, wd = h.double(), dy.double(), w.double()
    rstd = torch.rsqrt(hd.pow(2).mean(-1, keepdim=True) + EPS)
    g = dyd * wd
    dx = rstd * (g - hd * rstd.pow(2) * (g * hd).mean(-1, keepdim=True))
    if dh is not None:
        dx = dx + dh.double()
    return dx, (dyd * hd * rstd).sum(0)


def _calls(n_rows: int, n_cols: int, dtype: torch.dtype, residual: bool, grids: dict) -> dict:
    """The backward under each rule, outputs checked; ``grids`` gets each rule's grid."""
    h = torch.randn(n_rows, n_cols, device="cuda", dtype=dtype)
    dy, w = torch.randn_like(h), torch.randn(n_cols, device="cuda", dtype=dtype)
    dh = torch.randn_like(h) if residual else None
    rstd = torch.rsqrt(h.float().pow(2).mean(-1) + EPS)
    plan = plans.choose_for(h)
    dx, dw = torch.empty_like(h), torch.empty_like(w)
    want_dx, want_dw = _reference(dy, h, w, dh)

    def call(rule):
        def go():
            rms_mod._partial_rows = rule
            rms_mod._backward(dy, h, w, rstd, dh, plan, dx, None, dw)

        return go

    calls = {}
    for name, rule in (("old", old_rule), ("new", NEW_RULE)):
        seen = []
        calls[name] = call(lambda *args, rule=rule, seen=seen: seen.append(rule(*args)) or seen[-1])
        dx.fill_(float("nan"))
        dw.fill_(float("nan"))
        calls[name]()
        grids[name] = seen[-1]
        for got, want in ((dx, want_dx), (dw, want_dw)):
            diff = ((got.double() - want).abs().max() / want.abs().max()).item()
            if not diff <= MAX_REL_DIFF:
                where = f"{n_rows}x{n_cols} {name}"
                raise SystemExit(f"{where}: off the float64 reference by {diff:.1e}")
    return calls


def main() -> None:
    flush, _ = setup()
    print(f"{'op':<13} {'rows x N':>12} {'dtype':>9}  P old, new; us: old, new; old over new")
    gains = []
    for residual in (False, True):
        for n_rows, n_cols, dtype in SHAPES:
            grids = {}
            calls = _calls(n_rows, n_cols, dtype, residual, grids)
            lead = max(timing.lead_for(call) for call in calls.values())
            med = interleaved_medians(calls, flush, lead)
            op = "residual bwd" if residual else "rms_norm bwd"
            print(f"{op:<13} {f'{n_rows}x{n_cols}':>12} {str(dtype)[6:]:>9}  "
                  f"{grids['old']:3d} {grids['new']:3d}   {med['old'] * 1e3:8.1f} "
                  f"{med['new'] * 1e3:8.1f}   {med['old'] / med['new']:.3f}")  # fmt: skip
            gains.append(med["old"] / med["new"])
    rms_mod._partial_rows = NEW_RULE
    mean = math.exp(sum(map(math.log, gains)) / len(gains))
    print(f"\ngeometric mean of the old rule's time over the new: {mean:.3f} over {len(gains)} "
          f"cases, faster under the new at {sum(g > 1 for g in gains)}")  # fmt: skip


if __name__ == "__main__":
    with direct_launches():
        main()
