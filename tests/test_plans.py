"""Row plans (``kernel_portfolio.plans``): pure Python rules, no kernels run."""

from __future__ import annotations

import itertools

import pytest
import torch
import triton

from kernel_portfolio import plan_rule, plans
from kernel_portfolio.ops.peel import row_vec
from kernel_portfolio.plans import RowPlan, choose

# Widths around every power-of-two edge the rules care about (1, the
# chunk width, the block limit for 2- and 4-byte elements, 2^20, past 2^20),
# row counts around the split threshold (half the SM count) and the resident
# program count, and the H200's SM count beside a small and an odd one.
WIDTHS = [1, 2, 3, 781, 1024, 1025, 4096, 4097, 16384, 16385, 32768, 32769, 131072, 2**20 + 1]
ROWS = [1, 2, 7, 65, 66, 67, 132, 133, 5000]
SM_COUNTS = [1, 7, 132]
ELEM_BYTES = [2, 4]
GRID = list(itertools.product(ROWS, WIDTHS, ELEM_BYTES, SM_COUNTS))


@pytest.mark.parametrize("kind", ["auto", *plans.PLAN_KINDS])
def test_every_chosen_plan_is_valid(kind):
    for n_rows, n_cols, elem_bytes, sms in GRID:
        if kind == "block" and n_cols > plans.MAX_BLOCK_COLS:
            continue  # refused, see test_forced_block_refuses_rows_it_cannot_hold
        plan = choose(n_rows, n_cols, elem_bytes=elem_bytes, sm_count=sms, plan=kind)
        case = (n_rows, n_cols, elem_bytes, sms, plan)
        if kind != "auto":
            assert plan.kind == kind, case
        assert plan.block & (plan.block - 1) == 0, case
        if plan.kind == "block":
            assert n_cols <= plan.block < 2 * max(n_cols, 1), case
        else:
            chunks = (
                plan_rule.SPLIT_CHUNK,
                plan_rule.COOP_CHUNK,
                plan_rule.NARROW_CHUNK,
                plan_rule.WIDE_CHUNK,
            )
            assert plan.block <= max(chunks), case
        if plan.kind == "split":
            chunks = triton.cdiv(n_cols, plan.block)
            assert 1 <= plan.splits <= min(chunks, plans.MAX_SPLITS), case
        else:
            assert plan.splits == 1, case


def test_auto_holds_rows_that_fit_and_splits_only_few_wide_rows():
    for n_rows, n_cols, elem_bytes, sms in GRID:
        plan = choose(n_rows, n_cols, elem_bytes=elem_bytes, sm_count=sms)
        width = triton.next_power_of_2(n_cols)
        fits = width * elem_bytes <= plan_rule.MAX_BLOCK_BYTES or (
            width * elem_bytes <= plan_rule.FULL_BLOCK_MAX_BYTES
            and n_cols >= plan_rule.FULL_BLOCK_MIN_FILL * width
        )
        few = n_rows <= plan_rule.SPLIT_ROWS_PER_SM * sms
        wide = n_cols * elem_bytes > plan_rule.SPLIT_MIN_BYTES
        want = "split" if few and wide else "block" if fits else "looped"
        assert plan.kind == want, (n_rows, n_cols, elem_bytes, sms)


# Rows past the fitted block that fill their power-of-two width: a vocabulary
# of 32000 (and 32064, 32768) half-precision columns, 16000 float32; not
# 30522 (93% full), 24576 or anything past 32768 half-precision columns.
@pytest.mark.parametrize(
    ("n_cols", "elem_bytes", "kind"),
    [
        (32000, 2, "block"),
        (32064, 2, "block"),
        (32768, 2, "block"),
        (16000, 4, "block"),
        (30522, 2, "looped"),
        (24576, 2, "looped"),
        (32769, 2, "looped"),
        (63000, 2, "looped"),
        (30000, 4, "looped"),
    ],
)
def test_auto_holds_full_rows_up_to_the_full_block(n_cols, elem_bytes, kind):
    plan = choose(4096, n_cols, elem_bytes=elem_bytes, sm_count=132)
    assert plan.kind == kind, plan
    if kind == "block":
        assert plan.block == triton.next_power_of_2(n_cols), plan


