"""A/B of swapped GEMM tiles whose row extent is no power of two, against the plan and cuBLAS.

About two minutes in one process on a Hopper GPU; prints a table and writes
nothing else::

    python scripts/row_extent_ab.py > results/<gpu>/checks/row-extent-ab-<UTC stamp>.log

At batches that are no whole number of tiles cuBLAS ran tiles whose extent
along the batch is a multiple of 8 and no power of two, on the ``N`` side of
wgmma (``results/h100-80gb-hbm3/checks/streamk-ab-20261208T0116Z.log``: 152
rows at 600x4096x4096, four row tiles of 608 rows for 600), where the plan's
tiles of 64, 128 or 192 rows leave a last row of tiles part-empty or the
waves part-full. Triton's blocks are powers of two, so the kernel below
puts the batch on the ``N`` side (``C^T = B^T A^T``, as the plan's swapped
tiles of 16 to 64 rows do) in two accumulators, ``ROWS`` and ``ROWS2`` rows:
a tile of ``ROWS + ROWS2`` rows (80 to 192) by ``BLOCK_N`` columns. Its last
row of tiles ends at ``M`` (the plan's shifted last row of tiles).

This times, per product (``bfloat16``, ``B`` row-major as in the suite),
cuBLAS (``torch.mm``), the plan (``ops.matmul.matmul``) and the kernel at
each of :data:`EXTENTS`, each call with a cold L2 behind a device spin,
visited in alternating order (six visits of twenty samples), and prints
each as a speed over cuBLAS (the median over visits of each visit's ratio,
paired), with the plan's tile. Every output must agree with cuBLAS's to
rounding.
"""

from __future__ import annotations

import statistics
import sys

import torch
import triton
import triton.language as tl
from copy_floor import SAMPLES, VISITS, setup
from triton.tools.tensor_descriptor import TensorDescriptor

from kernel_portfolio.bench import timing
from kernel_portfolio.ops import matmul as mm

#: ``(N, K)``: Llama-3-8B's four projections; Qwen2.5-14B's fused QKV, MLP
#: up and MLP down; Llama-3.2-1B's MLP up.
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
#: Batches: none a whole number of 128-row tiles.
ROWS = (176, 336, 520, 600, 800)
#: ``(ROWS, ROWS2)``: a tile's rows in its two accumulators.
EXTENTS = ((64, 16), (64, 32), (128, 16), (128, 32), (128, 64))
#: ``(BLOCK_N, BLOCK_K, warps, stages)`` of every tile.
COLUMNS = (128, 64, 8, 4)
GROUP_M = 8


@triton.jit(do_not_specialize=["M", "N", "K"])
def _rows_kernel(
    a_desc,
    a2_desc,
    b_desc,
    c_desc,
    c2_desc,
    M,
    N,
    K,
    ROWS: tl.constexpr,
    ROWS2: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    NUM_SMS: tl.constexpr,
    STAGES: tl.constexpr,
):
    """``C = A @ B`` in persistent tiles of ``ROWS + ROWS2`` rows, on wgmma's ``N`` side."""
    TILE_M: tl.constexpr = ROWS + ROWS2
    out_ty = c_desc.dtype
    num_pid_m = tl.cdiv(M, TILE_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    for tile in tl.range(tl.program_id(0), num_pid_m * num_pid_n, NUM_SMS):
        pid_m, pid_n = mm._tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
        off_m = mm._row_start(pid_m, M, TILE_M)
        off_n = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_N, ROWS), dtype=tl.float32)
        acc2 = tl.zeros((BLOCK_N, ROWS2), dtype=tl.float32)
        for ki in tl.range(0, k_tiles, num_stages=STAGES):
            b = b_desc.load([ki * BLOCK_K, off_n]).T
            acc = tl.dot(b, a_desc.load([off_m, ki * BLOCK_K]).T, acc)
            acc2 = tl.dot(b, a2_desc.load([off_m + ROWS, ki * BLOCK_K]).T, acc2)
        c_desc.store([off_m, off_n], acc.T.to(out_ty))
        c2_desc.store([off_m + ROWS, off_n], acc2.T.to(out_ty))


def rows_tile(a: torch.Tensor, b: torch.Tensor, extent, num_sms: int):
    """A call of the kernel for row-major ``a`` and ``b`` at ``extent``, and its output."""
    (M, K), N = a.shape, b.shape[1]
    rows, rows2 = extent
    bn, bk, warps, stages = COLUMNS
    if rows + rows2 > M:
        raise ValueError(f"{M} rows: fewer than a tile's {rows + rows2}")
    out = torch.empty(M, N, device=a.device, dtype=a.dtype)
    descs = (
        TensorDescriptor(a, [M, K], [K, 1], [rows, bk]),
        TensorDescriptor(a, [M, K], [K, 1], [rows2, bk]),
        TensorDescriptor(b, [K, N], [N, 1], [bk, bn]),
        TensorDescriptor(out, [M, N], [N, 1], [rows, bn]),
        TensorDescriptor(out, [M, N], [N, 1], [rows2, bn]),
    )

    def call():
        _rows_kernel[(num_sms,)](
            *descs, M, N, K, ROWS=rows, ROWS2=rows2, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=GROUP_M,
            NUM_SMS=num_sms, STAGES=stages, num_warps=warps,
        )  # fmt: skip

    return call, out


def _name(extent) -> str:
    return f"{extent[0]}+{extent[1]}"


def main() -> None:
    flush, _ = setup()
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    names = ["cublas", "ours", *(_name(e) for e in EXTENTS)]
    print(f"bfloat16 x (M x K) @ B (K x N), B row-major; tiles of {COLUMNS[0]} columns; "
          "us per implementation, then each as a speed over cuBLAS (paired); "
          "the plan's tile last")  # fmt: skip
    print(f"{'M x N x K':>17} " + " ".join(f"{k:>9}" for k in names))
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
            for extent in EXTENTS:
                calls[_name(extent)], outs[_name(extent)] = rows_tile(a, b, extent, num_sms)
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
            print(f"{f'{m}x{n}x{k}':>17} " + " ".join(f"{us[x]:>9.1f}" for x in names))
            print(f"{'':>17} " + " ".join(f"{speed[x]:>9.3f}" for x in names) + f"  {label}")
            sys.stdout.flush()
            del a, b, ref, outs, calls
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
