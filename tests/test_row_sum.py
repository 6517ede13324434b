"""Row sum: every plan, input and output dtype, and awkward layout against float64.

Shapes are small because the interpreter runs every program in Python (see
test_softmax.py for the reasoning; the GPU file repeats the matrix at real
sizes). The forced 64-wide plans walk a 781-wide row in 13 chunks; one row
wider than 2^20 runs on the looped and split plans. Every kernel writes into an
output poisoned with NaN.
"""

from __future__ import annotations

import pytest
import torch
from kp_testing import (
    assert_matches,
    poison,
    record_launches,
    views_past_2_31,
)
from torch.library import opcheck

import kernel_portfolio as kp
from kernel_portfolio import plans, reference
from kernel_portfolio.ops import row_sum as row_sum_mod
from kernel_portfolio.ops.row_sum import _launch_row_sum

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
    ((2, 3, 65), "leading batch dims"),
    ((0, 7), "no rows"),
    ((4, 0), "zero-width rows sum to 0"),
]


def _row_sum(x, plan, out_dtype=None):
    """The kernels of ``plan`` into a NaN-poisoned output."""
    out_dtype = out_dtype or x.dtype
    out = poison(torch.empty(x.shape[:-1], dtype=out_dtype, device=x.device))
    _launch_row_sum(x, out, plans.choose_for(x, plan))
    return out


