"""A/B of narrow unaligned rows peeled (``peel.row_vec``'s head, body and tail) and not.

About a minute in one process; prints a table and writes nothing else::

    python scripts/narrow_peel_ab.py > results/<gpu>/checks/narrow-peel-ab-<stamp>.log

In the default suite the residual RMSNorm forward of 32 rows of 127 bfloat16
columns ran at 0.95 of Liger-Kernel's (1.74 against 1.66 us), the only row
case under 0.97 of its best baseline. Its rows are 254 bytes apart, so the
kernels peel them. This times each row operator forward (RMSNorm and the
residual one with a weight, softmax, row sum), and the residual RMSNorm and
softmax forward+backward, at 1 to 8192 rows of 127 to 2047 columns
(bfloat16: 254 to 4094 bytes a row), with the rows peeled
(``peel.PEEL_MIN_BYTES`` at 0) and not (above every row here), beside
Liger-Kernel (torch for the row sum). Every recorded launch is forgotten
before each call (``contracts.Replays``), so each call plans its launches
anew with the constant it runs under. Each call with a cold L2 behind a
device spin, visited in alternating order (six visits of twenty samples);
speeds are medians over visits of each visit's paired ratio. Every output is
checked against the float64 reference.
"""

from __future__ import annotations

import statistics

import torch
from copy_floor import SAMPLES, VISITS, setup
from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction
from liger_kernel.ops.rms_norm import LigerRMSNormFunction
from liger_kernel.ops.softmax import LigerSoftmaxFunction

import kernel_portfolio as kp
from kernel_portfolio import contracts, reference
from kernel_portfolio.bench import timing
from kernel_portfolio.ops import peel, rms_norm, row_sum, softmax

EPS = 1e-6
ROWS = (1, 32, 132, 1024, 8192)
WIDTHS = (127, 255, 511, 1023, 2047)
OPS = {
    "rms_norm": (
        lambda x, r, w: kp.rms_norm(x, w, eps=EPS),
        lambda x, r, w: LigerRMSNormFunction.apply(x, w, EPS, 0.0, "llama", False),
        lambda x, r, w: reference.rms_norm(x, w, EPS),
    ),
    "residual_rms_norm": (
        lambda x, r, w: kp.residual_rms_norm(x, r, w, eps=EPS),
        lambda x, r, w: LigerFusedAddRMSNormFunction.apply(x, r, w, EPS, 0.0, "llama", False),
        lambda x, r, w: reference.residual_rms_norm(x, r, w, EPS),
    ),
    "softmax": (
        lambda x, r, w: kp.softmax(x),
        lambda x, r, w: LigerSoftmaxFunction.apply(x),
        lambda x, r, w: reference.softmax(x),
    ),
    "row_sum": (
        lambda x, r, w: kp.row_sum(x),
        lambda x, r, w: x.sum(dim=-1),
        lambda x, r, w: reference.row_sum(x),
    ),
}
BACKWARD = ("residual_rms_norm", "softmax")


#: Every recorder of launches of the row operators (module-level, one a route).
REPLAYS = [
    obj
    for module in (rms_norm, row_sum, softmax)
    for obj in vars(module).values()
    if isinstance(obj, contracts.Replays)
]


def variant(fn, min_bytes: int):
    def call():
        peel.PEEL_MIN_BYTES = min_bytes
        for replays in REPLAYS:
            replays.clear()
        return fn()

    return call


def first(out):
    return out[0] if isinstance(out, tuple) else out


def ratio(visits: dict, num: str, den: str) -> float:
    return statistics.median(a / b for a, b in zip(visits[num], visits[den], strict=True))


def time_case(name: str, mode: str, n_rows: int, n_cols: int, flush) -> str:
    """One row of the table: the baseline's time and the three paired ratios."""
    ours, base, ref = OPS[name]
    grad = mode == "fwdbwd"
    shape = (n_rows, n_cols)
    x, r = (torch.randn(shape, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    w = torch.randn(n_cols, device="cuda", dtype=torch.bfloat16)
    want = first(ref(x.double(), r.double(), w.double())).cpu()
    for t in (x, r, w):
        t.requires_grad_(grad)
    fns = {
        "base": lambda: base(x, r, w),
        "peeled": variant(lambda: ours(x, r, w), 0),
        "flat": variant(lambda: ours(x, r, w), 1 << 30),
    }
    for key, fn in fns.items():
        got = first(fn()).double().cpu()
        err = ((got - want).norm() / want.norm()).item()
        if not err < 2e-2:
            raise SystemExit(f"{name} {n_rows}x{n_cols} {key}: error {err:.3g}")
    if grad:
        dy = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
        inputs = (x,) if name == "softmax" else (x, r, w)
        fns = {
            key: (lambda fn=fn: torch.autograd.grad(first(fn()), inputs, dy))
            for key, fn in fns.items()
        }
    lead = max(timing.lead_for(fn) for fn in fns.values())
    visits = {key: [] for key in fns}
    for visit in range(VISITS):
        for key in fns if visit % 2 == 0 else list(fns)[::-1]:
            t = timing.time_events(fns[key], SAMPLES, flush=flush, lead_ms=lead)
            visits[key].append(statistics.median(t))
    return (
        f"{name:>18} {mode:>6} {f'{n_rows}x{n_cols}':>10} "
        f"{statistics.median(visits['base']) * 1e3:>5.1f}u "
        f"{ratio(visits, 'base', 'peeled'):>7.3f} {ratio(visits, 'base', 'flat'):>7.3f} "
        f"{ratio(visits, 'peeled', 'flat'):>11.3f}"
    )


def main() -> None:
    flush, _ = setup()
    print(f"{len(REPLAYS)} recorders of launches forgotten before each call")
    print("bfloat16; speed of ours peeled and not against the baseline (paired median),")
    print("and not peeled against peeled; base: the baseline's median time")
    head = ("op", "mode", "shape", "base", "peeled", "flat", "flat/peeled")
    print(" ".join(f"{h:>{n}}" for h, n in zip(head, (18, 6, 10, 6, 7, 7, 11), strict=True)))
    for name in OPS:
        for mode in ("fwd", "fwdbwd") if name in BACKWARD else ("fwd",):
            for n_cols in WIDTHS:
                for n_rows in ROWS:
                    print(time_case(name, mode, n_rows, n_cols, flush), flush=True)
    peel.PEEL_MIN_BYTES = 0


if __name__ == "__main__":
    main()
