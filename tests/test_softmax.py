"""Softmax: every plan, dtype and awkward layout against the float64 reference.

Runs the kernels on whichever device the session has (the interpreter on a
CPU, see conftest.py), where every program runs one after another in Python,
so shapes are kept small: 7 x 781 (a width just past a power of two) stands in
for the usual 1823 x 781, which would take minutes under the interpreter and
adds no code path; 37 x 781 runs once per plan. Besides the named plans, two
forced plans with 64-wide chunks make the looped and split kernels walk a
781-wide row in 13 chunks (split: 4 programs of 4, 4, 4 and 1 chunks), so
chunk boundaries and partial last chunks are exercised at small sizes. The GPU
file (test_gpu_rows.py) repeats the matrix at real sizes. Every kernel writes
into an output poisoned with NaN.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from kp_testing import (
    REL_TOL,
    assert_matches,
    global_memory_ops,
    poison,
    record_launches,
    views_past_2_31,
)
from torch.library import opcheck

import kernel_portfolio as kp
from kernel_portfolio import plans, reference
from kernel_portfolio.ops import softmax as softmax_mod
from kernel_portfolio.ops.softmax import _launch_backward, _launch_forward

pytestmark = pytest.mark.interpreter

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
PLANS = [
    "block",
    "looped",
    "split",
    plans.RowPlan("looped", 64, 4),
    plans.RowPlan("split", 64, 4, 4),
]
PLAN_IDS = ["block", "looped", "split", "looped64", "split64x4"]
# (shape, why): widths 1 and 2^k + 1, batch dimensions, and empty tensors.
SHAPES = [
    ((7, 781), "width past a power of two"),
    ((3, 1), "width 1"),
    ((5, 129), "2^7 + 1: a partial last chunk of one column"),
    ((9, 100), "4 but not 8 columns a 16-byte vector: every other row starts aligned"),
    ((2, 3, 65), "leading batch dims"),
    ((0, 7), "no rows"),
    ((4, 0), "zero-width rows"),
]
# -inf is not finite; numpy warns while computing the NaN of an all -inf row.
ignore_nan_warnings = pytest.mark.filterwarnings("ignore:invalid value encountered")


def _plan(plan, x):
    return plans.choose_for(x, plan)


def _forward(x, plan):
    """The forward kernels of ``plan`` into a NaN-poisoned output."""
    y = poison(torch.empty(x.shape, dtype=x.dtype, device=x.device))
    _launch_forward(x, y, _plan(plan, x))
    return y


def _upstream(shape, dtype, device):
    """An upstream gradient with a large mean: a lost ``sum(dy * y)`` term shows."""
    return (torch.randn(shape, device=device) + 3.0).to(dtype)


def _masked(shape, dtype, device):
    """Logits with -inf entries: scattered, a masked first 100 columns, one lone
    finite entry, and a fully masked row (NaN in PyTorch)."""
    x = torch.randn(shape, device=device).to(dtype)
    x[torch.rand(shape, device=device) < 0.3] = float("-inf")
    x[1, :100] = float("-inf")  # the online max stays -inf over whole chunks
    x[2, :] = float("-inf")
    x[2, -1] = 1.5
    x[3, :] = float("-inf")
    return x


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("plan", PLANS, ids=PLAN_IDS)
@pytest.mark.parametrize("shape", [s for s, _ in SHAPES], ids=[w for _, w in SHAPES])
def test_forward_matches_reference(shape, plan, dtype, device):
    x = torch.randn(shape, device=device).to(dtype)
    assert_matches(_forward(x, plan), reference.softmax(x), dtype)


@pytest.mark.parametrize("plan", PLANS, ids=PLAN_IDS)
def test_odd_row_count(plan, device):
    x = torch.randn(37, 781, device=device)
    assert_matches(_forward(x, plan), reference.softmax(x), torch.float32)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("plan", PLANS, ids=PLAN_IDS)
@pytest.mark.parametrize("shape", [s for s, _ in SHAPES], ids=[w for _, w in SHAPES])
def test_backward_matches_reference(shape, plan, dtype, device):
    x = torch.randn(shape, device=device).to(dtype)
    y = _forward(x, plan)
    dy = _upstream(shape, dtype, device)
    dx = poison(torch.empty_like(y))
    _launch_backward(y, dy, dx, _plan(plan, x))
    assert_matches(dx, reference.softmax_backward(y, dy), dtype, "dx")


@ignore_nan_warnings
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("plan", PLANS, ids=PLAN_IDS)
def test_masked_entries_are_zero_and_masked_rows_nan(plan, dtype, device):
    x = _masked((6, 781), dtype, device)
    y = _forward(x, plan)
    assert_matches(y, reference.softmax(x), dtype)
    masked = torch.isinf(x)
    live = ~masked.all(-1)
    assert (y[masked & live[:, None]] == 0).all()
    assert torch.isnan(y[~live]).all()
    assert y[2, -1] == 1
    dy = _upstream(x.shape, dtype, device)
    dx = poison(torch.empty_like(y))
    _launch_backward(y, dy, dx, _plan(plan, x))
    assert_matches(dx, reference.softmax_backward(y, dy), dtype, "dx")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("plan", PLANS, ids=PLAN_IDS)
def test_rows_sum_to_one(plan, dtype, device):
    x = (torch.randn(5, 781, device=device) * 4).to(dtype)
    sums = _forward(x, plan).double().sum(-1)
    assert torch.allclose(sums, torch.ones_like(sums), rtol=0, atol=REL_TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("plan", PLANS, ids=PLAN_IDS)
def test_shift_invariance_is_exact(plan, dtype, device):
    # Quarters in [-8, 8] plus 16 are exact in every dtype, so x - max(x) is
    # the same float32 number with or without the shift: equal bit for bit.
    x = (torch.randint(-32, 33, (5, 781), device=device) / 4).to(dtype)
    assert torch.equal(_forward(x + 16, plan), _forward(x, plan))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_extreme_logits_do_not_overflow(dtype, device):
    x = torch.tensor([[-1e4, -1e4 + 1, -2e4], [1e4, 1e4, -1e4]], device=device).to(dtype)
    for plan in PLANS:
        assert_matches(_forward(x, plan), reference.softmax(x), dtype)


@pytest.mark.parametrize("max_grid", [plans.MAX_GRID, 5])
def test_programs_cover_every_row(max_grid, device, monkeypatch):
    """Block programs take a row each; looped ones on a persistent grid walk several.

    A block forward launches at most ``plans.MAX_GRID`` programs at a time:
    with the limit set to 5, 37 rows take eight launches, each program
    adding its launch's first row. Looped programs on one SM's worth of a
    persistent grid each walk several rows.
    """
    monkeypatch.setattr(plans, "sm_count", lambda _device: 1)
    monkeypatch.setattr(plans, "MAX_GRID", max_grid)
    launches = record_launches(monkeypatch, softmax_mod)
    x = torch.randn(37, 100, device=device)
    for plan in ("block", "looped"):
        launches.clear()
        y = _forward(x, plan)
        grids = [grid for _, grid, _ in launches]
        if plan == "block":
            assert grids == ([(5,)] * 7 + [(2,)] if max_grid == 5 else [(37,)]), grids
        else:
            warps = _plan(plan, x).num_warps
            assert grids == [(plans.WARPS_PER_SM // warps,)] and grids[0][0] < 37, grids
        assert_matches(y, reference.softmax(x), torch.float32, plan)


def _layouts(device):
    """(name, x) pairs with shape (5, 65) read through unusual strides."""
    base = torch.randn(5, 80, device=device)
    return [
        ("row gaps", base[:, :65]),
        ("unaligned start", base[:, 3:68]),
        ("transposed", torch.randn(65, 5, device=device).t()),
        ("expanded", torch.randn(1, 65, device=device).expand(5, 65)),
        ("every other column", torch.randn(5, 130, device=device)[:, ::2]),
    ]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("plan", PLANS, ids=PLAN_IDS)
def test_strided_inputs(plan, dtype, device):
    for name, x in _layouts(device):
        x = x.to(dtype)
        y = _forward(x, plan)
        assert_matches(y, reference.softmax(x), dtype, name)
        for dy_name, dy in [
            ("contiguous dy", _upstream(x.shape, dtype, device)),
            ("transposed dy", _upstream(x.shape[::-1], dtype, device).t()),
            ("expanded dy", _upstream((1, x.shape[1]), dtype, device).expand(x.shape)),
        ]:
            dx = poison(torch.empty_like(y))
            _launch_backward(y, dy, dx, _plan(plan, x))
            assert_matches(dx, reference.softmax_backward(y, dy), dtype, f"dx, {name}, {dy_name}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("plan", PLANS, ids=PLAN_IDS)
def test_public_function_with_autograd(plan, dtype, device):
    x = torch.randn(2, 3, 5, device=device).to(dtype).requires_grad_(True)
    dy = _upstream(x.shape, dtype, device)
    for dim in (-1, 0, 1):
        y = kp.softmax(x, dim=dim, plan=plan)
        assert_matches(y, reference.softmax(x, dim), dtype, f"y, dim={dim}")
        (dx,) = torch.autograd.grad(y, x, dy)
        expected = reference.softmax_backward(y, dy, dim)
        assert_matches(dx, expected, dtype, f"dx, dim={dim}")
        if dtype == torch.float32:  # the whole chain, against float64 autograd from x
            x64 = x.detach().to("cpu", torch.float64).requires_grad_(True)
            torch.softmax(x64, dim).backward(dy.to("cpu", torch.float64))
            assert_matches(dx, x64.grad, dtype, f"dx from x, dim={dim}")


def test_leading_dims_that_do_not_collapse_are_copied_once(device):
    x = torch.randn(4, 6, 50, device=device).transpose(0, 1)  # strides (50, 300, 1)
    assert_matches(kp.softmax(x), reference.softmax(x), torch.float32)


def test_zero_dim_and_empty(device):
    assert kp.softmax(torch.tensor(2.5, device=device)).item() == 1.0
    assert kp.softmax(torch.empty(0, 3, device=device), dim=0).shape == (0, 3)
    assert kp.softmax(torch.empty(3, 0, device=device)).shape == (3, 0)


def test_offsets_past_2_31_are_int64(device):
    rows, cols = views_past_2_31(device)
    assert_matches(
        _forward(rows, "block"), reference.softmax(rows), torch.float16, "rows 2^30 apart"
    )
    assert_matches(
        _forward(cols, "looped"), reference.softmax(cols), torch.float16, "cols 2^30 apart"
    )


@pytest.mark.usefixtures("small_pieces")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("n_cols", "pieces"), [(1100, (1024, 128)), (129, (128, 1))])
def test_block_pieces_match_reference(n_cols, pieces, dtype, device, monkeypatch):
    """Rows held as a main block and a tail (the masked tail too), forward and backward."""
    launches = record_launches(monkeypatch, softmax_mod)
    x = _masked((5, n_cols), dtype, device)
    y = _forward(x, "block")
    assert_matches(y, reference.softmax(x), dtype)
    dy = _upstream(x.shape, dtype, device)
    dx = poison(torch.empty_like(y))
    _launch_backward(y, dy, dx, _plan("block", x))
    assert_matches(dx, reference.softmax_backward(y, dy), dtype, "dx")
    launched = [(name, (kw["BLOCK"], kw["TAIL"])) for name, _, kw in launches]
    assert launched == [("_fwd_block_kernel", pieces), ("_bwd_block_kernel", pieces)]


def test_block_pieces_take_fewer_registers_than_one_block():
    """The premise of ``plans.block_pieces`` on sm_90: 4104 float16 columns at 8 warps
    take under 70% of the registers as 4096 + 8 that they take in one 8192 block, with
    the main block's accesses still 16 bytes wide."""
    rows = {
        "first_row": "i32",
        "n_rows": "i32",
        "n_cols": "i32",
        "x_ptr": "*fp16",
        "y_ptr": "*fp16",
    }
    rows |= {"dy_ptr": "*fp16", "dx_ptr": "*fp16"}
    fwd = {**rows, "stride_xm": "i32", "stride_ym": "i32"}
    bwd = {**rows, "stride_ym": "i32", "stride_dym": "i32", "stride_dxm": "i32"}
    unit = {"stride_xn": 1, "stride_yn": 1, "stride_dyn": 1, "VEC": 8, "PEEL": False}
    specs = [
        {
            "module": "kernel_portfolio.ops.softmax",
            "kernel": kernel,
            "signature": signature,
            "constexprs": {**unit, "BLOCK": block, "TAIL": tail},
            "aligned": ["x_ptr", "y_ptr", "dy_ptr", "dx_ptr"],
            "num_warps": 8,
            "registers": True,
        }
        for kernel, signature in (("_fwd_block_kernel", fwd), ("_bwd_block_kernel", bwd))
        for block, tail in ((8192, 0), (4096, 8))
    ]
    compiled = global_memory_ops(specs)
    registers = [
        next(int(op[10:]) for op in ops if op.startswith("registers.")) for ops in compiled
    ]
    assert registers[1] < 0.7 * registers[0] and registers[3] < 0.7 * registers[2], registers
    assert all("ld.global.v4.b32" in ops and "st.global.v4.b32" in ops for ops in compiled)


