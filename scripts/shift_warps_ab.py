"""A/B of the RMSNorm looped forward's warps on peeled rows (rows not 16 bytes apart).

About three minutes in one process; prints a table and writes nothing else::

    python scripts/shift_warps_ab.py > results/<gpu>/checks/shift-warps-ab-<UTC stamp>.log

The chunk-rules sweep timed the RMSNorm forward of 1024 rows of 32769 and
50257 float16 columns 10% faster in a looped plan of 16384 columns over 8
warps than over 16, the plan its rule chooses; at aligned widths (65536,
131072) 16 warps won by as much, and the softmax forward at 50257 ran level.
This times the forward launcher (``ops.rms_norm._forward``, with a weight,
no residual) at peeled widths and 132 to 16384 rows, in both half dtypes, at
the plan ``auto`` chooses (``w``) and at the same plan with half and a
quarter of its warps (at least 4), beside ``auto`` at the aligned neighbour
width (``N`` rounded down to a multiple of 8). Each call with a cold L2
behind a device spin, visited in alternating order (six visits of twenty
samples); a ratio is the median over visits of each visit's ratio (paired),
against ``w``. The settings' outputs must agree to rounding.
"""

from __future__ import annotations

import dataclasses
import statistics

import torch
from copy_floor import SAMPLES, VISITS, setup

from kernel_portfolio import plans
from kernel_portfolio.bench import timing
from kernel_portfolio.ops import rms_norm

ROWS = (132, 512, 1024, 4096, 16384)
WIDTHS = (30522, 32769, 50257, 51865, 65537, 151937)
DTYPES = (torch.bfloat16, torch.float16)
MAX_ELEMENTS = 1 << 30
SETTINGS = {"w": 1, "w/2": 2, "w/4": 4}


def _calls(m: int, n: int, dtype: torch.dtype) -> dict:
    """Per setting: the launcher call on one shared input, its output and its plan."""
    x = torch.randn(m, n, device="cuda", dtype=dtype)
    w = torch.randn(n, device="cuda", dtype=dtype)
    auto = plans.choose_for(x)
    runs = {}
    for name, divide in SETTINGS.items():
        plan = dataclasses.replace(auto, num_warps=max(4, auto.num_warps // divide))
        y = torch.empty_like(x)
        runs[name] = (_launch(x, w, plan, y), y, plan)
    return runs


def _launch(x, w, plan, y):
    return lambda: rms_norm._forward(x, None, w, 1e-6, plan, y, None, None)


def main() -> None:
    flush, copy_gbps = setup()
    names = [*SETTINGS, "aligned"]
    print("rms_norm forward with a weight; us per setting, then each over w (paired), "
          "then the share of the aligned neighbour's bandwidth at w and at the best")  # fmt: skip
    print(f"{'dtype':<9} {'rows x cols':>13} {'plan (w)':>16} {'shift':>5} "
          + " ".join(f"{k:>9}" for k in names))  # fmt: skip
    for dtype in DTYPES:
        for n in WIDTHS:
            for m in ROWS:
                if m * n > MAX_ELEMENTS:
                    continue
                runs = _calls(m, n, dtype)
                ys = []
                for call, y, _ in runs.values():
                    y.fill_(float("nan"))
                    call()
                    ys.append(y.clone())
                # Fewer warps reduce a row in another order: equal to rounding.
                if not all(torch.allclose(ys[0], y, rtol=1e-2, atol=1e-2) for y in ys[1:]):
                    raise SystemExit(f"{dtype} {m}x{n}: the settings' outputs differ")
                del ys
                calls = {k: r[0] for k, r in runs.items()}
                calls["aligned"] = _calls(m, n // 8 * 8, dtype)["w"][0]
                lead = timing.lead_for(calls["w"])
                visits = {k: [] for k in names}
                for visit in range(VISITS):
                    for k in names if visit % 2 == 0 else names[::-1]:
                        t = timing.time_events(calls[k], SAMPLES, flush=flush, lead_ms=lead)
                        visits[k].append(statistics.median(t))
                us = {k: statistics.median(v) * 1e3 for k, v in visits.items()}
                ratio = {
                    k: statistics.median(a / b for a, b in zip(visits["w"], visits[k], strict=True))
                    for k in names
                }
                # Same bytes a column, so bandwidth shares compare as columns over time.
                share = (n / us["w"]) / ((n // 8 * 8) / us["aligned"])
                best = max(ratio[k] for k in SETTINGS)
                plan = runs["w"][2]
                shift = m * n >= rms_norm.SHIFT_W_MIN_ELEMENTS
                label = f"{plan.kind} {plan.block} w{plan.num_warps}"
                pct = 100 * 2 * m * n * x_bytes(dtype) / (us["w"] * 1e-6) / 1e9 / copy_gbps
                print(f"{str(dtype)[6:]:<9} {f'{m}x{n}':>13} {label:>16} {shift!s:>5} "
                      + " ".join(f"{us[k]:>9.1f}" for k in names))  # fmt: skip
                print(f"{'':<9} {'':>13} {'speed-up':>16} {'':>5} "
                      + " ".join(f"{ratio[k]:>9.3f}" for k in names)
                      + f"  w {pct:.1f}% of copy; share of aligned: w {share:.3f},"
                      f" best {best * share:.3f}")  # fmt: skip
                del runs, calls
                torch.cuda.empty_cache()


def x_bytes(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


if __name__ == "__main__":
    main()
