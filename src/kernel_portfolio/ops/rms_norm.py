"""RMSNorm and the fused residual add + RMSNorm, forward and backward.

Math, per row of ``N`` elements, with float32 statistics:

.. code-block:: text

    h    = x + residual                 (residual_rms_norm only)
    rstd = 1 / sqrt(mean(h * h) + eps)
    y    = h * rstd * weight

Rounding. ``h`` is computed in float32 and rounded once to the input dtype: it
is the residual stream the caller keeps, so it is stored, and normalised, in
that dtype. ``y`` normalises that rounded ``h`` in float32 and is rounded once
to the input dtype. ``rms_norm`` is the same with ``h = x``. The float64
references in :mod:`kernel_portfolio.reference` round at exactly these places.

Backward, with ``g = dy * weight`` (``g = dy`` without a weight):

.. code-block:: text

    dh      = rstd * (g - h * rstd**2 * mean(g * h))
    dx      = dh  (+ the upstream gradient of h, for residual_rms_norm;
                   the residual gets the same gradient as x)
    dweight = sum over rows of dy * h * rstd

``rstd`` (float32, one per row) is saved by the forward pass for the backward.
``dweight`` is deterministic: no atomics. Each backward program accumulates a
float32 partial ``dweight`` over a fixed set of rows (at most
``BWD_PROGRAMS_PER_SM`` partial rows per SM), and a second kernel sums the
partial rows in a fixed order.

Memory traffic for ``M`` rows of ``N`` elements of ``E`` bytes (``rstd``,
``weight`` and the ``dweight`` partials are O(M + N) and left out):

.. code-block:: text

    plan           rms_norm fwd   residual fwd   bwd            bwd with dh
    block          2*M*N*E        4*M*N*E        3*M*N*E        4*M*N*E
    looped/split   3*M*N*E        5*M*N*E        5*M*N*E        6*M*N*E

* ``block``: one program per row holds the row in registers; every byte is
  read once and written once (forward: read ``x`` (+ ``residual``), write
  ``y`` (+ ``h``); backward: read ``dy``, ``h`` (+ ``dh``), write ``dx``).
* ``looped``: one program per row walks it in chunks, first summing squares
  (and writing ``h``), then re-reading ``h`` (or ``x``) to write ``y``.
* ``split``: few wide rows; several programs share a row. A first kernel
  writes partial sums of squares, a second merges a row's partials in a fixed
  order and writes its slice of ``y``.
* Backward of ``looped``/``split``: a first kernel writes partial sums of
  ``g * h`` per (row, slice); the main kernel walks column chunks and, inside
  each, its rows, so that the partial ``dweight`` of a chunk stays in
  registers. ``dy`` and ``h`` are therefore read twice.

Specialisation. Compile-time values are the dtypes, ``HAS_RESIDUAL``,
``HAS_WEIGHT``, ``HAS_DH``, ``BLOCK``, ``ONE_CHUNK`` and ``num_warps`` (all
fixed by the row width and the plan), plus Triton's default specialisation of
``n_cols`` and the strides (a value of 1, or divisibility by 16), kept on
purpose: a unit column stride and 16-divisible row strides are what let Triton
emit 16-byte vector loads, and they do not depend on the row count. Everything
that does depend on the row count is a runtime argument marked
``do_not_specialize`` (``n_rows``, the split width, the number of partial
rows), and ``eps`` is a float, which Triton never specialises. So a new batch
size reuses the compiled kernels; only ``plan="auto"`` switching between the
``looped`` and ``split`` kernels for rows wider than the block limit compiles
the other kernel, once.
"""

from __future__ import annotations

import contextlib
import math

import torch
import triton
import triton.language as tl
from torch.library import triton_op, wrap_triton

from kernel_portfolio.contracts import check_eps, check_same, check_tensor
from kernel_portfolio.plans import MAX_SPLITS, RowPlan, as_rows, choose, sm_count, split_segments

# ---------------------------------------------------------------------------
# Kernels
# ---------------------------------------------------------------------------


