"""The speed targets are judged from saved figures, and a miss is reported as a miss."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from kernel_portfolio.bench import targets


def _case(op, mode, shape, dtype, ours_pct, ratios, baselines):
    impls = {"ours": {"status": "ok", "pct_copy": ours_pct, "median_ms": 1.0}}
    impls.update(baselines)
    return {
        "id": f"{op}/{mode}/{'x'.join(map(str, shape))}/{dtype}",
        "op": op,
        "mode": mode,
        "shape": list(shape),
        "dtype": dtype,
        "impls": impls,
        "ratios": [{"impl": "ours", "baseline": b, "median": m} for b, m in ratios.items()],
    }


def _result(*cases):
    return SimpleNamespace(data={"cases": list(cases)})


def _rows(result, target):
    return [r for r in targets.evaluate(result) if r["target"] == target]


@pytest.mark.parametrize("pct, met", [(91.0, True), (89.9, False)])
def test_share_of_copy_bandwidth(pct, met):
    torch_rec = {"status": "ok", "median_ms": 2.0, "pct_copy": 45.0}
    case = _case(
        "softmax", "fwd", (8192, 8192), "float16", pct, {"torch": 2.0}, {"torch": torch_rec}
    )
    (row,) = _rows(_result(case), "softmax forward, widths 1K to 32K")
    assert row["value"] == pct and row["threshold"] == 90.0 and row["met"] is met


def test_best_baseline_is_the_fastest_and_near_roof_lowers_the_bar():
    fast = {"status": "ok", "median_ms": 1.02, "pct_copy": 95.0}
    slow = {"status": "ok", "median_ms": 3.0, "pct_copy": 30.0}
    case = _case(
        "rms_norm", "fwd", (32768, 8192), "bfloat16", 93.5,
        {"liger": 0.98, "torch": 2.9}, {"liger": fast, "torch": slow},
    )  # fmt: skip
    (row,) = _rows(_result(case), "every shape: best baseline")
    assert row["baseline"] == "liger" and row["threshold"] == targets.NEAR_ROOF_BAR
    assert row["met"]  # 0.98 of a baseline above 90 % of copy bandwidth clears 0.97


def test_failed_or_missing_figures_never_count_as_met():
    case = _case("softmax", "fwd", (64, 131072), "float16", None, {}, {})
    case["impls"]["ours"]["status"] = "failed"
    (row,) = _rows(_result(case), "softmax forward, wide rows")
    assert row["value"] is None and not row["met"]


def test_every_target_names_a_known_stat_and_a_positive_bar():
    for t in targets.TARGETS:
        assert t.stat in ("pct_copy", "speedup") and t.threshold > 0
        assert (t.stat == "speedup") == (t.baseline is not None)
