"""Float64 references for every operator.

Tests, the benchmark harness and the notebooks all compare against these. Each
upcasts its inputs to float64 on the CPU, so the reference has no rounding of
its own worth mentioning; where an operator rounds an intermediate on purpose
(the residual stream ``h`` of :func:`residual_rms_norm`), the reference rounds
at exactly the same place.
"""

from __future__ import annotations

import torch


def _f64(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to(device="cpu", dtype=torch.float64)


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``x + y`` with broadcasting, in float64."""
    return _f64(x) + _f64(y)


def row_sum(x: torch.Tensor) -> torch.Tensor:
    """Sum over the last dimension, in float64."""
    return _f64(x).sum(-1)


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Softmax in float64; ``-inf`` entries give 0 and a fully masked row NaN."""
    return torch.softmax(_f64(x), dim=dim)


def softmax_backward(y: torch.Tensor, dy: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Softmax's gradient from its output, in float64: ``y * (dy - sum(dy * y, dim))``.

    It starts from the ``y`` a backward kernel is given (the rounded forward
    output, as in PyTorch), so a comparison measures the backward alone.
    """
    y64, dy64 = _f64(y), _f64(dy)
    return y64 * (dy64 - (dy64 * y64).sum(dim, keepdim=True))


def rms_norm(
    x: torch.Tensor, weight: torch.Tensor | None = None, eps: float = 1e-6
) -> torch.Tensor:
    """``x / sqrt(mean(x**2, -1) + eps) * weight`` in float64."""
    x64 = _f64(x)
    y = x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + eps)
    return y if weight is None else y * _f64(weight)


def residual_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None, eps: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    """The fused add + RMSNorm of a transformer block, in float64.

    ``h = x + residual`` is rounded once to the input dtype (it is the residual
    stream the caller keeps, stored in that dtype); ``y`` normalises that rounded
    ``h``. Returns ``(y, h)``, both float64.
    """
    h = (_f64(x) + _f64(residual)).to(x.dtype).to(torch.float64)
    return rms_norm(h, weight, eps), h


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b`` in float64."""
    return _f64(a) @ _f64(b)


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """``||out - ref|| / ||ref||`` over finite reference entries; NaN where ``out`` is NaN.

    Entries where the reference is NaN (a fully masked softmax row) must be NaN
    in ``out`` too, else the error is infinite.
    """
    out64, ref64 = _f64(out), _f64(ref)
    if out64.shape != ref64.shape:
        raise ValueError(f"out has shape {tuple(out64.shape)}, reference {tuple(ref64.shape)}")
    ref_nan = torch.isnan(ref64)
    if not torch.equal(torch.isnan(out64) & ref_nan, ref_nan) or torch.isnan(out64[~ref_nan]).any():
        return float("inf")
    o, r = out64[~ref_nan], ref64[~ref_nan]
    if not torch.isfinite(o).all():
        return float("inf")
    denom = r.norm().item()
    diff = (o - r).norm().item()
    return diff / denom if denom > 0 else diff
