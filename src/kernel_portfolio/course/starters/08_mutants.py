"""Lesson 8: from a test to a published number. Write a test that can fail.

``scale`` below is correct. Your job is ``check_scale``: a test that passes for
a correct ``scale`` and raises ``AssertionError`` for a broken one. The checker
runs it against the correct kernel and against broken copies (mutants): one
stores without a mask, one launches too few programs, one ignores ``alpha``, one
writes zeros, one is off by one program, one rounds through float16. A test
that lets a mutant through could not have caught that bug.

Fill in the lines below each ``# TODO``, then delete the ``# TODO`` line.
Check it:  kp check mutants --dir DIR
"""

from collections.abc import Callable

import torch
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, out_ptr, alpha, n_elements, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x * alpha, mask=mask)


def scale(x: torch.Tensor, out: torch.Tensor, alpha: float, block: int = 128) -> None:
    """Write ``alpha * x`` into ``out``: contiguous float32 vectors of one length."""
    n_elements = out.numel()
    scale_kernel[(triton.cdiv(n_elements, block),)](x, out, alpha, n_elements, BLOCK=block)


SENTINEL = -4096.0  # a value scale never writes: cells that keep it were not written


def check_scale(scale: Callable[..., None], device: str) -> None:
    """Raise ``AssertionError`` unless ``scale(x, out, alpha)`` writes exactly ``alpha * x``."""
    # TODO: a length that leaves the last program partly masked (not a multiple of 128)
    n = 1024
    # TODO: random inputs: zeros hide a kernel that writes zeros
    x = torch.zeros(n, device=device)
    # TODO: an alpha that would expose a kernel ignoring it
    alpha = 1.0
    # TODO: a buffer with guard cells after the output, all filled with SENTINEL; pass a view
    out = torch.empty(n, device=device)
    scale(x, out, alpha)
    # TODO: compare with a float64 reference at a float32 tolerance, then check the guard cells
    assert torch.allclose(out, x * alpha, rtol=1e-2, atol=1e-2)
