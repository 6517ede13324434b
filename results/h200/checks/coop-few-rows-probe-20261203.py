"""Probe: one launch for the softmax forward of few wide rows, its programs waiting for each other.

A diagnostic kept with its output (not project code). The split plan takes a
few wide rows (4x32769: the few-wide-rows target, 3x the best baseline under
CUDA-graph replay) in two launches, one for each slice's ``(max, sum)`` and
one that rereads the slice and writes it. Here one launch does both: a
program per slice of ``SLICE`` columns keeps its slice in registers, writes
its partials, counts itself in on its row's counter and spins until the
row's ``S`` programs have, then reads the row's partials and writes its slice.
The counter only grows: a launch's programs wait for the next multiple of
``S`` above the count they found (launches on one stream do not overlap), so
nothing is zeroed between calls and the call captures in a CUDA graph. Every
program of the grid (rows x slices) is resident at once at these shapes.
Slices past the row's end (the slice count is a power of two) give the
partials ``(-inf, 0)``; the run of 11:16Z lacked that guard, so where such a
slice exists its outputs were NaN (its times stand: the same work).
Timed as the suite times small shapes: 20 calls captured in a graph,
replayed, warm L2, the implementations interleaved; outputs NaN-poisoned
first and compared with float64.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from ab_support import interleaved_medians, setup

from kernel_portfolio import plans
from kernel_portfolio.bench import timing
from kernel_portfolio.ops import softmax

CALLS = 20
LOG2E = tl.constexpr(1.4426950408889634)


@triton.jit
def _coop_kernel(x_ptr, y_ptr, part_ptr, count_ptr, n_cols, S: tl.constexpr, SLICE: tl.constexpr):
    pid = tl.program_id(0)
    row = pid // S
    s = pid % S
    row64 = row.to(tl.int64)
    cols = s * SLICE + tl.arange(0, SLICE)
    mask = cols < n_cols
    x = tl.load(x_ptr + row64 * n_cols + cols, mask=mask, other=-float("inf")).to(tl.float32)
    m = tl.max(x, 0)
    e = tl.exp2((x - tl.where(m == -float("inf"), 0.0, m)) * LOG2E)  # a slice past the row: 0
    part = part_ptr + (row64 * S + s) * 2
    tl.store(part, m)
    tl.store(part + 1, tl.sum(e, 0))
    tl.debug_barrier()
    old = tl.atomic_add(count_ptr + row, 1, sem="release", scope="gpu")
    target = (old // S + 1) * S
    seen = tl.atomic_add(count_ptr + row, 0, sem="acquire", scope="gpu")
    while seen < target:
        seen = tl.atomic_add(count_ptr + row, 0, sem="acquire", scope="gpu")
    tl.debug_barrier()
    k = tl.arange(0, S)
    pm = tl.load(part_ptr + (row64 * S + k) * 2, cache_modifier=".cg")
    pl = tl.load(part_ptr + (row64 * S + k) * 2 + 1, cache_modifier=".cg")
    big = tl.max(pm, 0)
    total = tl.sum(pl * tl.exp2((pm - big) * LOG2E), 0)
    scale = tl.exp2((m - big) * LOG2E) / total
    tl.store(y_ptr + row64 * n_cols + cols, (e * scale).to(y_ptr.dtype.element_ty), mask=mask)


def _coop(x: torch.Tensor, y: torch.Tensor, slice_cols: int, warps: int):
    m, n = x.shape
    s = triton.next_power_of_2(plans.cdiv(n, slice_cols))  # tl.arange over the partials
    part = torch.empty(m * s * 2, device=x.device, dtype=torch.float32)
    count = torch.zeros(m, device=x.device, dtype=torch.int32)

    def call():
        _coop_kernel[(m * s,)](x, y, part, count, n, S=s, SLICE=slice_cols, num_warps=warps)

    return call, f"S={s} grid={m * s}"


CASES = (
    (4, 32769, torch.float16),
    (4, 32769, torch.bfloat16),
    (16, 32769, torch.float16),
    (1, 65536, torch.float16),
    (66, 20000, torch.float16),
)
SETTINGS = ((2048, 4), (4096, 4), (4096, 8), (8192, 8), (8192, 16))


def main() -> None:
    setup("coop_few_rows_probe")
    for m, n, dtype in CASES:
        x = torch.randn(m, n, device="cuda", dtype=dtype)
        ref = torch.softmax(x.double(), -1)
        y0 = torch.full_like(x, float("nan"))
        plan = plans.choose_for(x)
        calls = {
            "shipped": lambda x=x, y0=y0, plan=plan: softmax._launch_forward(x, y0, plan),
            "torch": lambda x=x: torch.softmax(x, -1),
        }
        outs = {"shipped": y0, "torch": torch.softmax(x, -1)}
        infos = {"shipped": f"{plan.kind}-{plan.block}-w{plan.num_warps}", "torch": ""}
        for slice_cols, warps in SETTINGS:
            if slice_cols * 2 > triton.next_power_of_2(n):
                continue
            y = torch.full_like(x, float("nan"))
            call, info = _coop(x, y, slice_cols, warps)
            name = f"coop-{slice_cols}-w{warps}"
            calls[name], outs[name], infos[name] = call, y, info
        for call in calls.values():
            call()
        torch.cuda.synchronize()
        errs = {name: (outs[name].double() - ref).abs().max().item() for name in calls}
        graphs = {name: timing.capture_graph(call, CALLS) for name, call in calls.items()}
        med = interleaved_medians({k: g.replay for k, g in graphs.items()}, None, 0.0)
        print(f"\nsoftmax fwd {m}x{n} {str(dtype)[6:]} (graph of {CALLS} calls, warm L2)")
        for name in calls:
            us = med[name] / CALLS * 1e3
            print(
                f"  {name:<16} {infos[name]:<22} {us:7.2f} us a call"
                f"  torch/this {med['torch'] / med[name]:5.2f}x"
                f"  vs shipped {100 * (med[name] / med['shipped'] - 1):+7.2f}%"
                f"  max err {errs[name]:.2e}"
            )


if __name__ == "__main__":
    main()
