"""Speed targets, as data, and their evaluation against saved results.

The targets are the project's bar on the H200 (see the Benchmarks page): a
share of the copy bandwidth measured in the same run for memory-bound
kernels, a speed-up against cuBLAS for GEMM, and a speed-up against the best
baseline at every shape. They live here, beside the suites, so the
Benchmarks page can say for each one whether the committed results meet it
and by how much they miss; timed tests never assert speed.
"""

from __future__ import annotations

from dataclasses import dataclass

_ROW_LARGE = ("8192x8192", "32768x8192", "32768x1024", "16384x4104")
_HALF = ("float16", "bfloat16")
#: A best baseline above this share of copy bandwidth lowers the bar to :data:`NEAR_ROOF_BAR`.
NEAR_ROOF_PCT = 90.0
NEAR_ROOF_BAR = 0.97


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
        baseline: For ``"speedup"``: an implementation name, or ``"best"`` for
            the fastest of torch, compile and liger in the same case.
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
    Target(
        "softmax forward, few wide rows", "softmax", "fwd", ("4x32769",), "speedup", 3.0, "best"
    ),
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

_BASELINES = ("torch", "compile", "liger")


def _best_baseline(case: dict) -> tuple[str, dict] | None:
    timed = [
        (name, rec)
        for name, rec in case["impls"].items()
        if name in _BASELINES and rec["status"] == "ok" and rec.get("median_ms")
    ]
    return min(timed, key=lambda item: item[1]["median_ms"]) if timed else None


def _ratio(case: dict, baseline: str) -> float | None:
    for r in case["ratios"]:
        if r["impl"] == "ours" and r["baseline"] == baseline:
            return r["median"]
    return None


def _applies(target: Target, case: dict) -> bool:
    shape = "x".join(str(d) for d in case["shape"])
    return (
        case["op"] == target.op
        and case["mode"] == target.mode
        and case["dtype"] in target.dtypes
        and (not target.shapes or shape in target.shapes)
    )


def evaluate(result) -> list[dict]:
    """Check every target, and the every-shape bar, against one result.

    Args:
        result: A :class:`kernel_portfolio.results.Result`.

    Returns:
        One row per (target, case) found in the result: ``target`` (name),
        ``case``, ``stat``, ``baseline`` (the implementation compared with, for
        speed-ups), ``threshold``, ``value`` (``None`` when ours did not run)
        and ``met``. The every-shape bar ("at least as fast as the best of
        torch, compile and Liger-Kernel; 0.97 of it where that baseline is
        already above 90% of copy bandwidth") adds one row per case that has
        a baseline.
    """
    rows = []
    for case in result.data["cases"]:
        ours = case["impls"].get("ours", {})
        for target in TARGETS:
            if not _applies(target, case):
                continue
            baseline = target.baseline
            if baseline == "best":
                best = _best_baseline(case)
                baseline = best[0] if best else None
            if target.stat == "pct_copy":
                value = ours.get("pct_copy") if ours.get("status") == "ok" else None
            else:
                value = _ratio(case, baseline) if baseline else None
            rows.append(_row(target.name, case, target.stat, baseline, target.threshold, value))
        best = _best_baseline(case)
        if best is not None and case["op"] != "matmul":
            name, rec = best
            bar = NEAR_ROOF_BAR if (rec.get("pct_copy") or 0.0) > NEAR_ROOF_PCT else 1.0
            rows.append(
                _row("every shape: best baseline", case, "speedup", name, bar, _ratio(case, name))
            )
    return rows


def _row(target, case, stat, baseline, threshold, value) -> dict:
    return {
        "target": target,
        "case": case["id"],
        "stat": stat,
        "baseline": baseline,
        "threshold": threshold,
        "value": value,
        "met": value is not None and value >= threshold,
    }
