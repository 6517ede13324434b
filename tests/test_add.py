"""kp.add against float64 and torch.add, under the interpreter on a CPU (small shapes).

The shapes hit each launcher path: the flat kernel with full blocks and a
masked tail, the strided kernel with broadcast (zero-stride) and transposed
operands, and the one copying fallback for layouts that keep more than four
dimensions apart. On a GPU the same tests run on CUDA.
"""

from __future__ import annotations

import textwrap

import pytest
import torch
from kp_testing import assert_matches, poison
from test_matmul import RecordingLauncher, run_compile_script
from torch.fx.experimental.proxy_tensor import make_fx
from torch.library import opcheck

import kernel_portfolio as kp
from kernel_portfolio import plans, reference
from kernel_portfolio.ops import add as add_op

pytestmark = pytest.mark.interpreter

DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _flat_block(dtype: torch.dtype, small: bool = False) -> int:
    """Elements of one flat-kernel piece: the large size, or the small one."""
    nbytes = add_op.FLAT_SMALL_BYTES_PER_PROGRAM if small else add_op.FLAT_BYTES_PER_PROGRAM
    return nbytes // torch.empty((), dtype=dtype).element_size()


def _large_from(dtype: torch.dtype, device: str) -> int:
    """Fewest elements that take the flat kernel's large pieces: a program for half the SMs."""
    return plans.cdiv(plans.sm_count(torch.device(device)) * _flat_block(dtype), 2)


