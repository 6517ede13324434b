"""Lesson 3: reductions. Sum each row of a float16 matrix into float32.

One program per row walks the row in ``BLOCK``-wide chunks. Lane ``j`` of the
accumulator adds up columns ``j``, ``j + BLOCK``, ``j + 2 * BLOCK``, ... and a
final ``tl.sum`` adds the lanes.

Fill in the lines below each ``# TODO``, then delete the ``# TODO`` line.
Check it:  kp check row_sum --dir DIR
"""

import torch
import triton
import triton.language as tl


@triton.jit
def row_sum_kernel(x_ptr, out_ptr, n_cols, stride_xm, stride_xn, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_xm
    # TODO: accumulate in float32, whatever the input dtype (convert x too)
    acc = tl.zeros([BLOCK], dtype=tl.float16)
    # TODO: walk the whole row: chunks start at 0, BLOCK, 2 * BLOCK, ... while below n_cols
    for start in range(0, BLOCK, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        # TODO: mask the columns past n_cols, and load them as 0 so they add nothing
        x = tl.load(x_row + cols * stride_xn)
        acc += x
    tl.store(out_ptr + row, tl.sum(acc, axis=0))


def row_sum(x: torch.Tensor, out: torch.Tensor, block: int = 64) -> None:
    """Write the sums of the rows of the 2-D ``x`` into the float32 vector ``out``."""
    n_rows, n_cols = x.shape
    row_sum_kernel[(n_rows,)](x, out, n_cols, *x.stride(), BLOCK=block)
