"""Specialization policy ``vec-hint``: every size unspecialised, plus a vector-width constant.

Every size is a runtime argument in ``do_not_specialize``, as in the
``runtime`` policy, and one more ``tl.constexpr``, ``VEC``, carries the largest
power of two (up to 16 bytes' worth of elements) that divides the width and
every stride (``kernel_portfolio.plans.vec_width``). The kernel rewrites each
size as ``size // VEC * VEC``: the same value, which the compiler now knows to
be a multiple of ``VEC``, so its loads can be 16 bytes wide. ``VEC`` takes a few
values only, so it adds few compiles.

The four policy files (``constexpr_all.py``, ``runtime_all.py``,
``default_spec.py``, ``vec_hint.py``) have the same kernel bodies and differ
only in how the kernels' size parameters are declared, so the
specialization case study (``case_studies/specialization.py``) measures the
policy alone; ``scripts/specialization_sweep.py`` launches them. Every kernel
assumes unit stride along its last dimension (rows of x and y; rows of A, B
and C), so the policies differ in sizes and leading strides only. The row
kernels use a persistent grid, so the row count is a kernel argument.
"""

import triton
import triton.language as tl


@triton.jit(do_not_specialize=["n_rows", "n_cols", "stride_xm", "stride_ym"])
def softmax_kernel(
    x_ptr,
    y_ptr,
    n_rows,
    n_cols,
    stride_xm,
    stride_ym,
    BLOCK: tl.constexpr,
    VEC: tl.constexpr,
):
    """Block plan: one row in registers, persistent grid (rows ``pid, pid + programs, ...``)."""
    # Same values, now visibly multiples of VEC, so loads can be 16 bytes wide.
    n_cols = n_cols // VEC * VEC
    stride_xm = stride_xm // VEC * VEC
    stride_ym = stride_ym // VEC * VEC
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0)):
        row64 = tl.cast(row, tl.int64)
        x = tl.load(x_ptr + row64 * stride_xm + cols, mask=mask, other=-float("inf"))
        x = x.to(tl.float32)
        e = tl.exp(x - tl.max(x, axis=0))
        y = e / tl.sum(e, axis=0)
        tl.store(y_ptr + row64 * stride_ym + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit(do_not_specialize=["n_rows", "n_cols", "stride_xm", "stride_ym"])
def rms_norm_kernel(
    x_ptr,
    w_ptr,
    y_ptr,
    n_rows,
    n_cols,
    stride_xm,
    stride_ym,
    eps,
    BLOCK: tl.constexpr,
    VEC: tl.constexpr,
):
    """Block plan: one row in registers, persistent grid (rows ``pid, pid + programs, ...``)."""
    # Same values, now visibly multiples of VEC, so loads can be 16 bytes wide.
    n_cols = n_cols // VEC * VEC
    stride_xm = stride_xm // VEC * VEC
    stride_ym = stride_ym // VEC * VEC
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0)):
        row64 = tl.cast(row, tl.int64)
        x = tl.load(x_ptr + row64 * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
        rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
        y = x * rstd * w
        tl.store(y_ptr + row64 * stride_ym + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit(do_not_specialize=["M", "N", "K", "stride_am", "stride_bk", "stride_cm"])
def matmul_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_bk,
    stride_cm,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    VEC: tl.constexpr,
):
    """One ``BLOCK_M x BLOCK_N`` tile of ``C = A @ B`` per program, in grouped order."""
    # Same values, now visibly multiples of VEC, so loads can be 16 bytes wide.
    N = N // VEC * VEC
    K = K // VEC * VEC
    stride_am = stride_am // VEC * VEC
    stride_bk = stride_bk // VEC * VEC
    stride_cm = stride_cm // VEC * VEC
    pid = tl.program_id(0)
    grid_m = tl.cdiv(M, BLOCK_M)
    grid_n = tl.cdiv(N, BLOCK_N)
    group = GROUP_M * grid_n
    first_m = (pid // group) * GROUP_M
    size_m = min(grid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group) % size_m
    pid_n = (pid % group) // size_m
    rm = pid_m.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n.to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rm[:, None] * stride_am + rk[None, :]
    b_ptrs = b_ptr + rk[:, None] * stride_bk + rn[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        a = tl.load(a_ptrs, mask=(rm[:, None] < M) & (rk[None, :] < K - k), other=0.0)
        b = tl.load(b_ptrs, mask=(rk[:, None] < K - k) & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = c_ptr + rm[:, None] * stride_cm + rn[None, :]
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))
