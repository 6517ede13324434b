"""A/B of ``plan_rule.FEW_ROWS_PER_SM``'s warps against the rule before it, both directions.

About two minutes in one process; prints a table and writes nothing else::

    python scripts/rows_warps_rule_ab.py > results/<gpu>/checks/rows-warps-rule-ab-<UTC stamp>.log

The block plan's warps round up at up to ``FEW_ROWS_PER_SM`` rows an SM, to
the fewest that hold the row at two vectors a thread (``plans.warps_for``).
Before, they rounded up at no more rows than SMs only, from the row's
vectors counted down (1152 and 2304 columns kept 2 and 4 warps).
``scripts/rows_warps_ab.py`` measured the forwards at 133 to 1584 rows; the
backwards take the same plan (``plans.choose_for``). This times both rules'
plans, launched through the forward functions (softmax, RMSNorm, residual
RMSNorm, forced plan) and through the backward launchers
(``softmax._launch_backward``, ``rms_norm._backward``), bfloat16, at 1 to
1056 rows of widths whose warps the two rules set apart, as the suites time
them: CUDA graphs of 20 calls (warm L2) up to 4 MiB a tensor, else CUDA
events with a cold L2; the two visited in alternating order (six visits of
twenty samples), their outputs compared (to rounding). The last lines give
the geometric mean of new over old per op and row count. A diagnostic for a
plan rule: the site quotes the benchmark results, never this.
"""

from __future__ import annotations

import math
import statistics

import torch

import kernel_portfolio as kp
from kernel_portfolio import plans
from kernel_portfolio.bench import suites, timing
from kernel_portfolio.ops import rms_norm, softmax

VISITS, SAMPLES, GRAPH_CALLS = 6, 20, 20
ROWS = (1, 32, 132, 264, 528, 1056)
WIDTHS = (1152, 1536, 2304, 3072, 3584, 4104, 5120, 7168)
OPS = ("softmax", "rms_norm", "residual", "softmax_bwd", "rms_bwd", "residual_bwd")
MAX_REL_DIFF = 1e-2


def _old_warps(n_rows: int, n_cols: int, sm_count: int) -> int:
    """The block plan's bfloat16 warps under the rule before ``FEW_ROWS_PER_SM``."""
    wanted = max(1, n_cols // 512)
    bits = wanted.bit_length() - 1
    if n_rows <= sm_count and wanted > 1 << bits:
        bits += 1
    return min(16, 1 << bits)


def _make(op: str, m: int, n: int):
    """The inputs and poisoned outputs of ``op`` at ``m x n`` (bfloat16), and a call for a plan."""

    def rand(*shape):
        return torch.randn(*shape, device="cuda", dtype=torch.bfloat16)

    x, w = rand(m, n), rand(n)
    if op in ("softmax", "rms_norm", "residual"):
        r = rand(m, n)
        if op == "softmax":
            return lambda plan: lambda: kp.softmax(x, plan=plan)
        if op == "rms_norm":
            return lambda plan: lambda: kp.rms_norm(x, w, plan=plan)
        return lambda plan: lambda: kp.residual_rms_norm(x, r, w, plan=plan)
    dy, dx = rand(m, n), torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    if op == "softmax_bwd":
        y = torch.softmax(x.float(), -1).to(torch.bfloat16)
        return lambda plan: lambda: (softmax._launch_backward(y, dy, dx, plan), dx)[1]
    dh = rand(m, n) if op == "residual_bwd" else None
    dx2 = torch.full_like(dx, float("nan")) if dh is not None else None
    dw = rand(n)
    rstd = torch.rsqrt(x.float().pow(2).mean(-1) + 1e-6)

    def call(plan):
        def run():
            rms_norm._backward(dy, x, w, rstd, dh, plan, dx, dx2, dw)
            return (dx, dw) if dx2 is None else (dx, dx2, dw)

        return run

    return call


def _rel_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.float(), b.float()
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


def _snapshot(out) -> tuple[torch.Tensor, ...]:
    return tuple(o.clone() for o in (out if isinstance(out, tuple) else (out,)))


def main() -> None:
    if not torch.cuda.is_available():
        raise SystemExit("rows_warps_rule_ab: needs a CUDA device")
    torch.manual_seed(0)
    props = torch.cuda.get_device_properties(0)
    sms = props.multi_processor_count
    flush = timing.L2Flusher(getattr(props, "L2_cache_size", None))
    timing.busy(500)
    print(f"{props.name}; {sms} SMs; torch {torch.__version__}; bfloat16\n")
    print(f"{'op':<13} {'rows x cols':>12} {'timer':>6} {'old':>10} {'new':>10} {'new/old':>8}")
    ratios: dict[tuple[str, int], list[float]] = {}
    for op in OPS:
        for n in WIDTHS:
            for m in ROWS:
                new = plans.choose(m, n, elem_bytes=2, sm_count=sms)
                old = plans.RowPlan("block", new.block, _old_warps(m, n, sms))
                if new.kind != "block" or new == old:
                    continue
                make = _make(op, m, n)
                calls = {"old": make(old), "new": make(new)}
                outs = {k: _snapshot(c()) for k, c in calls.items()}
                diff = max(_rel_diff(a, b) for a, b in zip(outs["new"], outs["old"], strict=True))
                if not diff <= MAX_REL_DIFF:
                    raise SystemExit(f"{op} {m}x{n}: the two rules' outputs differ by {diff:.1e}")
                graph = m * n * 2 <= suites.GRAPH_MAX_BYTES
                if graph:
                    try:
                        timed = {k: timing.capture_graph(c, GRAPH_CALLS) for k, c in calls.items()}
                    except RuntimeError:  # a launcher that cannot be captured: events instead
                        graph = False
                lead = 0.0 if graph else max(timing.lead_for(c) for c in calls.values())
                times = {k: [] for k in calls}
                for visit in range(VISITS):
                    for k in ("old", "new") if visit % 2 == 0 else ("new", "old"):
                        if graph:
                            times[k] += timing.time_graph(timed[k], SAMPLES, GRAPH_CALLS)
                        else:
                            times[k] += timing.time_events(
                                calls[k], SAMPLES, flush=flush, lead_ms=lead
                            )
                med = {k: statistics.median(t) for k, t in times.items()}
                ratio = med["new"] / med["old"]
                ratios.setdefault((op, m), []).append(ratio)
                cells = " ".join(
                    f"w{p.num_warps} {med[k] * 1e3:6.2f}" for k, p in (("old", old), ("new", new))
                )
                timer = "graph" if graph else "events"
                print(f"{op:<13} {f'{m}x{n}':>12} {timer:>6} {cells} {ratio:>8.3f}", flush=True)
                del calls, outs
                torch.cuda.empty_cache()
    print("\nnew over old, per op and row count: geometric mean (worst) over the widths")
    for (op, m), got in ratios.items():
        geo = math.exp(sum(map(math.log, got)) / len(got))
        print(f"  {op:<13} {m:>5}: {geo:.3f} ({max(got):.3f}) of {len(got)}")


if __name__ == "__main__":
    main()
