"""RMSNorm and the fused residual add + RMSNorm, forward and backward.

Math, per row of ``N`` elements, with float32 statistics:

```text
h    = x + residual                 (residual_rms_norm only)
rstd = 1 / sqrt(mean(h * h) + eps)
y    = h * rstd * weight
```

Rounding. ``h`` is computed in float32 and rounded once to the input dtype: it
is the residual stream the caller keeps, so it is stored, and normalised, in
that dtype. ``y`` normalises that rounded ``h`` in float32 and is rounded once
to the input dtype. ``rms_norm`` is the same with ``h = x``. The float64
references in :mod:`kernel_portfolio.reference` round at exactly these places.

Backward, with ``g = dy * weight`` (``g = dy`` without a weight):

```text
dh      = rstd * (g - h * rstd**2 * mean(g * h))
dx      = dh  (+ the upstream gradient of h, for residual_rms_norm;
               the residual gets the same gradient as x)
dweight = sum over rows of dy * h * rstd
```

``rstd`` (float32, one per row) is written by the forward pass and saved for
the backward when autograd records; the no-grad forward neither allocates nor
writes it (``STORE_RSTD`` false).
``dweight`` is deterministic: no atomics. Each backward program accumulates a
float32 partial ``dweight`` over a fixed set of rows (a few partial rows
per SM, :func:`_bwd_launch`), and a second kernel sums the partial rows in a
fixed order. In a peeled launch (below) a program's rows share one head, so
that a register of its partial ``dweight`` holds one column over all of them
(:func:`_partial_rows`).

Memory traffic for ``M`` rows of ``N`` elements of ``E`` bytes, leaving out
``rstd`` (4 bytes a row, written only by a forward that autograd records),
``weight`` and, in the backward, the float32 ``dweight`` partials (a few
rows of ``N`` per SM, written once and read once):

```text
plan           rms_norm fwd   residual fwd   bwd            bwd with dh
block          2*M*N*E        4*M*N*E        3*M*N*E        4*M*N*E
looped/split   3*M*N*E        5*M*N*E        5*M*N*E        6*M*N*E
```

* ``block``: a program holds a whole row in registers;
  every byte is read once and written once (forward: read ``x``
  (+ ``residual``), write ``y`` (+ ``h``); backward: read ``dy``, ``h``
  (+ ``dh``), write ``dx``).
* ``looped``: a program walks a row in chunks, first summing squares (and
  writing ``h``), then re-reading ``h`` (or ``x``) to write ``y``. The
  forward's first pass loads with ``evict_last`` and its second with
  ``evict_first`` (:data:`LOOPED_FIRST_PASS`, :data:`LOOPED_SECOND_PASS`):
  the L2 keeps the row for its reread, and drops it first once reread
  (``scripts/load_policy_ab.py`` timed it; the backward and the other plans
  keep the default).
* The block forward has a program per row
  (:func:`kernel_portfolio.plans.block_launches`); the looped forward's
  program ``p`` of ``P`` takes rows ``p, p + P, ...`` on a persistent grid
  (:func:`kernel_portfolio.plans.persistent_programs`).
  The block forward reads the weight after the row's reduction (fewer
  registers, more programs an SM), or with the row in launches of few rows
  (:data:`EARLY_W_ROWS_PER_SM`).
* ``split``: few wide rows; several programs share a row. A first kernel
  writes partial sums of squares, a second merges a row's partials in a fixed
  order and writes its slice of ``y``.
* Backward of ``looped``/``split``: a first kernel writes partial sums of
  ``g * h`` per (row, slice); the main kernel walks column chunks and, inside
  each, its rows, so that the partial ``dweight`` of a chunk stays in
  registers. ``dy`` and ``h`` are therefore read twice.
* Rows whose stride is not a multiple of 16 bytes (an odd width, or a
  multiple of 4 but not 8 half-precision columns) move the same bytes: the
  kernels peel each row into a head, a 16-byte aligned body and a tail
  (``PEEL``, :mod:`kernel_portfolio.ops.peel`), and every tensor of a launch
  shares the row's head; the block pieces, chunks and slices cover the
  widest body (``N // VEC * VEC`` columns, :func:`_body_width`), slice 0
  takes the head and tail. The weight and ``dweight`` are indexed by absolute
  column (head plus body column), so in a peeled launch the body's weight
  loads and partial ``dweight`` stores are not 16-byte aligned and move one
  element an instruction; the weight comes from L1/L2, a partial ``dweight``
  row is written once a program. A large peeled looped or split forward
  without a residual or full block forward (:data:`SHIFT_W_MIN_ELEMENTS`),
  or a large peeled backward (:data:`SHIFT_W_BWD_MIN_ELEMENTS`), first
  copies the weight into
  ``VEC`` rows, row ``h`` starting at column ``h`` (``_shift_weight_kernel``),
  and a row whose head is ``h`` reads its body's weight from row ``h``, in
  16-byte vectors. The partial ``dweight`` rows are ``N``
  padded to a multiple of 4 floats, so that the reduction reads 16-byte
  vectors at any ``N``. ``auto``'s looped forward of such rows with a weight
  and without a residual runs in at most :data:`UNALIGNED_FWD_WARPS` warps,
  and a row that fills :data:`FULL_BLOCK_FWD_MIN_FILL` of a full block is
  held in one (:func:`_forward_plan`); the backward keeps the plan's.

Specialisation, as in the other row operators. Compile-time values: the
dtypes, ``HAS_RESIDUAL``, ``HAS_WEIGHT``, ``HAS_DH``, ``STORE_RSTD``,
``ONE_CHUNK``, ``BLOCK``, ``TAIL`` and ``num_warps`` (fixed by the plan: a
block plan's row just past a power of two is held as a main block and a small
tail, :func:`kernel_portfolio.plans.block_pieces`), and ``VEC`` and
``PEEL`` (:func:`kernel_portfolio.ops.peel.row_vec`: the 16-byte vector width,
and whether rows not aligned to it are peeled into a head, an aligned body
and a tail). Runtime arguments that Triton is told not to
specialise (``do_not_specialize``): the row count (or a launch's first row),
the row width, the row strides (the partial ``dweight`` rows' too), the
chunks per split slice and the number of partial rows; ``eps`` is
a float, which Triton never specialises. Column strides keep Triton's default
specialisation (a stride of 1 compiles to contiguous vector loads). So a new
batch size reuses the compiled kernels; only ``plan="auto"`` switching between
the ``looped`` and ``split`` kernels for rows wider than the block limit
compiles the other kernel, once.

Three routes to one set of launchers
(:func:`kernel_portfolio.contracts.eager_route`). In eager code the public
functions call the launchers directly when autograd will not record, and
otherwise run autograd Functions of this module whose forward and backward
call them directly: the ``torch.ops`` dispatcher and its autograd wrapper cost
far more host time than a small kernel. Under ``torch.compile``, dispatch
modes and ``torch.func`` they go through ``kp::rms_norm``,
``kp::residual_rms_norm`` and ``kp::rms_norm_backward``, whose bodies are the
same code. Every route saves the same tensors and uses the same plan, so all
give the same bits.

Strides. Inputs of any strides are read in place through their row and
column strides whenever the leading dimensions collapse into one row stride;
otherwise :func:`kernel_portfolio.plans.as_rows` copies once. A strided
``weight`` is made contiguous (``N`` elements). Row offsets, and column
offsets times a column stride, are computed in int64.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import torch
import triton
import triton.language as tl
from torch.autograd.function import once_differentiable
from torch.library import triton_op

from kernel_portfolio import plan_rule, plans
from kernel_portfolio.contracts import (
    Replays,
    check_eps,
    check_same,
    check_tensor,
    device_guard,
    direct_launches,
    direct_route,
    eager_route,
    launchable,
    not_replayable,
    scratch,
)
from kernel_portfolio.ops.peel import body_offset, body_width, peel_cols, row_head, row_vec

#: Runtime arguments Triton must not specialise (see the module docstring).
_RUNTIME_ARGS = [
    "first_row",
    "n_rows",
    "n_cols",
    "ws_stride",
    "chunks_per_split",
    "n_parts",
    "n_dots",
    "stride_xm",
    "stride_rm",
    "stride_dym",
    "stride_hm",
    "stride_dhm",
    "stride_pm",
]
#: ``tl.load``'s ``eviction_policy`` for the two passes of a looped plan's
#: forward over a row (the ``_fwd_looped_kernel``'s ``FIRST`` and ``SECOND``; ``""``
#: is the hardware default): see the module docstring.
LOOPED_FIRST_PASS = "evict_last"
LOOPED_SECOND_PASS = "evict_first"

# ---------------------------------------------------------------------------
# Kernels
# ---------------------------------------------------------------------------
# Row pointers (``x_row``, ``h_row``, ...) point at a row's body, and ``cols``
# count from there (:mod:`kernel_portfolio.ops.peel`); ``w_ptr`` and the
# partial ``dweight`` rows are offset by the row's head, so that they too are
# indexed by body column. Without ``PEEL`` the head is 0 and the body the row.


@triton.jit
def _load_h(
    x_row,
    r_row,
    h_row,
    cols,
    mask,
    stride_xn,
    stride_rn,
    HAS_RESIDUAL: tl.constexpr,
    EVICT: tl.constexpr,
):
    """One chunk of ``h`` as float32; with a residual, also store ``h`` (input dtype)."""
    cols64 = cols.to(tl.int64)
    h = tl.load(x_row + cols64 * stride_xn, mask=mask, other=0.0, eviction_policy=EVICT)
    if HAS_RESIDUAL:
        r = tl.load(r_row + cols64 * stride_rn, mask=mask, other=0.0, eviction_policy=EVICT)
        h = (h.to(tl.float32) + r.to(tl.float32)).to(h_row.dtype.element_ty)
        tl.store(h_row + cols, h, mask=mask)
    return h.to(tl.float32)


@triton.jit
def _sum_squares(
    x_row,
    r_row,
    h_row,
    stride_xn,
    stride_rn,
    start,
    end,
    n_cols,
    HAS_RESIDUAL: tl.constexpr,
    BLOCK: tl.constexpr,
    EVICT: tl.constexpr,
    STEP: tl.constexpr,
):
    """First pass over the chunks in ``[start, end)``: the sum of ``h * h``.

    ``STEP`` chunks a step, their loads issued together; a chunk past ``end``
    is masked by a bound uniform over the chunk (16-byte loads kept).
    """
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for c0 in range(start, end, BLOCK * STEP):
        for u in tl.static_range(STEP):
            cols = c0 + u * BLOCK + tl.arange(0, BLOCK)
            mask = cols < n_cols
            if STEP > 1:
                mask = mask & (c0 + u * BLOCK < end)
            h = _load_h(x_row, r_row, h_row, cols, mask, stride_xn, stride_rn, HAS_RESIDUAL, EVICT)
            acc += h * h
    return tl.sum(acc, axis=0)


@triton.jit
def _reload_h(x_row, stride_xn, h_row, cols, mask, HAS_RESIDUAL: tl.constexpr, EVICT: tl.constexpr):
    """``h`` at ``cols`` as float32, re-read: from the ``h`` output (residual) or from ``x``."""
    if HAS_RESIDUAL:
        h = tl.load(h_row + cols, mask=mask, other=0.0, eviction_policy=EVICT)
    else:
        h = tl.load(
            x_row + cols.to(tl.int64) * stride_xn, mask=mask, other=0.0, eviction_policy=EVICT
        )
    return h.to(tl.float32)


@triton.jit
def _store_y(y_row, w_ptr, h, rstd, cols, mask, HAS_WEIGHT: tl.constexpr):
    """Store ``h * rstd`` (times the weight) at ``cols``; the weight is read here, late."""
    y = h * rstd
    if HAS_WEIGHT:
        y = y * tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_row + cols, y.to(y_row.dtype.element_ty), mask=mask)


@triton.jit
def _early_weight(w_ptr, cols, mask, HAS_WEIGHT: tl.constexpr, EARLY_W: tl.constexpr):
    """:func:`_load_weight` when the weight is read with the row (``EARLY_W``); else unread ones."""
    return _load_weight(w_ptr, cols, mask, HAS_WEIGHT and EARLY_W)


@triton.jit
def _store_y_early(
    y_row, w_ptr, w, h, rstd, cols, mask, HAS_WEIGHT: tl.constexpr, EARLY_W: tl.constexpr
):
    """:func:`_store_y`, or with ``EARLY_W`` the store of ``h * rstd * w`` (``w`` read before)."""
    if EARLY_W:
        tl.store(y_row + cols, (h * rstd * w).to(y_row.dtype.element_ty), mask=mask)
    else:
        _store_y(y_row, w_ptr, h, rstd, cols, mask, HAS_WEIGHT)


@triton.jit
def _weight_row(w_ptr, ws_ptr, head, ws_stride, VEC: tl.constexpr, SHIFT_W: tl.constexpr):
    """Where a row's body reads its weight: body column ``j`` is weight column ``head + j``.

    ``w_ptr + head``, which is not 16-byte aligned in a peeled row, or with
    ``SHIFT_W`` row ``head`` of the shifted copies (:func:`_shift_weight_kernel`),
    which is.
    """
    if SHIFT_W:
        return ws_ptr + head * (ws_stride // VEC * VEC)
    return w_ptr + head


@triton.jit
def _shift_weight_kernel(w_ptr, ws_ptr, n_cols, ws_stride, BLOCK: tl.constexpr, VEC: tl.constexpr):
    """Row ``h`` of ``ws`` (``VEC`` rows of ``ws_stride``) is the weight from column ``h`` on.

    Zeros past the weight's end; program ``(h, c)`` writes chunk ``c`` of row
    ``h``. The loads start ``h`` columns into the weight, so they move an
    element at a time; the stores move 16-byte vectors (``ws_stride`` is a
    multiple of ``VEC``).
    """
    shift = tl.program_id(0)
    stride = ws_stride // VEC * VEC
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    w = tl.load(w_ptr + shift + cols, mask=shift + cols < n_cols, other=0.0)
    tl.store(ws_ptr + shift * stride + cols, w, mask=cols < stride)


@triton.jit
def _normalise(
    x_row,
    stride_xn,
    h_row,
    w_ptr,
    y_row,
    rstd,
    start,
    end,
    n_cols,
    HAS_RESIDUAL: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    BLOCK: tl.constexpr,
    EVICT: tl.constexpr,
):
    """Second pass over ``[start, end)``, last chunk first: re-read ``h``, write ``y``.

    Last first: the chunks the first pass read last are the likeliest to still
    be in L2.
    """
    n_chunks = tl.cdiv(end - start, BLOCK)
    for c in range(n_chunks):
        cols = start + (n_chunks - 1 - c) * BLOCK + tl.arange(0, BLOCK)
        mask = cols < n_cols
        h = _reload_h(x_row, stride_xn, h_row, cols, mask, HAS_RESIDUAL, EVICT)
        _store_y(y_row, w_ptr, h, rstd, cols, mask, HAS_WEIGHT)


@triton.jit
def _slice(chunks_per_split, width, BLOCK: tl.constexpr):
    """Columns ``[start, end)`` of this program's slice (grid axis 1) of ``width`` columns.

    ``width`` is the widest body, ``n_cols // VEC * VEC`` (the row itself
    unless peeled; :func:`_body_width` on the host cuts the same): the same
    for every row, as a chunk loop whose bound changes row by row costs
    registers. Slices are whole chunks, so ``start`` is a multiple of
    ``BLOCK``: the compiler can prove every chunk aligned (16-byte vectors).
    The kernels mask each row's chunks with the row's own body width (a
    multiple of ``VEC``, so uniform over a vector): a peeled row's body may
    end inside a slice, or before it.
    """
    start = tl.program_id(1) * chunks_per_split * BLOCK
    return start, tl.minimum(start + chunks_per_split * BLOCK, width)


@triton.jit
def _merge(partials_ptr, n_partials, MAX_PARTIALS: tl.constexpr):
    """Sum a row's float32 partials as one vector: a fixed order, so deterministic."""
    idx = tl.arange(0, MAX_PARTIALS)
    return tl.sum(tl.load(partials_ptr + idx, mask=idx < n_partials, other=0.0), axis=0)


