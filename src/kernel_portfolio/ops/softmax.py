"""Softmax over the rows of a tensor, forward and backward.

Math, for one row ``x`` of ``N`` entries::

    m = max_j x_j        s = sum_j exp(x_j - m)        y_i = exp(x_i - m) / s
    dx_i = y_i * (dy_i - sum_j dy_j * y_j)                          (backward)

Subtracting the row maximum keeps ``exp`` from overflowing. A ``-inf`` entry
gives ``exp(-inf) = 0``; a row of nothing but ``-inf`` has ``m = -inf``, so
``x - m`` is NaN and the whole row is NaN, as in PyTorch. Everything is
computed in float32 and rounded once, on store.

Memory traffic for ``M`` rows of ``N`` elements of ``b`` bytes, per plan
(:mod:`kernel_portfolio.plans`):

* ``block``: one program holds a row in registers. Forward reads ``x`` and
  writes ``y``, ``2MNb`` bytes; backward reads ``y`` and ``dy`` and writes
  ``dx``, ``3MNb``. Each byte moves once: the least any softmax can do. A row
  just past a power of two is held as two pieces, a main block and a small
  tail (:func:`kernel_portfolio.plans.block_pieces`: 4104 columns as 4096 and
  8, not one block of 8192 of which half would be masked).
* ``looped``: a program walks a row in chunks twice. The first pass keeps an
  online ``(max, sum)``: for each chunk ``m' = max(m, max(chunk))`` and
  ``s' = s * exp(m - m') + sum(exp(chunk - m'))``. The second pass rereads
  ``x`` and writes ``y``: ``3MNb`` (the reread often hits L2). Backward: a
  dot-product pass and a write pass, ``5MNb``. The first pass loads with
  ``evict_last`` and the second with ``evict_first``
  (:data:`LOOPED_FIRST_PASS`, :data:`LOOPED_SECOND_PASS`): the L2 keeps the
  row for its reread, and drops it first once reread. Block and split plans
  keep the default (an A/B, ``results/h200/checks/load-policy-ab-20261202T0614Z.log``:
  ``evict_first`` slowed the block plans, which also write, and moved the
  split plans either way).
* ``split``: ``S`` programs share a row. A stats kernel writes each slice's
  ``(max, sum)``; a write kernel merges a row's ``S`` pairs, rereads its slice
  and writes it: ``3MNb`` plus ``8S(S + 1)`` bytes of float32 statistics per
  row. When each slice is one chunk and the grid fits the SMs (few wide
  rows; ``auto`` then picks chunks of ``plan_rule.COOP_CHUNK``), one launch
  does both (:func:`_cooperative`): a program holds its slice in registers,
  publishes its pair as two tagged 8-byte words and polls the row's others
  until they carry its launch's tag, ``2MNb`` and one launch fewer.
  The backward's two launches do the same with partial dot products:
  ``5MNb`` plus ``4S(S + 1)`` per row.

The online merge must not compute ``exp(-inf - (-inf))``: while every value
seen so far is ``-inf`` (a masked prefix of the row), the running max is
``-inf``. The kernels then shift by 0 instead (:func:`_shift_for`), which
makes ``exp(-inf - 0) = 0`` the right contribution.

What is compiled, and what is not: ``BLOCK`` (register tile width), ``TAIL``
(the block plan's second piece, or 0), ``VEC`` and ``PEEL`` (see
:func:`kernel_portfolio.ops.peel.row_vec`: rows whose stride is not a multiple
of 16 bytes, a vocabulary of 50257, are peeled into a head, a 16-byte aligned
body and a tail, the head and tail held by one program of the row),
``MAX_SPLITS`` and the warp count are compile-time constants. The row count,
row width, row strides and split sizes are runtime arguments that Triton is told not to specialise
(``do_not_specialize``), so a new batch size, or a new width with the same
``BLOCK`` and ``TAIL``, reuses the compiled kernel (a split plan has two
forms, the cooperative one while its programs fit the SMs and the two launches
past that: a batch size that crosses over compiles the other once); the mask
``cols < n_cols`` handles the partial block, and ``VEC`` keeps its loads 16
bytes wide. Column strides keep Triton's default specialisation: a stride of 1
compiles to contiguous vector loads, any other stride to a strided variant. A
prior project found runtime widths slow where a row does not fill its block;
the specialisation case study measures this choice on the H200.

One set of launchers, three routes to it
(:func:`kernel_portfolio.contracts.eager_route`). In eager code the public
function calls the launchers directly when autograd will not record, and
otherwise runs an autograd Function of this module whose forward and backward
call them directly: the ``torch.ops`` dispatcher and its autograd wrapper cost
far more host time than a small softmax takes on the GPU. Under
``torch.compile``, dispatch modes and ``torch.func`` it goes through
``kp::softmax`` and ``kp::softmax_backward``, whose bodies are the same code.
Every route saves ``y`` and uses the same plans (:func:`_forward_plan`,
:func:`_backward_plan`), so all give
the same bits.

Inputs of any strides are read in place through ``(stride_xm, stride_xn)``
whenever the leading dimensions collapse into one row stride; otherwise
:func:`kernel_portfolio.plans.as_rows` makes one copy. Row and column offsets
are computed in int64, so tensors past 2^31 elements are addressed correctly.
"""

from __future__ import annotations

import dataclasses

import torch
import triton
import triton.language as tl
from torch.autograd.function import once_differentiable
from torch.library import triton_op

from kernel_portfolio import plan_rule, plans
from kernel_portfolio.contracts import (
    Replays,
    check_dim,
    check_tensor,
    device_guard,
    direct_launches,
    direct_route,
    eager_route,
    interpreter_enabled,
    launchable,
    scratch,
    stream_buffer,
)
from kernel_portfolio.ops.peel import body_offset, body_width, peel_cols, row_head, row_vec

