"""Lesson 1: programs, offsets and masks. Add two vectors.

The launch starts a grid of programs, each running ``add_kernel`` once with its
own ``tl.program_id(0)``. Each program should handle ``BLOCK`` consecutive
elements; the last one usually runs past the end of the vectors.

Fill in the lines below each ``# TODO``, then delete the ``# TODO`` line.
Check it:  kp check add --dir DIR
"""

import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    # TODO: make offsets the BLOCK element indices owned by program tl.program_id(0)
    offsets = tl.arange(0, BLOCK)
    # TODO: a mask, True for indices inside the vectors, passed to every load and store
    x = tl.load(x_ptr + offsets)
    y = tl.load(y_ptr + offsets)
    tl.store(out_ptr + offsets, x + y)


def add(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor, block: int = 128) -> None:
    """Write ``x + y`` into ``out``: three contiguous 1-D tensors of one length."""
    n_elements = out.numel()
    # TODO: launch enough programs to cover every element, the partial block at the end included
    grid = (n_elements // block,)
    add_kernel[grid](x, y, out, n_elements, BLOCK=block)