@triton.jit
def _fwd_row_in_registers(
    x_row,
    r_row,
    h_row,
    y_row,
    w_ptr,
    w_peel,
    head,
    n_body,
    n_cols,
    stride_xn,
    stride_rn,
    eps,
    HAS_RESIDUAL: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    BLOCK: tl.constexpr,
    TAIL: tl.constexpr,
    VEC: tl.constexpr,
    PEEL: tl.constexpr,
    EARLY_W: tl.constexpr,
):
    """Normalise one row held in registers (``BLOCK`` columns, then a ``TAIL``); return ``rstd``.

    The weight is read after the row's reduction, so it is not live across
    it: at 8192 columns and 16 warps that is 39 registers instead of 50 on
    sm_90 (three programs per SM instead of two), at 16384 columns 64 instead
    of 82 (two instead of one). ``EARLY_W`` reads it with the row instead,
    for launches whose programs an SM holds whatever their registers
    (:func:`_reads_weight_early`): its load then overlaps the row's, not
    waits for the reduction. A ``TAIL`` (not 0) is a second piece of the
    row's body after its first ``BLOCK`` columns
    (:func:`kernel_portfolio.plans.block_pieces`); ``PEEL`` adds the row's
    head and tail (``n_body`` body columns of ``n_cols``), whose weight is read
    at ``w_peel`` (``w_ptr`` is the body's, :func:`_weight_row`).
    """
    cols = tl.arange(0, BLOCK)
    mask = cols < n_body
    h = _load_h(x_row, r_row, h_row, cols, mask, stride_xn, stride_rn, HAS_RESIDUAL, "")
    w = _early_weight(w_ptr, cols, mask, HAS_WEIGHT, EARLY_W)
    ss = tl.sum(h * h, axis=0)
    if TAIL > 0:
        tail_cols = BLOCK + tl.arange(0, TAIL)
        tail_mask = tail_cols < n_body
        h_tail = _load_h(
            x_row, r_row, h_row, tail_cols, tail_mask, stride_xn, stride_rn, HAS_RESIDUAL, ""
        )
        w_tail = _early_weight(w_ptr, tail_cols, tail_mask, HAS_WEIGHT, EARLY_W)
        ss += tl.sum(h_tail * h_tail, axis=0)
    if PEEL:
        peel, peel_mask = peel_cols(head, n_body, n_cols, VEC)
        h_peel = _load_h(
            x_row, r_row, h_row, peel, peel_mask, stride_xn, stride_rn, HAS_RESIDUAL, ""
        )
        w_head = _early_weight(w_peel, peel, peel_mask, HAS_WEIGHT, EARLY_W)
        ss += tl.sum(h_peel * h_peel, axis=0)
    rstd = tl.rsqrt(ss / n_cols + eps)
    _store_y_early(y_row, w_ptr, w, h, rstd, cols, mask, HAS_WEIGHT, EARLY_W)
    if TAIL > 0:
        _store_y_early(
            y_row, w_ptr, w_tail, h_tail, rstd, tail_cols, tail_mask, HAS_WEIGHT, EARLY_W
        )
    if PEEL:
        _store_y_early(y_row, w_peel, w_head, h_peel, rstd, peel, peel_mask, HAS_WEIGHT, EARLY_W)
    return rstd


@triton.jit(do_not_specialize=_RUNTIME_ARGS)
def _fwd_block_kernel(
    x_ptr,
    r_ptr,
    w_ptr,
    ws_ptr,
    y_ptr,
    h_ptr,
    rstd_ptr,
    first_row,
    n_cols,
    ws_stride,
    stride_xm,
    stride_xn,
    stride_rm,
    stride_rn,
    eps,
    HAS_RESIDUAL: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    STORE_RSTD: tl.constexpr,
    BLOCK: tl.constexpr,
    TAIL: tl.constexpr,
    VEC: tl.constexpr,
    PEEL: tl.constexpr,
    SHIFT_W: tl.constexpr,
    EARLY_W: tl.constexpr,
):
    """Block plan: program ``p`` takes row ``first_row + p``, held in registers.

    A program per row (:func:`kernel_portfolio.plans.block_launches`).
    ``rstd_ptr`` is written only when ``STORE_RSTD``. The body reads its
    weight from the shifted copies when ``SHIFT_W`` (a full block,
    :func:`_shifts_weight`), else in place; with the row when ``EARLY_W``
    (:func:`_reads_weight_early`).
    """
    row64 = tl.program_id(0).to(tl.int64) + first_row  # row * stride can pass 2^31
    head = row_head(row64 * stride_xm, VEC, PEEL)
    rstd = _fwd_row_in_registers(
        x_ptr + body_offset(row64, stride_xm, head, VEC, PEEL),
        r_ptr + body_offset(row64, stride_rm, head, VEC, PEEL),
        h_ptr + body_offset(row64, n_cols, head, VEC, PEEL),
        y_ptr + body_offset(row64, n_cols, head, VEC, PEEL),
        _weight_row(w_ptr, ws_ptr, head, ws_stride, VEC, SHIFT_W),
        w_ptr + head,
        head,
        body_width(n_cols, head, VEC, PEEL),
        n_cols,
        stride_xn,
        stride_rn,
        eps,
        HAS_RESIDUAL,
        HAS_WEIGHT,
        BLOCK,
        TAIL,
        VEC,
        PEEL,
        EARLY_W,
    )
    if STORE_RSTD:
        tl.store(rstd_ptr + row64, rstd)


