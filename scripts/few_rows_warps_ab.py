"""A/B of the block plan's warps for few rows (no more rows than SMs) on a GPU.

About a minute in one process; prints a table and writes nothing else::

    python scripts/few_rows_warps_ab.py > results/h200/checks/few-rows-warps-ab-<UTC stamp>.log

``plans.warps_for`` gives a block plan about two 16-byte vectors a thread of
the row, rounded down to a power of two: at 3584 columns 4 warps in a block of
4096, where 4096 columns get 8. With many rows that keeps more rows resident
an SM; with no more rows than SMs each row has an SM to itself, and the warps
are all the loads it has in flight. This times the softmax, RMSNorm and
residual RMSNorm forwards (bfloat16) at widths between powers of two and at
the powers themselves, from 1 to 132 rows, with the shipped warps and with
twice as many (at most 16), as the suite times latency-bound cases: CUDA
graphs of 20 calls, warm L2, the two settings replayed in alternating order
(six visits of twenty samples). The two settings' outputs may differ only by
rounding (more warps sum a row in another order). The last lines give, per
width, the share of row counts at which twice the warps ran faster. A
diagnostic for a plan rule: the site quotes the benchmark results, never this.
"""

from __future__ import annotations

import statistics

import torch

import kernel_portfolio as kp
from kernel_portfolio import plans
from kernel_portfolio.bench import timing

VISITS, SAMPLES, GRAPH_CALLS = 6, 20, 20
ROWS = (1, 8, 32, 66, 132)
#: Widths between powers of two (hidden sizes of open models) and powers of two.
WIDTHS = (896, 1536, 2048, 2560, 3584, 4096, 5120, 7168, 8192)
OPS = ("softmax", "rms_norm", "residual")
#: More warps sum a row in another order: the outputs may differ by rounding, no more.
MAX_REL_DIFF = 1e-2


def _rel_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """Largest difference of ``a`` from ``b``, over ``b``'s largest magnitude."""
    a, b = a.float(), b.float()
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


def _call(op: str, x, r, w, plan):
    if op == "softmax":
        return lambda: kp.softmax(x, plan=plan)
    if op == "rms_norm":
        return lambda: kp.rms_norm(x, w, plan=plan)
    return lambda: kp.residual_rms_norm(x, r, w, plan=plan)


def _medians(graphs: dict) -> dict:
    names = list(graphs)
    times = {name: [] for name in names}
    for visit in range(VISITS):
        for name in names if visit % 2 == 0 else names[::-1]:
            times[name] += timing.time_graph(graphs[name], SAMPLES, GRAPH_CALLS)
    return {name: statistics.median(t) for name, t in times.items()}


def main() -> None:
    if not torch.cuda.is_available():
        raise SystemExit("few_rows_warps_ab: needs a CUDA device")
    torch.manual_seed(0)
    props = torch.cuda.get_device_properties(0)
    timing.busy(500)
    print(f"{props.name}; {props.multi_processor_count} SMs; torch {torch.__version__}\n")
    head = f"{'op':<9} {'rows x cols':>12} {'warps':>5} {'us':>8} {'x2 warps us':>12}"
    print(f"{head} {'x2/shipped':>10} {'rel diff':>9}")
    wins = {}
    for op in OPS:
        for n in WIDTHS:
            for m in ROWS:
                x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
                r = torch.randn_like(x)
                w = torch.randn(n, device="cuda", dtype=torch.bfloat16)
                shipped = plans.choose(m, n, elem_bytes=2, sm_count=props.multi_processor_count)
                if shipped.kind != "block" or shipped.num_warps >= 16:
                    continue
                doubled = plans.RowPlan("block", shipped.block, 2 * shipped.num_warps)
                calls = {p: _call(op, x, r, w, p) for p in (shipped, doubled)}
                outs = [call() for call in calls.values()]
                outs = [o if isinstance(o, tuple) else (o,) for o in outs]
                diff = max(_rel_diff(a, b) for a, b in zip(*outs, strict=True))
                if diff > MAX_REL_DIFF:
                    raise SystemExit(f"{op} {m}x{n}: the two settings differ by {diff:.1e}")
                graphs = {p: timing.capture_graph(c, GRAPH_CALLS) for p, c in calls.items()}
                med = _medians(graphs)
                ratio = med[doubled] / med[shipped]
                print(f"{op:<9} {f'{m}x{n}':>12} {shipped.num_warps:>5} {med[shipped] * 1e3:>8.2f}"
                      f" {med[doubled] * 1e3:>12.2f} {ratio:>10.3f} {diff:>9.1e}")  # fmt: skip
                wins.setdefault((op, n), []).append(ratio < 1)
    print("\nrow counts at which twice the warps ran faster, per width:")
    for (op, n), won in wins.items():
        print(f"  {op} {n}: {sum(won)} of {len(won)}")


if __name__ == "__main__":
    main()
