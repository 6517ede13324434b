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

import dataclasses
import json
import math
import os
import re
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
from kernel_portfolio.contracts import stream_buffer
from kernel_portfolio.ops import gemm_rule
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
    "tile",
    [
        mm.INTERPRETER_TILE,
        mm.TmaTile(32, 64, 32, 4, 1, epilogue_split=2),  # the split epilogue
        mm.TmaTile(16, 16, 16, 4, 1),  # many tiles per program
        mm.TmaTile(16, 32, 32, 4, 1, swap_ab=True),  # the transposed tile, transposed back
        # Two accumulators, 48 columns: the second tile's second one lies past N.
        mm.TmaTile(16, 32, 32, 4, 1, block_n2=16),
    ],
    ids=["32x32x32", "32x64x32-split", "16x16x16", "16x32x32-sw", "16x32+16x32-wide"],
)
def test_tma_kernel(dtype, a_t, b_t, tile, device):
    # 40x72x88 leaves partial tiles in M, N and K: the copy engine's zero
    # fill and clipped stores must make them exact. The last row of tiles of
    # more than 40 rows starts at row 40 - BLOCK_M (matmul._row_start), the
    # rows it shares with the tiles above written twice.
    m, n, k = 40, 72, 88
    a, b = _operands(m, n, k, dtype, device, a_t=a_t, b_t=b_t)
    out, guard = _guarded_output(m, n, dtype, device)
    mm._launch_matmul(a, b, out, allow_tf32=False, path="tma", plan=mm.TmaPlan(tile))
    assert_matches(out, reference.matmul(a, b), dtype, tol=_tol(dtype, k))
    assert torch.isnan(guard).all(), "wrote past the end of the output"


@pytest.mark.parametrize("dtype", HALF_DTYPES)
@pytest.mark.parametrize(("a_t", "b_t"), LAYOUTS)
def test_tma_kernel_column_split(dtype, a_t, b_t, device):
    """A plan of two parts writes each column once: 32 columns, then 40 on a split ``K``.

    The second part's views of ``B`` and the output start 32 columns in (64
    bytes: a row-major ``B``'s rows, a transposed one's 32 rows of ``K``), and
    its last tile of 16 columns lies partly past ``N``.
    """
    m, n, k = 40, 72, 136
    a, b = _operands(m, n, k, dtype, device, a_t=a_t, b_t=b_t)
    out, guard = _guarded_output(m, n, dtype, device)
    rest = mm.TmaPlan(mm.TmaTile(16, 16, 32, 4, 1), 2)
    plan = mm.TmaPlan(mm.INTERPRETER_TILE, 1, 32, rest)
    assert [(p.tile, p.split_k, c, w) for p, c, w in plan.parts(n)] == [
        (mm.INTERPRETER_TILE, 1, 0, 32),
        (rest.tile, 2, 32, 40),
    ]
    mm._launch_matmul(a, b, out, allow_tf32=False, path="tma", plan=plan)
    assert_matches(out, reference.matmul(a, b), dtype, tol=_tol(dtype, k))
    assert torch.isnan(guard).all(), "wrote past the end of the output"


def _split_counters(device) -> torch.Tensor:
    """The split-K tile counters the eager route keeps (0 between launches)."""
    return stream_buffer("matmul split-k counters", 1, torch.int32, torch.device(device))


@pytest.mark.parametrize("dtype", HALF_DTYPES)
@pytest.mark.parametrize(("a_t", "b_t"), LAYOUTS)
@pytest.mark.parametrize(
    ("splits", "tile"),
    [
        (2, mm.INTERPRETER_TILE),
        (3, mm.INTERPRETER_TILE),
        (6, mm.INTERPRETER_TILE),
        (3, mm.TmaTile(16, 32, 32, 4, 1, swap_ab=True)),  # partials of the transposed-back tile
    ],
    ids=["2", "3", "6", "3-sw"],
)
def test_tma_kernel_split_k(dtype, a_t, b_t, splits, tile, device):
    # K = 136 is five 32-wide steps (the last partial): runs of 2 and 3, of
    # 1, 2 and 2, or six runs of which one is empty; 40x72 leaves partial
    # output tiles (six of 32x32) in each run.
    m, n, k = 40, 72, 136
    a, b = _operands(m, n, k, dtype, device, a_t=a_t, b_t=b_t)
    out, guard = _guarded_output(m, n, dtype, device)
    plan = mm.TmaPlan(tile, splits)
    mm._launch_matmul(a, b, out, allow_tf32=False, path="tma", plan=plan)
    assert_matches(out, reference.matmul(a, b), dtype, tol=_tol(dtype, k))
    assert torch.isnan(guard).all(), "wrote past the end of the output"
    assert not _split_counters(device).any(), "a tile's counter was left above 0"


