"""A/B of the residual RMSNorm forward's block-plan stages (1 or 2) on a GPU, in one process.

About a minute; prints a table and writes nothing else::

    python scripts/row_ab.py > results/h200/checks/row-ab-<UTC stamp>.log

The residual RMSNorm forward's block plan pipelines its row loop with 2
stages where :func:`kernel_portfolio.plan_rule.residual_block_stages` says
so. Here both settings run at every shape, whatever the rule says, on the
same inputs, at widths that fill their block (powers of two) and widths just
past one (a block twice as wide, half masked), visited in alternating order
(five visits of twenty samples each), each call with a cold L2
(:class:`~kernel_portfolio.bench.timing.L2Flusher`) and a device spin ahead
of its start event (:func:`~kernel_portfolio.bench.timing.lead_for`). The
table gives the median time and the share of the copy bandwidth measured in
the same run, over the bytes the call must move; each setting's outputs are
checked against torch first (the largest difference is printed). A diagnostic
for the performance notes: the site quotes the benchmark results, never this.
"""

from __future__ import annotations

import statistics

import torch
import torch.nn.functional as F

import kernel_portfolio as kp
from kernel_portfolio import plan_rule
from kernel_portfolio.bench import timing

VISITS, SAMPLES = 5, 20
SHIPPED = plan_rule.residual_block_stages
SETTINGS = (1, 2)
SHAPES = ((16384, 4096), (16384, 4104), (8192, 8192), (16384, 8200), (32768, 1024), (32768, 1032))


def _max_diff(got: tuple, want: tuple) -> float:
    return max((g.float() - e.float()).abs().max().item() for g, e in zip(got, want, strict=True))


def main() -> None:
    if not torch.cuda.is_available():
        raise SystemExit("row_ab: needs a CUDA device")
    torch.manual_seed(0)
    props = torch.cuda.get_device_properties(0)
    flush = timing.L2Flusher(getattr(props, "L2_cache_size", None))
    timing.busy(500)
    nbytes, copy_ms = timing.copy_bandwidth()
    copy_gbps = nbytes / statistics.median(copy_ms) / 1e6
    print(f"{props.name}; copy bandwidth {copy_gbps:.0f} GB/s; torch {torch.__version__}")
    print("\nresidual RMSNorm forward, block-plan stages")
    print(f"{'case':<38} {'stages':>7} {'median us':>10} {'% copy':>7} {'max diff':>9}")
    for m, n in SHAPES:
        for dtype in (torch.float16, torch.bfloat16):
            x, r = (torch.randn(m, n, device="cuda", dtype=dtype) for _ in range(2))
            w = torch.randn(n, device="cuda", dtype=dtype)
            moved = (4 * m * n + n) * x.element_size()

            def call(x=x, r=r, w=w):
                return kp.residual_rms_norm(x, r, w)

            h = x + r
            want = (F.rms_norm(h, (n,), w, 1e-6), h)
            diffs, times = {}, {s: [] for s in SETTINGS}
            for stages in SETTINGS:
                plan_rule.residual_block_stages = lambda n_cols, block, s=stages: s
                diffs[stages] = _max_diff(call(), want)
            lead = timing.lead_for(call)
            for visit in range(VISITS):
                for stages in SETTINGS if visit % 2 == 0 else SETTINGS[::-1]:
                    plan_rule.residual_block_stages = lambda n_cols, block, s=stages: s
                    times[stages] += timing.time_events(call, SAMPLES, flush=flush, lead_ms=lead)
            label = f"residual_rms_norm {m}x{n} {str(dtype).removeprefix('torch.')}"
            for stages in SETTINGS:
                ms = statistics.median(times[stages])
                pct = 100 * moved / ms / 1e6 / copy_gbps
                row = f"{label:<38} {stages:>7} {ms * 1e3:>10.1f} {pct:>6.1f}%"
                print(f"{row} {diffs[stages]:>9.2e}")
            del x, r, w, h, want
            torch.cuda.empty_cache()
    plan_rule.residual_block_stages = SHIPPED


if __name__ == "__main__":
    main()
