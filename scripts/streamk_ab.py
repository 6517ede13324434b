"""A/B of a stream-K GEMM against the plan and cuBLAS at batches that are no whole number of tiles.

About four minutes in one process on a Hopper GPU; prints a table and writes
nothing else::

    python scripts/streamk_ab.py > results/<gpu>/checks/streamk-ab-<UTC stamp>.log

At 600 rows the tuning sweep left five layer shapes at 0.75-0.85 of cuBLAS
with no timed tile, split or not, above that
(``results/archive/h100-80gb-hbm3/gemm_tune-20261207T220622Z.log``): a
product of a few hundred rows has too few output tiles for the SMs, and a
last row of tiles mostly empty. Split-K divides every tile's ``K`` evenly,
so its waves stay part-empty and every tile writes ``split`` float32
partials. Stream-K gives each of the SMs the same count of ``K`` steps over
the tiles in order: a program finishes one tile's run of ``K`` and starts
the next tile's, only the tiles cut between two programs write partials (at
most two a program), and the last program of a tile to finish adds them in
program order. Tiles of the full waves but one run whole first (the hybrid
of the stream-K paper), so a product of many waves pays partials only on its
last two.

This times, per product (``bfloat16``, ``B`` row-major as in the suite),
cuBLAS (``torch.mm``), the plan (``ops.matmul.matmul``) and the stream-K
kernel below at each of :data:`SK_TILES`, each call with a cold L2 behind a
device spin, visited in alternating order (six visits of twenty samples),
and prints each as a speed over cuBLAS (the median over visits of each
visit's ratio, paired), with the plan's tile and the kernel cuBLAS ran (from
the profiler). Every output must agree with cuBLAS's to rounding.
"""

from __future__ import annotations

import statistics
import sys

import torch
import triton
import triton.language as tl
from copy_floor import SAMPLES, VISITS, setup
from torch.profiler import ProfilerActivity, profile
from triton.tools.tensor_descriptor import TensorDescriptor

from kernel_portfolio.bench import timing
from kernel_portfolio.ops import matmul as mm

#: ``(N, K)`` of the layer shapes the sweep and the suite time: Llama-3-8B's
#: four projections and four of Qwen2.5-14B's and Llama-3.2-1B's.
LAYERS = (
    (4096, 4096),
    (6144, 4096),
    (14336, 4096),
    (4096, 14336),
    (5120, 13824),
    (13824, 5120),
    (7168, 5120),
    (8192, 2048),
)
#: Batches: none a whole number of 128-row tiles, from one part-empty wave to
#: several waves and a part.
ROWS = (176, 336, 520, 600, 800, 2500)
#: ``(BLOCK_M, BLOCK_N, BLOCK_K, warps, stages)`` of the stream-K kernel.
SK_TILES = ((128, 256, 64, 8, 3), (128, 128, 64, 8, 4))
GROUP_M = 8