@triton.jit(do_not_specialize=_RUNTIME_ARGS)
def _fwd_looped_kernel(
    x_ptr,
    r_ptr,
    w_ptr,
    ws_ptr,
    y_ptr,
    h_ptr,
    rstd_ptr,
    n_rows,
    n_cols,
    ws_stride,
    stride_xm,
    stride_xn,
    stride_rm,
    stride_rn,
    eps,
    HAS_RESIDUAL: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    STORE_RSTD: tl.constexpr,
    BLOCK: tl.constexpr,
    ONE_CHUNK: tl.constexpr,
    VEC: tl.constexpr,
    PEEL: tl.constexpr,
    SHIFT_W: tl.constexpr,
    FIRST: tl.constexpr,
    SECOND: tl.constexpr,
):
    """Looped plan: program ``p`` of ``P`` takes rows ``p, p + P, ...``.

    The row loop is not software-pipelined (``num_stages=1``): a program
    re-reads its row from L2. ``ONE_CHUNK`` (``BLOCK >= n_cols``) keeps the
    row in registers (:func:`_fwd_row_in_registers`). Otherwise the row's
    body is walked twice, re-reading ``h`` from the ``h`` output (residual)
    or from ``x``; the first pass loads with the eviction policy ``FIRST``
    and the second with ``SECOND``. ``PEEL``: the row's head and tail, and
    their weight, are loaded (and ``h`` stored) before the first pass, so that
    their latency passes behind the body's loads instead of stalling the
    program between the passes, and their ``y`` is written before the second.
    ``rstd_ptr`` is written only when ``STORE_RSTD``.
    """
    width = n_cols // VEC * VEC  # the widest body: every row's chunk loops alike
    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0), num_stages=1):
        row64 = tl.cast(row, tl.int64)  # row * stride can pass 2^31
        head = row_head(row64 * stride_xm, VEC, PEEL)
        n_body = body_width(n_cols, head, VEC, PEEL)
        x_row = x_ptr + body_offset(row64, stride_xm, head, VEC, PEEL)
        r_row = r_ptr + body_offset(row64, stride_rm, head, VEC, PEEL)
        h_row = h_ptr + body_offset(row64, n_cols, head, VEC, PEEL)
        y_row = y_ptr + body_offset(row64, n_cols, head, VEC, PEEL)
        w_row = _weight_row(w_ptr, ws_ptr, head, ws_stride, VEC, SHIFT_W)
        if ONE_CHUNK:
            rstd = _fwd_row_in_registers(
                x_row,
                r_row,
                h_row,
                y_row,
                w_row,
                w_ptr + head,
                head,
                n_body,
                n_cols,
                stride_xn,
                stride_rn,
                eps,
                HAS_RESIDUAL,
                HAS_WEIGHT,
                BLOCK,
                0,
                VEC,
                PEEL,
                False,
            )
        else:
            if PEEL:
                peel, peel_mask = peel_cols(head, n_body, n_cols, VEC)
                h_peel = _load_h(
                    x_row, r_row, h_row, peel, peel_mask, stride_xn, stride_rn, HAS_RESIDUAL, ""
                )
                w_peel = _load_weight(w_ptr + head, peel, peel_mask, HAS_WEIGHT)
            ss = _sum_squares(
                x_row,
                r_row,
                h_row,
                stride_xn,
                stride_rn,
                0,
                width,
                n_body,
                HAS_RESIDUAL,
                BLOCK,
                FIRST,
                1,
            )
            if PEEL:
                ss += tl.sum(h_peel * h_peel, axis=0)
            rstd = tl.rsqrt(ss / n_cols + eps)
            if PEEL:  # its weight read before the first pass: stored as an early one
                _store_y_early(
                    y_row, w_ptr, w_peel, h_peel, rstd, peel, peel_mask, HAS_WEIGHT, True
                )
            if HAS_RESIDUAL:
                # The second pass re-reads h that other threads of this program stored.
                tl.debug_barrier()
            _normalise(
                x_row,
                stride_xn,
                h_row,
                w_row,
                y_row,
                rstd,
                0,
                width,
                n_body,
                HAS_RESIDUAL,
                HAS_WEIGHT,
                BLOCK,
                SECOND,
            )
        if STORE_RSTD:
            tl.store(rstd_ptr + row64, rstd)