@pytest.mark.parametrize(
    ("n_cols", "elem_bytes", "warps"),
    [
        (4096, 2, 8),
        (4104, 2, 8),
        (6000, 2, 8),
        (8192, 2, 16),
        (1024, 2, 2),
        (1024, 4, 4),
        (512, 2, 1),
        (100, 4, 1),
        (4104, 4, 16),
    ],
)
def test_block_warps_follow_the_row_not_its_power_of_two_block(n_cols, elem_bytes, warps):
    # About two 16-byte vectors per thread of the row itself, as a power of
    # two: a 4104-column row in an 8192 block gets the warps of 4096 columns.
    plan = choose(4096, n_cols, elem_bytes=elem_bytes, sm_count=132, plan="block")
    assert plan.num_warps == warps
    assert plan.block >= n_cols


@pytest.mark.parametrize(
    ("n_cols", "warps_many", "warps_few"),
    [
        (3584, 4, 8),
        (1536, 2, 4),
        (5120, 8, 16),
        (4096, 8, 8),
        (896, 1, 1),
        (16384, 16, 16),
        (1152, 2, 4),
        (2304, 4, 8),
        (4104, 8, 8),
    ],
)
def test_block_warps_round_up_at_a_few_rows_an_sm(n_cols, warps_many, warps_few):
    # With at most FEW_ROWS_PER_SM rows an SM, a row's warps are most of the
    # loads in flight: they round up to hold the row at two vectors a thread
    # (3584 bfloat16 columns, seven vectors of two a thread: 8 warps, not 4;
    # 1152 columns, a little over two warps' worth: 4). Under two warps'
    # worth (896) one warp stays: it reduces without shared memory. A row in
    # pieces (4104: 4096 and 8) rounds by its main piece.
    few = plan_rule.FEW_ROWS_PER_SM * 132

    def warps(n_rows):
        return choose(n_rows, n_cols, elem_bytes=2, sm_count=132, plan="block").num_warps

    assert [warps(1), warps(few), warps(few + 1), warps(4096)] == [warps_few] * 2 + [warps_many] * 2


def test_a_symbolic_row_count_rounds_block_warps_down():
    # Under torch.compile with dynamic shapes the row count is symbolic: the
    # rule must not compare it (a guard), so its warps are those of many rows.
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    env = ShapeEnv()
    rows = env.create_unbacked_symint()
    plan = choose(rows, 3584, elem_bytes=2, sm_count=132, plan="block")
    assert plan.num_warps == 4


@pytest.mark.parametrize(
    ("n_cols", "block", "pieces"),
    [
        (4104, 8192, (4096, 8)),  # just past a power of two: a main block and a tail
        (4097, 8192, (4096, 1)),
        (5120, 8192, (4096, 1024)),
        (6144, 8192, (4096, 2048)),  # a tail of a quarter of the block: still two pieces
        (6145, 8192, (8192, 0)),  # more: one block
        (4096, 4096, (4096, 0)),  # a full block
        (65, 128, (64, 1)),
        (3, 4, (2, 1)),
        (1, 1, (1, 0)),
        (4104, 16384, (16384, 0)),  # a forced wider block stays one piece
    ],
)
@pytest.mark.usefixtures("small_pieces")  # any block, a tail up to a quarter of it
def test_block_pieces_cover_the_row_with_a_main_block_and_a_small_tail(n_cols, block, pieces):
    assert plans.block_pieces(n_cols, block) == pieces
    main, tail = pieces
    assert main + tail >= n_cols and main & (main - 1) == 0 and tail & (tail - 1) == 0
    assert tail == 0 or (main < n_cols and 4 * tail <= block)


@pytest.mark.parametrize(
    ("min_block", "divisor", "n_cols", "block", "pieces"),
    [
        (2048, 32, 4104, 8192, (4096, 8)),
        (2048, 32, 4352, 8192, (4096, 256)),  # a tail of 1/32 of the block
        (2048, 32, 4353, 8192, (8192, 0)),  # more
        (2048, 32, 1032, 2048, (1024, 8)),
        (4096, 32, 1032, 2048, (2048, 0)),  # a block under PIECE_MIN_BLOCK
        (2048, 0, 4104, 8192, (8192, 0)),  # a divisor of 0: never
    ],
)
def test_block_pieces_follow_plan_rule(min_block, divisor, n_cols, block, pieces, monkeypatch):
    monkeypatch.setattr(plan_rule, "PIECE_MIN_BLOCK", min_block)
    monkeypatch.setattr(plan_rule, "PIECE_TAIL_DIVISOR", divisor)
    assert plans.block_pieces(n_cols, block) == pieces