#: Runtime arguments Triton must not specialise (see the module docstring).
_RUNTIME_ARGS = [
    "first_row",
    "n_rows",
    "n_cols",
    "stride_xm",
    "stride_ym",
    "stride_dym",
    "stride_dxm",
]
_RUNTIME_SPLIT_ARGS = [*_RUNTIME_ARGS, "chunks_per_split"]
#: ``tl.load``'s ``eviction_policy`` for a looped plan's first and second pass
#: over a row (the kernels' ``FIRST`` and ``SECOND``; ``""`` is the hardware
#: default, which the block and split plans keep): see the module docstring.
LOOPED_FIRST_PASS = "evict_last"
LOOPED_SECOND_PASS = "evict_first"
#: Fewest partial ``(max, sum)`` pairs a cooperative program polls at once
#: (:func:`_coop_slots`): a warp's width, so a row of up to 32 programs
#: reduces inside a warp, with no shared memory.
COOP_SLOTS = 32
#: A cooperative word's tag is ``generation * COOP_TAG_COUNTS + programs``
#: (:func:`_fwd_split_coop_kernel`): program counts below it, generations
#: counted modulo ``COOP_GENERATIONS``, so a tag fits the word's high 32 bits.
COOP_TAG_COUNTS = tl.constexpr(1024)
COOP_GENERATIONS = tl.constexpr(2**21)
#: Warps of the forward's ``auto`` block plan for a row past
#: ``plan_rule.MAX_BLOCK_BYTES`` (a full block of up to
#: ``plan_rule.FULL_BLOCK_MAX_BYTES``, :func:`_forward_plan`).
#: ``scripts/wide_block_ab.py`` timed the block plan of 32768 float16 columns
#: with 16 and 32 warps
#: (``results/h100-80gb-hbm3/checks/wide-block-ab-20261205T2140Z.log``): at
#: 32000, 32064 and 32768 columns and 1024, 4096 and 16384 rows the forward
#: ran 2.0-2.4% faster with 32 at every cell, and the forward and backward
#: 0.6-1.6% slower with 32 at every cell.
FULL_BLOCK_FWD_WARPS = 32
#: Warps of the backward's ``auto`` block plan for such a row
#: (:func:`_backward_plan`). Timed alone
#: (``results/h100-80gb-hbm3/checks/rows-unaligned-ab-20261206T2248Z.log``: the
#: backward launcher at 4096 and 16384 rows of 32000 and 32768 float16
#: columns), it ran in 0.97-0.98 of its time in 16 warps with 8, and in
#: 1.03-1.04 with 32.
FULL_BLOCK_BWD_WARPS = 8
#: ``auto`` holds a row of a full block (wider than ``plan_rule.MAX_BLOCK_BYTES``,
#: at most ``plan_rule.FULL_BLOCK_MAX_BYTES``) in one block, forward and
#: backward, where it fills at least this share of the block, below
#: ``plan_rule.FULL_BLOCK_MIN_FILL`` (:func:`_full_block_plan`): looped, each
#: pass reads the row twice. On the H100 (float16, 1024, 4096 and 16384 rows,
#: cold L2: ``results/h100-80gb-hbm3/checks/softmax-fill-ab-20261207T1237Z.log``;
#: the script: ``git show d717696:scripts/softmax_fill_ab.py``), per width
#: over the three row counts, the block ran the forward and backward in
#: 0.95-0.97 of the looped plan's time at every width from 28000 columns (85%
#: of 32768) to 30522 (93%), aligned and not, never slower at a cell, and the
#: forward in 0.95-1.00 (at most 2.3% slower at a cell); at 26624 (81%) both
#: ran level (the forward at most 2.1% slower). 31000 (95%), one block already,
#: was the control.
FULL_BLOCK_MIN_FILL = 27 / 32

# ---------------------------------------------------------------------------
# Kernels
# ---------------------------------------------------------------------------


@triton.jit
def _shift_for(m):
    """The shift to subtract before ``exp``: ``m``, or 0 where ``m`` is ``-inf``.

    ``m = -inf`` means every value seen is ``-inf``; shifting by 0 gives
    ``exp(-inf) = 0`` for them instead of ``exp(-inf - (-inf)) = exp(nan)``.
    """
    return tl.where(m == float("-inf"), 0.0, m)


@triton.jit
def _online_max_sum(
    x_row, stride_xn, col0, n_chunks, n_cols, BLOCK: tl.constexpr, EVICT: tl.constexpr
):
    """Running ``(max, sum of exp(x - max))`` over ``n_chunks`` chunks from ``col0``."""
    m = tl.full((), float("-inf"), tl.float32)
    s = tl.zeros((), tl.float32)
    for c in range(n_chunks):
        cols = col0 + c * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(
            x_row + cols.to(tl.int64) * stride_xn,
            mask=cols < n_cols,
            other=float("-inf"),
            eviction_policy=EVICT,
        )
        x = x.to(tl.float32)
        m_new = tl.maximum(m, tl.max(x, 0))
        shift = _shift_for(m_new)
        s = s * tl.exp(m - shift) + tl.sum(tl.exp(x - shift), 0)
        m = m_new
    return m, s


@triton.jit
def _write_probs(
    x_row, stride_xn, y_row, m, s, col0, n_chunks, n_cols, BLOCK: tl.constexpr, EVICT: tl.constexpr
):
    """Reread ``n_chunks`` chunks from ``col0``, last first, and write ``exp(x - m) / s``.

    Last first: the chunks read last by the first pass are the likeliest to
    still be in L2.
    """
    for c in range(n_chunks):
        cols = col0 + (n_chunks - 1 - c) * BLOCK + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(
            x_row + cols.to(tl.int64) * stride_xn,
            mask=mask,
            other=float("-inf"),
            eviction_policy=EVICT,
        )
        y = tl.exp(x.to(tl.float32) - m) / s
        tl.store(y_row + cols, y.to(y_row.dtype.element_ty), mask=mask)


@triton.jit
def _load_pair(y_row, stride_yn, dy_row, stride_dyn, cols, mask, EVICT: tl.constexpr):
    """``y`` and ``dy`` at ``cols`` as float32."""
    cols64 = cols.to(tl.int64)
    y = tl.load(y_row + cols64 * stride_yn, mask=mask, other=0.0, eviction_policy=EVICT)
    dy = tl.load(dy_row + cols64 * stride_dyn, mask=mask, other=0.0, eviction_policy=EVICT)
    return y.to(tl.float32), dy.to(tl.float32)


@triton.jit
def _row_dot(
    y_row,
    stride_yn,
    dy_row,
    stride_dyn,
    col0,
    n_chunks,
    n_cols,
    BLOCK: tl.constexpr,
    EVICT: tl.constexpr,
):
    """``sum(y * dy)`` over ``n_chunks`` chunks from ``col0``, in float32."""
    acc = tl.zeros((BLOCK,), tl.float32)
    for c in range(n_chunks):
        cols = col0 + c * BLOCK + tl.arange(0, BLOCK)
        y, dy = _load_pair(y_row, stride_yn, dy_row, stride_dyn, cols, cols < n_cols, EVICT)
        acc += y * dy
    return tl.sum(acc, 0)


@triton.jit
def _write_grad(
    y_row,
    stride_yn,
    dy_row,
    stride_dyn,
    dx_row,
    dot,
    col0,
    n_chunks,
    n_cols,
    BLOCK: tl.constexpr,
    EVICT: tl.constexpr,
):
    """Reread ``n_chunks`` chunks from ``col0``, last first, and write ``y * (dy - dot)``."""
    for c in range(n_chunks):
        cols = col0 + (n_chunks - 1 - c) * BLOCK + tl.arange(0, BLOCK)
        mask = cols < n_cols
        y, dy = _load_pair(y_row, stride_yn, dy_row, stride_dyn, cols, mask, EVICT)
        dx = y * (dy - dot)
        tl.store(dx_row + cols, dx.to(dx_row.dtype.element_ty), mask=mask)


