"""Ahead-of-time compile probes (kernel_portfolio.arch) and the release matrix.

CPU only: Triton compiles for a GPUTarget without a device, and the ptxas
bundled in the triton wheel runs on the host. The module carries no marker:
nothing here needs a GPU, the interpreter or a browser, so CI always runs it.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import inspect
import json
import sys
from pathlib import Path

import pytest

from kernel_portfolio import arch
from kernel_portfolio.errors import UserError

REPO = Path(__file__).resolve().parents[1]
MATRIX = REPO / "results" / "triton-releases" / "matrix.json"

# A hand-written PTX body: one instruction of each family, plus traps for a
# naive count (comments, a predicate guard, wgmma's "mma_async.sync" opcode,
# two statements on one line, a brace-wrapped inline-asm block).
SNIPPET = """
.version 8.8
.target sm_100a
.address_size 64
// tcgen05.mma.cta_group::1 in a comment does not count
/* mma.sync.aligned in a block comment does not count */
.visible .entry k() {
  tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%r1], 32;
  wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%f1}, %rd1, %rd2, 1, 1, 1, 0, 0;
  mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%f1}, {%r1}, {%r2}, {%f2}; mma.sync.x %r1;
  @%p2 tensormap.replace.tile.global_address.shared::cta.b1024.b64 [ %rd1 + 0 ], %rd2;
  @!%p3 tensormap.replace.tile.rank.shared::cta.b1024.b32 [ %rd1 + 0 ], 0x1;
  { cp.async.bulk.tensor.2d.shared::cluster.global [%r3], [%rd3, {%r4, %r5}], [%r6]; }
  tensormap.cp_fenceproxy.global.shared::cta.tensormap::generic [%rd1], [%rd2], 128;
  ret;
}
"""

# The smallest PTX that assembles: an empty kernel.
VALID_PTX = """
.version 8.0
.target sm_80
.address_size 64
.visible .entry empty() { ret; }
"""


@pytest.fixture(scope="module")
def probes() -> list[arch.CompileProbe]:
    """Every probe kernel compiled for every default capability (about ten compiles)."""
    return arch.probe()


def _find(probes, kernel, capability):
    return next(p for p in probes if (p.kernel, p.capability) == (kernel, capability))


def test_count_instructions_counts_each_family_and_skips_comments():
    counts = arch.count_instructions(SNIPPET)
    assert counts == {
        "tcgen05": 1,
        "wgmma": 1,
        "mma.sync": 2,
        "tensormap.replace": 2,
        "cp.async.bulk.tensor": 1,
    }


def test_count_instructions_rejects_non_text():
    with pytest.raises(TypeError, match="ptx"):
        arch.count_instructions(SNIPPET.encode())


def test_ptx_target_and_retarget():
    assert arch.ptx_target(SNIPPET) == "sm_100a"
    moved = arch.retarget(SNIPPET, "sm_120")
    assert arch.ptx_target(moved) == "sm_120"
    assert moved.replace(".target sm_120\n", ".target sm_100a\n") == SNIPPET
    with pytest.raises(ValueError, match="no .target"):
        arch.retarget(".version 8.8\n", "sm_120")
    with pytest.raises(ValueError, match="gpu_name"):
        arch.retarget(SNIPPET, "compute_120")


def test_probe_target_follows_triton_rule(probes):
    """The .target of every compile is what Triton's own sm_arch_from_capability says."""
    assert len(probes) == len(arch.KERNELS) * len(arch.CAPABILITIES)
    for p in probes:
        assert p.compiled, (p.kernel, p.capability, p.error)
        assert p.target == arch.rule_arch(p.capability), (p.kernel, p.capability)


