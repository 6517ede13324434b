"""Sum over the last dimension, forward and backward.

Math: ``out[r] = sum_j x[r, j]``, accumulated in float32 whatever the input
dtype, rounded once to the output dtype. Backward: ``dx[r, j] = dout[r]``, a
broadcast (an expanded view, no kernel).

Memory traffic for ``M`` rows of ``N`` elements of ``b`` bytes, writing
``b_out``-byte results, per plan (:mod:`kernel_portfolio.plans`):

* ``block``: one program loads whole rows and reduces them in registers:
  ``MNb + M b_out``. Narrow rows are summed several at a time, as one tile of
  at most :data:`BLOCK_TILE_BYTES` and :data:`BLOCK_TILE_ROWS` rows
  (:func:`block_tile` gives the rows and the warps): a program per row of
  512 or 1024 half-precision columns holds too little in flight to keep the
  memory busy. On the H200 (an A/B of the settings,
  ``results/h200/checks/row-tile-ab-20261202T1510Z.log``) this setting was
  the fastest on the mean of those timed; it sums narrow rows of many rows
  much faster than one row a program, and a few narrow rows (4x1000) a
  little slower, one program then doing the work of four.
* ``looped``: one program walks a row in chunks, adding each chunk into a
  ``BLOCK``-wide float32 accumulator that is reduced once at the end: the same
  ``MNb + M b_out``, since a sum needs no second pass.
* ``split``: ``S`` programs share a row and each writes a float32 partial sum;
  the row's last program to finish (a counter a row, kept per stream by
  :func:`kernel_portfolio.contracts.stream_buffer` and back at 0 after each
  launch) adds the row's ``S`` partials in slot order and writes the result,
  in the same launch: ``MNb + 8MS + M b_out``. No program waits for
  another, so unlike the softmax's cooperative launch any grid is safe.
  Traced launches (``torch.compile``, dispatch modes), which cannot keep
  state between calls, take zeroed counters of their own each call. A split
  program loads two chunks a step: with
  about two programs an SM (:func:`kernel_portfolio.plans.split_count`), one
  chunk a step left each SM a chunk or two in flight and paid a memory
  latency a chunk. A looped program keeps one chunk a step: its chunks are
  twice as wide and its rows many.

Both chunked plans load a chunk as vectors of ``VEC`` columns (16 bytes) and
sum each vector in its thread before adding it to the float32 accumulator,
which so holds a vector's sum instead of ``VEC`` columns: on sm_90 a looped
program of 16384 half-precision columns over 16 warps takes 32 registers
instead of 64, four programs an SM instead of two, twice the bytes in flight
(``tests/test_spills.py`` compiles every real launch and counts its spills).

The public function reaches the launcher by one of three routes, as in
:mod:`kernel_portfolio.ops.softmax` (:func:`kernel_portfolio.contracts.eager_route`):
in eager code directly when autograd will not record, else through an
autograd Function of this module that calls it directly (the ``torch.ops``
dispatcher and its autograd wrapper cost far more host time than the kernel);
under ``torch.compile``, dispatch modes and ``torch.func`` through the custom
op ``kp::row_sum``, whose body is the same code.

Specialisation, strides, row alignment and int64 offsets follow
:mod:`kernel_portfolio.ops.softmax`: ``BLOCK``, ``TAIL`` (a block plan's
second piece, or 0), ``ROWS`` (a block plan's rows a program), ``VEC``,
``PEEL`` (rows not 16 bytes apart: :mod:`kernel_portfolio.ops.peel`) and the
warp count are compiled in; the row
count (or a launch's first row), row width and row strides are runtime
arguments Triton does not specialise, so a new batch size never recompiles;
rows are read in place through
``(stride_xm, stride_xn)`` or, when the leading dimensions do not collapse,
after one copy (:func:`kernel_portfolio.plans.as_rows`).

Every load of a row of 16-bit elements is marked ``evict_first``
(:data:`LOAD_POLICY`): the kernel reads each line once, so its lines are the
first an L2 miss replaces, and the lines other kernels left in the L2 stay.
On the H200 (``results/h200/checks/load-policy-ab-20261202T0614Z.log``) this
sped the float16 and bfloat16 row sums up at every shape timed, and slowed the
float32 row sum at 16384x8192, which keeps the default.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch.library import triton_op

from kernel_portfolio import plans
from kernel_portfolio.contracts import (
    SUPPORTED_DTYPES,
    Replays,
    check_tensor,
    device_guard,
    direct_launches,
    direct_route,
    eager_route,
    launchable,
    scratch,
    stream_buffer,
)
from kernel_portfolio.ops.peel import body_offset, body_width, peel_cols, row_head, row_vec

#: Runtime arguments Triton must not specialise (see the module docstring).
_RUNTIME_ARGS = ["first_row", "n_rows", "n_cols", "stride_xm"]
_RUNTIME_SPLIT_ARGS = [*_RUNTIME_ARGS, "chunks_per_split"]
#: ``tl.load``'s ``eviction_policy`` for rows of 16-bit elements (the kernels'
#: ``EVICT``; float32 rows take ``""``, the hardware default): see the module
#: docstring.
LOAD_POLICY = "evict_first"
#: A block-plan program sums as many whole rows as fit in this many bytes, at
#: most :data:`BLOCK_TILE_ROWS` (:func:`block_tile`): see the module docstring.
BLOCK_TILE_BYTES = 8192
BLOCK_TILE_ROWS = 4
#: Most warps a block-plan program of several rows gets.
TILE_WARPS = 16

# ---------------------------------------------------------------------------
# Kernels
# ---------------------------------------------------------------------------


@triton.jit
def _chunked_sum(
    x_row,
    stride_xn,
    col0,
    n_chunks,
    n_cols,
    BLOCK: tl.constexpr,
    VEC: tl.constexpr,
    EVICT: tl.constexpr,
    STEP: tl.constexpr,
):
    """Float32 sum of ``n_chunks`` ``BLOCK``-wide chunks of a row from ``col0``.

    ``STEP`` chunks a step: their loads do not wait on one another's adds, so
    a program has ``STEP`` chunks in flight (see the module docstring). A
    chunk is loaded as ``BLOCK // VEC`` vectors of ``VEC`` columns, each held
    by one thread and summed there before it is added in: the float32
    accumulator holds a vector's sum, not ``VEC`` columns.
    """
    GROUP: tl.constexpr = VEC if VEC <= BLOCK else BLOCK  # a chunk narrower than a vector
    acc = tl.zeros((BLOCK // GROUP,), tl.float32)
    lanes = tl.arange(0, BLOCK // GROUP)[:, None] * GROUP + tl.arange(0, GROUP)[None, :]
    for c in range(0, n_chunks, STEP):
        # The step's chunks add up before one reduction into the accumulator:
        # Triton 3.6 asserts (OptimizeThreadLocality) on a loop that reduces
        # into its accumulator twice.
        step = tl.zeros((BLOCK // GROUP, GROUP), tl.float32)
        for u in tl.static_range(STEP):
            cols = col0 + (c + u) * BLOCK + lanes
            x = tl.load(
                x_row + cols.to(tl.int64) * stride_xn,
                mask=(cols < n_cols) & (c + u < n_chunks),
                other=0.0,
                eviction_policy=EVICT,
            )
            step += x.to(tl.float32)
        acc += tl.sum(step, 1)
    return tl.sum(acc, 0)


@triton.jit
def _peel_sum(x_body, head, n_body, n_cols, VEC: tl.constexpr):
    """Float32 sum of a row's head and tail (:func:`kernel_portfolio.ops.peel.peel_cols`)."""
    peel, peel_mask = peel_cols(head, n_body, n_cols, VEC)
    return tl.sum(tl.load(x_body + peel, mask=peel_mask, other=0.0).to(tl.float32), 0)


