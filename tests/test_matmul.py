"""kp.matmul against float64, under the interpreter on a CPU (small shapes).

Both kernels run here: the pointer kernel through the public function (the
interpreter never picks the Hopper path on its own) and the TMA kernel forced
through the launcher, since Triton's interpreter emulates tensor descriptors.
Shapes are ragged against every tile size used (127x255x65, 1x1x1, 33x80x48),
span several K iterations (K=300) and several persistent-loop rounds, and
include the empty cases. The Hopper path is also compiled ahead of time for
sm_90 in a child process, to check that each tuning config assembles to
``wgmma`` and TMA copies, and the pointer kernel to check that its layout
constants give 16-byte loads in every layout that allows them. On a GPU the
same tests run on CUDA.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import triton
import triton.language as tl
from kp_testing import assert_matches, global_memory_ops, poison
from torch.fx.experimental.proxy_tensor import make_fx
from torch.library import opcheck

import kernel_portfolio as kp
from kernel_portfolio import reference
from kernel_portfolio.ops import matmul as mm

pytestmark = pytest.mark.interpreter

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
HALF_DTYPES = (torch.float16, torch.bfloat16)

#: ``(once, per_sqrt_k)``: the relative error bound is ``once + per_sqrt_k *
#: sqrt(K)``. ``once`` covers the single rounding of the float32 sum to the
#: output dtype (2^-11 for float16, 2^-8 for bfloat16, with margin; the
#: interpreter truncates to bfloat16, doubling that error); ``per_sqrt_k``
#: covers float32 accumulation, whose relative error grows like
#: sqrt(K) * 2^-24 (1e-7 is about 1.7 times that).
TOLERANCES = {
    torch.float32: (1e-6, 1e-7),
    torch.float16: (1e-3, 1e-7),
    torch.bfloat16: (8e-3, 1e-7),
}
#: float32 with ``allow_tf32=True``: each operand rounded to 10 mantissa bits.
TF32_TOLERANCE = (3e-3, 1e-7)


def _tol(dtype: torch.dtype, k: int, *, tf32: bool = False) -> float:
    once, per_sqrt_k = TF32_TOLERANCE if tf32 else TOLERANCES[dtype]
    return once + per_sqrt_k * math.sqrt(max(k, 1))


def _operands(m, n, k, dtype, device, *, a_t=False, b_t=False):
    """Random ``(M, K)`` and ``(K, N)`` operands; ``*_t`` makes them transposed views."""
    a = torch.randn(k, m, device=device).t() if a_t else torch.randn(m, k, device=device)
    b = torch.randn(n, k, device=device).t() if b_t else torch.randn(k, n, device=device)
    return a.to(dtype), b.to(dtype)  # .to keeps a transposed view's strides


def _guarded_output(m, n, dtype, device):
    """A NaN-poisoned ``(M, N)`` output at the front of a larger poisoned buffer.

    Returns ``(out, guard)``: after a launch ``out`` must be fully written and
    ``guard``, the memory just past it, still all NaN.
    """
    buffer = poison(torch.empty(m * n + 256, dtype=dtype, device=device))
    return buffer[: m * n].view(m, n), buffer[m * n :]


LAYOUTS = [(False, False), (False, True), (True, False), (True, True)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "shape", [(127, 255, 65), (1, 1, 1), (64, 64, 64), (33, 80, 48), (16, 48, 300)]
)
@pytest.mark.parametrize(("a_t", "b_t"), LAYOUTS)
def test_forward_matches_float64(dtype, shape, a_t, b_t, device):
    m, n, k = shape
    a, b = _operands(m, n, k, dtype, device, a_t=a_t, b_t=b_t)
    out = kp.matmul(a, b)
    assert out.shape == (m, n) and out.dtype == dtype and out.is_contiguous()
    assert_matches(out, reference.matmul(a, b), dtype, tol=_tol(dtype, k))


@pytest.mark.parametrize("dtype", HALF_DTYPES)
@pytest.mark.parametrize(("a_t", "b_t"), LAYOUTS)
@pytest.mark.parametrize(
    "config",
    [
        mm.INTERPRETER_CONFIGS["tma"],
        mm._tma_config(32, 64, 32, 4, 1, split=2),  # the split epilogue
        mm._tma_config(16, 16, 16, 4, 1, ws=True),  # many tiles per program
    ],
    ids=["32x32x32", "32x64x32-split", "16x16x16-ws"],
)
def test_tma_kernel(dtype, a_t, b_t, config, device):
    # 40x72x88 leaves partial tiles in M, N and K: the copy engine's zero
    # fill and clipped stores must make them exact.
    m, n, k = 40, 72, 88
    a, b = _operands(m, n, k, dtype, device, a_t=a_t, b_t=b_t)
    out, guard = _guarded_output(m, n, dtype, device)
    mm._launch_matmul(a, b, out, allow_tf32=False, path="tma", config=config)
    assert_matches(out, reference.matmul(a, b), dtype, tol=_tol(dtype, k))
    assert torch.isnan(guard).all(), "wrote past the end of the output"


@pytest.mark.parametrize("dtype", HALF_DTYPES)
@pytest.mark.parametrize(("a_t", "b_t"), LAYOUTS)
@pytest.mark.parametrize("splits", [2, 3])
def test_tma_kernel_split_k(dtype, a_t, b_t, splits, device):
    # K = 136 is five 32-wide tiles (the last partial): runs of 3 and 2, or
    # 2, 2 and 1; 40x72 leaves partial output tiles in each slice.
    m, n, k = 40, 72, 136
    a, b = _operands(m, n, k, dtype, device, a_t=a_t, b_t=b_t)
    out, guard = _guarded_output(m, n, dtype, device)
    mm._launch_matmul(a, b, out, allow_tf32=False, path="tma", split_k=splits)
    assert_matches(out, reference.matmul(a, b), dtype, tol=_tol(dtype, k))
    assert torch.isnan(guard).all(), "wrote past the end of the output"


@pytest.mark.parametrize(
    ("shape", "splits"),
    [
        ((1024, 1024, 65536), 2),  # dB of a linear layer with a large batch: 64 tiles
        ((512, 512, 65536), 4),  # 16 tiles: at most SPLIT_K_MAX runs
        ((512, 512, 8192), 2),  # runs of at least SPLIT_K_MIN_RUN
        ((1024, 1024, 4096), 1),
        ((4096, 4096, 4096), 1),
        ((8192, 512, 8192), 1),  # dA of 8192x8192x512: 256 tiles
        ((1100, 1024, 65536), 1),  # 72 tiles: two runs would not fit 132 SMs
    ],
)
def test_split_k_rule(shape, splits):
    assert mm._split_k(*shape, 132) == splits


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "config",
    [mm._pointer_config(16, 16, 16, 4, 1), mm._pointer_config(64, 32, 16, 4, 1)],
    ids=["16x16x16", "64x32x16"],
)
def test_pointer_kernel_writes_exactly_its_output(dtype, config, device):
    # 16-row tiles of a 150-row output: several groups of GROUP_M=8, the last partial.
    m, n, k = 150, 40, 37
    a, b = _operands(m, n, k, dtype, device)
    out, guard = _guarded_output(m, n, dtype, device)
    mm._launch_matmul(a, b, out, allow_tf32=False, path="pointer", config=config)
    assert_matches(out, reference.matmul(a, b), dtype, tol=_tol(dtype, k))
    assert torch.isnan(guard).all(), "wrote past the end of the output"


@pytest.mark.parametrize("dtype", DTYPES)
def test_strided_operands_and_output(dtype, device):
    a = torch.randn(70, 90, device=device).to(dtype)[::2, 1::3]  # (35, 30), strides (180, 3)
    b = torch.randn(30, device=device).to(dtype)[:, None].expand(30, 20)  # zero stride along N
    assert mm._tma_layout(a) is None and mm._tma_layout(b) is None
    out = poison(torch.empty(20, 35, dtype=dtype, device=device)).t()  # column-major output
    mm._launch_matmul(a, b, out, allow_tf32=False)
    assert_matches(out, reference.matmul(a, b), dtype, tol=_tol(dtype, 30))
    assert_matches(kp.matmul(a, b), reference.matmul(a, b), dtype, tol=_tol(dtype, 30))


def _laid_out(rows, cols, unit, dtype, device):
    """A ``(rows, cols)`` matrix with unit stride along dim ``unit`` (1, 0), or none (-1)."""
    if unit == 1:
        return torch.randn(rows, cols, device=device, dtype=dtype)
    if unit == 0:
        return torch.randn(cols, rows, device=device, dtype=dtype).t()
    return torch.randn(rows, 2 * cols, device=device, dtype=dtype)[:, ::2]


@pytest.mark.parametrize("c_unit", [1, 0])
@pytest.mark.parametrize("b_unit", [1, 0, -1])
@pytest.mark.parametrize("a_unit", [1, 0, -1])
def test_pointer_layout_constants_and_results(a_unit, b_unit, c_unit, device):
    """Every unit-stride layout of A, B and C: the constants, and the product they compute."""
    m, n, k = 48, 40, 56  # multiples of 8: 16-byte float16 vectors wherever a unit stride is
    a = _laid_out(m, k, a_unit, torch.float16, device)
    b = _laid_out(k, n, b_unit, torch.float16, device)
    out = poison(_laid_out(m, n, c_unit, torch.float16, device))
    layout = mm._pointer_layout(a, b, out)
    assert layout == {"A_UNIT": a_unit, "B_UNIT": b_unit, "C_UNIT": c_unit, "VEC": 8}
    mm._launch_matmul(a, b, out, allow_tf32=False, path="pointer")
    assert_matches(out, reference.matmul(a, b), torch.float16, tol=_tol(torch.float16, k))


def test_pointer_layout_vec_divides_what_it_rebuilds(device):
    """VEC shrinks to what the strides and masking sizes allow, and ignores the rest."""
    a = torch.randn(48, 60, device=device, dtype=torch.float16)[:, :56]  # row stride 60
    b = torch.randn(56, 40, device=device, dtype=torch.float16)
    out = torch.empty(48, 40, device=device, dtype=torch.float16)
    assert mm._pointer_layout(a, b, out)["VEC"] == 4
    # M masks no unit-stride dimension of a row-major A and C: an odd batch keeps VEC.
    a = torch.randn(47, 56, device=device, dtype=torch.float16)
    assert mm._pointer_layout(a, b, out[:47])["VEC"] == 8
    # A transposed A is read along M, so M counts there.
    assert mm._pointer_layout(a.t().contiguous().t(), b, out[:47])["VEC"] == 1
    # float32: at most four elements a vector; an expanded (zero-stride) B is read along K.
    b32 = torch.randn(56, 1, device=device).expand(56, 40)
    layout = mm._pointer_layout(a.float(), b32, out[:47].float())
    assert layout == {"A_UNIT": 1, "B_UNIT": 0, "C_UNIT": 1, "VEC": 4}


def test_pointer_kernel_loads_16_bytes_where_the_strides_allow():
    """Compiled for sm_90 (no GPU): 16-byte copies whenever VEC is 16 bytes, in any layout.

    The kernel's sizes and strides are runtime arguments Triton does not
    specialise; only the unit-stride constants and the ``VEC`` rebuild let
    the compiler prove the alignment. With ``VEC=1`` (sizes or strides not
    multiples of 8 half-precision elements) the same kernel loads 2 bytes at
    a time, which shows that the check can fail; a matrix without a unit
    stride (``-1``) is read element by element whatever ``VEC`` is.
    """
    config = mm.POINTER_CONFIGS[0]
    cases = [
        ("fp16", (1, 1, 1), 8),
        ("fp16", (0, 1, 1), 8),  # dB = A^T @ dC
        ("fp16", (1, 0, 1), 8),  # x @ W^T and dA = dC @ B^T
        ("fp16", (0, 0, 1), 8),
        ("fp16", (1, 1, 0), 8),  # a column-major output
        ("fp32", (1, 1, 1), 4),
        ("fp16", (1, 1, 1), 1),
        ("fp16", (-1, 1, 1), 8),
    ]
    compiled = global_memory_ops(
        [
            {
                "module": "kernel_portfolio.ops.matmul",
                "kernel": "_matmul_kernel",
                "signature": {
                    **{p: f"*{dtype}" for p in ("a_ptr", "b_ptr", "c_ptr")},
                    **dict.fromkeys(mm._POINTER_RUNTIME_ARGS, "i32"),
                },
                "constexprs": {
                    **config.kwargs,
                    "INPUT_PRECISION": "ieee",
                    "WIDEN_OPERANDS": False,
                    "A_UNIT": units[0],
                    "B_UNIT": units[1],
                    "C_UNIT": units[2],
                    "VEC": vec,
                },
                "aligned": ["a_ptr", "b_ptr", "c_ptr"],
                "num_warps": config.num_warps,
                "num_stages": config.num_stages,
            }
            for dtype, units, vec in cases
        ]
    )
    for (dtype, units, vec), ops in zip(cases, compiled, strict=True):
        case = (dtype, units, vec, ops)
        narrow_loads = [op for op in ops if op.startswith("ld.global") and ".v" not in op]
        if vec == 1:
            assert "cp.async.16" not in ops and "ld.global.b16" in ops, case
            continue
        assert "cp.async.16" in ops and "st.global.v4.b32" in ops, case
        assert bool(narrow_loads) == (-1 in units), case


@pytest.mark.parametrize("dtype", DTYPES)
def test_empty_and_k_zero(dtype, device):
    a, b = _operands(5, 7, 0, dtype, device)
    out = poison(torch.empty(5, 7, dtype=dtype, device=device))
    mm._launch_matmul(a, b, out, allow_tf32=False)
    assert torch.equal(out, torch.zeros_like(out))
    assert torch.equal(kp.matmul(a, b), torch.zeros(5, 7, dtype=dtype, device=device))
    for m, n, k in ((0, 7, 3), (5, 0, 3), (0, 0, 0)):
        a, b = _operands(m, n, k, dtype, device)
        assert kp.matmul(a, b).shape == (m, n)


def test_tf32_flag(device):
    a, b = _operands(33, 40, 72, torch.float32, device)
    out = kp.matmul(a, b, allow_tf32=True)
    assert_matches(
        out, reference.matmul(a, b), torch.float32, tol=_tol(torch.float32, 72, tf32=True)
    )


# --- An exact float16 case, and a deliberately broken kernel it must reject ---


def _integer_operands(m, n, k, device):
    """Small positive integers: every product and every float32 partial sum is exact.

    Sums reach about 4 * K, past 2048, where float16 can no longer hold odd
    integers, so a kernel that keeps its running sum in float16 rounds on the
    way while a float32 accumulator stays exact until the one final rounding.
    """
    gen = torch.Generator().manual_seed(1)
    a = torch.randint(1, 4, (m, k), generator=gen).to(device=device, dtype=torch.float16)
    b = torch.randint(1, 4, (k, n), generator=gen).to(device=device, dtype=torch.float16)
    return a, b


def _assert_exact(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    """float32 accumulation of exact products, rounded once: equal to the rounded float64 sum."""
    expected = reference.matmul(a, b).to(torch.float16)
    wrong = (out.cpu() != expected).sum().item()
    if wrong:
        raise AssertionError(f"{wrong} of {expected.numel()} entries differ from the exact result")


@triton.jit
def _gemm_float16_accumulator(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK: tl.constexpr):
    """A GEMM with one defect: its running sum is rounded to float16 after each K step."""
    rm = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    rn = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    rk = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK, BLOCK), dtype=tl.float16)
    for ki in range(tl.cdiv(K, BLOCK)):
        ks = ki * BLOCK + rk
        a = tl.load(
            a_ptr + rm[:, None] * K + ks[None, :], mask=(rm[:, None] < M) & (ks[None, :] < K)
        )
        b = tl.load(
            b_ptr + ks[:, None] * N + rn[None, :], mask=(ks[:, None] < K) & (rn[None, :] < N)
        )
        acc = (acc + tl.dot(a, b)).to(tl.float16)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def test_exact_float16_case(device):
    a, b = _integer_operands(32, 48, 1024, device)
    _assert_exact(kp.matmul(a, b), a, b)


def test_exact_case_rejects_float16_accumulation(device):
    a, b = _integer_operands(32, 48, 1024, device)
    out = poison(torch.empty(32, 48, dtype=torch.float16, device=device))
    _gemm_float16_accumulator[(2, 3)](a, b, out, 32, 48, 1024, BLOCK=16)
    with pytest.raises(AssertionError, match="differ from the exact result"):
        _assert_exact(out, a, b)


# --- Backward ---


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("a_t", "b_t"), [(False, False), (True, True)])
def test_backward_matches_float64(dtype, a_t, b_t, device):
    m, n, k = 33, 40, 72
    a, b = _operands(m, n, k, dtype, device, a_t=a_t, b_t=b_t)
    a.requires_grad_()
    b.requires_grad_()
    out = kp.matmul(a, b)
    grad = torch.randn(m, n, device=device).to(dtype)
    out.backward(grad)
    g64, a64, b64 = (t.detach().double().cpu() for t in (grad, a, b))
    assert_matches(a.grad, g64 @ b64.T, dtype, "grad a", tol=_tol(dtype, n))
    assert_matches(b.grad, a64.T @ g64, dtype, "grad b", tol=_tol(dtype, m))


def test_backward_computes_only_needed_gradients(device):
    a, b = _operands(8, 6, 5, torch.float32, device)
    a.requires_grad_()
    kp.matmul(a, b).sum().backward()  # the gradient arrives expanded: zero strides
    assert b.grad is None
    assert_matches(a.grad, torch.ones(8, 6, dtype=torch.float64) @ b.double().T, torch.float32)


def test_custom_op_registration(device):
    a, b = _operands(8, 4, 16, torch.float32, device)
    a.requires_grad_()
    # Fake-tensor and compile checks need real kernels: the GPU file runs the
    # full opcheck; the schema and autograd registration are checked here.
    opcheck(
        torch.ops.kp.matmul.default,
        (a, b),
        {"allow_tf32": False},
        test_utils=("test_schema", "test_autograd_registration"),
    )


# --- Path selection and tuning-key helpers ---


def test_tma_layout():
    t = torch.empty(64, 32, dtype=torch.float16)
    assert mm._tma_layout(t) == (False, 32)
    assert mm._tma_layout(t.t()) == (True, 32)
    assert mm._tma_layout(torch.empty(64, 30, dtype=torch.float16)) is None  # 60-byte rows
    assert mm._tma_layout(t[:, 1:]) is None  # start 2 bytes past alignment
    assert mm._tma_layout(t[:, ::2]) is None  # no unit stride
    assert mm._tma_layout(torch.empty(32, dtype=torch.float16).expand(64, 32)) is None
    assert mm._tma_layout(torch.empty(64, 40, dtype=torch.float16)[:, :32]) == (False, 40)


def test_launcher_refuses_what_the_tma_path_cannot_do(device):
    a, b = _operands(16, 16, 16, torch.float32, device)
    with pytest.raises(ValueError, match="supports float16 and bfloat16"):
        mm._launch_matmul(a, b, torch.empty(16, 16, device=device), allow_tf32=False, path="tma")
    a, b = _operands(16, 15, 16, torch.float16, device)
    with pytest.raises(ValueError, match="path='tma' needs a unit stride"):
        mm._launch_matmul(
            a, b, torch.empty(16, 15, dtype=torch.float16), allow_tf32=False, path="tma"
        )
    with pytest.raises(ValueError, match="path must be"):
        mm._launch_matmul(
            a, b, torch.empty(16, 15, dtype=torch.float16), allow_tf32=False, path="x"
        )


def test_fixed_config_kwargs_leave_out_num_ctas():
    # wrap_triton refuses num_ctas as a launch argument (the H200 run failed on it).
    config = mm.TMA_CONFIGS[0]
    kwargs = mm._fixed_config_kwargs(config)
    assert "num_ctas" in config.all_kwargs() and "num_ctas" not in kwargs
    assert kwargs["num_warps"] == config.num_warps and kwargs["num_stages"] == config.num_stages
    assert kwargs["BLOCK_N"] == config.kwargs["BLOCK_N"]


def test_bucket():
    assert mm._bucket(1) == 16
    assert mm._bucket(33) == mm._bucket(40) == mm._bucket(64) == 64
    assert mm._bucket(65) == mm._bucket(100) == 128


def test_errors(device):
    a = torch.randn(4, 5, device=device)
    with pytest.raises(TypeError, match="^b must be a torch.Tensor"):
        kp.matmul(a, [[1.0]])
    with pytest.raises(TypeError, match="^b has dtype torch.float16 but a"):
        kp.matmul(a, torch.randn(5, 3, device=device).half())
    with pytest.raises(ValueError, match="^a must be a 2-D matrix, got a 1-D"):
        kp.matmul(torch.randn(5, device=device), torch.randn(5, 3, device=device))
    with pytest.raises(ValueError, match="^b must be a 2-D matrix, got a 3-D"):
        kp.matmul(a, torch.randn(2, 5, 3, device=device))
    with pytest.raises(ValueError, match="^b has 6 rows but a has 5 columns"):
        kp.matmul(a, torch.randn(6, 3, device=device))
    with pytest.raises(TypeError, match="^allow_tf32 must be a bool"):
        kp.matmul(a, torch.randn(5, 3, device=device), allow_tf32=1)
    with pytest.raises(ValueError, match="^b is on device meta"):
        kp.matmul(a, torch.empty(5, 3, device="meta"))


# --- Ahead-of-time compile of the Hopper path for sm_90 (no GPU needed) ---

#: Compiles for sm_90 and prints one JSON line per compile (see
#: ``run_compile_script``): every TMA config (float16, both operands row-
#: major; and each one split-K keeps in bfloat16 with ``A`` transposed and
#: ``K`` split in two, as for ``dB``), one TMA config with both operands
#: transposed (bfloat16), every pointer config (float16, row-major, sizes
#: multiples of 16), and one pointer config for float32 with
#: ``input_precision`` "ieee" and "tf32".
_AOT_SCRIPT = textwrap.dedent(
    """
    import json
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from kernel_portfolio.arch import count_instructions
    from kernel_portfolio.ops import matmul as mm

    TMA_INTS = ["M", "N", "K", "stride_a", "stride_b", "stride_c", "M_BUCKET", "K_BUCKET"]
    # Row-major operands (unit strides along K, N and N) whose sizes and
    # strides are multiples of 16 bytes: the launcher passes these constants.
    PTR_INTS = mm._POINTER_RUNTIME_ARGS
    PTR = dict(A_UNIT=1, B_UNIT=1, C_UNIT=1, WIDEN_OPERANDS=False)

    def compile_one(job, kernel, ints, config, dtype, divisible=(), ws="", **constexprs):
        signature = {name: f"*{dtype}" for name in ("a_ptr", "b_ptr", "c_ptr")}
        if ws:
            signature["ws_ptr"] = ws
        signature.update({name: "i32" for name in ints})
        constexprs = {**config.kwargs, **constexprs}
        signature.update({name: "constexpr" for name in constexprs})
        # Pointers 16-byte aligned, and the named sizes multiples of 16, as
        # Triton specialises them at launch.
        attrs = {(kernel.arg_names.index(name),): [["tt.divisibility", 16]]
                 for name in ("a_ptr", "b_ptr", "c_ptr", "ws_ptr", *divisible)
                 if name in kernel.arg_names}
        compiled = triton.compile(
            ASTSource(kernel, signature, constexprs, attrs),
            target=GPUTarget("cuda", 90, 32),
            options={"num_warps": config.num_warps, "num_stages": config.num_stages},
        )
        print(json.dumps({
            **job,
            "ws": bool(config.kwargs.get("WARP_SPECIALIZE")),
            "config_warps": config.num_warps,
            "counts": count_instructions(compiled.asm["ptx"]),
            "cp_async_16": "cp.async.cg.shared.global" in compiled.asm["ptx"],
            "shared": compiled.metadata.shared,
            "num_warps": compiled.metadata.num_warps,
            "cubin": len(compiled.asm["cubin"]),
        }), flush=True)

    tma = dict(NUM_SMS=132, WIDEN_OPERANDS=False)
    for i, config in enumerate(mm.TMA_CONFIGS):
        compile_one({"job": "tma", "index": i}, mm._matmul_tma_kernel, TMA_INTS, config, "fp16",
                    ws="*fp16", A_COL_MAJOR=False, B_COL_MAJOR=False, SPLIT_K=1, **tma)
    for i, config in enumerate(mm._fitting_configs(mm.TMA_CONFIGS, {}, SPLIT_K=2)):
        compile_one({"job": "tma-split-k", "index": i}, mm._matmul_tma_kernel, TMA_INTS, config,
                    "bf16", ws="*fp32", A_COL_MAJOR=True, B_COL_MAJOR=False, SPLIT_K=2, **tma)
    compile_one({"job": "tma-transposed"}, mm._matmul_tma_kernel, TMA_INTS, mm.TMA_CONFIGS[0],
                "bf16", ws="*bf16", A_COL_MAJOR=True, B_COL_MAJOR=True, SPLIT_K=1, **tma)
    for i, config in enumerate(mm.POINTER_CONFIGS):
        compile_one({"job": "pointer", "index": i}, mm._matmul_kernel, PTR_INTS, config, "fp16",
                    INPUT_PRECISION="ieee", VEC=8, **PTR)
    for precision in ("ieee", "tf32"):
        compile_one({"job": "pointer-fp32-" + precision}, mm._matmul_kernel, PTR_INTS,
                    mm.POINTER_CONFIGS[0], "fp32", INPUT_PRECISION=precision, VEC=4, **PTR)
    """
)

#: Shared memory a Hopper block may opt in to (227 KiB).
HOPPER_MAX_SHARED = 232448


def run_compile_script(script: str, cache_dir) -> list[dict]:
    """Run ``script`` in a child process without the interpreter; parse its JSON lines.

    Ahead-of-time compiles happen there: under ``TRITON_INTERPRET=1`` the
    kernels are interpreter objects, and once interpreted kernels have run,
    the interpreter's patches to ``triton.language`` break compiling in the
    same process. ``cache_dir`` is an empty Triton cache, so every compile
    is real.
    """
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(cache_dir)
    proc = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return [json.loads(line) for line in proc.stdout.splitlines()]


def test_hopper_path_compiles_for_sm90(tmp_path):
    results = {}
    for r in run_compile_script(_AOT_SCRIPT, tmp_path):
        results.setdefault(r["job"], []).append(r)
    assert len(results["tma"]) == len(mm.TMA_CONFIGS)
    # Split-K keeps every config but the warp-specialised 128x256 tile.
    assert len(results["tma-split-k"]) == len(mm.TMA_CONFIGS) - 1
    assert len(results["pointer"]) == len(mm.POINTER_CONFIGS)
    for r in results["tma"] + results["tma-split-k"] + results["tma-transposed"]:
        assert r["cubin"] > 0 and r["shared"] <= HOPPER_MAX_SHARED, r
        assert r["counts"]["wgmma"] > 0 and r["counts"]["cp.async.bulk.tensor"] > 0, r
        # Warp specialisation adds a producer group: 4 + 2 x 4 warps.
        assert r["num_warps"] == (12 if r["ws"] else r["config_warps"]), r
    for r in results["pointer"]:
        assert r["cubin"] > 0 and r["shared"] <= HOPPER_MAX_SHARED, r
        assert r["counts"]["wgmma"] > 0 and r["counts"]["cp.async.bulk.tensor"] == 0, r
        assert r["cp_async_16"], r  # aligned operands arrive in 16-byte asynchronous copies
    # float32 stays float32 (no tensor-core instruction at all) unless TF32 is allowed.
    (ieee,), (tf32,) = results["pointer-fp32-ieee"], results["pointer-fp32-tf32"]
    assert ieee["counts"]["wgmma"] == ieee["counts"]["mma.sync"] == 0, ieee
    assert tf32["counts"]["wgmma"] > 0, tf32


class RecordingLauncher:
    """Stands in for ``launchable`` while tracing: records launches, runs nothing."""

    calls: list[dict] = []

    def __init__(self, kernel):
        self.kernel = kernel

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            RecordingLauncher.calls.append({"args": args, **kwargs})

        return launch


def test_launcher_keeps_the_batch_size_symbolic(monkeypatch):
    """Traced with symbolic sizes (as torch.compile does), M stays a symbol.

    M reaches the kernel as a runtime size and the tuning key only as its
    bucket, so the trace guards M to a range (32, 64], not to a value.
    """
    monkeypatch.setattr(mm, "launchable", RecordingLauncher)
    monkeypatch.setattr(RecordingLauncher, "calls", [])

    def product(a, b):
        out = torch.empty(a.shape[0], b.shape[1], dtype=a.dtype)
        mm._launch_matmul(a, b, out, allow_tf32=False, path="pointer")
        return out

    make_fx(product, tracing_mode="symbolic")(torch.empty(40, 512), torch.empty(512, 768))
    (call,) = RecordingLauncher.calls
    m = call["args"][3]
    assert isinstance(m, torch.SymInt), m
    assert call["M_BUCKET"] == 64 and call["K_BUCKET"] == 512
