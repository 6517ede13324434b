"""A/B of ``plan_rule.BLOCK_STAGES``: the block plan's row loop pipelined (2) or not (1).

On a GPU, about a minute; prints a table and writes nothing else::

    python scripts/row_stages_ab.py > results/h200/checks/row-stages-ab-<UTC stamp>.log

For each forward below, both settings run in one process on the same inputs,
visited in alternating order (five visits of twenty samples each), each call
with a cold L2 (:class:`~kernel_portfolio.bench.timing.L2Flusher`). The table
gives the median time and the share of the copy bandwidth measured in the same
run, over the bytes the call must move. Each setting's outputs are checked
against torch's first (the largest difference is printed). A diagnostic for
the performance notes: the site quotes the benchmark results, never this.
"""

from __future__ import annotations

import statistics

import torch
import torch.nn.functional as F

import kernel_portfolio as kp
from kernel_portfolio import plan_rule
from kernel_portfolio.bench import timing

SHAPES = ((8192, 8192), (32768, 8192), (16384, 4096), (16384, 16384))
VISITS, SAMPLES = 5, 20


def _cases(m: int, n: int, dtype: torch.dtype):
    """``(name, call, reference call, bytes moved)`` of each forward at ``m x n``."""
    x = torch.randn(m, n, device="cuda", dtype=dtype)
    r = torch.randn(m, n, device="cuda", dtype=dtype)
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
    ]


def _max_diff(got, want) -> float:
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    return max((g.float() - e.float()).abs().max().item() for g, e in zip(got, want, strict=True))


def main() -> None:
    if not torch.cuda.is_available():
        raise SystemExit("row_stages_ab: needs a CUDA device")
    torch.manual_seed(0)
    props = torch.cuda.get_device_properties(0)
    flush = timing.L2Flusher(getattr(props, "L2_cache_size", None))
    timing.busy(500)
    nbytes, copy_ms = timing.copy_bandwidth()
    copy_gbps = nbytes / statistics.median(copy_ms) / 1e6
    print(f"{props.name}; copy bandwidth {copy_gbps:.0f} GB/s; torch {torch.__version__}")
    print(f"{'case':<36} {'stages':>6} {'median us':>10} {'% copy':>7} {'max diff':>9}")
    settings = (1, 2)
    for m, n in SHAPES:
        for dtype in (torch.float16, torch.bfloat16):
            for name, call, ref, moved in _cases(m, n, dtype):
                diffs, times = {}, {s: [] for s in settings}
                for stages in settings:
                    plan_rule.BLOCK_STAGES = stages
                    diffs[stages] = _max_diff(call(), ref())
                for visit in range(VISITS):
                    for stages in settings if visit % 2 == 0 else settings[::-1]:
                        plan_rule.BLOCK_STAGES = stages
                        times[stages] += timing.time_events(call, SAMPLES, flush=flush)
                label = f"{name} {m}x{n} {str(dtype).removeprefix('torch.')}"
                for stages in settings:
                    ms = statistics.median(times[stages])
                    pct = 100 * moved / ms / 1e6 / copy_gbps
                    print(
                        f"{label:<36} {stages:>6} {ms * 1e3:>10.1f} {pct:>6.1f}% "
                        f"{diffs[stages]:>9.2e}"
                    )
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
