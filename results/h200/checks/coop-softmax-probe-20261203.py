"""Probe: a softmax forward whose wide rows are held on chip by several programs.

A diagnostic kept with its output (not project code). The looped plan reads a
row twice, and at 1024x131072 the second read comes from DRAM (NOTES, v16):
three row transfers where two are compulsory. Here a row is split into ``S``
slices of ``SLICE`` columns; each program keeps its slice in registers, writes
its ``(max, sum)``, counts itself in on the row's counter and spins until all
``S`` have, then reads the row's partials and writes its slice: the row is read
once. The grid is persistent and never larger than the programs the SMs hold
at once (from the compiled kernel's registers and shared memory), rounded down
to whole rows, so the programs of a row run together. Timed against the
shipped ``softmax`` (its ``auto`` plan), interleaved, cold L2, as the A/B
scripts time; the counters are zeroed inside the timed call.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from ab_support import interleaved_medians, setup

from kernel_portfolio import plans
from kernel_portfolio.bench import timing
from kernel_portfolio.ops import softmax


@triton.jit
def _coop_kernel(
    x_ptr, y_ptr, part_ptr, count_ptr, n_rows, n_cols, S: tl.constexpr, SLICE: tl.constexpr
):
    pid = tl.program_id(0)
    wave = tl.num_programs(0) // S
    s = pid % S
    cols = s * SLICE + tl.arange(0, SLICE)
    mask = cols < n_cols
    for row in range(pid // S, n_rows, wave):
        row64 = row.to(tl.int64)
        x = tl.load(x_ptr + row64 * n_cols + cols, mask=mask, other=-float("inf")).to(tl.float32)
        m = tl.max(x, 0)
        e = tl.exp2((x - m) * 1.4426950408889634)
        part = part_ptr + (row64 * S + s) * 2
        tl.store(part, m)
        tl.store(part + 1, tl.sum(e, 0))
        tl.debug_barrier()
        tl.atomic_add(count_ptr + row, 1, sem="release", scope="gpu")
        seen = tl.atomic_cas(count_ptr + row, S, S, sem="acquire", scope="gpu")
        while seen < S:
            seen = tl.atomic_cas(count_ptr + row, S, S, sem="acquire", scope="gpu")
        tl.debug_barrier()
        k = tl.arange(0, S)
        pm = tl.load(part_ptr + (row64 * S + k) * 2, cache_modifier=".cg")
        pl = tl.load(part_ptr + (row64 * S + k) * 2 + 1, cache_modifier=".cg")
        big = tl.max(pm, 0)
        total = tl.sum(pl * tl.exp2((pm - big) * 1.4426950408889634), 0)
        scale = tl.exp2((m - big) * 1.4426950408889634) / total
        tl.store(y_ptr + row64 * n_cols + cols, (e * scale).to(y_ptr.dtype.element_ty), mask=mask)


def _resident(kernel, warps: int, sms: int) -> int:
    """Programs the SMs hold at once, from the compiled kernel's resources."""
    regs_per_warp = -(-kernel.n_regs * 32 // 256) * 256
    by_regs = 65536 // (regs_per_warp * warps)
    by_smem = (227 * 1024) // max(kernel.metadata.shared, 1)
    return sms * min(by_regs, by_smem, 64 // warps, 32)


def _coop(x: torch.Tensor, y: torch.Tensor, slice_cols: int, warps: int, sms: int):
    m, n = x.shape
    s = plans.cdiv(n, slice_cols)
    part = torch.empty(m * s * 2, device=x.device, dtype=torch.float32)
    count = torch.zeros(m, device=x.device, dtype=torch.int32)
    kernel = _coop_kernel[(s,)](x, y, part, count, m, n, S=s, SLICE=slice_cols, num_warps=warps)
    grid = _resident(kernel, warps, sms) // s * s
    info = f"S={s} regs={kernel.n_regs} spills={kernel.n_spills} grid={grid}"

    def call():
        count = torch.zeros(m, device=x.device, dtype=torch.int32)
        _coop_kernel[(grid,)](x, y, part, count, m, n, S=s, SLICE=slice_cols, num_warps=warps)

    return call, info


CASES = (
    (1024, 131072, torch.float16),
    (1024, 131072, torch.bfloat16),
    (2048, 65536, torch.float16),
    (256, 262144, torch.float16),
    (4096, 32768, torch.float16),
)
SETTINGS = ((8192, 8), (16384, 16), (16384, 32), (32768, 32))


def main() -> None:
    flush, copy_gbps = setup("coop_softmax_probe")
    sms = plans.sm_count(torch.device("cuda"))
    for m, n, dtype in CASES:
        x = torch.randn(m, n, device="cuda", dtype=dtype)
        ref = torch.softmax(x.double(), -1)
        y0 = torch.full_like(x, float("nan"))
        plan = plans.choose_for(x)
        calls = {"shipped": lambda x=x, y0=y0, plan=plan: softmax._launch_forward(x, y0, plan)}
        outs = {"shipped": y0}
        infos = {"shipped": f"{plan.kind}-{plan.block}-w{plan.num_warps}"}
        for slice_cols, warps in SETTINGS:
            if slice_cols * 2 > n:
                continue
            y = torch.full_like(x, float("nan"))
            call, info = _coop(x, y, slice_cols, warps, sms)
            name = f"coop-{slice_cols}-w{warps}"
            calls[name], outs[name], infos[name] = call, y, info
        for call in calls.values():
            call()
        torch.cuda.synchronize()
        lead = timing.lead_for(calls["shipped"])
        med = interleaved_medians(calls, flush, lead)
        nbytes = 2 * x.numel() * x.element_size()
        print(f"\nsoftmax fwd {m}x{n} {str(dtype)[6:]}")
        for name in calls:
            err = (outs[name].double() - ref).abs().max().item()
            pct = 100 * nbytes / med[name] / 1e6 / copy_gbps
            change = 100 * (med[name] / med["shipped"] - 1)
            print(
                f"  {name:<16} {infos[name]:<40} {med[name] * 1e3:9.1f} us {pct:6.1f}% copy"
                f" {change:+7.2f}%  max err {err:.2e}"
            )
        del ref, outs, calls
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
