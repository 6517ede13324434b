"""The two case-study sweeps: specialization and chunk rules.

CPU tests of their pure logic (request stream, Triton cache-key prediction,
policy matching and verdicts, PTX load widths, output checks; the chunk-rule
fit, its scoring and its result file), each checker also shown rejecting a
broken input, and interpreter dry runs (tiny sizes, ``TRITON_INTERPRET=1``)
showing that each script writes a schema-valid result.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
import sys
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import chunk_rules_fit as fitting  # noqa: E402
import chunk_rules_sweep as chunk_sweep  # noqa: E402
import copy_floor  # noqa: E402
import specialization_sweep as spec  # noqa: E402
from sweep_support import Counts  # noqa: E402

from kernel_portfolio.bench.records import (  # noqa: E402
    ImplOutcome,
    build_result,
    copy_record,
    quantiles,
)
from kernel_portfolio.contracts import interpreter_enabled  # noqa: E402
from kernel_portfolio.results import load, validate  # noqa: E402
from kernel_portfolio.results.schema import ResultError  # noqa: E402

SM = 132


@pytest.fixture(scope="module")
def modules():
    return {name: spec.load_policy(name) for name in spec.POLICIES}


# ----------------------------------------------------------- specialization


def test_request_stream_is_seeded_and_in_range():
    kw = {"hiddens": (4096, 4104), "seqs": (1, 8), "max_batch": 64}
    a, b = spec.request_stream(50, 3, **kw), spec.request_stream(50, 3, **kw)
    assert a == b != spec.request_stream(50, 4, **kw)
    assert all(r.hidden in (4096, 4104) and 1 <= r.rows <= 64 * 8 for r in a)
    with pytest.raises(ValueError, match="n must be"):
        spec.request_stream(-1, 0, **kw)
    with pytest.raises(ValueError, match="non-empty"):
        spec.request_stream(5, 0, hiddens=(), seqs=(1,), max_batch=4)


def _launches(kernel: str, requests, scale):
    buffers = spec.StreamBuffers.allocate(requests, scale.hiddens, "cpu", None)
    return [
        spec.make_launch(kernel, buffers.tensors(r)[kernel], sm_count=SM, scale=scale)
        for r in requests
    ]


def test_predicted_compiles_follow_the_arithmetic(modules):
    """Triton's cache key, computed without a GPU, against counts worked out by hand.

    Widths 64 (block 64), 72 (block 128, not a multiple of 16), 80 and 128 (block
    128, multiples of 16); every width is a multiple of 8, so VEC is always 8.
    """
    scale = spec.DRY
    requests = [spec.Request(r, h) for r, h in itertools.product((1, 3, 5), (64, 72, 80, 128))]
    expected = {
        "constexpr": 12,  # one per (rows, width)
        "runtime": 2,  # one per BLOCK
        "default-spec": 3,  # per BLOCK and per width divisible by 16 or not
        "vec-hint": 2,  # per BLOCK and VEC
    }
    for kernel in ("softmax", "rms_norm"):
        launches = _launches(kernel, requests, scale)
        got = {p: spec.predicted_compiles(m, launches) for p, m in modules.items()}
        assert got == expected, kernel
    # The GEMM has no BLOCK that follows the width: runtime needs one binary.
    launches = _launches("matmul", requests, scale)
    got = {p: spec.predicted_compiles(m, launches) for p, m in modules.items()}
    assert got == {"constexpr": 12, "runtime": 1, "default-spec": 2, "vec-hint": 1}


def test_cache_key_tells_launches_apart(modules):
    scale = spec.DRY
    one, other = _launches("softmax", [spec.Request(2, 64), spec.Request(2, 72)], scale)
    again = _launches("softmax", [spec.Request(2, 64)], scale)[0]
    key = spec.cache_key(modules["default-spec"], one)
    assert key == spec.cache_key(modules["default-spec"], again)
    assert key != spec.cache_key(modules["default-spec"], other)


@triton.jit(do_not_specialize=["n_rows", "stride_xm", "stride_ym"])
def _mixed_softmax_kernel(
    x_ptr, y_ptr, n_rows, n_cols: tl.constexpr, stride_xm, stride_ym, BLOCK: tl.constexpr
):
    pass


def test_each_policy_matches_itself_and_a_mixed_kernel_matches_none(modules):
    for policy, module in modules.items():
        for kernel in spec.KERNELS:
            fn = getattr(module, f"{kernel}_kernel")
            assert spec.matching_policies(fn, kernel, modules) == [policy]
    assert spec.matching_policies(_mixed_softmax_kernel, "softmax", modules) == []


def test_specialisation_table_reads_declarations(modules):
    table = spec.specialisation_table(modules["vec-hint"].softmax_kernel)
    assert table == {
        "n_rows": "do_not_specialize",
        "n_cols": "do_not_specialize",
        "stride_xm": "do_not_specialize",
        "stride_ym": "do_not_specialize",
        "BLOCK": "constexpr",
        "VEC": "constexpr",
    }
    assert spec.specialisation_table(modules["default-spec"].rms_norm_kernel)["n_cols"] == "default"


def test_ptx_load_widths():
    ptx = "\n".join(
        [
            "\tld.global.v4.b32 { %r1, %r2, %r3, %r4 }, [ %rd1 + 0 ];",
            "\t@%p1 ld.global.b16 { %rs1 }, [ %rd2 + 0 ];",
            "\t@%p2 ld.global.v2.b32 { %r5, %r6 }, [ %rd3 + 0 ];",
            "\tcp.async.cg.shared.global [ %r7 + 0 ], [ %rd4 + 0 ], 0x10, %r8;",
            "\tcp.async.cg.shared.global [ %r9 + 0 ], [ %rd5 + 0 ], 16, %r10;",
            "\tst.global.v4.b32 [ %rd6 + 0 ], { %r1, %r2, %r3, %r4 };",
        ]
    )
    assert spec.ptx_load_widths(ptx) == {16: 3, 2: 1, 8: 1}


def test_check_output_rejects_unwritten_and_wrong_outputs():
    x = torch.randn(4, 40, dtype=torch.float16)
    tensors = {"x": x}
    rows = slice(0, 2)
    ref = spec.reference_rows("softmax", tensors, rows)
    good = torch.softmax(x.float(), -1).half()
    assert spec.check_output(good, ref, rows) < spec.REL_TOL
    unwritten = good.clone()
    unwritten[3, 5] = float("nan")  # outside the checked rows: still caught
    with pytest.raises(ValueError, match="NaN"):
        spec.check_output(unwritten, ref, rows)
    with pytest.raises(ValueError, match="relative error"):
        spec.check_output(torch.softmax(2 * x.float(), -1).half(), ref, rows)


def _impl(samples, metrics=None, status="ok"):
    samples = list(samples)
    rec = {
        "status": status,
        "reason": None if status == "ok" else "broken",
        "rel_error": 1e-4 if status == "ok" else None,
        "samples_ms": samples if status == "ok" else [],
        "median_ms": sorted(samples)[len(samples) // 2] if status == "ok" else None,
        "metrics": metrics or {},
    }
    return rec


def _spec_data(times: dict[str, float], compiles: dict[str, int], failing=()) -> dict:
    """A minimal specialization result: one kernel-time case and the softmax stream."""
    ratios = [
        {"impl": p, "baseline": q, "median": times[q] / times[p], "q10": 0.98 * times[q] / times[p]}
        for p in times
        for q in times
        if p != q
    ]
    time_case = {
        "id": "softmax/fwd/16384x4104/float16",
        "op": "softmax",
        "shape": [16384, 4104],
        "impls": {
            p: _impl([t] * 3, status="failed" if p in failing else "ok") for p, t in times.items()
        },
        "ratios": ratios,
    }
    stream = {
        "id": "softmax-stream/fwd/200/float16",
        "op": "softmax-stream",
        "impls": {
            p: _impl(
                [1.0],
                {
                    "compiles": {"value": c, "unit": "compiles"},
                    "requests": {"value": 200, "unit": ""},
                },
            )
            for p, c in compiles.items()
        },
        "ratios": [],
    }
    return {"cases": [stream, time_case]}


def test_assess_policy_verdicts():
    compiles = {"constexpr": 150, "runtime": 2, "vec-hint": 2}
    data = _spec_data({"constexpr": 1.0, "runtime": 1.5, "vec-hint": 1.0}, compiles)
    assert spec.assess_policy(data, "softmax", "vec-hint").supported
    slow = spec.assess_policy(data, "softmax", "runtime")
    assert not slow.supported
    assert {p for _, p in slow.beaten} <= {"constexpr", "vec-hint"} and slow.beaten
    # Same speed as vec-hint but far more compiles: dominated.
    many = spec.assess_policy(data, "softmax", "constexpr")
    assert many.dominated_by == ("vec-hint",) and not many.supported
    two = {"constexpr": 150, "vec-hint": 2}
    broken = _spec_data({"constexpr": 1.0, "vec-hint": 1.0}, two, failing=("vec-hint",))
    assert spec.assess_policy(broken, "softmax", "vec-hint").failed
    with pytest.raises(ValueError, match="no stream"):
        spec.assess_policy(data, "matmul", "vec-hint")


# -------------------------------------------------------------- chunk rules

PLANTED = fitting.ChunkRule(
    split_rows_per_sm=0.5,
    split_min_cols=16384,
    split_chunk=4096,
    split_warps=8,
    max_block_cols=16384,
    block_warps=16,
    narrow_max_cols=65536,
    narrow_chunk=4096,
    narrow_warps=8,
    wide_chunk=8192,
    wide_warps=16,
)


def _cells(rule, *, seed=0, noise=0.0):
    """A synthetic grid where ``rule``'s pick is fastest by a clear margin."""
    rng = random.Random(seed)
    out = {}
    for op, mode, rows, cols in itertools.product(
        ("softmax",), ("fwd", "fwdbwd"), chunk_sweep.ROWS, chunk_sweep.WIDTHS
    ):
        pick = rule.impl(rows, cols, SM)
        medians = {}
        for p in chunk_sweep.candidates(rows, cols, SM, chunk_sweep.FULL):
            name = fitting.impl_name(p.kind, p.block, p.num_warps)
            base = 1.0 if name == pick else 1.3 + 0.1 * rng.random()
            medians[name] = base * (1 + noise * rng.uniform(-1, 1))
        cell = fitting.Cell(op, mode, rows, cols, medians, f"{op}/{mode}/{rows}x{cols}/float16")
        out[cell.key] = cell
    return out


