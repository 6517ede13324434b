"""Rows at any alignment: a head, an aligned body and a tail (the ``PEEL`` kernels).

Triton emits a 16-byte load or store only where it can prove that a vector's
address is a multiple of 16 bytes and that its mask is uniform over the
vector. A row of ``N`` half-precision elements with ``N`` not a multiple of 8
(a vocabulary of 50257) starts on a 16-byte boundary only every eighth row,
so a kernel that addresses row ``r`` at ``r * N`` gets 2-byte accesses on
every row, and a masked width of ``N`` spoils the mask too.

The row kernels therefore split each row of such a launch
(:func:`row_vec` says when: ``PEEL``) into three parts,
by element offset from the tensor's start ``o = r * stride``:

```text
head  columns [0, h)            h = (-o) mod VEC, fewer than VEC
body  columns [h, h + B)        B = (N - h) rounded down to a multiple of VEC
tail  columns [h + B, N)        fewer than VEC
```

The body starts at ``o + h``, a multiple of ``VEC`` elements (16 bytes), and
its width ``B`` is a multiple of ``VEC``: the kernels address it from
:func:`body_offset` and mask it with :func:`body_width`, both rebuilt as
``v // VEC * VEC`` so the compiler sees the multiples, and it moves in 16-byte
vectors. The head and the tail, at most ``2 * (VEC - 1)`` columns, are one
small vector of ``2 * VEC`` lanes (:func:`peel_cols`) with element masks.
Every tensor of a launch shares the head ``h``: ``row_vec`` asks that every
row stride leave the same remainder modulo ``VEC``.

The split is exact at any ``h``: the three parts cover the row once whatever
the remainders, so a pointer that is not 16-byte aligned (an offset view)
still gets the right answer, only narrower accesses. Without ``PEEL`` the head
is 0 and the body the whole row: the aligned kernels as before.
"""

from __future__ import annotations

import triton
import triton.language as tl

from kernel_portfolio import plans


def row_vec(
    elem_bytes: int, n_cols: int, row_strides: tuple[int, ...], unit_cols: bool = True
) -> tuple[int, bool]:
    """The ``VEC`` and ``PEEL`` kernel arguments: 16-byte accesses at any row alignment.

    Where the width and every row stride are multiples of a full 16-byte
    vector, rows start on a 16-byte boundary and this is ``(full, False)``,
    the rule of :func:`kernel_portfolio.plans.vec_width`. A row of an odd
    width (50257 columns of float16) starts on a boundary only every eighth
    row, and that rule falls to 2-byte accesses. Instead, while the columns
    have unit stride (``unit_cols``) and every row stride leaves the same
    remainder modulo the full vector (each row of every tensor the kernel
    touches then starts the same number of elements past a boundary), this
    is ``(full, True)``: the kernels peel each row into a head, an aligned
    body of whole vectors and a tail, so the body moves in 16-byte vectors.
    Otherwise ``(vec_width(...), False)``.
    """
    vec = plans.vec_width(elem_bytes, n_cols, row_strides)
    full = max(1, 16 // elem_bytes)
    if vec == full or not unit_cols or any((s - row_strides[0]) % full for s in row_strides):
        return vec, False
    return full, True


@triton.jit
def row_head(row_offset, VEC: tl.constexpr, PEEL: tl.constexpr):
    """Columns before the first ``VEC``-element boundary of a row at ``row_offset`` (0 w/o PEEL).

    As int32 (it is below ``VEC``), from an int64 row offset: a peeled row's
    body width and masks then stay 32-bit. With an int64 head, on sm_90, the
    RMSNorm looped forward of 50257 bfloat16 columns took 94 registers instead
    of 64 (one 16-warp program an SM instead of two).
    """
    head = (-row_offset) & (VEC - 1) if PEEL else row_offset * 0
    return head.to(tl.int32)


@triton.jit
def body_offset(row, stride_m, head, VEC: tl.constexpr, PEEL: tl.constexpr):
    """Element offset of row ``row``'s body, visibly a multiple of ``VEC``.

    ``row * stride_m + head``; without ``PEEL`` the stride is a multiple of
    ``VEC`` already and is rebuilt as ``stride_m // VEC * VEC``, the aligned
    kernels' own arithmetic.
    """
    return (row * stride_m + head) // VEC * VEC if PEEL else row * (stride_m // VEC * VEC)


@triton.jit
def body_width(n_cols, head, VEC: tl.constexpr, PEEL: tl.constexpr):
    """Columns of the body: ``n_cols - head`` rounded down to a multiple of ``VEC`` (at least 0).

    A loop over a row's chunks keeps ``cdiv(n_cols, BLOCK)`` chunks, the same
    for every row (a bound that changes row by row costs registers on sm_90),
    and masks them with this width: a chunk past the body is masked whole.
    """
    return tl.maximum(n_cols - head, 0) // VEC * VEC if PEEL else n_cols // VEC * VEC


@triton.jit
def peel_cols(head, n_body, n_cols, VEC: tl.constexpr):
    """The head's and the tail's columns, counted from the body's start, and their mask.

    ``2 * VEC`` lanes: the first ``VEC`` sit just before the body (the head's
    ``head`` columns are the last of them), the next ``VEC`` just after it
    (the tail's ``n_cols - head - n_body`` columns are the first of them).
    """
    lanes = tl.arange(0, 2 * VEC)
    cols = tl.where(lanes < VEC, lanes - VEC, n_body + lanes - VEC)
    return cols, (cols >= -head) & (cols < n_cols - head)
