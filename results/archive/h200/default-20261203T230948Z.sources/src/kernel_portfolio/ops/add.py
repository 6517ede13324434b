"""Elementwise addition ``out = x + y`` with broadcasting, forward and backward.

Math: ``out[i] = x[i] + y[i]`` over the broadcast shape of ``x`` and ``y``,
computed in float32 and rounded once to the input dtype, exactly as
``torch.add`` does for float16 and bfloat16.

Memory traffic for ``N`` output elements of ``b`` bytes each: read ``x``, read
``y``, write ``out``, so ``3 * N * b`` bytes when neither operand is broadcast
(a broadcast operand is read from fewer distinct bytes, but the benchmarks
count ``3 * N * b`` so that numbers stay comparable across shapes). There is
no arithmetic worth counting: the operator is bound by memory bandwidth.

Two kernels, chosen by the launcher:

* ``_add_flat_kernel``: ``x``, ``y`` and ``out`` share one dense layout (the
  common case: all contiguous). A 1-D walk over the storage; each program
  owns ``BLOCK`` consecutive elements, full blocks load and store without a
  mask so they compile to 16-byte vector accesses, and only the last block is
  masked. Two piece sizes: 16 KiB an operand, or 1 KiB where 16 KiB pieces
  would not give half the SMs a program (below about 1 MiB an operand on an
  H200). ``n_elements`` is not specialised (``do_not_specialize``), so a new
  size compiles nothing new once each piece size has run.
* ``_add_strided_kernel``: anything else (broadcasting, transposed or sliced
  views). The launcher views every operand in the output shape (broadcast
  dimensions get stride 0, no copy), merges dimensions that are contiguous in
  all three tensors, and passes at most four dimensions' sizes and strides.
  Only when more than four dimensions remain after merging (a rare 5-D or
  wider layout) does the launcher make one documented copy: it materialises
  both operands in the output's layout and takes the flat kernel.

Every offset is computed in int64, so tensors past 2^31 elements are fine.

Specialisation: sizes that change with the batch (``n_elements``; the
strided kernel's row count and outer sizes) are runtime arguments excluded
from Triton's integer specialisation, so a new batch size compiles nothing
new (past the flat kernel's two piece sizes), and under ``torch.compile``
with dynamic shapes it adds no guard beyond the layout checks and the flat
kernel's piece-size bound. The strided kernel's column count and strides stay
specialised: a unit stride known at compile time is what makes its loads
16-byte vectors.

The public function reaches the launcher by one of three routes
(:func:`kernel_portfolio.contracts.eager_route`): in eager code directly when
autograd will not record, else through an autograd Function of this module
that calls it directly (the ``torch.ops`` dispatcher and its autograd wrapper
cost far more host time than the kernel); under ``torch.compile``, dispatch
modes and ``torch.func`` through the custom op ``kp::add``, whose body is the
same code. The Function and the op share one backward.

Backward: ``dx = dout`` summed over the dimensions along which ``x`` was
broadcast (``sum_to_size``), and the same for ``y``; only the gradients that
are needed are computed.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch.library import triton_op

from kernel_portfolio import plans
from kernel_portfolio.contracts import (
    Replays,
    check_same,
    check_tensor,
    device_guard,
    direct_launches,
    direct_route,
    eager_route,
    launchable,
)

# ---------------------------------------------------------------------------
# Kernels
# ---------------------------------------------------------------------------


@triton.jit(do_not_specialize=["n_elements"])
def _add_flat_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    """Add ``n_elements`` consecutive elements; one ``BLOCK`` per program."""
    start = tl.program_id(0).to(tl.int64) * BLOCK
    offsets = start + tl.arange(0, BLOCK)
    if start + BLOCK <= n_elements:
        # Full block: no mask, so the accesses vectorise to 16 bytes.
        x = tl.load(x_ptr + offsets).to(tl.float32)
        y = tl.load(y_ptr + offsets).to(tl.float32)
        tl.store(out_ptr + offsets, (x + y).to(out_ptr.dtype.element_ty))
    else:
        mask = offsets < n_elements
        x = tl.load(x_ptr + offsets, mask=mask).to(tl.float32)
        y = tl.load(y_ptr + offsets, mask=mask).to(tl.float32)
        tl.store(out_ptr + offsets, (x + y).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit(do_not_specialize=["n_rows", "size1", "size2"])
def _add_strided_kernel(
    x_ptr,
    y_ptr,
    out_ptr,
    n_rows,
    n_cols,
    size1,
    size2,
    stride_x0,
    stride_x1,
    stride_x2,
    stride_x3,
    stride_y0,
    stride_y1,
    stride_y2,
    stride_y3,
    stride_o0,
    stride_o1,
    stride_o2,
    stride_o3,
    BLOCK_R: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    """Add over a 4-D index space ``(size0, size1, size2, n_cols)`` given by strides.

    The three outer dimensions are flattened into ``n_rows``; each program
    owns a ``BLOCK_R x BLOCK_C`` tile of (row, column). A stride of 0 reads a
    broadcast operand; a stride of 1 in the last dimension (specialised by
    Triton) gives vector accesses along the columns.
    """
    pid = tl.program_id(0).to(tl.int64)
    n_col_blocks = tl.cdiv(n_cols, BLOCK_C)
    rows = (pid // n_col_blocks) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = (pid % n_col_blocks) * BLOCK_C + tl.arange(0, BLOCK_C)
    i2 = rows % size2
    i1 = (rows // size2) % size1
    i0 = rows // size2 // size1
    x_rows = i0 * stride_x0 + i1 * stride_x1 + i2 * stride_x2
    y_rows = i0 * stride_y0 + i1 * stride_y1 + i2 * stride_y2
    o_rows = i0 * stride_o0 + i1 * stride_o1 + i2 * stride_o2
    mask = (rows < n_rows)[:, None] & (cols < n_cols)[None, :]
    x = tl.load(x_ptr + (x_rows[:, None] + cols[None, :] * stride_x3), mask=mask)
    y = tl.load(y_ptr + (y_rows[:, None] + cols[None, :] * stride_y3), mask=mask)
    out = (x.to(tl.float32) + y.to(tl.float32)).to(out_ptr.dtype.element_ty)
    tl.store(out_ptr + (o_rows[:, None] + cols[None, :] * stride_o3), out, mask=mask)


# ---------------------------------------------------------------------------
# Launcher
# ---------------------------------------------------------------------------

#: Bytes each program of the flat kernel reads per operand, and its warps:
#: 16 KiB over 8 warps is four 16-byte vectors in flight per thread and
#: operand. A starting point from the memory-bound habits in HOPPER.md, not yet
#: fitted by a committed sweep.
FLAT_BYTES_PER_PROGRAM = 16384
FLAT_NUM_WARPS = 8
#: Where those pieces would leave most SMs idle (fewer programs than half the
#: SMs), the flat kernel takes 1 KiB pieces over 2 warps instead: one 16-byte
#: vector per thread and operand, so each SM holds as many bytes in flight as
#: before (sixteen such programs against one large one) and every SM takes a
#: share. On the H200 (``scripts/add_pieces_ab.py``,
#: ``results/h200/checks/add-pieces-ab-20261203T1652Z.log``, graph replay) the
#: small pieces were 8-56% faster at 4096 to 262144 elements (up to 64 large
#: pieces) and 5-7% slower at 1048576 half-precision elements (128).
FLAT_SMALL_BYTES_PER_PROGRAM = 1024
FLAT_SMALL_NUM_WARPS = 2
#: Elements in one tile of the strided kernel (rows x columns), and its warps.
STRIDED_TILE = 4096
STRIDED_NUM_WARPS = 4
#: Dimensions the strided kernel takes after merging.
MAX_STRIDED_DIMS = 4


def _is_dense(t: torch.Tensor) -> bool:
    """Whether ``t``'s elements fill ``t.numel()`` consecutive slots of memory.

    True for contiguous tensors and for permuted ones (a transposed matrix,
    channels-last) alike: exactly the layouts a flat walk over memory covers.
    """
    expected = 1
    for size, stride in sorted(zip(t.shape, t.stride(), strict=True), key=lambda p: p[1]):
        if size == 1:
            continue
        if stride != expected:
            return False
        expected *= size
    return True


def _merge_dims(shape, *strides):
    """Merge dimensions that are contiguous in every tensor; drop size-1 dims.

    Args:
        shape: The common (broadcast) shape.
        *strides: One stride tuple per tensor, each of ``len(shape)``.

    Returns:
        ``(sizes, strides)``: the merged sizes, outermost first, and one list
        of merged strides per tensor. At least one dimension is returned.
    """
    sizes: list[int] = []
    merged: list[list[int]] = [[] for _ in strides]
    for d, size in enumerate(shape):
        if size == 1:
            continue
        if sizes and all(m[-1] == st[d] * size for m, st in zip(merged, strides, strict=True)):
            sizes[-1] *= size
            for m, st in zip(merged, strides, strict=True):
                m[-1] = st[d]
            continue
        sizes.append(size)
        for m, st in zip(merged, strides, strict=True):
            m.append(st[d])
    if not sizes:
        return [1], [[1] for _ in strides]
    return sizes, merged


def _launch_flat(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> None:
    n = out.numel()
    block, warps = FLAT_BYTES_PER_PROGRAM // out.element_size(), FLAT_NUM_WARPS
    if 2 * n < plans.sm_count(out.device) * block:
        block, warps = FLAT_SMALL_BYTES_PER_PROGRAM // out.element_size(), FLAT_SMALL_NUM_WARPS
    launchable(_add_flat_kernel)[(plans.cdiv(n, block),)](
        x, y, out, n, BLOCK=block, num_warps=warps
    )


def _launch_add(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> None:
    """Write ``x + y`` into ``out``, which has the broadcast shape.

    ``out`` may have any dense layout (contiguous or permuted); tests pass a
    NaN-poisoned one to prove that every element is written.
    """
    if out.numel() == 0:
        return
    if not _is_dense(out):
        raise ValueError("out must be dense (contiguous or a permutation of contiguous)")
    if x.shape == y.shape == out.shape and x.stride() == y.stride() == out.stride():
        _launch_flat(x, y, out)  # one dense layout shared by all three
        return
    xs, ys = x.expand(out.shape), y.expand(out.shape)  # views: broadcast dims get stride 0
    sizes, (sx, sy, so) = _merge_dims(out.shape, xs.stride(), ys.stride(), out.stride())
    if len(sizes) > MAX_STRIDED_DIMS:
        # The one copy this operator makes: too many dimensions stay apart
        # after merging, so materialise both operands in the output's layout.
        _launch_flat(torch.empty_like(out).copy_(xs), torch.empty_like(out).copy_(ys), out)
        return
    if len(sizes) == 1 and sx == sy == so == [1]:
        _launch_flat(x, y, out)
        return
    pad = MAX_STRIDED_DIMS - len(sizes)
    sizes = [1] * pad + sizes
    sx, sy, so = ([0] * pad + s for s in (sx, sy, so))
    n_cols = sizes[-1]
    n_rows = sizes[0] * sizes[1] * sizes[2]
    # Columns per tile: the power of two covering the row, at most the whole
    # tile. A loop of comparisons, not bit tricks, so that a symbolic size under
    # torch.compile turns into a range guard.
    block_c = 1
    while block_c < n_cols and block_c < STRIDED_TILE:
        block_c *= 2
    block_r = STRIDED_TILE // block_c
    grid = (plans.cdiv(n_rows, block_r) * plans.cdiv(n_cols, block_c),)
    launchable(_add_strided_kernel)[grid](
        x,
        y,
        out,
        n_rows,
        n_cols,
        sizes[1],
        sizes[2],
        *sx,
        *sy,
        *so,
        BLOCK_R=block_r,
        BLOCK_C=block_c,
        num_warps=STRIDED_NUM_WARPS,
    )


# ---------------------------------------------------------------------------
# torch.library registration (custom op + autograd)
# ---------------------------------------------------------------------------


def _add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``x + y`` in a new tensor: the body of ``kp::add`` and of the eager routes."""
    if x.shape == y.shape and x.stride() == y.stride() and _is_dense(x):
        out = torch.empty_like(x)  # keeps x's dense layout (a transposed x stays transposed)
    else:
        shape = torch.broadcast_shapes(x.shape, y.shape)  # several us: only when needed
        out = torch.empty(shape, dtype=x.dtype, device=x.device)
    with device_guard(x):
        _launch_add(x, y, out)
    return out


