"""Probe: the cooperative softmax forward with tagged partials instead of a counter wait.

A diagnostic kept with its output (not project code). The shipped cooperative
split forward (``softmax._fwd_split_coop_kernel``, v28) writes its chunk's
``(max, sum)``, counts itself in on its row's counter (a release), spins on
that counter (acquires) and then reads the row's partials: after the last
program's stats, three dependent trips to the L2 (its count, the others'
next poll of the counter, their reads of the partials).

Here each partial carries its own tag. A program draws a ticket from the same
kind of counter at its start (relaxed, while its chunk loads), so it knows
its launch's generation ``g`` (``ticket // programs + 1``) without waiting.
It stores its max and its sum each as one 8-byte word: the float's bits in
the low half, ``(g mod 2^23) * 256 + programs`` in the high half. The others
poll the row's words until every one carries their tag, and have the data
in hand when they do: one trip after the last program's stores. A word is
written whole, so no fence orders anything; the buffers (zeroed once, kept
across launches like the counters) never hold a word of the same tag from an
earlier launch, since every launch of that program count on that row
overwrites the row's words and bumps ``g``.

Timed as the suite times small shapes: 20 calls captured in a graph,
replayed, warm L2, interleaved: the shipped plan (one launch), the tagged
kernel on the same plan, the two launches, and ``torch.softmax``; outputs
NaN-poisoned first and compared with float64 after every replay.
"""

from __future__ import annotations

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


@triton.jit
def _low_float(words):
    """The float32 in the low half of each int64 word."""
    return words.to(tl.int32).to(tl.float32, bitcast=True)


@triton.jit(do_not_specialize=["n_cols", "stride_xm", "stride_ym", "n_sms"])
def _tagged_kernel(
    x_ptr, y_ptr, max_ptr, sum_ptr, count_ptr, n_cols, stride_xm, stride_xn, stride_ym, n_sms,
    BLOCK: tl.constexpr, VEC: tl.constexpr, SLOTS: tl.constexpr,
):  # fmt: skip
    n_cols = n_cols // VEC * VEC
    stride_xm = stride_xm // VEC * VEC
    stride_ym = stride_ym // VEC * VEC
    row = tl.program_id(0).to(tl.int64)
    k = tl.program_id(1)
    n_splits = tl.num_programs(1)
    ticket = tl.atomic_add(count_ptr + row * n_sms + (n_splits - 1), 1, sem="relaxed", scope="gpu")
    cols = k * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(
        x_ptr + row * stride_xm + cols.to(tl.int64) * stride_xn, mask=mask, other=float("-inf")
    )
    x = x.to(tl.float32)
    m_k = tl.max(x, 0)
    e = tl.exp(x - _shift_for(m_k))
    s_k = tl.sum(e, 0)
    generation = (ticket // n_splits + 1) % 8388608
    tag = (generation * 256 + n_splits).to(tl.int64)
    high = tag << 32
    m_bits = m_k.to(tl.int32, bitcast=True).to(tl.int64) & 0xFFFFFFFF
    s_bits = s_k.to(tl.int32, bitcast=True).to(tl.int64) & 0xFFFFFFFF
    base = row * n_sms
    tl.store(max_ptr + base + k, high | m_bits)
    tl.store(sum_ptr + base + k, high | s_bits)
    slots = tl.arange(0, SLOTS)
    in_row = slots < n_splits
    m_words = tl.load(max_ptr + base + slots, mask=in_row, other=high, volatile=True)
    s_words = tl.load(sum_ptr + base + slots, mask=in_row, other=high, volatile=True)
    ready = ((m_words >> 32) == tag) & ((s_words >> 32) == tag)
    while tl.min(ready.to(tl.int32), 0) == 0:
        m_words = tl.load(max_ptr + base + slots, mask=in_row, other=high, volatile=True)
        s_words = tl.load(sum_ptr + base + slots, mask=in_row, other=high, volatile=True)
        ready = ((m_words >> 32) == tag) & ((s_words >> 32) == tag)
    part_max = tl.where(in_row, _low_float(m_words), float("-inf"))
    part_sum = tl.where(in_row, _low_float(s_words), 0.0)
    m = tl.max(part_max, 0)
    shift = _shift_for(m)
    scale = tl.exp(m_k - shift) / tl.sum(part_sum * tl.exp(part_max - shift), 0)
    tl.store(y_ptr + row * stride_ym + cols, (e * scale).to(y_ptr.dtype.element_ty), mask=mask)


def _tagged(x: torch.Tensor, y: torch.Tensor, plan: plans.RowPlan):
    n_rows, n_cols = x.shape
    sms = plans.sm_count(x.device)
    _, n_splits = plans.split_segments(n_cols, plan)
    words = torch.zeros(2, sms * sms, device=x.device, dtype=torch.int64)
    counters = torch.zeros(sms * sms, device=x.device, dtype=torch.int64)
    vec = plans.vec_width(x.element_size(), n_cols, (x.stride(0), n_cols))
    slots = triton.next_power_of_2(n_splits)

    def call():
        _tagged_kernel[(n_rows, n_splits)](
            x, y, words[0], words[1], counters, n_cols, x.stride(0), x.stride(1), n_cols, sms,
            BLOCK=plan.block, VEC=vec, SLOTS=slots, num_warps=plan.num_warps,
        )  # fmt: skip

    return call


CASES = ((4, 32769), (1, 65536), (2, 131072), (6, 20000), (7, 32768))


def main() -> None:
    setup("coop_tagged_probe")
    for dtype in (torch.float16, torch.bfloat16):
        for m, n in CASES:
            x = torch.randn(m, n, device="cuda", dtype=dtype)
            ref = torch.softmax(x.double(), -1)
            plan = plans.choose_for(x)
            with patch.object(plan_rule, "COOP_CHUNK", 0):
                two = plans.choose(
                    m, n, elem_bytes=x.element_size(), sm_count=plans.sm_count(x.device)
                )
            outs = {name: torch.full_like(x, float("nan")) for name in ("shipped", "tagged", "two")}
            calls = {
                "shipped": lambda x=x, y=outs["shipped"], p=plan: softmax._launch_forward(x, y, p),
                "tagged": _tagged(x, outs["tagged"], plan),
                "two": lambda x=x, y=outs["two"], p=two: softmax._launch_forward(x, y, p),
                "torch": lambda x=x: torch.softmax(x, -1),
            }
            for _ in range(3):  # several launches on the counters before timing
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