def test_split_k_launches_back_to_back(device):
    """Each launch finds the tile counters at 0: the last run of each tile resets its own.

    A second product on the same stream with the same tile count would
    otherwise count its runs from where the first left off, and its tiles'
    last runs would never see their count complete.
    """
    plan = mm.TmaPlan(mm.INTERPRETER_TILE, 4)
    for _ in range(2):
        a, b = _operands(40, 72, 264, torch.float16, device)
        out = poison(torch.empty(40, 72, dtype=torch.float16, device=device))
        mm._launch_matmul(a, b, out, allow_tf32=False, path="tma", plan=plan)
        assert_matches(out, reference.matmul(a, b), torch.float16, tol=_tol(torch.float16, 264))


#: Few-row products on the plan table's own tiles and split-K counts (for
#: 132 SMs, whatever the interpreter's count): rows 1-63 (buckets <= 64, which
#: take swapped tiles), 65 and 100 (bucket 128), 200 (256) and 257 (512);
#: ``N = 408`` and ``K = 4136`` leave partial tiles in N and in K (4136 is 32
#: steps of 128 and a part).
FEW_ROWS = (1, 17, 63, 65, 100, 200, 257)


@pytest.mark.parametrize(
    ("dtype", "b_t"),
    [(torch.float16, False), (torch.bfloat16, False), (torch.bfloat16, True)],
    ids=["float16", "bfloat16", "bfloat16-wT"],
)
@pytest.mark.parametrize("m", FEW_ROWS)
def test_plan_table_at_few_rows(m, dtype, b_t, device):
    n, k = 408, 4136
    plan = mm._tma_plan(m, n, k, 132)
    assert plan.tile.swap_ab == (m <= 64), plan  # swapped tiles on the rows that take them
    a, b = _operands(m, n, k, dtype, device, b_t=b_t)  # b_t: a linear layer's W.T
    out, guard = _guarded_output(m, n, dtype, device)
    mm._launch_matmul(a, b, out, allow_tf32=False, path="tma", plan=plan)
    assert_matches(out, reference.matmul(a, b), dtype, tol=_tol(dtype, k))
    assert torch.isnan(guard).all(), "wrote past the end of the output"
    assert not _split_counters(device).any(), "a tile's counter was left above 0"


#: The models layer shapes (N, K) of the tuning sweep, and batch sizes across
#: every row of the plan table.
MODEL_NK = [(4096, 4096), (6144, 4096), (14336, 4096), (4096, 14336)]
MODEL_M = [16, 32, 64, 128, 256, 384, 512, 1024, 2048, 4096, 16384]


def _items(plan: mm.TmaPlan, m: int, n: int) -> int:
    return math.ceil(m / plan.tile.block_m) * math.ceil(n / plan.tile.tile_n) * plan.split_k


def _table_name(tile: mm.TmaTile) -> str:
    """The plan table's name of ``tile``: its own, or for a one-wave form its tile's."""
    forms = {form: name for name, form in gemm_rule.ONE_WAVE_TILES.items()}
    return forms.get(tile.name, tile.name)


def test_plan_table_rows_name_tiles_in_order():
    names = {tile.name for tile in mm.TMA_TILES}
    assert len(names) == len(mm.TMA_TILES)
    assert all(name in names for rule in gemm_rule.TMA_RULES for name in rule.tiles)
    bounds = [rule.max_m for rule in gemm_rule.TMA_RULES]
    assert bounds[-1] is None and bounds[:-1] == sorted(bounds[:-1])
    assert mm.TmaTile(128, 256, 64, 8, 4, epilogue_split=2).name == "128x256x64 w8 s4 e2"
    assert mm.TmaTile(16, 64, 256, 4, 4, swap_ab=True).name == "16x64x256 w4 s4 sw"
    assert mm.TmaTile(128, 128, 64, 4, 4, block_n2=16).name == "128x128+16x64 w4 s4"
    assert mm.TmaTile(128, 256, 64, 4, 3, gluon=True).name == "128x256x64 s3 gluon"