def test_plan_of_a_given_width_does_not_depend_on_row_count():
    """Block and looped plans (the kernels' constexprs) are the same for every batch
    size, but for one step: a block plan's warps at a few rows an SM (FEW_ROWS_PER_SM)."""
    for n_cols, elem_bytes, sms in itertools.product(WIDTHS, ELEM_BYTES, SM_COUNTS):
        for kind in ("block", "looped"):
            if kind == "block" and n_cols > plans.MAX_BLOCK_COLS:
                continue
            for few in (True, False):
                limit = plan_rule.FEW_ROWS_PER_SM * sms
                rows = [n for n in ROWS if (n <= limit) == few or kind == "looped"]
                seen = {
                    choose(n_rows, n_cols, elem_bytes=elem_bytes, sm_count=sms, plan=kind)
                    for n_rows in rows
                }
                assert len(seen) <= 1, (n_cols, elem_bytes, sms, kind, seen)


def test_split_uses_more_programs_when_rows_are_fewer():
    splits = [
        choose(n, 131072, elem_bytes=2, sm_count=132, plan="split").splits for n in (1, 8, 64)
    ]
    assert splits == sorted(splits, reverse=True) and splits[0] > splits[-1]


def test_forced_row_plan_is_returned_as_given():
    plan = RowPlan("looped", 64, 2)
    assert choose(3, 1000, elem_bytes=4, sm_count=132, plan=plan) is plan


def test_block_plan_narrower_than_the_row_is_refused():
    with pytest.raises(ValueError, match="plan has block=64"):
        choose(3, 65, elem_bytes=4, sm_count=132, plan=RowPlan("block", 64, 4))


def test_forced_block_refuses_rows_it_cannot_hold():
    with pytest.raises(ValueError, match="plan='block' cannot hold"):
        choose(1, plans.MAX_BLOCK_COLS + 1, elem_bytes=2, sm_count=132, plan="block")


@pytest.mark.parametrize("bad", ["fast", "", None, 3])
def test_unknown_plan_names_are_refused(bad):
    with pytest.raises(ValueError, match="plan must be"):
        choose(3, 100, elem_bytes=4, sm_count=132, plan=bad)
    with pytest.raises(ValueError, match="plan must be"):
        plans.to_op_args(bad)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (("wide", 64, 4, 1), "plan kind"),
        (("block", 48, 4, 1), "power of two"),
        (("block", 0, 4, 1), "power of two"),
        (("block", 2 * plans.MAX_BLOCK_COLS, 4, 1), "power of two"),
        (("looped", 64, 3, 1), "num_warps"),
        (("split", 64, 4, 0), "splits"),
        (("split", 64, 4, plans.MAX_SPLITS + 1), "splits"),
        (("looped", 64, 4, 2), "splits must be 1"),
    ],
)
def test_row_plan_rejects_bad_fields(fields, message):
    with pytest.raises(ValueError, match=message):
        RowPlan(*fields)


@pytest.mark.parametrize("plan", ["auto", "split", RowPlan("split", 128, 8, 5)])
def test_op_args_round_trip(plan):
    assert plans.from_op_args(*plans.to_op_args(plan)) == plan


@pytest.mark.parametrize("n_cols", [1, 63, 64, 65, 640, 1000, 4097])
@pytest.mark.parametrize("splits", [1, 2, 3, 4, 6, 7, 100])
def test_split_segments_cover_every_chunk_with_no_idle_program(n_cols, splits):
    plan = RowPlan("split", 64, 4, splits)
    per_program, programs = plans.split_segments(n_cols, plan)
    chunks = triton.cdiv(n_cols, 64)
    assert programs <= splits
    assert per_program * programs >= chunks  # every chunk has a program
    assert per_program * (programs - 1) < chunks  # the last program has work