def test_parse_impl_round_trips_and_rejects_broken_names():
    assert fitting.parse_impl(fitting.impl_name("split", 4096, 8)) == ("split", 4096, 8)
    for bad in ("looped-4096", "loop-4096-w8", "looped-4096-8", "looped-x-w8"):
        with pytest.raises(ValueError):
            fitting.parse_impl(bad)


@pytest.mark.parametrize("coop", [(0, 0), (2048, 4), (8192, 16)])
def test_fit_recovers_a_planted_rule(coop):
    planted_rule = dataclasses.replace(PLANTED, coop_chunk=coop[0], coop_warps=coop[1])
    cells = _cells(planted_rule)
    rule = fitting.fit(cells.values(), SM)
    scored = fitting.score(fitting.rule_picker(rule, SM), cells.values())
    assert scored.mean == 0.0 and scored.worst == 0.0 and scored.bad == 0
    planted = fitting.score(fitting.rule_picker(planted_rule, SM), cells.values())
    assert scored.picks == planted.picks
    assert (rule.coop_chunk, rule.coop_warps) == coop
    if coop[0]:
        assert "one cooperative launch" in fitting.describe(rule)


def test_score_counts_an_unmeasured_pick_as_infinite_regret_and_fit_avoids_it():
    cells = _cells(PLANTED)
    always_block = lambda cell: "block-999-w4"
    assert fitting.score(always_block, cells.values()).worst == float("inf")
    with pytest.raises(ValueError, match="empty"):
        fitting.score(always_block, [])
    # Remove the planted block plan from every cell: the fit must pick another.
    stripped = [
        fitting.Cell(c.op, c.mode, c.n_rows, c.n_cols, {
            k: v for k, v in c.medians.items() if not k.startswith("block-")
        }) for c in cells.values()
    ]  # fmt: skip
    rule = fitting.fit(stripped, SM)
    assert fitting.score(fitting.rule_picker(rule, SM), stripped).worst < float("inf")