def _check(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Run kp.add and compare it with float64 and, bit for bit, with torch.add."""
    out = kp.add(x, y)
    expected = torch.add(x, y)
    assert out.shape == expected.shape and out.dtype == x.dtype
    assert_matches(out, reference.add(x, y), x.dtype)
    # One rounding of a float32 sum, as torch.add does: identical bits. The
    # interpreter truncates float32 -> bfloat16 instead of rounding to nearest,
    # so bfloat16 is compared bit for bit only on a GPU.
    if x.dtype != torch.bfloat16 or x.device.type == "cuda":
        assert torch.equal(out, expected)
    return out


@pytest.mark.parametrize("dtype", DTYPES)
def test_contiguous_flat_path(dtype, device):
    # Small pieces: one element, a single masked block, exactly one full
    # block, full blocks and a ragged tail; then large pieces, from the bound.
    small, large = _flat_block(dtype, small=True), _large_from(dtype, device)
    for n in (1, 100, small, 2 * small + 3, large, large + 3):
        x = torch.randn(n, device=device).to(dtype)
        y = torch.randn(n, device=device).to(dtype)
        _check(x, y)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    ("x_shape", "y_shape"),
    [
        ((33, 65), (65,)),  # row bias
        ((33, 65), (33, 1)),  # column
        ((7, 1, 5), (1, 6, 1)),  # both sides broadcast
        ((2, 3, 4, 5), (3, 1, 5)),
        ((), (17,)),  # 0-d operand
        ((4, 1), ()),
    ],
)
def test_broadcasting(dtype, x_shape, y_shape, device):
    x = torch.randn(x_shape, device=device).to(dtype)
    y = torch.randn(y_shape, device=device).to(dtype)
    _check(x, y)


@pytest.mark.parametrize("dtype", DTYPES)
def test_zero_stride_expanded_operand(dtype, device):
    x = torch.randn(40, 24, device=device).to(dtype)
    y = torch.randn(24, device=device).to(dtype).expand(40, 24)  # stride (0, 1)
    assert y.stride() == (0, 1)
    _check(x, y)


@pytest.mark.parametrize("dtype", DTYPES)
def test_strided_operands(dtype, device):
    base = torch.randn(40, 30, device=device).to(dtype)
    # Both transposed alike: dense, so the flat kernel runs and the output
    # keeps the transposed layout, as torch.add's does.
    xt, yt = base.t(), torch.randn(40, 30, device=device).to(dtype).t()
    out = _check(xt, yt)
    assert out.stride() == xt.stride()
    # Mixed layouts and sliced views: the strided kernel.
    _check(base[::2, 1::3], torch.randn(30, 40, device=device).to(dtype).t()[::2, 1::3])
    _check(base, torch.randn(30, 40, device=device).to(dtype).t())


def test_many_dims_take_the_copying_fallback(device):
    x = torch.randn(2, 4, 2, 4, 2, 4, 2, device=device)[:, ::2, :, ::2, :, ::2, :]
    y = torch.randn(2, 2, 2, 2, 2, 2, 2, device=device).permute(6, 5, 4, 3, 2, 1, 0)
    sizes, _ = add_op._merge_dims(x.shape, x.stride(), y.stride(), x.contiguous().stride())
    assert len(sizes) > add_op.MAX_STRIDED_DIMS
    _check(x, y)


@pytest.mark.parametrize("dtype", DTYPES)
def test_empty(dtype, device):
    x = torch.randn(3, 0, device=device).to(dtype)
    assert kp.add(x, x).shape == (3, 0)
    assert kp.add(torch.randn(0, device=device).to(dtype), x).shape == (3, 0)


def _assert_writes_exactly_its_output(x: torch.Tensor, y: torch.Tensor) -> None:
    """Launch into the front of a larger NaN-poisoned buffer; the rest must stay NaN."""
    shape = torch.broadcast_shapes(x.shape, y.shape)
    buffer = poison(torch.empty(shape.numel() + 256, dtype=x.dtype, device=x.device))
    out = buffer[: shape.numel()].view(shape)
    add_op._launch_add(x, y, out)
    assert_matches(out, reference.add(x, y), x.dtype)
    assert torch.isnan(buffer[shape.numel() :]).all(), "wrote past the end of the output"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("size", ["one-masked-block", "tail-one-short", "large-tail-one-short"])
def test_flat_kernel_writes_exactly_its_output(dtype, size, device):
    n = {
        "one-masked-block": 300,
        "tail-one-short": 2 * _flat_block(dtype, small=True) - 1,
        "large-tail-one-short": _large_from(dtype, device) + _flat_block(dtype) - 1,
    }[size]
    x, y = (torch.randn(n, device=device).to(dtype) for _ in range(2))
    _assert_writes_exactly_its_output(x, y)


@pytest.mark.parametrize("dtype", DTYPES)
def test_flat_pieces_are_small_until_half_the_sms_get_a_large_one(dtype, monkeypatch):
    monkeypatch.setattr(add_op, "launchable", RecordingLauncher)
    monkeypatch.setattr(RecordingLauncher, "calls", [])
    large = _large_from(dtype, "cpu")
    for n in (1, large - 1, large, 3 * large):
        x = torch.empty(n, dtype=dtype)
        add_op._launch_add(x, x, torch.empty_like(x))
    pieces = [(c["BLOCK"], c["num_warps"]) for c in RecordingLauncher.calls]
    small = (_flat_block(dtype, small=True), add_op.FLAT_SMALL_NUM_WARPS)
    large = (_flat_block(dtype), add_op.FLAT_NUM_WARPS)
    assert pieces == [small, small, large, large]


@pytest.mark.parametrize("dtype", DTYPES)
def test_strided_kernel_writes_exactly_its_output(dtype, device):
    x = torch.randn(33, 65, device=device).to(dtype)
    _assert_writes_exactly_its_output(x, torch.randn(65, device=device).to(dtype))  # broadcast
    x = torch.randn(16, 40, device=device).to(dtype)
    _assert_writes_exactly_its_output(x, torch.randn(40, 16, device=device).to(dtype).t())


def test_checker_rejects_a_short_grid(device):
    """A launch one program short leaves the tail NaN; the check must fail."""
    n = 2 * _flat_block(torch.float32) + 5
    x, y = torch.randn(n, device=device), torch.randn(n, device=device)
    out = poison(torch.empty(n, device=device))
    block = _flat_block(torch.float32)
    add_op._add_flat_kernel[(n // block,)](x, y, out, n, BLOCK=block)
    with pytest.raises(AssertionError, match="relative error"):
        assert_matches(out, reference.add(x, y), torch.float32)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    ("x_shape", "y_shape"), [((33, 65), (33, 65)), ((33, 65), (65,)), ((7, 1, 5), (1, 6, 1))]
)
def test_backward_sums_over_broadcast_dims(dtype, x_shape, y_shape, device):
    x = torch.randn(x_shape, device=device).to(dtype).requires_grad_()
    y = torch.randn(y_shape, device=device).to(dtype).requires_grad_()
    out = kp.add(x, y)
    grad = torch.randn(out.shape, device=device).to(dtype)
    out.backward(grad)
    g64 = grad.double().cpu()
    assert_matches(x.grad, g64.sum_to_size(x_shape), dtype, "grad x")
    assert_matches(y.grad, g64.sum_to_size(y_shape), dtype, "grad y")


def test_backward_computes_only_needed_gradients(device):
    x = torch.randn(5, 4, device=device, requires_grad=True)
    y = torch.randn(4, device=device)
    kp.add(x, y).sum().backward()
    assert y.grad is None
    assert torch.equal(x.grad, torch.ones_like(x))


def test_custom_op_registration(device):
    x, y = torch.randn(8, 16, device=device), torch.randn(16, device=device)
    # Fake-tensor and compile checks need real kernels: the GPU file runs the
    # full opcheck; the schema and autograd registration are checked here.
    opcheck(
        torch.ops.kp.add.default, (x, y), test_utils=("test_schema", "test_autograd_registration")
    )


def test_merge_dims():
    # Contiguous operands merge to one dimension; a broadcast bias keeps two.
    assert add_op._merge_dims((4, 5, 6), (30, 6, 1), (30, 6, 1)) == ([120], [[1], [1]])
    assert add_op._merge_dims((4, 5), (5, 1), (0, 1)) == ([4, 5], [[5, 1], [0, 1]])
    assert add_op._merge_dims((1, 1), (1, 1), (7, 3)) == ([1], [[1], [1]])


def test_is_dense():
    t = torch.empty(4, 6)
    assert add_op._is_dense(t) and add_op._is_dense(t.t())
    assert not add_op._is_dense(t[:, ::2])
    assert not add_op._is_dense(torch.empty(6).expand(4, 6))


def test_errors(device):
    x = torch.randn(4, 5, device=device)
    with pytest.raises(TypeError, match="^y must be a torch.Tensor"):
        kp.add(x, 1.0)
    with pytest.raises(TypeError, match="^y has dtype torch.float16 but x"):
        kp.add(x, x.half())
    with pytest.raises(TypeError, match="^x has dtype torch.float64"):
        kp.add(x.double(), x.double())
    with pytest.raises(TypeError, match="^y has dtype torch.int32"):
        kp.add(x, x.int())
    with pytest.raises(ValueError, match="^y has shape \\(3,\\), which does not broadcast"):
        kp.add(x, torch.randn(3, device=device))
    with pytest.raises(ValueError, match="^y is on device meta"):
        kp.add(x, torch.empty(4, 5, device="meta"))


#: Compiles the flat kernel for sm_90 per dtype, its pointers 16-byte aligned
#: as Triton specialises them, and prints the global load and store opcodes.
_AOT_SCRIPT = textwrap.dedent(
    """
    import json, re
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from kernel_portfolio.ops import add as add_op

    for dtype, elem in (("fp32", 4), ("fp16", 2), ("bf16", 2)):
        signature = {"x_ptr": f"*{dtype}", "y_ptr": f"*{dtype}", "out_ptr": f"*{dtype}",
                     "n_elements": "i32", "BLOCK": "constexpr"}
        aligned = {(i,): [["tt.divisibility", 16]] for i in range(3)}
        for nbytes, warps in ((add_op.FLAT_BYTES_PER_PROGRAM, add_op.FLAT_NUM_WARPS),
                              (add_op.FLAT_SMALL_BYTES_PER_PROGRAM, add_op.FLAT_SMALL_NUM_WARPS)):
            compiled = triton.compile(
                ASTSource(add_op._add_flat_kernel, signature, {"BLOCK": nbytes // elem}, aligned),
                target=GPUTarget("cuda", 90, 32),
                options={"num_warps": warps},
            )
            ops = sorted(set(re.findall(r"(?:ld|st)\\.global[.\\w]*", compiled.asm["ptx"])))
            print(json.dumps({"dtype": dtype, "bytes": nbytes, "ops": ops}))
    """
)


def test_flat_kernel_compiles_to_16_byte_accesses_for_sm90(tmp_path):
    results = run_compile_script(_AOT_SCRIPT, tmp_path)
    assert [r["dtype"] for r in results] == ["fp32", "fp32", "fp16", "fp16", "bf16", "bf16"]
    for r in results:
        # Full blocks: 16-byte vectors; only the masked tail goes narrower.
        assert "ld.global.v4.b32" in r["ops"] and "st.global.v4.b32" in r["ops"], r


def test_launcher_keeps_sizes_symbolic(monkeypatch):
    """Traced with symbolic sizes (as torch.compile does), the sizes stay symbols."""
    monkeypatch.setattr(add_op, "launchable", RecordingLauncher)
    monkeypatch.setattr(RecordingLauncher, "calls", [])

    def plus(x, y):
        out = torch.empty(torch.broadcast_shapes(x.shape, y.shape))
        add_op._launch_add(x, y, out)
        return out

    make_fx(plus, tracing_mode="symbolic")(torch.empty(1000, 768), torch.empty(1000, 768))
    make_fx(plus, tracing_mode="symbolic")(torch.empty(1000, 768), torch.empty(768))
    flat, strided = RecordingLauncher.calls
    assert isinstance(flat["args"][3], torch.SymInt)  # n_elements
    assert isinstance(strided["args"][3], torch.SymInt)  # n_rows
