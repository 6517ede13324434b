"""The speed targets are judged from saved figures, and a miss is reported as a miss."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from site_workspace import fixture_result

from kernel_portfolio.bench import targets
from kernel_portfolio.bench.records import ImplOutcome, build_case_record
from kernel_portfolio.bench.suites import Case
from kernel_portfolio.evidence import gate, pages
from kernel_portfolio.evidence.sitebuild import rewrite_claim_links
from kernel_portfolio.results import load, save

ROOT = Path(__file__).resolve().parents[1]


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


def _rows(data, target):
    return [r for r in targets.evaluate(data) if r["target"] == target]


@pytest.mark.parametrize("pct, met", [(91.0, True), (89.9, False)])
def test_share_of_copy_bandwidth(pct, met):
    torch_rec = {"status": "ok", "median_ms": 2.0, "pct_copy": 45.0}
    case = _case(
        "softmax", "fwd", (8192, 8192), "float16", pct, {"torch": 2.0}, {"torch": torch_rec}
    )
    (row,) = _rows({"cases": [case]}, "softmax forward, widths 1K to 32K")
    assert row["value"] == pct and row["threshold"] == 90.0 and row["met"] is met
    assert row["bar"] == "≥ 90.0% of copy" and row["reason"] is None


def test_best_baseline_is_the_fastest_and_near_roof_lowers_the_bar():
    fast = {"status": "ok", "median_ms": 1.02, "pct_copy": 95.0}
    slow = {"status": "ok", "median_ms": 3.0, "pct_copy": 30.0}
    case = _case(
        "rms_norm", "fwd", (32768, 8192), "bfloat16", 93.5,
        {"liger": 0.98, "torch": 2.9}, {"liger": fast, "torch": slow},
    )  # fmt: skip
    (row,) = _rows({"cases": [case]}, targets.EVERY_SHAPE)
    assert row["baseline"] == "liger" and row["threshold"] == targets.NEAR_ROOF_BAR
    assert row["met"]  # 0.98 of a baseline above 90 % of copy bandwidth clears 0.95
    assert row["bar"] == "≥ 0.95× best baseline"
    (floor,) = _rows({"cases": [case]}, targets.FLOOR)
    assert floor["threshold"] == 0.90 and floor["met"] and floor["baseline"] == "liger"
    slow["pct_copy"] = 89.0  # a best baseline under 90 % of copy: the full bar, 0.97
    slow["median_ms"], case["ratios"][1]["median"] = 1.0, 0.96
    (row,) = _rows({"cases": [case]}, targets.EVERY_SHAPE)
    assert row["baseline"] == "torch" and row["threshold"] == 0.97 and not row["met"]


@pytest.mark.parametrize(("m", "ratio", "bar", "met"), [(16, 0.91, 0.90, True),
    (512, 0.89, 0.90, False), (1024, 0.96, 0.97, False), (16384, 0.97, 0.97, True)])  # fmt: skip
def test_gemm_every_shape_bar_is_held_against_cublas_by_rows(m, ratio, bar, met):
    cublas = {"status": "ok", "median_ms": 1.0, "pct_copy": 5.0}
    case = _case("matmul", "fwd", (m, 4096, 4096), "bfloat16", 1.0, {"cublas": ratio},
                 {"cublas": cublas})  # fmt: skip
    (row,) = _rows({"cases": [case]}, targets.EVERY_SHAPE)
    assert (row["baseline"], row["threshold"], row["met"]) == ("cublas", bar, met)
    assert row["bar"] == f"≥ {bar:.2f}× cublas" and row["bar"] in targets.target_texts()


def test_an_unaligned_width_is_held_to_its_aligned_neighbour():
    torch_rec = {"status": "ok", "median_ms": 2.0, "pct_copy": 40.0}
    odd, even, wide = (
        _case("softmax", "fwd", (4096, n), "float16", pct, {"torch": 2.0}, {"torch": torch_rec})
        for n, pct in ((50257, 72.0), (50256, 80.0), (50264, 10.0))
    )
    data = {"cases": [odd, even, wide]}
    (row,) = _rows(data, targets.ALIGNED)  # only the unaligned width has a neighbour
    assert row["case"] == odd["id"] and row["neighbour"] == even["id"]
    assert row["value"] == pytest.approx(0.9) and row["met"]
    assert row["bar"] == "≥ 90.0% of the aligned neighbour's bandwidth"
    assert row["bar"] in targets.target_texts()
    odd["impls"]["ours"]["pct_copy"] = 71.9
    (row,) = _rows(data, targets.ALIGNED)
    assert not row["met"]
    assert _rows({"cases": [odd, wide]}, targets.ALIGNED) == []  # no neighbour in the run


def test_failed_or_missing_figures_never_count_as_met_and_say_why():
    case = _case("softmax", "fwd", (1024, 131072), "float16", None, {}, {})
    case["impls"]["ours"].update(status="failed", reason="rel_error nan")
    (row,) = _rows({"cases": [case]}, "softmax forward, wide rows at 256 MiB per tensor")
    assert row["value"] is None and not row["met"]
    assert row["reason"] == "ours failed: rel_error nan"
    gemm = _case("matmul", "fwd", (4096, 4096, 4096), "float16", None, {}, {})
    gemm["impls"]["cublas"] = {"status": "skipped", "reason": "no cuBLAS here"}
    (row,) = _rows({"cases": [gemm]}, "GEMM, cubes")
    assert not row["met"] and row["reason"] == "cublas skipped: no cuBLAS here"
    few = _case("softmax", "fwd", (4, 32769), "bfloat16", 1.0, {}, {})
    (row,) = _rows({"cases": [few]}, "softmax forward, few wide rows")
    assert row["baseline"] is None and row["reason"] == "none of torch, compile, liger ran"
    assert _rows({"cases": [few]}, targets.EVERY_SHAPE) == []  # no baseline, no every-shape row


def test_every_target_names_a_known_stat_and_a_positive_bar():
    for t in targets.TARGETS:
        assert t.stat in ("pct_copy", "speedup") and t.threshold > 0
        assert (t.stat == "speedup") == (t.baseline is not None)
        assert targets.bar_text(t.stat, t.threshold, t.baseline) in targets.target_texts()


def test_shortfall_is_in_the_bar_unit_and_only_for_a_miss():
    assert targets.shortfall_text("pct_copy", 87.3, 90.0) == "2.7 points"
    assert targets.shortfall_text("speedup", 0.93, 1.0) == "0.07×"
    assert targets.shortfall_text("speedup", 0.998, 1.0) == "< 0.01×"
    assert targets.shortfall_text("pct_copy", 89.99, 90.0) == "< 0.1 points"
    with pytest.raises(ValueError, match="meets the bar"):
        targets.shortfall_text("pct_copy", 90.0, 90.0)
    with pytest.raises(ValueError, match="stat='tflops'"):
        targets.bar_text("tflops", 1.0)


def _host(value):
    return {"host_us": {"value": value, "unit": "us"}}


def test_cost_targets_hold_ours_minus_the_baseline_to_at_most_the_bar():
    torch_rec = {"status": "ok", "median_ms": 2.0, "peak_mem_bytes": 4096, "metrics": _host(8.0)}
    liger_rec = {"status": "ok", "median_ms": 1.5, "peak_mem_bytes": 1024, "metrics": {}}
    case = _case(
        "rms_norm", "fwd", (512, 4096), "float16", 50.0, {"torch": 2.0, "liger": 1.5},
        {"torch": torch_rec, "liger": liger_rec},
    )  # fmt: skip
    case["impls"]["ours"].update(peak_mem_bytes=2048, metrics=_host(23.0))
    (host,) = _rows({"cases": [case]}, targets.HOST_COST)
    assert host["baseline"] == "torch" and host["value"] == 15.0 and host["met"]  # 15 µs: met
    assert host["bar"] == "within 15.0\u202fµs of torch" and host["reason"] is None
    (memory,) = _rows({"cases": [case]}, targets.PEAK_MEMORY)
    assert memory["baseline"] == "liger"  # the fastest baseline, not the leanest
    assert memory["value"] == 1024 and not memory["met"]
    assert memory["bar"] == "no more than the best baseline's"
    # No row where ours or the baseline saved no such cost: neither met nor missed.
    case["impls"]["torch"]["metrics"] = {}
    case["impls"]["liger"]["peak_mem_bytes"] = None
    assert _rows({"cases": [case]}, targets.HOST_COST) == []
    assert _rows({"cases": [case]}, targets.PEAK_MEMORY) == []


def test_cost_excess_is_in_the_cost_unit_and_only_for_a_miss():
    assert targets.shortfall_text("metrics.host_us", 52.0, 15.0) == "37.0\u202fµs"
    assert targets.shortfall_text("peak_mem_bytes", 2 << 20, 0.0) == "2.00\u202fMiB"
    assert targets.shortfall_text("peak_mem_bytes", 512, 0.0) == "512\u202fB"
    assert targets.meets("metrics.host_us", 15.0, 15.0) and not targets.meets("speedup", 0.9, 1.0)
    with pytest.raises(ValueError, match="meets the bar"):
        targets.shortfall_text("peak_mem_bytes", -4096, 0.0)
    with pytest.raises(ValueError, match="baseline=None"):
        targets.bar_text("metrics.host_us", 15.0)
    for cost in targets.COST_TARGETS:
        assert cost.stat in targets.AT_MOST and cost.threshold >= 0
        assert targets.bar_text(cost.stat, cost.threshold, cost.baseline) in targets.target_texts()


def test_a_bar_is_a_bar_only_against_its_baseline():
    assert targets.is_bar("metrics.host_us", 15.0, "torch")
    assert not targets.is_bar("metrics.host_us", 15.0, "liger")
    assert targets.is_bar("peak_mem_bytes", 0.0, "compile")  # best: any of the baselines
    assert not targets.is_bar("peak_mem_bytes", 0.0, "cublas")
    assert not targets.is_bar("peak_mem_bytes", 0.0, None)
    assert targets.is_bar("pct_copy", 90.0) and not targets.is_bar("pct_copy", 90.0, "torch")


def test_cost_in_another_unit_is_refused():
    ours = {"status": "ok", "median_ms": 1.0, "metrics": {"host_us": {"value": 1.0, "unit": "ms"}}}
    theirs = {"status": "ok", "median_ms": 1.0, "metrics": _host(8.0)}
    case = _case("add", "fwd", (65536,), "float16", 1.0, {}, {"torch": theirs})
    case["impls"]["ours"] = ours
    with pytest.raises(ValueError, match="not 'us'"):
        targets.target_value({"cases": [case]}, case["id"], "metrics.host_us", "torch")
    with pytest.raises(ValueError, match="baseline= is missing"):
        targets.target_value({"cases": [case]}, case["id"], "metrics.host_us")


# ------------------------------------------------ the Benchmarks page and the gate

RESULT_ID = "fixture/default"
#: The URL of its Benchmarks page, which the claims link from.
PAGE_URL = f"benchmarks/{RESULT_ID}/"
SOFTMAX_MET = "softmax/fwd/8192x8192/float16"  # ours at 91 % of copy: bar 90 %, met
SOFTMAX_MISS = "softmax/fwd/32768x8192/float16"  # ours at 88 %: misses by 2.0 points
GEMM_MISS = "matmul/fwd/4096x4096x4096/bfloat16"  # ours at 0.95 of cuBLAS: misses by 0.05
RMS_FAILED = "rms_norm/fwd/8192x8192/bfloat16"  # ours failed: not met, with the reason
# Costs per call against torch: (ours' host_us, torch's, ours' peak memory, torch's).
# SOFTMAX_MET: 12 µs over torch's host cost (bar 15 µs, met), the same peak memory (met);
# SOFTMAX_MISS: 52 µs over (37.0 µs over the bar), 2 MiB more peak memory than torch.
COSTS = {SOFTMAX_MET: (20.0, 8.0, 1 << 20, 1 << 20), SOFTMAX_MISS: (60.0, 8.0, 3 << 20, 1 << 20)}


def _known_result(tmp_path: Path) -> Path:
    """A valid result whose ours sits at known distances from its bars."""
    data = fixture_result(ROOT, suite="smoke")  # header and copy bandwidth; cases replaced
    copy_gbps = data["copy_bandwidth"]["gbps"]
    visits, samples = data["timing"]["visits"], data["timing"]["samples_per_visit"]

    def timed(ms: float, peak: int = 1 << 20, host_us: float | None = None) -> ImplOutcome:
        metrics = {} if host_us is None else {"host_us": {"value": host_us, "unit": "us"}}
        return ImplOutcome("ok", None, 1e-4, [[ms] * samples] * visits, peak, metrics)

    def at_pct(case: Case, pct: float) -> float:
        return case.bytes / (pct / 100.0 * copy_gbps * 1e6)

    cases = []
    for case_id, pct in ((SOFTMAX_MET, 91.0), (SOFTMAX_MISS, 88.0)):
        op, mode, shape, dtype = case_id.split("/")
        case = Case(op, mode, tuple(map(int, shape.split("x"))), dtype, "events", ("ours", "torch"))
        ours_ms = at_pct(case, pct)
        host, torch_host, peak, torch_peak = COSTS[case_id]
        ours, torch_ = timed(ours_ms, peak, host), timed(2 * ours_ms, torch_peak, torch_host)
        cases.append(({"ours": ours, "torch": torch_}, case))
    gemm = Case("matmul", "fwd", (4096, 4096, 4096), "bfloat16", "events", ("ours", "cublas"))
    cases.append(({"ours": timed(0.2), "cublas": timed(0.19)}, gemm))
    rms = Case("rms_norm", "fwd", (8192, 8192), "bfloat16", "events", ("ours", "torch"))
    failed = ImplOutcome("failed", "rel_error 0.5 > 0.016", 0.5)
    cases.append(({"ours": failed, "torch": timed(0.1)}, rms))
    # No source dependencies: the cases never go stale in a folder without the sources.
    data["cases"] = [
        build_case_record(case, outcomes, copy_gbps=copy_gbps, cache="cold", sources={})
        for outcomes, case in cases
    ]
    data["suite"] = "default"
    path = tmp_path / "results" / f"{RESULT_ID}.json"
    save(data, path)
    return path


def _section(path: Path) -> str:
    """The built Speed targets section, claim links rewritten as the site build does."""
    data = load(path).data
    (page,) = [
        f.content
        for f in pages.benchmarks_pages("fixture", [(RESULT_ID, data, load(path).frame())])
        if f.src_uri == f"benchmarks/{RESULT_ID}.md"
    ]
    start = page.index("## Speed targets")
    section = page[start : page.index("\n## ", start + 3)]
    return rewrite_claim_links(section, PAGE_URL)


def _row(section: str, case_id: str, target: str | None = None) -> str:
    rows = re.findall(r"<tr>.*?</tr>", section, re.S)
    (row,) = [r for r in rows if f"<code>{case_id}</code>" in r and (not target or target in r)]
    return row


def _judge(section: str, root: Path) -> list[str]:
    scan = gate.scan_page(PAGE_URL, f"<body>{section}</body>")
    return [str(f) for f in gate.judge([scan], root).failures]


@pytest.fixture
def known(tmp_path):
    return tmp_path, _section(_known_result(tmp_path))


def test_page_shows_each_target_with_claims_bars_and_misses(known):
    root, section = known
    met = _row(section, SOFTMAX_MET, "widths 1K to 32K")
    assert 'class="kp-claim"' in met and 'data-stat="pct_copy"' in met
    assert 'href="../../../evidence/fixture/default/#softmax-fwd-8192x8192-float16"' in met
    assert '<span class="kp-target">≥ 90.0% of copy</span>' in met
    assert "<td>yes</td><td></td>" in met
    miss = _row(section, SOFTMAX_MISS, "widths 1K to 32K")
    assert re.search(r'<a class="kp-shortfall" href="../../../evidence/fixture/default/#softmax'
                     r'-fwd-32768x8192-float16"[^>]*>2.0 points</a>', miss)  # fmt: skip
    assert "<td>no</td>" in miss
    gemm = _row(section, GEMM_MISS, "GEMM, cubes")
    assert " over cublas" in gemm and '<span class="kp-target">≥ 1.00× cublas</span>' in gemm
    assert ">0.05×</a>" in gemm
    failed = _row(section, RMS_FAILED, "RMSNorm forward")
    assert "<td>no: ours failed: rel_error 0.5 &gt; 0.016</td><td>—</td>" in failed
    assert "Named targets, per case: 1 met, 3 not met." in section
    every = _row(section, SOFTMAX_MISS, "best baseline</span>")  # ours is twice torch's speed
    assert '<span class="kp-target">≥ 0.97× best baseline</span>' in every
    gemm_every = _row(section, GEMM_MISS, "≥ 0.97× cublas</span>")  # from 1024 rows on
    assert "<td>cublas</td>" in gemm_every and ">0.02×</a>" in gemm_every
    assert "Every shape" in section and ": 2 met, 2 not met." in section
    assert "No case below the floor" in section and "1 of 4 cases below it, these:" in section
    assert "falls under: add at 256 MiB per operand; row sum, large; " in section
    assert _judge(section, root) == []


def test_page_shows_each_cost_with_both_claims_the_bar_and_the_excess(known):
    root, section = known
    assert section.count(": 1 met, 1 not met.") == 2  # host cost, peak memory
    host_met = _row(section, SOFTMAX_MET, "host_us")
    claims = re.findall(
        r'data-stat="metrics\.host_us" data-impl="(\w+)"[^>]*>([^<]+)</a>', host_met
    )
    assert claims == [("ours", "20.0\u202fµs"), ("torch", "8.00\u202fµs")]
    assert '<span class="kp-target">within 15.0\u202fµs of torch</span>' in host_met
    assert "<td>yes</td><td></td>" in host_met
    host_miss = _row(section, SOFTMAX_MISS, "host_us")
    excess = (
        r'<a class="kp-shortfall"[^>]*data-stat="metrics\.host_us" data-impl="ours" '
        r'data-baseline="torch" data-threshold="15\.0">37\.0\u202fµs</a>'
    )
    assert re.search(excess, host_miss)
    memory = _row(section, SOFTMAX_MISS, "peak_mem_bytes")
    assert "<td>torch</td>" in memory and ">3.00\u202fMiB</a>" in memory
    assert "no more than the best baseline&#x27;s</span>" in memory
    assert re.search(r'data-threshold="0\.0">2\.00\u202fMiB</a></td>', memory)
    assert "<th>its peak memory</th>" in section and "<th>torch: host cost</th>" in section
    assert _judge(section, root) == []


@pytest.mark.parametrize(
    ("old", "new", "complaint"),
    [
        # a target row whose value is typed instead of quoted
        (r'<a class="kp-claim"[^>]*>91\.0%</a>', "91.0%", "hand-typed table figure '91.0%'"),
        # a measured figure dressed up as a target
        (r'<span class="kp-target">≥ 90\.0% of copy</span>', '<span class="kp-target">91.0%</span>',
         "target '91.0%' is not a bar"),
        # a bar that is not one of the targets
        (r"≥ 90\.0% of copy</span>", "≥ 80.0% of copy</span>", "target '≥ 80.0% of copy'"),
        # a bar typed without its markup
        (r'<span class="kp-target">(≥ 90\.0% of copy)</span>', r"\1",
         "hand-typed percent figure '90.0%'"),
        # an edited shortfall, and one against a bar no target sets
        (r">2\.0 points</a>", ">1.0 points</a>", "tampered"),
        (r'data-threshold="90.0">2.0 points', 'data-threshold="89.0">1.0 points',
         "not measured against a bar"),
        # a shortfall typed without its markup
        (r'<a class="kp-shortfall"[^>]*>2\.0 points</a>', "2.0 points",
         "hand-typed table figure '2.0 points'"),
        # costs typed instead of quoted: a time, and a size under a "peak memory" header
        (r'<a class="kp-claim"[^>]*>60\.0\u202fµs</a>', "60.0\u202fµs",
         "hand-typed time figure '60.0 µs'"),
        (r'<a class="kp-claim"[^>]*>3\.00\u202fMiB</a>', "3.00\u202fMiB",
         "hand-typed table figure '3.00 MiB'"),
        # a tampered peak memory claim, by its text and by its value
        (r">3\.00\u202fMiB</a>", ">2.00\u202fMiB</a>", "tampered"),
        (r'data-value="3145728\.0"', 'data-value="2097152.0"', "tampered"),
        # cost bars that are not targets
        (r"within 15\.0\u202fµs of torch</span>", "within 60.0\u202fµs of torch</span>",
         "target 'within 60.0 µs of torch' is not a bar"),
        (r"no more than the best baseline&#x27;s</span>",
         "no more than twice the best baseline&#x27;s</span>", "is not a bar"),
        # edited excesses, one against a bar no target sets, one against another baseline
        (r">37\.0\u202fµs</a>", ">30.0\u202fµs</a>", "tampered"),
        (r">2\.00\u202fMiB</a></td>", ">1.00\u202fMiB</a></td>", "tampered"),
        (r'data-threshold="15.0">37\.0', 'data-threshold="45.0">7.00',
         "not measured against a bar"),
        (r'data-baseline="torch" (data-threshold="15.0")', r'data-baseline="liger" \1',
         "not measured against a bar"),
        # an excess typed without its markup
        (r'<a class="kp-shortfall"[^>]*>2\.00\u202fMiB</a>', "2.00\u202fMiB",
         "hand-typed table figure '2.00 MiB'"),
    ],
)  # fmt: skip
def test_gate_rejects_broken_target_rows(known, old, new, complaint):
    root, section = known
    broken, n = re.subn(old, new, section, count=1)
    assert n == 1
    failures = _judge(broken, root)
    assert any(complaint in f for f in failures), failures