def test_run_spread():
    a = fitting.Cell("softmax", "fwd", 1, 8192, {"x": 1.0, "y": 2.0})
    b = fitting.Cell("softmax", "fwd", 1, 8192, {"x": 1.1, "y": 2.0})
    assert fitting.run_spread({a.key: a}, {b.key: b}) == pytest.approx(0.05)
    c = fitting.Cell("softmax", "fwd", 4, 8192, {"x": 1.0})
    with pytest.raises(ValueError, match="share no"):
        fitting.run_spread({a.key: a}, {c.key: c})


def _run_data(cells: dict, gpu: str = "h200") -> dict:
    """A schema-1 chunk-rules run whose plans' samples centre on ``cells``' medians."""
    cases = []
    for cell in cells.values():
        impls = {}
        for name, median in cell.medians.items():
            samples = [median * f for f in (0.99, 1.0, 1.01)]
            q10, _, q90 = quantiles(samples)
            impls[name] = {
                "status": "ok", "reason": None, "rel_error": 1e-4, "samples_ms": samples,
                "median_ms": median, "q10_ms": q10, "q90_ms": q90,
                "gbps": None, "pct_copy": None, "tflops": None, "peak_mem_bytes": None,
                "metrics": {},
            }  # fmt: skip
        cases.append(
            {
                "id": cell.case_id, "op": cell.op, "mode": cell.mode,
                "shape": [cell.n_rows, cell.n_cols], "dtype": "float16", "timer": "cuda_graph",
                "cache": "cold", "bytes": None, "bytes_formula": None, "flops": None,
                "flops_formula": None, "depends_on": [], "impls": impls, "ratios": [],
            }
        )  # fmt: skip
    state = dict.fromkeys(("utilization_pct", "sm_clock_mhz", "mem_clock_mhz", "temperature_c"))
    env = {
        "gpu_name": "synthetic", "sm_count": SM, "l2_bytes": None, "memory_clock_mhz": None,
        "driver": None, "cuda": None, "torch": "x", "triton": None, "python": "3", "platform": "p",
    }  # fmt: skip
    return build_result(
        suite="chunk_rules_run1", gpu_slug=gpu, command="synthetic",
        started_utc="2026-01-01T00:00:00Z", finished_utc="2026-01-01T00:00:01Z",
        git={"commit": "0" * 40, "dirty": None}, sources={}, env=env,  # no commit measured
        gpu_state={"before": state, "after": state, "busy_at_start": False},
        copy_bandwidth=copy_record(1 << 20, [1.0]),
        timing={"cache": "cold", "visits": 1, "seed": 1, "warmup_ms": 0, "notes": "synthetic"},
        cases=cases, log=None,
    )  # fmt: skip


