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

from __future__ import annotations

import importlib

# Operators import lazily: `import kernel_portfolio.results` (the site build,
# CI without a GPU) should not pay for importing torch and triton.
_OPS = {
    "add": "kernel_portfolio.ops.add",
    "row_sum": "kernel_portfolio.ops.row_sum",
    "softmax": "kernel_portfolio.ops.softmax",
    "rms_norm": "kernel_portfolio.ops.rms_norm",
    "residual_rms_norm": "kernel_portfolio.ops.rms_norm",
    "matmul": "kernel_portfolio.ops.matmul",
}

__all__ = sorted(_OPS)
__version__ = "0.1.0"


def __getattr__(name: str):
    if name in _OPS:
        # Kept as a module global: later lookups of `kp.<name>` skip this hook
        # and its import machinery (about 2 us each, on every call in a loop).
        value = globals()[name] = getattr(importlib.import_module(_OPS[name]), name)
        return value
    raise AttributeError(f"module 'kernel_portfolio' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_OPS})
