"""Speed targets, as data, and their evaluation against saved results.

The targets are the project's bar on the H200 (see the Benchmarks page): a
share of the copy bandwidth measured in the same run for memory-bound
kernels, a speed-up against cuBLAS for GEMM, and a speed-up against the best
baseline at every shape. They live here, beside the suites, so the
Benchmarks page can say for each one whether the committed results meet it
and by how much they miss; timed tests never assert speed.

A bar is a target, not a measurement: pages show it in the words of
:func:`bar_text`, which the evidence gate accepts only when it is one of
:func:`target_texts`. A miss is shown in the words of :func:`shortfall_text`,
which the gate recomputes from the saved value it is derived from.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernel_portfolio.evidence.quote import format_value

_ROW_LARGE = ("8192x8192", "32768x8192", "32768x1024", "16384x4104")
_HALF = ("float16", "bfloat16")
#: The every-shape bar: ours over the best baseline (:data:`BASELINES`) in the same case.
EVERY_SHAPE_BAR = 1.0
#: A best baseline above this share of copy bandwidth lowers the bar to :data:`NEAR_ROOF_BAR`.
NEAR_ROOF_PCT = 90.0
NEAR_ROOF_BAR = 0.97
#: Target name of the every-shape rows of :func:`evaluate`.
EVERY_SHAPE = "every shape: best baseline"
#: ``Target.baseline`` meaning the fastest of :data:`BASELINES` in the same case.
BEST = "best"
#: The baselines the every-shape bar and ``BEST`` choose from.
BASELINES = ("torch", "compile", "liger")


@dataclass(frozen=True)
class Target:
    """One speed target.

    Attributes:
        name: What the target is about, in words.
        op: Operator.
        mode: ``"fwd"`` or ``"fwdbwd"``.
        shapes: Shapes (as in case ids) the target applies to.
        stat: ``"pct_copy"`` (share of measured copy bandwidth, in percent) or
            ``"speedup"`` (baseline time over ours).
        threshold: The bar: at least this value.
        baseline: For ``"speedup"``: an implementation name, or :data:`BEST`
            for the fastest of torch, compile and liger in the same case.
        dtypes: Dtypes the target applies to.
    """

    name: str
    op: str
    mode: str
    shapes: tuple[str, ...]
    stat: str
    threshold: float
    baseline: str | None = None
    dtypes: tuple[str, ...] = _HALF


TARGETS: tuple[Target, ...] = (
    Target("add at 256 MiB per operand", "add", "fwd", ("134217728",), "pct_copy", 95.0),
    Target("row sum, large", "row_sum", "fwd", ("16384x8192",), "pct_copy", 95.0),
    Target("softmax forward, widths 1K to 32K", "softmax", "fwd", _ROW_LARGE, "pct_copy", 90.0),
    Target("softmax forward, wide rows", "softmax", "fwd", ("64x131072",), "pct_copy", 85.0),
    Target("softmax forward, few wide rows", "softmax", "fwd", ("4x32769",), "speedup", 3.0, BEST),
    Target("softmax forward+backward", "softmax", "fwdbwd", _ROW_LARGE, "pct_copy", 85.0),
    Target("RMSNorm forward", "rms_norm", "fwd", _ROW_LARGE, "pct_copy", 93.0),
    Target("residual RMSNorm forward", "residual_rms_norm", "fwd", _ROW_LARGE, "pct_copy", 93.0),
    Target("RMSNorm forward+backward", "rms_norm", "fwdbwd", _ROW_LARGE, "pct_copy", 75.0),
    Target(
        "residual RMSNorm forward+backward",
        "residual_rms_norm",
        "fwdbwd",
        _ROW_LARGE,
        "pct_copy",
        75.0,
    ),
    Target(
        "GEMM, cubes",
        "matmul",
        "fwd",
        ("4096x4096x4096", "8192x8192x8192"),
        "speedup",
        1.0,
        "cublas",
    ),
    Target(
        "GEMM, flat and skinny",
        "matmul",
        "fwd",
        ("8192x8192x512", "65536x1024x1024"),
        "speedup",
        0.9,
        "cublas",
    ),
    Target("GEMM forward+backward", "matmul", "fwdbwd", (), "speedup", 0.95, "cublas"),
)


def bar_text(stat: str, threshold: float, baseline: str | None = None) -> str:
    """A bar in the words pages show it in.

    Args:
        stat: ``"pct_copy"`` or ``"speedup"``.
        threshold: The bar's value.
        baseline: For ``"speedup"``: the implementation, or :data:`BEST`.

    Returns:
        ``"≥ 90.0% of copy"``, ``"≥ 1.00× cublas"``, ``"≥ 3.00× best baseline"``.

    Raises:
        ValueError: an unknown statistic, or a speed-up without a baseline.
    """
    if stat == "pct_copy":
        return f"≥ {format_value(threshold, '%')} of copy"
    if stat == "speedup" and baseline:
        return f"≥ {format_value(threshold, 'x')} " + (
            "best baseline" if baseline == BEST else baseline
        )
    raise ValueError(f"no bar for stat={stat!r} with baseline={baseline!r}")


#: The condition that lowers the every-shape bar, in the words pages show it in.
NEAR_ROOF_TEXT = f"> {format_value(NEAR_ROOF_PCT, '%')} of copy"


def bars() -> frozenset[tuple[str, float, str | None]]:
    """Every bar: ``(stat, threshold, baseline)`` of each target and of the every-shape bar."""
    return frozenset(
        {(t.stat, t.threshold, t.baseline) for t in TARGETS}
        | {("speedup", bar, BEST) for bar in (EVERY_SHAPE_BAR, NEAR_ROOF_BAR)}
    )


def target_texts() -> frozenset[str]:
    """The words of every bar and condition above: all a page may show as a target."""
    return frozenset({bar_text(*bar) for bar in bars()} | {NEAR_ROOF_TEXT})


def is_bar(stat: str, threshold: float) -> bool:
    """Whether some target (or the every-shape bar) sets ``threshold`` on ``stat``."""
    return any(s == stat and t == threshold for s, t, _ in bars())


def shortfall_text(stat: str, value: float, threshold: float) -> str:
    """How far a saved value falls short of a bar, in the bar's unit.

    Args:
        stat: ``"pct_copy"`` or ``"speedup"``.
        value: The saved value (a claim's value).
        threshold: The bar.

    Returns:
        ``"2.7 points"`` (of copy bandwidth) or ``"0.07×"``; a gap that rounds
        to zero reads ``"< 0.1 points"`` or ``"< 0.01×"``.

    Raises:
        ValueError: the value meets the bar, or an unknown statistic.
    """
    if value >= threshold:
        raise ValueError(f"{value!r} meets the bar {threshold!r}: it falls short of nothing")
    if stat == "pct_copy":
        shown = f"{threshold - value:.1f}"
        return f"{shown} points" if float(shown) else "< 0.1 points"
    if stat == "speedup":
        shown = f"{threshold - value:.2f}"
        return f"{shown}×" if float(shown) else "< 0.01×"
    raise ValueError(f"no shortfall for stat={stat!r}")


def _best_baseline(case: dict) -> tuple[str, dict] | None:
    timed = [
        (name, rec)
        for name, rec in case["impls"].items()
        if name in BASELINES and rec["status"] == "ok" and rec.get("median_ms")
    ]
    return min(timed, key=lambda item: item[1]["median_ms"]) if timed else None


def _ratio(case: dict, baseline: str) -> float | None:
    for r in case["ratios"]:
        if r["impl"] == "ours" and r["baseline"] == baseline:
            return r["median"]
    return None


def _not_run(case: dict, impl: str) -> str | None:
    """Why ``impl`` has no timing in ``case`` (``None`` when it has one)."""
    rec = case["impls"].get(impl)
    if rec is None:
        return f"{impl} was not run"
    if rec["status"] != "ok":
        return f"{impl} {rec['status']}: {rec.get('reason')}"
    return None


def _applies(target: Target, case: dict) -> bool:
    shape = "x".join(str(d) for d in case["shape"])
    return (
        case["op"] == target.op
        and case["mode"] == target.mode
        and case["dtype"] in target.dtypes
        and (not target.shapes or shape in target.shapes)
    )


def evaluate(data: dict) -> list[dict]:
    """Check every target, and the every-shape bar, against one result.

    Args:
        data: A result's data (:attr:`kernel_portfolio.results.Result.data`).

    Returns:
        One row per (target, case) found in the result: ``target`` (name,
        :data:`EVERY_SHAPE` for the every-shape bar), ``case``, ``stat``,
        ``baseline`` (the implementation compared with, for speed-ups),
        ``threshold``, ``bar`` (:func:`bar_text`), ``value`` (``None`` when it
        was not measured), ``met`` (never when ``value`` is ``None``) and
        ``reason`` (why ``value`` is ``None``: ours or the baseline failed,
        was skipped or was not run; else ``None``). The every-shape bar ("at
        least as fast as the best of torch, compile and Liger-Kernel; 0.97 of
        it where that baseline is already above 90% of copy bandwidth") adds
        one row per case that has a timed baseline among those; GEMM has its
        own targets against cuBLAS instead.
    """
    rows = []
    for case in data["cases"]:
        ours = case["impls"].get("ours", {})
        for target in TARGETS:
            if not _applies(target, case):
                continue
            baseline = target.baseline
            if baseline == BEST:
                best = _best_baseline(case)
                baseline = best[0] if best else None
            if target.stat == "pct_copy":
                value = ours.get("pct_copy") if ours.get("status") == "ok" else None
                reason = _not_run(case, "ours") or "ours saved no share of copy bandwidth"
            elif baseline is None:
                value, reason = None, f"none of {', '.join(BASELINES)} ran"
            else:
                value = _ratio(case, baseline)
                reason = (
                    _not_run(case, "ours")
                    or _not_run(case, baseline)
                    or f"no ratio ours/{baseline} saved"
                )
            rows.append(_row(target, case, baseline, value, reason))
        best = _best_baseline(case)
        if best is not None and case["op"] != "matmul":
            name, rec = best
            near_roof = (rec.get("pct_copy") or 0.0) > NEAR_ROOF_PCT
            bar = NEAR_ROOF_BAR if near_roof else EVERY_SHAPE_BAR
            every = Target(EVERY_SHAPE, case["op"], case["mode"], (), "speedup", bar, BEST)
            reason = _not_run(case, "ours") or f"no ratio ours/{name} saved"
            rows.append(_row(every, case, name, _ratio(case, name), reason))
    return rows


def _row(target: Target, case: dict, baseline, value, reason) -> dict:
    return {
        "target": target.name,
        "case": case["id"],
        "stat": target.stat,
        "baseline": baseline,
        "threshold": target.threshold,
        "bar": bar_text(target.stat, target.threshold, target.baseline),
        "value": value,
        "met": value is not None and value >= target.threshold,
        "reason": None if value is not None else reason,
    }