@triton.jit
def _peel_max_sum(x_body, head, n_body, n_cols, m, s, first, VEC: tl.constexpr):
    """Fold a row's head and tail into the running ``(m, s)``; only where ``first`` is true.

    ``first`` picks the one program of a row that owns them (split plans:
    slice 0); elsewhere the load is masked off and ``(m, s)`` is unchanged.
    """
    peel, mask = peel_cols(head, n_body, n_cols, VEC)
    x = tl.load(x_body + peel, mask=mask & first, other=float("-inf")).to(tl.float32)
    return _fold(m, s, x)


@triton.jit
def _fold(m, s, x):
    """Fold float32 values ``x`` (``-inf`` where masked) into the running ``(m, s)``."""
    m_new = tl.maximum(m, tl.max(x, 0))
    shift = _shift_for(m_new)
    return m_new, s * tl.exp(m - shift) + tl.sum(tl.exp(x - shift), 0)


@triton.jit
def _write_peel_probs(x_body, y_body, m, s, head, n_body, n_cols, first, VEC: tl.constexpr):
    """Write ``exp(x - m) / s`` at a row's head and tail, where ``first`` is true."""
    peel, mask = peel_cols(head, n_body, n_cols, VEC)
    mask = mask & first
    x = tl.load(x_body + peel, mask=mask, other=float("-inf"))
    y = tl.exp(x.to(tl.float32) - m) / s
    tl.store(y_body + peel, y.to(y_body.dtype.element_ty), mask=mask)


@triton.jit
def _peel_dot(y_body, dy_body, head, n_body, n_cols, first, VEC: tl.constexpr):
    """``sum(y * dy)`` over a row's head and tail, where ``first`` is true (else 0)."""
    peel, mask = peel_cols(head, n_body, n_cols, VEC)
    y, dy = _load_pair(y_body, 1, dy_body, 1, peel, mask & first, "")
    return tl.sum(y * dy, 0)


@triton.jit
def _write_peel_grad(y_body, dy_body, dx_body, dot, head, n_body, n_cols, first, VEC: tl.constexpr):
    """Write ``y * (dy - dot)`` at a row's head and tail, where ``first`` is true."""
    peel, mask = peel_cols(head, n_body, n_cols, VEC)
    mask = mask & first
    y, dy = _load_pair(y_body, 1, dy_body, 1, peel, mask, "")
    tl.store(dx_body + peel, (y * (dy - dot)).to(dx_body.dtype.element_ty), mask=mask)


@triton.jit(do_not_specialize=_RUNTIME_ARGS)
def _fwd_block_kernel(
    x_ptr,
    y_ptr,
    first_row,
    n_cols,
    stride_xm,
    stride_xn,
    stride_ym,
    BLOCK: tl.constexpr,
    TAIL: tl.constexpr,
    VEC: tl.constexpr,
    PEEL: tl.constexpr,
):
    """Block plan, forward: a row is loaded once, reduced in registers, stored once.

    Program ``p`` takes row ``first_row + p`` (a program per row:
    :func:`kernel_portfolio.plans.block_launches`). A ``TAIL`` (not 0) is a
    second piece of the row's body after its first ``BLOCK`` columns
    (:func:`kernel_portfolio.plans.block_pieces`); ``PEEL`` holds the row's
    head and tail as a third (:mod:`kernel_portfolio.ops.peel`).
    """
    row64 = tl.program_id(0).to(tl.int64) + first_row  # row * stride can pass 2^31
    head = row_head(row64 * stride_xm, VEC, PEEL)
    n_body = body_width(n_cols, head, VEC, PEEL)
    x_row = x_ptr + body_offset(row64, stride_xm, head, VEC, PEEL)
    y_row = y_ptr + body_offset(row64, stride_ym, head, VEC, PEEL)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_body
    x = tl.load(x_row + cols.to(tl.int64) * stride_xn, mask=mask, other=float("-inf"))
    x = x.to(tl.float32)
    m = tl.max(x, 0)  # an all -inf row: max = -inf, NaN everywhere
    if TAIL > 0:
        tail_cols = BLOCK + tl.arange(0, TAIL)
        tail_mask = tail_cols < n_body
        x_tail = tl.load(
            x_row + tail_cols.to(tl.int64) * stride_xn, mask=tail_mask, other=float("-inf")
        ).to(tl.float32)
        m = tl.maximum(m, tl.max(x_tail, 0))
    if PEEL:
        peel, peel_mask = peel_cols(head, n_body, n_cols, VEC)
        x_peel = tl.load(x_row + peel, mask=peel_mask, other=float("-inf")).to(tl.float32)
        m = tl.maximum(m, tl.max(x_peel, 0))
    e = tl.exp(x - m)
    s = tl.sum(e, 0)
    if TAIL > 0:
        e_tail = tl.exp(x_tail - m)
        s += tl.sum(e_tail, 0)
    if PEEL:
        e_peel = tl.exp(x_peel - m)
        s += tl.sum(e_peel, 0)
        tl.store(y_row + peel, (e_peel / s).to(y_ptr.dtype.element_ty), mask=peel_mask)
    if TAIL > 0:
        tl.store(y_row + tail_cols, (e_tail / s).to(y_ptr.dtype.element_ty), mask=tail_mask)
    tl.store(y_row + cols, (e / s).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit(do_not_specialize=_RUNTIME_ARGS)
def _fwd_looped_kernel(
    x_ptr,
    y_ptr,
    n_rows,
    n_cols,
    stride_xm,
    stride_xn,
    stride_ym,
    BLOCK: tl.constexpr,
    VEC: tl.constexpr,
    PEEL: tl.constexpr,
    FIRST: tl.constexpr,
    SECOND: tl.constexpr,
):
    """Looped plan, forward: online (max, sum) over the row's chunks, then a write pass.

    ``PEEL``: the head and tail are loaded before the first pass, so that
    their latency passes behind the body's loads instead of stalling the
    program between the passes, and written before the second.
    """
    n_chunks = tl.cdiv(n_cols, BLOCK)  # the body's, or one more chunk, masked whole
    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0)):
        row64 = tl.cast(row, tl.int64)
        head = row_head(row64 * stride_xm, VEC, PEEL)
        n_body = body_width(n_cols, head, VEC, PEEL)
        x_row = x_ptr + body_offset(row64, stride_xm, head, VEC, PEEL)
        y_row = y_ptr + body_offset(row64, stride_ym, head, VEC, PEEL)
        if PEEL:
            peel, peel_mask = peel_cols(head, n_body, n_cols, VEC)
            x_peel = tl.load(x_row + peel, mask=peel_mask, other=float("-inf")).to(tl.float32)
        m, s = _online_max_sum(x_row, stride_xn, 0, n_chunks, n_body, BLOCK, FIRST)
        if PEEL:
            m, s = _fold(m, s, x_peel)
            y_peel = tl.exp(x_peel - m) / s
            tl.store(y_row + peel, y_peel.to(y_ptr.dtype.element_ty), mask=peel_mask)
        _write_probs(x_row, stride_xn, y_row, m, s, 0, n_chunks, n_body, BLOCK, SECOND)


