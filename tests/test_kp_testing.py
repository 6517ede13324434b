"""The correctness checkers reject deliberately broken kernels.

``assert_matches`` and ``poison`` (tests/kp_testing.py) judge every kernel test.
Here each meets a small broken kernel that repeats a bug row-reduction kernels
are known to have, and must reject it; each broken kernel's correct
counterpart, on the same input, must pass, so a rejection is not an accident
of the input. The broken kernels live only in this file.
"""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl
from kp_testing import (
    REL_TOL,
    assert_matches,
    captured_launches,
    first_batch_of_each_form,
    global_memory_ops,
    poison,
)

import kernel_portfolio as kp
from kernel_portfolio import plans, reference
from kernel_portfolio.ops import row_sum
from kernel_portfolio.ops.softmax import _launch_backward, _launch_forward

pytestmark = [
    pytest.mark.interpreter,
    # Broken kernels and all -inf rows compute NaN on purpose; numpy warns.
    pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning"),
]

# ---------------------------------------------------------------------------
# Broken kernels: one contiguous row per program, n_cols <= BLOCK unless looped
# ---------------------------------------------------------------------------


@triton.jit
def _softmax_padding_not_masked(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    """Broken: lanes past the row end load 0, not -inf, so they join the max and sum."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    e = tl.exp(x - tl.max(x, 0))
    tl.store(y_ptr + row * n_cols + cols, e / tl.sum(e, 0), mask=mask)


@triton.jit
def _softmax_online_without_guard(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    """Broken: the online merge shifts by a running max of -inf, so exp(-inf - -inf) = NaN."""
    row = tl.program_id(0)
    m = tl.full((), float("-inf"), tl.float32)
    s = tl.zeros((), tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=float("-inf"))
        m_new = tl.maximum(m, tl.max(x, 0))
        s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), 0)
        m = m_new
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=float("-inf"))
        tl.store(y_ptr + row * n_cols + cols, tl.exp(x - m) / s, mask=cols < n_cols)


@triton.jit
def _softmax_skips_last_column(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    """Broken: an off-by-one store mask never writes the last column."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=float("-inf"))
    e = tl.exp(x - tl.max(x, 0))
    tl.store(y_ptr + row * n_cols + cols, e / tl.sum(e, 0), mask=cols < n_cols - 1)


@triton.jit
def _softmax_backward_without_dot(y_ptr, dy_ptr, dx_ptr, n_cols, BLOCK: tl.constexpr):
    """Broken: ``dx = y * dy``, the row's ``sum(dy * y)`` term lost."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    y = tl.load(y_ptr + row * n_cols + cols, mask=mask, other=0.0)
    dy = tl.load(dy_ptr + row * n_cols + cols, mask=mask, other=0.0)
    tl.store(dx_ptr + row * n_cols + cols, y * dy, mask=mask)


def _run(kernel, x, block, out=None):
    """Launch a broken kernel on contiguous float32 ``x`` into ``out`` (poisoned by default)."""
    out = poison(torch.empty_like(x)) if out is None else out
    kernel[(x.shape[0],)](x, out, x.shape[1], BLOCK=block)
    return out


def _softmax(x, plan):
    """The library's softmax kernels, into a poisoned output."""
    y = poison(torch.empty_like(x))
    _launch_forward(x, y, plans.choose_for(x, plan))
    return y


# ---------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------


def test_rejects_padding_that_joins_the_reduction(device):
    x = torch.randn(4, 100, device=device) - 3.0  # all-negative rows: padding 0 becomes the max
    with pytest.raises(AssertionError, match="relative error"):
        assert_matches(_run(_softmax_padding_not_masked, x, 128), reference.softmax(x), x.dtype)
    assert_matches(_softmax(x, "block"), reference.softmax(x), x.dtype)


def test_rejects_online_merge_without_inf_guard(device):
    x = torch.randn(3, 200, device=device)
    x[:, :70] = float("-inf")  # the first 64-wide chunk is all -inf
    with pytest.raises(AssertionError, match="relative error inf"):
        assert_matches(_run(_softmax_online_without_guard, x, 64), reference.softmax(x), x.dtype)
    assert_matches(_softmax(x, plans.RowPlan("looped", 64, 4)), reference.softmax(x), x.dtype)


def test_poison_exposes_an_unwritten_column_that_a_stale_buffer_hides(device):
    x = torch.randn(4, 100, device=device)
    stale = _softmax(x, "block")  # a buffer still holding the right answer
    # Without poisoning, the checker cannot tell: this is why every test poisons.
    assert_matches(
        _run(_softmax_skips_last_column, x, 128, out=stale), reference.softmax(x), x.dtype
    )
    with pytest.raises(AssertionError, match="relative error inf"):
        assert_matches(_run(_softmax_skips_last_column, x, 128), reference.softmax(x), x.dtype)


def test_rejects_backward_that_loses_the_row_dot_product(device):
    x = torch.randn(4, 100, device=device)
    y = _softmax(x, "block")
    dy = torch.randn_like(x) + 3.0  # a large mean: sum(dy * y) is far from 0
    expected = reference.softmax_backward(y, dy)
    broken = poison(torch.empty_like(x))
    _softmax_backward_without_dot[(4,)](y, dy, broken, 100, BLOCK=128)
    with pytest.raises(AssertionError, match="relative error"):
        assert_matches(broken, expected, x.dtype)
    dx = poison(torch.empty_like(x))
    _launch_backward(y, dy, dx, plans.choose_for(x, "block"))
    assert_matches(dx, expected, x.dtype)


def test_nan_must_match_the_reference_nan_exactly(device):
    x = torch.randn(3, 10, device=device)
    x[1] = float("-inf")  # row 1 is NaN in the reference
    ref = reference.softmax(x)
    y = kp.softmax(x)
    assert_matches(y, ref, x.dtype)
    finite_where_nan = y.clone()
    finite_where_nan[1] = 0.1
    with pytest.raises(AssertionError, match="relative error inf"):
        assert_matches(finite_where_nan, ref, x.dtype)
    nan_where_finite = y.clone()
    nan_where_finite[0, 3] = float("nan")
    with pytest.raises(AssertionError, match="relative error inf"):
        assert_matches(nan_where_finite, ref, x.dtype)


@pytest.mark.parametrize("dtype", list(REL_TOL))
def test_tolerance_edge_and_shape(dtype):
    ref = torch.linspace(1, 2, 64, dtype=torch.float64)
    tol = REL_TOL[dtype]
    assert_matches((ref * (1 + tol / 2)).float(), ref, dtype)
    with pytest.raises(AssertionError, match="relative error"):
        assert_matches((ref * (1 + 2 * tol)).float(), ref, dtype)
    with pytest.raises(AssertionError, match="shape"):
        assert_matches(ref[:-1], ref, dtype)


def test_poison_fills_nan_in_place():
    t = torch.zeros(3, 4, dtype=torch.bfloat16)
    assert poison(t) is t and torch.isnan(t).all()


def test_global_memory_ops_sees_scalar_loads_where_alignment_is_unknown():
    """The same kernel compiles to 2-byte loads with a runtime width, 16-byte with a known one."""
    spec = {
        "module": "test_kp_testing",
        "kernel": "_softmax_padding_not_masked",
        "aligned": ["x_ptr", "y_ptr"],
        "num_warps": 4,
    }
    pointers = {"x_ptr": "*fp16", "y_ptr": "*fp16"}
    runtime, known = global_memory_ops(
        [
            {**spec, "signature": {**pointers, "n_cols": "i32"}, "constexprs": {"BLOCK": 4096}},
            {**spec, "signature": pointers, "constexprs": {"BLOCK": 4096, "n_cols": 4096}},
        ]
    )
    assert "ld.global.b16" in runtime and "ld.global.v4.b32" not in runtime
    assert "ld.global.v4.b32" in known and "ld.global.b16" not in known


def test_global_memory_ops_counts_the_instructions_of_each_opcode():
    """4096 float16 columns over 128 threads are 32 a thread: four 16-byte loads
    where the width is known, 32 two-byte loads where it is not."""
    spec = {
        "module": "test_kp_testing",
        "kernel": "_softmax_padding_not_masked",
        "aligned": ["x_ptr", "y_ptr"],
        "num_warps": 4,
        "counts": True,
    }
    pointers = {"x_ptr": "*fp16", "y_ptr": "*fp16"}
    known = {**spec, "signature": pointers, "constexprs": {"BLOCK": 4096, "n_cols": 4096}}
    runtime, known, uncounted = global_memory_ops(
        [
            {**spec, "signature": {**pointers, "n_cols": "i32"}, "constexprs": {"BLOCK": 4096}},
            known,
            {**known, "counts": False},
        ]
    )
    assert {"ld.global.b16#32", "st.global.b16#32"} <= set(runtime), runtime
    assert {"ld.global.v4.b32#4", "st.global.v4.b32#4"} <= set(known), known
    assert uncounted == [op for op in known if "#" not in op]


def test_captured_launches_compile_as_the_launcher_specialises(monkeypatch):
    """A launch is captured, not run, and compiles as Triton's launcher would
    specialise it: a 16-byte aligned row gives 16-byte loads; the same rows one
    element past the allocation's start give 2-byte loads."""
    base = torch.randn(64 * 1024 + 1, dtype=torch.float16)
    out = poison(torch.empty(64, dtype=torch.float16))
    plan = plans.choose_for(base[:-1].view(64, 1024))
    (aligned, shifted) = (
        captured_launches(monkeypatch, [row_sum], lambda x=x: row_sum._launch_row_sum(x, out, plan))
        for x in (base[:-1].view(64, 1024), base[1:].view(64, 1024))
    )
    assert torch.isnan(out).all()  # nothing ran
    assert len(aligned) == len(shifted) == 1 and aligned[0]["kernel"] == "_block_kernel"
    values = aligned[0]["values"]
    assert values["x_ptr"] == {"pointer": "*fp16", "aligned": True}
    assert shifted[0]["values"]["x_ptr"] == {"pointer": "*fp16", "aligned": False}
    assert values["stride_xm"] == 16 and values["BLOCK"] == plan.block  # 1024: a class
    ops_aligned, ops_shifted = global_memory_ops([aligned[0], shifted[0]])
    assert "ld.global.v4.b32" in ops_aligned and "ld.global.b16" not in ops_aligned
    assert "ld.global.b16" in ops_shifted and "ld.global.v4.b32" not in ops_shifted


def test_tolerance_follows_the_rounding_of_subnormal_outputs():
    """A correctly rounded float16 softmax of a 2^20-wide row passes; an error 3x larger fails.

    Its values near 2^-20 are float16 subnormals, whose rounding alone is several
    times ``REL_TOL[float16]``.
    """
    x = torch.randn(1, 1 << 20, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    ref = torch.softmax(x, -1)
    rounded = ref.half()
    assert reference.rel_error(rounded, ref) > 2 * REL_TOL[torch.float16]
    assert_matches(rounded, ref, torch.float16)
    off = (rounded.double() + 3 * (rounded.double() - ref)).half()
    with pytest.raises(AssertionError, match="relative error"):
        assert_matches(off, ref, torch.float16)


def test_first_batch_of_each_form_finds_the_cooperative_split_at_both_chunks(monkeypatch):
    """131072 float32 columns on 132 SMs: a cooperative split in 2048-column chunks up to
    2 rows, in 8192-column chunks up to 8 (16 programs a row), two launches past that."""
    from kernel_portfolio import plan_rule

    monkeypatch.setattr(plan_rule, "COOP_CHUNK", 2048)
    monkeypatch.setattr(plan_rule, "SPLIT_CHUNK", 8192)
    batches = range(1, 1001)
    assert first_batch_of_each_form(batches, 131072, 4, "split", 132) == [1, 3, 9]
    assert first_batch_of_each_form(batches, 131072, 4, "looped", 132) == [1]
    monkeypatch.setattr(plan_rule, "COOP_CHUNK", 0)
    assert first_batch_of_each_form(batches, 131072, 4, "split", 132) == [1, 9]


def test_first_batch_of_each_form_finds_block_warps_and_extra_forms():
    # 3584 half-precision columns: block warps round up at up to
    # plan_rule.FEW_ROWS_PER_SM rows an SM (1056 rows of 132 SMs); an
    # operator's own size rule (here: past 1000 rows) is one more form.
    batches = [1, 7, 132, 133, 500, 1000, 1001, 1056, 1057, 4096]
    assert first_batch_of_each_form(batches, 3584, 2, "auto", 132) == [1, 1057]
    past = first_batch_of_each_form(batches, 3584, 2, "auto", 132, lambda rows: (rows > 1000,))
    assert past == [1, 1001, 1057]