def test_custom_op_schema_and_autograd_registration(device):
    x = torch.randn(5, 33, device=device, requires_grad=True)
    for plan in ("block", "looped", "split"):
        opcheck(
            torch.ops.kp.softmax.default,
            (x, plan, 0, 0, 0),
            test_utils=("test_schema", "test_autograd_registration"),
        )


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda d: kp.softmax([1.0, 2.0]), TypeError, "x must be a torch.Tensor"),
        (lambda d: kp.softmax(torch.ones(3, dtype=torch.float64, device=d)), TypeError, "x has"),
        (lambda d: kp.softmax(torch.ones(3, dtype=torch.int32, device=d)), TypeError, "x has"),
        (lambda d: kp.softmax(torch.ones(2, 3, device=d), dim=2), ValueError, "dim=2 is out of"),
        (lambda d: kp.softmax(torch.ones(2, 3, device=d), dim=1.0), TypeError, "dim must be an"),
        (lambda d: kp.softmax(torch.ones(2, 3, device=d), plan="fast"), ValueError, "plan must"),
        (
            lambda d: kp.softmax(torch.ones(2, 300, device=d), plan=plans.RowPlan("block", 256, 4)),
            ValueError,
            "plan has block=256",
        ),
    ],
)
def test_bad_input_names_the_argument(call, error, message, device):
    with pytest.raises(error, match=message):
        call(device)


