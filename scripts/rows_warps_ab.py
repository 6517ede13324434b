"""A/B of the block plan's warps at a few rows an SM (133 to 1584 rows) on a GPU.

About three minutes in one process; prints a table and writes nothing else::

    python scripts/rows_warps_ab.py > results/<gpu>/checks/rows-warps-ab-<UTC stamp>.log

``plans.warps_for`` gives a block plan about two 16-byte vectors a thread of
the row, rounded down to a power of two, and rounds up only with no more rows
than SMs (``few-rows-warps-ab-20261205T1740Z.log``). The held-out scan
(``../archive/h100-80gb-hbm3/heldout-20261207T104736Z.json``) found the RMSNorm
and residual RMSNorm forwards at 264 rows (two an SM) behind Liger-Kernel,
which runs 8 or 16 warps a row, at every hidden size it tried. This times the
softmax, RMSNorm and residual RMSNorm forwards (bfloat16, through the public
functions with a forced plan) at 133 to 1584 rows of hidden sizes, with the
shipped warps, rounded up, and twice that (at most 16), beside Liger-Kernel's
forward, as the suites time them: CUDA graphs of 20 calls (warm L2) up to
4 MiB a tensor, else CUDA events with a cold L2; the settings visited in
alternating order (six visits of twenty samples). Every setting's outputs
are compared with the shipped one's (to rounding). The last lines give, per
op and row count, how many widths each setting won. A diagnostic for a plan
rule: the site quotes the benchmark results, never this.
"""

from __future__ import annotations

import dataclasses
import statistics

import torch

import kernel_portfolio as kp
from kernel_portfolio import plans
from kernel_portfolio.bench import suites, timing

VISITS, SAMPLES, GRAPH_CALLS = 6, 20, 20
ROWS = (133, 198, 264, 396, 528, 792, 1056, 1584)
WIDTHS = (1152, 1536, 2304, 3072, 3840, 4096, 5120, 7168)
OPS = ("softmax", "rms_norm", "residual")
EPS = 1e-6
MAX_REL_DIFF = 1e-2


def _rel_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """Largest difference of ``a`` from ``b``, over ``b``'s largest magnitude."""
    a, b = a.float(), b.float()
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


def _ours(op: str, x, r, w, plan):
    if op == "softmax":
        return lambda: kp.softmax(x, plan=plan)
    if op == "rms_norm":
        return lambda: kp.rms_norm(x, w, plan=plan)
    return lambda: kp.residual_rms_norm(x, r, w, plan=plan)


def _liger(op: str, x, r, w):
    if op == "softmax":
        from liger_kernel.ops.softmax import LigerSoftmaxFunction

        return lambda: LigerSoftmaxFunction.apply(x)
    if op == "rms_norm":
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction

        return lambda: LigerRMSNormFunction.apply(x, w, EPS, 0.0, "llama", False)
    from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction

    return lambda: LigerFusedAddRMSNormFunction.apply(x, r, w, EPS, 0.0, "llama", False)


def _medians(calls: dict, graph: bool, flush) -> dict:
    names = list(calls)
    timed = {n: timing.capture_graph(c, GRAPH_CALLS) for n, c in calls.items()} if graph else calls
    times = {name: [] for name in names}
    lead = 0.0 if graph else max(timing.lead_for(c) for c in calls.values())
    for visit in range(VISITS):
        for name in names if visit % 2 == 0 else names[::-1]:
            if graph:
                times[name] += timing.time_graph(timed[name], SAMPLES, GRAPH_CALLS)
            else:
                times[name] += timing.time_events(calls[name], SAMPLES, flush=flush, lead_ms=lead)
    return {name: statistics.median(t) for name, t in times.items()}


def main() -> None:
    if not torch.cuda.is_available():
        raise SystemExit("rows_warps_ab: needs a CUDA device")
    torch.manual_seed(0)
    props = torch.cuda.get_device_properties(0)
    sms = props.multi_processor_count
    flush = timing.L2Flusher(getattr(props, "L2_cache_size", None))
    timing.busy(500)
    print(f"{props.name}; {sms} SMs; torch {torch.__version__}; bfloat16 forwards\n")
    print(f"{'op':<9} {'rows x cols':>12} {'timer':>6}  us of each setting (warps), ours/liger")
    wins: dict[tuple[str, int], dict[str, int]] = {}
    for op in OPS:
        for n in WIDTHS:
            for m in ROWS:
                x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
                r = torch.randn_like(x)
                w = torch.randn(n, device="cuda", dtype=torch.bfloat16)
                shipped = plans.choose(m, n, elem_bytes=2, sm_count=sms)
                if shipped.kind != "block":
                    continue
                up = plans.warps_for(n, 2, up=True)
                settings = {f"w{shipped.num_warps}": shipped}
                for warps in (up, 2 * up):
                    if warps <= 16 and f"w{warps}" not in settings:
                        settings[f"w{warps}"] = dataclasses.replace(shipped, num_warps=warps)
                calls = {name: _ours(op, x, r, w, p) for name, p in settings.items()}
                outs = [c() for c in calls.values()]
                outs = [o if isinstance(o, tuple) else (o,) for o in outs]
                for other in outs[1:]:
                    diff = max(_rel_diff(a, b) for a, b in zip(other, outs[0], strict=True))
                    if diff > MAX_REL_DIFF:
                        raise SystemExit(f"{op} {m}x{n}: the settings differ by {diff:.1e}")
                calls["liger"] = _liger(op, x, r, w)
                graph = m * n * 2 <= suites.GRAPH_MAX_BYTES
                med = _medians(calls, graph, flush)
                best = min((k for k in med if k != "liger"), key=med.get)
                cells = "  ".join(f"{k} {v * 1e3:6.2f}" for k, v in med.items())
                shipped_name = f"w{shipped.num_warps}"
                ratio, best_ratio = med["liger"] / med[shipped_name], med["liger"] / med[best]
                timer = "graph" if graph else "events"
                print(f"{op:<9} {f'{m}x{n}':>12} {timer:>6}  {cells}  shipped/liger {ratio:.3f}"
                      f"  best {best} {best_ratio:.3f}")  # fmt: skip
                step = "shipped" if best == shipped_name else "up" if best == f"w{up}" else "2up"
                tally = wins.setdefault((op, m), {"shipped": 0, "up": 0, "2up": 0})
                tally[step] += 1
    print("\nwidths each setting ran fastest at, per op and row count (shipped, up, twice up):")
    for (op, m), tally in wins.items():
        print(f"  {op:<9} {m:>5}: {tally['shipped']} {tally['up']} {tally['2up']}")


if __name__ == "__main__":
    main()
