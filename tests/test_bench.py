"""The benchmark harness on a CPU: suites, formulas, filters, records, checks, plan, CLI."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from site_workspace import fixture_result

from kernel_portfolio import plans
from kernel_portfolio.bench import plan, records, runner, suites
from kernel_portfolio.bench.env import gpu_slug
from kernel_portfolio.bench.records import ImplOutcome, build_case_record
from kernel_portfolio.bench.suites import OPS, SUITES, Case, Suite, eval_formula
from kernel_portfolio.cli import main
from kernel_portfolio.ops import row_sum
from kernel_portfolio.results import load, save, validate

DEFAULT = SUITES["default"]
L2_H200 = 60 << 20


def _ids(suite=DEFAULT) -> set[str]:
    return {c.id for c in suite.cases}


# ------------------------------------------------------------------- suites
def test_default_covers_every_op_mode_and_dtype():
    for op in OPS:
        for mode in suites.MODES:
            dtypes = {c.dtype for c in DEFAULT.cases if c.op == op and c.mode == mode}
            assert {"float16", "bfloat16"} <= dtypes or op == "matmul" and mode == "fwdbwd", (
                op,
                mode,
            )
            assert dtypes, (op, mode)
        assert any(c.dtype == "float32" for c in DEFAULT.cases if c.op == op), op


@pytest.mark.parametrize("op", ["softmax", "rms_norm", "residual_rms_norm"])
def test_default_has_the_required_row_shapes(op):
    shapes = {c.shape for c in DEFAULT.cases if c.op == op}
    required = {
        (8192, 8192),
        (32768, 8192),
        (32768, 1024),
        (16384, 4104),
        (64, 131072),
        (4, 32769),
        (512, 4096),
        (32, 127),
    }
    assert required <= shapes
    for case in DEFAULT.cases:
        if case.op == op and case.shape in {(512, 4096), (32, 127)}:
            assert case.timer == "cuda_graph", case.id
        if case.op == op and case.shape[0] * case.shape[1] >= 8192 * 8192:
            assert case.bytes >= 2 * L2_H200, case.id  # the cold flush matters
    big = [c for c in DEFAULT.cases if c.op == op and c.mode == "fwdbwd" and c.shape[0] >= 8192]
    assert big and all(c.bytes >= 4 * L2_H200 for c in big if c.dtype != "float32")


def test_default_has_gemm_and_large_add_and_row_sum():
    gemm = {c.shape for c in DEFAULT.cases if c.op == "matmul"}
    assert {(4096, 4096, 4096), (8192, 8192, 8192), (8192, 8192, 512), (65536, 1024, 1024)} <= gemm
    assert all("cublas" in c.impls for c in DEFAULT.cases if c.op == "matmul")
    for op in ("add", "row_sum"):
        data = max(
            c.bytes
            for c in DEFAULT.cases
            if c.op == op and c.mode == "fwd" and c.dtype == "float16"
        )
        assert data >= 256 << 20, op


def test_costly_baselines_are_where_the_notes_say():
    for case in DEFAULT.cases:
        if "liger" in case.impls or "compile" in case.impls:
            assert case.dtype == suites.MAIN_DTYPE[case.op], case.id
        if "compile" in case.impls:
            assert case.shape in suites.COMPILE_SHAPES[case.op], case.id
    assert {c.op for c in DEFAULT.cases if "liger" in c.impls} == set(suites.LIGER_OPS)


def test_smoke_suite_has_one_case_per_timer():
    smoke = SUITES["smoke"]
    assert {c.timer for c in smoke.cases} == set(suites.TIMERS)
    assert {c.mode for c in smoke.cases} == set(suites.MODES)
    assert any("compile" in c.impls for c in smoke.cases)
    assert any("liger" in c.impls for c in smoke.cases)


def test_byte_and_flop_formulas():
    sm = Case("softmax", "fwd", (8192, 8192), "float16", "events", ("ours",))
    assert sm.bytes == 2 * 8192 * 8192 * 2
    assert sm.bytes_formula == "2*M*N*s with M=8192, N=8192, s=2"
    assert sm.flops is None and sm.flops_formula is None
    assert Case("softmax", "fwdbwd", (4, 8), "float32", "events", ("ours",)).bytes == 5 * 32 * 4
    rms = Case("rms_norm", "fwd", (4, 8), "bfloat16", "events", ("ours",))
    assert rms.bytes == (2 * 32 + 8) * 2
    res = Case("residual_rms_norm", "fwdbwd", (4, 8), "float16", "events", ("ours",))
    assert res.bytes == (9 * 32 + 3 * 8) * 2
    assert Case("add", "fwd", (100,), "float32", "events", ("ours",)).bytes == 3 * 100 * 4
    assert Case("row_sum", "fwd", (4, 8), "float16", "events", ("ours",)).bytes == (32 + 4) * 2
    mm = Case("matmul", "fwd", (2, 3, 5), "float16", "events", ("ours", "cublas"))
    assert mm.flops == 2 * 2 * 3 * 5 and mm.bytes == (2 * 5 + 5 * 3 + 2 * 3) * 2
    mm_bwd = Case("matmul", "fwdbwd", (2, 3, 5), "bfloat16", "events", ("ours",))
    assert mm_bwd.flops == 6 * 2 * 3 * 5
    assert mm_bwd.flops_formula == "6*M*N*K with M=2, N=3, K=5"
    for spec in OPS.values():
        assert spec.traffic, spec.name


@pytest.mark.parametrize("bad", ["__import__('os')", "M / N", "M ** 2", "Z*2", "M.real", "2.5*M"])
def test_eval_formula_rejects_anything_but_arithmetic(bad):
    with pytest.raises(ValueError, match="formula"):
        eval_formula(bad, {"M": 2, "N": 3})


@pytest.mark.parametrize(
    "kwargs",
    [
        {"op": "gelu"},
        {"mode": "bwd"},
        {"shape": (4,)},
        {"shape": (4, 0)},
        {"dtype": "float64"},
        {"timer": "wallclock"},
        {"impls": ("torch", "ours")},
        {"impls": ("ours", "triton")},
    ],
)
def test_case_rejects_bad_fields(kwargs):
    fields = {
        "op": "softmax",
        "mode": "fwd",
        "shape": (4, 8),
        "dtype": "float16",
        "timer": "events",
        "impls": ("ours", "torch"),
    }
    with pytest.raises(ValueError):
        Case(**{**fields, **kwargs})


def test_suite_rejects_repeated_cases():
    case = Case("add", "fwd", (8,), "float16", "events", ("ours",))
    with pytest.raises(ValueError, match="repeats"):
        Suite("x", "x", (case, case))


# ------------------------------------------------------------------ filters
def test_filter_selects_and_narrows_impls():
    terms = suites.parse_filter("op=softmax,dtype=float16,op=add,impl=torch")
    cases = suites.select(DEFAULT.cases, terms)
    assert cases and {c.op for c in cases} == {"softmax", "add"}
    assert {c.dtype for c in cases} == {"float16"}
    assert all(c.impls == ("ours", "torch") for c in cases)
    shape = suites.select(DEFAULT.cases, suites.parse_filter("shape=8192x8192,mode=fwd"))
    assert {c.shape for c in shape} == {(8192, 8192)} and {c.mode for c in shape} == {"fwd"}


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("op", "not key=value"),
        ("colour=red", "not one of"),
        ("op=sofmax", "matches no case"),
        ("impl=tvm", "matches no case"),
        ("op=matmul,impl=liger", "together match no case"),
    ],
)
def test_filter_rejects_bad_terms(text, match):
    with pytest.raises(ValueError, match=match):
        suites.select(DEFAULT.cases, suites.parse_filter(text))


# ------------------------------------------------------------------ records
def _case():
    return Case("softmax", "fwd", (1024, 1024), "float16", "events", ("ours", "torch", "liger"))


def test_case_record_statistics_and_ratios():
    ours = ImplOutcome("ok", None, 1e-4, [[1.0, 1.0, 1.2], [1.0, 0.9, 1.1]], 10)
    torch_ = ImplOutcome("ok", None, 2e-4, [[2.0, 2.0, 2.0], [3.0, 3.0, 3.0]], 20)
    liger = ImplOutcome("skipped", "cannot run", None)
    rec = build_case_record(
        _case(),
        {"ours": ours, "torch": torch_, "liger": liger},
        copy_gbps=4.0,
        cache="cold",
        sources={"src/kernel_portfolio/ops/softmax.py": "0" * 64},
    )
    o = rec["impls"]["ours"]
    assert o["samples_ms"] == [1.0, 1.0, 1.2, 1.0, 0.9, 1.1]
    assert o["median_ms"] == 1.0 and o["q10_ms"] == pytest.approx(0.95)
    assert o["q90_ms"] == pytest.approx(1.15)
    assert o["gbps"] == pytest.approx(2 * 1024 * 1024 * 2 / 1e6)
    assert o["pct_copy"] == pytest.approx(100 * o["gbps"] / 4.0)
    assert rec["impls"]["liger"]["samples_ms"] == [] and rec["impls"]["liger"]["median_ms"] is None
    # per visit: 2.0 / 1.0 and 3.0 / 1.0
    assert rec["ratios"] == [
        {
            "impl": "ours",
            "baseline": "torch",
            "median": 2.5,
            "q10": pytest.approx(2.1),
            "q90": pytest.approx(2.9),
        }
    ]
    assert rec["depends_on"] == ["src/kernel_portfolio/ops/softmax.py"]


def test_failed_ours_has_no_ratios_and_infinite_error_is_null():
    rec = build_case_record(
        _case(),
        {
            "ours": ImplOutcome("failed", "relative error inf", float("inf")),
            "torch": ImplOutcome("ok", None, 0.0, [[1.0]]),
        },
        copy_gbps=1.0,
        cache="cold",
        sources={},
    )
    assert rec["ratios"] == [] and rec["impls"]["ours"]["rel_error"] is None


def test_visit_ratios_need_matching_visits():
    with pytest.raises(ValueError, match="visits"):
        records.visit_ratios([[1.0]], [[1.0], [2.0]])


def test_fixture_result_is_valid_and_summarised(tmp_path):
    data = fixture_result(runner.repo_root())
    path = save(data, tmp_path / "results" / "fixture" / "smoke.json")
    assert load(path).data["env"]["gpu_name"].startswith("synthetic")
    table = records.summary_table(data).splitlines()
    assert len(table) == 1 + len(SUITES["smoke"].cases)
    assert "torch" in table[1] and "x" in table[1]


# ---------------------------------------------------- correctness checking
def _tiny(op, mode, shape, dtype="float32", impls=("ours", "torch")):
    if op == "matmul":
        impls = ("ours", "cublas")
    return Case(op, mode, shape, dtype, "events", impls)


TINY = [
    _tiny("add", "fwdbwd", (300,)),
    _tiny("row_sum", "fwdbwd", (7, 33), "float16"),
    _tiny("softmax", "fwdbwd", (5, 40), "bfloat16"),
    _tiny("rms_norm", "fwdbwd", (6, 50)),
    _tiny("residual_rms_norm", "fwdbwd", (6, 50), "float16"),
    _tiny("matmul", "fwdbwd", (16, 24, 32)),
    _tiny("softmax", "fwd", (3, 9), "float16"),
]


@pytest.mark.parametrize("case", TINY, ids=lambda c: c.id)
def test_check_accepts_the_torch_baseline(case):
    inputs = runner.make_inputs(case, seed=0, device="cpu")
    assert all(torch.count_nonzero(a) == a.numel() for a in inputs.args)  # never zeros
    err = runner.check(case, runner.DRIVERS[case.op].baseline, inputs)
    assert 0 <= err <= suites.REL_TOL[case.dtype]


class _WrongGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return torch.softmax(x, -1)

    @staticmethod
    def backward(ctx, dy):
        return dy  # not the softmax gradient


@pytest.mark.parametrize(
    ("mode", "broken", "match"),
    [
        ("fwd", lambda x: x.clone(), "relative error"),
        (
            "fwd",
            lambda x: torch.softmax(x, -1).index_fill(0, torch.tensor([2]), float("nan")),
            "NaN or inf",
        ),
        ("fwd", lambda x: torch.softmax(x, -1)[:, :-1], "shape"),
        ("fwd", lambda x: (torch.softmax(x, -1), x), "outputs"),
        ("fwdbwd", _WrongGrad.apply, "relative error"),
        ("fwdbwd", lambda x: torch.softmax(x.detach(), -1).requires_grad_(), "not produced"),
    ],
)
def test_check_rejects_broken_implementations(mode, broken, match):
    case = _tiny("softmax", mode, (6, 40))
    inputs = runner.make_inputs(case, seed=0, device="cpu")
    with pytest.raises(runner.CheckFailed, match=match):
        runner.check(case, broken, inputs)


def test_failures_fail_ours_and_skip_baselines_that_cannot_run():
    boom = RuntimeError("n exceeds the recommended Triton blocksize\nmore")
    assert runner._not_ok("liger", "check", boom).status == "skipped"
    ours = runner._not_ok("ours", "check", boom)
    assert ours.status == "failed" and ours.reason.endswith("blocksize")
    wrong = runner._not_ok("torch", "check", runner.CheckFailed("relative error 1 > 0.002"))
    assert wrong.status == "failed"


def test_a_case_that_raises_fails_ours_and_skips_baselines():
    outcomes = runner.case_not_run(_case(), MemoryError("out of memory\ndetails"))
    assert outcomes["ours"].status == "failed"
    assert {outcomes[n].status for n in ("torch", "liger")} == {"skipped"}
    assert all(o.reason == "case not run: MemoryError: out of memory" for o in outcomes.values())


@pytest.fixture
def counted_sync(monkeypatch):
    """``torch.cuda.synchronize`` replaced by a counter (no GPU here)."""
    count = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: count.append(1))
    return count


def test_host_cost_loops_without_syncing_inside(counted_sync):
    calls, prepared = [], []
    values = runner.timing.host_cost(
        lambda: calls.append(1), prepare=lambda: prepared.append(1), loop_ms=2.0, repeats=3
    )
    assert len(values) == 3 and all(v > 0 for v in values)
    assert len(counted_sync) == 2 * (1 + 3)  # once before and once after each loop, never inside
    assert len(calls) == len(prepared) > 3 * runner.timing.HOST_PROBE_CALLS
    with pytest.raises(ValueError, match="repeats"):
        runner.timing.host_cost(lambda: None, repeats=0)
    with pytest.raises(ValueError, match="loop_ms"):
        runner.timing.host_cost(lambda: None, loop_ms=0)


def _ready(call):
    visits = [[1.0] * SUITES["smoke"].samples] * SUITES["smoke"].visits
    return runner._Ready(call, None, None, 0.0, ImplOutcome("ok", None, 1e-4, visits, 1))


def test_host_cost_metric_in_the_record_and_the_table(counted_sync, monkeypatch):
    monkeypatch.setattr(runner.timing, "HOST_LOOP_MS", 1.0)
    case = Case("softmax", "fwd", (32, 127), "float16", "cuda_graph", ("ours", "torch", "liger"))

    def broken():
        raise RuntimeError("launch failed")

    ready = {"ours": _ready(lambda: None), "torch": _ready(lambda: None), "liger": _ready(broken)}
    outcomes = {name: r.outcome for name, r in ready.items()}
    runner._measure_host_cost(ready, outcomes)
    assert set(ready) == {"ours", "torch"}
    assert outcomes["liger"].status == "skipped" and "host cost" in outcomes["liger"].reason
    data = fixture_result(runner.repo_root())
    rec = build_case_record(
        case,
        outcomes,
        copy_gbps=data["copy_bandwidth"]["gbps"],
        cache="warm",
        sources=data["sources"],
    )
    host = rec["impls"]["ours"]["metrics"]["host_us"]
    assert host["unit"] == "us" and host["value"] > 0
    data["cases"].append(rec)
    validate(data)
    row = records.summary_table(data).splitlines()[-1]
    assert f"{host['value']:7.1f}" in row
    torch_host = rec["impls"]["torch"]["metrics"]["host_us"]["value"]
    assert f"{torch_host:7.1f}" in row
    assert "host" in runner._case_line(1, 1, rec)


def test_sample_rows_keeps_first_and_last_and_is_stable():
    assert runner.sample_rows(10, 4) == slice(None)
    rows = runner.sample_rows(100_000, 1024)
    assert rows[0] == 0 and rows[-1] == 99_999 and len(rows) <= runner.CHECK_ELEMS // 1024
    assert torch.equal(rows, runner.sample_rows(100_000, 1024))


@pytest.mark.interpreter
def test_check_accepts_ours_under_the_interpreter():
    case = _tiny("rms_norm", "fwdbwd", (6, 50), "bfloat16")
    inputs = runner.make_inputs(case, seed=0, device="cpu")
    assert runner.check(case, runner.implementation(case, "ours"), inputs) <= 1.6e-2


# ---------------------------------------------------------- slugs and stems
@pytest.mark.parametrize(
    ("name", "slug"),
    [
        ("NVIDIA H200", "h200"),
        ("NVIDIA GeForce RTX 4090", "rtx-4090"),
        ("NVIDIA H100 80GB HBM3", "h100-80gb-hbm3"),
        ("NVIDIA A100-SXM4-80GB", "a100-sxm4-80gb"),
    ],
)
def test_gpu_slug(name, slug):
    assert gpu_slug(name) == slug


def test_gpu_slug_rejects_vendor_only_names():
    with pytest.raises(ValueError, match="no slug"):
        gpu_slug("NVIDIA GeForce")


def test_result_stem_keeps_filtered_runs_apart():
    assert runner.result_stem("default", None) == "default"
    assert runner.result_stem("default", "op=softmax,dtype=float16") == (
        "default--op-softmax-dtype-float16"
    )


# --------------------------------------------------------------------- plan
def test_default_plan_fits_the_budget():
    est = plan.estimate(DEFAULT, list(DEFAULT.cases), visits=DEFAULT.visits)
    assert est.total <= plan.BUDGET_S
    assert set(est.per_case) == _ids()
    more = plan.estimate(DEFAULT, list(DEFAULT.cases), visits=4 * DEFAULT.visits)
    assert more.timed > est.timed and more.compile == est.compile


# ---------------------------------------------------------------------- CLI
@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def _one_line_error(capsys, argv, match):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and match in err, err


def test_cli_without_gpu_exits_2_with_one_line(no_gpu, capsys):
    _one_line_error(capsys, ["bench", "--suite", "smoke"], "no CUDA GPU")
    _one_line_error(capsys, ["env"], "no CUDA GPU")


def test_cli_refuses_to_run_without_a_baseline_it_compares(capsys, monkeypatch):
    """A suite that names Liger-Kernel does not start where it does not import,
    unless the run says so; a selection without Liger cases starts either way."""
    from kernel_portfolio.bench import env

    started = []
    monkeypatch.setattr(env, "require_gpu", lambda hint="": None)
    monkeypatch.setattr(runner, "run_suite", lambda *args, **kwargs: started.append(args[1]))
    monkeypatch.setitem(sys.modules, "liger_kernel", None)  # its import raises ImportError
    _one_line_error(capsys, ["bench", "--suite", "smoke"], "do not import: liger (")
    assert not started
    assert main(["bench", "--suite", "smoke", "--allow-missing", "liger"]) == 0
    assert main(["bench", "--filter", "op=add"]) == 0
    assert len(started) == 2 and len(started[0]) == 3
    assert started[1] and all(case.op == "add" for case in started[1])


def test_cli_user_mistakes(no_gpu, capsys):
    _one_line_error(capsys, ["bench", "--suite", "nope"], "unknown suite 'nope'")
    _one_line_error(capsys, ["bench", "--filter", "op=sofmax"], "matches no case")
    _one_line_error(capsys, ["bench", "--filter", "colour"], "not key=value")
    _one_line_error(capsys, ["bench", "--visits", "0", "--dry-run"], "--visits")


def test_cli_list_and_dry_run_need_no_gpu(no_gpu, capsys):
    assert main(["bench", "--list"]) == 0
    out = capsys.readouterr().out
    assert "default:" in out and "smoke:" in out and "softmax/fwd/8192x8192/float16" in out
    assert main(["bench", "--suite", "default", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "estimated time" in out and "within budget" in out
    assert "matmul/fwd/8192x8192x512/bfloat16" in out
    assert main(["bench", "--dry-run", "--filter", "op=add"]) == 0
    out = capsys.readouterr().out
    assert "add/fwd/134217728/float16" in out and "softmax" not in out.split("estimated")[0]


def test_cli_output_into_a_reader_that_stopped():
    """``kp bench --list | head -1``: exit 0 and no traceback when the pipe is closed."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before kp writes anything
    try:
        kp = subprocess.run(
            [sys.executable, "-m", "kernel_portfolio", "bench", "--list"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert kp.returncode == 0 and b"Traceback" not in kp.stderr, kp.stderr.decode()


def test_subcommand_modules_do_not_import_the_cli():
    """The ``kp`` parser imports each subcommand's module; none of them imports it back."""
    code = (
        "import sys; import kernel_portfolio.bench.cli, kernel_portfolio.bench.env, "
        "kernel_portfolio.evidence.cli, kernel_portfolio.course.cli; "
        "print('kernel_portfolio.cli' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "False", out.stderr


def test_cli_results_lists_current_and_stale(tmp_path, monkeypatch, capsys):
    (tmp_path / "pyproject.toml").write_text("")
    data = fixture_result(runner.repo_root())
    data["sources"] = {"src/k.py": data["sources"][suites.OPS["softmax"].source]}
    for case in data["cases"]:
        case["depends_on"] = ["src/k.py"]
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "k.py").write_text("changed\n")
    save(data, tmp_path / "results" / "gpu" / "smoke.json")
    (tmp_path / "results" / "gpu" / "broken.json").write_text("{")
    monkeypatch.setenv("KP_ROOT", str(tmp_path))
    assert main(["results"]) == 1  # a broken file is an error
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("gpu/broken") and "INVALID" in out[0]
    assert out[1].startswith("gpu/smoke") and "stale" in out[1] and "src/k.py" in out[1]
    _one_line_error(
        capsys, ["results", "--import", str(tmp_path / "missing.json")], "cannot be read"
    )


def test_env_capture_without_nvml_or_smi(monkeypatch):
    from types import SimpleNamespace

    from kernel_portfolio.bench import env

    monkeypatch.setattr(env, "_nvml_handle", lambda uuid: (None, None))
    monkeypatch.setattr(env.shutil, "which", lambda name: None)
    props = SimpleNamespace(
        name="NVIDIA H200",
        multi_processor_count=132,
        L2_cache_size=62914560,
        total_memory=150 << 30,
        major=9,
        minor=0,
        uuid="abc",
    )
    block = env.capture_env(props)
    data = fixture_result(runner.repo_root())
    data["env"] = block
    validate(data)  # the block has every field the schema requires
    assert block["driver"] is None and block["memory_clock_mhz"] is None
    assert block["sm_count"] == 132 and block["l2_bytes"] == 62914560
    assert block["liger_kernel"] == env._version("liger-kernel")  # the baseline's version
    assert env._version("torch") == torch.__version__
    assert env._version("no-such-distribution") is None
    assert env.gpu_state(props) == dict.fromkeys(
        ("utilization_pct", "sm_clock_mhz", "mem_clock_mhz", "temperature_c")
    )


# ------------------------------------------------ scripts/sanitize_paths.py
@pytest.fixture
def sanitize_paths(monkeypatch):
    """The memcheck driver script as a module (the allocator variable it sets is restored)."""
    monkeypatch.setenv("PYTORCH_NO_CUDA_MEMORY_CACHING", "0")
    path = runner.repo_root() / "scripts" / "sanitize_paths.py"
    spec = importlib.util.spec_from_file_location("sanitize_paths", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.os.environ["PYTORCH_NO_CUDA_MEMORY_CACHING"] == "1"
    return module


def test_sanitize_paths_cover_every_op_plan_dtype_and_gemm_path(sanitize_paths):
    labels = [label for label, _, _ in sanitize_paths.paths(small=False)]
    for op in sanitize_paths.ROW_OPS:
        for kind, dtype in zip(("block", "looped", "split"), sanitize_paths.DTYPES, strict=True):
            for rows in sanitize_paths.SHAPES[False]["rows"]:  # aligned and peeled widths
                width = f" {dtype} {rows[1]} columns "
                assert any(lab.startswith(f"{op} {kind} ") and width in lab for lab in labels)
    assert sum(lab.startswith("softmax cooperative ") for lab in labels) == 2
    shifted = [c for lab, c, _ in sanitize_paths.paths(small=False) if "shifted weight" in lab]
    full = [c for lab, c, _ in sanitize_paths.paths(small=False) if " full block," in lab]
    assert {c.op for c in shifted} == {c.op for c in full} == {"rms_norm", "residual_rms_norm"}
    rms = sanitize_paths.rms_norm
    least = max(rms.SHIFT_W_MIN_ELEMENTS, rms.SHIFT_W_BWD_MIN_ELEMENTS)
    assert all(
        c.shape[0] * c.shape[1] >= least and c.shape[1] % 8 for c in shifted if c not in full
    )  # peeled, and past both thresholds
    for c in full:  # peeled, past the forward's threshold, and held in one full block
        x = torch.empty(c.shape, dtype=torch.bfloat16)
        plan = rms._forward_plan(x, x[0], "auto", c.op == "residual_rms_norm")
        assert c.shape[0] * c.shape[1] >= rms.SHIFT_W_MIN_ELEMENTS and c.shape[1] % 8
        assert (plan.kind, plan.block) == ("block", 32768)
    assert sum(lab.startswith("matmul tma ") and " nn " in lab for lab in labels) == len(
        sanitize_paths.mm.TMA_TILES
    )
    assert sum(lab.startswith("matmul pointer ") and " nn " in lab for lab in labels) == len(
        sanitize_paths.mm.POINTER_CONFIGS
    )
    assert sum(" nt " in lab for lab in labels) == 3  # and the plan of two column parts
    assert sum(" tn " in lab for lab in labels) == 3  # and split-K, in the layout of dB
    assert sum(lab.startswith("matmul tma split-k ") for lab in labels) == 1
    [columns] = [lab for lab in labels if lab.startswith("matmul tma columns ")]
    assert " nt " in columns
    [narrow] = [case for lab, case, _ in sanitize_paths.paths(small=False) if " columns," in lab]
    block = plans.choose(*narrow.shape, elem_bytes=2, sm_count=plans.CPU_SM_COUNT, plan="block")
    assert row_sum.block_tile(block.block, 2, block.num_warps)[0] > 1  # several rows a program
    assert len(set(labels)) == len(labels)


@pytest.mark.interpreter
def test_sanitize_paths_pass_and_reject_a_broken_kernel(sanitize_paths, monkeypatch, capsys):
    if torch.cuda.is_available():
        pytest.skip("the --small shapes are for the interpreter")
    assert sanitize_paths.main(["--small", "--only", "row_sum"]) == 0
    out = capsys.readouterr().out
    assert out.count(" ok ") == 7 and "7 paths, 0 failed" in out  # 3 plans at 2 widths, narrow
    monkeypatch.setattr(sanitize_paths.kp, "row_sum", lambda x, plan: x.sum(-1) * 1.01)
    assert sanitize_paths.main(["--small", "--only", "row_sum split"]) == 1
    out = capsys.readouterr().out
    assert "FAIL  CheckFailed: output 0: relative error" in out and "2 paths, 2 failed" in out
    assert sanitize_paths.main(["--small", "--only", "no such path"]) == 2


def test_each_op_depends_on_the_package_files_it_imports():
    """A change to a file an operator imports (a plan rule, the peeling helpers, the
    GEMM table) makes its numbers stale, and every run records that file's hash."""
    deps = {name: set(spec.depends_on()) for name, spec in suites.OPS.items()}
    assert "src/kernel_portfolio/ops/gemm_rule.py" in deps["matmul"]
    assert "src/kernel_portfolio/plans.py" in deps["matmul"]
    for op in ("softmax", "rms_norm", "residual_rms_norm", "row_sum"):
        assert "src/kernel_portfolio/ops/peel.py" in deps[op], op
    assert "src/kernel_portfolio/ops/peel.py" not in deps["add"] | deps["matmul"]
    recorded = set(records.bench_sources(Path(__file__).resolve().parents[1]))
    assert set().union(*deps.values()) <= recorded


def test_imported_sources_follow_imports_through_the_package(tmp_path, monkeypatch):
    pkg = tmp_path / "kernel_portfolio"
    (pkg / "ops").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from kernel_portfolio import unrelated\n")
    (pkg / "unrelated.py").write_text("")
    (pkg / "ops" / "op.py").write_text(
        "import math\nfrom kernel_portfolio import rule, missing\n"
        "def f():\n    import kernel_portfolio.late\n"
    )
    (pkg / "rule.py").write_text("from kernel_portfolio.deep import X\n")
    (pkg / "deep.py").write_text("from kernel_portfolio.ops.op import f\nX = 1\n")
    (pkg / "late.py").write_text("")
    monkeypatch.setattr(suites, "_PACKAGE_PATH", pkg)
    suites.imported_sources.cache_clear()
    try:
        found = suites.imported_sources("src/kernel_portfolio/ops/op.py")
    finally:
        suites.imported_sources.cache_clear()
    assert found == tuple(f"src/kernel_portfolio/{name}.py" for name in ("deep", "late", "rule"))