def test_persistent_grid_is_bounded_by_rows_and_resident_programs():
    plan = RowPlan("block", 1024, 4)
    resident = 132 * plans.WARPS_PER_SM // 4
    assert plans.persistent_programs(1, plan, 132) == 1
    assert plans.persistent_programs(100, plan, 132) == 100
    assert plans.persistent_programs(10**6, plan, 132) == resident
    assert plans.persistent_programs(0, plan, 132) == 1


@pytest.mark.parametrize("warps", [1, 2])
def test_persistent_grid_of_narrow_programs_is_what_an_sm_holds(warps):
    # 64 warps but at most 32 programs reside per SM: one-warp programs stop at 32.
    plan = RowPlan("block", 512, warps)
    assert plans.persistent_programs(10**6, plan, 132) == 132 * plans.PROGRAMS_PER_SM == 132 * 32


def test_block_forwards_take_a_program_per_row_in_launches_a_grid_holds():
    assert plans.block_launches(10**6) == ((0, 10**6),)
    assert plans.block_launches(1) == ((0, 1),)
    most = plans.MAX_GRID
    assert plans.block_launches(2**32) == ((0, most), (most, most), (2 * most, 2**32 - 2 * most))


@pytest.mark.parametrize(
    ("elem_bytes", "n_cols", "strides", "vec"),
    [
        (2, 4096, (4096,), 8),  # 16 bytes of float16
        (4, 4096, (4096,), 4),  # 16 bytes of float32
        (2, 4104, (4104,), 8),  # 4104 = 8 * 513: Triton's own rule (multiples of 16) misses it
        (2, 4100, (4100,), 4),
        (2, 4097, (4097,), 1),
        (2, 4096, (4096, 4098), 2),  # every row stride must divide
        (2, 4096, (0,), 8),  # an expanded view (stride 0) is aligned
        (4, 0, (0,), 4),
    ],
)
def test_vec_width(elem_bytes, n_cols, strides, vec):
    assert plans.vec_width(elem_bytes, n_cols, strides) == vec


@pytest.mark.parametrize(
    ("elem_bytes", "n_cols", "strides", "unit_cols", "want"),
    [
        (2, 4096, (4096, 4096), True, (8, False)),  # aligned: the kernels as they were
        (2, 50257, (50257, 50257), True, (8, True)),  # odd rows: peeled, 16-byte bodies
        (2, 30522, (30522,), True, (8, True)),  # 4-byte aligned rows: peeled too
        (4, 4098, (4098, 4098), True, (4, True)),
        (2, 4096, (4100, 4096), True, (4, False)),  # rows that start apart: no shared head
        (2, 50257, (50257,), False, (1, False)),  # strided columns: nothing to vectorise
        (2, 50257, (0, 50257), True, (1, False)),  # an expanded row and a dense one
    ],
)
def test_row_vec_peels_rows_that_share_a_head(elem_bytes, n_cols, strides, unit_cols, want):
    assert row_vec(elem_bytes, n_cols, strides, unit_cols) == want


def test_sm_count_of_cpu_tensors_is_the_documented_constant():
    assert plans.sm_count(torch.device("cpu")) == plans.CPU_SM_COUNT == 132


def test_choose_for_reads_shape_and_dtype():
    x = torch.empty(3, 5, 1000, dtype=torch.float16)
    assert plans.choose_for(x) == choose(15, 1000, elem_bytes=2, sm_count=132)


def test_as_rows_is_a_view_when_rows_collapse_and_one_copy_otherwise():
    base = torch.randn(6, 4, 50)
    gapped = base[:, :, :30]  # rows with gaps: stride (200, 50, 1)
    rows = plans.as_rows(gapped)
    assert rows.shape == (24, 30) and rows.data_ptr() == gapped.data_ptr()
    transposed = torch.randn(50, 7).t()  # 2-D transposed: read through strides
    assert plans.as_rows(transposed).stride() == (1, 7)
    expanded = torch.randn(1, 50).expand(9, 50)
    assert plans.as_rows(expanded).stride() == (0, 1)
    tangled = base.transpose(0, 1)  # (4, 6, 50) with strides (50, 200, 1): no single row stride
    copied = plans.as_rows(tangled)
    assert copied.is_contiguous() and torch.equal(copied, tangled.reshape(24, 50))
    assert plans.as_rows(torch.empty(5, 0)).shape == (5, 0)


