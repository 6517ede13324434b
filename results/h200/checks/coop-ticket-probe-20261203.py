"""Probe: the cooperative softmax forward with a ticket wait instead of a counter reset.

A diagnostic kept with its output (not project code). The shipped cooperative
split forward (``softmax._fwd_split_coop_kernel``) counts its programs in on a
row's arrivals counter and out on a departures counter, and the last one out
zeroes both: a returning atomic more for every program, and two more for the
last, after the wait. The few-rows probe of the same day
(``coop-few-rows-probe-20261203.py``) let its counter grow instead. Here the
shipped kernel's body waits on a ticket: each program adds 1 to an int64
counter of its own (row, programs a row) pair and waits for the next multiple
of the program count above the value it drew. Every launch on that counter
adds exactly that many, so the count is a multiple of it between launches
(of one stream), nothing is ever zeroed, and no int64 count wraps.

Timed as the suite times small shapes: 20 calls captured in a graph,
replayed, warm L2, interleaved: the shipped plan (one launch), the ticket
kernel on the same plan, the few-rows probe's kernel at the same chunk and
warps, the two launches, and ``torch.softmax``; outputs NaN-poisoned first
and compared with float64.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from unittest.mock import patch

import torch
import triton
import triton.language as tl
from ab_support import interleaved_medians, setup

from kernel_portfolio import plan_rule, plans
from kernel_portfolio.bench import timing
from kernel_portfolio.ops import softmax
from kernel_portfolio.ops.softmax import _shift_for

CALLS = 20
_spec = importlib.util.spec_from_file_location(
    "few_rows_probe", Path(__file__).with_name("coop-few-rows-probe-20261203.py")
)
few_rows_probe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(few_rows_probe)


@triton.jit(do_not_specialize=["n_cols", "stride_xm", "stride_ym", "n_sms"])
def _ticket_kernel(
    x_ptr, y_ptr, max_ptr, sum_ptr, count_ptr, n_cols, stride_xm, stride_xn, stride_ym, n_sms,
    BLOCK: tl.constexpr, VEC: tl.constexpr, MAX_SPLITS: tl.constexpr,
):  # fmt: skip
    n_cols = n_cols // VEC * VEC
    stride_xm = stride_xm // VEC * VEC
    stride_ym = stride_ym // VEC * VEC
    row = tl.program_id(0).to(tl.int64)
    k = tl.program_id(1)
    n_splits = tl.num_programs(1)
    cols = k * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(
        x_ptr + row * stride_xm + cols.to(tl.int64) * stride_xn, mask=mask, other=float("-inf")
    )
    x = x.to(tl.float32)
    m_k = tl.max(x, 0)
    e = tl.exp(x - _shift_for(m_k))
    tl.store(max_ptr + row * n_splits + k, m_k)
    tl.store(sum_ptr + row * n_splits + k, tl.sum(e, 0))
    counter = count_ptr + row * n_sms + (n_splits - 1)
    tl.debug_barrier()
    ticket = tl.atomic_add(counter, 1, sem="release", scope="gpu")
    goal = ticket - ticket % n_splits + n_splits
    seen = tl.atomic_add(counter, 0, sem="acquire", scope="gpu")
    while seen < goal:
        seen = tl.atomic_add(counter, 0, sem="acquire", scope="gpu")
    tl.debug_barrier()
    slots = tl.arange(0, MAX_SPLITS)
    in_row = slots < n_splits
    part_max = tl.load(
        max_ptr + row * n_splits + slots, mask=in_row, other=float("-inf"), cache_modifier=".cg"
    )
    part_sum = tl.load(
        sum_ptr + row * n_splits + slots, mask=in_row, other=0.0, cache_modifier=".cg"
    )
    m = tl.max(part_max, 0)
    scale = tl.exp(m_k - m) / tl.sum(part_sum * tl.exp(part_max - m), 0)
    tl.store(y_ptr + row * stride_ym + cols, (e * scale).to(y_ptr.dtype.element_ty), mask=mask)


def _ticket(x: torch.Tensor, y: torch.Tensor, plan: plans.RowPlan):
    n_rows, n_cols = x.shape
    sms = plans.sm_count(x.device)
    _, n_splits = plans.split_segments(n_cols, plan)
    part_max = torch.empty(n_rows, n_splits, device=x.device, dtype=torch.float32)
    part_sum = torch.empty_like(part_max)
    counters = torch.zeros(sms * sms, device=x.device, dtype=torch.int64)
    vec = plans.vec_width(x.element_size(), n_cols, (x.stride(0), n_cols))

    def call():
        _ticket_kernel[(n_rows, n_splits)](
            x, y, part_max, part_sum, counters, n_cols, x.stride(0), x.stride(1), n_cols, sms,
            BLOCK=plan.block, VEC=vec, MAX_SPLITS=plans.MAX_SPLITS, num_warps=plan.num_warps,
        )  # fmt: skip

    return call


CASES = ((4, 32769), (1, 65536), (2, 131072), (6, 20000), (7, 32768))


def main() -> None:
    setup("coop_ticket_probe")
    for dtype in (torch.float16, torch.bfloat16):
        for m, n in CASES:
            x = torch.randn(m, n, device="cuda", dtype=dtype)
            ref = torch.softmax(x.double(), -1)
            plan = plans.choose_for(x)
            with patch.object(plan_rule, "COOP_CHUNK", 0):
                two = plans.choose(
                    m, n, elem_bytes=x.element_size(), sm_count=plans.sm_count(x.device)
                )
            outs = {name: torch.full_like(x, float("nan")) for name in ("shipped", "ticket", "two")}
            probe_y = torch.full_like(x, float("nan"))
            probe_call, _ = few_rows_probe._coop(x, probe_y, plan.block, plan.num_warps)
            calls = {
                "shipped": lambda x=x, y=outs["shipped"], p=plan: softmax._launch_forward(x, y, p),
                "ticket": _ticket(x, outs["ticket"], plan),
                "probe": probe_call,
                "two": lambda x=x, y=outs["two"], p=two: softmax._launch_forward(x, y, p),
                "torch": lambda x=x: torch.softmax(x, -1),
            }
            outs["probe"], outs["torch"] = probe_y, None
            for _ in range(3):  # the ticket counters pass several launches before timing
                for call in calls.values():
                    call()
            torch.cuda.synchronize()
            outs["torch"] = torch.softmax(x, -1)
            errs = {k: (v.double() - ref).abs().max().item() for k, v in outs.items()}
            graphs = {name: timing.capture_graph(call, CALLS) for name, call in calls.items()}
            med = interleaved_medians({k: g.replay for k, g in graphs.items()}, None, 0.0)
            for k, v in outs.items():  # after every replay, still right
                errs[k] = max(errs[k], (v.double() - ref).abs().max().item())
            print(
                f"\nsoftmax fwd {m}x{n} {str(dtype)[6:]} {plan} (graph of {CALLS} calls, warm L2)"
            )
            for name in calls:
                us = med[name] / CALLS * 1e3
                print(
                    f"  {name:<8} {us:7.2f} us a call  torch/this {med['torch'] / med[name]:5.2f}x"
                    f"  vs shipped {100 * (med[name] / med['shipped'] - 1):+7.2f}%"
                    f"  max err {errs[name]:.2e}"
                )


if __name__ == "__main__":
    main()