def test_fit_result_scores_the_held_out_run_and_validates():
    fit_data = _run_data(_cells(PLANTED, seed=1, noise=0.02))
    test_data = _run_data(_cells(PLANTED, seed=2, noise=0.02))
    validate(fit_data)
    cases, rule = fitting.fit_result(fit_data, test_data, fit_id="h200/a", test_id="h200/b")
    assert rule["same_when_refit"] and "looped otherwise" in rule["text"]
    summaries = [c for c in cases if c["op"].endswith("-rule")]
    assert {c["mode"] for c in summaries} == {"fwd", "fwdbwd"}
    for case in summaries:
        metrics = case["impls"]["fitted"]["metrics"]
        assert metrics["worst_regret_pct"]["value"] == 0.0  # the margin beats the noise
        assert case["impls"]["lookup"]["metrics"]["run_spread_pct"]["value"] > 0
    data = {**test_data, "cases": cases, "rule": rule}
    validate(data)
    broken = {**data, "cases": [{**cases[0], "id": "softmax/fwd/1x1/float16"}, *cases[1:]]}
    with pytest.raises(ResultError, match="does not match"):
        validate(broken)
    with pytest.raises(ValueError, match="same GPU"):
        fitting.fit_result(
            fit_data, _run_data(_cells(PLANTED), gpu="a100"), fit_id="a", test_id="b"
        )


