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

from kernel_portfolio.bench import suites  # noqa: E402
from kernel_portfolio.contracts import interpreter_enabled  # noqa: E402
from kernel_portfolio.ops import gemm_rule  # noqa: E402
from kernel_portfolio.ops import matmul as mm  # noqa: E402
from kernel_portfolio.results import load  # noqa: E402

SM = 132
FEW_ROWS_TILE = "64x128x128 w4 s4"
WIDE, NARROW = "128x256x64 w8 s3", "128x128x64 w8 s4"


def test_split_counts_are_those_the_rule_can_take():
    tile = mm._TILES_BY_NAME[FEW_ROWS_TILE]
    # 32 output tiles: 1 to 4 runs fill one wave better each time (24% to 97%);
    # 5 to 8 runs fill two waves no better than 4 runs fill one.
    assert gemm_tune.split_counts(tile, 64, 4096, 4096, SM, 256) == [1, 2, 3, 4]
    # 112 tiles fill 85% of every number of waves up to six: 784 items (seven
    # runs) fill 99% of six.
    assert gemm_tune.split_counts(tile, 64, 14336, 4096, SM, 256) == [1, 7]
    assert gemm_tune.split_counts(tile, 64, 4096, 700, SM, 256) == [1, 2]  # runs of 350
    unsplit = next(t for t in mm.TMA_TILES if not t.splits)
    assert gemm_tune.split_counts(unsplit, 64, 4096, 4096, SM, 256) == [1]
    # Whatever the constants, the rule's count is one of them.
    for consts in ({"SPLIT_K_MIN_RUN": 256, "WAVE_FILL": w} for w in (0.8, 1.01)):
        with gemm_tune.rule_constants(**consts):
            for m, n, k in ((64, 4096, 4096), (384, 4096, 4096), (200, 14336, 4096)):
                tiles = math.ceil(m / tile.block_m) * math.ceil(n / tile.tile_n)
                runs = mm._split_k(tile, tiles, k, SM, gemm_tune.MAX_SPLIT)
                assert runs in gemm_tune.split_counts(tile, m, n, k, SM, 256), (m, n, k, consts)


def test_class_cells_are_apart_from_the_suite_and_the_heldout_scan():
    """The fit's cells between the suite's batches and at other models' layers.

    Every layer shape is timed at every batch of ``BETWEEN_M`` in
    ``CLASS_DTYPE``, each cell once; none of those batches or layers is the
    suite's or a shape of ``scripts/heldout_scan.py``, whose scan tests the fit
    where it has not looked, and no batch is a whole number of 64-row tiles.
    """
    import heldout_scan

    ids = [cell.id for cell in gemm_tune.cells(gemm_tune.FULL, 0)]
    assert len(ids) == len(set(ids))
    layers = [*gemm_tune.MODEL_NK, *gemm_tune.OTHER_NK]
    for n, k in layers:
        for m in gemm_tune.BETWEEN_M:
            assert f"matmul/fwd/{m}x{n}x{k}/{gemm_tune.CLASS_DTYPE}" in ids
    assert not set(gemm_tune.OTHER_NK) & {*gemm_tune.MODEL_NK, *heldout_scan.GEMM_LAYERS}
    suite_rows = {*gemm_tune.MODEL_M, *suites.GEMM_ROWS}
    assert not set(gemm_tune.BETWEEN_M) & {*suite_rows, *heldout_scan.GEMM_ROWS}
    assert all(m % 64 for m in gemm_tune.BETWEEN_M)  # a last row of tiles part-empty


def test_under_target_names_the_fastest_tile_and_counts_what_the_table_could_fix():
    target = gemm_tune.target_for(256)
    table = {
        (256, 4096, 4096, "bfloat16"): {"ours": 0.99, "tile a split 1": 0.5},  # met
        (256, 6144, 4096, "bfloat16"): {"ours": 0.7, "tile a split 1": 0.8, "tile b split 2": 0.95},
        (384, 6144, 4096, "bfloat16"): {"ours": 0.7, "tile a split 1": 0.8},
        (16, 6144, 4096, "bfloat16"): {"ours": 0.5, "tile a split 1": 0.99},  # no target
    }
    assert target is not None and 0.8 < target <= 0.95
    lines = gemm_tune.under_target(table)
    assert lines[1:] == [
        "  256x6144x4096 bfloat16: ours 0.700, fastest tile 0.950 (b split 2)",
        "  384x6144x4096 bfloat16: ours 0.700, fastest tile 0.800 (a split 1)",
        "2 cells under the target; a timed tile meets it at 1 of them",
    ]


def test_summary_tables_the_other_layers():
    """The summary's table of the other models' layers: a row a batch, a miss starred."""
    (n, k), cells = next(iter(gemm_tune.OTHER_NK)), []
    for m, ours in ((64, 0.8), (1024, 0.99)):
        ratios = [{"impl": "ours", "median": ours}, {"impl": "tile x split 1", "median": 1.0}]
        cells.append({"mode": "fwd", "dtype": "bfloat16", "shape": [m, n, k], "ratios": ratios})
    lines = gemm_tune.summary({"env": {"sm_count": SM}, "cases": cells})
    header = next(i for i, line in enumerate(lines) if f"{n}x{k} bf16" in line)
    assert lines[header + 1].split() == ["64", "0.800*", *["-"] * (len(gemm_tune.OTHER_NK) - 1)]
    assert lines[header + 2].split()[:2] == ["1024", "0.990"]


