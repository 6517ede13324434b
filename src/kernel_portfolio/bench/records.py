"""Turning raw samples into result records (pure Python: no torch, no GPU).

The runner measures; this module summarises, the same way for every caller:
median and q10/q90 of every raw sample, GB/s and TFLOP/s from the case's own
formulas, % of the copy bandwidth measured in the same run, and speed-up
ratios computed per visit (baseline median of the visit / implementation
median of the visit) and then summarised. Sweeps and test fixtures build their
records here too (:func:`build_case_record`, :func:`build_result`,
:func:`fixture_result`), so a fixture file is shaped exactly like a measured one.
"""

from __future__ import annotations

import glob
import math
import platform
import random
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from kernel_portfolio.bench.suites import (
    HARNESS_SOURCES,
    OPS_GLOB,
    PLAN_RULE_SOURCE,
    PLANS_SOURCE,
    SUITES,
    Case,
)
from kernel_portfolio.results import SCHEMA_VERSION, source_hashes
from kernel_portfolio.results.schema import quantiles

#: Raw samples are kept to the nanosecond (CUDA events resolve about 0.5 us).
SAMPLE_DECIMALS = 6


@dataclass
class ImplOutcome:
    """What happened to one implementation in one case.

    Attributes:
        status: ``"ok"``, ``"failed"`` (wrong result, or ours raised) or
            ``"skipped"`` (a baseline that cannot run this case).
        reason: Why it is not ``ok`` (``None`` when it is).
        rel_error: Largest ``||out - ref|| / ||ref||`` over its outputs and gradients.
        visits: Raw samples in milliseconds, one list per visit.
        peak_mem_bytes: Peak device memory of one call above what was allocated before it.
        metrics: Extra quotable values, ``{name: {"value": v, "unit": u}}``.
    """

    status: str
    reason: str | None = None
    rel_error: float | None = None
    visits: list[list[float]] = field(default_factory=list)
    peak_mem_bytes: int | None = None
    metrics: dict[str, dict] = field(default_factory=dict)


def impl_record(case, out: ImplOutcome, copy_gbps: float) -> dict:
    """The record of one implementation of one case: raw samples, median, q10/q90 and rates.

    Args:
        case: The case; only its ``bytes`` and ``flops`` are read (a :class:`Case`,
            or any object with those two, as sweeps build). ``bytes=None`` leaves
            GB/s and % of copy out.
        out: The implementation's outcome.
        copy_gbps: Copy bandwidth measured in the same run (GB/s).
    """
    samples = [round(float(s), SAMPLE_DECIMALS) for visit in out.visits for s in visit]
    ok = out.status == "ok"
    rec = {
        "status": out.status,
        "reason": out.reason,
        "rel_error": None
        if out.rel_error is None or not math.isfinite(out.rel_error)
        else float(out.rel_error),
        "samples_ms": samples if ok else [],
        "median_ms": None,
        "q10_ms": None,
        "q90_ms": None,
        "gbps": None,
        "pct_copy": None,
        "tflops": None,
        "peak_mem_bytes": out.peak_mem_bytes,
        "metrics": out.metrics,
    }
    if ok:
        q10, median, q90 = quantiles(samples)
        gbps = None if case.bytes is None else case.bytes / median / 1e6
        rec.update(
            median_ms=float(np.median(samples)),
            q10_ms=q10,
            q90_ms=q90,
            gbps=gbps,
            pct_copy=None if gbps is None else 100.0 * gbps / copy_gbps,
            tflops=None if case.flops is None else case.flops / median / 1e9,
        )
    return rec


def visit_ratios(impl_visits: list[list[float]], base_visits: list[list[float]]) -> dict:
    """Speed-up of an implementation over a baseline, per visit, summarised.

    Each visit gives ``median(baseline samples) / median(impl samples)``; the
    result is the median and q10/q90 of those per-visit ratios.
    """
    if len(impl_visits) != len(base_visits) or not impl_visits:
        raise ValueError("impl and baseline need the same, non-zero number of visits")
    ratios = [
        float(np.median(b) / np.median(i)) for i, b in zip(impl_visits, base_visits, strict=True)
    ]
    q10, median, q90 = quantiles(ratios)
    return {"median": median, "q10": q10, "q90": q90}


