"""A/B of the softmax looped forward's warps on peeled rows (rows not 16 bytes apart).

About two minutes in one process; prints a table and writes nothing else::

    python scripts/softmax_warps_ab.py > results/<gpu>/checks/softmax-warps-ab-<UTC stamp>.log

The models suite ran the bfloat16 softmax forward at 4096x50257 at 0.87-0.94
of its aligned neighbour's bandwidth across runs of the same code, the
float16 one at 0.94-0.96. This times the forward launcher
(``ops.softmax._launch_forward``) at peeled widths and 1024 to 16384 rows,
in both half dtypes, at the plan ``_forward_plan`` chooses (``w``) and at
the same plan with half and a quarter of its warps (at least 4), beside the
chosen plan at the aligned neighbour width (``N`` rounded down to a multiple
of 8). Each call with a cold L2 behind a device spin, visited in alternating
order (six visits of twenty samples); a ratio is the median over visits of
each visit's ratio (paired), against ``w``. The settings' outputs must agree
to rounding.
"""

from __future__ import annotations

import dataclasses
import statistics

import torch
from copy_floor import SAMPLES, VISITS, setup

from kernel_portfolio.bench import timing
from kernel_portfolio.ops import softmax

ROWS = (1024, 4096, 16384)
WIDTHS = (50257, 51865, 65537, 151937)
DTYPES = (torch.bfloat16, torch.float16)
MAX_ELEMENTS = 1 << 30
SETTINGS = {"w": 1, "w/2": 2, "w/4": 4}


def _calls(m: int, n: int, dtype: torch.dtype) -> dict:
    """Per setting: the launcher call on one shared input, its output and its plan."""
    x = torch.randn(m, n, device="cuda", dtype=dtype)
    auto = softmax._forward_plan(x, "auto")
    runs = {}
    for name, divide in SETTINGS.items():
        plan = dataclasses.replace(auto, num_warps=max(4, auto.num_warps // divide))
        y = torch.empty_like(x)
        runs[name] = (_launch(x, plan, y), y, plan)
    return runs


def _launch(x, plan, y):
    return lambda: softmax._launch_forward(x, y, plan)


def main() -> None:
    flush, copy_gbps = setup()
    names = [*SETTINGS, "aligned"]
    print("softmax forward; us per setting, then each over w (paired), "
          "then the share of the aligned neighbour's bandwidth at w and at the best")  # fmt: skip
    print(f"{'dtype':<9} {'rows x cols':>13} {'plan (w)':>16} "
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
                label = f"{plan.kind} {plan.block} w{plan.num_warps}"
                pct = 100 * 2 * m * n * x_bytes(dtype) / (us["w"] * 1e-6) / 1e9 / copy_gbps
                print(f"{str(dtype)[6:]:<9} {f'{m}x{n}':>13} {label:>16} "
                      + " ".join(f"{us[k]:>9.1f}" for k in names))  # fmt: skip
                print(f"{'':<9} {'':>13} {'speed-up':>16} "
                      + " ".join(f"{ratio[k]:>9.3f}" for k in names)
                      + f"  w {pct:.1f}% of copy; share of aligned: w {share:.3f},"
                      f" best {best * share:.3f}")  # fmt: skip
                del runs, calls
                torch.cuda.empty_cache()


def x_bytes(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


if __name__ == "__main__":
    main()
