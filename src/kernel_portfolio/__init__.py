"""Kernel Portfolio: Triton kernels that match PyTorch, with evidence for every number.

Public operators::

    import kernel_portfolio as kp
    kp.add(x, y)
    kp.row_sum(x)
    kp.softmax(x, dim=-1)
    kp.rms_norm(x, weight)
    kp.residual_rms_norm(x, residual, weight)   # -> (y, h)
    kp.matmul(a, b)
"""

from kernel_portfolio.ops.add import add
from kernel_portfolio.ops.matmul import matmul
from kernel_portfolio.ops.rms_norm import residual_rms_norm, rms_norm
from kernel_portfolio.ops.row_sum import row_sum
from kernel_portfolio.ops.softmax import softmax

__all__ = ["add", "matmul", "residual_rms_norm", "rms_norm", "row_sum", "softmax"]
__version__ = "0.1.0"