def build_case_record(
    case: Case,
    outcomes: dict[str, ImplOutcome],
    *,
    copy_gbps: float,
    cache: str,
    sources: dict[str, str],
) -> dict:
    """The result record of one case.

    Args:
        case: The case.
        outcomes: Every implementation's outcome, keyed by implementation name.
        copy_gbps: Copy bandwidth measured in the same run (GB/s).
        cache: ``"cold"`` or ``"warm"``: the L2 state the samples were taken in.
        sources: The run's recorded source hashes (``depends_on`` keeps the
            case's files that are among them).

    Returns:
        A dict in the schema's ``cases[]`` shape, ratios of ``ours`` against
        every other measured implementation included.
    """
    impls = {name: impl_record(case, out, copy_gbps) for name, out in outcomes.items()}
    ratios = []
    ours = outcomes.get("ours")
    if ours is not None and ours.status == "ok":
        for name, out in outcomes.items():
            if name != "ours" and out.status == "ok":
                ratios.append(
                    {"impl": "ours", "baseline": name, **visit_ratios(ours.visits, out.visits)}
                )
    return {
        "id": case.id,
        "op": case.op,
        "mode": case.mode,
        "shape": list(case.shape),
        "dtype": case.dtype,
        "timer": case.timer,
        "cache": cache,
        "bytes": case.bytes,
        "bytes_formula": case.bytes_formula,
        "flops": case.flops,
        "flops_formula": case.flops_formula,
        "traffic": case.spec.traffic,
        "depends_on": [p for p in case.spec.depends_on() if p in sources],
        "impls": impls,
        "ratios": ratios,
    }


def bench_sources(root: str | Path) -> dict[str, str]:
    """Hashes of every file the harness's numbers depend on: the ops, plans and the harness."""
    root = Path(root)
    ops = [Path(p).relative_to(root).as_posix() for p in glob.glob(str(root / OPS_GLOB))]
    return source_hashes(root, [*ops, PLANS_SOURCE, PLAN_RULE_SOURCE, *HARNESS_SOURCES])


def copy_record(nbytes: int, samples_ms: list[float]) -> dict:
    """The ``copy_bandwidth`` block: bytes read plus written per copy, samples, median, GB/s."""
    samples = [round(float(s), SAMPLE_DECIMALS) for s in samples_ms]
    median = float(np.median(samples))
    return {
        "bytes": int(nbytes),
        "samples_ms": samples,
        "median_ms": median,
        "gbps": nbytes / median / 1e6,
    }


