"""Speed and cost targets, as data, and their evaluation against saved results.

The targets are the project's bar on the H200 (see the Benchmarks page): a
share of the copy bandwidth measured in the same run for memory-bound
kernels, a speed-up against cuBLAS for GEMM, and a speed-up against the best
baseline at every shape (higher is better: at least the bar); and two costs
per call, the eager host cost against torch's and the peak device memory
against the best baseline's (lower is better: ours' minus the baseline's, at
most the bar). They live here, beside the suites, so the Benchmarks page can
say for each one whether the committed results meet it and by how much they
miss; timed tests never assert speed.

A bar is a target, not a measurement: pages show it in the words of
:func:`bar_text`, which the evidence gate accepts only when it is one of
:func:`target_texts`. A miss is shown in the words of :func:`shortfall_text`,
which the gate recomputes from the saved value it is derived from.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernel_portfolio.bench.suites import DTYPE_BYTES
from kernel_portfolio.evidence.quote import format_value, resolve

_ROW_LARGE = ("8192x8192", "32768x8192", "32768x1024", "16384x4104")
_HALF = ("float16", "bfloat16")
#: The every-shape bar: ours over the best baseline (:data:`BASELINES`) in the same case.
EVERY_SHAPE_BAR = 0.97
#: A best baseline above this share of copy bandwidth lowers the bar to :data:`NEAR_ROOF_BAR`.
NEAR_ROOF_PCT = 90.0
NEAR_ROOF_BAR = 0.95
#: GEMM's every-shape bar, against cuBLAS: :data:`EVERY_SHAPE_BAR` from this many
#: rows ``M``, :data:`FLOOR_BAR` below it (a projection layer at small batch).
GEMM_FULL_BAR_M = 1024
#: No case at all below this share of its best baseline (cuBLAS for GEMM).
FLOOR_BAR = 0.90
#: An unaligned row width (rows not 16 bytes apart) against its aligned neighbour
#: (the width rounded down to a multiple of a 16-byte vector, same rows, op, mode
#: and dtype, in the same run): ours' share of copy bandwidth over the neighbour's.
ALIGNED_BAR = 0.90
#: Target names of the every-shape, floor and aligned-neighbour rows of :func:`evaluate`.
EVERY_SHAPE = "every shape: best baseline"
FLOOR = "floor: best baseline"
ALIGNED = "unaligned rows: aligned neighbour"
#: ``Target.stat`` of the aligned-neighbour rows (a ratio of two saved shares of copy).
ALIGNED_SHARE = "aligned_share"
#: ``Target.baseline`` meaning the fastest of :data:`BASELINES` in the same case.
BEST = "best"
#: The baselines the every-shape bar and ``BEST`` choose from.
BASELINES = ("torch", "compile", "liger")
#: Statistics held to at most a bar (lower is better), with the unit of their values: a
#: target's value is ours' minus the baseline's in the same case.
AT_MOST = {"metrics.host_us": "us", "peak_mem_bytes": "bytes"}


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
    Target(
        "softmax forward, wide rows at 256 MiB per tensor",
        "softmax",
        "fwd",
        ("1024x131072",),
        "pct_copy",
        85.0,
    ),
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


@dataclass(frozen=True)
class CostTarget:
    """A cost per call, lower is better, held against a baseline in every case that saves it.

    Attributes:
        name: What the target is about, in words.
        stat: A quotable statistic of one implementation, a key of :data:`AT_MOST`.
        threshold: The bar: ours' value minus the baseline's is at most this,
            in the unit :data:`AT_MOST` gives.
        baseline: An implementation name, or :data:`BEST` for the fastest of
            torch, compile and liger in the same case.
    """

    name: str
    stat: str
    threshold: float
    baseline: str


#: Target name of the host-cost rows of :func:`evaluate`.
HOST_COST = "host cost per call"
#: Target name of the peak-memory rows of :func:`evaluate`.
PEAK_MEMORY = "peak memory per call"
COST_TARGETS: tuple[CostTarget, ...] = (
    CostTarget(HOST_COST, "metrics.host_us", 15.0, "torch"),
    CostTarget(PEAK_MEMORY, "peak_mem_bytes", 0.0, BEST),
)


def bar_text(stat: str, threshold: float, baseline: str | None = None) -> str:
    """A bar in the words pages show it in.

    Args:
        stat: ``"pct_copy"``, ``"speedup"`` or a statistic of :data:`AT_MOST`.
        threshold: The bar's value.
        baseline: For ``"speedup"`` and :data:`AT_MOST`: the implementation,
            or :data:`BEST`.

    Returns:
        ``"≥ 90.0% of copy"``, ``"≥ 1.00× cublas"``, ``"≥ 3.00× best baseline"``,
        ``"within 15.0 µs of torch"``, ``"no more than the best baseline's"``.

    Raises:
        ValueError: an unknown statistic, or a comparison without a baseline.
    """
    if stat == "pct_copy":
        return f"≥ {format_value(threshold, '%')} of copy"
    if stat == ALIGNED_SHARE:
        return f"≥ {format_value(100 * threshold, '%')} of the aligned neighbour's bandwidth"
    if stat == "speedup" and baseline:
        return f"≥ {format_value(threshold, 'x')} " + (
            "best baseline" if baseline == BEST else baseline
        )
    if stat in AT_MOST and baseline:
        who = "the best baseline" if baseline == BEST else baseline
        if threshold == 0:
            return f"no more than {who}'s"
        return f"within {format_value(threshold, AT_MOST[stat])} of {who}"
    raise ValueError(f"no bar for stat={stat!r} with baseline={baseline!r}")


#: The condition that lowers the every-shape bar, in the words pages show it in.
NEAR_ROOF_TEXT = f"> {format_value(NEAR_ROOF_PCT, '%')} of copy"


def bars() -> frozenset[tuple[str, float, str | None]]:
    """Every bar: ``(stat, threshold, baseline)`` of each target and of the every-shape bar."""
    return frozenset(
        {(t.stat, t.threshold, t.baseline) for t in TARGETS + COST_TARGETS}
        | {("speedup", bar, BEST) for bar in (EVERY_SHAPE_BAR, NEAR_ROOF_BAR, FLOOR_BAR)}
        | {("speedup", bar, "cublas") for bar in (EVERY_SHAPE_BAR, FLOOR_BAR)}
        | {(ALIGNED_SHARE, ALIGNED_BAR, None)}
    )


def target_texts() -> frozenset[str]:
    """The words of every bar and condition above: all a page may show as a target."""
    return frozenset({bar_text(*bar) for bar in bars()} | {NEAR_ROOF_TEXT})


def is_bar(stat: str, threshold: float, baseline: str | None = None) -> bool:
    """Whether some target (or the every-shape bar) sets ``threshold`` on ``stat``.

    The bar must be against ``baseline`` too: ``None`` for a share of copy
    bandwidth; a bar against :data:`BEST` holds against any of :data:`BASELINES`.
    """
    return any(
        s == stat and t == threshold and (b == baseline or (b == BEST and baseline in BASELINES))
        for s, t, b in bars()
    )


def meets(stat: str, value: float, threshold: float) -> bool:
    """Whether a value meets a bar: at most it for :data:`AT_MOST`, else at least it."""
    return value <= threshold if stat in AT_MOST else value >= threshold


def target_value(
    data: dict, case_id: str, stat: str, baseline: str | None = None, impl: str = "ours"
) -> float:
    """The value a target holds to its bar, from a result's saved values.

    Args:
        data: A result's data.
        case_id: Case id.
        stat: ``"pct_copy"`` (``impl``'s share of copy bandwidth),
            ``"speedup"`` (the saved ratio ``impl`` over ``baseline``) or a
            statistic of :data:`AT_MOST` (``impl``'s value minus ``baseline``'s).
        baseline: The implementation compared with (never :data:`BEST`: the one it chose).
        impl: The implementation held to the bar.

    Raises:
        ValueError: a value that is not saved, or a saved value in another unit.
    """
    if stat not in AT_MOST:
        return resolve(data, case_id, stat, impl, baseline)[0]
    if baseline is None:
        raise ValueError(f"stat {stat!r} is held against a baseline: baseline= is missing")
    (ours, ours_unit), (theirs, their_unit) = (
        resolve(data, case_id, stat, name) for name in (impl, baseline)
    )
    if {ours_unit, their_unit} != {AT_MOST[stat]}:
        raise ValueError(
            f"{stat!r} of case {case_id!r} is saved in {ours_unit!r} and {their_unit!r},"
            f" not {AT_MOST[stat]!r}"
        )
    return ours - theirs


def shortfall_text(stat: str, value: float, threshold: float) -> str:
    """How far a saved value misses a bar, in the bar's unit.

    Args:
        stat: ``"pct_copy"``, ``"speedup"`` or a statistic of :data:`AT_MOST`.
        value: The value held to the bar (:func:`target_value`).
        threshold: The bar.

    Returns:
        ``"2.7 points"`` (of copy bandwidth) or ``"0.07×"`` short of an
        at-least bar, where a gap that rounds to zero reads ``"< 0.1 points"``
        or ``"< 0.01×"``; the excess over an at-most bar in the statistic's
        unit (``"43.2 µs"``, ``"4.00 MiB"``).

    Raises:
        ValueError: the value meets the bar, or an unknown statistic.
    """
    if meets(stat, value, threshold):
        raise ValueError(f"{value!r} meets the bar {threshold!r}: it misses by nothing")
    if stat in AT_MOST:
        return format_value(value - threshold, AT_MOST[stat])
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


def aligned_neighbour(data: dict, case: dict) -> dict | None:
    """The case of ``data`` whose rows are ``case``'s aligned neighbour, if ``case``'s are not.

    A row operator's case whose width leaves its rows unaligned to 16 bytes
    has as neighbour the case of the same op, mode, dtype and rows at the width
    rounded down to a multiple of a 16-byte vector; ``None`` for an aligned
    width, another operator, or a run without that case.
    """
    if case["op"] == "matmul" or len(case["shape"]) != 2:
        return None
    rows, width = case["shape"]
    vec = 16 // DTYPE_BYTES[case["dtype"]]
    if width % vec == 0:
        return None
    for other in data["cases"]:
        if (other["op"], other["mode"], other["dtype"], other["shape"]) == (
            case["op"],
            case["mode"],
            case["dtype"],
            [rows, width // vec * vec],
        ):
            return other
    return None


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
        own targets against cuBLAS instead. Each cost target
        (:data:`COST_TARGETS`) adds one row per case where ours and its
        baseline (the fastest of torch, compile and liger for :data:`BEST`)
        both saved the statistic: no row says why a cost was not measured.
    """
    rows = []
    for case in data["cases"]:
        ours = case["impls"].get("ours", {})
        best = _best_baseline(case)
        best_name = best[0] if best else None
        for target in TARGETS:
            if not _applies(target, case):
                continue
            baseline = best_name if target.baseline == BEST else target.baseline
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
        rows += _every_shape_rows(case, best)
        neighbour = aligned_neighbour(data, case)
        if neighbour is not None:
            aligned = Target(ALIGNED, case["op"], case["mode"], (), ALIGNED_SHARE, ALIGNED_BAR)
            shares = [c["impls"].get("ours", {}).get("pct_copy") for c in (case, neighbour)]
            value = shares[0] / shares[1] if None not in shares and shares[1] else None
            reason = _not_run(case, "ours") or _not_run(neighbour, "ours")
            row = _row(aligned, case, None, value, reason or "no share of copy saved")
            rows.append({**row, "neighbour": neighbour["id"]})
        for cost in COST_TARGETS:
            baseline = best_name if cost.baseline == BEST else cost.baseline
            try:
                value = target_value(data, case["id"], cost.stat, baseline)
            except ValueError:
                continue  # a cost not saved for ours or the baseline has no row
            rows.append(_row(cost, case, baseline, value, None))
    return rows


def _every_shape_rows(case: dict, best: tuple[str, dict] | None) -> list[dict]:
    """The every-shape and floor rows of one case: ours over its best baseline.

    Row operators: the fastest of :data:`BASELINES`, with the bar lowered to
    :data:`NEAR_ROOF_BAR` where it already runs above :data:`NEAR_ROOF_PCT` of
    copy. GEMM: cuBLAS, with the bar :data:`FLOOR_BAR` below
    :data:`GEMM_FULL_BAR_M` rows. No row when no such baseline was timed.
    """
    if case["op"] == "matmul":
        rec = case["impls"].get("cublas")
        if rec is None or rec["status"] != "ok":
            return []
        name, bar = "cublas", EVERY_SHAPE_BAR if case["shape"][0] >= GEMM_FULL_BAR_M else FLOOR_BAR
    elif best is None:
        return []
    else:
        (name, rec), bar = best, EVERY_SHAPE_BAR
        if (rec.get("pct_copy") or 0.0) > NEAR_ROOF_PCT:
            bar = NEAR_ROOF_BAR
    reason = _not_run(case, "ours") or f"no ratio ours/{name} saved"
    value = _ratio(case, name)
    baseline = "cublas" if name == "cublas" else BEST
    return [
        _row(
            Target(target, case["op"], case["mode"], (), "speedup", b, baseline),
            case,
            name,
            value,
            reason,
        )  # fmt: skip
        for target, b in ((EVERY_SHAPE, bar), (FLOOR, FLOOR_BAR))
    ]


def _row(target: Target | CostTarget, case: dict, baseline, value, reason) -> dict:
    return {
        "target": target.name,
        "case": case["id"],
        "stat": target.stat,
        "baseline": baseline,
        "threshold": target.threshold,
        "bar": bar_text(target.stat, target.threshold, target.baseline),
        "value": value,
        "met": value is not None and meets(target.stat, value, target.threshold),
        "reason": None if value is not None else reason,
    }