def _add_direct(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """:func:`_add` launching straight: the direct route, and the Function's forward."""
    with direct_launches():
        return _add(x, y)


@triton_op("kp::add", mutates_args=())
def _add_op(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return _add(x, y)


def _setup_context(ctx, inputs, output) -> None:
    x, y = inputs
    ctx.x_shape, ctx.y_shape = x.shape, y.shape


def _backward(ctx, grad_out):
    grad_x = grad_y = None
    if ctx.needs_input_grad[0]:
        grad_x = grad_out.sum_to_size(ctx.x_shape)
    if ctx.needs_input_grad[1]:
        grad_y = grad_out.sum_to_size(ctx.y_shape)
    return grad_x, grad_y


_add_op.register_autograd(_backward, setup_context=_setup_context)


# ---------------------------------------------------------------------------
# Eager route with autograd (contracts.eager_route)
# ---------------------------------------------------------------------------


#: The Function's forward launches, recorded per signature and replayed.
_FORWARD_REPLAYS = Replays()


class _Add(torch.autograd.Function):
    """``add`` on the eager route: the launcher without the dispatcher, ``kp::add``'s backward."""

    @staticmethod
    def forward(ctx, x, y):
        out = _FORWARD_REPLAYS.call(_add_direct, (x, y), ())
        ctx.x_shape, ctx.y_shape = x.shape, y.shape
        return out

    backward = staticmethod(_backward)


# ---------------------------------------------------------------------------
# Public function
# ---------------------------------------------------------------------------

#: Direct-route calls recorded per input signature and replayed (:class:`Replays`).
_REPLAYS = Replays()


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Elementwise ``x + y`` with broadcasting; equals ``torch.add(x, y)``.

    The sum is computed in float32 and rounded once to the input dtype. Any
    strides are read in place: contiguous operands take a flat vectorised
    kernel, broadcast and strided ones a strided kernel that reads broadcast
    dimensions through zero strides rather than copying them. Differentiable:
    each gradient is the output gradient summed over that operand's broadcast
    dimensions.

    Args:
        x: float32, float16 or bfloat16 tensor on a CUDA device (or on the CPU
            with ``TRITON_INTERPRET=1``).
        y: Tensor of the same dtype and device, broadcastable with ``x``.

    Returns:
        A new tensor of the broadcast shape and the inputs' dtype. When ``x``
        and ``y`` share one dense layout, the output has that layout too.

    Raises:
        TypeError: ``x`` or ``y`` is not a tensor, has an unsupported dtype,
            or the dtypes differ (``y`` is named).
        ValueError: an unusable device, different devices, or shapes that do
            not broadcast (``y`` is named).

    Example:
        >>> import kernel_portfolio as kp
        >>> out = kp.add(x, bias)   # x: (4096, 1024), bias: (1024,)
    """
    return _REPLAYS.call(_add_checked, (x, y), ())


def _add_checked(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The body of :func:`add` (what a replay stands in for): checks, then a route."""
    check_tensor(x, "x")
    check_tensor(y, "y")
    check_same(x, "x", y, "y")
    for size_x, size_y in zip(reversed(x.shape), reversed(y.shape), strict=False):
        if size_x != size_y and size_x != 1 and size_y != 1:
            raise ValueError(
                f"y has shape {tuple(y.shape)}, which does not broadcast with x of shape "
                f"{tuple(x.shape)}"
            )
    if direct_route(x, y):
        return _add_direct(x, y)
    if eager_route():
        return _Add.apply(x, y)
    return torch.ops.kp.add(x, y)
