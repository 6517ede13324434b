"""The constants of the Hopper GEMM plan (:func:`kernel_portfolio.ops.matmul._tma_plan`).

Only the table and numbers live here (the logic that reads them and the tiles
they name stay in :mod:`kernel_portfolio.ops.matmul`), so that fitting them
never touches ``matmul.py``: the tuning sweep (``scripts/gemm_tune.py``)
forces its tiles and split-K counts through ``matmul.py`` and hashes it, and
the fitted constants must not make the sweep's own result stale. Benchmarks
of ``matmul`` do depend on this file, since it decides what they run. The
row plans have the same split (:mod:`kernel_portfolio.plan_rule`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TmaRule:
    """A row of :data:`TMA_RULES`: the tiles for an ``M`` bucket, and how far ``K`` may split.

    Attributes:
        max_m: The largest ``M`` bucket (``matmul._bucket``: ``M`` rounded up
            to a power of two) of the row; ``None`` for the last row, every
            larger bucket.
        tiles: Names of ``matmul.TMA_TILES`` entries (``TmaTile.name``), in
            order of preference.
        max_split: The most runs ``K`` may split into (``matmul._split_k``);
            1 never splits.
    """

    max_m: int | None
    tiles: tuple[str, ...]
    max_split: int = 1


#: The Hopper path's plan table: the first row whose ``max_m`` holds the
#: product's ``M`` bucket gives the tiles ``_tma_plan`` chooses between and
#: the most runs ``K`` may split into. Rows, tiles and the two constants below
#: come from ``scripts/gemm_tune.py`` (``results/h200/gemm_tune.json``, its
#: "chosen per bucket" summary: per bucket the row whose planned candidates
#: have the best geometric-mean speed against cuBLAS over the bucket's cells,
#: both dtypes and every (N, K) of the models layer shapes, under the
#: best-scoring constants). Until that run the rows are reasoned from the plan
#: arithmetic: up to 128 rows the product reads ``B`` once and computes
#: little, and a 64-row tile gives twice the 128-row tile's count (split-K
#: the rest); at 256 rows a 128x128 tile keeps two warpgroups busy; past that
#: the widest tile that fills the SMs (:data:`WAVE_FILL`), else the narrower one.
TMA_RULES = (
    TmaRule(128, ("64x128x128 w4 s4",), 4),
    TmaRule(256, ("128x128x64 w8 s4",), 4),
    TmaRule(None, ("128x256x64 w8 s3", "128x128x64 w8 s4"), 4),
)

#: Least share of the SMs' time a tile's waves must keep busy (its output
#: tiles times its split-K runs, over whole waves of one item an SM) for
#: ``_split_k`` to stop adding runs, and for ``_tma_plan`` to take the tile
#: before the next tile of its row. A 1024x6144 output is 192 tiles of
#: 128x256 for 132 SMs, two waves 73% busy, and 384 tiles of 128x128, three
#: waves 97% busy. From ``scripts/gemm_tune.py`` (``results/h200/gemm_tune.json``:
#: the summary's fitted constants, every combination of its ``FIT_GRID``
#: scored on the measured cells).
WAVE_FILL = 0.9

#: Split-K (``_split_k``): the shortest run of ``K`` worth splitting off. From
#: ``scripts/gemm_tune.py`` (``results/h200/gemm_tune.json``: the summary's
#: fitted constants; the sweep times every tile at every count up to its
#: ``MAX_SPLIT`` that fills the waves better than fewer runs do, the counts
#: the rule can take).
SPLIT_K_MIN_RUN = 1024

#: ``tl.dot``'s input precision for float32 operands without ``allow_tf32``
#: (the pointer path): ``"ieee"`` multiplies in full float32 on the FMA
#: units. ``scripts/gemm_tune.py`` times it against ``"tf32x3"`` (each
#: operand split into a TF32 value and a TF32 remainder, three tensor-core
#: products, float32 accumulation) at 4096^3 with each one's error against
#: float64 (``results/h200/gemm_tune.json``).
FP32_PRECISION = "ieee"