@triton.jit(do_not_specialize=_RUNTIME_ARGS)
def _block_kernel(
    x_ptr,
    out_ptr,
    first_row,
    n_rows,
    n_cols,
    stride_xm,
    stride_xn,
    BLOCK: tl.constexpr,
    TAIL: tl.constexpr,
    ROWS: tl.constexpr,
    VEC: tl.constexpr,
    PEEL: tl.constexpr,
    EVICT: tl.constexpr,
):
    """Block plan: rows are loaded once, ``ROWS`` at a time, and reduced in registers.

    Program ``p`` takes the ``ROWS`` rows from ``first_row + p * ROWS``, those
    before ``n_rows`` (a program per group of rows:
    :func:`kernel_portfolio.plans.block_launches`). A ``TAIL`` (not 0) is a
    second piece of each row's body after its first ``BLOCK`` columns
    (:func:`kernel_portfolio.plans.block_pieces`); ``PEEL`` adds each row's
    head and tail (:mod:`kernel_portfolio.ops.peel`).
    """
    rows = first_row + tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    row_mask = rows < n_rows
    head = row_head(rows * stride_xm, VEC, PEEL)[:, None]  # row * stride can pass 2^31
    n_body = body_width(n_cols, head, VEC, PEEL)
    x_rows = x_ptr + body_offset(rows[:, None], stride_xm, head, VEC, PEEL)
    cols = tl.arange(0, BLOCK)[None, :]
    x = tl.load(
        x_rows + cols.to(tl.int64) * stride_xn,
        mask=row_mask[:, None] & (cols < n_body),
        other=0.0,
        eviction_policy=EVICT,
    )
    total = tl.sum(x.to(tl.float32), 1)
    if TAIL > 0:
        tail_cols = BLOCK + tl.arange(0, TAIL)[None, :]
        x_tail = tl.load(
            x_rows + tail_cols.to(tl.int64) * stride_xn,
            mask=row_mask[:, None] & (tail_cols < n_body),
            other=0.0,
            eviction_policy=EVICT,
        )
        total += tl.sum(x_tail.to(tl.float32), 1)
    if PEEL:
        peel, peel_mask = peel_cols(head, n_body, n_cols, VEC)
        x_peel = tl.load(x_rows + peel, mask=row_mask[:, None] & peel_mask, other=0.0)
        total += tl.sum(x_peel.to(tl.float32), 1)
    tl.store(out_ptr + rows, total.to(out_ptr.dtype.element_ty), mask=row_mask)


