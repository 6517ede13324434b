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

Every derived figure is recomputed from what it is derived from, so a
hand-edited figure does not validate: ``q10_ms``/``median_ms``/``q90_ms`` from
``samples_ms``; ``gbps`` from the case's ``bytes`` and the median; ``pct_copy``
from ``gbps`` and the run's copy bandwidth; ``tflops`` from ``flops`` and the
median; each ratio (and so % of cuBLAS, 100 times the ratio against
``cublas``) from the per-visit medians of both implementations' samples.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

SCHEMA_VERSION = 1
STATUSES = ("ok", "failed", "skipped")
_SHA256 = re.compile(r"[0-9a-f]{64}")
#: A full git commit (``git rev-parse HEAD``): a result names the exact commit it measured.
COMMIT = re.compile(r"[0-9a-f]{40}")
_SLUG = re.compile(r"[a-z0-9][a-z0-9-]*")
_UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")
#: Relative tolerance of a derived figure recomputed from saved values (float rounding only).
REL_TOL = 1e-9
#: Raw samples are saved rounded to 1e-6 ms, while ratios are computed from the
#: unrounded samples: a recomputed ratio may differ by what this rounding moves
#: each median (half a unit of the last saved decimal).
SAMPLE_ROUNDING_MS = 5e-7


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
    commit = c.get(git, "commit", "git", str)
    if not COMMIT.fullmatch(commit):
        c.fail("git.commit", f"{commit!r} is not a full 40-hex commit (git rev-parse HEAD)")
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
    copy_bytes = c.positive(copy, "bytes", "copy_bandwidth")
    copy_samples = c.samples(copy, "samples_ms", "copy_bandwidth", nonempty=True)
    copy_median = _check_median(c, copy, "copy_bandwidth", _median(copy_samples))
    copy_gbps = c.positive(copy, "gbps", "copy_bandwidth")
    _check_derived(c, "copy_bandwidth.gbps", copy_gbps, copy_bytes / copy_median / 1e6)
    timing = c.get(data, "timing", "", dict)
    c.choice(timing, "cache", "timing", ("cold", "warm"))
    visits = c.get(timing, "visits", "timing", int)
    if visits < 1:
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
        _check_case(c, case, field, sources, copy_gbps=copy_gbps, visits=visits)
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


def _check_median(c: _Checker, rec: dict, field: str, expected: float) -> float:
    """The saved ``median_ms``, checked against ``expected`` (the samples' median)."""
    median = c.positive(rec, "median_ms", field)
    if not math.isclose(median, expected, rel_tol=REL_TOL, abs_tol=1e-12):
        c.fail(f"{field}.median_ms", f"{median} is not the median of samples_ms")
    return median


def _check_derived(
    c: _Checker, field: str, saved: float | None, expected: float | None, *, abs_tol: float = 0.0
) -> None:
    """Fail unless a saved derived figure equals its recomputed value (or both are absent)."""
    if expected is None:
        if saved is not None:
            c.fail(field, f"is {saved}, but the figures it derives from are not saved")
        return
    if saved is None:
        c.fail(field, f"is null, but its figures give {expected!r}")
    if not math.isclose(saved, expected, rel_tol=REL_TOL, abs_tol=abs_tol):
        c.fail(field, f"is {saved!r}, but recomputed from the saved figures it is {expected!r}")


def quantiles(values) -> tuple[float, float, float]:
    """``(q10, median, q90)`` with linear interpolation (numpy's default method).

    The harness summarises samples with it and validation recomputes with it.
    Plain Python: a result holds tens of thousands of short sample lists, for
    which numpy's per-call overhead dominated loading a result.
    """
    ordered = sorted(map(float, values))
    if not ordered:
        raise ValueError("quantiles of no values")
    return tuple(_interpolate(ordered, q) for q in (0.1, 0.5, 0.9))


def _split(values: list, parts: int) -> list[list]:
    """``values`` in ``parts`` consecutive equal lists (the caller checks they divide)."""
    size = len(values) // parts
    return [values[k * size : (k + 1) * size] for k in range(parts)]


def _median(values) -> float:
    return _interpolate(sorted(map(float, values)), 0.5)


