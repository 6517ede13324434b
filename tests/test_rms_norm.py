"""RMSNorm and residual + RMSNorm against float64 references, on every plan.

Runs on the CPU under Triton's interpreter (or on CUDA when present). Every
``torch.empty`` is NaN-filled while a test runs (``poisoned_allocations``), so
an output element, ``rstd`` entry or partial sum a kernel fails to write shows
up as NaN. Gradients are compared, leaf by leaf, with float64 autograd of the
same computation.
"""

from __future__ import annotations

import contextlib

import pytest
import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from kp_testing import (
    assert_matches,
    captured_launches,
    global_memory_ops,
    record_launches,
    views_past_2_31,
)
from test_routes import _PassThrough
from torch.library import opcheck

import kernel_portfolio as kp
from kernel_portfolio import plans, reference
from kernel_portfolio.contracts import interpreter_enabled
from kernel_portfolio.ops import rms_norm as rms_mod
from kernel_portfolio.plans import RowPlan

pytestmark = [pytest.mark.interpreter, pytest.mark.usefixtures("poisoned_allocations")]

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
OPS = ("rms_norm", "residual")

# The shape grid. The interpreter costs a few milliseconds per program, so
# each plan gets the fewest rows that drive its paths, and the dtype matrix
# runs the three kernel paths with small chunks rather than every plan name:
# * block: 37 x 781, odd in both dims; one 1024-wide block holds a row.
# * RowPlans with 64-column chunks on 3 x 781: 13 chunks per row, the last
#   one partial; split over 3 programs is 5 + 5 + 3 chunks.
# Plans by name, and a split asking for more programs than chunks (16 for 13:
# one per chunk, 13 launched), run once per op in float16 without a weight:
# * auto: 37 x 781 (block); looped / split: 3 x 4099, just past the 4096
#   chunk, so two chunks per row, the last 3 wide, and two programs per row.
MATRIX_PLANS = [
    ("block", (37, 781)),
    (RowPlan("looped", 64, 4), (3, 781)),
    (RowPlan("split", 64, 4, 3), (3, 781)),
]
PLAN_CASES = [
    ("auto", (37, 781)),
    *MATRIX_PLANS,
    ("looped", (3, 4099)),
    ("split", (3, 4099)),
    (RowPlan("split", 64, 4, 16), (3, 781)),
]


def _case_id(value):
    """Test ids: a plan name, ``split64x3`` for a RowPlan, ``3x781`` for a shape, a dtype."""
    if isinstance(value, torch.dtype):
        return str(value).removeprefix("torch.")
    if isinstance(value, RowPlan):
        return f"{value.kind}{value.block}x{value.splits}"
    return "x".join(map(str, value)) if isinstance(value, tuple) else value


@pytest.fixture
def poisoned_allocations():
    """NaN-fill every ``torch.empty`` (outputs, ``rstd``, partial sums) during a test."""
    was_on = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    was_filling = torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    yield
    torch.utils.deterministic.fill_uninitialized_memory = was_filling
    torch.use_deterministic_algorithms(was_on, warn_only=warn_only)


# ---------------------------------------------------------------------------
# Checkers (each one is shown to reject a broken variant below)
# ---------------------------------------------------------------------------


def assert_h_exact(h: torch.Tensor, h_ref: torch.Tensor, dtype: torch.dtype) -> None:
    """``h`` must be ``x + residual`` rounded once to ``dtype``: bit-exact.

    Exception: Triton 3.6's interpreter rounds float32 -> bfloat16 toward zero
    (the GPU rounds to nearest even), so there bfloat16 may be one unit off.
    """
    h64 = h.detach().cpu().double()
    if h64.shape != h_ref.shape:
        raise AssertionError(f"h: shape {tuple(h64.shape)} != reference {tuple(h_ref.shape)}")
    if dtype == torch.bfloat16 and interpreter_enabled():
        ok = bool(((h64 - h_ref).abs() <= h_ref.abs() * 2.0**-7).all())
    else:
        ok = torch.equal(h64, h_ref)
    if not ok:
        bad = int((h64 != h_ref).sum())
        raise AssertionError(f"h: {bad} of {h_ref.numel()} elements differ from x + residual")


def reference_grads(leaves, views, eps, dy, dh):
    """Float64 autograd of the operator; returns the gradient of each leaf.

    ``h`` is rounded to the input dtype in the forward pass, as the kernel
    stores it, with gradient 1 through the rounding (a straight-through step),
    so the gradients are taken at the rounded ``h`` the kernel normalises.
    """
    dtype = leaves["x"].dtype
    leaves64 = {k: v.detach().cpu().double().requires_grad_() for k, v in leaves.items()}
    x = views.get("x", _same)(leaves64["x"])
    weight = views.get("weight", _same)(leaves64["weight"]) if "weight" in leaves64 else None
    h = x
    if "residual" in leaves64:
        s = x + views.get("residual", _same)(leaves64["residual"])
        h = s + (s.detach().to(dtype).double() - s.detach())
    y = F.rms_norm(h, (h.shape[-1],), weight, eps)
    outputs, grads = [y], [dy.cpu().double()]
    if dh is not None:
        outputs.append(h)
        grads.append(dh.cpu().double())
    torch.autograd.backward(outputs, grads)
    return {k: v.grad for k, v in leaves64.items()}


def assert_grads(got: dict, ref: dict, dtype: torch.dtype) -> None:
    """Each gradient within ``REL_TOL[dtype]`` of the float64 one (NaN fails)."""
    for name, grad in ref.items():
        if got.get(name) is None:
            raise AssertionError(f"grad {name}: missing")
        assert_matches(got[name], grad, dtype, f"grad {name}")


def _same(t):
    return t


def check_op(op, x, residual=None, weight=None, *, plan="auto", eps=1e-6, views=None):
    """Run ``op`` on (views of) fresh leaves; check ``y``, ``h`` and every gradient.

    Args:
        op: ``"rms_norm"`` or ``"residual"``.
        x, residual, weight: Leaf tensors of one dtype (``residual``/``weight``
            may be None).
        plan: Passed through.
        eps: Passed through.
        views: Optional map from a leaf's name to the view the operator sees
            (transposed, sliced, expanded); applied to the float64 copies too.
    """
    views = views or {}
    dtype = x.dtype
    leaves = {"x": x, "residual": residual, "weight": weight}
    leaves = {k: v.detach().requires_grad_() for k, v in leaves.items() if v is not None}
    xv = views.get("x", _same)(leaves["x"])
    wv = views.get("weight", _same)(leaves["weight"]) if "weight" in leaves else None
    if op == "rms_norm":
        y, h = kp.rms_norm(xv, wv, eps=eps, plan=plan), None
        y_ref = reference.rms_norm(xv, wv, eps)
    else:
        rv = views.get("residual", _same)(leaves["residual"])
        y, h = kp.residual_rms_norm(xv, rv, wv, eps=eps, plan=plan)
        y_ref, h_ref = reference.residual_rms_norm(xv, rv, wv, eps)
        assert h.shape == xv.shape
        assert_h_exact(h, h_ref, dtype)
    assert y.dtype == dtype and y.shape == xv.shape
    assert_matches(y, y_ref, dtype, "y")

    dy = torch.randn_like(y)
    dh = torch.randn_like(h) if h is not None else None
    torch.autograd.backward([y] if h is None else [y, h], [dy] if h is None else [dy, dh])
    ref = reference_grads(leaves, views, eps, dy, dh)
    assert_grads({k: v.grad for k, v in leaves.items()}, ref, dtype)


def make_inputs(op, shape, dtype, device, with_weight=True):
    x = torch.randn(shape, dtype=dtype, device=device)
    residual = torch.randn(shape, dtype=dtype, device=device) if op == "residual" else None
    weight = torch.randn(shape[-1], dtype=dtype, device=device) if with_weight else None
    return x, residual, weight


# ---------------------------------------------------------------------------
# Correctness
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(("plan", "shape"), MATRIX_PLANS, ids=_case_id)
def test_every_path_and_dtype(plan, shape, dtype, op, device):
    check_op(op, *make_inputs(op, shape, dtype, device), plan=plan)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize(("plan", "shape"), PLAN_CASES, ids=_case_id)
def test_every_plan_without_weight(plan, shape, op, device):
    check_op(op, *make_inputs(op, shape, torch.float16, device, with_weight=False), plan=plan)


@pytest.mark.usefixtures("small_pieces")
@pytest.mark.parametrize("with_weight", [True, False], ids=["weight", "no weight"])
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(
    ("n_cols", "pieces"), [(1100, (1024, 128)), (137, (128, 8)), (129, (128, 0))]
)
def test_block_pieces_match_reference(n_cols, pieces, dtype, op, with_weight, device, monkeypatch):
    """Rows held as a main block and a tail (the masked tail too), forward and backward.

    The pieces cover a row's widest body: 137 columns are not 16-byte rows in
    any dtype, and their body of at most 136 is held as 128 + 8; 129 has a
    body of at most 128, which the main block holds, its last column falling
    in the peel (``rms_norm._pieces``)."""
    launches = record_launches(monkeypatch, rms_mod)
    inputs = make_inputs(op, (5, n_cols), dtype, device, with_weight=with_weight)
    check_op(op, *inputs, plan="block")
    launched = {name: (kw["BLOCK"], kw["TAIL"]) for name, _, kw in launches if "TAIL" in kw}
    assert launched == {"_fwd_block_kernel": pieces, "_bwd_kernel": pieces}


