"""The results file schema (version 1) and its validator.

A results file is one suite run: provenance (command, times, git, source
hashes, environment, GPU state), the copy bandwidth measured in the same run,
the timing policy, and one record per case. ``docs/methodology.md`` and
``notes/INTERFACES.md`` describe the fields; :func:`validate` is the
definition. It checks presence, types, finiteness (no NaN or infinity
anywhere), internal consistency (a case id matches its fields, medians match
their samples, ratios name measured implementations, ``depends_on`` names
recorded sources) and raises :class:`ResultError` naming the file and the
field at the first problem.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np

SCHEMA_VERSION = 1
STATUSES = ("ok", "failed", "skipped")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_SLUG = re.compile(r"[a-z0-9][a-z0-9-]*")
_UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")


class ResultError(ValueError):
    """A results file (or dict) that does not follow the schema.

    Attributes:
        path: The file (or ``"<data>"`` for a dict not yet written).
        field: Dotted path of the offending field, e.g. ``cases[3].impls.ours.samples_ms[7]``.
    """

    def __init__(self, path: str | Path, field: str, problem: str) -> None:
        self.path = str(path)
        self.field = field
        where = f"field {field}: " if field else ""
        super().__init__(f"{self.path}: {where}{problem}")


_NUM = (int, float)


class _Checker:
    def __init__(self, path: str | Path) -> None:
        self.path = path

    def fail(self, field: str, problem: str):
        raise ResultError(self.path, field, problem)

    def get(self, obj: dict, key: str, field: str, kinds, *, nullable=False, required=True):
        name = f"{field}.{key}" if field else key
        if key not in obj:
            if required:
                self.fail(name, "missing")
            return None
        return self.value(obj[key], name, kinds, nullable=nullable)

    def value(self, val, name: str, kinds, *, nullable=False):
        kinds = kinds if isinstance(kinds, tuple) else (kinds,)
        if val is None:
            if nullable:
                return None
            self.fail(name, "is null")
        if isinstance(val, bool) and bool not in kinds:
            self.fail(name, f"expected {_kind_name(kinds)}, got bool")
        if not isinstance(val, kinds):
            self.fail(name, f"expected {_kind_name(kinds)}, got {type(val).__name__}")
        if isinstance(val, float) and not math.isfinite(val):
            self.fail(name, f"is {val} (must be a finite number)")
        return val

    def positive(self, obj: dict, key: str, field: str, *, nullable=False, zero=False):
        val = self.get(obj, key, field, _NUM, nullable=nullable)
        if val is not None and (val < 0 or (val == 0 and not zero)):
            self.fail(f"{field}.{key}", f"must be {'>= 0' if zero else '> 0'}, got {val}")
        return val

    def samples(self, obj: dict, key: str, field: str, *, nonempty: bool) -> list[float]:
        vals = self.get(obj, key, field, list)
        if nonempty and not vals:
            self.fail(f"{field}.{key}", "is empty")
        for i, v in enumerate(vals):
            self.value(v, f"{field}.{key}[{i}]", _NUM)
            if v <= 0:
                self.fail(f"{field}.{key}[{i}]", f"must be > 0, got {v}")
        return vals

    def choice(self, obj: dict, key: str, field: str, allowed: tuple[str, ...]) -> str:
        val = self.get(obj, key, field, str)
        if val not in allowed:
            self.fail(f"{field}.{key}", f"must be one of {allowed}, got {val!r}")
        return val


def _kind_name(kinds: tuple) -> str:
    names = {int: "int", float: "number", str: "str", list: "list", dict: "object", bool: "bool"}
    return " or ".join(dict.fromkeys(names.get(k, k.__name__) for k in kinds))


def validate(data: object, path: str | Path = "<data>") -> None:
    """Check that ``data`` is a complete, consistent schema-1 result.

    Args:
        data: The parsed JSON.
        path: File name used in error messages.

    Raises:
        ResultError: at the first missing, mistyped, non-finite or inconsistent field.
    """
    c = _Checker(path)
    if not isinstance(data, dict):
        c.fail("", f"expected a JSON object, got {type(data).__name__}")
    version = c.get(data, "schema_version", "", int)
    if version != SCHEMA_VERSION:
        c.fail("schema_version", f"is {version}; this code reads version {SCHEMA_VERSION}")
    c.get(data, "suite", "", str)
    slug = c.get(data, "gpu_slug", "", str)
    if not _SLUG.fullmatch(slug):
        c.fail("gpu_slug", f"{slug!r} is not a lowercase slug")
    c.get(data, "command", "", str)
    c.get(data, "filter", "", str, nullable=True, required=False)
    for key in ("started_utc", "finished_utc"):
        if not _UTC.fullmatch(c.get(data, key, "", str)):
            c.fail(key, "is not a UTC time like 2026-11-30T17:00:00Z")
    git = c.get(data, "git", "", dict)
    c.get(git, "commit", "git", str, nullable=True)
    c.get(git, "dirty", "git", bool, nullable=True)
    sources = c.get(data, "sources", "", dict)
    for name, digest in sources.items():
        if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
            c.fail(f"sources.{name}", "is not a lowercase hex SHA-256")
        if name.startswith("/") or "\\" in name or ".." in name.split("/"):
            c.fail(f"sources.{name}", "is not a repo-relative path")
    _check_env(c, c.get(data, "env", "", dict))
    state = c.get(data, "gpu_state", "", dict)
    for key in ("before", "after"):
        snap = c.get(state, key, "gpu_state", dict)
        for field in ("utilization_pct", "sm_clock_mhz", "mem_clock_mhz", "temperature_c"):
            c.get(snap, field, f"gpu_state.{key}", _NUM, nullable=True)
    c.get(state, "busy_at_start", "gpu_state", bool)
    copy = c.get(data, "copy_bandwidth", "", dict)
    c.positive(copy, "bytes", "copy_bandwidth")
    copy_samples = c.samples(copy, "samples_ms", "copy_bandwidth", nonempty=True)
    _check_median(c, copy, "copy_bandwidth", copy_samples)
    c.positive(copy, "gbps", "copy_bandwidth")
    timing = c.get(data, "timing", "", dict)
    c.choice(timing, "cache", "timing", ("cold", "warm"))
    if c.get(timing, "visits", "timing", int) < 1:
        c.fail("timing.visits", "must be >= 1")
    c.get(timing, "seed", "timing", int)
    c.positive(timing, "warmup_ms", "timing", zero=True)
    c.get(timing, "notes", "timing", str)
    c.get(data, "log", "", str, nullable=True)
    cases = c.get(data, "cases", "", list)
    seen: set[str] = set()
    for i, case in enumerate(cases):
        field = f"cases[{i}]"
        c.value(case, field, dict)
        _check_case(c, case, field, sources)
        if case["id"] in seen:
            c.fail(f"{field}.id", f"repeats case {case['id']!r}")
        seen.add(case["id"])


_ENV_FIELDS = {
    "gpu_name": (str, False),
    "sm_count": (int, False),
    "l2_bytes": (int, True),
    "memory_clock_mhz": (_NUM, True),
    "driver": (str, True),
    "cuda": (str, True),
    "torch": (str, False),
    "triton": (str, True),
    "python": (str, False),
    "platform": (str, False),
}


def _check_env(c: _Checker, env: dict) -> None:
    for key, (kinds, nullable) in _ENV_FIELDS.items():
        c.get(env, key, "env", kinds, nullable=nullable)


def _check_median(c: _Checker, rec: dict, field: str, samples: list[float]) -> None:
    median = c.positive(rec, "median_ms", field)
    if not math.isclose(median, float(np.median(samples)), rel_tol=1e-9, abs_tol=1e-12):
        c.fail(f"{field}.median_ms", f"{median} is not the median of samples_ms")


def _check_case(c: _Checker, case: dict, field: str, sources: dict) -> None:
    case_id = c.get(case, "id", field, str)
    op = c.get(case, "op", field, str)
    mode = c.choice(case, "mode", field, ("fwd", "fwdbwd"))
    shape = c.get(case, "shape", field, list)
    for j, dim in enumerate(shape):
        if c.value(dim, f"{field}.shape[{j}]", int) < 0:
            c.fail(f"{field}.shape[{j}]", "must be >= 0")
    dtype = c.get(case, "dtype", field, str)
    expected = f"{op}/{mode}/{'x'.join(str(d) for d in shape)}/{dtype}"
    if case_id != expected:
        c.fail(f"{field}.id", f"{case_id!r} does not match its fields ({expected!r})")
    c.choice(case, "timer", field, ("events", "cuda_graph"))
    c.choice(case, "cache", field, ("cold", "warm"))
    for key in ("bytes", "flops"):
        c.get(case, key, field, int, nullable=True)
        c.get(case, f"{key}_formula", field, str, nullable=True)
    deps = c.get(case, "depends_on", field, list)
    for j, dep in enumerate(deps):
        if c.value(dep, f"{field}.depends_on[{j}]", str) not in sources:
            c.fail(f"{field}.depends_on[{j}]", f"{dep!r} is not among the recorded sources")
    impls = c.get(case, "impls", field, dict)
    if not impls:
        c.fail(f"{field}.impls", "is empty")
    for name, rec in impls.items():
        _check_impl(c, c.value(rec, f"{field}.impls.{name}", dict), f"{field}.impls.{name}")
    for j, ratio in enumerate(c.get(case, "ratios", field, list)):
        where = f"{field}.ratios[{j}]"
        c.value(ratio, where, dict)
        for key in ("impl", "baseline"):
            name = c.get(ratio, key, where, str)
            if impls.get(name, {}).get("status") != "ok":
                c.fail(f"{where}.{key}", f"{name!r} is not a measured implementation of the case")
        for key in ("median", "q10", "q90"):
            c.positive(ratio, key, where)


def _check_impl(c: _Checker, rec: dict, field: str) -> None:
    status = c.choice(rec, "status", field, STATUSES)
    ok = status == "ok"
    reason = c.get(rec, "reason", field, str, nullable=True)
    if not ok and not reason:
        c.fail(f"{field}.reason", f"a {status} implementation needs a reason")
    rel = c.get(rec, "rel_error", field, _NUM, nullable=not ok)
    if rel is not None and rel < 0:
        c.fail(f"{field}.rel_error", "must be >= 0")
    samples = c.samples(rec, "samples_ms", field, nonempty=ok)
    if not ok and samples:
        c.fail(f"{field}.samples_ms", f"a {status} implementation has no samples")
    if ok:
        _check_median(c, rec, field, samples)
        q10, q90 = c.positive(rec, "q10_ms", field), c.positive(rec, "q90_ms", field)
        if not q10 <= rec["median_ms"] <= q90:
            c.fail(f"{field}.median_ms", "is not between q10_ms and q90_ms")
    else:
        for key in ("median_ms", "q10_ms", "q90_ms"):
            if c.get(rec, key, field, _NUM, nullable=True) is not None:
                c.fail(f"{field}.{key}", f"a {status} implementation has no timing")
    for key in ("gbps", "pct_copy", "tflops"):
        c.positive(rec, key, field, nullable=True)
    peak = c.get(rec, "peak_mem_bytes", field, int, nullable=True)
    if peak is not None and peak < 0:
        c.fail(f"{field}.peak_mem_bytes", "must be >= 0")
    metrics = c.get(rec, "metrics", field, dict, required=False) or {}
    for name, metric in metrics.items():
        where = f"{field}.metrics.{name}"
        c.value(metric, where, dict)
        c.get(metric, "value", where, _NUM)
        c.get(metric, "unit", where, str)
