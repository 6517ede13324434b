"""The three routes of every operator give the same bits (contracts.eager_route).

In eager code a public function calls its launcher directly when autograd will
not record, and otherwise runs an autograd Function of its module; under a
dispatch mode (as under ``torch.compile``) it goes through ``torch.ops.kp.*``
and the op's registered autograd. These tests run each operator both ways on
the same inputs (the op route forced by a pass-through dispatch mode), check
which route each call took from the autograd graph it recorded, and compare
outputs and gradients bit for bit.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import kernel_portfolio as kp
from kernel_portfolio.plans import RowPlan

pytestmark = pytest.mark.interpreter

DTYPES = (torch.float32, torch.float16, torch.bfloat16)


class _PassThrough(TorchDispatchMode):
    """A dispatch mode that changes nothing: inside it the operators take the op route."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


# op -> (call, the eager Function's backward node, input shapes, custom ops it may use)
CASES = {
    "add": (kp.add, "_AddBackward", [(3, 5, 40), (40,)], ["add"]),
    "row_sum": (kp.row_sum, "_RowSumBackward", [(3, 5, 40)], ["row_sum"]),
    "softmax": (kp.softmax, "_SoftmaxBackward", [(3, 5, 40)], ["softmax", "softmax_backward"]),
    "softmax_dim0": (
        lambda x: kp.softmax(x, dim=0),
        "_SoftmaxBackward",
        [(3, 5, 40)],
        ["softmax", "softmax_backward"],
    ),
    "rms_norm": (
        kp.rms_norm,
        "_RMSNormBackward",
        [(3, 5, 40), (40,)],
        ["rms_norm", "rms_norm_backward"],
    ),
    "rms_norm_split": (
        lambda x, w: kp.rms_norm(x, w, plan=RowPlan("split", 16, 4, 2)),
        "_RMSNormBackward",
        [(3, 5, 40), (40,)],
        ["rms_norm", "rms_norm_backward"],
    ),
    "residual_rms_norm": (
        kp.residual_rms_norm,
        "_ResidualRMSNormBackward",
        [(3, 5, 40), (3, 5, 40), (40,)],
        ["residual_rms_norm", "rms_norm_backward"],
    ),
    "residual_rms_norm_no_weight": (
        lambda x, r: kp.residual_rms_norm(x, r, None),
        "_ResidualRMSNormBackward",
        [(3, 5, 40), (3, 5, 40)],
        ["residual_rms_norm", "rms_norm_backward"],
    ),
    "matmul": (kp.matmul, "_MatmulBackward", [(20, 36), (36, 24)], ["matmul"]),
}


def _inputs(op, device, dtype, requires_grad):
    _, _, shapes, _ = CASES[op]
    gen = torch.Generator(device=device).manual_seed(0)
    args = [torch.randn(s, generator=gen, device=device, dtype=dtype) for s in shapes]
    if "rms_norm" in op:
        # x as a permuted view whose leading dimensions do not collapse: as_rows copies it.
        a, b, n = shapes[0]
        args[0] = torch.randn(b, a, n, generator=gen, device=device, dtype=dtype).transpose(0, 1)
    return [a.detach().requires_grad_(requires_grad) for a in args]


def _outputs(out):
    return list(out) if isinstance(out, tuple) else [out]


def _graph(outputs) -> set[str]:
    """Class names of every autograd node the outputs' graph holds."""
    names, stack = set(), [o.grad_fn for o in outputs if o.grad_fn is not None]
    while stack:
        node = stack.pop()
        if type(node).__name__ not in names:
            names.add(type(node).__name__)
            stack.extend(n for n, _ in node.next_functions if n is not None)
    return names


def _run(op, device, dtype, *, op_route, backward_in_mode=False):
    """Outputs, input gradients and autograd node names of one forward + backward."""
    call = CASES[op][0]
    args = _inputs(op, device, dtype, requires_grad=True)
    if op_route:
        with _PassThrough():
            outs = _outputs(call(*args))
    else:
        outs = _outputs(call(*args))
    gen = torch.Generator(device=device).manual_seed(1)
    upstream = [torch.randn(o.shape, generator=gen, device=device, dtype=dtype) for o in outs]
    if backward_in_mode:
        with _PassThrough():
            torch.autograd.backward(outs, upstream)
    else:
        torch.autograd.backward(outs, upstream)
    return [o.detach() for o in outs], [a.grad for a in args], _graph(outs)