def test_regret_metrics():
    outcomes = {
        "looped-4096-w8": ImplOutcome("ok", None, 0.0, [[1.0, 1.0]]),
        "looped-2048-w8": ImplOutcome("ok", None, 0.0, [[1.5, 1.5]]),
        "split-4096-w8": ImplOutcome("failed", "broken"),
    }
    chunk_sweep.regret_metrics(outcomes)
    assert outcomes["looped-4096-w8"].metrics["regret_pct"]["value"] == 0.0
    assert outcomes["looped-2048-w8"].metrics["regret_pct"]["value"] == pytest.approx(50.0)
    assert "regret_pct" not in outcomes["split-4096-w8"].metrics


def test_candidates_cover_every_plan_that_fits():
    plans = chunk_sweep.candidates(4, 65536, SM, chunk_sweep.FULL)
    kinds = [p.kind for p in plans]
    assert "block" not in kinds  # 65536 half-precision values do not fit
    assert kinds.count("looped") == kinds.count("split") == 12
    assert all(p.splits > 1 for p in plans if p.kind == "split")
    assert [p.kind for p in chunk_sweep.candidates(1024, 8192, SM, chunk_sweep.FULL)].count(
        "block"
    ) == 3


# ------------------------------------------------------------- dry runs
# A dry run needs the interpreter itself (on a GPU machine the sweeps measure).
dry_run = pytest.mark.skipif(
    not interpreter_enabled(), reason="the dry runs need TRITON_INTERPRET=1"
)


@pytest.mark.interpreter
@dry_run
def test_specialization_dry_run_writes_a_valid_result(tmp_path):
    assert spec.main(["--dry-run", "--out", str(tmp_path)]) == 0
    result = load(tmp_path / "specialization.json")
    ops = {c["op"] for c in result.data["cases"]}
    assert ops == {"softmax", "rms_norm", "matmul"} | {f"{k}-stream" for k in spec.KERNELS}
    for case in result.data["cases"]:
        assert set(case["impls"]) == set(spec.POLICIES)
        assert all(r["status"] == "ok" for r in case["impls"].values()), case["id"]
    assert (tmp_path / "specialization.log").read_text().startswith("$ python")


