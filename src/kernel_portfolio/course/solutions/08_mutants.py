"""Lesson 8: from a test to a published number. Write a test that can fail.

``scale`` below is correct. Your job is ``check_scale``: a test that passes for
a correct ``scale`` and raises ``AssertionError`` for a broken one. The checker
runs it against the correct kernel and against broken copies (mutants): one
stores without a mask, one launches too few programs, one ignores ``alpha``, one
writes zeros, one is off by one program, one rounds through float16. A test
that lets a mutant through could not have caught that bug.

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
    n = 1000  # not a multiple of the block: the last program is partly masked
    x = torch.randn(n, device=device)  # random, never zeros: zeros hide a kernel that writes zeros
    alpha = 1.5  # neither 0 nor 1, which would hide an ignored alpha
    buffer = torch.full((n + 512,), SENTINEL, device=device)  # the output, then guard cells
    out = buffer[:n]
    scale(x, out, alpha)
    want = (x.double() * alpha).float()  # float64 reference, rounded once
    assert torch.allclose(out, want, rtol=1e-6, atol=0.0), "output differs from alpha * x"
    assert (buffer[n:] == SENTINEL).all(), "scale wrote past the end of its output"