@triton.jit
def _load_h(
    x_ptr,
    r_ptr,
    h_ptr,
    row,
    cols,
    mask,
    n_cols,
    stride_xm,
    stride_xn,
    stride_rm,
    stride_rn,
    HAS_RESIDUAL: tl.constexpr,
):
    """One chunk of ``h`` as float32; with a residual, also store ``h`` (input dtype)."""
    cols64 = cols.to(tl.int64)
    h = tl.load(x_ptr + row * stride_xm + cols64 * stride_xn, mask=mask, other=0.0)
    if HAS_RESIDUAL:
        r = tl.load(r_ptr + row * stride_rm + cols64 * stride_rn, mask=mask, other=0.0)
        h = (h.to(tl.float32) + r.to(tl.float32)).to(h_ptr.dtype.element_ty)
        tl.store(h_ptr + row * n_cols + cols, h, mask=mask)
    return h.to(tl.float32)


@triton.jit
def _sum_squares(
    x_ptr,
    r_ptr,
    h_ptr,
    row,
    start,
    end,
    n_cols,
    stride_xm,
    stride_xn,
    stride_rm,
    stride_rn,
    HAS_RESIDUAL: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """First pass over columns ``[start, end)`` of a row: the sum of ``h * h``."""
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for c0 in range(start, end, BLOCK):
        cols = c0 + tl.arange(0, BLOCK)
        h = _load_h(
            x_ptr,
            r_ptr,
            h_ptr,
            row,
            cols,
            cols < end,
            n_cols,
            stride_xm,
            stride_xn,
            stride_rm,
            stride_rn,
            HAS_RESIDUAL,
        )
        acc += h * h
    return tl.sum(acc, axis=0)


@triton.jit
def _store_y(h, rstd, w_ptr, y_ptr, row, cols, mask, n_cols, HAS_WEIGHT: tl.constexpr):
    """Write ``h * rstd * weight`` for one chunk, rounded once to the output dtype."""
    y = h * rstd
    if HAS_WEIGHT:
        y = y * tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * n_cols + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _normalise(
    x_ptr,
    h_ptr,
    w_ptr,
    y_ptr,
    row,
    start,
    end,
    rstd,
    n_cols,
    stride_xm,
    stride_xn,
    HAS_RESIDUAL: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """Second pass over columns ``[start, end)``: re-read ``h`` (stored, or ``x``), write ``y``."""
    for c0 in range(start, end, BLOCK):
        cols = c0 + tl.arange(0, BLOCK)
        mask = cols < end
        if HAS_RESIDUAL:
            h = tl.load(h_ptr + row * n_cols + cols, mask=mask, other=0.0)
        else:
            h = tl.load(x_ptr + row * stride_xm + cols.to(tl.int64) * stride_xn, mask=mask)
        _store_y(h.to(tl.float32), rstd, w_ptr, y_ptr, row, cols, mask, n_cols, HAS_WEIGHT)


@triton.jit
def _merge(partials_ptr, n_partials, MAX_PARTIALS: tl.constexpr):
    """Sum a row's float32 partials as one vector: a fixed order, so deterministic."""
    idx = tl.arange(0, MAX_PARTIALS)
    return tl.sum(tl.load(partials_ptr + idx, mask=idx < n_partials, other=0.0), axis=0)


@triton.jit
def _fwd_kernel(
    x_ptr,
    r_ptr,
    w_ptr,
    y_ptr,
    h_ptr,
    rstd_ptr,
    n_cols,
    stride_xm,
    stride_xn,
    stride_rm,
    stride_rn,
    eps,
    HAS_RESIDUAL: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    BLOCK: tl.constexpr,
    ONE_CHUNK: tl.constexpr,
):
    """Block and looped plans: one program per row.

    ``ONE_CHUNK`` (``BLOCK >= n_cols``) keeps the row in registers; otherwise
    the row is walked twice, re-reading ``h`` from the ``h`` output (residual)
    or from ``x``.
    """
    row = tl.program_id(0).to(tl.int64)
    if ONE_CHUNK:
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        h = _load_h(
            x_ptr,
            r_ptr,
            h_ptr,
            row,
            cols,
            mask,
            n_cols,
            stride_xm,
            stride_xn,
            stride_rm,
            stride_rn,
            HAS_RESIDUAL,
        )
        rstd = tl.rsqrt(tl.sum(h * h, axis=0) / n_cols + eps)
        _store_y(h, rstd, w_ptr, y_ptr, row, cols, mask, n_cols, HAS_WEIGHT)
    else:
        ss = _sum_squares(
            x_ptr,
            r_ptr,
            h_ptr,
            row,
            0,
            n_cols,
            n_cols,
            stride_xm,
            stride_xn,
            stride_rm,
            stride_rn,
            HAS_RESIDUAL,
            BLOCK,
        )
        rstd = tl.rsqrt(ss / n_cols + eps)
        if HAS_RESIDUAL:
            # The second pass re-reads h that other threads of this program stored.
            tl.debug_barrier()
        _normalise(
            x_ptr,
            h_ptr,
            w_ptr,
            y_ptr,
            row,
            0,
            n_cols,
            rstd,
            n_cols,
            stride_xm,
            stride_xn,
            HAS_RESIDUAL,
            HAS_WEIGHT,
            BLOCK,
        )
    tl.store(rstd_ptr + row, rstd)


@triton.jit(do_not_specialize=["cols_per_split"])
def _fwd_partial_kernel(
    x_ptr,
    r_ptr,
    h_ptr,
    ss_ptr,
    n_cols,
    cols_per_split,
    stride_xm,
    stride_xn,
    stride_rm,
    stride_rn,
    HAS_RESIDUAL: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """Split plan, first kernel: program ``(row, s)`` sums squares over its slice."""
    row = tl.program_id(0).to(tl.int64)
    split = tl.program_id(1)
    start = split * cols_per_split
    end = tl.minimum(start + cols_per_split, n_cols)
    ss = _sum_squares(
        x_ptr,
        r_ptr,
        h_ptr,
        row,
        start,
        end,
        n_cols,
        stride_xm,
        stride_xn,
        stride_rm,
        stride_rn,
        HAS_RESIDUAL,
        BLOCK,
    )
    tl.store(ss_ptr + row * tl.num_programs(1) + split, ss)


@triton.jit(do_not_specialize=["cols_per_split"])
def _fwd_split_kernel(
    x_ptr,
    w_ptr,
    y_ptr,
    h_ptr,
    ss_ptr,
    rstd_ptr,
    n_cols,
    cols_per_split,
    stride_xm,
    stride_xn,
    eps,
    HAS_RESIDUAL: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    BLOCK: tl.constexpr,
    MAX_PARTIALS: tl.constexpr,
):
    """Split plan, second kernel: merge the row's partial sums, write the slice of ``y``."""
    row = tl.program_id(0).to(tl.int64)
    split = tl.program_id(1)
    splits = tl.num_programs(1)
    rstd = tl.rsqrt(_merge(ss_ptr + row * splits, splits, MAX_PARTIALS) / n_cols + eps)
    if split == 0:
        tl.store(rstd_ptr + row, rstd)
    start = split * cols_per_split
    end = tl.minimum(start + cols_per_split, n_cols)
    _normalise(
        x_ptr,
        h_ptr,
        w_ptr,
        y_ptr,
        row,
        start,
        end,
        rstd,
        n_cols,
        stride_xm,
        stride_xn,
        HAS_RESIDUAL,
        HAS_WEIGHT,
        BLOCK,
    )


@triton.jit
def _load_grad(
    dy_ptr,
    h_ptr,
    row,
    cols,
    mask,
    stride_dym,
    stride_dyn,
    stride_hm,
    stride_hn,
):
    """One chunk of ``dy`` and ``h``, as float32."""
    cols64 = cols.to(tl.int64)
    dy = tl.load(dy_ptr + row * stride_dym + cols64 * stride_dyn, mask=mask, other=0.0)
    h = tl.load(h_ptr + row * stride_hm + cols64 * stride_hn, mask=mask, other=0.0)
    return dy.to(tl.float32), h.to(tl.float32)


@triton.jit(do_not_specialize=["cols_per_split"])
def _bwd_dot_kernel(
    dy_ptr,
    h_ptr,
    w_ptr,
    dot_ptr,
    n_cols,
    cols_per_split,
    stride_dym,
    stride_dyn,
    stride_hm,
    stride_hn,
    HAS_WEIGHT: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """Looped/split backward, first kernel: program ``(row, s)`` sums ``g * h`` over its slice."""
    row = tl.program_id(0).to(tl.int64)
    split = tl.program_id(1)
    start = split * cols_per_split
    end = tl.minimum(start + cols_per_split, n_cols)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for c0 in range(start, end, BLOCK):
        cols = c0 + tl.arange(0, BLOCK)
        mask = cols < end
        dy, h = _load_grad(
            dy_ptr, h_ptr, row, cols, mask, stride_dym, stride_dyn, stride_hm, stride_hn
        )
        if HAS_WEIGHT:
            dy = dy * tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        acc += dy * h
    tl.store(dot_ptr + row * tl.num_programs(1) + split, tl.sum(acc, axis=0))


@triton.jit(do_not_specialize=["n_rows", "cols_per_split"])
def _bwd_kernel(
    dy_ptr,
    h_ptr,
    w_ptr,
    rstd_ptr,
    dot_ptr,
    dh_ptr,
    dx_ptr,
    dw_part_ptr,
    n_rows,
    n_cols,
    cols_per_split,
    stride_dym,
    stride_dyn,
    stride_hm,
    stride_hn,
    stride_dhm,
    stride_dhn,
    HAS_WEIGHT: tl.constexpr,
    HAS_DH: tl.constexpr,
    BLOCK: tl.constexpr,
    ONE_CHUNK: tl.constexpr,
    MAX_PARTIALS: tl.constexpr,
):
    """Backward: ``dx`` for every row, and one float32 partial ``dweight`` row per program.

    Program ``(p, s)`` of a ``(P, S)`` grid owns rows ``p, p + P, ...`` and the
    columns of slice ``s``. It walks its columns chunk by chunk and, inside a
    chunk, its rows, so the chunk's partial ``dweight`` stays in registers and
    is written once. ``ONE_CHUNK`` (block plan) computes ``mean(g * h)`` from
    the row in registers; otherwise it merges the partials of
    ``_bwd_dot_kernel``.
    """
    part = tl.program_id(0)
    n_parts = tl.num_programs(0)
    split = tl.program_id(1)
    splits = tl.num_programs(1)
    start = split * cols_per_split
    end = tl.minimum(start + cols_per_split, n_cols)
    for c0 in range(start, end, BLOCK):
        cols = c0 + tl.arange(0, BLOCK)
        mask = cols < end
        if HAS_WEIGHT:
            w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        dw = tl.zeros([BLOCK], dtype=tl.float32)
        for r in range(part, n_rows, n_parts):
            row = tl.cast(r, tl.int64)  # the interpreter yields a Python int here
            dy, h = _load_grad(
                dy_ptr, h_ptr, row, cols, mask, stride_dym, stride_dyn, stride_hm, stride_hn
            )
            rstd = tl.load(rstd_ptr + row)
            g = dy
            if HAS_WEIGHT:
                g = dy * w
            if ONE_CHUNK:
                mean_gh = tl.sum(g * h, axis=0) / n_cols
            else:
                mean_gh = _merge(dot_ptr + row * splits, splits, MAX_PARTIALS) / n_cols
            dx = rstd * (g - h * (rstd * rstd * mean_gh))
            if HAS_DH:
                dh_offs = row * stride_dhm + cols.to(tl.int64) * stride_dhn
                dx += tl.load(dh_ptr + dh_offs, mask=mask, other=0.0).to(tl.float32)
            tl.store(dx_ptr + row * n_cols + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)
            if HAS_WEIGHT:
                dw += dy * h * rstd
        if HAS_WEIGHT:
            tl.store(dw_part_ptr + part.to(tl.int64) * n_cols + cols, dw, mask=mask)


@triton.jit(do_not_specialize=["n_parts"])
def _dw_reduce_kernel(
    part_ptr, dw_ptr, n_parts, n_cols, BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr
):
    """``dweight = sum of the n_parts partial rows``, in a fixed order, in float32."""
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < n_cols
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for p0 in range(0, n_parts, BLOCK_P):
        parts = p0 + tl.arange(0, BLOCK_P)
        offs = parts.to(tl.int64)[:, None] * n_cols + cols[None, :]
        mask = (parts < n_parts)[:, None] & col_mask[None, :]
        acc += tl.sum(tl.load(part_ptr + offs, mask=mask, other=0.0), axis=0)
    tl.store(dw_ptr + cols, acc.to(dw_ptr.dtype.element_ty), mask=col_mask)


# ---------------------------------------------------------------------------
# Launchers
# ---------------------------------------------------------------------------

#: Backward programs (hence float32 partial ``dweight`` rows) per SM. Few, so
#: the partials stay small next to ``dy`` and ``h``; a first guess that the
#: RMSNorm benchmarks will revisit.
BWD_PROGRAMS_PER_SM = 2
#: Elements per tile of the ``dweight`` reduction, and its warps.
REDUCE_TILE = 4096
REDUCE_NUM_WARPS = 4


def _on_device(t: torch.Tensor):
    """Make ``t``'s GPU current: Triton launches on the current device, not the tensor's."""
    return torch.cuda.device(t.device) if t.is_cuda else contextlib.nullcontext()


def _plan_args(plan: object) -> tuple[str, int, int, int]:
    """``plan`` as custom-op arguments: a RowPlan's fields, or a name and zeros."""
    if isinstance(plan, RowPlan):
        return plan.kind, plan.block, plan.num_warps, plan.splits
    if isinstance(plan, str):
        return plan, 0, 0, 0
    raise TypeError(f"plan must be a str or a RowPlan, got {type(plan).__name__}")


def _resolve_plan(x: torch.Tensor, kind: str, block: int, num_warps: int, splits: int) -> RowPlan:
    """The RowPlan for a 2-D ``x`` from :func:`_plan_args` output (``block == 0``: a name)."""
    plan = kind if block == 0 else RowPlan(kind, block, num_warps, splits)
    n_rows, n_cols = x.shape[0], int(x.shape[1])  # the width fixes constexprs: specialise
    return choose(
        n_rows, n_cols, elem_bytes=x.element_size(), sm_count=sm_count(x.device), plan=plan
    )


def _split_width(n_cols: int, plan: RowPlan) -> tuple[int, int]:
    """``(columns per slice, slices per row)``: one slice, the whole row, unless split."""
    if plan.kind != "split":
        return triton.cdiv(n_cols, plan.block) * plan.block, 1
    per_program, n_split = split_segments(n_cols, plan)
    return per_program * plan.block, n_split


def _forward(
    x: torch.Tensor,
    residual: torch.Tensor | None,
    weight: torch.Tensor | None,
    eps: float,
    plan: RowPlan,
    y: torch.Tensor,
    h: torch.Tensor | None,
    rstd: torch.Tensor,
) -> None:
    """Write ``y``, ``h`` (with a residual) and ``rstd`` for a 2-D ``x`` of any strides.

    ``y`` and ``h`` must be contiguous ``x.shape`` tensors of ``x``'s dtype and
    ``rstd`` a float32 ``(n_rows,)`` tensor; the custom ops pass fresh ones,
    tests pass NaN-poisoned ones. Unused pointers get ``x``, never read.
    """
    n_rows, n_cols = x.shape[0], int(x.shape[1])  # the width fixes constexprs: specialise
    if n_rows == 0 or n_cols == 0:
        return
    has_res = residual is not None
    res = residual if has_res else x
    hh = h if has_res else y
    w = weight if weight is not None else x
    flags = dict(HAS_RESIDUAL=has_res, BLOCK=plan.block, num_warps=plan.num_warps)
    with _on_device(x):
        if plan.kind != "split":
            wrap_triton(_fwd_kernel)[(n_rows,)](
                x,
                res,
                w,
                y,
                hh,
                rstd,
                n_cols,
                x.stride(0),
                x.stride(1),
                res.stride(0),
                res.stride(1),
                eps,
                HAS_WEIGHT=weight is not None,
                ONE_CHUNK=plan.block >= n_cols,
                **flags,
            )
            return
        cols_per_split, n_split = _split_width(n_cols, plan)
        ss = torch.empty((n_rows, n_split), dtype=torch.float32, device=x.device)
        grid = (n_rows, n_split)
        wrap_triton(_fwd_partial_kernel)[grid](
            x,
            res,
            hh,
            ss,
            n_cols,
            cols_per_split,
            x.stride(0),
            x.stride(1),
            res.stride(0),
            res.stride(1),
            **flags,
        )
        wrap_triton(_fwd_split_kernel)[grid](
            x,
            w,
            y,
            hh,
            ss,
            rstd,
            n_cols,
            cols_per_split,
            x.stride(0),
            x.stride(1),
            eps,
            HAS_WEIGHT=weight is not None,
            MAX_PARTIALS=MAX_SPLITS,
            **flags,
        )


def _backward(
    dy: torch.Tensor,
    h: torch.Tensor,
    weight: torch.Tensor | None,
    rstd: torch.Tensor,
    dh: torch.Tensor | None,
    plan: RowPlan,
    dx: torch.Tensor,
    dw: torch.Tensor | None,
) -> None:
    """Write ``dx`` (contiguous, ``h``'s shape and dtype) and ``dw`` (when ``weight`` is given).

    ``dy``, ``h`` and ``dh`` may have any strides. ``dh`` is the upstream
    gradient of ``h`` (residual_rms_norm), added to ``dx``.
    """
    n_rows, n_cols = h.shape[0], int(h.shape[1])  # the width fixes constexprs: specialise
    if n_cols == 0:
        return
    if n_rows == 0:
        if dw is not None:
            dw.zero_()
        return
    has_dh = dh is not None
    dhh = dh if has_dh else dy
    w = weight if weight is not None else h
    cols_per_split, n_split = _split_width(n_cols, plan)
    one_chunk = plan.kind != "split" and plan.block >= n_cols
    sms = sm_count(h.device)
    n_parts = min(n_rows, max(1, triton.cdiv(BWD_PROGRAMS_PER_SM * sms, n_split)))
    f32 = dict(dtype=torch.float32, device=h.device)
    dw_part = torch.empty((n_parts, n_cols), **f32) if dw is not None else rstd
    with _on_device(h):
        if one_chunk:
            dot = rstd  # not read: the row's mean(g * h) is computed in registers
        else:
            dot = torch.empty((n_rows, n_split), **f32)
            wrap_triton(_bwd_dot_kernel)[(n_rows, n_split)](
                dy,
                h,
                w,
                dot,
                n_cols,
                cols_per_split,
                dy.stride(0),
                dy.stride(1),
                h.stride(0),
                h.stride(1),
                HAS_WEIGHT=weight is not None,
                BLOCK=plan.block,
                num_warps=plan.num_warps,
            )
        wrap_triton(_bwd_kernel)[(n_parts, n_split)](
            dy,
            h,
            w,
            rstd,
            dot,
            dhh,
            dx,
            dw_part,
            n_rows,
            n_cols,
            cols_per_split,
            dy.stride(0),
            dy.stride(1),
            h.stride(0),
            h.stride(1),
            dhh.stride(0),
            dhh.stride(1),
            HAS_WEIGHT=weight is not None,
            HAS_DH=has_dh,
            BLOCK=plan.block,
            ONE_CHUNK=one_chunk,
            MAX_PARTIALS=MAX_SPLITS,
            num_warps=plan.num_warps,
        )
        if dw is not None:
            # About four column blocks per SM, each summing every partial row.
            block_n = min(
                REDUCE_TILE, max(32, triton.next_power_of_2(triton.cdiv(n_cols, 4 * sms)))
            )
            wrap_triton(_dw_reduce_kernel)[(triton.cdiv(n_cols, block_n),)](
                dw_part,
                dw,
                n_parts,
                n_cols,
                BLOCK_P=REDUCE_TILE // block_n,
                BLOCK_N=block_n,
                num_warps=REDUCE_NUM_WARPS,
            )


# ---------------------------------------------------------------------------
# torch.library registration (custom ops + autograd)
# ---------------------------------------------------------------------------
# The ops take 2-D inputs and the plan as plain fields (a custom-op schema has
# no RowPlan type). The plan is resolved inside the op, where the SM count is
# read from the device; torch.compile traces the op body, not that query.


@triton_op("kp::rms_norm", mutates_args=())
def _rms_norm_op(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    eps: float,
    plan: str,
    block: int,
    num_warps: int,
    splits: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    row_plan = _resolve_plan(x, plan, block, num_warps, splits)
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    rstd = torch.empty(x.shape[0], dtype=torch.float32, device=x.device)
    _forward(x, None, weight, eps, row_plan, y, None, rstd)
    return y, rstd


@triton_op("kp::residual_rms_norm", mutates_args=())
def _residual_rms_norm_op(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor | None,
    eps: float,
    plan: str,
    block: int,
    num_warps: int,
    splits: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    row_plan = _resolve_plan(x, plan, block, num_warps, splits)
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    h = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    rstd = torch.empty(x.shape[0], dtype=torch.float32, device=x.device)
    _forward(x, residual, weight, eps, row_plan, y, h, rstd)
    return y, h, rstd


@triton_op("kp::rms_norm_backward", mutates_args=())
def _rms_norm_backward_op(
    dy: torch.Tensor,
    h: torch.Tensor,
    weight: torch.Tensor | None,
    rstd: torch.Tensor,
    dh: torch.Tensor | None,
    plan: str,
    block: int,
    num_warps: int,
    splits: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns ``(dx, dweight)``; ``dweight`` is empty (shape ``(0,)``) without a weight."""
    row_plan = _resolve_plan(h, plan, block, num_warps, splits)
    dx = torch.empty(h.shape, dtype=h.dtype, device=h.device)
    dw_len = h.shape[1] if weight is not None else 0
    dw = torch.empty(dw_len, dtype=h.dtype, device=h.device)
    _backward(dy, h, weight, rstd, dh, row_plan, dx, dw if weight is not None else None)
    return dx, dw


def _setup_rms_norm(ctx, inputs, output) -> None:
    x, weight, _eps, *plan_args = inputs
    _y, rstd = output
    ctx.mark_non_differentiable(rstd)
    ctx.save_for_backward(x, weight, rstd)
    ctx.plan_args = plan_args


def _rms_norm_grad(ctx, dy, _drstd):
    x, weight, rstd = ctx.saved_tensors
    dx, dw = torch.ops.kp.rms_norm_backward(dy, x, weight, rstd, None, *ctx.plan_args)
    return dx, (dw if weight is not None else None), None, None, None, None, None


def _setup_residual_rms_norm(ctx, inputs, output) -> None:
    _x, _residual, weight, _eps, *plan_args = inputs
    _y, h, rstd = output
    ctx.mark_non_differentiable(rstd)
    ctx.save_for_backward(h, weight, rstd)
    ctx.plan_args = plan_args


def _residual_rms_norm_grad(ctx, dy, dh, _drstd):
    h, weight, rstd = ctx.saved_tensors
    dx, dw = torch.ops.kp.rms_norm_backward(dy, h, weight, rstd, dh, *ctx.plan_args)
    return dx, dx, (dw if weight is not None else None), None, None, None, None, None


_rms_norm_op.register_autograd(_rms_norm_grad, setup_context=_setup_rms_norm)
_residual_rms_norm_op.register_autograd(
    _residual_rms_norm_grad, setup_context=_setup_residual_rms_norm
)


# ---------------------------------------------------------------------------
# Public functions
# ---------------------------------------------------------------------------


def _rows(x: torch.Tensor) -> torch.Tensor:
    """``x`` as ``(n_rows, n_cols)``: a view where the leading dims collapse, else one copy."""
    if x.dim() == 0:
        raise ValueError("x must have at least one dimension (the normalised one), got a scalar")
    if x.shape[-1] == 0:
        # plans.as_rows cannot infer the row count of a zero-width tensor.
        return x.reshape(math.prod(x.shape[:-1]), 0)
    return as_rows(x)


def _check_weight(weight: object, x: torch.Tensor) -> torch.Tensor | None:
    if weight is None:
        return None
    check_tensor(weight, "weight")
    check_same(x, "x", weight, "weight")
    if weight.shape != (x.shape[-1],):
        raise ValueError(
            f"weight must be 1-D of length x.shape[-1] = {x.shape[-1]}, "
            f"got shape {tuple(weight.shape)}"
        )
    return weight.contiguous()  # the kernels index weight densely; a strided one costs N elements


def rms_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    eps: float = 1e-6,
    plan: str | RowPlan = "auto",
) -> torch.Tensor:
    """RMSNorm over the last dimension; equals ``F.rms_norm(x, (x.shape[-1],), weight, eps)``.

    ``y = x / sqrt(mean(x**2) + eps) * weight`` with float32 statistics, the
    product computed in float32 and rounded once to ``x``'s dtype.
    Differentiable with respect to ``x`` and ``weight``; the weight gradient
    is deterministic (no atomics).

    Strides: a 2-D ``x`` of any strides (row gaps, transposed, expanded) and
    any tensor whose leading dimensions collapse into one row stride are read
    in place; otherwise ``x`` is copied once (``reshape``) to ``(rows, N)``.

    Specialisation: a new row count (batch size) never compiles a new Triton
    kernel; the row width, dtype, plan and the strides' alignment do (see the
    module docstring).

    Args:
        x: float32, float16 or bfloat16 tensor with at least one dimension, on
            a CUDA device (or the CPU with ``TRITON_INTERPRET=1``).
        weight: Optional 1-D tensor of length ``x.shape[-1]``, same dtype and
            device as ``x``.
        eps: Positive number added to the mean square.
        plan: ``"auto"`` (ask :func:`kernel_portfolio.plans.choose`),
            ``"block"``, ``"looped"``, ``"split"``, or a
            :class:`~kernel_portfolio.plans.RowPlan` to force chunk sizes.

    Returns:
        A new contiguous tensor of ``x``'s shape and dtype.

    Raises:
        TypeError: ``x`` or ``weight`` is not a supported tensor, their dtypes
            differ, ``eps`` is not a number or ``plan`` not a str or RowPlan.
        ValueError: an unusable or mismatched device, a scalar ``x``, a
            ``weight`` that is not 1-D of length ``x.shape[-1]``, a
            non-positive ``eps``, or an unknown plan.

    Example:
        >>> import kernel_portfolio as kp
        >>> y = kp.rms_norm(x, weight)   # x: (tokens, 4096), weight: (4096,)
    """
    check_tensor(x, "x")
    x2d = _rows(x)
    weight = _check_weight(weight, x)
    eps = check_eps(eps)
    y, _ = torch.ops.kp.rms_norm(x2d, weight, eps, *_plan_args(plan))
    return y.view(x.shape)


def residual_rms_norm(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor | None,
    eps: float = 1e-6,
    plan: str | RowPlan = "auto",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Fused ``h = x + residual`` and ``y = rms_norm(h) * weight`` of a transformer block.

    Rounding: ``h`` is computed in float32 and rounded once to the input dtype
    (it is the new residual stream, stored in that dtype); ``y`` normalises
    that rounded ``h`` with float32 statistics and is rounded once. This is
    :func:`kernel_portfolio.reference.residual_rms_norm` exactly. One pass
    reads ``x`` and ``residual`` and writes ``y`` and ``h`` (block plan).

    Gradients flow from both outputs: ``x`` and ``residual`` both receive the
    gradient of ``h`` through the normalisation plus the upstream gradient of
    ``h``; the weight gradient is deterministic. Strides and specialisation
    are as for :func:`rms_norm`.

    Args:
        x: float32, float16 or bfloat16 tensor with at least one dimension, on
            a CUDA device (or the CPU with ``TRITON_INTERPRET=1``).
        residual: Tensor of ``x``'s shape, dtype and device.
        weight: 1-D tensor of length ``x.shape[-1]`` (same dtype and device),
            or ``None`` for no scale.
        eps: Positive number added to the mean square.
        plan: As for :func:`rms_norm`.

    Returns:
        ``(y, h)``: new contiguous tensors of ``x``'s shape and dtype.

    Raises:
        TypeError: an unsupported tensor or dtype, ``residual`` or ``weight``
            of another dtype than ``x``, a bad ``eps`` or ``plan`` type.
        ValueError: an unusable or mismatched device, a ``residual`` of
            another shape, a bad ``weight`` shape, a non-positive ``eps``, or
            an unknown plan.

    Example:
        >>> import kernel_portfolio as kp
        >>> y, hidden = kp.residual_rms_norm(attn_out, hidden, weight)
    """
    check_tensor(x, "x")
    check_tensor(residual, "residual")
    check_same(x, "x", residual, "residual")
    if residual.shape != x.shape:
        raise ValueError(
            f"residual has shape {tuple(residual.shape)} but x has shape {tuple(x.shape)}; "
            "they must match"
        )
    x2d, r2d = _rows(x), _rows(residual)
    weight = _check_weight(weight, x)
    eps = check_eps(eps)
    y, h, _ = torch.ops.kp.residual_rms_norm(x2d, r2d, weight, eps, *_plan_args(plan))
    return y.view(x.shape), h.view(x.shape)
