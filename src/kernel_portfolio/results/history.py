"""Provenance and history of results: git state, committing a run, archiving, comparing.

Results of several GPUs live side by side (``results/<gpu-slug>/``) and never
overwrite each other. Committing a new run of a suite replaces that suite's
file for that GPU only; when the previous file measured different sources, it
first moves to ``results/archive/<gpu-slug>/<suite>-<stamp>.json`` with its
log. The sources it measured stay where git keeps them: an archived result is
judged against the files at its recorded commit (``git show COMMIT:PATH``), so
a quote of the archived id still leads to the code behind the number.

The archive keeps what a reader can reach: the newest archived set of each
suite, and every set whose name a text of the repository names (a quote on a
page, a results README, the performance notes). Archiving a new set drops the
older ones of that suite that nothing names; git history keeps them.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from kernel_portfolio.errors import UserError
from kernel_portfolio.results.schema import COMMIT, ResultError, validate
from kernel_portfolio.results.store import (
    ARCHIVE_DIR,
    RESULTS_DIR,
    CommitMissing,
    Result,
    load,
    repo_root,
    save,
    write_text_atomic,
)

#: Texts searched for names of archived sets (:func:`prune_archive`), and folders skipped.
_TEXT_SUFFIXES = {".md", ".py", ".yml", ".yaml", ".toml", ".txt", ".sh"}
_SKIPPED_DIRS = {ARCHIVE_DIR, "site", "node_modules", "__pycache__"}


def _git(root: Path, *args: str) -> str | None:
    """Run ``git --no-optional-locks -C root ARGS``; stdout, or ``None`` if git fails."""
    try:
        proc = subprocess.run(
            ["git", "--no-optional-locks", "-C", str(root), *args],
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


def git_state(root: str | Path) -> dict:
    """``{"commit": full sha, "dirty": bool or None}`` of the checkout at ``root``.

    Changes under ``results/`` do not count as dirty. ``KP_GIT_COMMIT`` (the
    full 40-hex commit) and ``KP_GIT_DIRTY`` (``0``/``1``) say what a copied
    working tree was copied from; they win over the copy's own git metadata,
    which can be older than the tree (a GPU machine sent the working tree with
    the ``.git`` of an earlier commit).

    Raises:
        UserError: ``KP_GIT_COMMIT`` is not a full commit, or it is unset and
            ``root`` is not a git checkout with a commit: a result records the
            exact commit it measured.
    """
    root = Path(root)
    env_commit = os.environ.get("KP_GIT_COMMIT")
    if env_commit:
        if not COMMIT.fullmatch(env_commit):
            raise UserError(
                "KP_GIT_COMMIT must be the full 40-hex commit measured (git rev-parse HEAD), "
                f"got {env_commit!r}"
            )
        env_dirty = os.environ.get("KP_GIT_DIRTY")
        return {
            "commit": env_commit,
            "dirty": None if env_dirty is None else env_dirty not in ("0", ""),
        }
    commit = (_git(root, "rev-parse", "HEAD") or "").strip()
    if not COMMIT.fullmatch(commit):
        raise UserError(
            f"{root} is not a git checkout with a commit: a result records the full commit it "
            "measured (set KP_GIT_COMMIT to it for a copied tree)"
        )
    status = _git(root, "status", "--porcelain", "--", ".", f":(exclude){RESULTS_DIR}")
    return {"commit": commit, "dirty": None if status is None else bool(status.strip())}


@dataclass
class Committed:
    """What :func:`commit_run` did.

    Attributes:
        path: The new results file.
        previous: The result it replaced (``None`` if there was none or it did not load).
        archived: Where the previous result was archived, if its sources differed.
        changed_sources: Sources of the archived result whose file at its commit
            does not match the recorded hash (the cases on them read as stale).
        notes: Lines worth telling the user (an unreadable previous file, changed sources).
    """

    path: Path
    previous: Result | None = None
    archived: Path | None = None
    changed_sources: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _stamp(utc: str) -> str:
    """``"2026-11-30T17:00:00Z"`` -> ``"20261130T170000Z"``."""
    return utc.split(".")[0].rstrip("Z").replace("-", "").replace(":", "") + "Z"


def archive_result(previous: Result) -> Path:
    """Copy a result and its log into ``results/archive/<gpu>/``; git keeps its sources.

    The archive goes beside the result's own GPU folder:
    ``<results>/archive/<gpu-slug>/<stem>-<stamp>.json`` (+ ``.log``), stamped
    with the run's finish time. From then on it is judged against the files at
    its recorded commit (:meth:`Result.staleness`).

    Args:
        previous: The result to archive (it stays where it is).

    Returns:
        The archived file.
    """
    data = dict(previous.data)
    base_dir = previous.path.parent.parent / ARCHIVE_DIR / data["gpu_slug"]
    name = f"{previous.path.stem}-{_stamp(data['finished_utc'])}"
    n = 1
    while (base_dir / f"{name}.json").exists():
        n += 1
        name = f"{previous.path.stem}-{_stamp(data['finished_utc'])}-{n}"
    target = base_dir / f"{name}.json"
    old_log = previous.path.parent / data["log"] if data.get("log") else None
    if old_log is not None and old_log.is_file():
        write_text_atomic(base_dir / f"{name}.log", old_log.read_text(encoding="utf-8"))
        data["log"] = f"{name}.log"
    else:
        data["log"] = None
    save(data, target)
    return target


def _named_texts(root: Path) -> str:
    """Every text file of the repository at ``root``, archive and build output left out, joined."""
    texts = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in _SKIPPED_DIRS and not d.startswith(".")]
        for name in files:
            if Path(name).suffix in _TEXT_SUFFIXES:
                texts.append(Path(folder, name).read_text(encoding="utf-8", errors="replace"))
    return "\n".join(texts)


def prune_archive(archive_dir: Path, stem: str, root: Path) -> list[str]:
    """Drop the archived sets of ``stem`` that are neither the newest nor named by a text.

    A set is ``<stem>-<stamp>[-n].json`` with its ``.log`` in ``archive_dir``;
    a text names it when its name appears in a text file of
    the repository at ``root`` outside the archive and the built site.

    Returns:
        The names of the dropped sets, oldest first.
    """
    pattern = re.compile(rf"{re.escape(stem)}-(\d{{8}}T\d{{6}}Z)(?:-(\d+))?\.json")
    sets = sorted(
        (m.group(1), int(m.group(2) or 1), p.stem)
        for p in archive_dir.glob("*.json")
        if (m := pattern.fullmatch(p.name))
    )
    if len(sets) < 2:
        return []
    named = _named_texts(root)
    dropped = [name for *_, name in sets[:-1] if name not in named]
    for name in dropped:
        (archive_dir / f"{name}.json").unlink()
        (archive_dir / f"{name}.log").unlink(missing_ok=True)
    return dropped


def commit_run(
    data: dict,
    out_dir: str | Path,
    stem: str,
    log_text: str | None = None,
    root: str | Path | None = None,
) -> Committed:
    """Write a run's result (and log) as ``<out_dir>/<stem>.json``, archiving the previous one.

    The previous ``<stem>.json`` in ``out_dir`` (same GPU, same suite) is
    archived first when its recorded source hashes differ from the new ones
    (then :func:`prune_archive` drops older archived sets of the suite that
    nothing names); with the same hashes it is simply replaced. The archived
    result is checked against the files at its commit; where this clone's
    history lacks that commit it is archived all the same, with a note. Other GPUs'
    folders and other suites are never touched.

    Args:
        data: The new result (validated before anything is written).
        out_dir: The GPU's results folder, e.g. ``results/h200``.
        stem: File stem, normally the suite name.
        log_text: The run's console log, written as ``<stem>.log`` (the result's
            ``log`` field is set to that name).
        root: Repository root whose git history holds the previous result's commit.

    Raises:
        ResultError: ``data`` is not a valid result.
    """
    out_dir = Path(out_dir)
    target = out_dir / f"{stem}.json"
    if log_text is not None:
        data = {**data, "log": f"{stem}.log"}
    validate(data, target)
    done = Committed(target)
    if target.exists():
        try:
            done.previous = load(target)
        except ResultError as err:
            done.notes.append(f"the previous file did not load and is replaced: {err}")
    if done.previous is not None and done.previous.data["sources"] != data["sources"]:
        root = Path(root) if root is not None else repo_root()
        done.archived = archive_result(done.previous)
        try:
            done.changed_sources = load(done.archived).staleness(root).changed
        except CommitMissing as err:  # kept all the same: the history can be fetched later
            done.notes.append(f"archived {done.archived.name}, not checked here: {err}")
        if done.changed_sources:
            commit = done.previous.data["git"]["commit"]
            done.notes.append(
                f"archived {done.archived.name}, but {len(done.changed_sources)} of its sources "
                f"differ from the files at its commit {commit}: "
                f"{', '.join(done.changed_sources)}; the cases on them read as stale"
            )
        for name in prune_archive(done.archived.parent, stem, root):
            done.notes.append(f"dropped the archived {name}: no text names it (git keeps it)")
    if log_text is not None:
        write_text_atomic(out_dir / f"{stem}.log", log_text)
    save(data, target)
    return done


def import_run(src: str | Path, results_root: str | Path | None = None) -> Committed:
    """Commit a results file measured elsewhere (e.g. fetched from a GPU machine).

    Reads ``src`` and the log it names beside it, and commits both into
    ``<root>/results/<gpu-slug>/`` under the same stem, archiving as
    :func:`commit_run` does.

    Raises:
        ResultError: ``src`` is not a valid result.
    """
    result = load(src)
    root = Path(results_root) if results_root is not None else repo_root()
    log_name = result.data.get("log")
    log_path = result.path.parent / log_name if log_name else None
    log_text = log_path.read_text(encoding="utf-8") if log_path and log_path.is_file() else None
    data = dict(result.data, log=f"{result.path.stem}.log" if log_text is not None else None)
    out_dir = root / RESULTS_DIR / data["gpu_slug"]
    if out_dir.resolve() == result.path.parent.resolve():
        raise ResultError(src, "", "is already in its results folder")
    return commit_run(data, out_dir, result.path.stem, log_text, root)


def compare_runs(old: dict, new: dict) -> list[str]:
    """Lines saying which measurements changed between two runs of a suite.

    A timing changed when its median moved by more than the combined spread
    of the two runs (half of ``q90 - q10`` of each, added). Status changes,
    new cases and dropped cases are listed too.
    """
    old_cases = {c["id"]: c for c in old["cases"]}
    new_cases = {c["id"]: c for c in new["cases"]}
    lines = []
    for case_id, case in new_cases.items():
        before = old_cases.get(case_id)
        if before is None:
            lines.append(f"{case_id}: new case")
            continue
        for impl, rec in case["impls"].items():
            prev = before["impls"].get(impl)
            if prev is None:
                lines.append(f"{case_id} {impl}: newly measured ({rec['status']})")
            elif prev["status"] != rec["status"]:
                lines.append(f"{case_id} {impl}: {prev['status']} -> {rec['status']}")
            elif rec["status"] == "ok":
                moved = rec["median_ms"] - prev["median_ms"]
                spread = (rec["q90_ms"] - rec["q10_ms"] + prev["q90_ms"] - prev["q10_ms"]) / 2
                if abs(moved) > spread:
                    lines.append(
                        f"{case_id} {impl}: {prev['median_ms'] * 1e3:.2f} us -> "
                        f"{rec['median_ms'] * 1e3:.2f} us ({100 * moved / prev['median_ms']:+.1f}%)"
                    )
    lines += [f"{case_id}: dropped" for case_id in old_cases if case_id not in new_cases]
    return lines
