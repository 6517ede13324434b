"""Specialization policy ``constexpr``: every size is a ``tl.constexpr``.

Row count, width, row strides, eps, and GEMM M, N, K and leading strides are
compile-time constants, so Triton compiles a new binary for every distinct
value of any of them. In exchange the compiler knows everything: a mask
against a width that fills its block folds away, every address's divisibility
is exact, and loop trip counts are fixed.

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


@triton.jit
def softmax_kernel(
    x_ptr,
    y_ptr,
    n_rows: tl.constexpr,
    n_cols: tl.constexpr,
    stride_xm: tl.constexpr,
    stride_ym: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """Block plan: one row in registers, persistent grid (rows ``pid, pid + programs, ...``)."""
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0)):
        row64 = tl.cast(row, tl.int64)
        x = tl.load(x_ptr + row64 * stride_xm + cols, mask=mask, other=-float("inf"))
        x = x.to(tl.float32)
        e = tl.exp(x - tl.max(x, axis=0))
        y = e / tl.sum(e, axis=0)
        tl.store(y_ptr + row64 * stride_ym + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def rms_norm_kernel(
    x_ptr,
    w_ptr,
    y_ptr,
    n_rows: tl.constexpr,
    n_cols: tl.constexpr,
    stride_xm: tl.constexpr,
    stride_ym: tl.constexpr,
    eps: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """Block plan: one row in registers, persistent grid (rows ``pid, pid + programs, ...``)."""
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0)):
        row64 = tl.cast(row, tl.int64)
        x = tl.load(x_ptr + row64 * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
        rstd = tl.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps)
        y = x * rstd * w
        tl.store(y_ptr + row64 * stride_ym + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def matmul_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    M: tl.constexpr,
    N: tl.constexpr,
    K: tl.constexpr,
    stride_am: tl.constexpr,
    stride_bk: tl.constexpr,
    stride_cm: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    """One ``BLOCK_M x BLOCK_N`` tile of ``C = A @ B`` per program, in grouped order."""
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