def _planted(tile, split: int, m: int, n: int) -> float:
    """A synthetic ratio: a tile's rate for its rows times the share of SM time its waves fill.

    The few-rows tile runs best up to 128 rows; past that the wide tile, then
    the narrow one, the rest far behind. Splitting ``K`` costs nothing up to
    128 rows (the product reads ``B`` once either way) and a tenth of the
    rate a run past them.
    """
    few = m <= 128
    rate = {FEW_ROWS_TILE: 0.9 if few else 0.4, WIDE: 0.5 if few else 0.95}
    rate[NARROW] = 0.5 if few else 0.9
    items = math.ceil(m / tile.block_m) * math.ceil(n / tile.tile_n) * split
    cost = 1.0 if few else 0.9 ** (split - 1)
    return rate.get(tile.name, 0.3) * cost * items / (math.ceil(items / SM) * SM)


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
    # Up to 128 rows the few-rows tile, split as far as it fills the SMs better
    # (32 tiles: four runs fill a wave).
    assert all(rows[b][0] == (FEW_ROWS_TILE,) and rows[b][1] >= 4 for b in (16, 64, 128))
    # Past 128 rows the wide tile leads; at 1024 rows (1024 x 6144: two waves
    # of 128x256 tiles 73% full) the narrow one must follow it, unsplit (a
    # run costs more there than the narrow tile's rate).
    assert all(row[0][0] == WIDE for bucket, row in rows.items() if bucket > 128)
    assert rows[1024] == ((WIDE, NARROW), 1)
    margin = {bucket: (score, other) for bucket, (_, score, other) in best["rows"].items()}
    assert all(other is None or other <= score for score, other in margin.values())


def test_held_out_scores_the_fit_on_shapes_it_did_not_see():
    """A planted rule that holds for every layer shape scores about as well unseen as seen.

    When one shape's fastest tiles differ (there the few-rows tile planted
    slower, the narrow one faster), a fit that never saw it picks the wrong
    tile for it, and the held-out score falls below the fit's own.
    """
    table = _planted_table()
    best = gemm_tune.fit(table, SM)
    score, cells = gemm_tune.held_out(table, SM, best["consts"])
    assert cells == len(table) and 0.99 * best["gmean"] <= score <= best["gmean"]

    odd = gemm_tune.MODEL_NK[0]
    scale = {FEW_ROWS_TILE: 0.3, NARROW: 3.0}
    for (_, n, k, _), ratios in table.items():
        if (n, k) == odd:
            for impl in ratios:
                name = impl.removeprefix("tile ").rsplit(" split ", 1)[0]
                ratios[impl] *= scale.get(name, 1.0)
    best = gemm_tune.fit(table, SM)
    score, _ = gemm_tune.held_out(table, SM, best["consts"])
    assert score < 0.95 * best["gmean"]
    assert gemm_tune.held_out({key: table[key] for key in list(table)[:1]}, SM, {}) is None


def test_a_wide_tile_goes_in_front_where_it_alone_fills_the_waves(monkeypatch):
    """At 256 rows the wide tile fills the SMs only where the output is wide.

    Planted: the wide tile at the best rate, a 64-row tile behind it; each
    times the share of SM time its waves fill. At 256x4096 the wide tile's 32
    output tiles leave most SMs idle and the 64-row tile wins; at 256x14336
    its 112 tiles fill one wave 85%. With only the best single tile allowed
    first, the row starts with the 64-row tile, and the wide tile must come in
    front of it.
    """
    monkeypatch.setattr(gemm_tune, "FIRST_TILES", 1)
    rate = {WIDE: 0.95, "64x128x64 w4 s8": 0.8}
    members = []
    for n, k in gemm_tune.MODEL_NK:
        ratios = {}
        for tile in mm.TMA_TILES:
            items = math.ceil(256 / tile.block_m) * math.ceil(n / tile.tile_n)
            fill = items / (math.ceil(items / SM) * SM)
            ratios[gemm_tune.tile_impl(tile, 1)] = rate.get(tile.name, 0.3) * fill
        members.append((ratios, 256, n, k))
    with gemm_tune.rule_constants(WAVE_FILL=0.8, SPLIT_K_MIN_RUN=512):
        ((row, score, _),) = gemm_tune._choose_rows({256: members}, SM).values()
        assert row[0][:2] == (WIDE, "64x128x64 w4 s8")
        assert score > (1 + gemm_tune.MERGE_WITHIN) * gemm_tune.row_score(
            (row[0][1:], row[1]), members, SM
        )


def test_table_code_merges_buckets_and_ends_open():
    best = {
        "rows": {
            16: ((("a",), 4), 1, None),
            64: ((("a",), 4), 1, None),
            256: ((("b", "c"), 1), 1, None),
        },
        "consts": {"WAVE_FILL": 0.9},
    }
    assert gemm_tune.table_code(best) == [
        "TMA_RULES = (",
        '    TmaRule(64, ("a",), 4),',
        '    TmaRule(None, ("b", "c"), 1),',
        ")",
        "WAVE_FILL = 0.9",
    ]


def test_rule_constants_are_restored():
    saved = (gemm_rule.WAVE_FILL, gemm_rule.TMA_RULES)
    with gemm_tune.rule_constants(WAVE_FILL=0.5, TMA_RULES=()):
        assert gemm_rule.WAVE_FILL == 0.5 and gemm_rule.TMA_RULES == ()
    assert saved == (gemm_rule.WAVE_FILL, gemm_rule.TMA_RULES)


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
    assert "== under the target" in log and " cells under the target; " in log
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