@triton.jit(do_not_specialize=_RUNTIME_SPLIT_ARGS)
def _fwd_split_stats_kernel(
    x_ptr,
    max_ptr,
    sum_ptr,
    n_cols,
    stride_xm,
    stride_xn,
    chunks_per_split,
    BLOCK: tl.constexpr,
    VEC: tl.constexpr,
    PEEL: tl.constexpr,
):
    """Split plan, forward, kernel 1: program (row, k) writes its slice's (max, sum).

    ``PEEL``: slice 0 also takes the row's head and tail.
    """
    row = tl.program_id(0).to(tl.int64)
    k = tl.program_id(1)
    head = row_head(row * stride_xm, VEC, PEEL)
    n_body = body_width(n_cols, head, VEC, PEEL)
    col0 = k * chunks_per_split * BLOCK
    x_row = x_ptr + body_offset(row, stride_xm, head, VEC, PEEL)
    m, s = _online_max_sum(x_row, stride_xn, col0, chunks_per_split, n_body, BLOCK, "")
    if PEEL:
        m, s = _peel_max_sum(x_row, head, n_body, n_cols, m, s, k == 0, VEC)
    slot = row * tl.num_programs(1) + k
    tl.store(max_ptr + slot, m)
    tl.store(sum_ptr + slot, s)


@triton.jit(do_not_specialize=_RUNTIME_SPLIT_ARGS)
def _fwd_split_write_kernel(
    x_ptr,
    y_ptr,
    max_ptr,
    sum_ptr,
    n_cols,
    stride_xm,
    stride_xn,
    stride_ym,
    chunks_per_split,
    BLOCK: tl.constexpr,
    VEC: tl.constexpr,
    PEEL: tl.constexpr,
    MAX_SPLITS: tl.constexpr,
):
    """Split plan, forward, kernel 2: merge the row's (max, sum) pairs, write slice k.

    ``PEEL``: slice 0 also writes the row's head and tail.
    """
    row = tl.program_id(0).to(tl.int64)
    k = tl.program_id(1)
    n_splits = tl.num_programs(1)
    slots = tl.arange(0, MAX_SPLITS)
    part_max = tl.load(max_ptr + row * n_splits + slots, mask=slots < n_splits, other=float("-inf"))
    part_sum = tl.load(sum_ptr + row * n_splits + slots, mask=slots < n_splits, other=0.0)
    m = tl.max(part_max, 0)
    # No guard needed: m = -inf only when the whole row is -inf, whose answer is NaN.
    s = tl.sum(part_sum * tl.exp(part_max - m), 0)
    head = row_head(row * stride_xm, VEC, PEEL)
    n_body = body_width(n_cols, head, VEC, PEEL)
    col0 = k * chunks_per_split * BLOCK
    x_row = x_ptr + body_offset(row, stride_xm, head, VEC, PEEL)
    y_row = y_ptr + body_offset(row, stride_ym, head, VEC, PEEL)
    _write_probs(x_row, stride_xn, y_row, m, s, col0, chunks_per_split, n_body, BLOCK, "")
    if PEEL:
        _write_peel_probs(x_row, y_row, m, s, head, n_body, n_cols, k == 0, VEC)


@triton.jit
def _tagged(value, tag):
    """One 8-byte word: ``value``'s float32 bits in the low half, ``tag`` in the high half."""
    bits = value.to(tl.int32, bitcast=True).to(tl.int64) & 0xFFFFFFFF
    return (tag.to(tl.int64) << 32) | bits


@triton.jit
def _untagged(word):
    """The float32 in the low half of :func:`_tagged`'s words."""
    return word.to(tl.int32).to(tl.float32, bitcast=True)


@triton.jit
def _poll_tagged(ptr, slots, in_row, tag):
    """The words at ``ptr + slots``, read again until every one in the row carries ``tag``.

    Volatile loads, so each read comes from the L2, where the other
    programs' stores land, never from a stale L1 line. A word is stored
    whole (one 8-byte store), so a word that carries the tag holds its
    program's value too: no fence and no second trip.
    """
    word = tl.zeros(slots.shape, tl.int64)
    stale = 1
    while stale > 0:
        word = tl.load(ptr + slots, mask=in_row, other=0, volatile=True)
        stale = tl.sum((((word >> 32) != tag) & in_row).to(tl.int32), 0)
    return word