def _assert_same(got, want, what):
    assert len(got) == len(want), what
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g.shape == w.shape and g.dtype == w.dtype, f"{what} {i}: {g.shape} vs {w.shape}"
        assert torch.equal(g, w), f"{what} {i} differs between the routes"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", list(CASES))
def test_eager_and_op_routes_give_the_same_bits(op, dtype, device):
    """With grad: the eager autograd Function, else the custom op; same outputs and gradients."""
    name = CASES[op][1]
    eager_out, eager_grads, eager_nodes = _run(op, device, dtype, op_route=False)
    op_out, op_grads, op_nodes = _run(op, device, dtype, op_route=True)
    assert name in eager_nodes
    assert not any(n.startswith("GeneratedBackwardFor_kp") for n in eager_nodes), eager_nodes
    assert any(n.startswith("GeneratedBackwardFor_kp") for n in op_nodes), op_nodes
    assert name not in op_nodes
    _assert_same(eager_out, op_out, "output")
    _assert_same(eager_grads, op_grads, "gradient")


@pytest.mark.parametrize("op", list(CASES))
def test_eager_backward_under_a_dispatch_mode(op, device):
    """An eager forward whose backward runs under a dispatch mode takes the ops there."""
    eager_out, eager_grads, _ = _run(op, device, torch.float16, op_route=False)
    out, grads, _ = _run(op, device, torch.float16, op_route=False, backward_in_mode=True)
    _assert_same(out, eager_out, "output")
    _assert_same(grads, eager_grads, "gradient")


@pytest.mark.parametrize("op", list(CASES))
def test_eager_code_never_calls_the_custom_ops(op, device, monkeypatch):
    """No grad (direct launch) and grad (autograd Function): torch.ops.kp is never called."""
    dtype = torch.float16
    want_out, want_grads, _ = _run(op, device, dtype, op_route=True)

    def no_op(*args, **kwargs):
        raise AssertionError("the custom op was called")

    with monkeypatch.context() as patch:
        for name in CASES[op][3]:
            patch.setattr(torch.ops.kp, name, no_op)
        call = CASES[op][0]
        plain = _inputs(op, device, dtype, requires_grad=False)
        _assert_same(_outputs(call(*plain)), want_out, "output without grad")
        with torch.no_grad():
            leaves = _inputs(op, device, dtype, requires_grad=True)
            _assert_same(_outputs(call(*leaves)), want_out, "output under no_grad")
        out, grads, _ = _run(op, device, dtype, op_route=False)
    _assert_same(out, want_out, "output")
    _assert_same(grads, want_grads, "gradient")
    with pytest.raises(AssertionError, match="custom op"), monkeypatch.context() as patch:
        for name in CASES[op][3]:
            patch.setattr(torch.ops.kp, name, no_op)
        _run(op, device, dtype, op_route=True)  # the check can fail: the op route calls them


def test_route_check_rejects_a_route_that_differs(device, monkeypatch):
    """The comparison catches an eager route whose output is one unit off the op's."""
    from kernel_portfolio.ops import softmax as softmax_ops

    real = softmax_ops._Softmax.forward

    def off_by_one_unit(ctx, x, plan):
        y = real(ctx, x, plan)
        return torch.nextafter(y, torch.full_like(y, 2.0))

    monkeypatch.setattr(softmax_ops._Softmax, "forward", staticmethod(off_by_one_unit))
    eager_out, _, _ = _run("softmax", device, torch.float16, op_route=False)
    op_out, _, _ = _run("softmax", device, torch.float16, op_route=True)
    with pytest.raises(AssertionError, match="differs"):
        _assert_same(eager_out, op_out, "output")


def test_public_operators_resolve_once():
    """`kp.<op>` imports its module on first use, then is a plain module global.

    The lazy lookup (the package's ``__getattr__``) costs about 2 us, on
    every call of a loop that writes ``kp.softmax(x)`` if it were not kept.
    """
    import kernel_portfolio.ops.softmax as softmax_module

    assert kp.softmax is softmax_module.softmax
    assert vars(kp)["softmax"] is softmax_module.softmax
    assert dir(kp).count("softmax") == 1 and set(kp.__all__) <= set(dir(kp))
