"""The held-out scan's shapes: apart from the suites', unaligned widths beside neighbours."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import heldout_scan  # noqa: E402

from kernel_portfolio.bench import suites  # noqa: E402


def test_no_held_out_shape_is_a_suite_shape():
    # The scan tests the suites' assumption that a shape between two of theirs
    # behaves like them: a shape the suites hold would test nothing. (An
    # aligned neighbour, there for comparison, may be a suite's shape.)
    widths = {*heldout_scan.VOCAB, *heldout_scan.HIDDEN}
    held = {
        (c.op, c.shape)
        for c in heldout_scan.heldout_cases()
        if (c.op == "matmul" and c.shape[1:] in heldout_scan.GEMM_LAYERS)
        or (c.op != "matmul" and c.shape[1] in widths)
    }
    assert len(held) > 100
    suite_shapes = {(c.op, c.shape) for s in suites.SUITES.values() for c in s.cases}
    assert not held & suite_shapes
    assert not set(heldout_scan.GEMM_LAYERS) & set(suites.GEMM_LAYERS)
    assert not set(heldout_scan.GEMM_ROWS) & set(suites.GEMM_ROWS)
    assert not widths & {*suites.VOCAB_WIDTHS, *suites.HIDDEN_WIDTHS}


def test_every_unaligned_width_has_its_aligned_neighbour_at_its_rows():
    # The aligned-neighbour target compares a width with N rounded down to a
    # multiple of 8 in the same run; without the neighbour it is not judged.
    # The row sweep of one width (1 to 8192 rows) is about rows, not alignment.
    cases = heldout_scan.heldout_cases()
    have = {(c.op, c.mode, c.shape) for c in cases}
    paired = [c for c in cases if c.op != "matmul" and c.shape[0] in (2048, 4096)]
    unaligned = [c for c in paired if c.shape[1] % 8]
    assert len(unaligned) >= len([n for n in heldout_scan.VOCAB if n % 8])
    for c in unaligned:
        m, n = c.shape
        assert (c.op, c.mode, (m, n // 8 * 8)) in have, c.id


def test_the_scan_covers_every_remainder_and_the_row_classes():
    # Alignment: every remainder of a vocabulary width over 8. Rows against
    # SMs: one row, fewer rows than SMs, two an SM, many waves. M against
    # tiles: GEMM rows under, at and past a 128-row tile and a wave of them.
    assert {n % 8 for n in heldout_scan.VOCAB} == set(range(8))
    assert {1, 77, 264, 8192} <= set(heldout_scan.ROWS)
    assert min(heldout_scan.GEMM_ROWS) < 64 and max(heldout_scan.GEMM_ROWS) > 4096
    suite = suites.Suite("heldout", "test", tuple(heldout_scan.heldout_cases()))
    assert len(suite.cases) == len({c.id for c in suite.cases})
