"""Saved benchmark results: schema, atomic save, load, staleness and pandas views.

Every measured number the site shows comes from a results file written by
``kp bench`` (or a sweep script) under ``results/<gpu-slug>/<suite>.json``, with
the raw console log beside it. This package reads and writes those files and
never imports torch, so the site build and CI can use it on any machine::

    from kernel_portfolio.results import load, load_all, repo_root

    res = load(repo_root() / "results/h200/default.json")
    res.frame()               # tidy DataFrame: one row per case x implementation
    res.staleness()           # Staleness(current=..., changed=[...])
    res.case_staleness("softmax/fwd/8192x8192/float16")

A superseded result moves to ``results/archive/`` with its log; the sources it
measured stay in git, and its staleness compares its hashes with the files at
its recorded commit (:func:`sources_at_commit`).
"""

from kernel_portfolio.results.history import (
    Committed,
    archive_result,
    commit_run,
    compare_runs,
    git_state,
    import_run,
)
from kernel_portfolio.results.schema import SCHEMA_VERSION, ResultError, validate
from kernel_portfolio.results.store import (
    ARCHIVE_DIR,
    FRAME_COLUMNS,
    RATIO_COLUMNS,
    RESULTS_DIR,
    CommitMissing,
    Result,
    Staleness,
    file_sha256,
    load,
    load_all,
    repo_root,
    result_id,
    result_paths,
    save,
    source_hashes,
    sources_at_commit,
    write_text_atomic,
)

__all__ = [
    "ARCHIVE_DIR",
    "FRAME_COLUMNS",
    "RATIO_COLUMNS",
    "RESULTS_DIR",
    "SCHEMA_VERSION",
    "CommitMissing",
    "Committed",
    "Result",
    "ResultError",
    "Staleness",
    "archive_result",
    "commit_run",
    "compare_runs",
    "file_sha256",
    "git_state",
    "import_run",
    "load",
    "load_all",
    "repo_root",
    "result_id",
    "result_paths",
    "save",
    "source_hashes",
    "sources_at_commit",
    "validate",
    "write_text_atomic",
]