@triton.jit(do_not_specialize=[*_RUNTIME_ARGS, "n_counters"])
def _fwd_split_coop_kernel(
    x_ptr,
    y_ptr,
    state_ptr,
    n_counters,
    n_cols,
    stride_xm,
    stride_xn,
    stride_ym,
    BLOCK: tl.constexpr,
    VEC: tl.constexpr,
    PEEL: tl.constexpr,
    SLOTS: tl.constexpr,
):
    """Split plan, forward, in one launch: program (row, k) holds chunk k of the row.

    It publishes its chunk's ``(m_k, s_k)`` with ``e = exp(x - m_k)``, reads
    the row's other pairs as they arrive, ``SLOTS`` at a time, merges them
    online into ``(m, s)`` and writes ``e * (exp(m_k - m) / s)`` from
    registers: one ``exp`` an element and no division, where the two
    launches' write kernel rereads ``x`` and computes ``exp(x - m) / s`` (so
    the last bit may differ between the two).

    ``state_ptr`` is the stream's buffer (:func:`_launch_forward`): the row
    maxima words at ``[0, n_counters)``, the row sums' at ``[n_counters,
    2 n_counters)``, then an int64 counter for each row and program count
    (``row * n_counters + programs - 1``). Every launch adds exactly its
    program count to its rows' counters, so a program's ticket, drawn at its
    start, numbers its launch among that counter's (its generation). A
    program stores its max and its sum as words tagged with that generation
    and the program count (:func:`_tagged`); the others poll until the row's
    words carry their tag (:func:`_poll_tagged`). A word at slot ``row *
    programs + k`` from another program count carries another count; from
    the same count, it was the same row's, of the previous generation (every
    launch writes all its row's slots). The buffer starts zeroed, and a tag
    is never 0. Every program of the launch must be resident at once, or the
    first ones would wait for ever: see :func:`_cooperative`. ``PEEL``:
    program 0 of a row also holds the row's head and tail.
    """
    row = tl.program_id(0).to(tl.int64)
    k = tl.program_id(1)
    n_splits = tl.num_programs(1)
    max_ptr = state_ptr
    sum_ptr = state_ptr + n_counters
    count_ptr = state_ptr + 2 * n_counters + row * n_counters + n_splits - 1
    # Relaxed: only the count matters, and it comes back while the chunk loads.
    ticket = tl.atomic_add(count_ptr, 1, sem="relaxed", scope="gpu")
    head = row_head(row * stride_xm, VEC, PEEL)
    n_body = body_width(n_cols, head, VEC, PEEL)
    x_row = x_ptr + body_offset(row, stride_xm, head, VEC, PEEL)
    cols = k * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_body
    x = tl.load(x_row + cols.to(tl.int64) * stride_xn, mask=mask, other=float("-inf"))
    x = x.to(tl.float32)
    m_k = tl.max(x, 0)
    if PEEL:
        peel, peel_mask = peel_cols(head, n_body, n_cols, VEC)
        peel_mask = peel_mask & (k == 0)
        x_peel = tl.load(x_row + peel, mask=peel_mask, other=float("-inf")).to(tl.float32)
        m_k = tl.maximum(m_k, tl.max(x_peel, 0))
    e = tl.exp(x - _shift_for(m_k))  # 0 where x = -inf, masked lanes too
    s_k = tl.sum(e, 0)
    if PEEL:
        e_peel = tl.exp(x_peel - _shift_for(m_k))
        s_k += tl.sum(e_peel, 0)
    generation = (ticket // n_splits) % COOP_GENERATIONS
    tag = generation * COOP_TAG_COUNTS + n_splits
    slot = row * n_splits + k
    tl.store(max_ptr + slot, _tagged(m_k, tag))
    tl.store(sum_ptr + slot, _tagged(s_k, tag))
    # The row's pairs, SLOTS at a time (all of them past COOP_SLOTS), merged online.
    m = float("-inf")
    s = 0.0
    for first in range(0, n_splits, SLOTS):
        slots = row * n_splits + first + tl.arange(0, SLOTS)
        in_row = first + tl.arange(0, SLOTS) < n_splits
        part_max = _untagged(_poll_tagged(max_ptr, slots, in_row, tag))
        part_sum = _untagged(_poll_tagged(sum_ptr, slots, in_row, tag))
        part_max = tl.where(in_row, part_max, float("-inf"))
        part_sum = tl.where(in_row, part_sum, 0.0)
        m_new = tl.maximum(m, tl.max(part_max, 0))
        shift = _shift_for(m_new)
        s = s * tl.exp(m - shift) + tl.sum(part_sum * tl.exp(part_max - shift), 0)
        m = m_new
    # m = -inf only when the whole row is (s = 0): the scale is NaN, as the answer.
    scale = tl.exp(m_k - m) / s
    y_row = y_ptr + body_offset(row, stride_ym, head, VEC, PEEL)
    tl.store(y_row + cols, (e * scale).to(y_ptr.dtype.element_ty), mask=mask)
    if PEEL:
        tl.store(y_row + peel, (e_peel * scale).to(y_ptr.dtype.element_ty), mask=peel_mask)


@triton.jit(do_not_specialize=_RUNTIME_ARGS)
def _bwd_block_kernel(
    y_ptr,
    dy_ptr,
    dx_ptr,
    n_rows,
    n_cols,
    stride_ym,
    stride_yn,
    stride_dym,
    stride_dyn,
    stride_dxm,
    BLOCK: tl.constexpr,
    TAIL: tl.constexpr,
    VEC: tl.constexpr,
    PEEL: tl.constexpr,
):
    """Block plan, backward: ``dx = y * (dy - sum(dy * y))``, one read and one write per row.

    ``TAIL`` and ``PEEL`` as in :func:`_fwd_block_kernel`.
    """
    cols = tl.arange(0, BLOCK)
    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0)):
        row64 = tl.cast(row, tl.int64)
        head = row_head(row64 * stride_ym, VEC, PEEL)
        n_body = body_width(n_cols, head, VEC, PEEL)
        mask = cols < n_body
        y_row = y_ptr + body_offset(row64, stride_ym, head, VEC, PEEL)
        dy_row = dy_ptr + body_offset(row64, stride_dym, head, VEC, PEEL)
        dx_row = dx_ptr + body_offset(row64, stride_dxm, head, VEC, PEEL)
        y, dy = _load_pair(y_row, stride_yn, dy_row, stride_dyn, cols, mask, "")
        dot = tl.sum(y * dy, 0)
        if TAIL > 0:
            tail_cols = BLOCK + tl.arange(0, TAIL)
            tail_mask = tail_cols < n_body
            y_tail, dy_tail = _load_pair(
                y_row, stride_yn, dy_row, stride_dyn, tail_cols, tail_mask, ""
            )
            dot += tl.sum(y_tail * dy_tail, 0)
        if PEEL:
            peel, peel_mask = peel_cols(head, n_body, n_cols, VEC)
            y_peel, dy_peel = _load_pair(y_row, 1, dy_row, 1, peel, peel_mask, "")
            dot += tl.sum(y_peel * dy_peel, 0)
            dx_peel = y_peel * (dy_peel - dot)
            tl.store(dx_row + peel, dx_peel.to(dx_ptr.dtype.element_ty), mask=peel_mask)
        if TAIL > 0:
            dx_tail = y_tail * (dy_tail - dot)
            tl.store(dx_row + tail_cols, dx_tail.to(dx_ptr.dtype.element_ty), mask=tail_mask)
        dx = y * (dy - dot)
        tl.store(dx_row + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)


@triton.jit(do_not_specialize=_RUNTIME_ARGS)
def _bwd_looped_kernel(
    y_ptr,
    dy_ptr,
    dx_ptr,
    n_rows,
    n_cols,
    stride_ym,
    stride_yn,
    stride_dym,
    stride_dyn,
    stride_dxm,
    BLOCK: tl.constexpr,
    VEC: tl.constexpr,
    PEEL: tl.constexpr,
    FIRST: tl.constexpr,
    SECOND: tl.constexpr,
):
    """Looped plan, backward: a dot-product pass over the row's chunks, then a write pass.

    ``PEEL``: as the forward, with ``y`` and ``dy`` and the gradient.
    """
    n_chunks = tl.cdiv(n_cols, BLOCK)  # the body's, or one more chunk, masked whole
    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0)):
        row64 = tl.cast(row, tl.int64)
        head = row_head(row64 * stride_ym, VEC, PEEL)
        n_body = body_width(n_cols, head, VEC, PEEL)
        y_row = y_ptr + body_offset(row64, stride_ym, head, VEC, PEEL)
        dy_row = dy_ptr + body_offset(row64, stride_dym, head, VEC, PEEL)
        dx_row = dx_ptr + body_offset(row64, stride_dxm, head, VEC, PEEL)
        if PEEL:
            peel, peel_mask = peel_cols(head, n_body, n_cols, VEC)
            y_peel, dy_peel = _load_pair(y_row, 1, dy_row, 1, peel, peel_mask, "")
        dot = _row_dot(y_row, stride_yn, dy_row, stride_dyn, 0, n_chunks, n_body, BLOCK, FIRST)
        if PEEL:
            dot += tl.sum(y_peel * dy_peel, 0)
            dx_peel = y_peel * (dy_peel - dot)
            tl.store(dx_row + peel, dx_peel.to(dx_ptr.dtype.element_ty), mask=peel_mask)
        _write_grad(
            y_row, stride_yn, dy_row, stride_dyn, dx_row, dot, 0, n_chunks, n_body, BLOCK, SECOND
        )