@pytest.mark.parametrize("with_weight", [True, False], ids=["weight", "no weight"])
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("n_cols", [1100, 127])
def test_few_rows_read_the_weight_with_the_row(n_cols, op, with_weight, device, monkeypatch):
    """The block forward of at most ``EARLY_W_ROWS_PER_SM`` rows an SM reads
    the weight with the row (``EARLY_W``), of more rows after the reduction,
    and without a weight never early; both match the reference, with a tail
    piece (1100: 1024 + 128) and peeled rows (127 bfloat16 columns)."""
    monkeypatch.setattr(plans, "sm_count", lambda _device: 2)
    launches = record_launches(monkeypatch, rms_mod)
    few = 2 * rms_mod.EARLY_W_ROWS_PER_SM
    early = {}
    for n_rows in (few, few + 1):
        inputs = make_inputs(op, (n_rows, n_cols), torch.bfloat16, device, with_weight=with_weight)
        check_op(op, *inputs, plan="block")
        early[n_rows] = {kw["EARLY_W"] for name, _, kw in launches if "EARLY_W" in kw}
        launches.clear()
    assert early == {few: {with_weight}, few + 1: {False}}


# ---------------------------------------------------------------------------
# Rows at any alignment (PEEL)
# ---------------------------------------------------------------------------
# Rows whose stride is not a multiple of 16 bytes are peeled into a head, an
# aligned body and a tail (kernel_portfolio.ops.peel). Row r of a contiguous
# N-wide tensor starts r * N elements in, so its head is (-r * N) mod VEC:
# 17 rows of an odd width show every head class (8 in 16-bit dtypes, 4 in
# float32) at least twice, and a width of 4 mod 8 has heads 0 and 4 in 16-bit
# dtypes (float32 rows of 132 are aligned: a control). One SM, so that the
# looped forward's programs and the backward's walk several rows each (the
# backward's 2 to 6 programs a slice round up to VEC, _partial_rows). The
# plans: a block (127: a body of at most 15 vectors; 132 with a tail), a
# looped row in one chunk (ONE_CHUNK) and in 13 (781, the last partial), a
# split row over 3 programs.
PEEL_PLANS = [
    ("block", (17, 127)),
    ("block", (17, 132)),
    (RowPlan("looped", 256, 4), (17, 132)),
    (RowPlan("looped", 64, 4), (17, 781)),
    (RowPlan("split", 64, 4, 3), (9, 781)),
]


@pytest.mark.parametrize("with_weight", [True, False], ids=["weight", "no weight"])
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(("plan", "shape"), PEEL_PLANS, ids=_case_id)
def test_peeled_rows_match_reference(plan, shape, dtype, op, with_weight, device, monkeypatch):
    monkeypatch.setattr(plans, "sm_count", lambda _device: 1)
    launches = record_launches(monkeypatch, rms_mod)
    check_op(op, *make_inputs(op, shape, dtype, device, with_weight=with_weight), plan=plan)
    peel = {kw["PEEL"] for _, _, kw in launches if "PEEL" in kw}
    assert peel == {shape[1] * dtype.itemsize % 16 != 0}


# Wide odd rows at real plans, few rows: the block plan at 4097 (the auto
# plan, 8192 columns), looped and split rows of a vocabulary (50257).
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize(
    ("plan", "shape"), [("auto", (9, 4097)), ("looped", (3, 50257)), ("split", (2, 50257))]
)
def test_wide_peeled_rows_match_reference(plan, shape, op, device):
    check_op(op, *make_inputs(op, shape, torch.bfloat16, device), plan=plan)


def test_weight_grad_check_rejects_programs_whose_rows_have_other_heads(device, monkeypatch):
    """Without the rounding of ``_partial_rows``, a backward program's rows 0 and 6
    (of 6 programs) start at other heads: the program splits row 6 at row 0's
    head, and its ``dx`` (and ``dweight``) land on the wrong columns."""
    monkeypatch.setattr(plans, "sm_count", lambda _device: 1)
    inputs = make_inputs("rms_norm", (17, 127), torch.float16, device)
    check_op("rms_norm", *inputs, plan="block")
    unrounded = rms_mod._partial_rows
    monkeypatch.setattr(
        rms_mod,
        "_partial_rows",
        lambda n_rows, n_split, launch, sms, vec, peel: unrounded(
            n_rows, n_split, launch, sms, vec, False
        ),
    )
    with pytest.raises(AssertionError, match="grad"):
        check_op("rms_norm", *inputs, plan="block")


def _captured_backward(monkeypatch, h, plan, with_dh: bool) -> list[dict]:
    """The launches of ``_backward`` over ``h`` (with a weight) on an H200's 132 SMs, unrun."""
    monkeypatch.setattr(plans, "sm_count", lambda _device: 132)
    dy, w, rstd = torch.empty_like(h), torch.empty(h.shape[1], dtype=h.dtype), torch.empty(len(h))
    dh = dy if with_dh else None
    return captured_launches(
        monkeypatch,
        [rms_mod],
        lambda: rms_mod._backward(
            dy, h, w, rstd, dh, plan, torch.empty_like(h), None, torch.empty_like(w)
        ),
    )


# Backward shapes whose grid _partial_rows decides: a vocabulary's rows in 7
# slices (aligned and peeled), 8 slices of a peeled 30522, a split row of
# 131072 in 16 slices, and Qwen2's vocabulary in 19 (aligned and peeled).
@pytest.mark.parametrize(
    ("n_rows", "n_cols", "dtype"),
    [
        (4096, 50256, torch.bfloat16),
        (4096, 50257, torch.bfloat16),
        (4096, 30522, torch.bfloat16),
        (64, 131072, torch.float16),
        (4096, 151936, torch.bfloat16),
        (4096, 151937, torch.bfloat16),
    ],
)
def test_backward_grid_takes_the_fewest_waves(n_rows, n_cols, dtype, monkeypatch):
    """The backward's programs a slice ``P`` (a multiple of ``VEC`` when peeled)
    cost the fewest waves times rows a program of any such ``P`` up to the
    launch's programs over its slices: a grid a few programs past a whole wave
    runs them alone, as one more. Captured on an H200's 132 SMs, not run."""
    h = torch.empty(n_rows, n_cols, dtype=dtype)
    plan = plans.choose_for(h)
    launches = _captured_backward(monkeypatch, h, plan, with_dh=False)
    ((parts, n_split),) = [spec["grid"] for spec in launches if spec["kernel"] == "_bwd_kernel"]
    vec, peel = rms_mod.row_vec(h.element_size(), n_cols, (n_cols,) * 4)
    width = rms_mod._body_width(n_cols, vec, peel)
    launch = rms_mod._bwd_launch(plan, n_cols, h.element_size(), False, width)
    unit = vec if peel else 1
    assert n_split > 1 and parts % unit == 0

    def cost(p):
        return plans.cdiv(p * n_split, launch.resident * 132) * plans.cdiv(n_rows, p)

    most = plans.cdiv(launch.per_sm * 132, n_split)
    assert cost(parts) == min(cost(p) for p in range(unit, most + unit, unit))


@pytest.mark.parametrize("op", ["rms_norm", "residual"])
def test_backward_walks_a_full_block_row_in_chunks(op, monkeypatch):
    """The auto plan holds 4096 rows of 32000 bfloat16 columns as one block of
    32768 (``plan_rule.FULL_BLOCK_MAX_BYTES``); the backward, which holds four
    values a column, walks them in chunks as the looped plan does: a dot pass,
    then chunks of at most ``BWD_CHUNK_ELEMS`` columns a thread. Captured, not
    run."""
    h = torch.empty(4096, 32000, dtype=torch.bfloat16)
    plan = plans.choose_for(h)
    assert (plan.kind, plan.block) == ("block", 32768)
    launches = _captured_backward(monkeypatch, h, plan, with_dh=op == "residual")
    kernels = {spec["kernel"]: spec for spec in launches}
    assert "_bwd_dot_kernel" in kernels
    main = kernels["_bwd_kernel"]
    assert not main["values"]["ONE_CHUNK"]
    block, warps = main["values"]["BLOCK"], main["num_warps"]
    assert block <= rms_mod.BWD_CHUNK_ELEMS * 32 * warps


