"""Lesson 1: programs, offsets and masks. Add two vectors.

The launch starts ``cdiv(n_elements, BLOCK)`` programs. Program ``pid`` owns the
elements ``pid * BLOCK`` to ``pid * BLOCK + BLOCK - 1``; the last program usually
runs past the end, so every load and store is masked.

Check it:  kp check add --dir DIR
"""

import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


def add(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor, block: int = 128) -> None:
    """Write ``x + y`` into ``out``: three contiguous 1-D tensors of one length."""
    n_elements = out.numel()
    grid = (triton.cdiv(n_elements, block),)
    add_kernel[grid](x, y, out, n_elements, BLOCK=block)