@triton.jit(do_not_specialize=_RUNTIME_ARGS)
def _looped_kernel(
    x_ptr,
    out_ptr,
    n_rows,
    n_cols,
    stride_xm,
    stride_xn,
    BLOCK: tl.constexpr,
    VEC: tl.constexpr,
    PEEL: tl.constexpr,
    EVICT: tl.constexpr,
):
    """Looped plan: a program walks its row's body in chunks, one pass (then head and tail)."""
    n_chunks = tl.cdiv(n_cols, BLOCK)  # the body's, or one more chunk, masked whole
    for row in tl.range(tl.program_id(0), n_rows, tl.num_programs(0)):
        row64 = tl.cast(row, tl.int64)
        head = row_head(row64 * stride_xm, VEC, PEEL)
        n_body = body_width(n_cols, head, VEC, PEEL)
        x_row = x_ptr + body_offset(row64, stride_xm, head, VEC, PEEL)
        total = _chunked_sum(x_row, stride_xn, 0, n_chunks, n_body, BLOCK, VEC, EVICT, 1)
        if PEEL:
            total += _peel_sum(x_row, head, n_body, n_cols, VEC)
        tl.store(out_ptr + row64, total.to(out_ptr.dtype.element_ty))


@triton.jit(do_not_specialize=_RUNTIME_SPLIT_ARGS)
def _split_kernel(
    x_ptr,
    out_ptr,
    partial_ptr,
    count_ptr,
    n_cols,
    stride_xm,
    stride_xn,
    chunks_per_split,
    BLOCK: tl.constexpr,
    VEC: tl.constexpr,
    PEEL: tl.constexpr,
    EVICT: tl.constexpr,
    MAX_SPLITS: tl.constexpr,
):
    """Split plan: program (row, k) sums its slice; the row's last to finish writes the row.

    Each program writes its float32 partial sum and counts itself in on the
    row's counter (``count_ptr[row]``, 0 between launches): its store is
    released with its count, and the program that counts last acquires the
    others', adds the row's partials in slot order, writes the sum and sets
    the counter back to 0. No program waits for another, so any grid is safe.
    """
    row = tl.program_id(0).to(tl.int64)
    k = tl.program_id(1)
    n_splits = tl.num_programs(1)
    head = row_head(row * stride_xm, VEC, PEEL)
    n_body = body_width(n_cols, head, VEC, PEEL)
    col0 = k * chunks_per_split * BLOCK
    x_row = x_ptr + body_offset(row, stride_xm, head, VEC, PEEL)
    total = _chunked_sum(x_row, stride_xn, col0, chunks_per_split, n_body, BLOCK, VEC, EVICT, 2)
    if PEEL and k == 0:  # the row's head and tail
        total += _peel_sum(x_row, head, n_body, n_cols, VEC)
    tl.store(partial_ptr + row * n_splits + k, total)
    tl.debug_barrier()  # the program's store before its count
    arrived = tl.atomic_add(count_ptr + row, 1, sem="acq_rel", scope="gpu")
    if arrived == n_splits - 1:
        slots = tl.arange(0, MAX_SPLITS)
        # .cg: from the L2, where the other programs' stores are, never a stale L1 line.
        parts = tl.load(
            partial_ptr + row * n_splits + slots,
            mask=slots < n_splits,
            other=0.0,
            cache_modifier=".cg",
        )
        tl.store(out_ptr + row, tl.sum(parts, 0).to(out_ptr.dtype.element_ty))
        tl.atomic_xchg(count_ptr + row, 0, sem="relaxed", scope="gpu")