def test_the_forward_of_a_full_block_takes_more_warps(monkeypatch):
    """``auto``'s block plan of a row past ``plan_rule.MAX_BLOCK_BYTES`` (a
    vocabulary of 32000 half-precision columns) runs its forward in
    ``FULL_BLOCK_FWD_WARPS``; narrower blocks and forced plans launch as chosen."""
    monkeypatch.setattr(plans, "sm_count", lambda _device: 132)
    wide = torch.empty(4096, 32000, dtype=torch.float16)
    chosen = plans.choose_for(wide)
    assert (chosen.kind, chosen.block) == ("block", 32768)
    fwd = softmax_mod._forward_plan(wide, "auto")
    assert fwd == plans.RowPlan("block", 32768, softmax_mod.FULL_BLOCK_FWD_WARPS)
    assert fwd.num_warps > chosen.num_warps
    assert softmax_mod._forward_plan(wide, "block") == plans.choose_for(wide, "block")
    assert softmax_mod._forward_plan(wide, chosen) == chosen
    narrow = torch.empty(4096, 16384, dtype=torch.float16)  # MAX_BLOCK_BYTES exactly
    assert softmax_mod._forward_plan(narrow, "auto") == plans.choose_for(narrow)


@pytest.mark.parametrize(
    ("n_cols", "dtype", "one_block"),
    [
        (28992, torch.float16, True),  # 88% of 32768
        (27648, torch.bfloat16, True),  # FULL_BLOCK_MIN_FILL exactly
        (27647, torch.float16, False),
        (26624, torch.float16, False),  # 81%
        (14000, torch.float32, True),  # 85% of 16384 four-byte columns
        (13000, torch.float32, False),
    ],
    ids=str,
)
def test_auto_holds_a_row_filling_most_of_a_full_block_in_one(
    monkeypatch, n_cols, dtype, one_block
):
    """``auto``'s looped plan of a row filling at least ``FULL_BLOCK_MIN_FILL``
    of a full block becomes one block, forward and backward, each in its
    warps; a narrower fill stays looped, few rows still split, and a forced
    plan is launched as given."""
    monkeypatch.setattr(plans, "sm_count", lambda _device: 132)
    x = torch.empty(4096, n_cols, dtype=dtype)
    chosen = plans.choose_for(x)
    assert chosen.kind == "looped"
    block = plans.choose_for(x, "block")
    for plan_of, warps in (
        (softmax_mod._forward_plan, softmax_mod.FULL_BLOCK_FWD_WARPS),
        (softmax_mod._backward_plan, softmax_mod.FULL_BLOCK_BWD_WARPS),
    ):
        want = dataclasses.replace(block, num_warps=warps) if one_block else chosen
        assert plan_of(x, "auto") == want
        assert plan_of(x, "looped") == plans.choose_for(x, "looped")
        few = x[:8]
        assert plans.choose_for(few).kind == "split"
        assert plan_of(few, "auto") == plans.choose_for(few)


