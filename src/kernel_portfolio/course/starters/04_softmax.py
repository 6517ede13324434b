"""Lesson 4: softmax. An online softmax over rows of any width, safe for ``-inf``.

One program per row, two passes over the row in ``BLOCK``-wide chunks.

Pass 1 keeps, per lane, a running maximum ``m`` and a running sum ``s`` of
``exp(x - m)``. When a chunk raises the maximum, the old sum must be rescaled
by ``exp(m_old - m_new)``. The lanes are then merged into the row's maximum and
sum. Pass 2 writes ``exp(x - row_max) / row_sum``.

``-inf`` (a masked score) must give exactly 0; a row that is entirely ``-inf``
gives NaN, as in PyTorch.

Fill in the lines below each ``# TODO``, then delete the ``# TODO`` line.
Check it:  kp check softmax --dir DIR
"""

import torch
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, out_ptr, n_cols, stride_xm, stride_om, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_xm
    out_row = out_ptr + row * stride_om

    m = tl.full([BLOCK], float("-inf"), dtype=tl.float32)
    s = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        # TODO: load the masked tail as -inf: a 0 there would join the maximum and the sum
        x = tl.load(x_row + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        m_new = tl.maximum(m, x)
        # TODO: a lane whose maximum is still -inf must shift by 0 (tl.where), not by -inf
        shift = m_new
        # TODO: rescale the old sum from the old maximum m to the new shift before adding
        s = s + tl.exp(x - shift)
        m = m_new

    row_max = tl.max(m, axis=0)
    # TODO: rescale each lane's sum from its own maximum to row_max before adding the lanes
    row_sum = tl.sum(s, axis=0)

    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
        y = tl.exp(x - row_max) / row_sum
        tl.store(out_row + cols, y.to(out_ptr.dtype.element_ty), mask=cols < n_cols)


def softmax(x: torch.Tensor, out: torch.Tensor, block: int = 128) -> None:
    """Write the softmax of each row of the 2-D ``x`` into ``out`` (unit column stride)."""
    n_rows, n_cols = x.shape
    softmax_kernel[(n_rows,)](x, out, n_cols, x.stride(0), out.stride(0), BLOCK=block)
