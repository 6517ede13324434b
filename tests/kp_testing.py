"""Helpers that judge correctness in the kernel tests.

Each one is itself tested against a deliberately broken kernel
(``tests/test_kp_testing.py``): a checker that cannot fail is a defect.
"""

from __future__ import annotations

import torch

from kernel_portfolio.reference import rel_error

#: Relative-error bound (||out - ref|| / ||ref|| against float64) per dtype.
REL_TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


def poison(t: torch.Tensor) -> torch.Tensor:
    """Fill ``t`` with NaN in place (an unwritten output then shows) and return it."""
    return t.fill_(float("nan"))


def assert_matches(
    out: torch.Tensor,
    ref: torch.Tensor,
    dtype: torch.dtype,
    what: str = "output",
    tol: float | None = None,
):
    """Assert ``out`` matches the float64 ``ref`` within ``REL_TOL[dtype]``.

    NaN in ``out`` fails unless the reference is NaN at that place (a fully
    masked softmax row), and then ``out`` must be NaN there too. ``tol``
    overrides the bound where an operator's error depends on the problem
    (a GEMM's on its inner dimension).
    """
    if out.shape != ref.shape:
        raise AssertionError(f"{what}: shape {tuple(out.shape)} != reference {tuple(ref.shape)}")
    err = rel_error(out, ref)
    tol = REL_TOL[dtype] if tol is None else tol
    if not err <= tol:
        raise AssertionError(f"{what}: relative error {err:.3g} > {tol:g} for {dtype}")