def build_result(
    *,
    suite: str,
    gpu_slug: str,
    command: str,
    started_utc: str,
    finished_utc: str,
    git: dict,
    sources: dict[str, str],
    env: dict,
    gpu_state: dict,
    copy_bandwidth: dict,
    timing: dict,
    cases: list[dict],
    log: str | None,
    filter: str | None = None,
) -> dict:
    """Assemble a schema-1 result from its parts (see ``notes/INTERFACES.md``)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "suite": suite,
        "gpu_slug": gpu_slug,
        "command": command,
        "filter": filter,
        "started_utc": started_utc,
        "finished_utc": finished_utc,
        "git": git,
        "sources": sources,
        "env": env,
        "gpu_state": gpu_state,
        "copy_bandwidth": copy_bandwidth,
        "timing": timing,
        "log": log,
        "cases": cases,
    }


#: Relative speed of each implementation in :func:`fixture_result` (ours = 1).
_FIXTURE_SPEED = {"ours": 1.0, "torch": 0.6, "compile": 0.8, "liger": 0.9, "cublas": 1.05}


def fixture_result(
    root: str | Path,
    *,
    suite: str = "smoke",
    gpu_slug: str = "fixture",
    seed: int = 0,
    scale: float = 1.0,
    skip: dict[str, str] | None = None,
) -> dict:
    """A synthetic, valid result for tests and site fixtures: NOT a measurement.

    Samples are drawn from a seeded generator around a nominal 3 TB/s (or
    600 TFLOP/s for GEMM), and the records are built by the same code as a
    real run's. The GPU name says it is synthetic.

    Args:
        root: Repository root whose sources are hashed into the result.
        suite: Which suite's cases to use.
        gpu_slug: GPU folder the fixture pretends to come from.
        seed: Seed of the synthetic samples.
        scale: Multiplies every time (to fake a change between two runs).
        skip: ``{impl: reason}`` implementations recorded as skipped.

    Returns:
        The result dict (write it with :func:`kernel_portfolio.results.save`).
    """
    rng = random.Random(seed)
    spec = SUITES[suite]
    sources = bench_sources(root)
    copy_ms = [(1 << 32) / 3000.0 / 1e6 * rng.lognormvariate(0.0, 0.01) for _ in range(10)]
    copy = copy_record(1 << 32, copy_ms)
    copy_gbps = copy["gbps"]  # the cases' %copy use the saved copy bandwidth, as in a run
    cases = []
    for case in spec.cases:
        nominal = case.bytes / 3e9 if case.flops is None else case.flops / 6e11
        outcomes = {}
        for impl in case.impls:
            if skip and impl in skip:
                outcomes[impl] = ImplOutcome("skipped", skip[impl])
                continue
            base = scale * (nominal + 0.004) / _FIXTURE_SPEED[impl]
            visits = [
                [base * rng.lognormvariate(0.0, 0.02) for _ in range(spec.samples)]
                for _ in range(spec.visits)
            ]
            outcomes[impl] = ImplOutcome("ok", None, 1e-4, visits, 1 << 20)
        cases.append(
            build_case_record(case, outcomes, copy_gbps=copy_gbps, cache="cold", sources=sources)
        )
    state = {
        "utilization_pct": 0,
        "sm_clock_mhz": None,
        "mem_clock_mhz": None,
        "temperature_c": None,
    }
    return build_result(
        suite=suite,
        gpu_slug=gpu_slug,
        command=f"fixture_result(suite={suite!r}, seed={seed})",
        started_utc="2026-01-01T00:00:00Z",
        finished_utc="2026-01-01T00:01:00Z",
        git={"commit": None, "dirty": None},
        sources=sources,
        env={
            "gpu_name": "synthetic fixture (not a measurement)",
            "sm_count": 1,
            "l2_bytes": None,
            "memory_clock_mhz": None,
            "driver": None,
            "cuda": None,
            "torch": "none",
            "triton": None,
            "python": platform.python_version(),
            "platform": platform.platform(),
        },
        gpu_state={"before": state, "after": state, "busy_at_start": False},
        copy_bandwidth=copy,
        timing={
            "cache": "cold",
            "visits": spec.visits,
            "samples_per_visit": spec.samples,
            "graph_calls": spec.graph_calls,
            "seed": seed,
            "warmup_ms": 0,
            "notes": "synthetic samples from kernel_portfolio.bench.records.fixture_result",
        },
        cases=cases,
        log=None,
    )


def _host_us(rec: dict | None) -> str:
    """An implementation's ``host_us`` metric for the summary table (blank when absent)."""
    metric = (rec or {}).get("metrics", {}).get("host_us")
    return f"{metric['value']:7.1f}" if metric else " " * 7


def summary_table(data: dict) -> str:
    """The end-of-run table: one line per case.

    Columns: ours' median time, GB/s and % of the copy bandwidth (TFLOP/s for
    GEMM), then the speed-up of ours over each baseline (baseline time / ours),
    and the status of anything not measured. Latency-bound cases add the
    eager per-call host cost (metric ``host_us``) of ours and of torch.
    """
    lines = [
        f"{'case':<42} {'timer':<10} {'ours us':>9} {'GB/s':>6} {'%copy':>5} {'TFLOP/s':>7}"
        f" {'host us':>7} {'torch':>7}  speed-up of ours (baseline time / ours) and notes"
    ]
    for case in data["cases"]:
        ours = case["impls"]["ours"]
        head = f"{case['id']:<42} {case['timer']:<10}"
        if ours["status"] != "ok":
            lines.append(f"{head} ours {ours['status']}: {ours['reason']}")
            continue
        tflops = f"{ours['tflops']:7.0f}" if ours["tflops"] is not None else " " * 7
        notes = [f"{r['baseline']} {r['median']:.2f}x" for r in case["ratios"]]
        notes += [
            f"{name} {rec['status']}"
            for name, rec in case["impls"].items()
            if rec["status"] != "ok"
        ]
        host = [_host_us(case["impls"].get(name)) for name in ("ours", "torch")]
        lines.append(
            f"{head} {ours['median_ms'] * 1e3:9.2f} {ours['gbps']:6.0f} {ours['pct_copy']:5.1f} "
            f"{tflops} {host[0]} {host[1]}  {', '.join(notes)}"
        )
    return "\n".join(lines)