# ---------------------------------------------------------------------------
# Launcher
# ---------------------------------------------------------------------------


def block_tile(block_cols: int, elem_bytes: int, num_warps: int) -> tuple[int, int]:
    """Rows and warps of a block-plan program: the kernel's ``ROWS`` and warp count.

    The rows: the largest power of two of rows of ``block_cols`` elements (a
    row's block pieces) that fits in :data:`BLOCK_TILE_BYTES`, at least one and
    at most :data:`BLOCK_TILE_ROWS`. The warps: the plan's ``num_warps`` a row,
    up to :data:`TILE_WARPS` (never fewer than ``num_warps``).
    """
    rows = BLOCK_TILE_BYTES // (block_cols * elem_bytes)
    rows = 1 << (max(1, min(rows, BLOCK_TILE_ROWS)).bit_length() - 1)
    return rows, min(max(TILE_WARPS, num_warps), num_warps * rows)


def _launch_row_sum(x: torch.Tensor, out: torch.Tensor, plan: plans.RowPlan) -> None:
    """Write the sum of each of ``x``'s rows (its last dimension) into ``out``.

    ``out`` is contiguous with shape ``x.shape[:-1]``, so row ``r`` writes
    element ``r``. Tests pass a NaN-poisoned ``out`` to prove that every
    element is written.
    """
    if not out.is_contiguous():
        raise ValueError("out must be contiguous")
    if out.numel() == 0:
        return
    x2 = plans.as_rows(x)
    n_rows, n_cols = x2.shape
    stride_xm, stride_xn = x2.stride()
    vec, peel = row_vec(x.element_size(), n_cols, (stride_xm,), stride_xn == 1)
    consts = {
        "BLOCK": plan.block,
        "VEC": vec,
        "PEEL": peel,
        "EVICT": LOAD_POLICY if x.element_size() == 2 else "",
        "num_warps": plan.num_warps,
    }
    with device_guard(x):
        if plan.kind == "block":
            consts["BLOCK"], consts["TAIL"] = plans.block_pieces(n_cols, plan.block)
            consts["ROWS"], consts["num_warps"] = block_tile(
                consts["BLOCK"] + consts["TAIL"], x.element_size(), plan.num_warps
            )
            rows = consts["ROWS"]
            for first_group, programs in plans.block_launches(plans.cdiv(n_rows, rows)):
                launchable(_block_kernel)[(programs,)](
                    x2, out, first_group * rows, n_rows, n_cols, stride_xm, stride_xn, **consts
                )
            return
        if plan.kind == "looped":
            grid = (plans.persistent_programs(n_rows, plan, plans.sm_count(x.device)),)
            launchable(_looped_kernel)[grid](
                x2, out, n_rows, n_cols, stride_xm, stride_xn, **consts
            )
            return
        chunks_per_split, n_splits = plans.split_segments(n_cols, plan)
        partial = scratch((n_rows, n_splits), torch.float32, x.device)
        if eager_route():
            counts = stream_buffer("row sum counters", n_rows, torch.int32, x.device)
        else:  # a traced launch, which cannot carry state between calls
            counts = torch.zeros(n_rows, dtype=torch.int32, device=x.device)
        launchable(_split_kernel)[(n_rows, n_splits)](
            x2,
            out,
            partial,
            counts,
            n_cols,
            stride_xm,
            stride_xn,
            chunks_per_split,
            MAX_SPLITS=plans.MAX_SPLITS,
            **consts,
        )


# ---------------------------------------------------------------------------
# torch.library registration (custom op + autograd)
# ---------------------------------------------------------------------------


def _row_sum(x: torch.Tensor, dtype: torch.dtype | None, plan: str | plans.RowPlan) -> torch.Tensor:
    """The sums of ``x``'s rows: the body of ``kp::row_sum`` and of the eager routes."""
    out = torch.empty(x.shape[:-1], dtype=dtype if dtype is not None else x.dtype, device=x.device)
    _launch_row_sum(x, out, plans.choose_for(x, plan))
    return out


def _row_sum_direct(
    x: torch.Tensor, dtype: torch.dtype | None, plan: str | plans.RowPlan
) -> torch.Tensor:
    """:func:`_row_sum` launching straight: the direct route, and the Function's forward."""
    with direct_launches():
        return _row_sum(x, dtype, plan)