def test_probe_sees_each_architecture_family(probes):
    """The counts are not vacuous: each target's own instruction family shows up."""
    assert _find(probes, "dot", 80).counts["mma.sync"] > 0
    assert _find(probes, "dot", 90).counts["wgmma"] > 0
    assert _find(probes, "dot", 100).counts["tcgen05"] > 0
    assert _find(probes, "descriptor", 120).counts["tensormap.replace"] > 0
    assert _find(probes, "descriptor", 120).counts["cp.async.bulk.tensor"] > 0


def test_compile_probe_rejects_bad_arguments():
    with pytest.raises(ValueError, match="kernel"):
        arch.compile_probe("softmax", 120)
    with pytest.raises(TypeError, match="capability"):
        arch.compile_probe("dot", "120")
    with pytest.raises(ValueError, match="capability"):
        arch.compile_probe("dot", 0)


def test_isolated_probe_matches_in_process(probes):
    (child,) = arch.probe([80], ["dot"], isolate=True)
    here = _find(probes, "dot", 80)
    assert (child.target, child.counts, child.compiled) == (here.target, here.counts, True)


def test_isolated_probe_records_a_dead_compiler(tmp_path, monkeypatch):
    """A compiler that aborts costs one failed row with the reason, not the run."""
    dies = tmp_path / "dies.sh"
    dies.write_text("#!/bin/sh\necho 'Assertion failed: boom' >&2\nkill -ABRT $$\n")
    dies.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(dies))
    (p,) = arch.probe([120], ["dot"], isolate=True)
    assert not p.compiled and p.target is None and p.counts is None
    assert p.error == "compiler process died (signal SIGABRT)"
    assert "Assertion failed: boom" in p.messages


def test_run_ptxas_accepts_valid_ptx():
    run = arch.run_ptxas(VALID_PTX, "sm_80")
    assert run.ok and run.returncode == 0, run.output


def test_run_ptxas_reports_broken_ptx():
    broken = VALID_PTX.replace("ret;", "not_an_instruction.b32 %r1;")
    run = arch.run_ptxas(broken, "sm_80")
    assert not run.ok and run.returncode != 0
    assert "probe.ptx" in run.output and "error" in run.output.lower()


def test_run_ptxas_rejects_bad_arguments():
    with pytest.raises(ValueError, match="gpu_name"):
        arch.run_ptxas(VALID_PTX, "120a")
    with pytest.raises(TypeError, match="ptx"):
        arch.run_ptxas(None, "sm_80")


def test_suffix_decides_tensormap_replace(probes):
    """The episode's error, reproduced: the descriptor kernel needs sm_120a."""
    checks = {(c["kernel"], c["gpu_name"]): c for c in arch.ptxas_checks(probes)}
    assert checks["descriptor", "sm_120a"]["status"] == "accepted"
    rejected = checks["descriptor", "sm_120"]
    assert rejected["status"] == "rejected"
    assert "Instruction 'tensormap.replace' not supported on .target 'sm_120'" in rejected["output"]
    # sm_120a does not make tensor-memory code legal either.
    assert checks["dot", "sm_120a"]["status"] == "rejected"
    assert "tcgen05" in checks["dot", "sm_120a"]["output"]


def test_ptxas_checks_skip_without_ptx():
    failed = arch.CompileProbe.from_ptx("descriptor", 120, None, "RuntimeError: no")
    (row,) = arch.ptxas_checks([failed], [("descriptor", 120, "sm_120")])
    assert row["status"] == "skipped" and "RuntimeError: no" in row["output"]


def test_arch_rule_reads_the_installed_source():
    rule = arch.arch_rule()
    assert rule.function == "sm_arch_from_capability"
    assert rule.path == "triton/backends/nvidia/compiler.py"
    source = Path(inspect.getsourcefile(arch._nvidia_compiler())).read_text().splitlines()
    for number, text in rule.lines:
        assert source[number - 1] == text
    assert rule.lines[0][1].startswith("def sm_arch_from_capability")


def test_ptxas_for_is_bundled_and_versioned():
    bundled = arch.bundled_ptxas()
    for capability in arch.CAPABILITIES:
        path = arch.ptxas_for(capability)
        assert path.name in bundled
        assert bundled[path.name]["version"].startswith(bundled[path.name]["release"])


