"""Loading, saving, staleness and the tidy view of results files."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from kernel_portfolio.results.schema import ResultError, validate

if TYPE_CHECKING:
    import pandas as pd

#: Folder (under the repository root) that holds every results file.
RESULTS_DIR = "results"
#: Folder (under ``results/``) that keeps superseded results: JSON and log (git keeps the sources).
ARCHIVE_DIR = "archive"

FRAME_COLUMNS = (
    "result", "case", "op", "mode", "shape", "dtype", "impl", "status", "median_us", "q10_us",
    "q90_us", "gbps", "pct_copy", "tflops", "pct_cublas", "rel_error", "peak_mem_bytes", "timer",
    "cache",
)  # fmt: skip
RATIO_COLUMNS = (
    "result", "case", "op", "mode", "shape", "dtype", "impl", "baseline", "median", "q10", "q90",
)  # fmt: skip


def repo_root() -> Path:
    """The repository root: the folder holding ``pyproject.toml`` and ``results/``.

    ``KP_ROOT`` overrides. Otherwise the search walks up from the current
    directory, then from this package's location (an editable install), where
    a ``pyproject.toml`` beside ``src/kernel_portfolio`` is enough (``results/``
    may not exist before the first run).

    Raises:
        ResultError: no such folder (set ``KP_ROOT``).
    """
    env = os.environ.get("KP_ROOT")
    if env:
        root = Path(env).expanduser().resolve()
        if not (root / "pyproject.toml").is_file():
            raise ResultError(env, "KP_ROOT", "has no pyproject.toml")
        return root
    for start in (Path.cwd().resolve(), *Path.cwd().resolve().parents):
        if (start / "pyproject.toml").is_file() and (start / RESULTS_DIR).is_dir():
            return start
    for start in Path(__file__).resolve().parents:
        if (start / "pyproject.toml").is_file() and (start / "src" / "kernel_portfolio").is_dir():
            return start
    raise ResultError(Path.cwd(), "", "no repository root above it (set KP_ROOT)")


def file_sha256(path: str | Path) -> str:
    """SHA-256 of a file's bytes with CRLF line ends normalised to LF."""
    return _sha256(Path(path).read_bytes())


def _sha256(content: bytes) -> str:
    return hashlib.sha256(content.replace(b"\r\n", b"\n")).hexdigest()


def source_hashes(root: str | Path, paths) -> dict[str, str]:
    """``{repo-relative path: SHA-256}`` for the given files that exist under ``root``."""
    root = Path(root)
    return {p: file_sha256(root / p) for p in sorted(set(paths)) if (root / p).is_file()}


class CommitMissing(ResultError):
    """The sources of a result cannot be read at its commit: no git, or a clone without it."""