@pytest.mark.interpreter
@dry_run
def test_chunk_rules_dry_run_writes_a_valid_result(tmp_path):
    argv = ["--run", "1", "--dry-run", "--warm-jobs", "1", "--out", str(tmp_path)]
    assert chunk_sweep.main(argv) == 0
    # The warm pass called each distinct plan of each operator, mode and width once.
    grid = chunk_sweep.DRY
    distinct = {
        (c.op, c.mode, c.n_cols, p.kind, p.block, p.num_warps)
        for c in chunk_sweep.cells(grid, 1)
        for p in chunk_sweep.candidates(c.n_rows, c.n_cols, SM, grid)
    }
    log = (tmp_path / "chunk_rules_run1.log").read_text()
    assert f"warm pass: {len(distinct)} plan calls in 1 processes" in log
    result = load(tmp_path / "chunk_rules_run1.json")
    cases = result.data["cases"]
    assert len(cases) == len(chunk_sweep.OPS) * len(chunk_sweep.MODES) * 2
    for case in cases:
        failed = {n: r["reason"] for n, r in case["impls"].items() if r["status"] != "ok"}
        assert not failed, (case["id"], failed)
        regrets = [r["metrics"]["regret_pct"]["value"] for r in case["impls"].values()]
        assert min(regrets) == 0.0, case["id"]
    # Out of time budget: every cell is recorded as skipped, and the file is still valid.
    assert (
        chunk_sweep.main(["--run", "2", "--dry-run", "--out", str(tmp_path), "--budget-s", "0"])
        == 0
    )
    skipped = load(tmp_path / "chunk_rules_run2.json").data["cases"]
    assert all(r["status"] == "skipped" for c in skipped for r in c["impls"].values())


def test_dry_run_refuses_without_the_interpreter(monkeypatch, capsys):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert spec.main(["--dry-run", "--out", "unused"]) == 2
    assert "TRITON_INTERPRET=1" in capsys.readouterr().err


def test_split_count_bounds():
    from kernel_portfolio.plans import MAX_SPLITS, split_count

    assert split_count(1, 1 << 20, 2048, SM) == MAX_SPLITS  # 512 chunks, 264 wanted: capped
    assert split_count(4, 65536, 4096, SM) == 16  # no more programs than chunks
    assert split_count(1024, 65536, 4096, SM) == 1
    assert split_count(66, 65536, 4096, SM) == 4  # about two programs per SM over all rows


def test_impl_record_without_a_byte_count():
    from kernel_portfolio.bench.records import impl_record

    rec = impl_record(Counts(None, None), ImplOutcome("ok", None, 0.0, [[2.0, 1.0, 3.0]]), 4000.0)
    assert rec["median_ms"] == 2.0 and rec["gbps"] is None and rec["pct_copy"] is None


