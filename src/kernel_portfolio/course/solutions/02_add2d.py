"""Lesson 2: strides and 2-D tiles. Add two matrices given as any strided views.

Element ``(i, j)`` of a view lives at ``ptr + i * stride_m + j * stride_n``. A
transposed view swaps the strides, a view with row gaps has ``stride_m > n``, and
an expanded (broadcast) row has ``stride_m == 0``: one formula covers them all.
Program ``(pid_m, pid_n)`` owns a ``BLOCK_M`` by ``BLOCK_N`` tile.

Check it:  kp check add2d --dir DIR
"""

import torch
import triton
import triton.language as tl


@triton.jit
def add2d_kernel(
    x_ptr, y_ptr, out_ptr, M, N,
    stride_xm, stride_xn, stride_ym, stride_yn, stride_om, stride_on,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    # int64 rows: rows * stride can pass 2**31 on a large tensor.
    rows = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :] * stride_xn, mask=mask)
    y = tl.load(y_ptr + rows[:, None] * stride_ym + cols[None, :] * stride_yn, mask=mask)
    tl.store(out_ptr + rows[:, None] * stride_om + cols[None, :] * stride_on, x + y, mask=mask)


def add2d(
    x: torch.Tensor, y: torch.Tensor, out: torch.Tensor, block_m: int = 16, block_n: int = 32
) -> None:
    """Write ``x + y`` into ``out``: three 2-D tensors of one shape, any strides."""
    M, N = out.shape
    grid = (triton.cdiv(M, block_m), triton.cdiv(N, block_n))
    add2d_kernel[grid](
        x, y, out, M, N, *x.stride(), *y.stride(), *out.stride(), BLOCK_M=block_m, BLOCK_N=block_n
    )
