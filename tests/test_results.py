"""Results files: schema, atomic save, staleness, archive, several GPUs, DataFrame view.

Every result here is built by the harness's own record code
(``kernel_portfolio.bench.records.fixture_result``, with a commit:
``site_workspace.fixture_result``), not typed by hand, in a temporary
repository holding copies of the measured source files; the archive's tests
commit them to a git repository there, whose history holds the sources an
archived result is checked against.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from site_workspace import fixture_result

from kernel_portfolio import results
from kernel_portfolio.bench import records
from kernel_portfolio.cli import main
from kernel_portfolio.errors import UserError
from kernel_portfolio.results import (
    FRAME_COLUMNS,
    RATIO_COLUMNS,
    CommitMissing,
    ResultError,
    commit_run,
    compare_runs,
    load,
    load_all,
    repo_root,
    save,
)

REPO = Path(__file__).resolve().parents[1]
SOFTMAX = "src/kernel_portfolio/ops/softmax.py"
MEASURED_FILES = ("plans", "contracts", "reference")


@pytest.fixture
def root(tmp_path, monkeypatch) -> Path:
    """A scratch repository: pyproject.toml, results/, and copies of the measured sources."""
    files = ["pyproject.toml", *(f"src/kernel_portfolio/{f}.py" for f in MEASURED_FILES)]
    for rel in files:
        dest = tmp_path / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / rel, dest)
    for folder in ("src/kernel_portfolio/ops", "src/kernel_portfolio/bench"):
        shutil.copytree(
            REPO / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__")
        )
    (tmp_path / "results").mkdir()
    monkeypatch.setenv("KP_ROOT", str(tmp_path))
    monkeypatch.delenv("KP_GIT_COMMIT", raising=False)
    monkeypatch.delenv("KP_GIT_DIRTY", raising=False)
    return tmp_path


@pytest.fixture
def saved(root) -> Path:
    path = root / "results" / "fixture" / "smoke.json"
    save(fixture_result(root), path)
    return path


# ------------------------------------------------------------------- schema
def test_valid_fixture_loads_with_id(saved):
    res = load(saved)
    assert res.id == "fixture/smoke"
    assert not res.archived
    assert {c["id"] for c in res.data["cases"]} >= {"softmax/fwd/1024x4096/float16"}


def _broken(saved: Path, edit) -> Path:
    data = json.loads(saved.read_text())
    edit(data)
    bad = saved.with_name("bad.json")
    bad.write_text(json.dumps(data))
    return bad


def _impl(data, case=0, impl="ours"):
    return data["cases"][case]["impls"][impl]


def _scale(record: dict, key: str, factor: float) -> None:
    record[key] *= factor


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda d: d.pop("env"), "env"),
        (lambda d: d["env"].pop("sm_count"), "env.sm_count"),
        (lambda d: d["env"].update(sm_count="132"), "env.sm_count"),
        (lambda d: d.update(schema_version=2), "schema_version"),
        (lambda d: d.update(started_utc="yesterday"), "started_utc"),
        (lambda d: d["git"].update(dirty="no"), "git.dirty"),
        (lambda d: d["git"].update(commit=d["git"]["commit"][:7]), "git.commit"),
        (lambda d: d["git"].update(commit=None), "git.commit"),
        (lambda d: d["git"].update(commit=d["git"]["commit"].upper()), "git.commit"),
        (lambda d: d["sources"].update({SOFTMAX: "abc"}), f"sources.{SOFTMAX}"),
        (lambda d: d["cases"][0].pop("impls"), "cases[0].impls"),
        (lambda d: d["cases"][0].update(shape=[1024, "4096"]), "cases[0].shape[1]"),
        (lambda d: d["cases"][0].update(id="softmax/fwd/1x1/float16"), "cases[0].id"),
        (lambda d: d["cases"][0].update(mode="backward"), "cases[0].mode"),
        (lambda d: _impl(d).update(median_ms=_impl(d)["median_ms"] * 2), "cases[0].impls.ours"),
        (lambda d: _impl(d)["samples_ms"].__setitem__(3, -1.0), "cases[0].impls.ours.samples_ms"),
        (lambda d: _impl(d).update(status="fine"), "cases[0].impls.ours.status"),
        (lambda d: _impl(d, 0, "torch").update(status="skipped"), "cases[0].impls.torch.reason"),
        (lambda d: d["cases"][0]["depends_on"].append("src/x.py"), "cases[0].depends_on["),
        (
            lambda d: d["cases"][1].update(
                id=d["cases"][0]["id"],
                **{k: d["cases"][0][k] for k in ("op", "mode", "shape", "dtype")},
            ),
            "cases[1].id",
        ),
        (lambda d: d["copy_bandwidth"].pop("gbps"), "copy_bandwidth.gbps"),
        # Derived figures are recomputed: a hand-edited one does not validate.
        (lambda d: _scale(_impl(d), "gbps", 1.001), "cases[0].impls.ours.gbps"),
        (lambda d: _scale(_impl(d), "pct_copy", 1.01), "cases[0].impls.ours.pct_copy"),
        (lambda d: _scale(_impl(d), "q90_ms", 1.01), "cases[0].impls.ours.q90_ms"),
        (lambda d: _scale(_impl(d, 2), "tflops", 0.99), "cases[2].impls.ours.tflops"),
        (lambda d: _impl(d).update(tflops=1.0), "cases[0].impls.ours.tflops"),
        (lambda d: _impl(d, 2).update(gbps=None), "cases[2].impls.ours.gbps"),
        (lambda d: _scale(d["cases"][0]["ratios"][0], "median", 1.01), "cases[0].ratios[0].median"),
        (lambda d: _scale(d["cases"][2]["ratios"][0], "q10", 0.99), "cases[2].ratios[0].q10"),
        (lambda d: _scale(d["copy_bandwidth"], "gbps", 1.01), "copy_bandwidth.gbps"),
        (lambda d: d["timing"].update(visits=3), "cases[0].ratios[0]"),
    ],
)
def test_invalid_files_name_file_and_field(saved, edit, field):
    bad = _broken(saved, edit)
    with pytest.raises(ResultError) as err:
        load(bad)
    assert err.value.field.startswith(field)
    assert str(bad) in str(err.value)


def test_busy_flag_and_unknown_dirty_flag_round_trip(root):
    data = fixture_result(root)
    data["gpu_state"]["busy_at_start"] = True
    data["git"]["dirty"] = None  # a copied tree that did not say
    path = save(data, root / "results" / "fixture" / "smoke.json")
    assert load(path).data["gpu_state"]["busy_at_start"] is True
    assert load(path).data["git"]["dirty"] is None
    data["gpu_state"]["busy_at_start"] = 1  # an int is not a bool
    with pytest.raises(ResultError, match="busy_at_start.*expected bool"):
        save(data, path)


def test_derived_figures_tolerate_only_rounding(saved):
    """Ratios come from unrounded samples: the saved ones pass, a nudge past the slack does not."""
    data = json.loads(saved.read_text())
    assert data["cases"][0]["ratios"], "the fixture saves ratios"
    results.validate(data)
    assert results.schema.SAMPLE_ROUNDING_MS == 0.5 * 10.0**-records.SAMPLE_DECIMALS
    _scale(data["cases"][0]["ratios"][0], "median", 1 + 1e-3)
    with pytest.raises(ResultError, match=r"ratios\[0\]\.median.*recomputed"):
        results.validate(data)


def test_rates_of_a_skipped_impl_are_rejected(saved):
    def edit(d):
        _impl(d, 0, "torch").update(
            status="skipped", reason="x", samples_ms=[], median_ms=None, q10_ms=None, q90_ms=None,
            pct_copy=None,
        )  # fmt: skip
        d["cases"][0]["ratios"] = [r for r in d["cases"][0]["ratios"] if r["baseline"] != "torch"]

    with pytest.raises(ResultError, match=r"impls\.torch\.gbps.*no timing"):
        load(_broken(saved, edit))


def test_ratio_against_unmeasured_impl_is_rejected(saved):
    def edit(d):
        _impl(d, 0, "torch").update(
            status="skipped",
            reason="x",
            samples_ms=[],
            median_ms=None,
            q10_ms=None,
            q90_ms=None,
            gbps=None,
            pct_copy=None,
        )

    with pytest.raises(ResultError, match=r"ratios\[\d\]\.baseline"):
        load(_broken(saved, edit))


def test_nan_sample_is_rejected(saved):
    text = saved.read_text()
    data = json.loads(text)
    first = repr(_impl(data)["samples_ms"][0])
    bad = saved.with_name("nan.json")
    bad.write_text(text.replace(first, "NaN", 1))
    with pytest.raises(ResultError, match=r"samples_ms\[0\].*finite"):
        load(bad)


def test_truncated_file_is_rejected(saved):
    bad = saved.with_name("cut.json")
    bad.write_text(saved.read_text()[:500])
    with pytest.raises(ResultError, match="not valid JSON"):
        load(bad)
    with pytest.raises(ResultError, match="cannot be read"):
        load(saved.with_name("absent.json"))


def test_save_validates_before_writing(root):
    data = fixture_result(root)
    data["cases"][0]["impls"]["ours"]["samples_ms"][0] = math.nan
    path = root / "results" / "fixture" / "smoke.json"
    with pytest.raises(ResultError, match="samples_ms"):
        save(data, path)
    assert not path.exists()


# ------------------------------------------------------------ atomic write
def _leftovers(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]


def test_interrupted_dump_leaves_old_file(saved, monkeypatch):
    before = saved.read_bytes()
    new = fixture_result(saved.parents[2], seed=1)

    def half_dump(obj, fh, **kwargs):
        fh.write(json.dumps(obj)[:100])
        raise KeyboardInterrupt

    monkeypatch.setattr(json, "dump", half_dump)
    with pytest.raises(KeyboardInterrupt):
        save(new, saved)
    assert saved.read_bytes() == before
    assert not _leftovers(saved.parent)


def test_failed_replace_leaves_old_file(saved, monkeypatch):
    before = saved.read_bytes()

    def no_replace(src, dst):
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", no_replace)
    with pytest.raises(OSError, match="disk gone"):
        save(fixture_result(saved.parents[2], seed=1), saved)
    assert saved.read_bytes() == before
    assert not _leftovers(saved.parent)


def test_saved_files_are_readable_by_others(saved):
    assert saved.stat().st_mode & 0o777 == 0o644  # not mkstemp's private 0600
    saved.chmod(0o664)
    save(fixture_result(saved.parents[2], seed=1), saved)
    assert saved.stat().st_mode & 0o777 == 0o664


# --------------------------------------------------------------- staleness
def test_staleness_names_the_edited_kernel(root, saved):
    res = load(saved)
    assert res.staleness(root) == results.Staleness(True, [])
    kernel = root / SOFTMAX
    kernel.write_text(kernel.read_text() + "\n# edited\n")
    stale = res.staleness(root)
    assert not stale.current
    assert stale.changed == [SOFTMAX]
    softmax_case = next(c["id"] for c in res.data["cases"] if c["op"] == "softmax")
    gemm_case = next(c["id"] for c in res.data["cases"] if c["op"] == "matmul")
    assert res.case_staleness(softmax_case, root).changed == [SOFTMAX]
    assert res.case_staleness(gemm_case, root).current


def test_staleness_ignores_line_endings_and_sees_deleted_files(root, saved):
    res = load(saved)
    plans = root / "src/kernel_portfolio/plans.py"
    plans.write_bytes(plans.read_bytes().replace(b"\n", b"\r\n"))
    assert res.staleness(root).current
    (root / "src/kernel_portfolio/ops/matmul.py").unlink()
    assert res.staleness(root).changed == ["src/kernel_portfolio/ops/matmul.py"]


def test_a_result_computed_from_a_result_follows_its_staleness(root, saved):
    """A fit records the runs it read among its sources: it is current while they are.

    Stale when the run's file is not the one recorded, and when the run itself is
    stale (a kernel it measured changed), though the run's file is untouched.
    """
    run = "results/fixture/smoke.json"
    fit = fixture_result(root)
    fit["sources"] = {run: results.file_sha256(saved)}
    for case in fit["cases"]:
        case["depends_on"] = [run]
    path = root / "results" / "fixture" / "fit.json"
    save(fit, path)
    first = fit["cases"][0]["id"]
    assert load(path).staleness(root).current
    kernel = root / SOFTMAX
    kernel.write_text(kernel.read_text() + "\n# edited\n")
    stale = load(path).staleness(root)
    assert stale.changed == [f"{run} ({SOFTMAX})"]
    assert load(path).case_staleness(first, root).changed == stale.changed
    fit["sources"][run] = "0" * 64  # a run file that is not the one the fit read
    save(fit, path)
    assert load(path).staleness(root).changed == [run]


def test_every_case_depends_on_its_op_file_and_the_harness(root, saved):
    res = load(saved)
    for case in res.data["cases"]:
        deps = case["depends_on"]
        assert any(d.startswith("src/kernel_portfolio/ops/") for d in deps), case["id"]
        assert "src/kernel_portfolio/bench/timing.py" in deps
        assert set(deps) <= set(res.data["sources"])


# ----------------------------------------------------- repo root and listing
def test_repo_root_env_and_walk_up(root, monkeypatch, tmp_path):
    assert repo_root() == root.resolve()
    monkeypatch.delenv("KP_ROOT")
    deep = root / "src" / "kernel_portfolio"
    monkeypatch.chdir(deep)
    assert repo_root() == root.resolve()
    monkeypatch.setenv("KP_ROOT", str(tmp_path / "nowhere"))
    with pytest.raises(ResultError, match="KP_ROOT"):
        repo_root()


def test_load_all_skips_other_kinds(root, saved):
    other = root / "results" / "triton-releases" / "matrix.json"
    other.parent.mkdir()
    other.write_text(json.dumps({"schema_version": 1, "kind": "triton_release_matrix"}))
    assert [r.id for r in load_all(root)] == ["fixture/smoke"]
    (root / "results" / "fixture" / "cut.json").write_text('{"kind": "benchmark", ')
    with pytest.raises(ResultError, match="cut.json"):
        load_all(root)


# ------------------------------------------------- two GPUs and the archive
def _git(root: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(root), *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def _commit_all(root: Path, message: str) -> str:
    """Commit the whole scratch tree (a fresh repository on the first call); the new HEAD."""
    if not (root / ".git").exists():
        _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", message)
    return _git(root, "rev-parse", "HEAD")


def test_gpus_side_by_side_and_archive_on_source_change(root):
    v1 = _commit_all(root, "v1")
    res_dir = root / "results"
    first_a = fixture_result(root, gpu_slug="gpu-a", seed=1)
    first_a["finished_utc"] = "2026-11-30T17:00:00Z"
    commit_run(first_a, res_dir / "gpu-a", "smoke", "log of a, run 1\n", root)
    commit_run(
        fixture_result(root, gpu_slug="gpu-b", seed=2),
        res_dir / "gpu-b",
        "smoke",
        "log of b\n",
        root,
    )
    b_before = (res_dir / "gpu-b" / "smoke.json").read_bytes()

    # Same sources: replaced in place, nothing archived.
    done = commit_run(
        fixture_result(root, gpu_slug="gpu-a", seed=3),
        res_dir / "gpu-a",
        "smoke",
        "log of a, run 2\n",
        root,
    )
    assert done.previous is not None and done.archived is None
    assert not (res_dir / "archive").exists()

    # A kernel changes (and is committed): the previous result is archived, its JSON and log.
    kernel = root / SOFTMAX
    kernel.write_text(kernel.read_text() + "\n# faster\n")
    v2 = _commit_all(root, "v2")
    before = load(res_dir / "gpu-a" / "smoke.json")
    before.data["finished_utc"] = "2026-11-30T18:00:00Z"
    save(before.data, before.path)
    done = commit_run(
        fixture_result(root, gpu_slug="gpu-a", seed=4),
        res_dir / "gpu-a",
        "smoke",
        "log of a, run 3\n",
        root,
    )
    archived = res_dir / "archive" / "gpu-a" / "smoke-20261130T180000Z.json"
    assert done.archived == archived and not done.changed_sources
    assert sorted(p.name for p in archived.parent.iterdir()) == [
        archived.name,
        f"{archived.stem}.log",
    ]
    old = load(archived)
    assert old.id == "archive/gpu-a/smoke-20261130T180000Z" and old.archived
    assert old.data["git"]["commit"] == v1
    assert (archived.parent / old.data["log"]).read_text() == "log of a, run 2\n"
    assert old.staleness(root).current  # git holds the sources it measured, at v1
    assert load(res_dir / "gpu-a" / "smoke.json").staleness(root).current
    assert (res_dir / "gpu-a" / "smoke.log").read_text() == "log of a, run 3\n"
    assert (res_dir / "gpu-b" / "smoke.json").read_bytes() == b_before
    assert sorted(r.id for r in load_all(root)) == [
        "archive/gpu-a/smoke-20261130T180000Z",
        "gpu-a/smoke",
        "gpu-b/smoke",
    ]
    # The check can fail: the same record named at v2, whose kernel is not the one it hashed.
    old.data["git"]["commit"] = v2
    save(old.data, archived)
    assert load(archived).staleness(root).changed == [SOFTMAX]


def test_archive_of_a_dirty_run_reads_stale(root):
    """A run of uncommitted code: the file at its commit is not what it measured."""
    _commit_all(root, "v1")
    kernel = root / SOFTMAX
    kernel.write_text(kernel.read_text() + "\n# uncommitted edit\n")
    out = root / "results" / "gpu-a"
    commit_run(fixture_result(root, gpu_slug="gpu-a"), out, "smoke", "run 1\n", root)
    kernel.write_text(kernel.read_text() + "\n# another\n")
    done = commit_run(fixture_result(root, gpu_slug="gpu-a"), out, "smoke", "run 2\n", root)
    assert done.changed_sources == [SOFTMAX]
    assert any("differ from the files at its commit" in note for note in done.notes)
    archived = load(done.archived)
    assert archived.staleness(root).changed == [SOFTMAX]
    softmax_case = next(c["id"] for c in archived.data["cases"] if c["op"] == "softmax")
    gemm_case = next(c["id"] for c in archived.data["cases"] if c["op"] == "matmul")
    assert archived.case_staleness(softmax_case, root).changed == [SOFTMAX]
    assert archived.case_staleness(gemm_case, root).current


def test_archiving_without_the_commit_keeps_the_run_and_says_so(root):
    """A clone whose history lacks the previous run's commit: nothing is lost, the note says why."""
    _commit_all(root, "v1")
    out = root / "results" / "gpu-a"
    unknown = fixture_result(root, gpu_slug="gpu-a")
    unknown["git"]["commit"] = "f" * 40  # measured at a commit this history lacks
    commit_run(unknown, out, "smoke", "run 1\n", root)
    kernel = root / SOFTMAX
    kernel.write_text(kernel.read_text() + "\n# edit\n")
    new = fixture_result(root, gpu_slug="gpu-a", seed=1)
    done = commit_run(new, out, "smoke", "run 2\n", root)
    assert load(done.path).data["cases"] == new["cases"]
    assert load(done.archived).data["git"]["commit"] == "f" * 40
    assert any("not checked here" in n and "git fetch --unshallow" in n for n in done.notes)
    with pytest.raises(CommitMissing, match="f{40} is not in the git history"):
        load(done.archived).staleness(root)