@pytest.mark.parametrize("out_dtype", [None, torch.float32], ids=["same", "to_float32"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("plan", PLANS, ids=PLAN_IDS)
@pytest.mark.parametrize("shape", [s for s, _ in SHAPES], ids=[w for _, w in SHAPES])
def test_matches_reference(shape, plan, dtype, out_dtype, device):
    x = torch.randn(shape, device=device).to(dtype)
    out = _row_sum(x, plan, out_dtype)
    assert out.dtype == (out_dtype or dtype)
    assert_matches(out, reference.row_sum(x), out_dtype or dtype)


@pytest.mark.parametrize("plan", PLANS, ids=PLAN_IDS)
def test_odd_row_count(plan, device):
    x = torch.randn(37, 781, device=device)
    assert_matches(_row_sum(x, plan), reference.row_sum(x), torch.float32)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_accumulates_in_float32(dtype, device):
    # 4096 ones: every partial sum past 2048 (float16) or 256 (bfloat16) would
    # stop growing if accumulated in the input dtype.
    x = torch.ones(3, 4096, device=device, dtype=dtype)
    for plan in PLANS:
        assert (_row_sum(x, plan, torch.float32) == 4096).all(), plan


@pytest.mark.parametrize("plan", ["looped", "split"])
def test_row_wider_than_2_20(plan, device):
    n = 2**20 + 1
    ones = torch.ones(1, n, device=device)
    assert _row_sum(ones, plan).item() == n  # exact: every partial sum is an integer < 2^24
    x = torch.rand(1, n, device=device)  # positive, so the sum has no cancellation
    assert_matches(_row_sum(x, plan), reference.row_sum(x), torch.float32)


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
    launches = record_launches(monkeypatch, row_sum_mod)
    x = torch.randn(37, 10000, device=device)  # wider than a tile: a row a program
    for plan in ("block", "looped"):
        launches.clear()
        out = _row_sum(x, plan)
        grids = [grid for _, grid, _ in launches]
        if plan == "block":
            assert grids == ([(5,)] * 7 + [(2,)] if max_grid == 5 else [(37,)]), grids
        else:
            warps = plans.choose_for(x, plan).num_warps
            assert grids == [(plans.WARPS_PER_SM // warps,)] and grids[0][0] < 37, grids
        assert_matches(out, reference.row_sum(x), torch.float32, plan)


def _layouts(device):
    """(name, x) pairs with shape (5, 65) read through unusual strides."""
    base = torch.randn(5, 80, device=device)
    return [
        ("row gaps", base[:, :65]),
        ("unaligned start", base[:, 3:68]),
        ("transposed", torch.randn(65, 5, device=device).t()),
        ("expanded", torch.randn(1, 65, device=device).expand(5, 65)),
        ("every other column", torch.randn(5, 130, device=device)[:, ::2]),
        ("leading dims that do not collapse", torch.randn(4, 3, 65, device=device).transpose(0, 1)),
    ]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("plan", PLANS, ids=PLAN_IDS)
def test_strided_inputs(plan, dtype, device):
    for name, x in _layouts(device):
        x = x.to(dtype)
        assert_matches(_row_sum(x, plan), reference.row_sum(x), dtype, name)


@pytest.mark.parametrize("out_dtype", [None, torch.float32], ids=["same", "to_float32"])
@pytest.mark.parametrize("plan", PLANS, ids=PLAN_IDS)
def test_public_function_with_autograd(plan, out_dtype, device):
    x = torch.randn(2, 3, 40, device=device).to(torch.bfloat16).requires_grad_(True)
    out = kp.row_sum(x, dtype=out_dtype, plan=plan)
    assert out.dtype == (out_dtype or torch.bfloat16)
    assert_matches(out, reference.row_sum(x), out.dtype)
    dout = torch.randn(out.shape, device=device).to(out.dtype)
    (dx,) = torch.autograd.grad(out, x, dout)
    assert dx.dtype == torch.bfloat16
    assert torch.equal(dx, dout.to(torch.bfloat16)[..., None].expand(x.shape))


def test_zero_dim_and_empty(device):
    assert kp.row_sum(torch.tensor(2.5, device=device)).item() == 2.5
    assert kp.row_sum(torch.empty(0, 3, device=device)).shape == (0,)
    out = kp.row_sum(torch.empty(3, 0, device=device))
    assert torch.equal(out, torch.zeros(3, device=device))


def test_offsets_past_2_31_are_int64(device):
    rows, cols = views_past_2_31(device)
    assert_matches(
        _row_sum(rows, "block"), reference.row_sum(rows), torch.float16, "rows 2^30 apart"
    )
    assert_matches(
        _row_sum(cols, "looped"), reference.row_sum(cols), torch.float16, "cols 2^30 apart"
    )


@pytest.mark.usefixtures("small_pieces")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("n_cols", "pieces"), [(1100, (1024, 128)), (129, (128, 1))])
def test_block_pieces_match_reference(n_cols, pieces, dtype, device, monkeypatch):
    """Rows held as a main block and a tail (the masked tail too)."""
    launches = record_launches(monkeypatch, row_sum_mod)
    x = torch.randn(5, n_cols, device=device).to(dtype)
    assert_matches(_row_sum(x, "block"), reference.row_sum(x), dtype)
    assert [(name, (kw["BLOCK"], kw["TAIL"])) for name, _, kw in launches] == [
        ("_block_kernel", pieces)
    ]


@pytest.mark.parametrize(
    ("block_cols", "elem_bytes", "warps", "tile"),
    [
        (1024, 2, 2, (4, 8)),  # 4 rows of 2 KiB; 2 warps each
        (1024, 4, 4, (2, 8)),
        (1536, 2, 2, (2, 4)),  # 2.67 rows fit: a power of two of them
        (4096, 2, 8, (1, 8)),  # one row fills the tile
        (16384, 4, 16, (1, 16)),  # wider than the tile: still one row
        (64, 2, 1, (4, 4)),  # 64 rows would fit: at most BLOCK_TILE_ROWS
        (64, 2, 32, (4, 32)),  # never fewer warps than the plan's
        (128, 2, 8, (4, 16)),  # at most TILE_WARPS
    ],
)
def test_block_tile_takes_whole_rows_up_to_the_tile(block_cols, elem_bytes, warps, tile):
    assert (row_sum_mod.BLOCK_TILE_BYTES, row_sum_mod.BLOCK_TILE_ROWS) == (8192, 4)
    assert row_sum_mod.block_tile(block_cols, elem_bytes, warps) == tile


def test_block_plan_sums_narrow_rows_several_a_program(device, monkeypatch):
    """150 rows of 128-column blocks: 38 programs of 4 rows, the last one partial."""
    launches = record_launches(monkeypatch, row_sum_mod)
    x = torch.randn(150, 100, device=device, dtype=torch.float16)
    assert_matches(_row_sum(x, "block"), reference.row_sum(x), torch.float16)
    [(name, grid, kw)] = launches
    assert (name, grid, kw["ROWS"], kw["num_warps"]) == ("_block_kernel", (38,), 4, 4)


def test_custom_op_schema_and_autograd_registration(device):
    x = torch.randn(5, 33, device=device, requires_grad=True)
    for args in [(None, "block"), (torch.float16, "looped"), (None, "split")]:
        opcheck(
            torch.ops.kp.row_sum.default,
            (x, *args, 0, 0, 0),
            test_utils=("test_schema", "test_autograd_registration"),
        )


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda d: kp.row_sum((1.0, 2.0)), TypeError, "x must be a torch.Tensor"),
        (lambda d: kp.row_sum(torch.ones(3, dtype=torch.int64, device=d)), TypeError, "x has"),
        (
            lambda d: kp.row_sum(torch.ones(3, device=d), dtype=torch.float64),
            TypeError,
            "dtype must be",
        ),
        (lambda d: kp.row_sum(torch.ones(3, device=d), dtype="float32"), TypeError, "dtype must"),
        (lambda d: kp.row_sum(torch.ones(2, 3, device=d), plan="wide"), ValueError, "plan must"),
        (
            lambda d: kp.row_sum(torch.ones(2, 300, device=d), plan=plans.RowPlan("block", 256, 4)),
            ValueError,
            "plan has block=256",
        ),
    ],
)
def test_bad_input_names_the_argument(call, error, message, device):
    with pytest.raises(error, match=message):
        call(device)