@triton.jit(do_not_specialize=["M", "N", "K"])
def _streamk_kernel(
    a_desc,
    b_desc,
    c_desc,
    ws_ptr,
    count_ptr,
    M,
    N,
    K,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    NUM_SMS: tl.constexpr,
    STAGES: tl.constexpr,
):
    """``C = A @ B``: whole tiles for all full waves but one, then stream-K over the rest.

    The stream-K tiles' ``K`` steps, tile after tile, are cut into
    ``NUM_SMS`` runs as even as they divide (each at least one step: the
    host launches this only with as many steps as programs). A run that
    covers a whole tile stores it; a part of a tile goes to the workspace,
    slot ``2 p`` for program ``p``'s first tile and ``2 p + 1`` for its
    last, and counts itself in on the tile's counter; the part that counts
    last adds the tile's parts in program order, stores the tile and sets
    the counter back to 0.
    """
    pid = tl.program_id(0)
    out_ty = c_desc.dtype
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_tiles = num_pid_m * num_pid_n
    k_tiles = tl.cdiv(K, BLOCK_K)
    dp_tiles = tl.maximum(num_tiles // NUM_SMS - 1, 0) * NUM_SMS
    for tile in tl.range(pid, dp_tiles, NUM_SMS):
        pid_m, pid_n = mm._tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
        off_m = mm._row_start(pid_m, M, BLOCK_M)
        off_n = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in tl.range(0, k_tiles, num_stages=STAGES):
            a = a_desc.load([off_m, ki * BLOCK_K])
            b = b_desc.load([ki * BLOCK_K, off_n])
            acc = tl.dot(a, b, acc)
        c_desc.store([off_m, off_n], acc.to(out_ty))

    work = (num_tiles - dp_tiles) * k_tiles
    start = pid * work // NUM_SMS
    end = (pid + 1) * work // NUM_SMS
    in_tile = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    step = start
    while step < end:
        local = step // k_tiles
        k_first = step - local * k_tiles
        k_end = tl.minimum(k_tiles, k_first + end - step)
        pid_m, pid_n = mm._tile_coords(dp_tiles + local, num_pid_m, num_pid_n, GROUP_M)
        off_m = mm._row_start(pid_m, M, BLOCK_M)
        off_n = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in tl.range(k_first, k_end, num_stages=STAGES):
            a = a_desc.load([off_m, ki * BLOCK_K])
            b = b_desc.load([ki * BLOCK_K, off_n])
            acc = tl.dot(a, b, acc)
        if k_first == 0 and k_end == k_tiles:
            c_desc.store([off_m, off_n], acc.to(out_ty))
        else:
            # Program p owns step s when p * work // NUM_SMS <= s < (p + 1) * work // NUM_SMS.
            first_owner = ((local * k_tiles + 1) * NUM_SMS - 1) // work
            last_owner = ((local + 1) * k_tiles * NUM_SMS - 1) // work
            slot = 2 * pid + (step != start).to(tl.int32)
            tl.store(ws_ptr + slot * (BLOCK_M * BLOCK_N) + in_tile, acc)
            tl.debug_barrier()  # every thread's stores before the count
            arrived = tl.atomic_add(count_ptr + local, 1, sem="acq_rel", scope="gpu")
            if arrived == last_owner - first_owner:
                total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
                for p in range(first_owner, last_owner + 1):
                    p_first = (p * work // NUM_SMS) // k_tiles
                    p_slot = 2 * p + (p_first != local).to(tl.int32)
                    total += tl.load(
                        ws_ptr + p_slot * (BLOCK_M * BLOCK_N) + in_tile, cache_modifier=".cg"
                    )
                c_desc.store([off_m, off_n], total.to(out_ty))
                tl.atomic_xchg(count_ptr + local, 0, sem="relaxed", scope="gpu")
        step += k_end - k_first


def streamk(a: torch.Tensor, b: torch.Tensor, tile, num_sms: int):
    """A call of the stream-K kernel for row-major ``a`` and ``b``, and its output."""
    (M, K), N = a.shape, b.shape[1]
    bm, bn, bk, warps, stages = tile
    tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn)
    dp = max(tiles // num_sms - 1, 0) * num_sms
    if (tiles - dp) * triton.cdiv(K, bk) < num_sms:
        raise ValueError(f"{M}x{N}x{K}: fewer stream-K steps than programs")
    out = torch.empty(M, N, device=a.device, dtype=a.dtype)
    a_desc = TensorDescriptor(a, list(a.shape), [K, 1], [bm, bk])
    b_desc = TensorDescriptor(b, list(b.shape), [N, 1], [bk, bn])
    c_desc = TensorDescriptor(out, list(out.shape), [N, 1], [bm, bn])
    ws = torch.empty(2 * num_sms, bm, bn, device=a.device, dtype=torch.float32)
    counts = torch.zeros(tiles, device=a.device, dtype=torch.int32)

    def call():
        _streamk_kernel[(num_sms,)](
            a_desc, b_desc, c_desc, ws, counts, M, N, K,
            BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=GROUP_M, NUM_SMS=num_sms,
            STAGES=stages, num_warps=warps,
        )  # fmt: skip

    return call, out


def _cublas_kernels(call) -> str:
    """The names of the kernels one call runs on the GPU."""
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        call()
        torch.cuda.synchronize()
    return " ; ".join(sorted({e.name for e in prof.events() if e.device_type.name == "CUDA"}))


def _name(tile) -> str:
    return f"sk {tile[0]}x{tile[1]}"


def main() -> None:
    flush, _ = setup()
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    names = ["cublas", "ours", *(_name(t) for t in SK_TILES)]
    print("bfloat16 x (M x K) @ B (K x N), B row-major; us per implementation, "
          "then each as a speed over cuBLAS (paired); the plan's tile last")  # fmt: skip
    print(f"{'M x N x K':>17} " + " ".join(f"{k:>11}" for k in names))
    for n, k in LAYERS:
        for m in ROWS:
            a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
            ref = torch.mm(a, b).float()
            calls = {
                "cublas": lambda a=a, b=b: torch.mm(a, b),
                "ours": lambda a=a, b=b: mm.matmul(a, b),
            }
            outs = {}
            for tile in SK_TILES:
                calls[_name(tile)], outs[_name(tile)] = streamk(a, b, tile, num_sms)
            for name, call in calls.items():
                if name in outs:
                    outs[name].fill_(float("nan"))
                got = call()
                torch.cuda.synchronize()
                got = outs.get(name, got)
                if not torch.allclose(got.float(), ref, rtol=2e-2, atol=2e-1):
                    err = (got.float() - ref).abs().max().item()
                    sys.exit(f"{m}x{n}x{k} {name}: differs from cuBLAS by up to {err}")
            lead = timing.lead_for(calls["ours"])
            visits = {name: [] for name in names}
            for visit in range(VISITS):
                for name in names if visit % 2 == 0 else names[::-1]:
                    t = timing.time_events(calls[name], SAMPLES, flush=flush, lead_ms=lead)
                    visits[name].append(statistics.median(t))
            us = {name: statistics.median(v) * 1e3 for name, v in visits.items()}
            speed = {
                name: statistics.median(
                    c / t for c, t in zip(visits["cublas"], visits[name], strict=True)
                )
                for name in names
            }
            plan = mm._tma_plan(m, n, k, num_sms)
            label = plan.tile.name + (f" + {plan.rest.tile.name}" if plan.rest else "")
            if plan.split_k > 1:
                label += f" split {plan.split_k}"
            print(f"{f'{m}x{n}x{k}':>17} " + " ".join(f"{us[x]:>11.1f}" for x in names))
            print(f"{'':>17} " + " ".join(f"{speed[x]:>11.3f}" for x in names) + f"  {label}")
            print(f"{'':>17} cuBLAS: {_cublas_kernels(calls['cublas'])}")
            sys.stdout.flush()
            del a, b, ref, outs, calls
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
