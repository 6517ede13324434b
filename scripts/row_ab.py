"""A/B of the block-plan forwards' grid (``plans.BLOCK_FORWARD_GRID``) on a GPU.

About two minutes in one process; prints a table and writes nothing else::

    python scripts/row_ab.py > results/h200/checks/row-ab-<UTC stamp>.log

The forwards of softmax, RMSNorm, residual RMSNorm and row sum whose rows fit
one block run either as a persistent grid (the programs the SMs keep
resident, each walking rows) or with one program per row. Both settings run
on the same inputs, visited in alternating order (five visits of twenty
samples each), each call with a cold L2
(:class:`~kernel_portfolio.bench.timing.L2Flusher`) and a device spin ahead of
its start event (:func:`~kernel_portfolio.bench.timing.lead_for`). The table
gives the median time and the share of the copy bandwidth measured in the
same run, over the bytes the call must move; each setting's outputs are
checked against torch first (the largest difference is printed). The last
line is the mean change of the median time from ``persistent`` to ``rows``
over every case. A diagnostic for the performance notes: the site quotes the
benchmark results, never this.
"""

from __future__ import annotations

import statistics

import torch
import torch.nn.functional as F

import kernel_portfolio as kp
from kernel_portfolio import plans
from kernel_portfolio.bench import timing

VISITS, SAMPLES = 5, 20
SETTINGS = ("persistent", "rows")
SHAPES = ((8192, 8192), (32768, 8192), (32768, 1024), (16384, 4096), (16384, 4104), (8192, 16384))


def _cases(m: int, n: int, dtype: torch.dtype):
    """``(name, call, reference call, bytes moved)`` of each forward at ``m x n``."""
    x, r = (torch.randn(m, n, device="cuda", dtype=dtype) for _ in range(2))
    w = torch.randn(n, device="cuda", dtype=dtype)
    size = x.element_size()

    def residual_ref():
        h = x + r
        return F.rms_norm(h, (n,), w, 1e-6), h

    return [
        ("softmax", lambda: kp.softmax(x), lambda: torch.softmax(x, -1), 2 * m * n * size),
        (
            "rms_norm",
            lambda: kp.rms_norm(x, w),
            lambda: F.rms_norm(x, (n,), w, 1e-6),
            (2 * m * n + n) * size,
        ),
        (
            "residual_rms_norm",
            lambda: kp.residual_rms_norm(x, r, w),
            residual_ref,
            (4 * m * n + n) * size,
        ),
        ("row_sum", lambda: kp.row_sum(x), lambda: x.sum(-1), (m * n + m) * size),
    ]


def _max_diff(got, want) -> float:
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    return max((g.float() - e.float()).abs().max().item() for g, e in zip(got, want, strict=True))


def main() -> None:
    if not torch.cuda.is_available():
        raise SystemExit("row_ab: needs a CUDA device")
    torch.manual_seed(0)
    shipped = plans.BLOCK_FORWARD_GRID
    props = torch.cuda.get_device_properties(0)
    flush = timing.L2Flusher(getattr(props, "L2_cache_size", None))
    timing.busy(500)
    nbytes, copy_ms = timing.copy_bandwidth()
    copy_gbps = nbytes / statistics.median(copy_ms) / 1e6
    print(f"{props.name}; copy bandwidth {copy_gbps:.0f} GB/s; torch {torch.__version__}")
    print(f"\nblock-plan forwards, grid (shipped: {shipped})")
    print(f"{'case':<38} {'grid':>10} {'median us':>10} {'% copy':>7} {'max diff':>9}")
    changes = []
    for m, n in SHAPES:
        for dtype in (torch.float16, torch.bfloat16):
            for name, call, ref, moved in _cases(m, n, dtype):
                diffs, times = {}, {s: [] for s in SETTINGS}
                for grid in SETTINGS:
                    plans.BLOCK_FORWARD_GRID = grid
                    diffs[grid] = _max_diff(call(), ref())
                lead = timing.lead_for(call)
                for visit in range(VISITS):
                    for grid in SETTINGS if visit % 2 == 0 else SETTINGS[::-1]:
                        plans.BLOCK_FORWARD_GRID = grid
                        times[grid] += timing.time_events(call, SAMPLES, flush=flush, lead_ms=lead)
                label = f"{name} {m}x{n} {str(dtype).removeprefix('torch.')}"
                medians = {grid: statistics.median(times[grid]) for grid in SETTINGS}
                for grid in SETTINGS:
                    pct = 100 * moved / medians[grid] / 1e6 / copy_gbps
                    row = f"{label:<38} {grid:>10} {medians[grid] * 1e3:>10.1f} {pct:>6.1f}%"
                    print(f"{row} {diffs[grid]:>9.2e}")
                changes.append(medians["rows"] / medians["persistent"] - 1)
            torch.cuda.empty_cache()
    plans.BLOCK_FORWARD_GRID = shipped
    mean = 100 * statistics.mean(changes)
    print(f"\nmean change of the median time, persistent -> rows: {mean:+.2f}%")


if __name__ == "__main__":
    main()