@pytest.mark.parametrize("plan", ["auto", "looped", "split", RowPlan("split", 1024, 4, 7)])
def test_plan_arithmetic_keeps_the_row_count_symbolic(plan):
    """Under torch.compile with dynamic shapes the launchers see symbolic sizes.

    This runs the plan arithmetic of a launcher the way a compiled graph traces
    it (fake tensors, symbolic sizes): the width is specialised (it picks the
    constexpr BLOCK), the row count stays symbolic, so a new batch size does
    not recompile the graph.
    """
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import (
        DimDynamic,
        ShapeEnv,
        StatelessSymbolicContext,
    )

    shape_env = ShapeEnv()
    mode = FakeTensorMode(shape_env=shape_env)
    context = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC] * 2)
    x = mode.from_tensor(torch.empty(64, 131072, dtype=torch.float16), symbolic_context=context)
    rows_symbol, cols_symbol = (d.node.expr for d in x.shape)
    with mode:
        chosen = plans.choose_for(x, plan)
        rows = plans.as_rows(x)
        if chosen.kind == "split":
            plans.split_segments(int(x.shape[-1]), chosen)
        else:
            plans.persistent_programs(rows.shape[0], chosen, plans.sm_count(x.device))
        plans.vec_width(x.element_size(), rows.shape[1], (rows.stride(0),))
    assert cols_symbol in shape_env.replacements  # specialised: it sets BLOCK
    assert rows_symbol not in shape_env.replacements


def test_auto_reads_its_constants_from_plan_rule(monkeypatch):
    """Fitting plan_rule changes auto's choices without touching plans.py."""
    before = choose(8, 100_000, elem_bytes=2, sm_count=132)
    assert (before.kind, before.block) == ("split", plan_rule.SPLIT_CHUNK)
    monkeypatch.setattr(plan_rule, "SPLIT_ROWS_PER_SM", 0)
    monkeypatch.setattr(plan_rule, "NARROW_MAX_BYTES", 200_000)
    monkeypatch.setattr(plan_rule, "NARROW_CHUNK", 2048)
    monkeypatch.setattr(plan_rule, "NARROW_WARPS", 16)
    assert choose(8, 100_000, elem_bytes=2, sm_count=132) == RowPlan("looped", 2048, 16)
    assert choose(8, 100_000, elem_bytes=4, sm_count=132).block == plan_rule.WIDE_CHUNK


def test_split_takes_the_cooperative_chunk_while_a_program_a_chunk_fits_the_sms(monkeypatch):
    monkeypatch.setattr(plan_rule, "COOP_CHUNK", 2048)
    monkeypatch.setattr(plan_rule, "COOP_WARPS", 4)
    monkeypatch.setattr(plan_rule, "SPLIT_CHUNK", 8192)
    monkeypatch.setattr(plan_rule, "SPLIT_WARPS", 16)
    # 4 rows of 32769 columns: 17 chunks of 2048 a row, 68 programs on 132 SMs.
    assert choose(4, 32769, elem_bytes=2, sm_count=132) == RowPlan("split", 2048, 4, 17)
    assert choose(4, 32769, elem_bytes=2, sm_count=68).block == 2048
    assert choose(4, 32769, elem_bytes=2, sm_count=67) == RowPlan("split", 8192, 16, 5)
    assert choose(8, 32769, elem_bytes=2, sm_count=132).block == 8192  # 136 programs
    assert choose(1, 1500, elem_bytes=2, sm_count=132, plan="split").block == 2048
    monkeypatch.setattr(plan_rule, "COOP_CHUNK", 0)
    assert choose(4, 32769, elem_bytes=2, sm_count=132).block == 8192


def test_choose_for_caches_plain_shapes_and_matches_choose():
    plans._choose_cached.cache_clear()
    x = torch.empty(3, 5, 1000, dtype=torch.float16)
    for _ in range(3):
        assert plans.choose_for(x) == choose(15, 1000, elem_bytes=2, sm_count=132)
    assert plans._choose_cached.cache_info().hits == 2
    with pytest.raises(ValueError, match="plan must be"):
        plans.choose_for(x, "blocked")