@triton_op("kp::row_sum", mutates_args=())
def _row_sum_op(
    x: torch.Tensor,
    dtype: torch.dtype | None,
    kind: str,
    block: int,
    num_warps: int,
    splits: int,
) -> torch.Tensor:
    return _row_sum(x, dtype, plans.from_op_args(kind, block, num_warps, splits))


def _grad(dout: torch.Tensor, shape: torch.Size, dtype: torch.dtype) -> torch.Tensor:
    """The gradient of a row sum: ``dout`` in ``dtype``, broadcast along the summed dimension."""
    return dout.to(dtype).unsqueeze(-1).expand(shape)


def _setup_context(ctx, inputs, output) -> None:
    x = inputs[0]
    ctx.x_shape, ctx.x_dtype = x.shape, x.dtype


def _backward(ctx, dout):
    return _grad(dout, ctx.x_shape, ctx.x_dtype), None, None, None, None, None


_row_sum_op.register_autograd(_backward, setup_context=_setup_context)


# ---------------------------------------------------------------------------
# Eager route with autograd (contracts.eager_route)
# ---------------------------------------------------------------------------


#: The Function's forward launches, recorded per signature and replayed.
_FORWARD_REPLAYS = Replays()


class _RowSum(torch.autograd.Function):
    """``row_sum`` on the eager route: the launcher without the dispatcher."""

    @staticmethod
    def forward(ctx, x, dtype, plan):
        out = _FORWARD_REPLAYS.call(_row_sum_direct, (x,), (dtype, plan))
        ctx.x_shape, ctx.x_dtype = x.shape, x.dtype
        return out

    @staticmethod
    def backward(ctx, dout):
        return _grad(dout, ctx.x_shape, ctx.x_dtype), None, None


# ---------------------------------------------------------------------------
# Public function
# ---------------------------------------------------------------------------

#: Direct-route calls recorded per input signature and replayed (:class:`Replays`).
_REPLAYS = Replays()


def row_sum(
    x: torch.Tensor, dtype: torch.dtype | None = None, plan: str | plans.RowPlan = "auto"
) -> torch.Tensor:
    """Sum over the last dimension; equals ``x.sum(-1, dtype=dtype)``.

    Accumulated in float32 for every input dtype and rounded once to the output
    dtype. Any strides are read in place when the leading dimensions collapse
    into one row stride; otherwise one copy is made. Differentiable: the
    gradient is the output gradient broadcast along the summed dimension.

    Args:
        x: float32, float16 or bfloat16 tensor on a CUDA device (or on the CPU
            with ``TRITON_INTERPRET=1``). Any shape, including empty; a
            zero-width row sums to 0.
        dtype: Output dtype (float32, float16 or bfloat16); ``None`` keeps
            ``x``'s dtype.
        plan: ``"auto"`` (:func:`kernel_portfolio.plans.choose` decides),
            ``"block"``, ``"looped"``, ``"split"``, or a
            :class:`~kernel_portfolio.plans.RowPlan` to force chunk width,
            warps and splits.

    Returns:
        A tensor of shape ``x.shape[:-1]`` and dtype ``dtype`` (or ``x.dtype``).

    Raises:
        TypeError: ``x`` is not a tensor or has an unsupported dtype; ``dtype``
            is not float32, float16, bfloat16 or None.
        ValueError: ``x`` is on an unusable device; ``plan`` is not an allowed
            value, or is a block plan narrower than the row.

    Note:
        The kernels compile once per dtype and plan: the row count, the width
        and the strides are runtime arguments, so a new batch size (or a new
        width with the same block pieces) does not recompile. The
        module docstring says what is specialised and why.

    Example:
        >>> import kernel_portfolio as kp
        >>> totals = kp.row_sum(x, dtype=torch.float32)   # x: (4096, 8192) bfloat16
    """
    return _REPLAYS.call(_row_sum_checked, (x,), (dtype, plan))


def _row_sum_checked(
    x: torch.Tensor, dtype: torch.dtype | None, plan: str | plans.RowPlan
) -> torch.Tensor:
    """The body of :func:`row_sum` (what a replay stands in for): checks, then a route."""
    check_tensor(x, "x")
    if dtype is not None and dtype not in SUPPORTED_DTYPES:
        raise TypeError(
            f"dtype must be torch.float32, torch.float16, torch.bfloat16 or None, got {dtype}"
        )
    rows = x.reshape(1) if x.ndim == 0 else x
    if direct_route(x):
        return _row_sum_direct(rows, dtype, plan)
    if eager_route():
        return _RowSum.apply(rows, dtype, plan)
    return torch.ops.kp.row_sum(rows, dtype, *plans.to_op_args(plan))