def test_archived_result_outside_git_fails_with_one_line(root):
    _commit_all(root, "v1")
    out = root / "results" / "gpu-a"
    commit_run(fixture_result(root, gpu_slug="gpu-a"), out, "smoke", "run 1\n", root)
    (root / SOFTMAX).write_text("# edited\n")
    done = commit_run(fixture_result(root, gpu_slug="gpu-a"), out, "smoke", "run 2\n", root)
    shutil.rmtree(root / ".git")  # an unpacked archive of the tree
    with pytest.raises(CommitMissing, match="is not a git checkout") as err:
        load(done.archived).staleness(root)
    assert len(str(err.value).splitlines()) == 1


def test_a_shallow_clone_names_the_missing_commit_and_how_to_fetch_it(root, monkeypatch, capsys):
    """``git clone --depth 1`` lacks an archived result's commit: a clear error, then a fetch."""
    v1 = _commit_all(root, "v1")
    out = root / "results" / "gpu-a"
    commit_run(fixture_result(root, gpu_slug="gpu-a"), out, "smoke", "run 1\n", root)
    kernel = root / SOFTMAX
    kernel.write_text(kernel.read_text() + "\n# faster\n")
    _commit_all(root, "v2")
    done = commit_run(fixture_result(root, gpu_slug="gpu-a"), out, "smoke", "run 2\n", root)
    assert not done.changed_sources
    _commit_all(root, "results")
    clone = root.parent / "clone"
    subprocess.run(
        ["git", "clone", "-q", "--depth", "1", f"file://{root}", str(clone)],
        check=True,
        capture_output=True,
    )
    archived = clone / done.archived.relative_to(root)
    with pytest.raises(CommitMissing) as err:
        load(archived).staleness(clone)
    message = str(err.value)
    assert v1 in message and "git fetch --unshallow" in message and len(message.splitlines()) == 1
    monkeypatch.setenv("KP_ROOT", str(clone))
    assert main(["results"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[1] for line in lines] == ["UNVERIFIED", "current"]
    _git(clone, "fetch", "-q", "--unshallow")
    assert load(archived).staleness(clone).current
    assert main(["results"]) == 0


def test_archiving_drops_older_sets_that_no_text_names(root):
    """Four runs, each after a kernel edit: the archive keeps the newest set and the named one."""
    _commit_all(root, "v1")
    out = root / "results" / "gpu-a"
    kernel = root / SOFTMAX
    names = []
    for run in range(4):
        data = fixture_result(root, gpu_slug="gpu-a", seed=run)
        data["finished_utc"] = f"2026-11-30T1{run}:00:00Z"
        done = commit_run(data, out, "smoke", f"run {run}\n", root)
        if done.archived is not None:
            names.append(done.archived.stem)
        if run == 0:
            (root / "NOTES.md").write_text("The first run: smoke-20261130T100000Z.\n")
        kernel.write_text(kernel.read_text() + f"\n# edit {run}\n")
    assert names == [f"smoke-20261130T1{run}0000Z" for run in range(3)]
    archive = root / "results" / "archive" / "gpu-a"
    kept = sorted(p.name for p in archive.iterdir())
    assert kept == [
        f"{name}{suffix}" for name in (names[0], names[2]) for suffix in (".json", ".log")
    ]
    assert any(f"dropped the archived {names[1]}" in note for note in done.notes)


def test_import_run_commits_a_fetched_result(root, tmp_path_factory):
    fetched = tmp_path_factory.mktemp("device") / "h200"
    data = fixture_result(root, gpu_slug="h200")
    data["log"] = "default.log"
    save(data, fetched / "default.json")
    (fetched / "default.log").write_text("raw log\n")
    done = results.import_run(fetched / "default.json", root)
    assert done.path == root / "results" / "h200" / "default.json"
    assert (root / "results" / "h200" / "default.log").read_text() == "raw log\n"
    assert load(done.path).id == "h200/default"
    with pytest.raises(ResultError, match="already in its results folder"):
        results.import_run(done.path, root)


def test_git_state_needs_a_full_commit(root, monkeypatch):
    with pytest.raises(UserError, match="not a git checkout.*KP_GIT_COMMIT"):
        results.git_state(root)
    monkeypatch.setenv("KP_GIT_COMMIT", "abc1234")
    with pytest.raises(UserError, match="KP_GIT_COMMIT must be the full 40-hex commit"):
        results.git_state(root)
    monkeypatch.setenv("KP_GIT_COMMIT", "ab" * 20)
    monkeypatch.setenv("KP_GIT_DIRTY", "0")
    assert results.git_state(root) == {"commit": "ab" * 20, "dirty": False}
    monkeypatch.delenv("KP_GIT_COMMIT")
    head = _commit_all(root, "v1")
    assert results.git_state(root) == {"commit": head, "dirty": False}


def test_git_state_environment_wins_over_an_older_checkout(monkeypatch):
    """A GPU machine's copy has the .git of an earlier commit: the environment names the tree."""
    assert results.git_state(REPO)["commit"] != "ab" * 20
    monkeypatch.setenv("KP_GIT_COMMIT", "ab" * 20)
    monkeypatch.setenv("KP_GIT_DIRTY", "1")
    assert results.git_state(REPO) == {"commit": "ab" * 20, "dirty": True}


# ---------------------------------------------------------- comparing runs
def test_compare_runs_reports_moves_beyond_the_spread(root):
    base = fixture_result(root, seed=5)
    assert compare_runs(base, fixture_result(root, seed=5)) == []
    assert compare_runs(base, fixture_result(root, seed=6)) == []  # noise only
    lines = compare_runs(base, fixture_result(root, seed=6, scale=1.5))
    assert len(lines) == sum(len(c["impls"]) for c in base["cases"])
    moves = [float(line.rsplit("(", 1)[1].rstrip("%)")) for line in lines]
    assert all(40 < m < 60 for m in moves), lines
    skipped = fixture_result(root, seed=5, skip={"liger": "not installed"})
    assert [line for line in compare_runs(base, skipped) if "liger" in line] == [
        f"{c['id']} liger: ok -> skipped" for c in base["cases"] if "liger" in c["impls"]
    ]
    fewer = dict(base, cases=base["cases"][1:])
    assert compare_runs(base, fewer) == [f"{base['cases'][0]['id']}: dropped"]
    assert compare_runs(fewer, base) == [f"{base['cases'][0]['id']}: new case"]


# --------------------------------------------------------------- DataFrame
def test_frame_is_tidy(saved):
    res = load(saved)
    frame = res.frame()
    assert tuple(frame.columns) == FRAME_COLUMNS
    assert len(frame) == sum(len(c["impls"]) for c in res.data["cases"])
    row = frame[(frame.case == "softmax/fwd/1024x4096/float16") & (frame.impl == "ours")].iloc[0]
    rec = res.case("softmax/fwd/1024x4096/float16")["impls"]["ours"]
    assert row.median_us == pytest.approx(rec["median_ms"] * 1000)
    assert (
        row["shape"] == "1024x4096" and row["result"] == "fixture/smoke" and row["status"] == "ok"
    )
    gemm = frame[(frame.op == "matmul") & (frame.impl == "ours")].iloc[0]
    assert gemm.tflops > 0 and gemm.pct_cublas == pytest.approx(100 / 1.05, rel=0.05)
    ratios = res.ratio_frame()
    assert tuple(ratios.columns) == RATIO_COLUMNS
    assert set(ratios.baseline) == {"torch", "compile", "liger", "cublas"}
    with pytest.raises(KeyError, match="no case"):
        res.case("softmax/fwd/1x1/float16")


def test_repository_tracks_no_symbolic_links():
    """A tracked link (a worktree's link to a local folder of wheels, say) replaces
    that folder on checkout: the GPU calls then carry the link and lose what it held."""
    if not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-s"], capture_output=True, text=True, check=True
    ).stdout
    links = [line.split("\t", 1)[1] for line in listed.splitlines() if line.startswith("120000")]
    assert not links, links
