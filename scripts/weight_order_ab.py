"""A/B of the RMSNorm looped forward's weight reads at widths whose rows are not 16 bytes apart.

About two minutes in one process; prints a table and writes nothing else::

    python scripts/weight_order_ab.py > results/<gpu>/checks/weight-order-ab-<UTC stamp>.log

The looped forward of a peeled row reads its weight from one of ``VEC``
shifted copies (``rms_norm.SHIFT_W_MIN_ELEMENTS``), chosen by the row's head,
and runs at 0.88 of its aligned neighbour's bandwidth at 4096x50257 bfloat16,
where softmax (no weight) runs at 0.97. Settings, all bitwise equal:

* ``shipped``: rows ``p, p + P, ...`` a program, so at any time the programs
  read all ``VEC`` copies;
* ``group``: rows visited grouped by head (``rms_norm.GROUP_HEADS``), so one
  or two copies are read at a time;
* ``wlast``: the weight loaded with ``evict_last`` (``rms_norm.LOOPED_W_EVICT``),
  beside the first pass's ``evict_last`` rows;
* ``group+wlast``: both;

beside the shipped launcher at the aligned neighbour width (``N`` rounded down
to a multiple of 8), and, as a diagnostic, both widths without a weight. Each
call with a cold L2 behind a device spin, visited in alternating order (six
visits of twenty samples); ratios are the median over visits of each visit's
ratio of medians (paired), against ``shipped`` at the same width.
"""

from __future__ import annotations

import statistics

import torch
from copy_floor import SAMPLES, VISITS, setup

from kernel_portfolio import plans
from kernel_portfolio.bench import timing
from kernel_portfolio.ops import rms_norm

ROWS = (1024, 4096, 16384)
WIDTHS = (30522, 32769, 50257, 51865, 65537, 151937)
MAX_ELEMENTS = 1 << 30
SETTINGS = {
    "shipped": (False, ""),
    "group": (True, ""),
    "wlast": (False, "evict_last"),
    "group+wlast": (True, "evict_last"),
}


def _call(m: int, n: int, weight: bool):
    x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, device="cuda", dtype=torch.bfloat16) if weight else None
    plan = plans.choose_for(x)
    y = torch.empty_like(x)
    return (lambda: rms_norm._forward(x, None, w, 1e-6, plan, y, None, None)), y, plan


def _with(setting, call):
    group, evict = setting

    def run():
        rms_norm.GROUP_HEADS, rms_norm.LOOPED_W_EVICT = group, evict
        call()

    return run


def _paired(calls: dict, flush, lead_ms: float) -> dict:
    """Per name: (median ms over all samples, per-visit medians)."""
    names = list(calls)
    visits = {name: [] for name in names}
    for visit in range(VISITS):
        for name in names if visit % 2 == 0 else names[::-1]:
            visits[name].append(
                statistics.median(
                    timing.time_events(calls[name], SAMPLES, flush=flush, lead_ms=lead_ms)
                )
            )
    return visits


def _paired_ratio(base: list[float], other: list[float]) -> float:
    """Median over visits of ``base / other``: above 1, ``other`` ran faster."""
    return statistics.median(b / o for b, o in zip(base, other, strict=True))


def main() -> None:
    flush, copy_gbps = setup()
    shipped = SETTINGS["shipped"]
    names = [*SETTINGS, "aligned", "noweight", "noweight aligned"]
    print("rms_norm forward, bfloat16; us per setting; then each over shipped (paired); "
          "then %copy of shipped, aligned, noweight, noweight aligned")  # fmt: skip
    print(f"{'rows x cols':>14} {'plan':>14} " + " ".join(f"{k:>11}" for k in names))
    for n in WIDTHS:
        for m in ROWS:
            if m * n > MAX_ELEMENTS:
                continue
            call, y, plan = _call(m, n, True)
            got = []
            for setting in SETTINGS.values():
                y.fill_(float("nan"))
                _with(setting, call)()
                got.append(y.clone())
            if not all(torch.equal(got[0], g) for g in got[1:]):
                raise SystemExit(f"{m}x{n}: the settings' outputs differ")
            del got
            aligned, _, _ = _call(m, n // 8 * 8, True)
            bare, _, _ = _call(m, n, False)
            bare_aligned, _, _ = _call(m, n // 8 * 8, False)
            calls = {k: _with(s, call) for k, s in SETTINGS.items()}
            calls["aligned"] = _with(shipped, aligned)
            calls["noweight"] = _with(shipped, bare)
            calls["noweight aligned"] = _with(shipped, bare_aligned)
            lead = timing.lead_for(call)
            visits = _paired(calls, flush, lead)
            rms_norm.GROUP_HEADS, rms_norm.LOOPED_W_EVICT = shipped
            us = {k: statistics.median(v) * 1e3 for k, v in visits.items()}
            ratio = {k: _paired_ratio(visits["shipped"], visits[k]) for k in SETTINGS}
            moved = {k: 2 * m * (n // 8 * 8 if "aligned" in k else n) * 2 for k in names}
            pct = {k: 100 * moved[k] / (us[k] * 1e-6) / 1e9 / copy_gbps for k in names}
            share = pct["shipped"] / pct["aligned"]
            label = f"{plan.kind} {plan.block} w{plan.num_warps}"
            print(f"{f'{m}x{n}':>14} {label:>14} " + " ".join(f"{us[k]:>11.1f}" for k in names))
            print(
                f"{'':>14} {'speed-up':>14} "
                + " ".join(f"{ratio[k]:>11.3f}" for k in SETTINGS)
                + "   %copy "
                + " ".join(f"{pct[k]:.1f}" for k in ("shipped", *names[len(SETTINGS) :]))
                + f"  share of aligned: shipped {share:.3f}"
                + f" best {max(ratio.values()) * share:.3f}"
                + f" noweight {pct['noweight'] / pct['noweight aligned']:.3f}"
            )
            del call, y, aligned, bare, bare_aligned, calls
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