# ---------------------------------------------------------------- command line


def _kp(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="kp")
    arch.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def test_cli_probe_prints_the_table(capsys):
    assert _kp(["arch", "probe", "--capability", "120", "--kernel", "dot"]) == 0
    out = capsys.readouterr().out
    assert arch.rule_arch(120) in out and "tcgen05" in out


def test_cli_ptxas_prints_captured_errors(capsys):
    assert _kp(["arch", "ptxas", "--capability", "120", "--target", "sm_120"]) == 0
    out = capsys.readouterr().out
    assert "rejected" in out and "not supported on .target 'sm_120'" in out


def test_cli_user_mistakes_are_user_errors():
    with pytest.raises(UserError, match="gpu_name"):
        _kp(["arch", "ptxas", "--target", "sm120"])
    with pytest.raises(UserError, match="capability"):
        _kp(["arch", "probe", "--capability", "-5"])


# -------------------------------------------------------------- release matrix


def _load_script():
    spec = importlib.util.spec_from_file_location(
        "triton_release_matrix", REPO / "scripts" / "triton_release_matrix.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def committed() -> dict:
    return json.loads(MATRIX.read_text())


def test_committed_matrix_validates(committed):
    arch.validate_release_matrix(committed, name="matrix.json")
    assert (MATRIX.parent / committed["log"]).is_file()
    versions = [r["version"] for r in committed["releases"]]
    for wanted in ("3.2.", "3.3.", "3.4.", "3.5.", "3.6."):
        assert any(v.startswith(wanted) for v in versions), wanted


def _installed(document: dict) -> dict:
    """The committed release row for the triton installed here."""
    return next(r for r in document["releases"] if r["version"] == arch.triton.__version__)


def _mutations():
    release = _installed

    return {
        "schema_version": lambda d: d.update(schema_version=2),
        "kind": lambda d: d.update(kind="results"),
        "releases": lambda d: d["releases"].append(copy.deepcopy(d["releases"][0])),
        "probes": lambda d: release(d)["probes"].pop(),
        "counts": lambda d: release(d)["probes"][0]["counts"].update({"tcgen05": -1}),
        "error": lambda d: release(d)["probes"][0].update(compiled=False),
        "index_sha256": lambda d: release(d)["wheel"].update(index_sha256="0" * 64),
        "sha256": lambda d: release(d)["wheel"].update(sha256="not-a-hash"),
        "status": lambda d: release(d)["ptxas_checks"][0].update(status="maybe"),
        "sources": lambda d: d["sources"].update({"x.py": "abc"}),
        "commit": lambda d: d["git"].update(commit=d["git"]["commit"][:7]),
    }


@pytest.mark.parametrize("field", sorted(_mutations()))
def test_validator_rejects_broken_matrix(committed, field):
    broken = copy.deepcopy(committed)
    _mutations()[field](broken)
    with pytest.raises(ValueError, match=field):
        arch.validate_release_matrix(broken, name="matrix.json")


def test_script_output_matches_committed_format(tmp_path, monkeypatch, committed):
    """Run the script with the installed triton standing in for a downloaded one."""
    script = _load_script()
    ok = _installed(committed)
    monkeypatch.setattr(script, "fetch_wheel", lambda *args: (None, ok["wheel"]))
    monkeypatch.setattr(
        script, "probe_release", lambda wheel, venv, log: arch.release_report(isolate=False)
    )
    assert script.main(["--versions", ok["version"], "--out", str(tmp_path)]) == 0
    written = arch.validate_release_matrix(json.loads((tmp_path / "matrix.json").read_text()))
    assert (tmp_path / "matrix.log").read_text().startswith("# python scripts/")
    assert list(written) == list(committed)
    assert list(written["releases"][0]) == list(ok)
    assert written["capabilities"] == committed["capabilities"]