def _interpolate(ordered: list[float], q: float) -> float:
    """Quantile ``q`` of sorted values, linearly interpolated between neighbours."""
    pos = q * (len(ordered) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _check_ratio(c: _Checker, ratio: dict, where: str, impls: dict, visits: int) -> None:
    """Recompute a speed-up from the per-visit medians of both implementations' samples."""
    impl, base = impls[ratio["impl"]]["samples_ms"], impls[ratio["baseline"]]["samples_ms"]
    if len(impl) % visits or len(base) % visits:
        c.fail(where, f"its samples do not split into timing.visits = {visits} equal visits")
    impl_med = [_median(v) for v in _split(impl, visits)]
    base_med = [_median(v) for v in _split(base, visits)]
    per_visit = [b / i for i, b in zip(impl_med, base_med, strict=True)]
    # Quantiles move no more than the values they summarise: bound the rounding's effect.
    slack = max(
        r * SAMPLE_ROUNDING_MS * (1 / i + 1 / b) * 1.01
        for r, i, b in zip(per_visit, impl_med, base_med, strict=True)
    )
    for key, expected in zip(("q10", "median", "q90"), quantiles(per_visit), strict=True):
        _check_derived(c, f"{where}.{key}", ratio[key], expected, abs_tol=slack)


def _check_case(
    c: _Checker, case: dict, field: str, sources: dict, *, copy_gbps: float, visits: int
) -> None:
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
    counts = {}
    for key in ("bytes", "flops"):
        counts[key] = c.get(case, key, field, int, nullable=True)
        if counts[key] is not None and counts[key] < 0:
            c.fail(f"{field}.{key}", "must be >= 0")
        c.get(case, f"{key}_formula", field, str, nullable=True)
    deps = c.get(case, "depends_on", field, list)
    for j, dep in enumerate(deps):
        if c.value(dep, f"{field}.depends_on[{j}]", str) not in sources:
            c.fail(f"{field}.depends_on[{j}]", f"{dep!r} is not among the recorded sources")
    impls = c.get(case, "impls", field, dict)
    if not impls:
        c.fail(f"{field}.impls", "is empty")
    for name, rec in impls.items():
        where = f"{field}.impls.{name}"
        _check_impl(c, c.value(rec, where, dict), where, counts=counts, copy_gbps=copy_gbps)
    for j, ratio in enumerate(c.get(case, "ratios", field, list)):
        where = f"{field}.ratios[{j}]"
        c.value(ratio, where, dict)
        for key in ("impl", "baseline"):
            name = c.get(ratio, key, where, str)
            if impls.get(name, {}).get("status") != "ok":
                c.fail(f"{where}.{key}", f"{name!r} is not a measured implementation of the case")
        for key in ("median", "q10", "q90"):
            c.positive(ratio, key, where)
        _check_ratio(c, ratio, where, impls, visits)


def _check_impl(c: _Checker, rec: dict, field: str, *, counts: dict, copy_gbps: float) -> None:
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
    rates = {k: c.positive(rec, k, field, nullable=True) for k in ("gbps", "pct_copy", "tflops")}
    if ok:
        q10, q50, q90 = quantiles(samples)
        median = _check_median(c, rec, field, q50)
        for key, expected in (("q10_ms", q10), ("q90_ms", q90)):
            _check_derived(c, f"{field}.{key}", c.positive(rec, key, field), expected)
        gbps = None if counts["bytes"] is None else counts["bytes"] / median / 1e6
        _check_derived(c, f"{field}.gbps", rates["gbps"], gbps)
        pct = None if gbps is None else 100.0 * gbps / copy_gbps
        _check_derived(c, f"{field}.pct_copy", rates["pct_copy"], pct)
        tflops = None if counts["flops"] is None else counts["flops"] / median / 1e9
        _check_derived(c, f"{field}.tflops", rates["tflops"], tflops)
    else:
        for key in ("median_ms", "q10_ms", "q90_ms", "gbps", "pct_copy", "tflops"):
            if c.get(rec, key, field, _NUM, nullable=True) is not None:
                c.fail(f"{field}.{key}", f"a {status} implementation has no timing")
    peak = c.get(rec, "peak_mem_bytes", field, int, nullable=True)
    if peak is not None and peak < 0:
        c.fail(f"{field}.peak_mem_bytes", "must be >= 0")
    metrics = c.get(rec, "metrics", field, dict, required=False) or {}
    for name, metric in metrics.items():
        where = f"{field}.metrics.{name}"
        c.value(metric, where, dict)
        c.get(metric, "value", where, _NUM)
        c.get(metric, "unit", where, str)
