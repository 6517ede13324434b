"""A/B of RMSNorm's shifted weight copies (``SHIFT_W``) on a GPU.

About three minutes in one process; prints a table and writes nothing else::

    python scripts/shift_weight_ab.py > results/h200/checks/shift-weight-ab-<UTC stamp>.log

Times the forward launcher (``ops.rms_norm._forward``, with and without a
residual) and the backward launcher (``_backward``, without) at widths whose
rows are not 16 bytes apart, from one row to 16384 (at most ``MAX_ELEMENTS`` a
tensor), with the shifted copies forced on (``SHIFT_W_MIN_ELEMENTS = 0``) and
off, beside the same launcher at the aligned neighbour width (``N`` rounded
down to a multiple of 8). All run on fresh random inputs, visited in
alternating order (six visits of twenty samples), each call with a cold L2
behind a device spin. The two settings' outputs must be bitwise equal (the
weight values are the same; only their addresses differ). The share of copy
bandwidth counts the compulsory bytes (``x`` and ``y``, plus the residual and
``h``; ``dy``, ``h`` and ``dx`` for the backward). The last lines give, per
width, the fewest elements at which ``on`` ran faster than ``off`` at every
larger row count: the data for ``SHIFT_W_MIN_ELEMENTS``. A diagnostic for the
source's constant: the site quotes the benchmark results, never this.
"""

from __future__ import annotations

import torch
from copy_floor import interleaved_medians, setup

from kernel_portfolio import plans
from kernel_portfolio.bench import timing
from kernel_portfolio.ops import rms_norm

ROWS = (1, 8, 32, 132, 512, 4096, 16384)
#: Widths (bfloat16): a hidden size past a power of two (block plan), vocabularies.
WIDTHS = (4097, 30522, 50257, 151937)
SETTINGS = {"on": 0, "off": 1 << 62}
#: The RMSNorm forward, the residual forward, and the RMSNorm backward (``dx`` and ``dweight``).
OPS = ("rms_norm", "residual", "bwd")
#: Largest tensor timed (elements): two settings' outputs are kept to compare.
MAX_ELEMENTS = 1 << 30


def _inputs(m: int, n: int, op: str):
    """The launcher call of ``op`` at ``m x n`` bfloat16, and the outputs it writes."""

    def rand(*shape):
        return torch.randn(*shape, device="cuda", dtype=torch.bfloat16)

    x, w = rand(m, n), rand(n)
    plan = plans.choose_for(x)
    y = torch.empty_like(x)
    if op == "bwd":
        dy, dw = rand(m, n), torch.empty_like(w)
        rstd = torch.rsqrt(x.float().pow(2).mean(-1) + 1e-6)
        return (lambda: rms_norm._backward(dy, x, w, rstd, None, plan, y, None, dw)), (y, dw)
    r = rand(m, n) if op == "residual" else None
    h = torch.empty_like(x) if op == "residual" else None
    return (lambda: rms_norm._forward(x, r, w, 1e-6, plan, y, h, None)), (y, h)


def _set(threshold: int):
    def call_with(call):
        def run():
            rms_norm.SHIFT_W_MIN_ELEMENTS = threshold
            call()

        return run

    return call_with


def main() -> None:
    flush, copy_gbps = setup()
    shipped = rms_norm.SHIFT_W_MIN_ELEMENTS
    print(f"shipped SHIFT_W_MIN_ELEMENTS = {shipped}\n")
    print(f"{'op':<9} {'rows x cols':>14} {'on us':>9} {'off us':>9} {'on/off':>7} "
          f"{'on %copy':>9} {'off %copy':>9} {'aligned %copy':>13}")  # fmt: skip
    faster = {}
    for op in OPS:
        for n in WIDTHS:
            for m in ROWS:
                if m * n > MAX_ELEMENTS:
                    continue
                call, outs = _inputs(m, n, op)
                aligned, _ = _inputs(m, n // 8 * 8, op)
                got = {}
                for name, threshold in SETTINGS.items():
                    _set(threshold)(call)()
                    got[name] = [t.clone() for t in outs if t is not None]
                if not all(torch.equal(a, b) for a, b in zip(*got.values(), strict=True)):
                    raise SystemExit(f"{m}x{n}: the settings' outputs differ")
                rms_norm.SHIFT_W_MIN_ELEMENTS = shipped
                lead = timing.lead_for(call)
                calls = {name: _set(t)(call) for name, t in SETTINGS.items()}
                calls["aligned"] = _set(SETTINGS["off"])(aligned)
                med = interleaved_medians(calls, flush, lead)
                rms_norm.SHIFT_W_MIN_ELEMENTS = shipped
                tensors = {"rms_norm": 2, "residual": 4, "bwd": 3}[op]
                pct = {
                    k: 100 * tensors * m * (n // 8 * 8 if k == "aligned" else n) * 2 / v / 1e6
                    / copy_gbps
                    for k, v in med.items()
                }  # fmt: skip
                print(f"{op:<9} {f'{m}x{n}':>14} {med['on'] * 1e3:>9.1f} {med['off'] * 1e3:>9.1f}"
                      f" {med['on'] / med['off']:>7.3f} {pct['on']:>8.1f}% {pct['off']:>8.1f}%"
                      f" {pct['aligned']:>12.1f}%")  # fmt: skip
                faster.setdefault((op, n), []).append((m * n, med["on"] < med["off"]))
                del call, outs, aligned
                torch.cuda.empty_cache()
    print("\nfewest elements from which on ran faster than off at every larger row count:")
    for (op, n), runs in faster.items():
        wins = [elements for i, (elements, _) in enumerate(runs) if all(w for _, w in runs[i:])]
        print(f"  {op} {n}: {min(wins) if wins else 'never'}")


if __name__ == "__main__":
    main()
