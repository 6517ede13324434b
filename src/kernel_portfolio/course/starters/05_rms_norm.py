"""Lesson 5: RMSNorm and its backward.

Forward, per row:  ``rstd = 1 / sqrt(mean(x**2) + eps)``,  ``y = x * rstd * w``.
The forward saves ``rstd`` for the backward.

Backward, with ``xhat = x * rstd`` and ``g = dy * w``:
``dx = rstd * (g - xhat * mean(g * xhat))`` and ``dw = sum over rows of dy * xhat``.
Each backward program handles ``ROWS_PER_PROGRAM`` rows and writes its own part
of ``dw`` to a row of ``dw_partial``; the launcher sums those rows in a fixed
order, so two runs give the same bits.

Fill in the lines below each ``# TODO``, then delete the ``# TODO`` line.
Check it:  kp check rms_norm --dir DIR
"""

import torch
import triton
import triton.language as tl


@triton.jit
def rms_norm_fwd_kernel(
    x_ptr, w_ptr, out_ptr, rstd_ptr, n_cols, stride_xm, stride_om, eps, BLOCK: tl.constexpr
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    # TODO: convert x to float32: in float16, x * x overflows once |x| passes 256
    x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    # TODO: the mean of x * x is over the row's n_cols elements
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) + eps)
    tl.store(rstd_ptr + row, rstd)
    y = x * rstd * w
    tl.store(out_ptr + row * stride_om + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def rms_norm_bwd_kernel(
    x_ptr, w_ptr, rstd_ptr, dy_ptr, dx_ptr, dw_partial_ptr, n_rows, n_cols,
    stride_xm, stride_dym, stride_dxm,
    ROWS_PER_PROGRAM: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    dw = tl.zeros([BLOCK], dtype=tl.float32)
    for i in range(ROWS_PER_PROGRAM):
        row = pid.to(tl.int64) * ROWS_PER_PROGRAM + i
        if row < n_rows:
            x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
            dy = tl.load(dy_ptr + row * stride_dym + cols, mask=mask, other=0.0).to(tl.float32)
            rstd = tl.load(rstd_ptr + row)
            xhat = x * rstd
            g = dy * w
            # TODO: dx = rstd * (g - xhat * c), where c is the mean of g * xhat over the row
            dx = (g - xhat) * rstd
            tl.store(dx_ptr + row * stride_dxm + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)
            # TODO: this row's share of the weight gradient is dy * xhat, not dy
            dw += dy
    # TODO: every program writes row 0 of dw_partial here; write row pid (plain tl.store)
    tl.store(dw_partial_ptr + cols, dw, mask=mask)


def rms_norm_forward(
    x: torch.Tensor, weight: torch.Tensor, out: torch.Tensor, rstd: torch.Tensor, eps: float = 1e-6
) -> None:
    """Normalise the rows of the 2-D ``x`` into ``out``; save ``1 / rms`` per row in ``rstd``.

    ``x`` and ``out`` have unit column stride; ``rstd`` is a float32 vector.
    """
    n_rows, n_cols = x.shape
    block = triton.next_power_of_2(n_cols)
    rms_norm_fwd_kernel[(n_rows,)](
        x, weight, out, rstd, n_cols, x.stride(0), out.stride(0), eps, BLOCK=block
    )


def rms_norm_backward(
    x: torch.Tensor,
    weight: torch.Tensor,
    rstd: torch.Tensor,
    dy: torch.Tensor,
    dx: torch.Tensor,
    dw_partial: torch.Tensor,
    rows_per_program: int = 4,
) -> torch.Tensor:
    """Write ``dx`` and return ``dw`` (float32) for the upstream gradient ``dy``.

    ``dw_partial`` is a contiguous float32 ``(cdiv(n_rows, rows_per_program), n_cols)``
    scratch tensor: one row per program.
    """
    n_rows, n_cols = x.shape
    n_programs = triton.cdiv(n_rows, rows_per_program)
    rms_norm_bwd_kernel[(n_programs,)](
        x, weight, rstd, dy, dx, dw_partial, n_rows, n_cols,
        x.stride(0), dy.stride(0), dx.stride(0),
        ROWS_PER_PROGRAM=rows_per_program, BLOCK=triton.next_power_of_2(n_cols),
    )  # fmt: skip
    return dw_partial.sum(dim=0)