def sources_at_commit(
    root: str | Path, commit: str, paths, *, path: str | Path = "<data>"
) -> dict[str, str | None]:
    """SHA-256 (LF-normalised) of each file as ``commit`` holds it in the git history at ``root``.

    One ``git cat-file --batch`` reads every file, whatever their number.

    Args:
        root: A git checkout (a shallow one may lack ``commit``).
        commit: The full commit a result recorded.
        paths: Repo-relative file paths.
        path: The result file, named in the error.

    Returns:
        ``{path: SHA-256}``, with ``None`` for a path that is not a file at ``commit``.

    Raises:
        CommitMissing: ``root`` is not a git checkout, or its history lacks
            ``commit`` (a shallow clone); the message says how to fetch it.
    """
    paths = sorted(set(paths))
    query = f"{commit}^{{commit}}\n" + "".join(f"{commit}:{p}\n" for p in paths)
    try:
        proc = subprocess.run(
            ["git", "--no-optional-locks", "-C", str(root), "cat-file", "--batch"],
            input=query.encode(),
            capture_output=True,
            check=False,
            timeout=300,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        raise CommitMissing(
            path, "git.commit", f"cannot run git to read its sources ({err})"
        ) from err
    if proc.returncode != 0:
        why = (proc.stderr.decode(errors="replace").strip().splitlines() or ["git failed"])[0]
        raise CommitMissing(
            path,
            "git.commit",
            f"its sources are read from git at {commit}, but {root} is not a git checkout "
            f"({why}): clone the repository with its history",
        )
    out, pos, found = proc.stdout, 0, []
    for _ in range(len(paths) + 1):
        end = out.index(b"\n", pos)
        header = out[pos:end].split()
        pos = end + 1
        if len(header) != 3 or not header[2].isdigit():  # "<query> missing" (or ambiguous)
            found.append(None)
            continue
        size = int(header[2])
        found.append((header[1], out[pos : pos + size]))
        pos += size + 1
    if found[0] is None:
        raise CommitMissing(
            path,
            "git.commit",
            f"commit {commit} is not in the git history of {root} (a shallow clone?): an "
            "archived result is checked against the sources at its commit; fetch the history "
            "with `git fetch --unshallow` (in a CI checkout: fetch-depth: 0)",
        )
    return {
        p: _sha256(item[1]) if item is not None and item[0] == b"blob" else None
        for p, item in zip(paths, found[1:], strict=True)
    }


def _is_result_path(path: str) -> bool:
    """Whether a recorded source is itself a results file (a fit reads the runs it fits)."""
    return path.startswith(f"{RESULTS_DIR}/") and path.endswith(".json")


def _input_staleness(root: Path, path: str, digest: str) -> tuple[str, ...]:
    """What changed under a result that another result was computed from (empty: nothing).

    A result computed from other results (a fit of two sweep runs) records
    their files among its sources; their hashes say the inputs are the same,
    and the inputs' own sources say whether what they measured still stands
    (an archived run at its commit).
    """
    target = root / path
    if not target.is_file() or file_sha256(target) != digest:
        return (f"{path} is not the file recorded",)
    return tuple(load(target).staleness(root).changed)


@dataclass(frozen=True)
class Staleness:
    """Whether a result still describes the code on disk.

    Attributes:
        current: ``True`` while every recorded source hash matches its file.
        changed: Repo-relative paths whose file changed or is gone.
    """

    current: bool
    changed: list[str] = field(default_factory=list)


def result_id(path: str | Path) -> str:
    """The id of a results file: its path under ``results/`` without ``.json``.

    ``results/h200/default.json`` -> ``"h200/default"``;
    ``results/archive/h200/default-20261130T170000Z.json`` -> ``"archive/h200/default-..."``.
    A file outside any ``results/`` folder gets ``"<parent>/<stem>"``.
    """
    path = Path(path)
    parts = path.with_suffix("").parts
    if RESULTS_DIR in parts[:-1]:
        idx = len(parts) - 1 - parts[::-1].index(RESULTS_DIR)
        return "/".join(parts[idx + 1 :])
    return "/".join(parts[-2:])


class Result:
    """One validated results file.

    Attributes:
        path: Where it was loaded from.
        data: The parsed JSON (schema version 1).
        id: ``"<gpu-slug>/<suite>"`` or ``"archive/<gpu-slug>/<suite>-<stamp>"``.
    """

    def __init__(self, path: str | Path, data: dict) -> None:
        self.path = Path(path)
        self.data = data
        self.id = result_id(self.path)
        self._at_commit: tuple[Path, dict[str, str | None]] | None = None

    def __repr__(self) -> str:
        return f"Result({self.id!r}, cases={len(self.data['cases'])})"

    @property
    def archived(self) -> bool:
        """Whether this is an archived result (judged against the sources at its commit)."""
        return self.id.startswith(f"{ARCHIVE_DIR}/")

    def case(self, case_id: str) -> dict:
        """The record of one case.

        Raises:
            KeyError: no such case.
        """
        for case in self.data["cases"]:
            if case["id"] == case_id:
                return case
        raise KeyError(f"{self.id}: no case {case_id!r}")

    def staleness(self, root: str | Path | None = None) -> Staleness:
        """Compare every recorded source hash with the file it names.

        A current result is compared with the files on disk. An archived one is
        compared with the files at its recorded commit in git (``git show
        COMMIT:PATH``, read once per result): it stays current exactly while
        git holds the sources it measured, and the tree keeps no copy of them.
        A source that is itself a results file (the runs a fit read) must also be
        current, by its own sources: a result computed from results stands
        only while they do.

        Args:
            root: Repository root (default :func:`repo_root`).

        Raises:
            CommitMissing: an archived result whose commit this clone lacks.
        """
        return self._stale(self.data["sources"], root)

    def case_staleness(
        self,
        case_id: str,
        root: str | Path | None = None,
        digests: dict | None = None,
    ) -> Staleness:
        """Like :meth:`staleness`, over the files one case depends on.

        ``digests`` caches the hashes of files on disk (and the staleness of
        results this one was computed from) across calls, for a caller that
        knows the files do not change in between (one site build).
        """
        return self._stale(self.case(case_id)["depends_on"], root, digests)

    def _stale(self, paths, root: str | Path | None, digests: dict | None = None) -> Staleness:
        root = Path(root) if root is not None else repo_root()
        recorded = self.data["sources"]
        if self.archived:
            if self._at_commit is None or self._at_commit[0] != root:
                commit = self.data["git"]["commit"]
                self._at_commit = (root, sources_at_commit(root, commit, recorded, path=self.path))
            at_commit = self._at_commit[1]
            changed = [p for p in sorted(paths) if at_commit[p] != recorded[p]]
        else:
            digests = {} if digests is None else digests
            changed = []
            for p in sorted(paths):
                target = root / p
                if not target.is_file():
                    changed.append(p)
                    continue
                if target not in digests:
                    digests[target] = file_sha256(target)
                if digests[target] != recorded[p]:
                    changed.append(p)
        inputs = {} if digests is None else digests
        for p in sorted(paths):
            if p not in changed and _is_result_path(p):
                key = ("result", p, recorded[p])  # one answer per build (``digests``)
                if key not in inputs:
                    inputs[key] = _input_staleness(root, p, recorded[p])
                if inputs[key]:
                    changed.append(f"{p} ({', '.join(inputs[key])})")
        return Staleness(not changed, changed)

    def frame(self) -> pd.DataFrame:
        """One row per case x implementation (columns :data:`FRAME_COLUMNS`).

        Times are in microseconds; ``pct_cublas`` is 100 times the saved
        ratio of the implementation against ``cublas`` (GEMM cases).
        """
        import pandas as pd

        rows = []
        for case in self.data["cases"]:
            cublas = {r["impl"]: r["median"] for r in case["ratios"] if r["baseline"] == "cublas"}
            for impl, rec in case["impls"].items():
                us = {k: _us(rec.get(f"{k}_ms")) for k in ("median", "q10", "q90")}
                rows.append(
                    {
                        **self._case_cols(case),
                        "impl": impl,
                        "status": rec["status"],
                        **{f"{k}_us": v for k, v in us.items()},
                        "gbps": rec.get("gbps"),
                        "pct_copy": rec.get("pct_copy"),
                        "tflops": rec.get("tflops"),
                        "pct_cublas": 100.0 * cublas[impl] if impl in cublas else None,
                        "rel_error": rec.get("rel_error"),
                        "peak_mem_bytes": rec.get("peak_mem_bytes"),
                        "timer": case["timer"],
                        "cache": case["cache"],
                    }
                )
        return pd.DataFrame(rows, columns=list(FRAME_COLUMNS))

    def ratio_frame(self) -> pd.DataFrame:
        """One row per saved speed-up ratio (columns :data:`RATIO_COLUMNS`)."""
        import pandas as pd

        rows = [
            {**self._case_cols(case), **{k: r[k] for k in RATIO_COLUMNS[6:]}}
            for case in self.data["cases"]
            for r in case["ratios"]
        ]
        return pd.DataFrame(rows, columns=list(RATIO_COLUMNS))

    def _case_cols(self, case: dict) -> dict:
        return {
            "result": self.id,
            "case": case["id"],
            "op": case["op"],
            "mode": case["mode"],
            "shape": "x".join(str(d) for d in case["shape"]),
            "dtype": case["dtype"],
        }


def _us(ms: float | None) -> float | None:
    return None if ms is None else ms * 1000.0


def load(path: str | Path) -> Result:
    """Load and validate one results file.

    Raises:
        ResultError: the file is missing, not JSON (e.g. truncated), or not a
            valid schema-1 result; the message names the file and the field.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ResultError(path, "", f"cannot be read ({err.strerror or err})") from err
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ResultError(
            path, "", f"is not valid JSON (truncated?): {err.msg} at line {err.lineno}"
        ) from err
    validate(data, path)
    return Result(path, data)


def _atomic_write(path: str | Path, write) -> Path:
    """Call ``write(fh)`` on a temporary file beside ``path``, then move it over ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # mkstemp makes the file private (0600); the result keeps the mode of the file
    # it replaces, or gets the usual 0644, so that others can read a committed run.
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def save(data: dict, path: str | Path) -> Path:
    """Validate ``data`` and write it to ``path`` atomically.

    The JSON goes to a temporary file in the same folder, is flushed to disk,
    and replaces ``path`` with ``os.replace``: a reader sees the old file or the
    new one, never a part, and an interrupted write leaves the old file intact.

    Raises:
        ResultError: ``data`` is not a valid result (nothing is written).
    """
    validate(data, path)

    def write(fh) -> None:
        json.dump(data, fh, indent=1, allow_nan=False)
        fh.write("\n")

    return _atomic_write(path, write)


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write a text file (e.g. a run's log) atomically, as :func:`save` does."""
    return _atomic_write(path, lambda fh: fh.write(text))


def _other_kind(path: Path) -> bool:
    """Whether a JSON file declares another kind of record (a ``"kind"`` but benchmark)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False  # unreadable: a broken results file, which load() reports
    return isinstance(data, dict) and data.get("kind", "benchmark") != "benchmark"


def result_paths(root: str | Path | None = None) -> list[Path]:
    """Every benchmark results file under ``<root>/results`` (archived ones too), sorted.

    Skipped: JSON documents that declare another ``"kind"`` (e.g. the Triton
    release matrix under ``results/triton-releases/``).
    """
    base = Path(root if root is not None else repo_root()) / RESULTS_DIR
    if not base.is_dir():
        return []
    return sorted(p for p in base.rglob("*.json") if not _other_kind(p))


def load_all(root: str | Path | None = None) -> list[Result]:
    """Load every results file under ``<root>/results``.

    Raises:
        ResultError: at the first file that does not validate.
    """
    return [load(p) for p in result_paths(root)]