def test_wide_tiles_only_where_no_power_of_two_tile_fills():
    """A tile of two accumulators is taken only where no one-accumulator tile ahead of it
    in its row keeps ``WAVE_FILL`` of the SMs busy, and is at 384x6144 (three 128-row
    tiles of 144 columns: 129 for 132 SMs, where 128x128 runs a second wave of 12)."""
    taken = set()
    for m in range(129, 1025, 7):
        for n, k in MODEL_NK:
            plan = mm._tma_plan(m, n, k, 132)
            if not plan.tile.block_n2:
                continue
            taken.add(_table_name(plan.tile))
            rule = next(r for r in gemm_rule.TMA_RULES if mm._bucket(m) <= r.max_m)
            for name in rule.tiles[: rule.tiles.index(_table_name(plan.tile))]:
                tile = mm._TILES_BY_NAME[name]
                if not tile.block_n2:
                    assert _fill(_items(mm.TmaPlan(tile), m, n)) < gemm_rule.WAVE_FILL, (m, n)
    assert taken == {*gemm_rule.WIDE_TILES_FEW, *gemm_rule.GLUON_WIDE_TILES}
    assert mm._tma_plan(384, 6144, 4096, 132).tile.name == "128x128+16x64 s5 gluon"


@pytest.mark.parametrize(
    ("m", "row"),
    [
        (1, 0),
        (16, 0),
        (17, 1),
        (32, 1),
        (33, 2),
        (64, 2),
        (65, 3),
        (128, 3),
        (129, 4),
        (256, 4),
        (257, 5),
        (512, 5),
        (513, 6),
        (1024, 6),
        (1025, 7),
        (8193, 8),
    ],  # fmt: skip
)
def test_plan_table_row_by_bucket(m, row):
    """The row is the first whose bound holds M rounded up to a power of two."""
    rule = gemm_rule.TMA_RULES[row]
    assert _table_name(mm._tma_plan(m, 4096, 4096, 132).tile) in rule.tiles


@pytest.mark.parametrize(("n", "k"), MODEL_NK)
@pytest.mark.parametrize("m", MODEL_M)
def test_plans_at_the_model_shapes(m, n, k):
    """Every plan at the sweep's shapes, and the backward's products, keeps its promises.

    Split-K only where fewer runs leave the waves less than ``WAVE_FILL``
    busy and fill them no better, at most the row's ``max_split`` runs of at
    least ``SPLIT_K_MIN_RUN`` or ``LONG_K_SPLIT`` runs of ``LONG_K_RUN``; the
    tile from the row of M's bucket; the tile taken before a later one of its
    row only when its waves fill ``WAVE_FILL`` of the SMs or fill them better.
    """
    for shape in ((m, n, k), (m, k, n), (k, n, m)):  # forward, dA, dB
        plan = mm._tma_plan(*shape, 132)
        tiles = _items(mm.TmaPlan(plan.tile), shape[0], shape[1])
        rule = next(
            r for r in gemm_rule.TMA_RULES if r.max_m is None or mm._bucket(shape[0]) <= r.max_m
        )
        name = _table_name(plan.tile)  # a one-wave form is its tile's row entry
        assert name in rule.tiles, (shape, plan)
        chosen = _fill(tiles * plan.split_k)
        for fewer in range(1, plan.split_k):
            assert _fill(tiles * fewer) < min(chosen, gemm_rule.WAVE_FILL), (shape, plan, fewer)
        if plan.split_k > 1:
            run = shape[2] // plan.split_k
            short = plan.split_k <= rule.max_split and run >= gemm_rule.SPLIT_K_MIN_RUN
            long = plan.split_k <= gemm_rule.LONG_K_SPLIT and run >= gemm_rule.LONG_K_RUN
            assert (short or long) and plan.tile.splits, (shape, plan)
        for earlier in rule.tiles[: rule.tiles.index(name)]:
            other = mm._TILES_BY_NAME[earlier]
            other_tiles = _items(mm.TmaPlan(other), shape[0], shape[1])
            runs = mm._split_k(other, other_tiles, shape[2], 132, rule.max_split)
            fill = _fill(other_tiles * runs)
            assert fill < gemm_rule.WAVE_FILL, (shape, plan, earlier)
            assert fill < chosen, (shape, plan, earlier)