@pytest.mark.parametrize(
    ("shape", "dtype", "without", "with_residual"),
    [
        # 5/8 of a block of 32768 half-precision columns is 20480: looped below.
        ((4096, 20479), torch.bfloat16, ("looped", 8192, 8), ("looped", 8192, 8)),
        ((4096, 20480), torch.bfloat16, ("block", 32768, 32), ("block", 32768, 16)),
        ((4096, 30522), torch.bfloat16, ("block", 32768, 32), ("block", 32768, 16)),
        ((4096, 32000), torch.float16, ("block", 32768, 32), ("block", 32768, 16)),
        ((4096, 12288), torch.float32, ("block", 16384, 32), ("block", 16384, 16)),  # same bytes
        ((8, 30522), torch.bfloat16, ("split", 4096, 8), ("split", 4096, 8)),  # few rows
        ((4096, 8192), torch.bfloat16, ("block", 8192, 16), ("block", 8192, 16)),  # not full
    ],
    ids=_case_id,
)
def test_auto_forward_holds_five_eighths_of_a_full_block_in_one(
    shape, dtype, without, with_residual
):
    """``auto``'s forwards hold a row of at least ``FULL_BLOCK_FWD_MIN_FILL``
    of a full block (wider than ``plan_rule.MAX_BLOCK_BYTES``, at most
    ``FULL_BLOCK_MAX_BYTES``) in one block, in ``FULL_BLOCK_FWD_WARPS`` warps
    without a residual and the block plan's with one; few rows still split,
    and a forced plan is launched as given."""
    x = torch.empty(shape, dtype=dtype)
    for has_residual, want in ((False, without), (True, with_residual)):
        got = rms_mod._forward_plan(x, x[0], "auto", has_residual)
        assert (got.kind, got.block, got.num_warps) == want, has_residual
        forced = rms_mod._forward_plan(x, x[0], "looped", has_residual)
        assert forced == plans.choose_for(x, "looped")


@pytest.mark.parametrize("op", OPS)
def test_a_full_block_forward_reads_the_shifted_weight(op, device, monkeypatch):
    """67 rows of 20481 float16 columns (more than half the SMs' count, so not
    split) take one block of 32768 in the forward, the peeled body reading
    the weight's shifted copies, and the looped plan in the backward; both
    match the float64 reference (interpreter-sized: shifted copies forced)."""
    monkeypatch.setattr(rms_mod, "SHIFT_W_MIN_ELEMENTS", 0)
    launches = record_launches(monkeypatch, rms_mod)
    check_op(op, *make_inputs(op, (67, 20481), torch.float16, device))
    forward = [kw for name, _, kw in launches if name.startswith("_fwd")]
    assert [(kw["BLOCK"], kw["SHIFT_W"], kw["num_warps"]) for kw in forward] == [
        (32768, True, 16 if op == "residual" else rms_mod.FULL_BLOCK_FWD_WARPS)
    ]
    names = {name for name, _, _ in launches}
    assert "_fwd_block_kernel" in names and "_bwd_kernel" in names