@triton.jit(do_not_specialize=_RUNTIME_SPLIT_ARGS)
def _bwd_split_dot_kernel(
    y_ptr,
    dy_ptr,
    dot_ptr,
    n_cols,
    stride_ym,
    stride_yn,
    stride_dym,
    stride_dyn,
    chunks_per_split,
    BLOCK: tl.constexpr,
    VEC: tl.constexpr,
    PEEL: tl.constexpr,
):
    """Split plan, backward, kernel 1: program (row, k) writes its slice's ``sum(y * dy)``.

    ``PEEL``: slice 0 also takes the row's head and tail.
    """
    row = tl.program_id(0).to(tl.int64)
    k = tl.program_id(1)
    head = row_head(row * stride_ym, VEC, PEEL)
    n_body = body_width(n_cols, head, VEC, PEEL)
    col0 = k * chunks_per_split * BLOCK
    y_row = y_ptr + body_offset(row, stride_ym, head, VEC, PEEL)
    dy_row = dy_ptr + body_offset(row, stride_dym, head, VEC, PEEL)
    dot = _row_dot(y_row, stride_yn, dy_row, stride_dyn, col0, chunks_per_split, n_body, BLOCK, "")
    if PEEL:
        dot += _peel_dot(y_row, dy_row, head, n_body, n_cols, k == 0, VEC)
    tl.store(dot_ptr + row * tl.num_programs(1) + k, dot)


@triton.jit(do_not_specialize=_RUNTIME_SPLIT_ARGS)
def _bwd_split_write_kernel(
    y_ptr,
    dy_ptr,
    dx_ptr,
    dot_ptr,
    n_cols,
    stride_ym,
    stride_yn,
    stride_dym,
    stride_dyn,
    stride_dxm,
    chunks_per_split,
    BLOCK: tl.constexpr,
    VEC: tl.constexpr,
    PEEL: tl.constexpr,
    MAX_SPLITS: tl.constexpr,
):
    """Split plan, backward, kernel 2: add up the row's partial dots, write slice k.

    ``PEEL``: slice 0 also writes the row's head and tail.
    """
    row = tl.program_id(0).to(tl.int64)
    k = tl.program_id(1)
    n_splits = tl.num_programs(1)
    slots = tl.arange(0, MAX_SPLITS)
    dot = tl.sum(tl.load(dot_ptr + row * n_splits + slots, mask=slots < n_splits, other=0.0), 0)
    head = row_head(row * stride_ym, VEC, PEEL)
    n_body = body_width(n_cols, head, VEC, PEEL)
    col0 = k * chunks_per_split * BLOCK
    y_row = y_ptr + body_offset(row, stride_ym, head, VEC, PEEL)
    dy_row = dy_ptr + body_offset(row, stride_dym, head, VEC, PEEL)
    dx_row = dx_ptr + body_offset(row, stride_dxm, head, VEC, PEEL)
    _write_grad(
        y_row, stride_yn, dy_row, stride_dyn, dx_row, dot, col0, chunks_per_split, n_body, BLOCK, ""
    )
    if PEEL:
        _write_peel_grad(y_row, dy_row, dx_row, dot, head, n_body, n_cols, k == 0, VEC)


# ---------------------------------------------------------------------------
# Launchers
# ---------------------------------------------------------------------------


def _cooperative(n_rows: int, n_splits: int, chunks_per_split: int, device: torch.device) -> bool:
    """Whether a split forward runs as one launch of programs that wait for each other.

    Each program must hold its slice in registers (one chunk), and every
    program must be resident at once: at most one a streaming multiprocessor,
    which any kernel gets, so a grid no larger than the SM count can wait
    without deadlock even when other work holds the GPU. Only for compiled
    kernels on real tensors: the interpreter runs programs one after
    another (the first would wait for ever), and a traced launch
    (``torch.compile``, dispatch modes: :func:`eager_route` is False) cannot
    carry the per-stream state. A program count must also fit the words'
    tags (``COOP_TAG_COUNTS``). Otherwise the two launches of the split plan.
    """
    return (
        chunks_per_split == 1
        and n_splits < COOP_TAG_COUNTS.value
        and n_rows * n_splits <= plans.sm_count(device)
        and not interpreter_enabled()
        and eager_route()
    )


def _coop_slots(n_splits: int) -> int:
    """Words a cooperative program polls at once: the whole row's, at least ``COOP_SLOTS``.

    Up to ``COOP_SLOTS`` programs a row, one warp's reduction; past that, one
    poll of every word merged across warps (shared memory and a barrier a
    poll), where polling ``COOP_SLOTS`` words at a time waits one round trip
    to the L2 per group in turn (1x262144 float16 in 128 programs: 3.77 us
    against 5.64, ``results/h200/checks/coop-split-ab-20261203T2254Z.log``).
    The power of two by ``bit_length``: ``triton.next_power_of_2`` costs
    microseconds a call on the host.
    """
    return max(COOP_SLOTS, 1 << (n_splits - 1).bit_length())


