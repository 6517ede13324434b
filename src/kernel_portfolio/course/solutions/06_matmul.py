"""Lesson 6: GEMM tiling. ``c = a @ b`` with tiles, a K loop and grouped order.

Program ``pid`` computes one ``BLOCK_M`` by ``BLOCK_N`` tile of ``c``: it walks K
in ``BLOCK_K`` steps, multiplying an ``a`` tile by a ``b`` tile with ``tl.dot``
into a float32 accumulator. ``grouped_tile`` maps program ids to tiles in groups
of ``GROUP_M`` tile rows, column by column, so that programs running at the same
time share ``a`` and ``b`` tiles in L2. ``tile_order`` shows the order it gives.

Check it:  kp check matmul --dir DIR
"""

import torch
import triton
import triton.language as tl


@triton.jit
def grouped_tile(pid, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    """The tile ``(pid_m, pid_n)`` that program ``pid`` computes, in grouped order."""
    num_pid_in_group = GROUP_M * num_pid_n
    first_pid_m = (pid // num_pid_in_group) * GROUP_M
    group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_M)  # the last group may be short
    pid_m = first_pid_m + (pid % num_pid_in_group) % group_size_m
    pid_n = (pid % num_pid_in_group) // group_size_m
    return pid_m, pid_n


@triton.jit
def matmul_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):  # fmt: skip
    pid_m, pid_n = grouped_tile(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)
    rm = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    rn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)).to(tl.int64)
    rk = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak
    b_ptrs = b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptrs, mask=(rm[:, None] < M) & (rk[None, :] < K - k), other=0.0)
        b = tl.load(b_ptrs, mask=(rk[:, None] < K - k) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    c = acc.to(c_ptr.dtype.element_ty)
    c_ptrs = c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn
    tl.store(c_ptrs, c, mask=(rm[:, None] < M) & (rn[None, :] < N))


def matmul(
    a: torch.Tensor,
    b: torch.Tensor,
    c: torch.Tensor,
    block_m: int = 32,
    block_n: int = 32,
    block_k: int = 32,
    group_m: int = 4,
):
    """Write ``a @ b`` into ``c`` (2-D, any strides); return what the launch returns.

    On a GPU the launch returns the compiled kernel, whose ``n_regs`` and
    ``n_spills`` are the compiler's register report.
    """
    M, K = a.shape
    N = b.shape[1]
    grid = (triton.cdiv(M, block_m) * triton.cdiv(N, block_n),)
    return matmul_kernel[grid](
        a, b, c, M, N, K, *a.stride(), *b.stride(), *c.stride(),
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=group_m,
    )  # fmt: skip


@triton.jit
def tile_order_kernel(out_ptr, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    pid_m, pid_n = grouped_tile(pid, num_pid_m, num_pid_n, GROUP_M)
    tl.store(out_ptr + 2 * pid, pid_m)
    tl.store(out_ptr + 2 * pid + 1, pid_n)


def tile_order(num_pid_m: int, num_pid_n: int, group_m: int, device: str) -> torch.Tensor:
    """Row ``pid`` holds the tile ``(pid_m, pid_n)`` that program ``pid`` computes."""
    n_programs = num_pid_m * num_pid_n
    out = torch.full((n_programs, 2), -1, dtype=torch.int32, device=device)
    tile_order_kernel[(n_programs,)](out, num_pid_m, num_pid_n, GROUP_M=group_m)
    return out