@pytest.mark.parametrize(("n", "k"), MODEL_NK)
def test_column_split_only_past_a_part_empty_last_wave(n, k):
    """A plan splits its columns where its tile's last wave of several is part-empty.

    The first part is the unsplit plan's tile over the whole tile columns of
    its full waves, the second the table's plan of the remaining columns,
    whose waves of output elements a program take less time than the last
    wave they replace; nowhere else does a plan have two parts.
    """
    split = 0
    for m in range(16, 4097, 48):
        for shape in ((m, n, k), (m, k, n), (k, n, m)):  # forward, dA, dB
            plan = mm._tma_plan(*shape, 132)
            whole = mm._tma_plan(*shape, 132, split_columns=False)
            rows = math.ceil(shape[0] / whole.tile.block_m)
            items = _items(whole, shape[0], shape[1])
            waves = math.ceil(items / 132)
            head = (waves - 1) * 132 // rows
            cols = head * whole.tile.tile_n
            may = waves > 1 and whole.split_k == 1 and _fill(items) < gemm_rule.COLUMN_SPLIT_FILL
            rest = mm._tma_plan(shape[0], shape[1] - cols, shape[2], 132, split_columns=False)
            rest_items = _items(mm.TmaPlan(rest.tile), shape[0], shape[1] - cols)
            gains = (
                math.ceil(rest_items * rest.split_k / 132) * rest.tile.block_m * rest.tile.tile_n
                < whole.tile.block_m * whole.tile.tile_n * rest.split_k
            )
            if may and cols and gains:
                split += 1
                tile = mm._one_wave(whole.tile, rows * head, 132)
                assert plan == mm.TmaPlan(tile, 1, cols, rest), shape
            else:
                assert plan == whole, shape
    assert split, "no product of these layer shapes splits its columns"


