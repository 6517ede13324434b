"""Input checks shared by every operator.

Each check raises a ``TypeError`` or ``ValueError`` whose message names the
argument and says what is allowed, so a caller never gets a wrong answer or a
crash from deep inside a kernel launch.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Callable

import torch
from torch._library.triton import is_wrap_triton_enabled, set_wrap_triton_enabled
from torch.library import wrap_triton

#: Dtypes every kernel supports. float64 and integer tensors are refused.
SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_DTYPE_NAMES = "float32, float16 or bfloat16"


def interpreter_enabled() -> bool:
    """Whether Triton runs kernels on the CPU (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def check_tensor(x: object, name: str) -> torch.Tensor:
    """Check that ``x`` is a tensor of a supported dtype on a usable device.

    Args:
        x: The value the caller passed.
        name: The argument's name, used in the error message.

    Returns:
        ``x`` unchanged.

    Raises:
        TypeError: ``x`` is not a tensor, or its dtype is not float32, float16
            or bfloat16.
        ValueError: ``x`` is on the CPU while ``TRITON_INTERPRET=1`` is not
            set, or on a device kind Triton cannot run on.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"{name} has dtype {x.dtype}; supported dtypes are {_DTYPE_NAMES}")
    if x.is_cuda:  # the common case, answered without building a device object
        return x
    if x.device.type == "cpu":
        if not interpreter_enabled():
            raise ValueError(
                f"{name} is a CPU tensor; move it to a CUDA device, or set "
                "TRITON_INTERPRET=1 before importing triton to run the kernels on the CPU"
            )
    else:
        raise ValueError(
            f"{name} is on device {x.device}; only cuda (or cpu under TRITON_INTERPRET=1)"
        )
    return x


def check_same(ref: torch.Tensor, ref_name: str, other: torch.Tensor, other_name: str) -> None:
    """Check that ``other`` has the same device and dtype as ``ref``.

    Raises:
        ValueError: the devices differ.
        TypeError: the dtypes differ.
    """
    if other.device != ref.device:
        raise ValueError(
            f"{other_name} is on {other.device} but {ref_name} is on {ref.device}; "
            "both must be on the same device"
        )
    if other.dtype != ref.dtype:
        raise TypeError(
            f"{other_name} has dtype {other.dtype} but {ref_name} has dtype {ref.dtype}; "
            "they must match"
        )


def check_eps(eps: object) -> float:
    """Check that ``eps`` is a positive finite number and return it as a float.

    Raises:
        TypeError: ``eps`` is not a real number.
        ValueError: ``eps`` is zero, negative, infinite or NaN.
    """
    if isinstance(eps, bool) or not isinstance(eps, (int, float)):
        raise TypeError(f"eps must be a float, got {type(eps).__name__}")
    eps = float(eps)
    if not math.isfinite(eps) or eps <= 0.0:
        raise ValueError(f"eps must be positive and finite, got {eps}")
    return eps


def check_dim(dim: object, ndim: int, name: str = "dim") -> int:
    """Normalise a dimension index against ``ndim`` dimensions.

    Raises:
        TypeError: ``dim`` is not an int.
        ValueError: ``dim`` is out of range.
    """
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise TypeError(f"{name} must be an int, got {type(dim).__name__}")
    lo, hi = -max(ndim, 1), max(ndim, 1) - 1
    if not lo <= dim <= hi:
        raise ValueError(f"{name}={dim} is out of range for a {ndim}-D tensor (allowed {lo}..{hi})")
    return dim % max(ndim, 1)


_NO_GUARD = contextlib.nullcontext()


def device_guard(x: torch.Tensor) -> contextlib.AbstractContextManager:
    """Make ``x``'s CUDA device current for the kernel launches inside the ``with`` block.

    Triton launches on the current device, not on the device of the tensors it
    is given, so without this a tensor on ``cuda:1`` would be handed to a kernel
    running on ``cuda:0``. A no-op for CPU tensors (the interpreter) and when
    ``x``'s device is already current (the common case: switching devices
    costs host time on every call).
    """
    device = x.device
    if device.type != "cuda" or device.index == torch.cuda.current_device():
        return _NO_GUARD
    return torch.cuda.device(device)


def eager_route() -> bool:
    """Whether an operator may skip its custom op: plain eager code.

    Every operator has one set of launchers and three routes to them. The
    custom ops (``torch.ops.kp.*``, with their registered autograd) are what
    ``torch.compile`` traces, what ``opcheck`` checks and what fake tensors,
    other ``__torch_dispatch__`` modes and ``torch.func`` transforms see. In
    plain eager code they cost far more host time than the kernels they launch
    (the dispatcher, and its autograd wrapper on every forward and backward),
    so there each public function calls the launchers itself: directly when
    autograd will not record (:func:`direct_route`), otherwise through a
    :class:`torch.autograd.Function` of its own whose forward and backward
    call the launchers with the same arguments and save the same tensors as
    the custom op, so that every route gives the same bits.

    Returns:
        True outside ``torch.compile``, ``__torch_dispatch__`` modes and
        ``torch.func`` transforms.
    """
    return not (
        torch.compiler.is_compiling()
        or torch._C._len_torch_dispatch_stack()
        or torch._C._are_functorch_transforms_active()
    )


def direct_route(*tensors: torch.Tensor | None) -> bool:
    """Whether an operator may call its launcher directly, with no autograd at all.

    Plain eager code (:func:`eager_route`) in which autograd will not record:
    grad mode off, or no input requiring grad. An autograd Function costs
    several microseconds more per call even when it records nothing, as much
    as the rest of a forward call's host work, so the no-grad forward skips
    it.

    Args:
        *tensors: The operator's tensor inputs (``None`` for an absent optional one).
    """
    if not eager_route():
        return False
    if torch.is_grad_enabled():
        return not any(t is not None and t.requires_grad for t in tensors)
    return True


def direct_launches() -> contextlib.AbstractContextManager:
    """Launch Triton kernels straight for the rest of the ``with`` block.

    A ``triton_op`` body reached through ``torch.ops`` already runs with
    ``wrap_triton`` switched off on real tensors. The direct route and the
    eager autograd Functions (:func:`eager_route`) must switch it off the same
    way, in a Function's backward too (the flag is per thread, and autograd
    may run a backward in a thread of its own): otherwise every
    ``wrap_triton(kernel)[grid](...)`` goes through the higher-order-op
    dispatch (argument flattening, signature binding), which on the H200's
    host cost far more per launch than the dispatcher these routes skip.
    """
    return set_wrap_triton_enabled(False)


def launchable(kernel: Callable) -> Callable:
    """``wrap_triton(kernel)``, without its per-call type checks when it is switched off.

    Every launcher writes ``launchable(kernel)[grid](...)``. Inside a custom
    op's body on real tensors and under :func:`direct_launches`,
    ``wrap_triton`` returns the kernel itself, after checks that cost a few
    microseconds a launch; this returns it at once. Elsewhere (tracing) it is
    ``wrap_triton(kernel)``.
    """
    return wrap_triton(kernel) if is_wrap_triton_enabled() else kernel