@pytest.mark.parametrize("n_cols", [127, 1001])
def test_partial_dweight_rows_are_written_to_their_padded_width(n_cols, device, monkeypatch):
    """The partial ``dweight`` rows are ``n_cols`` padded to 4 floats, which the
    reduction reads (16-byte loads); its scratch holds zeros there, not the
    poison of an unwritten allocation (``contracts.scratch``: written before
    read)."""
    made, scratch = [], rms_mod.scratch

    def recording_scratch(shape, dtype, device):
        made.append(scratch(shape, dtype, device))
        return made[-1]

    monkeypatch.setattr(rms_mod, "scratch", recording_scratch)
    check_op("rms_norm", *make_inputs("rms_norm", (9, n_cols), torch.float16, device))
    (part,) = (t for t in made if t.dim() == 2 and t.shape[1] == -(-n_cols // 4) * 4)
    assert torch.equal(part[:, n_cols:], torch.zeros_like(part[:, n_cols:]))


@triton.jit
def _no_peel(head, n_body, n_cols, VEC: tl.constexpr):
    """Broken ``peel_cols``: the head's and the tail's lanes, all masked off."""
    lanes = tl.arange(0, 2 * VEC)
    return lanes, lanes < 0


@pytest.mark.skipif(
    not interpreter_enabled(), reason="swaps a jit helper, which only the interpreter looks up"
)
@pytest.mark.parametrize("op", OPS)
def test_reference_check_rejects_rows_without_their_peel(op, device, monkeypatch):
    inputs = make_inputs(op, (9, 127), torch.float16, device)
    check_op(op, *inputs, plan="block")
    monkeypatch.setattr(rms_mod, "peel_cols", _no_peel)
    with pytest.raises(AssertionError, match="relative error|differ"):
        check_op(op, *inputs, plan="block")


# The 16-byte check: (plan, shape, dtype) with rows that are not 16-byte
# aligned: every kernel of both operators, forward and backward (the block
# plan, the looped in one chunk and in several, the split), odd widths and a
# multiple of 4 but not 8 (float16), and float32.
VECTOR_CASES = [
    ("block", (64, 1001), torch.float16),
    ("block", (64, 1004), torch.bfloat16),
    (RowPlan("looped", 2048, 4), (64, 1001), torch.float16),
    ("looped", (64, 50257), torch.bfloat16),
    ("split", (4, 32769), torch.float16),
    ("block", (64, 30522), torch.bfloat16),  # a full block (reads a shifted weight)
    ("block", (64, 1001), torch.float32),
]


def _launches(monkeypatch, shape, dtype, plan) -> list[dict]:
    """Every launch (captured, not run) of the forward and backward of both operators."""
    x = torch.empty(shape, dtype=dtype)
    chosen = plans.choose_for(x, plan)
    w, dw = torch.empty(shape[1], dtype=dtype), torch.empty(shape[1], dtype=dtype)
    rstd = torch.empty(shape[0])

    def out():
        return torch.empty_like(x)

    def call():
        rms_mod._forward(x, None, w, 1e-6, chosen, out(), None, rstd)
        rms_mod._forward(x, x, w, 1e-6, chosen, out(), out(), rstd)
        rms_mod._backward(x, x, w, rstd, None, chosen, out(), None, dw)
        rms_mod._backward(x, x, w, rstd, x, chosen, out(), out(), dw)

    with monkeypatch.context() as patched:
        patched.setattr(plans, "sm_count", lambda _device: 132)  # an H200's
        return captured_launches(patched, [rms_mod], call)


def _count(ops: list[str], opcode: str) -> int:
    return sum(int(op.split("#")[1]) for op in ops if op.split("#")[0] == opcode and "#" in op)


def _narrow_row_ops(spec: dict, ops: list[str]) -> set[str]:
    """16-bit row accesses narrower than 16 bytes (the ``dweight`` output of
    ``_dw_reduce_kernel``, one row of the weight's, is not a row access)."""
    if spec["kernel"] == "_dw_reduce_kernel":
        ops = [op for op in ops if op.startswith("ld.")]
    return {op for op in ops if "#" not in op and (op.endswith(".b16") or ".v2." in op)}


def assert_row_vectors(peeled: list[dict], aligned: list[dict], dtype: torch.dtype) -> None:
    """Compiled for sm_90: the body of every row moves in 16-byte vectors.

    ``peeled``: launches at a width whose rows are not 16-byte aligned. Each
    kernel's 16-byte loads and stores are as many as the same kernel's with
    ``PEEL`` and the weight off (its row accesses alone, aligned code, which
    for 16-bit rows has no narrower access); what else it moves is narrower:
    the head and tail, and the weight and partial ``dweight`` rows (indexed
    by absolute column, not 16-byte aligned in a peeled row).
    ``_dw_reduce_kernel`` reads its padded partial rows only in 16-byte
    vectors. ``aligned``: launches at the aligned neighbour width, whose
    16-bit row accesses are all 16-byte vectors.
    """
    rows_only = []
    for spec in peeled:
        bare = {**spec, "values": dict(spec["values"])}
        if "PEEL" in bare["values"]:
            bare["values"] |= {"PEEL": False, "HAS_WEIGHT": False}
        rows_only.append(bare)
    specs = [{**s, "registers": False, "counts": True} for s in (*peeled, *rows_only, *aligned)]
    compiled = global_memory_ops(specs)
    ops_peeled = compiled[: len(peeled)]
    ops_rows = compiled[len(peeled) : 2 * len(peeled)]
    for spec, ops, rows in zip(peeled, ops_peeled, ops_rows, strict=True):
        what = (spec["kernel"], sorted(ops))
        assert _count(ops, "ld.global.v4.b32") > 0, what
        if dtype.itemsize == 2:
            assert not _narrow_row_ops(spec, rows), (spec["kernel"], sorted(rows))
        if spec["kernel"] == "_dw_reduce_kernel":
            assert {op for op in ops if op.startswith("ld.") and "#" not in op} == {
                "ld.global.v4.b32"
            }, what
            continue
        for opcode in ("ld.global.v4.b32", "st.global.v4.b32"):
            assert _count(ops, opcode) == _count(rows, opcode), (opcode, what, sorted(rows))
        assert spec["values"]["PEEL"] and spec["values"]["VEC"] == 16 // dtype.itemsize, what
    for spec, ops in zip(aligned, compiled[2 * len(peeled) :], strict=True):
        assert spec["values"].get("PEEL", False) is False, spec["kernel"]
        assert "ld.global.v4.b32" in ops, (spec["kernel"], ops)
        if dtype.itemsize == 2:
            assert not _narrow_row_ops(spec, ops), (spec["kernel"], ops)


@pytest.mark.parametrize(("plan", "shape", "dtype"), VECTOR_CASES, ids=_case_id)
def test_rows_compile_to_16_byte_vectors_at_any_width(plan, shape, dtype, monkeypatch):
    """Every RMSNorm kernel, captured from its launcher at a width whose rows are
    not 16-byte aligned and at the aligned neighbour (the width rounded up to
    a multiple of 8), compiled as Triton's launcher would (see
    :func:`assert_row_vectors`)."""
    peeled = _launches(monkeypatch, shape, dtype, plan)
    aligned = _launches(monkeypatch, (shape[0], -(-shape[1] // 8) * 8), dtype, plan)
    assert {s["kernel"] for s in peeled} == {s["kernel"] for s in aligned}
    assert_row_vectors(peeled, aligned, dtype)


# Peeled rows reading the weight's shifted copies (SHIFT_W), forced at sizes the
# interpreter runs: every plan (the looped in one chunk and in several), an odd
# width and a multiple of 4 but not 8.
SHIFT_W_CASES = [
    ("block", (9, 65), torch.float16),
    ("block", (9, 1004), torch.bfloat16),
    (RowPlan("looped", 64, 4), (9, 201), torch.float16),
    (RowPlan("looped", 256, 4), (9, 201), torch.bfloat16),
    (RowPlan("split", 32, 4, 3), (3, 201), torch.float16),
    ("block", (4, 12289), torch.float16),  # the backward loads the weight each row
    (RowPlan("block", 32768, 16), (3, 20001), torch.float16),  # a full block
]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize(("plan", "shape", "dtype"), SHIFT_W_CASES, ids=_case_id)
def test_peeled_rows_read_the_shifted_weight(plan, shape, dtype, op, device, monkeypatch):
    monkeypatch.setattr(rms_mod, "SHIFT_W_MIN_ELEMENTS", 0)
    monkeypatch.setattr(rms_mod, "SHIFT_W_BWD_MIN_ELEMENTS", 0)
    launches = record_launches(monkeypatch, rms_mod)
    check_op(op, *make_inputs(op, shape, dtype, device), plan=plan)
    shifted = {name: kw["SHIFT_W"] for name, _, kw in launches if "SHIFT_W" in kw}
    # The looped and split forwards without a residual, the backward's first
    # pass, and its main kernel where that loads the weight for every row.
    full_block = isinstance(plan, RowPlan) and plan.kind == "block"
    want = {
        "_fwd_block_kernel": full_block,
        "_fwd_looped_kernel": op == "rms_norm",
        "_fwd_split_kernel": op == "rms_norm",
        "_bwd_dot_kernel": True,
    } | {name: kw["WEIGHT_EACH_ROW"] for name, _, kw in launches if name == "_bwd_kernel"}
    assert shifted == {name: want[name] for name in shifted}
    block = [kw for name, _, kw in launches if name == "_fwd_block_kernel"]
    assert bool(block) == (plan == "block" or full_block)
    assert shifted.get("_bwd_kernel") == (shape == (4, 12289))  # the case that loads it each row
    assert all(kw["PEEL"] for _, _, kw in launches if "SHIFT_W" in kw)
    # Each copy of the weight is read: a launch with SHIFT_W follows it before
    # the next copy (the forward's, then the backward's where one of its reads it).
    pending = None
    for name, _, kw in launches:
        if name == "_shift_weight_kernel":
            assert pending is None, "a shifted copy nothing read"
            pending = name
        elif kw.get("SHIFT_W"):
            pending = None
    assert pending is None, "a shifted copy nothing read"
    copied = "_shift_weight_kernel" in {name for name, _, _ in launches}
    assert copied == any(shifted.values())  # and a copy before every read of one


@pytest.mark.parametrize(("plan", "shape", "dtype"), VECTOR_CASES[2:6], ids=_case_id)
def test_the_shifted_weight_loads_in_16_byte_vectors(plan, shape, dtype, monkeypatch):
    """Compiled for sm_90, a peeled forward with ``SHIFT_W`` loads as many 16-byte
    vectors as the same kernel unpeeled, the weight's included: only the head and
    tail (and their weight) stay narrow. Without ``SHIFT_W`` the body's weight is
    read in narrower loads, and the counts differ."""
    monkeypatch.setattr(rms_mod, "SHIFT_W_MIN_ELEMENTS", 0)
    monkeypatch.setattr(rms_mod, "SHIFT_W_BWD_MIN_ELEMENTS", 0)
    specs = [s for s in _launches(monkeypatch, shape, dtype, plan) if s["values"].get("SHIFT_W")]
    assert {s["kernel"] for s in specs} & {
        "_fwd_block_kernel",
        "_fwd_looped_kernel",
        "_fwd_split_kernel",
    }
    variants = [
        {**s, "values": s["values"] | change, "registers": False, "counts": True}
        for change in ({}, {"PEEL": False, "SHIFT_W": False}, {"SHIFT_W": False})
        for s in specs
    ]
    compiled = global_memory_ops(variants)
    n = len(specs)
    for i, spec in enumerate(specs):
        shifted, unpeeled, narrow = compiled[i], compiled[n + i], compiled[2 * n + i]
        v4 = [_count(ops, "ld.global.v4.b32") for ops in (shifted, unpeeled, narrow)]
        assert v4[0] == v4[1] > v4[2], (spec["kernel"], v4)


@pytest.mark.parametrize("n_cols", [4097, 4100])
def test_peeled_rows_just_past_a_power_of_two_take_no_tail_piece(n_cols, monkeypatch):
    """A peeled row of 4097 or 4100 float16 columns has a body of at most 4096:
    the block plan holds it as a main block of 4096 and no tail
    (``rms_norm._pieces``), and nothing spills on sm_90 (the backward spilled
    20 and 40 bytes a thread with a tail piece that the peel left empty)."""
    specs = _launches(monkeypatch, (4096, n_cols), torch.float16, "auto")
    specs = [s for s in specs if s["kernel"] in ("_fwd_block_kernel", "_bwd_kernel")]
    assert {(s["values"]["BLOCK"], s["values"]["TAIL"]) for s in specs} == {(4096, 0)}
    assert {s["values"]["PEEL"] for s in specs} == {True}
    for spec, ops in zip(specs, global_memory_ops(specs), strict=True):
        assert "spills.0" in ops, (spec["kernel"], ops)


def test_row_vector_check_rejects_unpeeled_rows(monkeypatch):
    """With ``PEEL`` forced off the odd rows take the narrow vectors their
    alignment allows (``plans.vec_width``: 2 bytes), and the check fails."""
    shape, dtype = (64, 1001), torch.float16
    aligned = _launches(monkeypatch, (64, 1008), dtype, "block")
    monkeypatch.setattr(
        rms_mod,
        "row_vec",
        lambda elem, n, strides, unit=True: (plans.vec_width(elem, n, strides), False),
    )
    with pytest.raises(AssertionError):
        assert_row_vectors(_launches(monkeypatch, shape, dtype, "block"), aligned, dtype)


@pytest.mark.parametrize("max_grid", [plans.MAX_GRID, 5])
@pytest.mark.parametrize("op", OPS)
def test_programs_cover_every_row(max_grid, op, device, monkeypatch):
    """Block programs take a row each; looped ones on a persistent grid walk several.

    A block forward launches at most ``plans.MAX_GRID`` programs at a time:
    with the limit set to 5, 37 rows take eight launches, each program
    adding its launch's first row. Looped programs on one SM's worth of a
    persistent grid each walk several rows.
    """
    monkeypatch.setattr(plans, "sm_count", lambda _device: 1)
    monkeypatch.setattr(plans, "MAX_GRID", max_grid)
    launches = record_launches(monkeypatch, rms_mod)
    for plan in ("block", "looped"):
        launches.clear()
        check_op(op, *make_inputs(op, (37, 100), torch.float16, device), plan=plan)
        grids = [grid for name, grid, _ in launches if name.startswith("_fwd")]
        if plan == "block":
            assert grids == ([(5,)] * 7 + [(2,)] if max_grid == 5 else [(37,)]), grids
        else:
            assert len(grids) == 1 and grids[0][0] < 37, grids


# Launches: (block, tail, warps, programs per SM, programs an SM holds at once,
# prefetch, register cap, weight each row). Light programs (8 columns a
# thread) six an SM with the prefetch; heavy ones (16) 16 warps an SM, at
# least two programs; 96 bytes a thread with dh still prefetch, 4104 with dh,
# float32 8192 and a split row do not; a forced plan keeps its warps; a looped
# row goes in chunks of half the plan's; a block row of 32 columns a thread
# loads the weight each row.
@pytest.mark.parametrize(
    ("plan", "n_cols", "elem_bytes", "has_dh", "launch"),
    [
        (RowPlan("block", 1024, 2), 1024, 2, False, (1024, 0, 4, 6, 6, True, 80, False)),
        (RowPlan("block", 1024, 4), 1024, 4, True, (1024, 0, 4, 6, 6, True, 80, False)),
        (RowPlan("block", 512, 1), 512, 2, False, (512, 0, 4, 6, 6, True, 80, False)),
        (RowPlan("block", 2048, 4), 2048, 2, False, (2048, 0, 4, 4, 4, True, 128, False)),
        (RowPlan("block", 4096, 8), 4096, 2, True, (4096, 0, 8, 2, 2, True, 128, False)),
        (RowPlan("block", 8192, 8), 4104, 2, False, (4096, 8, 8, 2, 2, True, 128, False)),
        (RowPlan("block", 8192, 8), 4104, 2, True, (4096, 8, 8, 2, 2, False, 128, False)),
        (RowPlan("block", 8192, 8), 7000, 2, False, (8192, 0, 16, 2, 1, True, 128, False)),
        (RowPlan("block", 8192, 16), 8192, 2, False, (8192, 0, 16, 2, 1, True, 128, False)),
        (RowPlan("block", 8192, 16), 8192, 4, False, (8192, 0, 16, 2, 1, False, 128, False)),
        (RowPlan("block", 8192, 32), 8192, 2, False, (8192, 0, 32, 2, 1, True, 64, False)),
        (RowPlan("looped", 8192, 8), 20000, 2, False, (4096, 0, 8, 2, 2, True, 128, False)),
        (RowPlan("looped", 16384, 16), 1 << 17, 4, True, (8192, 0, 16, 2, 1, False, 128, False)),
        (RowPlan("split", 4096, 16, 8), 100000, 2, False, (4096, 0, 16, 2, 1, False, 128, False)),
        (RowPlan("block", 16384, 16), 16384, 2, True, (16384, 0, 16, 2, 1, False, 128, True)),
    ],
    ids=str,
)
@pytest.mark.usefixtures("small_pieces")
def test_backward_launch_follows_the_bytes_a_thread_holds(plan, n_cols, elem_bytes, has_dh, launch):
    assert rms_mod._bwd_launch(plan, n_cols, elem_bytes, has_dh) == launch


@pytest.mark.parametrize(
    ("plan", "shape", "launch"),
    [
        ("auto", (37, 1024), (4, 6, 1, 1024, 0, True, 80)),
        ("auto", (37, 2048), (4, 4, 1, 2048, 0, True, 128)),
        ("auto", (37, 1096), (4, 4, 1, 1024, 128, True, 128)),  # pieces, with the prefetch
        # Peeled rows (1100 = 4 mod 8): the 4 programs rounded up to VEC = 8.
        ("auto", (37, 1100), (4, 8, 1, 1024, 128, True, 128)),
        ("auto", (37, 4104), (8, 2, 1, 4096, 8, True, 128)),
        # Half the plan's chunk: 5 chunks of 2048 over 4 programs, as 3 slices of 2
        # chunks, one program a slice (two would be 6 programs on 4 places).
        (RowPlan("looped", 4096, 4), (5, 9000), (4, 1, 3, 2048, 0, True, 128)),
        (RowPlan("split", 4096, 4, 2), (5, 9000), (4, 1, 3, 2048, 0, False, 128)),
    ],
    ids=str,
)
@pytest.mark.usefixtures("small_pieces")
def test_backward_launches_by_its_rule(plan, shape, launch, device, monkeypatch):
    """The backward kernel runs with ``_bwd_launch``'s warps, programs per SM,
    chunk, prefetch and register cap: a row just past a power of two as the
    pieces of ``plans.block_pieces`` (the forward too), a looped or split row
    in chunks of half the plan's, sliced into as many slices as the programs
    allow (``_bwd_slices``). One SM: each program walks several rows, so
    the prefetch carries rows from one step to the next (a split row's never
    prefetches)."""
    monkeypatch.setattr(plans, "sm_count", lambda _device: 1)
    launches = record_launches(monkeypatch, rms_mod)
    check_op("rms_norm", *make_inputs("rms_norm", shape, torch.float16, device), plan=plan)
    kernels = {name: (grid, kwargs) for name, grid, kwargs in launches}
    grid, kwargs = kernels["_bwd_kernel"]
    got = (kwargs["num_warps"], *grid, kwargs["BLOCK"], kwargs["TAIL"], kwargs["PREFETCH"])
    assert (*got, kwargs["maxnreg"]) == launch
    if plan == "auto":
        _, kwargs = kernels["_fwd_block_kernel"]
        assert (kwargs["BLOCK"], kwargs["TAIL"]) == launch[3:5]


@pytest.mark.parametrize(
    ("n_cols", "dtype", "has_dh"),
    [
        (1024, "fp16", False),
        (1024, "fp32", False),
        (2048, "fp16", False),
        (4104, "fp16", False),  # 163 registers uncapped
        (8192, "fp16", False),
        (8192, "fp32", False),
        (1024, "fp16", True),
        (1024, "fp32", True),
        (4096, "fp16", True),  # 144 registers uncapped
        (4104, "fp16", True),
        (8192, "fp16", True),
        (8192, "fp32", True),
        (20000, "fp16", True),
        (20000, "fp32", True),  # looped: 1680 bytes spilled in the plan's chunks
        (131072, "fp16", True),
        pytest.param(
            12288,
            "fp16",
            False,
            marks=pytest.mark.xfail(
                strict=True,
                reason="known: a block plan's row of 32 columns a thread spills 44 bytes "
                "with the weight loaded each row",
            ),
        ),
    ],
)
def test_backward_registers_match_the_launch_rule(n_cols, dtype, has_dh):
    """The premise of ``_bwd_launch`` on sm_90 (``ptxas -v``, registers allocated
    per thread in eights), under the register cap it launches with: nothing
    spills to local memory, and the programs it counts on per SM fit the SM's
    65536 registers (a light program, up to ``BWD_LIGHT_ELEMS`` columns a
    thread and ``BWD_LIGHT_MAX_WARPS`` warps, as many times as the rule
    launches; a heavy one takes over 64, and
    ``BWD_HEAVY_WARPS_PER_SM`` warps of it fit). ``has_dh``: the residual
    RMSNorm's backward, which also loads ``dh`` and stores two ``dx``."""
    elem_bytes = 2 if dtype == "fp16" else 4
    plan = plans.choose(1 << 15, n_cols, elem_bytes=elem_bytes, sm_count=plans.CPU_SM_COUNT)
    _assert_registers_fit(plan, n_cols, dtype, has_dh)


@pytest.mark.parametrize("has_dh", [False, True])
def test_sixteen_warp_backward_programs_count_as_heavy(has_dh):
    """Eight columns a thread in 16 warps (a narrow looped row under the v29-v31
    fit) took 94 registers with ``dh``, more than two such programs an SM
    leave, so ``_bwd_launch`` counts them as heavy (``BWD_LIGHT_MAX_WARPS``),
    and they fit as such."""
    _assert_registers_fit(RowPlan("looped", 4096, 16), 20000, "fp16", has_dh)


@pytest.mark.parametrize("n_cols", [30522, 50257])
def test_peeled_backward_with_dh_fits_its_launch(n_cols):
    """Peeled rows with ``dh`` (the residual RMSNorm at a vocabulary width): a
    heavy program's prefetch of the next row's head and tail of three tensors
    spilled under the cap of 128 registers (4 and 8 bytes a thread), so the
    launch rule leaves the prefetch out there, and nothing spills."""
    plan = plans.choose(1 << 15, n_cols, elem_bytes=2, sm_count=plans.CPU_SM_COUNT)
    _assert_registers_fit(plan, n_cols, "fp16", True, peel=True)
    width = n_cols // 8 * 8
    prefetch = {
        (peel, has_dh): rms_mod._bwd_launch(plan, n_cols, 2, has_dh, width, peel).prefetch
        for peel in (False, True)
        for has_dh in (False, True)
    }
    assert prefetch == {(False, False): True, (False, True): True, (True, False): True,
                        (True, True): False}  # fmt: skip


def _assert_registers_fit(
    plan: RowPlan, n_cols: int, dtype: str, has_dh: bool, peel: bool = False
) -> None:
    """The register and spill premise of ``_bwd_launch`` under ``plan``, compiled for sm_90.

    ``peel``: rows not 16 bytes apart (``PEEL``), their body ``n_cols`` rounded
    down to whole vectors.
    """
    elem_bytes = 2 if dtype == "fp16" else 4
    vec = 16 // elem_bytes
    width = n_cols // vec * vec if peel else n_cols
    launch = rms_mod._bwd_launch(plan, n_cols, elem_bytes, has_dh, width, peel)
    block, tail = launch.block, launch.tail
    runtime = {name: "i32" for name in ("n_rows", "n_cols", "chunks_per_split", "n_dots")}
    runtime |= {name: "i32" for name in ("stride_dym", "stride_hm", "stride_dhm", "stride_pm")}
    runtime |= {name: "*fp32" for name in ("rstd_ptr", "dot_ptr", "dw_part_ptr")}
    pointers = ("dy_ptr", "h_ptr", "w_ptr", "dh_ptr", "dx_ptr", "dx2_ptr")
    runtime |= {name: f"*{dtype}" for name in pointers}
    consts = {"stride_dyn": 1, "stride_hn": 1, "stride_dhn": 1, "HAS_WEIGHT": True}
    consts |= {"HAS_DH": has_dh, "TWO_DX": has_dh, "BLOCK": block, "TAIL": tail}
    consts |= {"ONE_CHUNK": block + tail >= width, "VEC": vec, "PEEL": peel}
    consts |= {"MAX_PARTIALS": plans.MAX_SPLITS, "PREFETCH": launch.prefetch}
    consts |= {"WEIGHT_EACH_ROW": launch.weight_each_row}
    (ops,) = global_memory_ops(
        [
            {
                "module": "kernel_portfolio.ops.rms_norm",
                "kernel": "_bwd_kernel",
                "signature": runtime,
                "constexprs": consts,
                "aligned": [*pointers, "rstd_ptr", "dot_ptr", "dw_part_ptr"],
                "num_warps": launch.warps,
                "maxnreg": launch.max_registers,
                "registers": True,
            }
        ]
    )
    (registers,) = (int(op.split(".")[1]) for op in ops if op.startswith("registers."))
    (spilled,) = (int(op.split(".")[1]) for op in ops if op.startswith("spills."))
    assert spilled == 0, (registers, spilled)
    fit = 65536 // (-(-registers // 8) * 8 * 32 * launch.warps)  # programs per SM
    light = block + tail <= rms_mod.BWD_LIGHT_ELEMS * 32 * launch.warps
    if light and launch.warps <= rms_mod.BWD_LIGHT_MAX_WARPS:
        assert fit >= launch.per_sm, (registers, fit, launch)
    else:
        assert registers > 64, registers
        assert fit * launch.warps >= rms_mod.BWD_HEAVY_WARPS_PER_SM, (registers, fit)


# Width 1, widths just past a power of two, empty rows / width / batch,
# leading batch dims and a 1-D input.
AWKWARD_SHAPES = [(5, 1), (1, 1), (3, 65), (4, 257), (0, 8), (4, 0), (2, 0, 5), (2, 3, 17), (33,)]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("shape", AWKWARD_SHAPES, ids=str)
def test_awkward_shapes(shape, op, device):
    # At width 1, dx = rstd * g * eps / (h^2 + eps): with eps = 1e-6 that is a
    # cancellation float32 cannot resolve (in torch too), so use a large eps.
    eps = 0.5 if shape[-1] == 1 else 1e-6
    check_op(op, *make_inputs(op, shape, torch.float32, device), eps=eps)


@pytest.mark.parametrize("eps", [1e-12, 0.5])
def test_eps_is_used(eps, device):
    check_op("residual", *make_inputs("residual", (4, 33), torch.float32, device), eps=eps)


# One float32 row in 65536-column chunks: the interpreter pays per chunk and
# per bfloat16 conversion, and the chunk width only changes a constexpr (the
# GPU file runs these widths in every dtype with plan="auto").
@pytest.mark.parametrize(
    "plan", [RowPlan("split", 1 << 16, 4, 8), RowPlan("looped", 1 << 16, 4)], ids=_case_id
)
def test_rows_wider_than_2_20(plan, device):
    check_op("residual", *make_inputs("residual", (1, 2**20 + 1), torch.float32, device), plan=plan)


# Layouts the operator must read in place (or, for "batch_transposed", copy
# once): each maps the leaf to the view the operator sees. "expanded_cols"
# makes every row constant, where dx is as ill-conditioned as at width 1
# (see test_awkward_shapes), so it runs with a large eps. Rows of 65 are not
# 16-byte aligned: "peeled_row_gaps" (row stride 81, 65 + 16) and
# "peeled_offset_start" (one element into the allocation, so no 16-byte base)
# still peel them, and so does "batch_transposed" (rows copied contiguous);
# the other layouts cannot (ops.peel.row_vec).
PEELED_LAYOUTS = {"peeled_row_gaps", "peeled_offset_start", "batch_transposed"}
LAYOUTS = {
    "transposed": ((65, 9), lambda t: t.t()),
    "row_gaps": ((9, 80), lambda t: t[:, :65]),
    "peeled_row_gaps": ((9, 81), lambda t: t[:, :65]),
    "peeled_offset_start": ((9 * 65 + 1,), lambda t: t[1:].view(9, 65)),
    "every_other_row": ((18, 65), lambda t: t[::2]),
    "expanded_rows": ((1, 65), lambda t: t.expand(9, 65)),
    "expanded_cols": ((9, 1), lambda t: t.expand(9, 65)),
    "batch_transposed": ((3, 3, 65), lambda t: t.transpose(0, 1)),
}


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_strided_inputs(layout, op, device, monkeypatch):
    leaf_shape, view = LAYOUTS[layout]
    x, residual, _ = make_inputs(op, leaf_shape, torch.float16, device)
    n_cols = view(x).shape[-1]
    weight = torch.randn(2 * n_cols, dtype=torch.float16, device=device)  # strided 1-D weight
    views = {"x": view, "residual": view, "weight": lambda t: t[::2]}
    eps = 0.5 if layout == "expanded_cols" else 1e-6
    launches = record_launches(monkeypatch, rms_mod)
    check_op(op, x, residual, weight, views=views, eps=eps)
    peeled = {kw["PEEL"] for name, _, kw in launches if name.startswith("_fwd")}
    assert peeled == {layout in PEELED_LAYOUTS}


def test_mixed_layouts(device):
    # x transposed, residual with row gaps: each input keeps its own strides.
    x = torch.randn(65, 9, device=device, dtype=torch.bfloat16)
    residual = torch.randn(9, 80, device=device, dtype=torch.bfloat16)
    weight = torch.randn(65, device=device, dtype=torch.bfloat16)
    views = {"x": lambda t: t.t(), "residual": lambda t: t[:, :65]}
    check_op("residual", x, residual, weight, views=views)


def test_offsets_past_2_31_are_int64(device):
    # The views live in an 8 GiB allocation whose untouched pages stay
    # unbacked, so it is made without the NaN fill; outputs are still poisoned.
    torch.utils.deterministic.fill_uninitialized_memory = False
    try:
        rows, cols = views_past_2_31(device)
    finally:
        torch.utils.deterministic.fill_uninitialized_memory = True
    check_op("rms_norm", rows, None, torch.randn(64, device=device, dtype=rows.dtype))
    check_op("residual", rows, torch.randn_like(rows), None, plan=RowPlan("looped", 16, 4))
    check_op("rms_norm", cols, None, None, plan=RowPlan("split", 1, 1, 3))


def test_residual_may_alias_x(device):
    # x + x: both arguments receive the gradient, so x's is twice one of them.
    x = torch.randn(6, 33, device=device, requires_grad=True)
    weight = torch.randn(33, device=device)
    y, h = kp.residual_rms_norm(x, x, weight)
    dy = torch.randn_like(y)
    y.backward(dy)
    x64 = x.detach().cpu().double().requires_grad_()
    F.rms_norm(x64 + x64, (33,), weight.cpu().double(), 1e-6).backward(dy.cpu().double())
    assert_matches(x.grad, x64.grad, torch.float32, "grad x")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_equals_torch_rms_norm(dtype, device):
    x = torch.randn(19, 300, dtype=dtype, device=device)
    weight = torch.randn(300, dtype=dtype, device=device)
    expected = F.rms_norm(x, (300,), weight, 1e-6)
    assert_matches(kp.rms_norm(x, weight), expected, dtype)


@pytest.mark.parametrize(("plan", "shape"), PLAN_CASES, ids=_case_id)
def test_rstd_saved_for_backward(plan, shape, device):
    x = torch.randn(shape, device=device)
    residual = torch.randn(shape, device=device)
    _, h, rstd = torch.ops.kp.residual_rms_norm(x, residual, None, 1e-6, *plans.to_op_args(plan))
    h64 = h.cpu().double()
    expected = torch.rsqrt(h64.pow(2).mean(-1) + 1e-6)
    assert rstd.dtype == torch.float32
    assert_matches(rstd, expected, torch.float32, "rstd")


# The no-grad forward (contracts.direct_route) has no backward to feed, so it
# neither allocates nor writes rstd; a forward that autograd records (the
# eager Function) and the custom ops do. Each kernel path, each op, with and
# without a weight.
def _forward_outputs(op, x, residual, weight, plan):
    """``(y,)`` or ``(y, h)`` of the public function."""
    if op == "rms_norm":
        return (kp.rms_norm(x, weight, plan=plan),)
    return kp.residual_rms_norm(x, residual, weight, plan=plan)


@pytest.mark.parametrize("with_weight", [True, False], ids=["weight", "no_weight"])
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize(("plan", "shape"), MATRIX_PLANS, ids=_case_id)
def test_no_grad_forward_gives_the_same_bits(plan, shape, op, with_weight, device):
    inputs = make_inputs(op, shape, torch.float16, device, with_weight)
    leaves = [t.detach().requires_grad_() if t is not None else None for t in inputs]
    no_grad = _forward_outputs(op, *inputs, plan)
    recorded = _forward_outputs(op, *leaves, plan)
    with _PassThrough():  # the custom op, which keeps rstd as the forward always did
        op_route = _forward_outputs(op, *inputs, plan)
    assert no_grad[0].grad_fn is None and recorded[0].grad_fn is not None
    names = ("y", "h")[: len(no_grad)]
    for name, got, rec, via_op in zip(names, no_grad, recorded, op_route, strict=True):
        assert torch.equal(got, rec.detach()), f"{name}: no-grad bits differ from recorded"
        assert torch.equal(got, via_op), f"{name}: no-grad bits differ from the custom op's"


@pytest.mark.parametrize("with_weight", [True, False], ids=["weight", "no_weight"])
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize(("plan", "shape"), MATRIX_PLANS, ids=_case_id)
def test_forward_without_rstd_writes_every_output(plan, shape, op, with_weight, device):
    # The outputs _rms_norm allocates are NaN-poisoned (poisoned_allocations).
    x, residual, weight = make_inputs(op, shape, torch.float16, device, with_weight)
    chosen = plans.choose_for(x, plan)
    y, h, rstd = rms_mod._rms_norm(x, residual, weight, 1e-6, chosen, x, keep_rstd=False)
    assert rstd is None
    if residual is None:
        assert h is None
        assert_matches(y, reference.rms_norm(x, weight), torch.float16, "y")
    else:
        y_ref, h_ref = reference.residual_rms_norm(x, residual, weight)
        assert_matches(y, y_ref, torch.float16, "y")
        assert_h_exact(h, h_ref, torch.float16)
    kept = rms_mod._rms_norm(x, residual, weight, 1e-6, chosen, x, keep_rstd=True)
    assert kept[2].shape == (shape[0],) and not kept[2].isnan().any()
    assert torch.equal(y, kept[0])
    assert h is None or torch.equal(h, kept[1])


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize(("plan", "shape"), MATRIX_PLANS, ids=_case_id)
def test_no_grad_forward_neither_allocates_nor_stores_rstd(plan, shape, op, device, monkeypatch):
    # Records, per forward, the float32 (n_rows,) allocations (rstd's shape)
    # and the STORE_RSTD of each launch of a kernel that takes rstd_ptr.
    allocations, empty = [], torch.empty

    def recording_empty(*size, **kwargs):
        out = empty(*size, **kwargs)
        if out.dtype == torch.float32 and out.shape == (shape[0],):
            allocations.append(out.shape)
        return out

    def record(inputs, mode=None):
        allocations.clear()
        launches.clear()
        with mode or contextlib.nullcontext():
            _forward_outputs(op, *inputs, plan)
        takes_rstd = ("_fwd_block_kernel", "_fwd_looped_kernel", "_fwd_split_kernel")
        stores = [kw.get("STORE_RSTD") for name, _, kw in launches if name in takes_rstd]
        return len(allocations), stores

    monkeypatch.setattr(torch, "empty", recording_empty)
    launches = record_launches(monkeypatch, rms_mod)
    inputs = make_inputs(op, shape, torch.float32, device)
    leaves = [t.detach().requires_grad_() if t is not None else None for t in inputs]
    assert record(inputs) == (0, [False]), "the no-grad forward allocated or stored rstd"
    assert record(leaves) == (1, [True]), "the recording forward must keep rstd"
    assert record(inputs, _PassThrough()) == (1, [True]), "the custom op must keep rstd"


@pytest.mark.parametrize(
    "plan", ["block", RowPlan("looped", 64, 4), RowPlan("split", 64, 4, 2)], ids=_case_id
)
def test_weight_grad_is_deterministic(plan, device, monkeypatch):
    # One SM: at most two backward programs, so each sums many rows into its
    # partial weight gradient (40 rows of 100 columns: two 64-column chunks).
    monkeypatch.setattr(plans, "sm_count", lambda device: 1)
    x = torch.randn(40, 100, device=device, dtype=torch.bfloat16, requires_grad=True)
    weight = torch.randn(100, device=device, dtype=torch.bfloat16, requires_grad=True)
    y = kp.rms_norm(x, weight, plan=plan)
    dy = torch.randn_like(y)
    grads = [torch.autograd.grad(y, (x, weight), dy, retain_graph=True) for _ in range(2)]
    assert torch.equal(grads[0][0], grads[1][0])
    assert torch.equal(grads[0][1], grads[1][1])
    ref = reference_grads({"x": x, "weight": weight}, {}, 1e-6, dy, None)
    assert_grads({"x": grads[0][0], "weight": grads[0][1]}, ref, torch.bfloat16)


def test_no_weight_grad_without_weight(device):
    x = torch.randn(4, 16, device=device, requires_grad=True)
    dx, dx2, dw = torch.ops.kp.rms_norm_backward(
        torch.randn_like(x), x.detach(), None, torch.ones(4, device=device), None, False, "auto", 0,
        0, 0,
    )  # fmt: skip
    assert dw.shape == (0,) and dx2.shape == (0,) and dx.shape == x.shape


@pytest.mark.parametrize("op_route", [False, True], ids=["eager", "op"])
@pytest.mark.parametrize("wants", [(True, True), (True, False), (False, True)], ids=str)
def test_residual_grads_are_two_tensors_from_one_pass(op_route, wants, device, monkeypatch):
    # x.grad and residual.grad hold the same values but must be two tensors (an
    # optimizer updates each in place), and autograd must not copy to get
    # them: each is a tensor the backward wrote.
    x, residual = (torch.randn(6, 40, device=device) for _ in range(2))
    x.requires_grad_(wants[0])
    residual.requires_grad_(wants[1])
    weight = torch.randn(40, device=device)
    written, original = [], rms_mod._rms_norm_grad

    def recording_grad(*args):
        out = original(*args)
        written.extend(t.data_ptr() for t in out[:2] if t.numel())
        return out

    monkeypatch.setattr(rms_mod, "_rms_norm_grad", recording_grad)
    with _PassThrough() if op_route else contextlib.nullcontext():
        y, h = kp.residual_rms_norm(x, residual, weight)
    dy, dh = torch.randn_like(y), torch.randn_like(h)
    torch.autograd.backward((y, h), (dy, dh))
    grads = [t.grad for t in (x, residual) if t.requires_grad]
    assert all(g.data_ptr() in written for g in grads), "autograd copied a gradient"
    if len(grads) == 2:
        assert grads[0].data_ptr() != grads[1].data_ptr(), "x.grad and residual.grad alias"
        assert torch.equal(grads[0], grads[1])
    refs = {"x": x, "residual": residual, "weight": weight}
    ref = reference_grads(refs, {}, 1e-6, dy, dh)
    for name, t in (("x", x), ("residual", residual)):
        if t.requires_grad:
            assert_grads({name: t.grad}, {name: ref[name]}, torch.float32)


def test_custom_op_schema_and_autograd_registration(device):
    # The fake-tensor and compile checks need a GPU (test_gpu_rms_norm.py).
    x = torch.randn(5, 33, device=device, requires_grad=True)
    residual = torch.randn(5, 33, device=device, requires_grad=True)
    weight = torch.randn(33, device=device, requires_grad=True)
    checks = ("test_schema", "test_autograd_registration")
    for plan in ("block", "looped", "split"):
        args = (1e-6, *plans.to_op_args(plan))
        opcheck(torch.ops.kp.rms_norm.default, (x, weight, *args), test_utils=checks)
        opcheck(torch.ops.kp.rms_norm.default, (x, None, *args), test_utils=checks)
        opcheck(
            torch.ops.kp.residual_rms_norm.default, (x, residual, weight, *args), test_utils=checks
        )


@pytest.mark.parametrize("has_residual", [False, True])
def test_early_weight_loads_before_the_reduction(has_residual):
    """The block forward on sm_90 (bfloat16, 16384 columns, 16 warps): with
    ``EARLY_W`` the weight's loads come before the reduction's first barrier,
    beside the row's (as many as ``x``'s), without it after."""
    runtime = {"first_row": "i32", "n_cols": "i32", "stride_xm": "i32", "stride_rm": "i32"}
    runtime |= {"eps": "fp32", "rstd_ptr": "*fp32", "ws_stride": "i32"}
    runtime |= {name: "*bf16" for name in ("x_ptr", "r_ptr", "w_ptr", "ws_ptr", "y_ptr", "h_ptr")}
    consts = {"stride_xn": 1, "stride_rn": 1, "HAS_RESIDUAL": has_residual, "HAS_WEIGHT": True}
    consts |= {"STORE_RSTD": False, "BLOCK": 16384, "TAIL": 0, "VEC": 8, "PEEL": False}
    consts |= {"SHIFT_W": False}
    specs = [
        {
            "module": "kernel_portfolio.ops.rms_norm",
            "kernel": "_fwd_block_kernel",
            "signature": runtime,
            "constexprs": consts | {"EARLY_W": early},
            "aligned": ["x_ptr", "r_ptr", "w_ptr", "y_ptr", "h_ptr"],
            "num_warps": 16,
            "order": True,
        }
        for early in (False, True)
    ]
    before = []
    for ops in global_memory_ops(specs):
        (order,) = (op.removeprefix("order.").split(",") for op in ops if op.startswith("order."))
        before.append(order[: order.index("bar")].count("ld"))
    late, early = before
    row_loads = late // (2 if has_residual else 1)  # x (and the residual) before it, late
    assert row_loads > 0 and early == late + row_loads, before


@pytest.mark.parametrize("has_residual", [False, True])
def test_block_plan_rows_load_16_bytes_in_40_registers(has_residual):
    """The block-plan forward on sm_90 (float16, 8192 columns, 16 warps).

    Rows and outputs move in 16-byte ``ld.global.v4`` / ``st.global.v4``
    accesses, with no ``cp.async`` (a program has one row), and a
    thread takes at most 40 registers: three 16-warp programs per SM (65536
    registers, allocated per warp in eights).
    """
    runtime = {"first_row": "i32", "n_cols": "i32", "stride_xm": "i32", "stride_rm": "i32"}
    runtime |= {"eps": "fp32", "rstd_ptr": "*fp32", "ws_stride": "i32"}
    runtime |= {name: "*fp16" for name in ("x_ptr", "r_ptr", "w_ptr", "ws_ptr", "y_ptr", "h_ptr")}
    consts = {"stride_xn": 1, "stride_rn": 1, "HAS_RESIDUAL": has_residual, "HAS_WEIGHT": True}
    consts |= {"STORE_RSTD": False, "BLOCK": 8192, "TAIL": 0, "VEC": 8, "PEEL": False}
    consts |= {"SHIFT_W": False, "EARLY_W": False}  # many rows: the weight read late
    (ops,) = global_memory_ops(
        [
            {
                "module": "kernel_portfolio.ops.rms_norm",
                "kernel": "_fwd_block_kernel",
                "signature": runtime,
                "constexprs": consts,
                "aligned": ["x_ptr", "r_ptr", "w_ptr", "y_ptr", "h_ptr"],
                "num_warps": 16,
                "registers": True,
            }
        ]
    )
    assert "ld.global.v4.b32" in ops and "st.global.v4.b32" in ops, ops
    assert not any(op.endswith(".b16") or op.startswith("cp.async") for op in ops), ops
    (registers,) = (int(op.split(".")[1]) for op in ops if op.startswith("registers."))
    assert registers <= 40, registers


# ---------------------------------------------------------------------------
# The checkers reject broken variants
# ---------------------------------------------------------------------------


def test_allocations_are_poisoned():
    assert torch.empty(8).isnan().all()
    assert torch.empty(8, dtype=torch.bfloat16).isnan().all()


def test_poison_reveals_an_unwritten_row(device):
    # A launch that misses the last row leaves it NaN, and the checker says so.
    x = torch.randn(5, 40, device=device)
    y = torch.empty_like(x)
    rstd = torch.empty(5, device=device)
    plan = plans.choose_for(x)
    rms_mod._forward(x[:-1], None, None, 1e-6, plan, y[:-1], None, rstd[:-1])
    assert_matches(y[:-1], reference.rms_norm(x[:-1]), torch.float32)
    with pytest.raises(AssertionError, match="relative error"):
        assert_matches(y, reference.rms_norm(x), torch.float32)


def test_grad_check_rejects_backward_without_mean_term(device):
    # dx = rstd * w * dy drops the term -h * rstd^3 * mean(w * dy * h).
    x = torch.randn(9, 64, device=device)
    weight = torch.randn(64, device=device)
    dy = torch.randn(9, 64, device=device)
    rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    broken = {"x": rstd * weight * dy, "weight": (dy * x * rstd).sum(0)}
    ref = reference_grads({"x": x, "weight": weight}, {}, 1e-6, dy, None)
    assert_grads({"weight": broken["weight"]}, {"weight": ref["weight"]}, torch.float32)
    with pytest.raises(AssertionError, match="grad x"):
        assert_grads(broken, ref, torch.float32)


def test_grad_check_rejects_residual_grad_without_dh(device):
    # Forgetting the upstream gradient of h: the grads of y alone.
    x, residual, weight = make_inputs("residual", (7, 48), torch.float32, device)
    leaves = {"x": x.requires_grad_(), "residual": residual.requires_grad_(), "weight": weight}
    y, h = kp.residual_rms_norm(x, residual, weight)
    dy, dh = torch.randn_like(y), torch.randn_like(h)
    y.backward(dy)
    ref = reference_grads(leaves, {}, 1e-6, dy, dh)
    with pytest.raises(AssertionError, match="grad x"):
        assert_grads({"x": x.grad, "residual": residual.grad}, ref, torch.float32)


def test_h_check_rejects_one_unit_off(device):
    x = torch.randn(4, 32, dtype=torch.float16, device=device)
    residual = torch.randn(4, 32, dtype=torch.float16, device=device)
    _, h_ref = reference.residual_rms_norm(x, residual, None)
    h = (x + residual).clone()
    assert_h_exact(h, h_ref, torch.float16)
    h[2, 5] = torch.nextafter(h[2, 5], torch.tensor(float("inf"), dtype=h.dtype, device=device))
    with pytest.raises(AssertionError, match="1 of 128"):
        assert_h_exact(h, h_ref, torch.float16)


# ---------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------


def _call(op, x, weight, **kwargs):
    if op == "rms_norm":
        return kp.rms_norm(x, weight, **kwargs)
    return kp.residual_rms_norm(x, x, weight, **kwargs)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize(
    ("eps", "error"),
    [(0.0, ValueError), (-1e-6, ValueError), (float("nan"), ValueError)]
    + [(float("inf"), ValueError), ("1e-6", TypeError), (True, TypeError), (None, TypeError)],
    ids=str,
)
def test_eps_is_validated(op, eps, error, device):
    x = torch.randn(3, 8, device=device)
    with pytest.raises(error, match="eps"):
        _call(op, x, None, eps=eps)


@pytest.mark.parametrize("op", OPS)
def test_bad_weight(op, device):
    x = torch.randn(3, 8, device=device)
    with pytest.raises(TypeError, match="weight"):
        _call(op, x, torch.randn(8, device=device, dtype=torch.float16))
    with pytest.raises(ValueError, match="weight must be 1-D of length"):
        _call(op, x, torch.randn(1, 8, device=device))
    with pytest.raises(ValueError, match="weight must be 1-D of length"):
        _call(op, x, torch.randn(9, device=device))
    with pytest.raises(ValueError, match="weight"):
        _call(op, x, torch.randn(8, device="meta"))
    with pytest.raises(TypeError, match="weight"):
        _call(op, x, [1.0] * 8)


@pytest.mark.parametrize("op", OPS)
def test_bad_x(op, device):
    with pytest.raises(TypeError, match="x has dtype"):
        _call(op, torch.randn(3, 8, device=device, dtype=torch.float64), None)
    with pytest.raises(TypeError, match="x has dtype"):
        _call(op, torch.ones(3, 8, device=device, dtype=torch.int32), None)
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        _call(op, [[1.0, 2.0]], None)
    with pytest.raises(ValueError, match="x must have at least one dimension"):
        _call(op, torch.tensor(2.0, device=device), None)


def test_bad_residual(device):
    x = torch.randn(3, 8, device=device)
    with pytest.raises(ValueError, match="residual has shape"):
        kp.residual_rms_norm(x, torch.randn(3, 9, device=device), None)
    with pytest.raises(ValueError, match="residual has shape"):
        kp.residual_rms_norm(x, torch.randn(8, device=device), None)  # no broadcasting
    with pytest.raises(TypeError, match="residual"):
        kp.residual_rms_norm(x, torch.randn(3, 8, device=device, dtype=torch.bfloat16), None)
    with pytest.raises(ValueError, match="residual"):
        kp.residual_rms_norm(x, torch.randn(3, 8, device="meta"), None)
    with pytest.raises(TypeError, match="residual"):
        kp.residual_rms_norm(x, 1.0, None)


@pytest.mark.parametrize("op", OPS)
def test_bad_plan(op, device):
    x = torch.randn(3, 781, device=device)
    with pytest.raises(ValueError, match="plan"):
        _call(op, x, None, plan="fast")
    with pytest.raises(ValueError, match="plan"):
        _call(op, x, None, plan=4)
    with pytest.raises(ValueError, match="whole row"):
        _call(op, x, None, plan=RowPlan("block", 512, 4))


def test_the_forward_of_unaligned_rows_takes_fewer_warps(monkeypatch):
    """``auto``'s looped plan of rows not 16 bytes apart, with a weight: the
    forward in at most ``UNALIGNED_FWD_WARPS`` on the direct and autograd
    routes, the backward in the plan's warps; aligned rows, no weight, plans of
    fewer warps and forced plans launch as chosen."""
    monkeypatch.setattr(plans, "sm_count", lambda _device: 132)
    x = torch.empty(4096, 50257, dtype=torch.bfloat16)  # GPT-2's vocabulary
    w = torch.empty(50257, dtype=torch.bfloat16)
    chosen = plans.choose_for(x)
    assert chosen.kind == "looped" and chosen.num_warps > rms_mod.UNALIGNED_FWD_WARPS
    want = RowPlan("looped", chosen.block, rms_mod.UNALIGNED_FWD_WARPS)
    assert rms_mod._forward_plan(x, w, "auto", False) == want
    assert rms_mod._forward_plan(x, w, "auto", True) == chosen  # with a residual
    assert rms_mod._forward_plan(x, None, "auto", False) == chosen
    assert rms_mod._forward_plan(x, w, "looped", False) == chosen
    assert rms_mod._forward_plan(x, w, chosen, False) == chosen
    aligned = torch.empty(4096, 50256, dtype=torch.bfloat16)
    assert rms_mod._forward_plan(aligned, w[:-1], "auto", False) == plans.choose_for(aligned)
    narrow = torch.empty(4096, 20001, dtype=torch.bfloat16)  # 8 warps already
    assert rms_mod._forward_plan(narrow, w[:20001], "auto", False) == plans.choose_for(narrow)

    def warps(call) -> list[tuple[str, int]]:
        return [
            (s["kernel"], s["num_warps"]) for s in captured_launches(monkeypatch, [rms_mod], call)
        ]

    fwd = ("_fwd_looped_kernel", rms_mod.UNALIGNED_FWD_WARPS)
    assert fwd in warps(lambda: kp.rms_norm(x, w))
    backward_plans = []
    backward = rms_mod._backward
    monkeypatch.setattr(
        rms_mod, "_backward", lambda *a: backward_plans.append(a[5]) or backward(*a)
    )
    xg = x.clone().requires_grad_()
    assert fwd in warps(lambda: kp.rms_norm(xg, w).sum().backward())
    assert backward_plans == [chosen]
