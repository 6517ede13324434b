"""A/B of the RMSNorm backward's launch rule (:func:`kernel_portfolio.ops.rms_norm._bwd_launch`).

About four minutes on a GPU in one process; prints a table and writes nothing
else::

    python scripts/row_prefetch_ab.py > results/h200/checks/row-prefetch-ab-<UTC stamp>.log

Times the RMSNorm backward and the residual RMSNorm's (which adds ``dh`` and
writes two ``dx``) under settings of four parts of the rule, each against the
rule as shipped: the next row's prefetch (``BWD_PREFETCH_BYTES``, 0: never),
the register cap (``maxnreg``; off: ptxas's own count), a looped row's chunk
(``BWD_CHUNK_ELEMS``; 32: the plan's own) and the weight held across rows
(``BWD_WEIGHT_HELD_ELEMS``; 32: always held). A case times only the settings
that change its launch. All on the same inputs, visited in alternating order
(six visits of twenty samples), each call with a cold L2 and a device spin
ahead of its start event. Each setting's outputs are checked against the
shipped setting's (the weight gradient may differ in its last bit: the
settings keep different numbers of partial rows). The share of copy bandwidth
counts the compulsory bytes (as the suite does; without the float32
weight-gradient partials). The last lines give the mean change of the median
time per operator and setting. A diagnostic for the performance notes: the
site quotes the benchmark results, never this.
"""

from __future__ import annotations

import statistics

import torch
from ab_support import compare_settings, setup

from kernel_portfolio import plans
from kernel_portfolio.ops import rms_norm

CASES = (
    (32768, 1024, torch.float16),
    (512, 4096, torch.float16),
    (16384, 4104, torch.float16),
    (8192, 8192, torch.float16),
    (32768, 8192, torch.float16),
    (8192, 8192, torch.float32),
    (4096, 12288, torch.float16),  # a block row of 32 columns a thread
    (4096, 20000, torch.float16),  # looped
    (4096, 20000, torch.float32),
    (64, 131072, torch.float16),  # split
)
_LAUNCH = rms_norm._bwd_launch
#: ``(BWD_PREFETCH_BYTES, capped, BWD_CHUNK_ELEMS, BWD_WEIGHT_HELD_ELEMS)``
SHIPPED = (
    rms_norm.BWD_PREFETCH_BYTES,
    True,
    rms_norm.BWD_CHUNK_ELEMS,
    rms_norm.BWD_WEIGHT_HELD_ELEMS,
)
SETTINGS = (
    SHIPPED,
    (0, *SHIPPED[1:]),
    (SHIPPED[0], False, *SHIPPED[2:]),
    (*SHIPPED[:2], 32, SHIPPED[3]),
    (*SHIPPED[:3], 32),
)


def _uncapped(*args) -> rms_norm.BwdLaunch:
    return _LAUNCH(*args)._replace(max_registers=None)


def _set(setting: tuple[int, bool, int, int]) -> None:
    rms_norm.BWD_PREFETCH_BYTES, capped, *elems = setting
    rms_norm.BWD_CHUNK_ELEMS, rms_norm.BWD_WEIGHT_HELD_ELEMS = elems
    rms_norm._bwd_launch = _LAUNCH if capped else _uncapped


def _launch(setting, x: torch.Tensor, has_dh: bool) -> rms_norm.BwdLaunch:
    _set(setting)
    launch = rms_norm._bwd_launch(plans.choose_for(x), x.shape[1], x.element_size(), has_dh)
    _set(SHIPPED)
    return launch


def _cases(m: int, n: int, dtype: torch.dtype) -> dict:
    """Per operator: ``(call, outputs, elements moved per row element, has dh)``."""
    x, dy, dh = (torch.randn(m, n, device="cuda", dtype=dtype) for _ in range(3))
    w = torch.randn(n, device="cuda", dtype=dtype)
    plan = plans.choose_for(x)
    dx, dx2 = torch.empty_like(x), torch.empty_like(x)
    rstd = torch.rsqrt(x.float().pow(2).mean(-1) + 1e-6)
    dw = torch.empty_like(w)
    return {
        "rms_norm bwd": (
            lambda: rms_norm._backward(dy, x, w, rstd, None, plan, dx, None, dw),
            (dx, dw),
            3,
            False,
        ),
        "residual bwd": (
            lambda: rms_norm._backward(dy, x, w, rstd, dh, plan, dx, dx2, dw),
            (dx, dx2, dw),
            5,
            True,
        ),
    }


def main() -> None:
    flush, copy_gbps = setup("row_prefetch_ab")
    print(f"\nRMSNorm backward, {SETTINGS[0]} = (BWD_PREFETCH_BYTES, capped, ")
    print("BWD_CHUNK_ELEMS, BWD_WEIGHT_HELD_ELEMS) shipped; the launch each takes")
    head = f"{'op':<13} {'shape':<11} {'dtype':<8} {'setting':>20} {'block':>6} {'prefetch':>8}"
    print(f"{head} {'cap':>4} {'w/row':>5} {'median us':>10} {'% copy':>7} {'max diff':>9}")
    changes = {}
    for m, n, dtype in CASES:
        for op, (call, outs, elems, has_dh) in _cases(m, n, dtype).items():
            x = outs[0]
            launches = {s: _launch(s, x, has_dh) for s in SETTINGS}
            settings = [s for s in SETTINGS if s == SHIPPED or launches[s] != launches[SHIPPED]]
            timed = compare_settings(call, outs, _set, settings, SHIPPED, flush)
            for setting in settings:
                median, diff = timed[setting]
                launch = launches[setting]
                pct = 100 * elems * m * n * x.element_size() / median / 1e6 / copy_gbps
                row = f"{op:<13} {m}x{n:<6} {str(dtype)[6:]:<8} {str(setting):>20}"
                row += f" {launch.block:>6} {launch.prefetch!s:>8} {launch.max_registers!s:>4}"
                row += f" {launch.weight_each_row!s:>5}"
                print(f"{row} {median * 1e3:>10.1f} {pct:>6.1f}% {diff:>9.2e}")
                changes.setdefault((op, setting), []).append(median / timed[SHIPPED][0] - 1)
        torch.cuda.empty_cache()
    print(
        "\nmean change of the median time against the shipped setting, over the cases it changes:"
    )
    for (op, setting), c in changes.items():
        if setting != SHIPPED:
            print(f"  {op} {setting}: {100 * statistics.mean(c):+.2f}% ({len(c)} cases)")


if __name__ == "__main__":
    main()