def test_one_wave_forms_only_where_a_launch_fits_one_wave():
    """A Gluon tile's one-wave form (a stage more, its epilogue in halves) runs each launch
    of the plan whose tiles fit one wave, and no other; it is its tile in all else."""
    for name, form in gemm_rule.ONE_WAVE_TILES.items():
        tile, one = mm._TILES_BY_NAME[name], mm._TILES_BY_NAME[form]
        assert (one.stages, one.epilogue_split) == (tile.stages + 1, 2), form
        assert dataclasses.replace(one, stages=tile.stages, epilogue_split=1) == tile, form
        assert one.block_n2 in (0, one.block_n // 2), form  # it shares the half-width buffer
    forms = {mm._TILES_BY_NAME[f]: name for name, f in gemm_rule.ONE_WAVE_TILES.items()}
    seen = {True: 0, False: 0}
    for n, k in MODEL_NK:
        for m in range(16, 4097, 16):
            for part, _, width in mm._tma_plan(m, n, k, 132).parts(n):
                one_wave = part.tile.count(m, width) * part.split_k <= 132
                if part.tile in forms:
                    assert one_wave, (m, n, k, part)
                    seen[True] += 1
                elif part.tile.name in gemm_rule.ONE_WAVE_TILES:
                    assert not one_wave, (m, n, k, part)
                    seen[False] += 1
    assert seen[True] and seen[False], seen


def test_column_split_at_1024_rows_of_the_widest_projection():
    """1024 x 14336: 448 tiles of 128x256, four waves 85% busy, become three waves of them
    (49 tile columns, 12544 output columns) and one of 112 tiles of 128x128."""
    rest = mm.TmaPlan(mm._TILES_BY_NAME["128x128x64 s6 gluon"])
    want = mm.TmaPlan(mm._TILES_BY_NAME["128x256x64 s3 gluon"], 1, 12544, rest)
    assert mm._tma_plan(1024, 14336, 4096, 132) == want


def _fill(items: int, sms: int = 132) -> float:
    """The share of the SMs' time ``items`` work items keep busy, in whole waves."""
    return items / (math.ceil(items / sms) * sms)


@pytest.mark.parametrize(
    ("shape", "tile", "splits"),
    [
        ((16, 4096, 4096), "16x64x256 w4 s4 sw", 1),  # the row's one tile: 64 tiles, unsplit
        ((32, 4096, 4096), "16x64x256 w4 s4 sw", 1),  # 16x128: 64 tiles; 16x64: 128
        ((32, 14336, 4096), "16x128x128 w4 s6 sw", 1),  # 224 tiles: 85% of two waves
        ((64, 4096, 4096), "32x64x256 w4 s4 sw", 1),  # 64x64: 64 tiles; 32x64: 128
        ((64, 14336, 4096), "64x64x256 w4 s3", 1),  # 224 tiles: 85% of two waves
        ((64, 4096, 16384), "64x64x256 w4 s3", 2),  # two runs of LONG_K_RUN: 128 items, 97%
        ((128, 4096, 4096), "64x64x128 w4 s6", 1),  # 64x128: 64 tiles; 64x64: 128
        ((384, 4096, 4096), "64x128+64x64 w4 s6", 1),  # 128x128: 96 tiles; 64x192: 132
        ((384, 6144, 4096), "128x128+16x64 s5 gluon", 1),  # 64x192: 96 tiles; 128x144: 129
        ((512, 6144, 4096), "128x128+64x64 s5 gluon e2", 1),  # 128x192: 128 tiles, one
        # wave (its one-wave form); 64x128: 85%
        ((768, 6144, 4096), "192x128+64x64 s4 gluon e2", 1),  # 192x192: 128 tiles; 128x192: 73%
        ((448, 4096, 4096), "128x128x64 s6 gluon", 1),  # 128 tiles: 97% of one wave
        ((768, 4096, 4096), "192x128x64 s5 gluon e2", 1),  # 128 tiles: 97%; 128x128: 2 waves
        ((1408, 4096, 4096), "192x128x64 s4 gluon", 1),  # 256 tiles: two waves
        ((384, 14336, 4096), "192x128x64 s5 gluon e2", 1),  # 224 tiles: 85% of two waves,
        # the first 132 (66 tile columns) one wave
        ((1024, 6144, 4096), "128x128x64 s6 gluon", 1),  # 128x256: 73% of two waves; 97% of 3
        ((1024, 4096, 4096), "128x256x64 s4 gluon e2", 1),  # one wave 97% full
        ((1024, 1024, 65536), "128x256x64 w8 s4 e2", 4),  # dB of a large batch: the Gluon
        # tiles never split, the Triton kernel's behind them split a long K
        ((1024, 1024, 16384), "128x128x64 w4 s4", 2),  # two runs of LONG_K_RUN
        ((4096, 4096, 64), "128x256x64 s3 gluon", 1),  # dB of a batch of 64
        ((16384, 4096, 4096), "128x256x64 s3 gluon", 1),
        ((256, 14336, 4096), "128x256x64 w8 s4 e2", 1),  # the row of 256 keeps Triton's
    ],
)
def test_plan_choices(shape, tile, splits):
    """The tile and split of the plan's first part (:func:`matmul._column_split` may add one)."""
    head = mm._tma_plan(*shape, 132).parts(shape[1])[0][0]
    assert head == mm.TmaPlan(mm._TILES_BY_NAME[tile], splits)


@pytest.mark.parametrize(
    ("tiles", "k", "max_split", "runs"),
    [
        (32, 4096, 4, 4),  # 128 items fill 97% of a wave
        (44, 4096, 4, 3),  # 132 items: a full wave
        (66, 4096, 4, 2),
        (120, 4096, 4, 1),  # 91% of a wave already
        (96, 4096, 4, 4),  # 73% busy in one wave, two or three; 384 items 97%
        (8, 2048, 4, 2),  # runs of at least SPLIT_K_MIN_RUN
        (8, 1000, 4, 1),
        (20, 65536, 4, 4),  # the most runs fill best (61%), though under WAVE_FILL
        (264, 4096, 4, 1),  # two whole waves
        (32, 4096, 1, 1),  # the row's max_split
        (32, 16383, 1, 1),  # runs shorter than LONG_K_RUN
        (32, 16384, 1, 2),  # past max_split, runs of LONG_K_RUN: two
        (64, 65536, 1, 2),  # 128 items: 97%
        (20, 65536, 1, 4),  # at most LONG_K_SPLIT
        (20, 65536, 6, 6),  # the row's max_split, runs of SPLIT_K_MIN_RUN
    ],
)
def test_split_k_rule(tiles, k, max_split, runs):
    """The fewest runs that fill ``WAVE_FILL`` of the waves, else those that fill them best."""
    consts = {"WAVE_FILL": 0.9, "SPLIT_K_MIN_RUN": 1024, "LONG_K_RUN": 8192, "LONG_K_SPLIT": 4}
    tile = mm._TILES_BY_NAME["64x128x128 w4 s4"]
    with pytest.MonkeyPatch.context() as patch:
        for name, value in consts.items():
            patch.setattr(gemm_rule, name, value)
        assert mm._split_k(tile, tiles, k, 132, max_split) == runs


def test_unsplit_tiles_never_split():
    """Tiles of two accumulators and the Gluon kernel's."""
    for unsplit in (t for t in mm.TMA_TILES if not t.splits):
        assert unsplit.block_n2 or unsplit.gluon, unsplit
        assert mm._split_k(unsplit, 8, 65536, 132, 8) == 1


def test_plan_under_symbolic_sizes():
    """Traced with symbolic sizes, the plan is the same as for the plain integers.

    Only integer comparisons: each becomes a guard on a range of the sizes.
    """
    plans = []

    def product(a, b):
        plans.append(mm._tma_plan(a.shape[0], b.shape[1], a.shape[1], 132))
        return a.new_empty(a.shape[0], b.shape[1])

    make_fx(product, tracing_mode="symbolic")(torch.empty(100, 4096), torch.empty(4096, 6144))
    assert plans == [mm._tma_plan(100, 6144, 4096, 132)]


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
    a, b = _operands(16, 16, 16, torch.float16, device)
    out = torch.empty(16, 16, dtype=torch.float16, device=device)
    with pytest.raises(ValueError, match="plan.split_k must be at least 1, got 0"):
        plan = mm.TmaPlan(mm.INTERPRETER_TILE, 0)
        mm._launch_matmul(a, b, out, allow_tf32=False, path="tma", plan=plan)
    unsplit = next(t for t in mm.TMA_TILES if not t.splits)
    message = re.escape(f"plan.split_k must be 1 for the tile {unsplit.name}, got 2")
    with pytest.raises(ValueError, match=message):
        plan = mm.TmaPlan(unsplit, 2)
        mm._launch_matmul(a, b, out, allow_tf32=False, path="tma", plan=plan)


def test_fixed_config_kwargs_leave_out_num_ctas():
    # wrap_triton refuses num_ctas as a launch argument (the H200 run failed on it).
    config = mm.POINTER_CONFIGS[0]
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
#: ``run_compile_script``): every Hopper tile (float16, both operands
#: row-major); every tile that may split ``K``, split (bfloat16, ``A``
#: transposed, as for ``dB``); the Gluon tiles with ``A`` transposed and with
#: both transposed; the plan table's tiles with ``B`` transposed (bfloat16, a linear
#: layer's ``x @ W.T``), the first row's tile split too, and one tile with
#: both transposed; every pointer config (float16, row-major, sizes multiples
#: of 16); and one pointer config for float32 at each input precision the
#: launcher or the tuning sweep uses. The Hopper kernels take the launcher's
#: own descriptors (``mm._descriptors``) of CPU matrices. Each line carries
#: the registers and spilled bytes that ``ptxas -v`` reports for sm_90a.
_AOT_SCRIPT = textwrap.dedent(
    """
    import json, re, subprocess, tempfile
    import torch
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.experimental.gluon._runtime import GluonASTSource
    from kernel_portfolio.arch import count_instructions, ptxas_for
    from kernel_portfolio.ops import gemm_rule
    from kernel_portfolio.ops import matmul as mm
    from triton.runtime.jit import mangle_type

    TMA_INTS = ["M", "N", "K", "split_k"]
    DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
    # Row-major operands (unit strides along K, N and N) whose sizes and
    # strides are multiples of 16 bytes: the launcher passes these constants.
    PTR_INTS = mm._POINTER_RUNTIME_ARGS
    PTR = dict(A_UNIT=1, B_UNIT=1, C_UNIT=1, WIDEN_OPERANDS=False)
    PTRS = {d: {name: f"*{d}" for name in ("a_ptr", "b_ptr", "c_ptr")} for d in ("fp16", "fp32")}

    def ptxas_report(ptx):
        with tempfile.TemporaryDirectory() as tmp:
            with open(f"{tmp}/k.ptx", "w") as fh:
                fh.write(ptx)
            cmd = [str(ptxas_for(90)), "-v", "--gpu-name", "sm_90a", f"{tmp}/k.ptx",
                   "-o", f"{tmp}/k.o"]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stderr
        spills = re.search(r"(\\d+) bytes spill stores", out)
        registers = int(re.search(r"Used (\\d+) registers", out).group(1))
        # C7515: ptxas serialised the wgmma instructions (an accumulator
        # register defined by another instruction inside the pipeline).
        return registers, int(spills.group(1)), "C7515" in out

    def compile_one(job, kernel, ints, args, constexprs, warps, stages, source=ASTSource):
        # args: the pointer and descriptor arguments' types.
        signature = dict(args)
        signature.update({name: "i32" for name in ints})
        signature.update({name: "constexpr" for name in constexprs})
        # Pointers 16-byte aligned, as Triton specialises fresh tensors at launch.
        attrs = {(kernel.arg_names.index(name),): [["tt.divisibility", 16]]
                 for name, kind in args.items() if kind.startswith("*")}
        try:
            compiled = triton.compile(
                source(kernel, signature, constexprs, attrs),
                target=GPUTarget("cuda", 90, 32),
                options={"num_warps": warps, **({"num_stages": stages} if stages else {})},
            )
        except Exception as exc:  # over the shared memory Triton assumes, for one
            print(json.dumps({**job, "error": f"{type(exc).__name__}: {exc}"[-1500:]}), flush=True)
            return
        ptx = compiled.asm["ptx"]
        registers, spills, serialized = ptxas_report(ptx)
        atomics = re.findall(r"atom\\.global[.\\w]*\\.(add|exch)\\.", ptx)
        print(json.dumps({
            **job,
            "counts_in": atomics.count("add"),
            "resets": atomics.count("exch"),
            "config_warps": warps,
            "counts": count_instructions(ptx),
            "cp_async_16": "cp.async.cg.shared.global" in ptx,
            "tensormap_writes": len(re.findall(r"tensormap\\.replace", ptx)),
            "shared": compiled.metadata.shared,
            "num_warps": compiled.metadata.num_warps,
            "cubin": len(compiled.asm["cubin"]),
            "registers": registers,
            "spills": spills,
            "serialized": serialized,
            # Barriers of every thread of the program (bar.sync ID;), and the
            # thread counts of the barriers of fewer (bar.sync ID, COUNT;).
            "cta_barriers": len(re.findall(r"\\bbar\\.sync\\s+\\d+;", ptx)),
            "group_barriers": sorted(
                {int(n) for n in re.findall(r"bar\\.sync\\s+\\d+,\\s*(\\d+);", ptx)}
            ),
        }), flush=True)

    def compile_tma(job, tile, dtype, a_col, b_col, partials):
        args = tile.launch_args()
        warps, stages = args.pop("num_warps"), args.pop("num_stages", None)
        job = {**job, "tile": tile.name, "ws": tile.gluon,
               "splits": tile.splits, "swap": tile.swap_ab, "gluon": tile.gluon}
        # The launcher's own descriptors (mm._descriptors) of CPU matrices of
        # the layouts asked for, 256x512 times 512x1024: their types are the signature's.
        a = torch.empty(512, 256) if a_col else torch.empty(256, 512)
        b = torch.empty(1024, 512) if b_col else torch.empty(512, 1024)
        a, b = (a.T if a_col else a), (b.T if b_col else b)
        a, b, out = (t.to(DTYPES[dtype]) for t in (a, b, torch.empty(256, 1024)))
        layouts = [mm._tma_layout(t) for t in (a, b, out)]
        names = ("a_desc", "b_desc", "c_desc", "b2_desc", "c2_desc")
        descs = dict(zip(names, map(mangle_type, mm._descriptors(a, b, out, tile, layouts))))
        if tile.gluon:  # the Gluon kernel: its stages are a constant of its own
            constexprs = dict(args, A_COL_MAJOR=a_col, B_COL_MAJOR=b_col, NUM_SMS=132)
            compile_one(job, mm._matmul_ws_kernel, TMA_INTS[:-1], descs, constexprs, warps,
                        None, GluonASTSource)
            return
        work = ("*fp32", "*i32") if partials else (f"*{dtype}", f"*{dtype}")
        constexprs = dict(args, A_COL_MAJOR=a_col, B_COL_MAJOR=b_col, NUM_SMS=132,
                          WIDEN_OPERANDS=False, PARTIALS=partials)
        pointers = dict(descs, **dict(zip(("ws_ptr", "count_ptr"), work)))
        compile_one(job, mm._matmul_tma_kernel, TMA_INTS, pointers, constexprs, warps, stages)

    for tile in mm.TMA_TILES:
        compile_tma({"job": "tma"}, tile, "fp16", False, False, False)
    for tile in mm.TMA_TILES:
        if tile.splits:
            compile_tma({"job": "tma-split-k"}, tile, "bf16", True, False, True)
    for tile in mm.TMA_TILES:
        if tile.gluon:  # the Gluon kernel's own layouts: A and B each in place
            for a_col, b_col in ((True, False), (True, True)):
                compile_tma({"job": "gluon-transposed"}, tile, "bf16", a_col, b_col, False)
    rule_tiles = dict.fromkeys(name for rule in gemm_rule.TMA_RULES for name in rule.tiles)
    for name in rule_tiles:
        compile_tma({"job": "tma-w-t"}, mm._TILES_BY_NAME[name], "bf16", False, True, False)
    first = mm._TILES_BY_NAME[gemm_rule.TMA_RULES[0].tiles[0]]
    compile_tma({"job": "tma-w-t"}, first, "bf16", False, True, True)
    compile_tma({"job": "tma-transposed"}, mm.TMA_TILES[0], "bf16", True, True, False)
    for i, config in enumerate(mm.POINTER_CONFIGS):
        compile_one({"job": "pointer", "index": i}, mm._matmul_kernel, PTR_INTS, PTRS["fp16"],
                    dict(config.kwargs, INPUT_PRECISION="ieee", VEC=8, **PTR),
                    config.num_warps, config.num_stages)
    config = mm.POINTER_CONFIGS[0]
    for precision in ("ieee", "tf32", "tf32x3"):
        compile_one({"job": "pointer-fp32-" + precision}, mm._matmul_kernel, PTR_INTS,
                    PTRS["fp32"], dict(config.kwargs, INPUT_PRECISION=precision, VEC=4, **PTR),
                    config.num_warps, config.num_stages)
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
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return [json.loads(line) for line in proc.stdout.splitlines()]


def _fits(r: dict) -> bool:
    return "error" not in r and r["shared"] <= HOPPER_MAX_SHARED


def test_hopper_path_compiles_for_sm90(tmp_path):
    results = {}
    for r in run_compile_script(_AOT_SCRIPT, tmp_path):
        results.setdefault(r["job"], []).append(r)
    unsplit = sum(1 for tile in mm.TMA_TILES if tile.block_n2 or tile.gluon)
    assert len(results["tma"]) == len(results["tma-split-k"]) + unsplit == len(mm.TMA_TILES)
    assert len(results["pointer"]) == len(mm.POINTER_CONFIGS)
    splits = results["tma-split-k"]
    # A split tile counts itself in once and resets its counter once.
    for r in splits:
        assert r["splits"] and (r["counts_in"], r["resets"]) == (1, 1), r
    hopper = results["tma"] + splits + results["tma-w-t"] + results["tma-transposed"]
    gluon = [r for r in hopper + results["gluon-transposed"] if r["gluon"]]
    assert {r["tile"] for r in gluon} == {t.name for t in mm.TMA_TILES if t.gluon}
    assert {r["job"] for r in gluon} >= {"tma", "tma-w-t", "gluon-transposed"}
    for r in gluon:
        # Its warpgroups each meet at barriers of their own 128 threads; the
        # Triton kernel's warps meet at a barrier of the whole program every K step.
        assert r["cta_barriers"] == 0 and r["group_barriers"] == [128], r
    for r in hopper + results["gluon-transposed"]:
        assert _fits(r) and r["cubin"] > 0, r
        # wgmma takes 64 rows a warpgroup: a narrower tile multiplies with mma.sync,
        # unless swapped (its rows on wgmma's N side).
        mma = "wgmma" if r["swap"] or int(r["tile"].split("x")[0]) >= 64 else "mma.sync"
        assert r["counts"][mma] > 0 and r["counts"]["cp.async.bulk.tensor"] > 0, r
        assert r["spills"] == 0, r  # accumulators, and split-K's partial tiles, in registers
        # Descriptors arrive built (mm._descriptors): no program writes one.
        assert r["tensormap_writes"] == 0, r
        assert not r["serialized"], r  # each wgmma overlaps the next step's
        # Warp specialisation adds a producer group to consumer groups of 4 warps:
        # two, or the Gluon kernel's one per 64 rows (three for its 192-row tile).
        groups = int(r["tile"].split("x")[0]) // 64 if r["gluon"] else 2
        assert r["num_warps"] == (4 + 4 * groups if r["ws"] else r["config_warps"]), r
    for r in results["pointer"]:
        assert r["cubin"] > 0 and r["shared"] <= HOPPER_MAX_SHARED, r
        assert r["counts"]["wgmma"] > 0 and r["counts"]["cp.async.bulk.tensor"] == 0, r
        assert r["cp_async_16"], r  # aligned operands arrive in 16-byte asynchronous copies
    # float32 stays float32 (no tensor-core instruction at all) unless asked:
    # TF32 (allow_tf32), or TF32 in three products of split operands.
    (ieee,), (tf32,), (tf32x3,) = (results[f"pointer-fp32-{p}"] for p in ("ieee", "tf32", "tf32x3"))
    assert ieee["counts"]["wgmma"] == ieee["counts"]["mma.sync"] == 0, ieee
    assert tf32["counts"]["wgmma"] > 0, tf32
    assert tf32x3["counts"]["wgmma"] >= 2 * tf32["counts"]["wgmma"], tf32x3


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
