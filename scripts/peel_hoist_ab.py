"""A/B of loading a peeled row's head and tail before its first pass (``HOIST_PEEL``).

About a minute in one process; prints a table and writes nothing else::

    python scripts/peel_hoist_ab.py > results/<gpu>/checks/peel-hoist-ab-<UTC stamp>.log

A looped plan walks a row twice. Without the hoist, a peeled row (its
stride not a multiple of 16 bytes: :mod:`kernel_portfolio.ops.peel`) loads
its head and tail after the first pass, so the program waits one memory
latency with no other load in flight, and the forward reloads them (softmax)
or loads their weight (RMSNorm) after the second pass, before their store.
With it, those loads are issued before the first pass and the head and tail
are written before the second: Nsight Compute put the RMSNorm forward at
4096x50257 at 74% of DRAM throughput against 83% at 50256, with the same
bytes.

This times, at vocabulary widths of open models and at ``N`` of the form
``2^k + 1`` (:data:`WIDTHS`), at :data:`ROWS` rows, the RMSNorm and residual
RMSNorm forwards (bfloat16) and the softmax forward and backward (float16),
each without the hoist, with it, and at the aligned neighbour width (``N``
rounded down to a multiple of 8, with the hoist: the same code unpeeled), on
fresh random inputs, visited in alternating order (six visits of twenty
samples), each call with a cold L2 behind a device spin. Both peeled outputs,
poisoned with NaN first, must agree bit for bit and match a float64
reference. Per case it prints the three medians, the time without the hoist
over the time with it, and each peeled run's bandwidth as a share of the
neighbour's (the issue's bar: 0.90); last, per operator, the geometric mean
of the gain. A diagnostic for the source's constant: the site quotes the
benchmark results, never this.
"""

from __future__ import annotations

import math
from collections import defaultdict

import torch
from copy_floor import interleaved_medians, setup

from kernel_portfolio import plans
from kernel_portfolio.bench import timing
from kernel_portfolio.contracts import direct_launches
from kernel_portfolio.ops import rms_norm as rms_mod
from kernel_portfolio.ops import softmax as softmax_mod

#: BERT, GPT-2, Whisper and Qwen2 vocabularies, and one past 2^15 and 2^16.
WIDTHS = (30522, 32769, 50257, 51865, 65537, 151937)
ROWS = (1024, 4096)
EPS = 1e-6
#: Largest difference from the float64 reference, relative to its largest magnitude.
MAX_REL_DIFF = 2e-2
OPS = ("rms_norm fwd", "residual fwd", "softmax fwd", "softmax bwd")
_DTYPES = {op: torch.float16 if op.startswith("softmax") else torch.bfloat16 for op in OPS}


def _set_hoist(on: bool) -> None:
    rms_mod.HOIST_PEEL = softmax_mod.HOIST_PEEL = on


def _case(op: str, n_rows: int, n_cols: int):
    """``(run, want)``: ``run(out)`` writes the op's result into ``out``; ``want`` in float64."""
    dtype = _DTYPES[op]
    x = torch.randn(n_rows, n_cols, device="cuda", dtype=dtype)
    plan = plans.choose_for(x)
    if op == "softmax fwd":
        return (lambda out: softmax_mod._launch_forward(x, out, plan)), x.double().softmax(-1)
    if op == "softmax bwd":
        y = x.float().softmax(-1).to(dtype)
        dy = torch.randn_like(y)
        want = y.double() * (dy.double() - (y.double() * dy.double()).sum(-1, keepdim=True))
        return (lambda out: softmax_mod._launch_backward(y, dy, out, plan)), want
    w = torch.randn(n_cols, device="cuda", dtype=dtype)
    r = torch.randn_like(x) if op == "residual fwd" else None
    h_out = torch.empty_like(x) if r is not None else None

    def run(out):
        rms_mod._forward(x, r, w, EPS, plan, out, h_out, None)

    h = (x.float() + r.float()).to(dtype).double() if r is not None else x.double()
    return run, h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS) * w.double()


def _checked(op: str, n_rows: int, n_cols: int) -> dict:
    """The calls to time at ``n_cols`` (without and with the hoist), outputs checked."""
    run, want = _case(op, n_rows, n_cols)
    outs = {}
    for hoist in (False, True):
        out = torch.full(want.shape, float("nan"), device="cuda", dtype=_DTYPES[op])
        _set_hoist(hoist)
        run(out)
        outs[hoist] = out
    if not torch.equal(outs[False], outs[True]):
        raise SystemExit(f"{op} {n_rows}x{n_cols}: the hoist changed the output")
    diff = ((outs[True].double() - want).abs().max() / want.abs().max()).item()
    if not diff <= MAX_REL_DIFF:
        raise SystemExit(f"{op} {n_rows}x{n_cols}: off the float64 reference by {diff:.1e}")
    buf = outs[True]

    def call(hoist: bool):
        def go():
            _set_hoist(hoist)
            run(buf)

        return go

    return {"without": call(False), "with": call(True)}


def main() -> None:
    flush, _ = setup()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"{'op':<13} {'rows x N':>12} {'plan':>13}  us: without, with, aligned neighbour; "
          "without over with; bandwidth share of the neighbour's without, with")  # fmt: skip
    gains = defaultdict(list)
    for op in OPS:
        for n_rows in ROWS:
            for n_cols in WIDTHS:
                aligned = n_cols // 8 * 8
                calls = _checked(op, n_rows, n_cols)
                calls["aligned"] = _checked(op, n_rows, aligned)["with"]
                lead = max(timing.lead_for(call) for call in calls.values())
                med = interleaved_medians(calls, flush, lead)
                plan = plans.choose(n_rows, n_cols, elem_bytes=2, sm_count=sms)
                # Columns a second, as a share of the neighbour's: the same bytes a column.
                share = {
                    k: n_cols * med["aligned"] / (aligned * med[k]) for k in ("without", "with")
                }
                print(f"{op:<13} {f'{n_rows}x{n_cols}':>12} {f'{plan.kind} {plan.block}':>13}  "
                      f"{med['without'] * 1e3:8.1f} {med['with'] * 1e3:8.1f} "
                      f"{med['aligned'] * 1e3:8.1f}   {med['without'] / med['with']:.3f}   "
                      f"{share['without']:.3f} {share['with']:.3f}")  # fmt: skip
                gains[op].append(med["without"] / med["with"])
    print("\nper operator: geometric mean of the time without the hoist over the time with it")
    for op, got in gains.items():
        mean = math.exp(sum(map(math.log, got)) / len(got))
        print(
            f"  {op}: {mean:.3f} over {len(got)} shapes, faster with at {sum(g > 1 for g in got)}"
        )


if __name__ == "__main__":
    with direct_launches():
        main()