def test_copy_floor_visits_the_calls_in_alternating_order(monkeypatch):
    """Every call gets every visit, odd visits in reverse; medians per call."""
    order = []

    def fake_time_events(call, samples, *, flush, lead_ms):
        order.append(call())
        return [{"a": 1.0, "b": 2.0}[order[-1]]] * samples

    monkeypatch.setattr(copy_floor.timing, "time_events", fake_time_events)
    medians = copy_floor.interleaved_medians({"a": lambda: "a", "b": lambda: "b"}, None, 0.0)
    assert order == ["a", "b", "b", "a"] * (copy_floor.VISITS // 2)
    assert medians == {"a": 1.0, "b": 2.0}


def test_auto_rule_is_the_committed_fit():
    """``plan_rule`` holds the rule fitted in results/h200/chunk_rules_fit.json.

    Every shape of the swept grid (plus one row either side of each row-count
    threshold) gets from ``plans.choose("auto")`` the plan the fitted rule names,
    so a constant edited without a refit fails here.
    """
    from kernel_portfolio import plans
    from kernel_portfolio.results import load

    fit = load(ROOT / "results" / "h200" / "chunk_rules_fit.json").data["rule"]
    rule = fitting.ChunkRule(**fit["thresholds"])
    sm = fit["sm_count"]
    rows = {*chunk_sweep.ROWS, 65, 67}
    for n_rows, n_cols in itertools.product(rows, chunk_sweep.WIDTHS):
        got = plans.choose(n_rows, n_cols, elem_bytes=2, sm_count=sm)
        assert fitting.impl_name(got.kind, got.block, got.num_warps) == rule.impl(
            n_rows, n_cols, sm
        ), (n_rows, n_cols)


# ------------------------------------------------------------ the notebooks


def test_discrete_colorscale_paints_each_integer_flat():
    from kernel_portfolio import charts

    scale = charts.discrete_colorscale(["#000000", "#ffffff"])
    assert scale == [[0.0, "#000000"], [0.5, "#000000"], [0.5, "#ffffff"], [1.0, "#ffffff"]]
    with pytest.raises(ValueError, match="colors is empty"):
        charts.discrete_colorscale([])


def test_heatmap_grid_draws_every_panel_on_category_axes():
    from kernel_portfolio import charts

    panels = [
        charts.HeatmapPanel(f"panel {i}", [[1.0, None, 3.0], [4.0, 5.0, 6.0]], [["a"] * 3] * 2)
        for i in range(3)
    ]
    fig = charts.heatmap_grid(
        panels, x=[8192, 16384, 32769], y=[1, 4], x_title="width", y_title="rows",
        colorscale="Reds", zmin=0, zmax=10, colorbar={"title": "regret"}, title="t",
    )  # fmt: skip
    assert [t.type for t in fig.data] == ["heatmap"] * 3
    assert list(fig.data[0].x) == ["8192", "16384", "32769"] and list(fig.data[0].y) == ["1", "4"]
    assert [t.showscale for t in fig.data] == [True, False, False]  # one colour bar
    assert fig.layout.xaxis.type == "category" and fig.layout.yaxis.type == "category"
    assert fig.data[2].xaxis == "x3" and fig.layout.height == 120 + 300 * 2  # 2 per row
    assert list(fig.data[1].customdata[0]) == ["a"] * 3  # hover defaults to the text


def test_heatmap_grid_rejects_misshapen_panels():
    from kernel_portfolio import charts

    kw = {"x": [1, 2], "y": [1], "x_title": "x", "y_title": "y", "colorscale": "Reds",
          "zmin": 0, "zmax": 1}  # fmt: skip
    good = charts.HeatmapPanel("ok", [[1.0, 2.0]], [["a", "b"]])
    with pytest.raises(ValueError, match="panels is empty"):
        charts.heatmap_grid([], **kw)
    with pytest.raises(ValueError, match="cols must be"):
        charts.heatmap_grid([good], cols=0, **kw)
    with pytest.raises(ValueError, match=r"'short': z must have one value per x label"):
        charts.heatmap_grid([charts.HeatmapPanel("short", [[1.0]], [["a"]])], **kw)
    with pytest.raises(ValueError, match=r"'tall': text must have one row per y label"):
        charts.heatmap_grid([charts.HeatmapPanel("tall", [[1.0, 2.0]], [["a"], ["b"]])], **kw)
    with pytest.raises(ValueError, match="hover"):
        charts.heatmap_grid([charts.HeatmapPanel("h", [[1.0, 2.0]], [["a", "b"]], [["c"]])], **kw)


def test_styled_keeps_the_height_and_refuses_bad_input():
    import plotly.graph_objects as go

    from kernel_portfolio import charts

    fig = charts.styled(go.Figure(), height=500)
    assert fig.layout.height == 500 and fig.layout.template.layout.paper_bgcolor == "white"
    with pytest.raises(TypeError, match="plotly Figure"):
        charts.styled({"data": []})
    with pytest.raises(ValueError, match="height"):
        charts.styled(go.Figure(), height=0)


@pytest.mark.parametrize("name", ["specialization", "chunk_rules"])
def test_case_study_runs_on_the_committed_results(name):
    """The notebook executes end to end on results/ (its asserts guard the text it prints).

    It quotes saved values only (``quote`` raises on anything else) and draws its charts.
    """
    import jupytext
    from nbclient import NotebookClient

    nb = jupytext.read(ROOT / "case_studies" / f"{name}.py")
    NotebookClient(nb, timeout=300, resources={"metadata": {"path": str(ROOT)}}).execute()
    html = "".join(
        out.get("data", {}).get("text/html", "") + out.get("data", {}).get("text/markdown", "")
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.outputs
    )
    assert html.count('class="kp-claim"') >= 20
    assert html.count('class="kp-chart"') >= 3
    assert "not yet measured" not in html.lower()