def test_the_backward_of_a_full_block_takes_fewer_warps(monkeypatch, device):
    """The backward of ``auto``'s full block runs in ``FULL_BLOCK_BWD_WARPS``, on
    every route that records it (the Function saves the backward's plan);
    narrower blocks and forced plans launch as chosen."""
    monkeypatch.setattr(plans, "sm_count", lambda _device: 132)
    wide = torch.empty(4096, 32000, dtype=torch.float16)
    chosen = plans.choose_for(wide)
    bwd = softmax_mod._backward_plan(wide, "auto")
    assert bwd == plans.RowPlan("block", 32768, softmax_mod.FULL_BLOCK_BWD_WARPS)
    assert bwd.num_warps < chosen.num_warps
    assert softmax_mod._backward_plan(wide, chosen) == chosen
    narrow = torch.empty(4096, 16384, dtype=torch.float16)
    assert softmax_mod._backward_plan(narrow, "auto") == plans.choose_for(narrow)
    launched = []
    monkeypatch.setattr(
        softmax_mod, "_launch_backward", lambda y, dy, dx, plan: launched.append(plan)
    )
    x = torch.randn(80, 32000, dtype=torch.float16, device=device, requires_grad=True)
    kp.softmax(x).backward(torch.ones_like(x))
    assert launched == [softmax_mod._backward_plan(x.detach(), "auto")]