def _launch_forward(x: torch.Tensor, y: torch.Tensor, plan: plans.RowPlan) -> None:
    """Write the softmax of ``x``'s rows (its last dimension) into ``y``.

    ``y`` is contiguous with ``x``'s shape and dtype, so row ``r`` starts at
    ``r * n_cols``. Tests pass a NaN-poisoned ``y`` to prove that every element
    is written.
    """
    if not y.is_contiguous():
        raise ValueError("y must be contiguous")
    if x.numel() == 0:
        return
    x2 = plans.as_rows(x)
    n_rows, n_cols = x2.shape
    stride_xm, stride_xn = x2.stride()
    vec, peel = row_vec(x.element_size(), n_cols, (stride_xm, n_cols), stride_xn == 1)
    consts = {"BLOCK": plan.block, "VEC": vec, "PEEL": peel, "num_warps": plan.num_warps}
    with device_guard(x):
        if plan.kind == "block":
            consts["BLOCK"], consts["TAIL"] = plans.block_pieces(n_cols, plan.block)
            for first_row, programs in plans.block_launches(n_rows):
                launchable(_fwd_block_kernel)[(programs,)](
                    x2, y, first_row, n_cols, stride_xm, stride_xn, n_cols, **consts
                )
            return
        if plan.kind == "looped":
            grid = (plans.persistent_programs(n_rows, plan, plans.sm_count(x.device)),)
            launchable(_fwd_looped_kernel)[grid](
                x2,
                y,
                n_rows,
                n_cols,
                stride_xm,
                stride_xn,
                n_cols,
                FIRST=LOOPED_FIRST_PASS,
                SECOND=LOOPED_SECOND_PASS,
                **consts,
            )
            return
        chunks_per_split, n_splits = plans.split_segments(n_cols, plan)
        grid = (n_rows, n_splits)
        if _cooperative(n_rows, n_splits, chunks_per_split, x.device):
            # Words for every program of the grid, and a counter a row and program
            # count: all three at most the SM count.
            sms = plans.sm_count(x.device)
            state = stream_buffer("softmax row state", (2 + sms) * sms, torch.int64, x.device)
            launchable(_fwd_split_coop_kernel)[grid](
                x2,
                y,
                state,
                sms,
                n_cols,
                stride_xm,
                stride_xn,
                n_cols,
                SLOTS=_coop_slots(n_splits),
                **consts,
            )
            return
        part_max = scratch((n_rows, n_splits), torch.float32, x.device)
        part_sum = scratch((n_rows, n_splits), torch.float32, x.device)
        launchable(_fwd_split_stats_kernel)[grid](
            x2, part_max, part_sum, n_cols, stride_xm, stride_xn, chunks_per_split, **consts
        )
        launchable(_fwd_split_write_kernel)[grid](
            x2,
            y,
            part_max,
            part_sum,
            n_cols,
            stride_xm,
            stride_xn,
            n_cols,
            chunks_per_split,
            MAX_SPLITS=plans.MAX_SPLITS,
            **consts,
        )


def _launch_backward(
    y: torch.Tensor, dy: torch.Tensor, dx: torch.Tensor, plan: plans.RowPlan
) -> None:
    """Write ``dx = y * (dy - sum(dy * y))`` row by row into ``dx``.

    ``y`` and ``dy`` may have any strides; ``dx`` is contiguous with ``y``'s
    shape and dtype (tests pass a NaN-poisoned one).
    """
    if not dx.is_contiguous():
        raise ValueError("dx must be contiguous")
    if y.numel() == 0:
        return
    y2, dy2 = plans.as_rows(y), plans.as_rows(dy)
    n_rows, n_cols = y2.shape
    strides = (*y2.stride(), *dy2.stride())  # stride_ym, stride_yn, stride_dym, stride_dyn
    vec, peel = row_vec(
        y.element_size(), n_cols, strides[::2] + (n_cols,), strides[1] == strides[3] == 1
    )
    consts = {"BLOCK": plan.block, "VEC": vec, "PEEL": peel, "num_warps": plan.num_warps}
    with device_guard(y):
        if plan.kind == "block":
            consts["BLOCK"], consts["TAIL"] = plans.block_pieces(n_cols, plan.block)
        if plan.kind in ("block", "looped"):
            kernel = _bwd_block_kernel if plan.kind == "block" else _bwd_looped_kernel
            if plan.kind == "looped":
                consts |= {"FIRST": LOOPED_FIRST_PASS, "SECOND": LOOPED_SECOND_PASS}
            grid = (plans.persistent_programs(n_rows, plan, plans.sm_count(y.device)),)
            launchable(kernel)[grid](y2, dy2, dx, n_rows, n_cols, *strides, n_cols, **consts)
            return
        chunks_per_split, n_splits = plans.split_segments(n_cols, plan)
        part_dot = scratch((n_rows, n_splits), torch.float32, y.device)
        grid = (n_rows, n_splits)
        launchable(_bwd_split_dot_kernel)[grid](
            y2, dy2, part_dot, n_cols, *strides, chunks_per_split, **consts
        )
        launchable(_bwd_split_write_kernel)[grid](
            y2,
            dy2,
            dx,
            part_dot,
            n_cols,
            *strides,
            n_cols,
            chunks_per_split,
            MAX_SPLITS=plans.MAX_SPLITS,
            **consts,
        )


# ---------------------------------------------------------------------------
# torch.library registration (custom ops + autograd)
# ---------------------------------------------------------------------------


def _full_block_plan(x: torch.Tensor, plan: str | plans.RowPlan, warps: int) -> plans.RowPlan:
    """``plans.choose_for``, with ``auto``'s full blocks held in ``warps`` warps.

    ``auto``'s looped plan of a row that fills at least
    :data:`FULL_BLOCK_MIN_FILL` of a full block becomes the block plan, and a
    block plan past ``plan_rule.MAX_BLOCK_BYTES`` takes ``warps``. A forced
    plan (a kind or a :class:`~kernel_portfolio.plans.RowPlan`) is launched as
    given, and so is a symbolic width (``torch.compile`` with dynamic shapes)
    with the looped plan, so that the graph does not guard on the fill.
    """
    chosen = plans.choose_for(x, plan)
    if plan != "auto":
        return chosen
    if chosen.kind == "looped" and _fills_full_block(x.shape[-1], x.element_size()):
        chosen = plans.choose_for(x, "block")
    if chosen.kind == "block" and chosen.block * x.element_size() > plan_rule.MAX_BLOCK_BYTES:
        return dataclasses.replace(chosen, num_warps=warps)
    return chosen


def _fills_full_block(n_cols, elem_bytes: int) -> bool:
    """Whether a row of ``n_cols`` fills :data:`FULL_BLOCK_MIN_FILL` of a full block.

    A full block is the row's power of two when wider than
    ``plan_rule.MAX_BLOCK_BYTES`` and at most ``plan_rule.FULL_BLOCK_MAX_BYTES``;
    a symbolic ``n_cols`` never does.
    """
    if type(n_cols) is not int:
        return False
    width_bytes = (1 << (n_cols - 1).bit_length()) * elem_bytes
    return (
        plan_rule.MAX_BLOCK_BYTES < width_bytes <= plan_rule.FULL_BLOCK_MAX_BYTES
        and n_cols * elem_bytes >= FULL_BLOCK_MIN_FILL * width_bytes
    )


def _forward_plan(x: torch.Tensor, plan: str | plans.RowPlan) -> plans.RowPlan:
    """The forward's: full blocks in :data:`FULL_BLOCK_FWD_WARPS` (:func:`_full_block_plan`)."""
    return _full_block_plan(x, plan, FULL_BLOCK_FWD_WARPS)


