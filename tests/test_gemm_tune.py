"""``scripts/gemm_tune.py``: its grid, its fit of the plan table, and a dry run.

CPU tests of the pure logic: the timed split-K counts, the fit recovering a
plan table planted in synthetic ratios (and the code it prints), and an
interpreter dry run (tiny sizes, ``TRITON_INTERPRET=1``) showing that the
script checks every implementation, writes a schema-valid result and log,
summarises it again from the file, and still writes a valid file when its
budget is spent before the first cell.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import gemm_tune  # noqa: E402

from kernel_portfolio.contracts import interpreter_enabled  # noqa: E402
from kernel_portfolio.ops import matmul as mm  # noqa: E402
from kernel_portfolio.results import load  # noqa: E402

SM = 132
FEW_ROWS_TILE = "64x128x128 w4 s4"
WIDE, NARROW = "128x256x64 w8 s3", "128x128x64 w8 s4"


def test_split_counts_fit_two_waves_and_long_runs():
    tile = mm._TILES_BY_NAME[FEW_ROWS_TILE]
    # 32 output tiles: up to 8 runs fit two waves; runs of 4096 / 8 = 512 >= 256.
    assert gemm_tune.split_counts(tile, 64, 4096, 4096, SM, 256) == list(range(1, 9))
    # 112 tiles: two runs are 224 items, within two waves; three are not.
    assert gemm_tune.split_counts(tile, 64, 14336, 4096, SM, 256) == [1, 2]
    assert gemm_tune.split_counts(tile, 64, 4096, 700, SM, 256) == [1, 2]  # runs of 350
    unsplit = next(t for t in mm.TMA_TILES if not t.splits)
    assert gemm_tune.split_counts(unsplit, 64, 4096, 4096, SM, 256) == [1]


def _planted(tile, split: int, m: int, n: int) -> float:
    """A synthetic ratio: a tile's rate for its rows times the share of SM time its waves fill.

    The few-rows tile runs best up to 128 rows; past that the wide tile, then
    the narrow one, the rest far behind. Splitting costs nothing here, so the
    best split fills the SMs best.
    """
    few = m <= 128
    rate = {FEW_ROWS_TILE: 0.9 if few else 0.4, WIDE: 0.5 if few else 0.95}
    rate[NARROW] = 0.5 if few else 0.9
    items = math.ceil(m / tile.block_m) * math.ceil(n / tile.block_n) * split
    return rate.get(tile.name, 0.3) * items / (math.ceil(items / SM) * SM)


def _planted_table() -> dict:
    table = {}
    for n, k in gemm_tune.MODEL_NK:
        for m in (16, 64, 128, 256, 1024, 4096):
            ratios = {}
            for tile in mm.TMA_TILES:
                for split in gemm_tune.split_counts(tile, m, n, k, SM, 256):
                    ratios[gemm_tune.tile_impl(tile, split)] = _planted(tile, split, m, n)
            table[(m, n, k, "bfloat16")] = ratios
    return table


def test_fit_recovers_a_planted_table():
    best = gemm_tune.fit(_planted_table(), SM)
    rows = {bucket: row for bucket, (row, _, _) in best["rows"].items()}
    assert rows[16] == rows[64] == rows[128] == (FEW_ROWS_TILE,)
    # Past 128 rows the wide tile leads; at 1024 rows (1024 x 6144: two waves
    # of 128x256 tiles 73% full) the narrow one must follow it.
    assert all(row[0] == WIDE for bucket, row in rows.items() if bucket > 128)
    assert rows[1024] == (WIDE, NARROW)
    # Splits fill the SMs at no cost: as many as one wave holds (32 tiles: 4).
    assert best["consts"]["SPLIT_K_MAX"] == 4
    margin = {bucket: (score, other) for bucket, (_, score, other) in best["rows"].items()}
    assert all(other is None or other <= score for score, other in margin.values())


def test_table_code_merges_buckets_and_ends_open():
    best = {
        "rows": {16: (("a",), 1, None), 64: (("a",), 1, None), 256: (("b", "c"), 1, None)},
        "consts": {"WAVE_FILL": 0.9},
    }
    assert gemm_tune.table_code(best) == [
        "TMA_RULES = (",
        '    TmaRule(64, ("a",)),',
        '    TmaRule(None, ("b", "c")),',
        ")",
        "WAVE_FILL = 0.9",
    ]


def test_rule_constants_are_restored():
    saved = (mm.WAVE_FILL, mm.TMA_RULES)
    with gemm_tune.rule_constants(WAVE_FILL=0.5, TMA_RULES=()):
        assert mm.WAVE_FILL == 0.5 and mm.TMA_RULES == ()
    assert saved == (mm.WAVE_FILL, mm.TMA_RULES)


@pytest.mark.interpreter
@pytest.mark.skipif(not interpreter_enabled(), reason="the dry run needs TRITON_INTERPRET=1")
def test_dry_run_writes_a_valid_result_and_summary(tmp_path, capsys):
    assert gemm_tune.main(["--dry-run", "--out", str(tmp_path)]) == 0
    result = load(tmp_path / "gemm_tune.json")
    cases = result.data["cases"]
    assert len(cases) == len(gemm_tune.cells(gemm_tune.DRY, 0))
    for case in cases:
        failed = {n: r["reason"] for n, r in case["impls"].items() if r["status"] != "ok"}
        assert not failed, (case["id"], failed)
        assert {r["impl"] for r in case["ratios"]} == {
            n for n in case["impls"] if "cublas" not in n
        }
    splits = [n for c in cases for n in c["impls"] if n.startswith("tile ") and "split 1" not in n]
    assert splits  # the dry grid times split-K too
    log = (tmp_path / "gemm_tune.log").read_text()
    assert log.startswith("$ python") and "== chosen per bucket" in log and "TMA_RULES = (" in log
    capsys.readouterr()
    assert gemm_tune.main(["--summary", str(tmp_path / "gemm_tune.json")]) == 0
    assert "TMA_RULES = (" in capsys.readouterr().out
    # Out of time before the first cell: every cell skipped, the file still valid.
    assert gemm_tune.main(["--dry-run", "--out", str(tmp_path), "--budget-s", "0"]) == 0
    skipped = load(tmp_path / "gemm_tune.json").data["cases"]
    assert all(r["status"] == "skipped" for c in skipped for r in c["impls"].values())


@pytest.mark.interpreter
@pytest.mark.skipif(not interpreter_enabled(), reason="the dry run needs TRITON_INTERPRET=1")
def test_a_lost_cuda_context_stops_the_run_and_saves_it(tmp_path, monkeypatch):
    """After an illegal memory access nothing more can run: the rest is skipped, the file valid."""
    launch = mm._launch_matmul

    def faulting(a, b, out, **kwargs):
        if kwargs.get("path") == "tma":
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return launch(a, b, out, **kwargs)

    monkeypatch.setattr(mm, "_launch_matmul", faulting)
    assert gemm_tune.main(["--dry-run", "--out", str(tmp_path)]) == 0
    cases = load(tmp_path / "gemm_tune.json").data["cases"]
    culprit = next(i for i, c in enumerate(cases) if c["mode"] == "fwd" and c["dtype"] != "float32")
    assert all(r["status"] == "ok" for c in cases[:culprit] for r in c["impls"].values())
    statuses = [r["status"] for r in cases[culprit]["impls"].values()]
    assert statuses.count("failed") == 1 and set(statuses) == {"failed", "skipped"}
    assert all(r["status"] == "skipped" for c in cases[culprit + 1 :] for r in c["impls"].values())
    assert (
        "stopping: not run: the CUDA context was lost in"
        in (tmp_path / "gemm_tune.log").read_text()
    )