@triton.jit(do_not_specialize=_RUNTIME_ARGS)
def _fwd_partial_kernel(
    x_ptr,
    r_ptr,
    h_ptr,
    ss_ptr,
    n_cols,
    chunks_per_split,
    stride_xm,
    stride_xn,
    stride_rm,
    stride_rn,
    HAS_RESIDUAL: tl.constexpr,
    BLOCK: tl.constexpr,
    VEC: tl.constexpr,
    PEEL: tl.constexpr,
    STEP: tl.constexpr,
):
    """Split plan, kernel 1: program ``(row, s)`` sums squares over slice ``s`` (and writes h).

    ``STEP`` chunks a step (:data:`FWD_SPLIT_STEP`). Slice 0 also takes a
    peeled row's head and tail.
    """
    row64 = tl.program_id(0).to(tl.int64)
    head = row_head(row64 * stride_xm, VEC, PEEL)
    n_body = body_width(n_cols, head, VEC, PEEL)
    x_row = x_ptr + body_offset(row64, stride_xm, head, VEC, PEEL)
    r_row = r_ptr + body_offset(row64, stride_rm, head, VEC, PEEL)
    h_row = h_ptr + body_offset(row64, n_cols, head, VEC, PEEL)
    start, end = _slice(chunks_per_split, n_cols // VEC * VEC, BLOCK)
    ss = _sum_squares(
        x_row,
        r_row,
        h_row,
        stride_xn,
        stride_rn,
        start,
        end,
        n_body,
        HAS_RESIDUAL,
        BLOCK,
        "",
        STEP,
    )
    if PEEL and tl.program_id(1) == 0:
        peel, peel_mask = peel_cols(head, n_body, n_cols, VEC)
        h_peel = _load_h(
            x_row, r_row, h_row, peel, peel_mask, stride_xn, stride_rn, HAS_RESIDUAL, ""
        )
        ss += tl.sum(h_peel * h_peel, axis=0)
    tl.store(ss_ptr + row64 * tl.num_programs(1) + tl.program_id(1), ss)


@triton.jit(do_not_specialize=_RUNTIME_ARGS)
def _fwd_split_kernel(
    x_ptr,
    w_ptr,
    ws_ptr,
    y_ptr,
    h_ptr,
    ss_ptr,
    rstd_ptr,
    n_cols,
    ws_stride,
    chunks_per_split,
    stride_xm,
    stride_xn,
    eps,
    HAS_RESIDUAL: tl.constexpr,
    HAS_WEIGHT: tl.constexpr,
    STORE_RSTD: tl.constexpr,
    BLOCK: tl.constexpr,
    VEC: tl.constexpr,
    PEEL: tl.constexpr,
    SHIFT_W: tl.constexpr,
    MAX_PARTIALS: tl.constexpr,
):
    """Split plan, kernel 2: merge the row's partial sums, write slice ``s`` of ``y``.

    Slice 0 also writes the row's ``rstd`` when ``STORE_RSTD``, and a peeled
    row's head and tail.
    """
    row64 = tl.program_id(0).to(tl.int64)
    splits = tl.num_programs(1)
    rstd = tl.rsqrt(_merge(ss_ptr + row64 * splits, splits, MAX_PARTIALS) / n_cols + eps)
    if STORE_RSTD and tl.program_id(1) == 0:  # a constexpr False drops the branch
        tl.store(rstd_ptr + row64, rstd)
    head = row_head(row64 * stride_xm, VEC, PEEL)
    n_body = body_width(n_cols, head, VEC, PEEL)
    x_row = x_ptr + body_offset(row64, stride_xm, head, VEC, PEEL)
    h_row = h_ptr + body_offset(row64, n_cols, head, VEC, PEEL)
    y_row = y_ptr + body_offset(row64, n_cols, head, VEC, PEEL)
    start, end = _slice(chunks_per_split, n_cols // VEC * VEC, BLOCK)
    _normalise(
        x_row,
        stride_xn,
        h_row,
        _weight_row(w_ptr, ws_ptr, head, ws_stride, VEC, SHIFT_W),
        y_row,
        rstd,
        start,
        end,
        n_body,
        HAS_RESIDUAL,
        HAS_WEIGHT,
        BLOCK,
        "",
    )
    if PEEL and tl.program_id(1) == 0:
        peel, peel_mask = peel_cols(head, n_body, n_cols, VEC)
        h_peel = _reload_h(x_row, stride_xn, h_row, peel, peel_mask, HAS_RESIDUAL, "")
        _store_y(y_row, w_ptr + head, h_peel, rstd, peel, peel_mask, HAS_WEIGHT)


@triton.jit
def _load_grad(dy_row, h_row, cols, mask, stride_dyn, stride_hn):
    """One chunk of ``dy`` and ``h``, in the input dtype."""
    cols64 = cols.to(tl.int64)
    dy = tl.load(dy_row + cols64 * stride_dyn, mask=mask, other=0.0)
    h = tl.load(h_row + cols64 * stride_hn, mask=mask, other=0.0)
    return dy, h


@triton.jit
def _load_grad_row(
    source, piece, row64, valid, VEC: tl.constexpr, TAIL: tl.constexpr, PEEL: tl.constexpr
):
    """Row ``row64`` of the backward: ``(dy, h, dy_tail, h_tail, dy_peel, h_peel, rstd)``.

    ``source`` is ``(dy_ptr, h_ptr, rstd_ptr, stride_dym, stride_dyn,
    stride_hm, stride_hn, head)`` (``head``: the row's) and ``piece`` the
    columns ``(cols, mask, tail_cols, tail_mask, peel, peel_mask)``. ``dy``
    and ``h`` in the input dtype (the tails 0.0 when ``TAIL`` is 0, the
    peel's when not ``PEEL``), ``rstd`` float32. Nothing is loaded unless
    ``valid``: the prefetch after a program's last row.
    """
    dy_ptr, h_ptr, rstd_ptr, stride_dym, stride_dyn, stride_hm, stride_hn, head = source
    cols, mask, tail_cols, tail_mask, peel, peel_mask = piece
    dy_row = dy_ptr + body_offset(row64, stride_dym, head, VEC, PEEL)
    h_row = h_ptr + body_offset(row64, stride_hm, head, VEC, PEEL)
    dy, h = _load_grad(dy_row, h_row, cols, mask & valid, stride_dyn, stride_hn)
    dy_tail, h_tail = 0.0, 0.0
    if TAIL > 0:
        dy_tail, h_tail = _load_grad(
            dy_row, h_row, tail_cols, tail_mask & valid, stride_dyn, stride_hn
        )
    dy_peel, h_peel = 0.0, 0.0
    if PEEL:
        dy_peel, h_peel = _load_grad(dy_row, h_row, peel, peel_mask & valid, stride_dyn, stride_hn)
    rstd = tl.load(rstd_ptr + row64, mask=valid, other=0.0)
    return dy, h, dy_tail, h_tail, dy_peel, h_peel, rstd


@triton.jit
def _load_weight(w_ptr, cols, mask, HAS_WEIGHT: tl.constexpr):
    """The weight at ``cols`` as float32, or ones without a weight (``g = dy``)."""
    w = tl.full(cols.shape, 1.0, tl.float32)
    if HAS_WEIGHT:
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    return w


@triton.jit
def _store_dx(
    g,
    h,
    rstd,
    mean_gh,
    dh_row,
    stride_dhn,
    dx_ptr,
    dx2_ptr,
    dx_off,
    cols,
    mask,
    HAS_DH: tl.constexpr,
    TWO_DX: tl.constexpr,
):
    """Store ``dx = rstd * (g - h * rstd**2 * mean(g * h))`` (+ ``dh``) at ``cols``."""
    dx = rstd * (g - h * (rstd * rstd * mean_gh))
    if HAS_DH:
        dh = tl.load(dh_row + cols.to(tl.int64) * stride_dhn, mask=mask, other=0.0)
        dx += dh.to(tl.float32)
    dx = dx.to(dx_ptr.dtype.element_ty)
    tl.store(dx_ptr + dx_off + cols, dx, mask=mask)
    if TWO_DX:
        tl.store(dx2_ptr + dx_off + cols, dx, mask=mask)


@triton.jit(do_not_specialize=_RUNTIME_ARGS)
def _bwd_dot_kernel(
    dy_ptr,
    h_ptr,
    w_ptr,
    ws_ptr,
    dot_ptr,
    n_cols,
    ws_stride,
    chunks_per_split,
    stride_dym,
    stride_dyn,
    stride_hm,
    stride_hn,
    HAS_WEIGHT: tl.constexpr,
    BLOCK: tl.constexpr,
    VEC: tl.constexpr,
    PEEL: tl.constexpr,
    SHIFT_W: tl.constexpr,
    STEP: tl.constexpr,
):
    """Looped/split backward, kernel 1: program ``(row, s)`` sums ``g * h`` over slice ``s``.

    ``STEP`` chunks a step (:data:`BWD_DOT_STEP`): their loads do not wait on
    one another's products. A chunk past the slice's end is masked by a bound
    uniform over the chunk, so the loads stay 16-byte vectors. Slice 0 also
    takes a peeled row's head and tail.
    """
    row64 = tl.program_id(0).to(tl.int64)
    head = row_head(row64 * stride_hm, VEC, PEEL)
    n_body = body_width(n_cols, head, VEC, PEEL)
    dy_row = dy_ptr + body_offset(row64, stride_dym, head, VEC, PEEL)
    h_row = h_ptr + body_offset(row64, stride_hm, head, VEC, PEEL)
    w_row = _weight_row(w_ptr, ws_ptr, head, ws_stride, VEC, SHIFT_W)
    start, end = _slice(chunks_per_split, n_cols // VEC * VEC, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for c0 in range(start, end, BLOCK * STEP):
        for u in tl.static_range(STEP):
            cols = c0 + u * BLOCK + tl.arange(0, BLOCK)
            mask = (cols < n_body) & (c0 + u * BLOCK < end)
            dy, h = _load_grad(dy_row, h_row, cols, mask, stride_dyn, stride_hn)
            dy, h = dy.to(tl.float32), h.to(tl.float32)
            if HAS_WEIGHT:
                dy = dy * tl.load(w_row + cols, mask=mask, other=0.0).to(tl.float32)
            acc += dy * h
    dot = tl.sum(acc, axis=0)
    if PEEL and tl.program_id(1) == 0:
        peel, peel_mask = peel_cols(head, n_body, n_cols, VEC)
        dy, h = _load_grad(dy_row, h_row, peel, peel_mask, stride_dyn, stride_hn)
        g = dy.to(tl.float32) * _load_weight(w_ptr + head, peel, peel_mask, HAS_WEIGHT)
        dot += tl.sum(g * h.to(tl.float32), axis=0)
    tl.store(dot_ptr + row64 * tl.num_programs(1) + tl.program_id(1), dot)


@triton.jit(do_not_specialize=_RUNTIME_ARGS)
def _bwd_kernel(
    dy_ptr,
    h_ptr,
    w_ptr,
    ws_ptr,
    rstd_ptr,
    dot_ptr,
    dh_ptr,
    dx_ptr,
    dx2_ptr,
    dw_part_ptr,
    n_rows,
    n_cols,
    ws_stride,
    chunks_per_split,
    n_dots,
    stride_dym,
    stride_dyn,
    stride_hm,
    stride_hn,
    stride_dhm,
    stride_dhn,
    stride_pm,
    HAS_WEIGHT: tl.constexpr,
    HAS_DH: tl.constexpr,
    TWO_DX: tl.constexpr,
    BLOCK: tl.constexpr,
    TAIL: tl.constexpr,
    ONE_CHUNK: tl.constexpr,
    VEC: tl.constexpr,
    PEEL: tl.constexpr,
    SHIFT_W: tl.constexpr,
    MAX_PARTIALS: tl.constexpr,
    PREFETCH: tl.constexpr,
    WEIGHT_EACH_ROW: tl.constexpr,
):
    """Backward: ``dx`` for every row, and one float32 partial ``dweight`` row per program.

    Program ``(p, s)`` of a ``(P, S)`` grid owns rows ``p, p + P, ...`` and the
    columns of slice ``s``. It walks its columns chunk by chunk and, inside a
    chunk, its rows, so the chunk's partial ``dweight`` stays in registers and
    is written once, to the program's partial row (``stride_pm`` apart).
    ``ONE_CHUNK`` (block plan) computes ``mean(g * h)`` from
    the row in registers; otherwise it merges the ``n_dots`` partials of
    ``_bwd_dot_kernel``. With ``PREFETCH`` the loads of a program's next row
    are issued before its current row's reduction, so they are in flight
    while it computes and stores. ``WEIGHT_EACH_ROW`` loads the weight's chunk
    for every row (from cache) instead of holding it across the rows, which
    frees registers a wide row needs. ``TWO_DX`` also stores ``dx`` at ``dx2_ptr``: the
    gradients of ``x`` and of ``residual`` are equal, and autograd needs two
    tensors (one written in the same pass costs a store, a copy later costs a
    load and a store).

    ``PEEL``: a program's rows share one head, as ``P`` is a multiple of
    ``VEC`` or the program has one row (:func:`_partial_rows`), so a register of
    the partial ``dweight`` holds one absolute column over all of them, and
    the weight's chunk is the same for all of them. Slice 0's first chunk
    also takes the rows' heads and tails (a small vector, masked off in the
    other chunks). Slice 0 writes zeros to the partial row's padding.
    """
    part = tl.program_id(0)
    n_parts = tl.num_programs(0)
    head = row_head(part.to(tl.int64) * stride_hm, VEC, PEEL)  # every row of the program's
    n_body = body_width(n_cols, head, VEC, PEEL)
    w_row = _weight_row(w_ptr, ws_ptr, head, ws_stride, VEC, SHIFT_W)
    start, end = _slice(chunks_per_split, n_cols // VEC * VEC, BLOCK)
    if PEEL:
        end = tl.maximum(end, start + 1)  # slice 0's chunk even for a row narrower than VEC
    for c0 in range(start, end, BLOCK):
        cols = c0 + tl.arange(0, BLOCK)
        mask = cols < n_body
        if not WEIGHT_EACH_ROW:
            w = _load_weight(w_row, cols, mask, HAS_WEIGHT)
        dw = tl.zeros([BLOCK], dtype=tl.float32)
        tail_cols, tail_mask = cols, mask  # unused unless TAIL > 0
        if TAIL > 0:
            tail_cols = c0 + BLOCK + tl.arange(0, TAIL)
            tail_mask = tail_cols < n_body
            w_tail = _load_weight(w_row, tail_cols, tail_mask, HAS_WEIGHT)
            dw_tail = tl.zeros([TAIL], dtype=tl.float32)
        peel, peel_mask = cols, mask  # unused unless PEEL
        if PEEL:
            peel, peel_mask = peel_cols(head, n_body, n_cols, VEC)
            peel_mask = peel_mask & (c0 == 0)  # once a row: slice 0's first chunk
            w_peel = _load_weight(w_ptr + head, peel, peel_mask, HAS_WEIGHT)
            dw_peel = tl.zeros([2 * VEC], dtype=tl.float32)
        # With PREFETCH the loop loads row + n_parts and works on the row loaded
        # one iteration earlier (the first before the loop); without, row itself.
        ahead = n_parts if PREFETCH else 0
        source = (dy_ptr, h_ptr, rstd_ptr, stride_dym, stride_dyn, stride_hm, stride_hn, head)
        piece = (cols, mask, tail_cols, tail_mask, peel, peel_mask)
        if PREFETCH:
            loaded = _load_grad_row(
                source, piece, tl.cast(part, tl.int64), part < n_rows, VEC, TAIL, PEEL
            )
        for row in tl.range(part, n_rows, n_parts, num_stages=1):
            row64 = tl.cast(row, tl.int64)
            valid = row64 + ahead < n_rows
            current = _load_grad_row(source, piece, row64 + ahead, valid, VEC, TAIL, PEEL)
            if PREFETCH:
                current, loaded = loaded, current
            dy, h, dy_tail, h_tail, dy_peel, h_peel, rstd = current
            dy, h = dy.to(tl.float32), h.to(tl.float32)
            if PEEL:
                dy_peel, h_peel = dy_peel.to(tl.float32), h_peel.to(tl.float32)
            if WEIGHT_EACH_ROW:
                w = _load_weight(w_row, cols, mask, HAS_WEIGHT)
            if ONE_CHUNK:
                gh = tl.sum(dy * w * h, axis=0)
                if TAIL > 0:
                    dy_tail, h_tail = dy_tail.to(tl.float32), h_tail.to(tl.float32)
                    gh += tl.sum(dy_tail * w_tail * h_tail, axis=0)
                if PEEL:
                    gh += tl.sum(dy_peel * w_peel * h_peel, axis=0)
                mean_gh = gh / n_cols
            else:
                mean_gh = _merge(dot_ptr + row64 * n_dots, n_dots, MAX_PARTIALS) / n_cols
            dh_row = dh_ptr + body_offset(row64, stride_dhm, head, VEC, PEEL)
            dx_off = body_offset(row64, n_cols, head, VEC, PEEL)
            _store_dx(
                dy * w,
                h,
                rstd,
                mean_gh,
                dh_row,
                stride_dhn,
                dx_ptr,
                dx2_ptr,
                dx_off,
                cols,
                mask,
                HAS_DH,
                TWO_DX,
            )
            if HAS_WEIGHT:
                dw += dy * h * rstd
            if TAIL > 0:
                _store_dx(
                    dy_tail * w_tail,
                    h_tail,
                    rstd,
                    mean_gh,
                    dh_row,
                    stride_dhn,
                    dx_ptr,
                    dx2_ptr,
                    dx_off,
                    tail_cols,
                    tail_mask,
                    HAS_DH,
                    TWO_DX,
                )
                if HAS_WEIGHT:
                    dw_tail += dy_tail * h_tail * rstd
            if PEEL:
                _store_dx(
                    dy_peel * w_peel,
                    h_peel,
                    rstd,
                    mean_gh,
                    dh_row,
                    stride_dhn,
                    dx_ptr,
                    dx2_ptr,
                    dx_off,
                    peel,
                    peel_mask,
                    HAS_DH,
                    TWO_DX,
                )
                if HAS_WEIGHT:
                    dw_peel += dy_peel * h_peel * rstd
        if HAS_WEIGHT:
            # Same stride, now visibly a multiple of 4: 16-byte float32 rows (_backward).
            dw_row = dw_part_ptr + part.to(tl.int64) * (stride_pm // 4 * 4)
            tl.store(dw_row + head + cols, dw, mask=mask)
            if TAIL > 0:
                tl.store(dw_row + head + tail_cols, dw_tail, mask=tail_mask)
            if PEEL:
                tl.store(dw_row + head + peel, dw_peel, mask=peel_mask)
    if HAS_WEIGHT:  # the padding of the partial row, which _dw_reduce_kernel reads: zeros
        pad = n_cols + tl.arange(0, 4)
        pad_row = dw_part_ptr + part.to(tl.int64) * stride_pm
        tl.store(pad_row + pad, tl.zeros([4], tl.float32), mask=(pad < stride_pm) & (start == 0))


@triton.jit(do_not_specialize=_RUNTIME_ARGS)
def _dw_reduce_kernel(
    part_ptr,
    dw_ptr,
    n_parts,
    n_cols,
    stride_pm,
    BLOCK_P: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """``dweight = sum of the n_parts partial rows``, in a fixed order, in float32.

    The partial rows are ``stride_pm`` apart, ``n_cols`` padded to a multiple
    of 4 (16 bytes). They are read to that width, padding (zeros written by
    :func:`_bwd_kernel`) included, so the loads are 16-byte vectors at any
    ``n_cols``; the first ``n_cols`` columns are stored.
    """
    stride_pm = stride_pm // 4 * 4
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for p0 in range(0, n_parts, BLOCK_P):
        parts = p0 + tl.arange(0, BLOCK_P)
        offs = parts.to(tl.int64)[:, None] * stride_pm + cols[None, :]
        mask = (parts < n_parts)[:, None] & (cols < stride_pm)[None, :]
        acc += tl.sum(tl.load(part_ptr + offs, mask=mask, other=0.0), axis=0)
    tl.store(dw_ptr + cols, acc.to(dw_ptr.dtype.element_ty), mask=cols < n_cols)


# ---------------------------------------------------------------------------
# Launchers
# ---------------------------------------------------------------------------

#: The backward's launch: its warps and its programs (hence float32 partial
#: ``dweight`` rows) per SM, see :func:`_bwd_launch`. The narrow-row backward
#: is latency-bound: with two programs per SM, 32768x1024 float16 reached 38% of
#: copy, with eight 70% (``results/h200/checks/rms-bwd-ab-20261201T0620Z.log``).
#: Up to ``BWD_LIGHT_ELEMS`` columns a thread, the backward takes at most 64
#: registers a thread on sm_90 (``ptxas -v``), and ``BWD_WARPS_PER_SM`` warps
#: reside per SM; more columns a thread take 109-113 registers, and only
#: ``BWD_HEAVY_WARPS_PER_SM`` warps reside (more programs than reside would only
#: add partial rows). Each SM gets at least ``BWD_PROGRAMS_PER_SM`` programs.
BWD_LIGHT_ELEMS = 8
#: Most warps of a light program: at 16 warps a light program took 94
#: registers (a narrow looped row, ``dh``) or spilled under the cap of 64
#: (4x32769 in chunks of 4096 columns), so from 16 warps a program counts as
#: heavy whatever its columns a thread.
BWD_LIGHT_MAX_WARPS = 8
BWD_WARPS_PER_SM = 32
BWD_HEAVY_WARPS_PER_SM = 16
BWD_PROGRAMS_PER_SM = 2
#: Fewest warps of a backward program: the forward's narrow rows take one or
#: two (:func:`kernel_portfolio.plans.warps_for`), the backward holds four
#: values a column and takes at least four.
BWD_MIN_WARPS = 4
#: Up to ``BWD_PREFETCH_BYTES`` bytes a thread of each row it works on
#: (``dy`` and ``h``, and ``dh`` for the residual RMSNorm; 0: never), the
#: backward's row loop loads a program's next row (``dy``, ``h``, ``rstd``)
#: before it reduces the current one (the kernel's ``PREFETCH``). The loads in
#: flight cost registers, so the launch also caps each thread's registers at
#: what the programs it counts on per SM leave (``maxnreg``; 128 for a heavy
#: program). On sm_90 (``ptxas -v``) the cap holds them without spilling up to
#: 96 bytes: 8192 float16 columns and 16 warps take 119 (123 with ``dh``),
#: 4104 float16 and 8 warps 128 (163 uncapped); float32 16 columns a thread
#: would spill (128 bytes: 20 with ``dh``). A light program with the prefetch
#: takes 72-80 registers (1024 columns, 4 warps), so ``BWD_PREFETCH_WARPS_PER_SM``
#: warps of it reside. A split plan never prefetches: its few rows leave a
#: program one or two, and the prefetch would only cost the residency (on the
#: H200 64x131072 float16 ran 12-15% slower with it). Nor does a heavy
#: program of peeled rows with ``dh``: the next row's head and tail of three
#: tensors take it past the cap (at 96 bytes, 50257 and 30522 columns, it
#: spilled 8 and 4 bytes a thread), and on the H100 the residual RMSNorm's
#: backward at 4096 and 16384 rows of 50257 and 51865 bfloat16 columns ran in
#: 0.90-0.91 of the time without it, at 30522 in 0.96-0.97, while the aligned
#: neighbours' times did not move
#: (``results/h100-80gb-hbm3/checks/rows-unaligned-ab-20261206T2248Z.log``).
BWD_PREFETCH_BYTES = 96
BWD_PREFETCH_WARPS_PER_SM = 24
#: Most columns a thread of one chunk where the backward walks a row in several
#: (looped and split plans): the plan's block if it holds no more, else half of
#: it, or a quarter. The forward's looped chunks hold 32; in the backward
#: (``dy``, ``h``, the weight and its float32 partial a column) 8 warps took 190
#: registers a thread on sm_90 (``ptxas -v``, float16: one program an SM),
#: float32 at 16 warps spilled 120 bytes (1680 with ``dh``).
BWD_CHUNK_ELEMS = 16
#: Up to ``BWD_WEIGHT_HELD_ELEMS`` columns a thread a backward program holds
#: its weight chunk (float32) across its rows; a wider row (a block plan's 32
#: columns a thread, float16 rows of 8193-16384 columns) loads it again for
#: every row, from cache. On sm_90 (``ptxas -v``) 4096x12288 float16 then
#: spills 44 bytes a thread instead of 168 (80 instead of 196 with ``dh``).
BWD_WEIGHT_HELD_ELEMS = 16
#: Chunks a step of the looped and split backward's first pass
#: (``_bwd_dot_kernel``'s ``STEP``): two in flight a program where one would
#: leave a split program a memory latency a chunk, as the row sum's split
#: plan did (``results/h200/checks/revision-ab-row-sum-20261203T1653Z.log``).
BWD_DOT_STEP = 2
#: Most chunks a program of the looped and split backward's first pass
#: (``_bwd_dot_kernel``), which slices its rows apart from the backward's
#: single chunks (:func:`_bwd_slices`): in slices of two, then four chunks
#: while the pass keeps a program an SM (:func:`_dot_slices`). A program a
#: chunk starts and ends with one memory latency; on the H200 64x131072
#: float16 ran 43.4 us in slices of one chunk, 41.6 of two, 40.0 of four, and
#: 4x32769 (68 programs) 12.5, 12.8 and 14.0
#: (``results/h200/checks/rms-bwd-ab-20261204T0516Z.log``).
BWD_DOT_CHUNKS = 4
#: Chunks a step of the split forward's first pass (``_fwd_partial_kernel``):
#: two, so that a program of several chunks has two chunks' loads in flight
#: (64x131072 bfloat16 forward 20.03 -> 19.22 us, with a residual 28.64 ->
#: 27.90; ``results/h200/checks/revision-ab-rms-split-step-20261204T0517Z.log``).
FWD_SPLIT_STEP = 2
#: Elements per tile of the ``dweight`` reduction, and its warps.
REDUCE_TILE = 4096
REDUCE_NUM_WARPS = 4


class BwdLaunch(NamedTuple):
    """How :func:`_bwd_launch` runs the backward kernel."""

    #: Columns of a chunk (the kernels' ``BLOCK``) and of a block plan's tail.
    block: int
    tail: int
    #: Warps of a program.
    warps: int
    #: Programs launched per SM: at least ``BWD_PROGRAMS_PER_SM``.
    per_sm: int
    #: Programs an SM holds at once (the register cap below lets them): a wave
    #: is this many a SM.
    resident: int
    #: Whether a program loads its next row before it reduces the current one.
    prefetch: bool
    #: Registers a thread may take (``maxnreg``): what lets the programs the
    #: rule counts on reside together on an SM of 65536.
    max_registers: int
    #: Whether a program loads the weight for every row instead of holding it.
    weight_each_row: bool


def _bwd_launch(
    plan: plans.RowPlan,
    n_cols: int,
    elem_bytes: int,
    has_dh: bool,
    width: int | None = None,
    peel: bool = False,
) -> BwdLaunch:
    """The backward kernels' launch under ``plan`` (``has_dh``: residual RMSNorm).

    ``width``: the widest body of a row (:func:`_body_width`; ``n_cols`` when
    not given). ``peel``: the rows are peeled (:func:`kernel_portfolio.ops.peel.row_vec`).

    A block plan's backward takes the warps of its main block
    (:func:`kernel_portfolio.plans.block_pieces`) when the row derives fewer
    (a row of 7000 float16 columns in an 8192 block: 16 warps, not 8), and at
    least ``BWD_MIN_WARPS``; other plans walk their rows in chunks of at most
    ``BWD_CHUNK_ELEMS`` columns a thread. The columns a thread holds set the
    programs that reside per SM, the prefetch of the next row, the register cap
    that lets them reside, and whether the weight is held across rows (module
    constants above).
    """
    block, tail = _pieces(n_cols, plan, n_cols if width is None else width)
    warps = plan.num_warps
    if plan.kind == "block":
        warps = max(warps, plans.warps_for(block, elem_bytes))
    warps = max(BWD_MIN_WARPS, warps)
    if plan.kind != "block":
        while block > BWD_CHUNK_ELEMS * 32 * warps:
            block //= 2
    per_thread = (block + tail) / (32 * warps)
    light = per_thread <= BWD_LIGHT_ELEMS and warps <= BWD_LIGHT_MAX_WARPS
    prefetch = plan.kind != "split" and (2 + has_dh) * per_thread * elem_bytes <= BWD_PREFETCH_BYTES
    prefetch = prefetch and (light or not (peel and has_dh))
    if light:
        resident = (BWD_PREFETCH_WARPS_PER_SM if prefetch else BWD_WARPS_PER_SM) // warps
    else:
        resident = BWD_HEAVY_WARPS_PER_SM // warps
    resident = max(1, resident)
    max_registers = min(255, 65536 // (32 * warps * resident) // 8 * 8)
    per_sm = max(BWD_PROGRAMS_PER_SM, resident)
    weight_each_row = block > BWD_WEIGHT_HELD_ELEMS * 32 * warps
    return BwdLaunch(block, tail, warps, per_sm, resident, prefetch, max_registers, weight_each_row)


def _body_width(n_cols: int, vec: int, peel: bool) -> int:
    """The widest body of a row: ``n_cols``, or peeled ``n_cols // vec * vec`` (at least 1).

    A peeled row's body is narrower by its head and tail, so the launch's
    pieces, chunks and slices follow this width (a row of fewer than ``vec``
    columns, all head and tail, keeps one column's worth of them).
    """
    return max(1, n_cols // vec * vec) if peel else n_cols


def _pieces(n_cols: int, plan: plans.RowPlan, width: int) -> tuple[int, int]:
    """``(BLOCK, TAIL)`` of the kernels: a block plan's pieces, else ``(plan.block, 0)``.

    The pieces (:func:`kernel_portfolio.plans.block_pieces`) cover ``width``
    columns, the widest body (:func:`_body_width`): a peeled row of 4097 or
    4100 float16 columns is a main block of 4096 and no tail, the columns past
    it falling in the peel. On sm_90 that took the backward's spills from 20
    and 40 bytes a thread to none.
    """
    if plan.kind != "block":
        return plan.block, 0
    main, tail = plans.block_pieces(n_cols, plan.block)
    if tail and width <= main:
        return main, 0
    return plans.block_pieces(width, plan.block) if tail else (main, tail)


def _split(n_cols: int, plan: plans.RowPlan) -> tuple[int, int]:
    """``(chunks per slice, slices per row)``: one slice, the whole row, unless split."""
    if plan.kind != "split":
        return plans.cdiv(n_cols, plan.block), 1
    return plans.split_segments(n_cols, plan)


def _bwd_slices(n_cols: int, plan: plans.RowPlan, block: int, programs: int) -> tuple[int, int]:
    """The backward's ``(chunks per slice, slices per row)`` in chunks of ``block`` columns.

    A block plan keeps its one slice, the whole row. A looped or split row is
    sliced into single chunks, up to ``programs`` and ``plans.MAX_SPLITS``
    slices: a program owns a slice of every ``P``-th row and writes one
    float32 partial ``dweight`` row for it, so with ``S`` slices a row there
    are about ``P = programs / S`` partial rows (:func:`_partial_rows`). With
    the forward plan's slices (one or a few a row) 64x131072 took 64 partial
    rows, as many bytes as ``dy``, written and read again; in single chunks
    17 (rounded up then), and its backward ran 56.2 -> 43.3 us
    (``results/h200/checks/rms-bwd-ab-20261203T2037Z.log``).
    """
    if plan.kind == "block":
        return _split(n_cols, plan)
    n_chunks = plans.cdiv(n_cols, block)
    chunks_per_split = plans.cdiv(n_chunks, min(n_chunks, programs, plans.MAX_SPLITS))
    return chunks_per_split, plans.cdiv(n_chunks, chunks_per_split)


def _dot_slices(
    n_rows: int, n_cols: int, block: int, chunks_per_split: int, sms: int
) -> tuple[int, int]:
    """The backward's first pass: ``(chunks per slice, slices per row)``.

    From the backward's ``chunks_per_split``, twice the chunks a slice while
    that stays within ``BWD_DOT_CHUNKS`` and the pass keeps at least ``sms``
    programs.
    """
    n_chunks = plans.cdiv(n_cols, block)
    per_slice = chunks_per_split
    while 2 * per_slice <= BWD_DOT_CHUNKS and n_rows * plans.cdiv(n_chunks, 2 * per_slice) >= sms:
        per_slice *= 2
    return per_slice, plans.cdiv(n_chunks, per_slice)


def _partial_rows(
    n_rows: int, n_split: int, launch: BwdLaunch, sms: int, vec: int, peel: bool
) -> int:
    """The backward's programs a slice, ``P``: hence its partial ``dweight`` rows.

    About ``launch.per_sm * sms`` programs over the ``n_split`` slices, at
    most one a row: the count that fits within them or the next up (rounded
    to a multiple of ``vec`` when peeled, below), whichever takes fewer
    waves times rows a program (``launch.resident`` programs an SM a wave),
    the larger on a tie. Always rounding up put 266 programs on 264 places
    at 4096x50256 (7 slices), and the two left over ran alone as one more
    wave. A peeled launch (``peel``) takes a multiple of ``vec`` (at least
    ``vec``) or every row: row ``r`` starts ``r * stride`` elements into its
    tensor, so program ``p``'s rows ``p, p + P, ...`` then start the same
    number of columns past a 16-byte boundary, share one head, and add their
    ``dweight`` into the same registers (:func:`_bwd_kernel`), in a fixed
    order. Where ``P`` would be below ``vec`` (2^20 + 1 columns in 129
    slices: 3) the partial rows grow to ``vec``: 8 float32 rows written and
    read are 64 bytes a column, against 6 a column a row of 16-bit ``dy``,
    ``h`` and ``dx`` (4% more at 256 rows, 17% at 64).
    """
    unit = vec if peel else 1
    programs = launch.per_sm * sms
    below = max(unit, programs // n_split // unit * unit)
    above = plans.cdiv(plans.cdiv(programs, n_split), unit) * unit
    wave = launch.resident * sms

    def cost(parts: int) -> tuple[int, int]:
        return plans.cdiv(parts * n_split, wave) * plans.cdiv(n_rows, parts), -parts

    return min(min(n_rows, below), min(n_rows, above), key=cost)


#: Least ``rows * columns`` of a peeled RMSNorm forward (no residual, looped or
#: split plan; or a full block) for which the weight is first copied into ``VEC`` rows, each
#: shifted by one more column (:func:`_shifted_weight`), so that every row's
#: body reads its weight in 16-byte vectors. The copy is one more launch (about
#: 2-3 us) and ``VEC`` weights of bytes; the gain is a row's worth of narrow
#: weight loads on every row. On the H100 (bfloat16, cold L2,
#: ``results/h100-80gb-hbm3/checks/shift-weight-ab-20261205T1737Z.log``) the
#: copies took 9-11% off the forward at 4096 and 16384 rows of 30522 and 50257
#: columns and 4% at 512x30522 (15.6 M elements), and cost 1-45% below 5 M
#: elements. Where they gain nothing they stay off: the block plan (4097
#: columns: 1.5-3% slower at 4096 and 16384 rows, already within 5% of its
#: aligned neighbour's bandwidth) and the looped residual forward (0.96-1.05
#: of without: its two inputs and two outputs dwarf the weight's loads). A
#: full block (wider than ``plan_rule.MAX_BLOCK_BYTES``) reads them with or
#: without a residual: in the A/B of :data:`FULL_BLOCK_FWD_MIN_FILL` its peeled
#: rows ran 4-11% slower without them (RMSNorm, 32 warps) and 7-10% slower
#: with a residual (16 warps), at 20001 to 32001 columns.
SHIFT_W_MIN_ELEMENTS = 1 << 23
#: The same for the backward (any plan, with or without a residual): the copies
#: took 5-6% off 4096 and 16384 rows of 50257 columns and 2% off 4096x151937,
#: changed nothing at 30522 columns, and cost 2-3% at 512x30522 and
#: 132x151937 (15.6 M and 20 M elements; same log).
SHIFT_W_BWD_MIN_ELEMENTS = 1 << 25
#: Columns a program of :func:`_shift_weight_kernel` copies.
SHIFT_W_BLOCK = 1024


def _shifts_weight(peel: bool, weight: torch.Tensor | None, n_rows, n_cols, least: int) -> bool:
    """Whether a launch of ``n_rows x n_cols`` reads the weight's shifted copies.

    Peeled rows with a weight, at least ``least`` elements of them
    (:data:`SHIFT_W_MIN_ELEMENTS`, :data:`SHIFT_W_BWD_MIN_ELEMENTS`). A
    symbolic size (``torch.compile`` with dynamic shapes) reads the weight in
    place, so that the graph does not guard on the row count.
    """
    sizes_known = type(n_rows) is int and type(n_cols) is int
    return peel and weight is not None and sizes_known and n_rows * n_cols >= least


#: The block plan's forward reads the weight with the row (``EARLY_W``) in
#: launches of at most this many rows an SM: programs that fit on their SMs
#: whatever their registers, where the weight's load read late only waits
#: behind the reduction. From the A/B of late against early at 1 to 1056 rows
#: (``results/h100-80gb-hbm3/checks/early-weight-ab-20261206T0152Z.log``; its
#: script ran on an experiment's branch and was not kept).
EARLY_W_ROWS_PER_SM = 1


def _reads_weight_early(weight: torch.Tensor | None, n_rows, sm_count: int) -> bool:
    """Whether a block plan's forward of ``n_rows`` rows reads the weight with the row.

    A symbolic row count (``torch.compile`` with dynamic shapes) reads it
    late, so that the graph does not guard on the row count.
    """
    return weight is not None and type(n_rows) is int and n_rows <= EARLY_W_ROWS_PER_SM * sm_count


def _shifted_weight(weight: torch.Tensor, n_cols: int, vec: int) -> tuple[torch.Tensor, int]:
    """``VEC`` copies of the weight, row ``h`` starting at column ``h``, and their row stride.

    A peeled row whose head is ``h`` reads body column ``j``'s weight at
    column ``h + j``; in row ``h`` of the copies that is column ``j``, 16-byte
    aligned wherever the body is. The row stride is ``n_cols`` rounded up to
    a multiple of ``vec``, so every row starts on a 16-byte boundary.
    """
    ws_stride = plans.cdiv(n_cols, vec) * vec
    ws = scratch((vec, ws_stride), weight.dtype, weight.device)
    grid = (vec, plans.cdiv(ws_stride, SHIFT_W_BLOCK))
    launchable(_shift_weight_kernel)[grid](
        weight, ws, n_cols, ws_stride, BLOCK=SHIFT_W_BLOCK, VEC=vec
    )
    return ws, ws_stride


#: Most warps of ``auto``'s looped forward over rows not 16 bytes apart, with a
#: weight and no residual (:func:`_forward_plan`). On the H100 (the A/B of the
#: plan's warps against half and a quarter of them at 132 to 16384 rows of
#: 30522 to 151937 columns, both half dtypes:
#: ``results/h100-80gb-hbm3/checks/shift-warps-ab-20261206T0748Z.log``; the
#: script: ``git show cdee06a:scripts/shift_warps_ab.py``) the looped plans of
#: 16384 columns ran 2-13% faster in 8 warps than in 16 at every row count of
#: 50257 to 151937 columns, with the weight read from its shifted copies or in
#: place, and the plans of 8192 columns 4-16% slower in 4 warps than in 8.
#: The chunk-rules sweep timed the same at 1024 rows of 32769 and 50257
#: columns, and 16 warps faster at aligned widths.
UNALIGNED_FWD_WARPS = 8


#: ``auto``'s forwards (:func:`_forward_plan`) hold a row of up to
#: ``plan_rule.FULL_BLOCK_MAX_BYTES`` in one block where it fills at least this
#: share of the block, below ``plan_rule.FULL_BLOCK_MIN_FILL`` (which the
#: softmax forward sets): looped, they read the row twice. On the H100
#: (bfloat16, 4096 and 16384 rows, cold L2:
#: ``results/h100-80gb-hbm3/checks/wide-norm-ab-20261207T0350Z.log``; the
#: script: ``git show 7e762e2:scripts/wide_norm_ab.py``) one block of 32768
#: columns, peeled rows reading the weight's shifted copies, beat the looped
#: plan at every width timed from 24576 columns (75% full) up, with and
#: without a residual and at odd widths (the RMSNorm forward in 0.80-0.92 of
#: the looped plan's time at 24577 and 30522 columns), and ran level with it
#: (RMSNorm) or faster (residual) at 20000 and 20001 (61%).
FULL_BLOCK_FWD_MIN_FILL = 5 / 8
#: Warps of such a block in the forward without a residual (same log): 32
#: beat 16 at every odd width (at 20001 columns by 14-15%) and were level
#: or up to 3% faster at the aligned ones. With a residual the plan's 16 were
#: level with 32.
FULL_BLOCK_FWD_WARPS = 32


def _forward_plan(
    x: torch.Tensor, weight: torch.Tensor | None, plan: str | plans.RowPlan, has_residual: bool
) -> plans.RowPlan:
    """A forward's plan: ``plans.choose_for``, with ``auto``'s full blocks and forward warps.

    ``auto`` holds a row of a full block (wider than
    ``plan_rule.MAX_BLOCK_BYTES``, at most ``plan_rule.FULL_BLOCK_MAX_BYTES``)
    that fills at least :data:`FULL_BLOCK_FWD_MIN_FILL` of it in one block,
    unless its rows are few enough to split; without a residual the block
    runs in :data:`FULL_BLOCK_FWD_WARPS` warps. ``auto``'s looped plan of
    rows whose width is not a multiple of a 16-byte vector (the peeled rows
    of contiguous inputs), with a weight and no residual, takes at most
    :data:`UNALIGNED_FWD_WARPS` warps. The backward keeps
    ``plans.choose_for``'s plan. A forced plan (a kind or a
    :class:`~kernel_portfolio.plans.RowPlan`) is launched as given, and so is
    a symbolic width (``torch.compile`` with dynamic shapes), so that the
    graph does not guard on it.
    """
    chosen = plans.choose_for(x, plan)
    n_cols = x.shape[-1]
    if plan != "auto" or type(n_cols) is not int or chosen.kind == "split":
        return chosen
    width_bytes = (1 << (n_cols - 1).bit_length()) * x.element_size()
    if (
        plan_rule.MAX_BLOCK_BYTES < width_bytes <= plan_rule.FULL_BLOCK_MAX_BYTES
        and n_cols * x.element_size() >= FULL_BLOCK_FWD_MIN_FILL * width_bytes
    ):
        block = plans.choose_for(x, "block")
        if has_residual:
            return block
        return dataclasses.replace(block, num_warps=FULL_BLOCK_FWD_WARPS)
    if (
        not has_residual
        and weight is not None
        and chosen.kind == "looped"
        and chosen.num_warps > UNALIGNED_FWD_WARPS
        and n_cols * x.element_size() % 16
    ):
        return dataclasses.replace(chosen, num_warps=UNALIGNED_FWD_WARPS)
    return chosen


def _forward(
    x: torch.Tensor,
    residual: torch.Tensor | None,
    weight: torch.Tensor | None,
    eps: float,
    plan: plans.RowPlan,
    y: torch.Tensor,
    h: torch.Tensor | None,
    rstd: torch.Tensor | None,
) -> None:
    """Write ``y``, ``h`` (with a residual) and ``rstd`` (when given) for a 2-D ``x``.

    ``x`` and ``residual`` (``x``'s shape) may have any strides; ``weight`` is
    contiguous. ``y`` and ``h`` must be contiguous ``x.shape`` tensors of
    ``x``'s dtype and ``rstd`` a float32 ``(n_rows,)`` tensor, or None when no
    backward will read it (the kernels then skip it): the custom ops pass fresh
    ones, tests NaN-poisoned ones. Unused pointers get ``x``; they are never
    read.
    """
    n_rows, n_cols = x.shape
    if n_rows == 0 or n_cols == 0:
        return
    has_res = residual is not None
    res = residual if has_res else x
    hh = h if has_res else y
    w = weight if weight is not None else x
    rs = rstd if rstd is not None else x
    strides = (*x.stride(), *res.stride())  # stride_xm, stride_xn, stride_rm, stride_rn
    # Row strides of x, residual, and y and h (written at row * n_cols).
    row_strides = (strides[0], strides[2], n_cols)
    vec, peel = row_vec(x.element_size(), n_cols, row_strides, strides[1] == strides[3] == 1)
    width = _body_width(n_cols, vec, peel)
    full_block = plan.kind == "block" and plan.block * x.element_size() > plan_rule.MAX_BLOCK_BYTES
    shift_w = (full_block or (not has_res and plan.kind != "block")) and _shifts_weight(
        peel, weight, n_rows, n_cols, SHIFT_W_MIN_ELEMENTS
    )
    consts = {
        "HAS_RESIDUAL": has_res,
        "BLOCK": plan.block,
        "VEC": vec,
        "PEEL": peel,
        "num_warps": plan.num_warps,
    }
    with device_guard(x):
        ws, ws_stride = _shifted_weight(weight, n_cols, vec) if shift_w else (w, 0)
        pointers = (x, res, w, ws, y, hh, rs)
        flags = {"HAS_WEIGHT": weight is not None, "STORE_RSTD": rstd is not None}
        if plan.kind == "block":
            consts["BLOCK"], consts["TAIL"] = _pieces(n_cols, plan, width)
            early = _reads_weight_early(weight, n_rows, plans.sm_count(x.device))
            for first_row, programs in plans.block_launches(n_rows):
                launchable(_fwd_block_kernel)[(programs,)](
                    x,
                    res,
                    w,
                    ws,
                    y,
                    hh,
                    rs,
                    first_row,
                    n_cols,
                    ws_stride,
                    *strides,
                    eps,
                    SHIFT_W=shift_w,
                    EARLY_W=early,
                    **flags,
                    **consts,
                )
            return
        if plan.kind == "looped":
            one_chunk = plan.block >= width
            passes = ("", "") if one_chunk else (LOOPED_FIRST_PASS, LOOPED_SECOND_PASS)
            programs = plans.persistent_programs(n_rows, plan, plans.sm_count(x.device))
            launchable(_fwd_looped_kernel)[(programs,)](
                *pointers,
                n_rows,
                n_cols,
                ws_stride,
                *strides,
                eps,
                ONE_CHUNK=one_chunk,
                FIRST=passes[0],
                SECOND=passes[1],
                SHIFT_W=shift_w,
                **flags,
                **consts,
            )
            return
        chunks_per_split, n_split = _split(width, plan)
        ss = scratch((n_rows, n_split), torch.float32, x.device)
        grid = (n_rows, n_split)
        launchable(_fwd_partial_kernel)[grid](
            x, res, hh, ss, n_cols, chunks_per_split, *strides, STEP=FWD_SPLIT_STEP, **consts
        )
        launchable(_fwd_split_kernel)[grid](
            x,
            w,
            ws,
            y,
            hh,
            ss,
            rs,
            n_cols,
            ws_stride,
            chunks_per_split,
            *strides[:2],
            eps,
            SHIFT_W=shift_w,
            **flags,
            MAX_PARTIALS=plans.MAX_SPLITS,
            **consts,
        )


def _backward(
    dy: torch.Tensor,
    h: torch.Tensor,
    weight: torch.Tensor | None,
    rstd: torch.Tensor,
    dh: torch.Tensor | None,
    plan: plans.RowPlan,
    dx: torch.Tensor,
    dx2: torch.Tensor | None,
    dw: torch.Tensor | None,
) -> None:
    """Write ``dx`` (contiguous, ``h``'s shape and dtype), ``dx2`` and ``dw`` when given.

    ``dy``, ``h`` and ``dh`` are 2-D of any strides. ``dh`` is the upstream
    gradient of ``h`` (residual_rms_norm), added to ``dx``. ``dx2`` (like
    ``dx``) receives a second copy of ``dx`` in the same pass.
    """
    n_rows, n_cols = h.shape
    if n_cols == 0:
        return
    if n_rows == 0:
        if dw is not None:
            not_replayable()  # a fill, not a launch
            dw.zero_()
        return
    dhh = dh if dh is not None else dy
    w = weight if weight is not None else h
    strides = (*dy.stride(), *h.stride())  # stride_dym, stride_dyn, stride_hm, stride_hn
    # Row strides of dy, h, dh, and dx and dx2 (written at row * n_cols).
    row_strides = (strides[0], strides[2], dhh.stride(0), n_cols)
    unit_cols = strides[1] == strides[3] == dhh.stride(1) == 1
    elem_bytes = h.element_size()
    vec, peel = row_vec(elem_bytes, n_cols, row_strides, unit_cols)
    width = _body_width(n_cols, vec, peel)
    sms = plans.sm_count(h.device)
    if plan.kind == "block" and plan.block * elem_bytes > plan_rule.MAX_BLOCK_BYTES:
        # A row wider than the fitted block holds four values a column past what
        # a program's registers keep (plan_rule.FULL_BLOCK_MAX_BYTES): in chunks.
        plan = plans.choose(n_rows, n_cols, elem_bytes=elem_bytes, sm_count=sms, plan="looped")
    launch = _bwd_launch(plan, n_cols, elem_bytes, dh is not None, width, peel)
    one_chunk = plan.kind != "split" and launch.block + launch.tail >= width
    chunks_per_split, n_split = _bwd_slices(width, plan, launch.block, launch.per_sm * sms)
    n_parts = _partial_rows(n_rows, n_split, launch, sms, vec, peel)
    # Partial dweight rows of n_cols padded to 16 bytes: every row starts aligned.
    stride_pm = plans.cdiv(n_cols, 4) * 4
    dw_part = scratch((n_parts, stride_pm), torch.float32, h.device) if dw is not None else rstd
    shifts = _shifts_weight(peel, weight, n_rows, n_cols, SHIFT_W_BWD_MIN_ELEMENTS)
    # The first pass loads the weight for every row; the main kernel only with
    # WEIGHT_EACH_ROW (a program that holds it across its rows loads it once a
    # chunk: the copies would save little there, and their pointer cost it 4
    # spilled bytes a thread at 4096x4097 float16).
    dot_shift = shifts and not one_chunk
    main_shift = shifts and launch.weight_each_row
    consts = {"HAS_WEIGHT": weight is not None, "BLOCK": launch.block, "VEC": vec, "PEEL": peel}
    consts["num_warps"] = launch.warps
    with device_guard(h):
        shifted = dot_shift or main_shift
        ws, ws_stride = _shifted_weight(weight, n_cols, vec) if shifted else (w, 0)
        if one_chunk:
            dot = rstd  # not read: mean(g * h) comes from the row in registers
            n_dots = 1
        else:
            per_dot, n_dots = _dot_slices(n_rows, width, launch.block, chunks_per_split, sms)
            dot = scratch((n_rows, n_dots), torch.float32, h.device)
            launchable(_bwd_dot_kernel)[(n_rows, n_dots)](
                dy,
                h,
                w,
                ws,
                dot,
                n_cols,
                ws_stride,
                per_dot,
                *strides,
                STEP=BWD_DOT_STEP,
                SHIFT_W=dot_shift,
                **consts,
            )
        launchable(_bwd_kernel)[(n_parts, n_split)](
            dy,
            h,
            w,
            ws,
            rstd,
            dot,
            dhh,
            dx,
            dx2 if dx2 is not None else dx,
            dw_part,
            n_rows,
            n_cols,
            ws_stride,
            chunks_per_split,
            n_dots,
            *strides,
            *dhh.stride(),
            stride_pm,
            HAS_DH=dh is not None,
            TWO_DX=dx2 is not None,
            ONE_CHUNK=one_chunk,
            MAX_PARTIALS=plans.MAX_SPLITS,
            TAIL=launch.tail,
            PREFETCH=launch.prefetch,
            WEIGHT_EACH_ROW=launch.weight_each_row,
            maxnreg=launch.max_registers,
            SHIFT_W=main_shift,
            **consts,
        )
        if dw is not None:
            # About four column blocks per SM, each summing every partial row:
            # the power of two covering n_cols / (4 * SMs), within 32..REDUCE_TILE
            # (a loop, as triton.next_power_of_2 costs microseconds per call).
            block_n, want = 32, plans.cdiv(n_cols, 4 * sms)
            while block_n < want and block_n < REDUCE_TILE:
                block_n *= 2
            launchable(_dw_reduce_kernel)[(plans.cdiv(n_cols, block_n),)](
                dw_part,
                dw,
                n_parts,
                n_cols,
                stride_pm,
                BLOCK_P=REDUCE_TILE // block_n,
                BLOCK_N=block_n,
                num_warps=REDUCE_NUM_WARPS,
            )


# ---------------------------------------------------------------------------
# torch.library registration (custom ops + autograd)
# ---------------------------------------------------------------------------
# The ops take 2-D inputs and the plan as plain fields (plans.to_op_args); the
# plan is chosen inside the op body, which torch.compile runs as plain Python.


def _as_launched(t: torch.Tensor, rows: torch.Size) -> torch.Tensor:
    """A new contiguous output ``t`` as the launchers see it, ``rows``: itself when 2-D."""
    return t if t.dim() == 2 else t.view(*rows)


def _rms_norm(
    x: torch.Tensor,
    residual: torch.Tensor | None,
    weight: torch.Tensor | None,
    eps: float,
    plan: plans.RowPlan,
    like: torch.Tensor,
    *,
    keep_rstd: bool,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """``(y, h, rstd)`` of the 2-D rows ``x`` (``h`` is None without a residual).

    ``y`` and ``h`` are new contiguous tensors shaped like ``like``: ``x``
    itself for the custom ops, the caller's tensor for the eager routes.
    ``rstd`` is made only when ``keep_rstd`` (a backward will read it);
    otherwise it is neither allocated nor written, and None. The body of
    ``kp::rms_norm`` and ``kp::residual_rms_norm`` (which keep it), and of the
    eager routes.
    """
    y = torch.empty_like(like, memory_format=torch.contiguous_format)
    h = torch.empty_like(y) if residual is not None else None
    rstd = torch.empty(x.shape[0], dtype=torch.float32, device=x.device) if keep_rstd else None
    h2d = _as_launched(h, x.shape) if h is not None else None
    _forward(x, residual, weight, eps, plan, _as_launched(y, x.shape), h2d, rstd)
    return y, h, rstd


def _rms_norm_grad(
    dy: torch.Tensor,
    h: torch.Tensor,
    weight: torch.Tensor | None,
    rstd: torch.Tensor,
    dh: torch.Tensor | None,
    plan: plans.RowPlan,
    two_dx: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(dx, dx2, dweight)`` of 2-D rows.

    ``dx2`` is a second tensor holding ``dx`` when ``two_dx`` (the gradients of
    ``x`` and ``residual``, both wanted), else empty (shape ``(0,)``), and so is
    ``dweight`` without a weight. The body of ``kp::rms_norm_backward`` and of
    the eager backward.
    """
    dx = torch.empty_like(h, memory_format=torch.contiguous_format)
    dx2 = torch.empty_like(dx) if two_dx else dx.new_empty(0)
    dw = torch.empty(h.shape[1] if weight is not None else 0, dtype=h.dtype, device=h.device)
    wanted_dx2, wanted_dw = (dx2 if two_dx else None), (dw if weight is not None else None)
    _backward(dy, h, weight, rstd, dh, plan, dx, wanted_dx2, wanted_dw)
    return dx, dx2, dw


@triton_op("kp::rms_norm", mutates_args=())
def _rms_norm_op(
    x: torch.Tensor,
    weight: torch.Tensor | None,
    eps: float,
    kind: str,
    block: int,
    num_warps: int,
    splits: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    plan = _forward_plan(x, weight, plans.from_op_args(kind, block, num_warps, splits), False)
    y, _, rstd = _rms_norm(x, None, weight, eps, plan, x, keep_rstd=True)
    return y, rstd


@triton_op("kp::residual_rms_norm", mutates_args=())
def _residual_rms_norm_op(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor | None,
    eps: float,
    kind: str,
    block: int,
    num_warps: int,
    splits: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    plan = _forward_plan(x, weight, plans.from_op_args(kind, block, num_warps, splits), True)
    return _rms_norm(x, residual, weight, eps, plan, x, keep_rstd=True)


@triton_op("kp::rms_norm_backward", mutates_args=())
def _rms_norm_backward_op(
    dy: torch.Tensor,
    h: torch.Tensor,
    weight: torch.Tensor | None,
    rstd: torch.Tensor,
    dh: torch.Tensor | None,
    two_dx: bool,
    kind: str,
    block: int,
    num_warps: int,
    splits: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Returns ``(dx, dx2, dweight)`` (:func:`_rms_norm_grad`)."""
    plan = plans.choose_for(h, plans.from_op_args(kind, block, num_warps, splits))
    return _rms_norm_grad(dy, h, weight, rstd, dh, plan, two_dx)


def _setup_rms_norm(ctx, inputs, output) -> None:
    x, weight, _eps, *plan_args = inputs
    _y, rstd = output
    ctx.mark_non_differentiable(rstd)
    ctx.save_for_backward(x, weight, rstd)
    ctx.plan_args = plan_args


def _rms_norm_op_grad(ctx, dy, _drstd):
    x, weight, rstd = ctx.saved_tensors
    dx, _, dw = torch.ops.kp.rms_norm_backward(dy, x, weight, rstd, None, False, *ctx.plan_args)
    return dx, (dw if weight is not None else None), None, None, None, None, None


def _setup_residual_rms_norm(ctx, inputs, output) -> None:
    _x, _residual, weight, _eps, *plan_args = inputs
    _y, h, rstd = output
    ctx.mark_non_differentiable(rstd)
    ctx.save_for_backward(h, weight, rstd)
    ctx.plan_args = plan_args


def _residual_rms_norm_op_grad(ctx, dy, dh, _drstd):
    h, weight, rstd = ctx.saved_tensors
    two_dx = ctx.needs_input_grad[0] and ctx.needs_input_grad[1]
    dx, dx2, dw = torch.ops.kp.rms_norm_backward(dy, h, weight, rstd, dh, two_dx, *ctx.plan_args)
    dres = dx2 if two_dx else dx
    return dx, dres, (dw if weight is not None else None), None, None, None, None, None


_rms_norm_op.register_autograd(_rms_norm_op_grad, setup_context=_setup_rms_norm)
_residual_rms_norm_op.register_autograd(
    _residual_rms_norm_op_grad, setup_context=_setup_residual_rms_norm
)


# ---------------------------------------------------------------------------
# Eager routes (contracts.direct_route, contracts.eager_route)
# ---------------------------------------------------------------------------
# The same launchers, saved tensors and plan as the custom ops, without the
# dispatcher. Inputs arrive in the caller's shape and outputs leave in it (no
# view nodes in the graph); the launchers see 2-D rows.


def _forward_direct(x, residual, weight, eps, plan: plans.RowPlan, keep_rstd: bool) -> tuple:
    """``(y, h, rstd)`` without those not made: a forward on the eager routes, launching straight.

    ``y`` and ``h`` (with a residual) have ``x``'s shape; ``rstd`` is made
    only when ``keep_rstd``: the autograd Functions keep it for their
    backward, the direct route (no backward) skips it. ``plan`` is chosen.
    """
    x2d = plans.as_rows(x)
    r2d = plans.as_rows(residual) if residual is not None else None
    with direct_launches():
        y, h, rstd = _rms_norm(x2d, r2d, weight, eps, plan, x, keep_rstd=keep_rstd)
    return tuple(t for t in (y, h, rstd) if t is not None)


def _grad_rows(dy, h, weight, rstd, dh, plan: plans.RowPlan, two_dx: bool) -> tuple:
    """``(dx, dx2, dweight)`` without those not wanted: the eager backward (:func:`_rms_norm_grad`).

    ``dy``, ``h`` and ``dh`` (or None) in the caller's shape, and so are
    ``dx`` and ``dx2`` (only when ``two_dx``); ``dweight`` only with a weight.
    On the eager route it launches straight (what a replay repeats); a
    backward replayed under a dispatch mode (compiled autograd) goes through
    ``kp::rms_norm_backward``, as the custom op's own backward does.
    """
    rows = (plans.as_rows(dy), plans.as_rows(h), weight, rstd)
    dh2d = plans.as_rows(dh) if dh is not None else None
    if eager_route():
        with direct_launches():
            dx, dx2, dw = _rms_norm_grad(*rows, dh2d, plan, two_dx)
    else:
        args = plans.to_op_args(plan)
        dx, dx2, dw = torch.ops.kp.rms_norm_backward(*rows, dh2d, two_dx, *args)
    if h.dim() != 2:
        dx, dx2 = dx.view(h.shape), (dx2.view(h.shape) if two_dx else dx2)
    return (dx, *((dx2,) if two_dx else ()), *((dw,) if weight is not None else ()))


#: The Functions' forward and backward launches, recorded per signature and replayed.
_FORWARD_REPLAYS = Replays()
_BACKWARD_REPLAYS = Replays()


class _RMSNorm(torch.autograd.Function):
    """``rms_norm`` on the eager route: saves ``(x, weight, rstd)`` as the custom op does."""

    @staticmethod
    def forward(ctx, x, weight, eps, plan):
        fwd_plan = _forward_plan(x, weight, plan, False)
        y, rstd = _FORWARD_REPLAYS.call(_forward_direct, (x, None, weight), (eps, fwd_plan, True))
        ctx.save_for_backward(x, weight, rstd)
        ctx.plan = plans.choose_for(x, plan)
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        x, weight, rstd = ctx.saved_tensors
        grads = _BACKWARD_REPLAYS.call(_grad_rows, (dy, x, weight, rstd, None), (ctx.plan, False))
        return grads[0], (grads[1] if weight is not None else None), None, None


class _ResidualRMSNorm(torch.autograd.Function):
    """``residual_rms_norm`` on the eager route: saves ``(h, weight, rstd)`` as the op does."""

    @staticmethod
    def forward(ctx, x, residual, weight, eps, plan):
        fwd_plan = _forward_plan(x, weight, plan, True)
        tensors = (x, residual, weight)
        y, h, rstd = _FORWARD_REPLAYS.call(_forward_direct, tensors, (eps, fwd_plan, True))
        ctx.save_for_backward(h, weight, rstd)
        ctx.plan = plans.choose_for(x, plan)
        return y, h

    @staticmethod
    @once_differentiable
    def backward(ctx, dy, dh):
        h, weight, rstd = ctx.saved_tensors
        two_dx = ctx.needs_input_grad[0] and ctx.needs_input_grad[1]
        tensors = (dy, h, weight, rstd, dh)
        grads = _BACKWARD_REPLAYS.call(_grad_rows, tensors, (ctx.plan, two_dx))
        dres = grads[1] if two_dx else grads[0]
        return grads[0], dres, (grads[-1] if weight is not None else None), None, None


# ---------------------------------------------------------------------------
# Public functions
# ---------------------------------------------------------------------------

#: Direct-route calls of :func:`rms_norm`, recorded per input signature and replayed.
_RMS_NORM_REPLAYS = Replays()
#: Direct-route calls of :func:`residual_rms_norm`, recorded per input signature and replayed.
_RESIDUAL_REPLAYS = Replays()


def _check_rows(x: torch.Tensor) -> None:
    if x.dim() == 0:
        raise ValueError("x must have at least one dimension (the normalised one), got a scalar")


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
    plan: str | plans.RowPlan = "auto",
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
    kernel; a new dtype, plan or block width does (see the module docstring).

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
            differ, or ``eps`` is not a number.
        ValueError: an unusable or mismatched device, a scalar ``x``, a
            ``weight`` that is not 1-D of length ``x.shape[-1]``, a
            non-positive ``eps``, a ``plan`` that is not an allowed name or
            RowPlan, or a block plan narrower than the row.

    Example:
        >>> import kernel_portfolio as kp
        >>> y = kp.rms_norm(x, weight)   # x: (tokens, 4096), weight: (4096,)
    """
    return _RMS_NORM_REPLAYS.call(_rms_norm_checked, (x, weight), (eps, plan))


def _rms_norm_checked(x, weight, eps, plan) -> torch.Tensor:
    """The body of :func:`rms_norm` (what a replay stands in for): checks, then a route."""
    check_tensor(x, "x")
    _check_rows(x)
    weight = _check_weight(weight, x)
    eps = check_eps(eps)
    if direct_route(x, weight):
        fwd_plan = _forward_plan(x, weight, plan, False)
        return _forward_direct(x, None, weight, eps, fwd_plan, False)[0]
    if eager_route():
        return _RMSNorm.apply(x, weight, eps, plan)
    y, _ = torch.ops.kp.rms_norm(plans.as_rows(x), weight, eps, *plans.to_op_args(plan))
    return y.view(x.shape)


def residual_rms_norm(
    x: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor | None,
    eps: float = 1e-6,
    plan: str | plans.RowPlan = "auto",
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
            of another dtype than ``x``, or an ``eps`` that is not a number.
        ValueError: an unusable or mismatched device, a ``residual`` of
            another shape, a bad ``weight`` shape, a non-positive ``eps``, or
            a bad ``plan`` (as for :func:`rms_norm`).

    Example:
        >>> import kernel_portfolio as kp
        >>> y, hidden = kp.residual_rms_norm(attn_out, hidden, weight)
    """
    return _RESIDUAL_REPLAYS.call(_residual_rms_norm_checked, (x, residual, weight), (eps, plan))


def _residual_rms_norm_checked(x, residual, weight, eps, plan) -> tuple[torch.Tensor, torch.Tensor]:
    """The body of :func:`residual_rms_norm` (what a replay stands in for): checks, then a route."""
    check_tensor(x, "x")
    check_tensor(residual, "residual")
    check_same(x, "x", residual, "residual")
    if residual.shape != x.shape:
        raise ValueError(
            f"residual has shape {tuple(residual.shape)} but x has shape {tuple(x.shape)}; "
            "they must match"
        )
    _check_rows(x)
    weight = _check_weight(weight, x)
    eps = check_eps(eps)
    if direct_route(x, residual, weight):
        return _forward_direct(
            x, residual, weight, eps, _forward_plan(x, weight, plan, True), False
        )
    if eager_route():
        return _ResidualRMSNorm.apply(x, residual, weight, eps, plan)
    x2d, r2d = plans.as_rows(x), plans.as_rows(residual)
    y, h, _ = torch.ops.kp.residual_rms_norm(x2d, r2d, weight, eps, *plans.to_op_args(plan))
    return y.view(x.shape), h.view(x.shape)