def _backward_plan(x: torch.Tensor, plan: str | plans.RowPlan) -> plans.RowPlan:
    """The backward's: full blocks in :data:`FULL_BLOCK_BWD_WARPS` (:func:`_full_block_plan`)."""
    return _full_block_plan(x, plan, FULL_BLOCK_BWD_WARPS)


def _forward(x: torch.Tensor, plan: plans.RowPlan) -> torch.Tensor:
    """The softmax of ``x``'s rows: the body of ``kp::softmax`` and of the eager routes."""
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    _launch_forward(x, y, plan)
    return y


def _backward_rows(y: torch.Tensor, dy: torch.Tensor, plan: plans.RowPlan) -> torch.Tensor:
    """``dx`` from ``y`` and ``dy``: the body of ``kp::softmax_backward`` and the eager backward."""
    dx = torch.empty_like(y, memory_format=torch.contiguous_format)
    _launch_backward(y, dy, dx, plan)
    return dx


def _forward_direct(x: torch.Tensor, plan: plans.RowPlan) -> torch.Tensor:
    """:func:`_forward` launching straight: the direct route, and the Function's forward."""
    with direct_launches():
        return _forward(x, plan)


def _backward_direct(y: torch.Tensor, dy: torch.Tensor, plan: plans.RowPlan) -> torch.Tensor:
    """:func:`_backward_rows` launching straight: the Function's backward."""
    with direct_launches():
        return _backward_rows(y, dy, plan)


@triton_op("kp::softmax", mutates_args=())
def _softmax_op(
    x: torch.Tensor, kind: str, block: int, num_warps: int, splits: int
) -> torch.Tensor:
    return _forward(x, _forward_plan(x, plans.from_op_args(kind, block, num_warps, splits)))


@triton_op("kp::softmax_backward", mutates_args=())
def _softmax_backward_op(
    y: torch.Tensor, dy: torch.Tensor, kind: str, block: int, num_warps: int, splits: int
) -> torch.Tensor:
    plan = _backward_plan(y, plans.from_op_args(kind, block, num_warps, splits))
    return _backward_rows(y, dy, plan)


def _setup_context(ctx, inputs, output) -> None:
    ctx.save_for_backward(output)
    ctx.plan_args = inputs[1:]


def _backward(ctx, dy):
    (y,) = ctx.saved_tensors
    dx = torch.ops.kp.softmax_backward(y, dy, *ctx.plan_args)
    return dx, None, None, None, None


_softmax_op.register_autograd(_backward, setup_context=_setup_context)


# ---------------------------------------------------------------------------
# Eager route with autograd (contracts.eager_route)
# ---------------------------------------------------------------------------


#: The Function's forward and backward launches, recorded per signature and replayed.
_FORWARD_REPLAYS = Replays()
_BACKWARD_REPLAYS = Replays()


class _Softmax(torch.autograd.Function):
    """``softmax`` on the eager route: saves ``y`` and the plan, as ``kp::softmax`` does."""

    @staticmethod
    def forward(ctx, x, plan):
        y = _FORWARD_REPLAYS.call(_forward_direct, (x,), (_forward_plan(x, plan),))
        ctx.save_for_backward(y)
        ctx.plan = _backward_plan(x, plan)
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        (y,) = ctx.saved_tensors
        if eager_route():
            return _BACKWARD_REPLAYS.call(_backward_direct, (y, dy), (ctx.plan,)), None
        # A backward replayed under a dispatch mode (compiled autograd).
        return torch.ops.kp.softmax_backward(y, dy, *plans.to_op_args(ctx.plan)), None


# ---------------------------------------------------------------------------
# Public function
# ---------------------------------------------------------------------------

#: Direct-route calls recorded per input signature and replayed (:class:`Replays`).
_REPLAYS = Replays()


def softmax(x: torch.Tensor, dim: int = -1, plan: str | plans.RowPlan = "auto") -> torch.Tensor:
    """Softmax along ``dim``; equals ``torch.softmax(x, dim)``.

    Computed in float32 and rounded once to ``x``'s dtype. ``-inf`` entries give
    exactly 0; a row of nothing but ``-inf`` gives NaN, as in PyTorch.
    Differentiable (``dx = y * (dy - sum(dy * y))``, on the same plan); double
    backward is not supported.

    Any strides are read in place when the leading dimensions collapse into
    one row stride (contiguous tensors, rows with gaps, 2-D transposed or
    expanded views); otherwise one copy is made. For ``dim`` other than the
    last, ``x.movedim(dim, -1)`` (a view) goes through the same path and the
    result is moved back: a view of a contiguous buffer laid out with ``dim``
    last, so its strides differ from ``torch.softmax``'s output but its values
    do not.

    Args:
        x: float32, float16 or bfloat16 tensor on a CUDA device (or on the CPU
            with ``TRITON_INTERPRET=1``). Any shape, including empty.
        dim: The dimension to normalise over.
        plan: ``"auto"`` (:func:`kernel_portfolio.plans.choose` decides),
            ``"block"``, ``"looped"``, ``"split"``, or a
            :class:`~kernel_portfolio.plans.RowPlan` to force chunk width,
            warps and splits.

    Returns:
        A tensor of ``x``'s shape and dtype.

    Raises:
        TypeError: ``x`` is not a tensor or has an unsupported dtype; ``dim``
            is not an int.
        ValueError: ``x`` is on an unusable device; ``dim`` is out of range;
            ``plan`` is not an allowed value, or is a block plan narrower than
            the row.

    Note:
        The kernels compile once per dtype and plan: the row count, the width
        and the strides are runtime arguments, so a new batch size (or a new
        width with the same block pieces) does not recompile. The
        module docstring says what is specialised and why.

    Example:
        >>> import kernel_portfolio as kp
        >>> probs = kp.softmax(scores, dim=-1)   # scores: (batch, heads, q, k)
    """
    return _REPLAYS.call(_softmax, (x,), (dim, plan))


def _softmax(x: torch.Tensor, dim: int, plan: str | plans.RowPlan) -> torch.Tensor:
    """The body of :func:`softmax` (what a replay stands in for): checks, then a route."""
    check_tensor(x, "x")
    dim = check_dim(dim, x.ndim)
    last = dim == max(x.ndim - 1, 0)
    rows = x.reshape(1) if x.ndim == 0 else x if last else x.movedim(dim, -1)
    if direct_route(x):
        y = _forward_direct(rows, _forward_plan(rows, plan))
    elif eager_route():
        y = _Softmax.apply(rows, plan)
    else:
        y = torch.ops.kp.softmax(rows, *plans.to_op_args(plan))
    if x.ndim == 0:
        return y.reshape(())
    return y if last else y.movedim(-1, dim)
