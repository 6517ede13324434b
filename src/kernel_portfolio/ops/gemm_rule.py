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


#: Tiles of two accumulators (``matmul.TmaTile.block_n2``), a width that is not
#: a power of two, at the end of the rows of 129 to 512 rows (the 128x144 one
#: also of 513 to 1024): ``_tma_plan`` reaches them only where no
#: power-of-two tile of the row keeps ``WAVE_FILL`` of the SMs busy. Their
#: order is the A/B's
#: (``results/h100-80gb-hbm3/checks/wide-tile-ab-20261206T0937Z.log``, at 256
#: to 1024 rows of the models layer shapes, bfloat16): at every shape where no
#: power-of-two tile filled the waves, the first of these that does ran faster
#: than the plan without them, the 64-row one up to 512 rows and the 128-row
#: ones above. The 128x144 tile runs on the Gluon kernel: in the A/B of the
#: Gluon tiles of two accumulators
#: (``results/h100-80gb-hbm3/checks/gluon-tiles-ab-20261206T1607Z.log``) it
#: ran 384x6144x4096 at 0.844 and 0.798 of cuBLAS (``B`` row-major and
#: transposed), where the Triton kernel's 128x144 tile, then in its place, ran
#: at 0.793 and 0.745. The Triton kernel's 128x192 tile, which ended the row
#: of 1024 before, gave way to the Gluon kernel's (:data:`GLUON_WIDE_TILES`,
#: ahead of it in the row, with its tile count).
WIDE_TILES_FEW = ("64x128+64x64 w4 s6", "128x128+16x64 s5 gluon")

#: Tiles of the warp-specialised Gluon kernel (``matmul.TmaTile.gluon``), at
#: the head of the rows from 257 rows up in place of the Triton kernel's
#: 128x256 and 128x128 tiles. In the A/B
#: (``results/h100-80gb-hbm3/checks/gluon-ws-ab-20261206T1232Z.log``, 256 to
#: 2048 rows of the models layer shapes and three cubes, bfloat16) the 128x256
#: one ran faster than the Triton kernel's 128x256 tiles at every shape from
#: 512 rows up (4096^3: 0.995 of cuBLAS against 0.975 and 0.966), and the
#: 128x128 one, six stages, faster than the Triton kernel's 128x128 tile at
#: four, five and six stages at every shape; at 256 rows of 14336 columns the
#: Triton kernel's 128x256 tile stayed ahead, so the row of 256 keeps it.
#: Between them the 192-row tile of three consumer warpgroups, whose tiles
#: fill the waves at row counts where neither power of two does (768x4096:
#: 128 tiles of 192x128 for 132 SMs, where 128x128 tiles leave a second wave
#: half empty). In the A/B of the three
#: (``results/h100-80gb-hbm3/checks/gluon-tiles-ab-20261206T1421Z.log``: every
#: 32 rows from 160 to 1056 and 1280 to 4096 rows of the four layer shapes,
#: ``B`` row-major and transposed) this order scored a geometric mean of 0.867
#: of cuBLAS over its 264 products against 0.847 for the table without the
#: 192-row tile, and put 142 products under 0.90 of cuBLAS against 167.
GLUON_TILES = ("128x256x64 s3 gluon", "192x128x64 s4 gluon", "128x128x64 s6 gluon")
#: Next, the Gluon kernel's tiles of a second accumulator of 64 columns,
#: 128x192 and 192x192 (cuBLAS's tile at 768x6144): where none of the three
#: fills the waves, these fill them at row counts between their multiples
#: (448 to 512 rows of 6144 columns: 128 tiles of 128x192; 704 to 768 rows:
#: 128 tiles of 192x192), ahead of the Triton tiles that ran there before. In
#: the A/B (``results/h100-80gb-hbm3/checks/gluon-tiles-ab-20261206T1607Z.log``:
#: 13 row counts of 256 to 2048 of the four layer shapes, ``B`` row-major and
#: transposed, bfloat16) this table changed the plan at ten of its 104
#: products, each faster: 448x6144x4096 from 0.72 and 0.74 of cuBLAS to 0.84
#: and 0.81, 768x6144x4096 from 0.72 and 0.70 to 0.84 and 0.79. At 640x14336
#: the 128x192 tile ran at 0.95 where the plan's 192x128 tile (85% of four
#: waves, a third of its last row of tiles empty) ran at 0.67; a table that
#: counts the fill in output elements, not tiles, would take it there, and
#: scored no better over the 104 products.
GLUON_WIDE_TILES = ("128x128+64x64 s4 gluon", "192x128+64x64 s3 gluon")
#: After them, the Triton kernel's tiles that headed these rows before, which
#: may split ``K`` (the Gluon kernel never does): ``_tma_plan`` reaches them
#: where no Gluon tile fills the waves, and takes one where its runs of a
#: long ``K`` do, as before (the ``dB`` of a linear layer at a batch of 65536:
#: 32 tiles of 128x256, ``K`` in four runs of ``LONG_K_RUN``; at 16384, 64
#: tiles of 128x128 in two).
SPLIT_TILES = ("128x256x64 w8 s4 e2", "128x128x64 w4 s4")

#: The Hopper path's plan table: the first row whose ``max_m`` holds the
#: product's ``M`` bucket gives the tiles ``_tma_plan`` chooses between and
#: the most runs ``K`` may split into. Rows, tiles and the two constants below
#: come from ``scripts/gemm_tune.py`` (the sweep's result, kept unpublished as
#: ``results/archive/h100-80gb-hbm3/gemm_tune-20261206T042133Z.json``:
#: its "chosen per bucket" summary: per bucket the row whose planned
#: candidates have the best geometric-mean speed against cuBLAS over the
#: bucket's cells, both dtypes and every (N, K) of the models layer shapes,
#: under the best-scoring constants). The sweep ran on an H100, which has the
#: H200's 132 SMs and tensor cores and less memory bandwidth, as the suites
#: that measure the table did. Up to 64 rows the rows name swapped tiles
#: (``matmul.TmaTile.swap_ab``), which the sweep timed faster than any
#: unswapped tile at most of its cells of 16 to 64 rows, unsplit: no row
#: splits ``K`` short of ``LONG_K_RUN`` any more. The rows of 256 and 512 start with the
#: widest tile, which ``_tma_plan`` takes only where its tiles alone fill the
#: waves (256x14336: 112 tiles of 128x256 for 132 SMs) and otherwise passes
#: over: the fit puts a tile in front of a row where that gains more than
#: ``MERGE_WITHIN`` over the bucket's cells.
TMA_RULES = (
    TmaRule(16, ("16x64x256 w4 s4 sw",), 1),
    TmaRule(32, ("16x128x128 w4 s6 sw", "16x64x256 w4 s4 sw"), 1),
    TmaRule(64, ("64x64x256 w4 s3", "32x64x256 w4 s4 sw"), 1),
    TmaRule(128, ("64x128x64 w4 s8", "64x64x128 w4 s6"), 1),
    TmaRule(256, ("128x256x64 w8 s4 e2", "64x128x64 w4 s8", *WIDE_TILES_FEW), 1),
    TmaRule(
        512,
        (*GLUON_TILES, *GLUON_WIDE_TILES, *SPLIT_TILES, "64x128x64 w4 s8", *WIDE_TILES_FEW),
        1,
    ),
    TmaRule(1024, (*GLUON_TILES, *GLUON_WIDE_TILES, *SPLIT_TILES, WIDE_TILES_FEW[-1]), 1),
    TmaRule(8192, (*GLUON_TILES, *GLUON_WIDE_TILES, *SPLIT_TILES), 1),
    TmaRule(None, GLUON_TILES[:1], 1),
)

#: Least share of the SMs' time a tile's waves must keep busy (its output
#: tiles times its split-K runs, over whole waves of one item an SM) for
#: ``_split_k`` to stop adding runs, and for ``_tma_plan`` to take the tile
#: before the next tile of its row. A 1024x6144 output is 192 tiles of
#: 128x256 for 132 SMs, two waves 73% busy, and 384 tiles of 128x128, three
#: waves 97% busy. From ``scripts/gemm_tune.py`` (the sweep above: the
#: summary's fitted constants, every combination of its ``FIT_GRID`` scored on
#: the measured cells).
WAVE_FILL = 0.8

#: The one-wave forms of Gluon tiles (``matmul._one_wave``): where a launch's
#: tiles fit one wave, no program has a next tile whose ``K`` loop its stores
#: could overlap, and the tile's form with a stage more and its epilogue in
#: halves through one buffer (``matmul.TmaTile.epilogue_split``) runs in its
#: place. In the A/B
#: (``results/h100-80gb-hbm3/checks/gluon-stages-ab-20261206T2044Z.log``: the
#: plan's products that run one of these tiles at 256 to 4096 rows, 128
#: apart, and 672 to 736, of the four models layer shapes, and three cubes,
#: bfloat16, ``B`` row-major and transposed) every launch of one wave ran
#: faster in the new form but one, level at 0.997 (768 x 6144, 128 tiles of
#: 192x192: 1.16 times as fast); over two waves the 192x128 tile's form lost
#: at some products, and from twelve waves up the 128x256 tile's form lost at
#: every one (8192 cubed, sixteen waves: 0.98).
ONE_WAVE_TILES = {
    "128x256x64 s3 gluon": "128x256x64 s4 gluon e2",
    "192x128x64 s4 gluon": "192x128x64 s5 gluon e2",
    "192x128+64x64 s3 gluon": "192x128+64x64 s4 gluon e2",
    "128x128+64x64 s4 gluon": "128x128+64x64 s5 gluon e2",
}

#: Least share of the SMs' time the chosen tile's waves must keep busy for
#: ``_column_split`` to leave the plan whole: below it, a product of several
#: waves runs its tile over the columns of its full waves and the remaining
#: columns as a second product with a plan of its own. In the A/B
#: (``results/h100-80gb-hbm3/checks/column-split-ab-20261206T1934Z.log``: 256
#: to 3712 rows, 128 apart, of the four models layer shapes wherever a split
#: differs, bfloat16, ``B`` row-major and transposed) the split ran faster at
#: 90 of its 92 products, whose unsplit waves were 79% to 95% busy (1024 x
#: 14336: 1.08 times as fast), and 1-2% slower at 384 x 14336.
COLUMN_SPLIT_FILL = 0.96

#: Split-K (``_split_k``): the shortest run of ``K`` worth splitting off. From
#: ``scripts/gemm_tune.py`` (the sweep above: the summary's fitted constants;
#: the sweep times every tile at every count up to its ``MAX_SPLIT`` that
#: fills the waves better than fewer runs do, the counts the rule can take).
SPLIT_K_MIN_RUN = 512

#: Split-K whatever the row's ``max_split``: up to :data:`LONG_K_SPLIT` runs of
#: at least :data:`LONG_K_RUN`. Each run past the first costs a float32
#: partial of the output, and over a short ``K`` that costs more than the idle
#: SMs: from 128 rows up the sweep's forward cells (``K`` of 4096 and 14336)
#: ran best unsplit. Over a long ``K`` the partials are cheap against the
#: loop they share out: the ``dB`` of a linear layer at a batch of 65536
#: (``1024 x 1024`` from ``K = 65536``, 64 tiles for 132 SMs) ran at 0.65-0.67x
#: of cuBLAS unsplit (``results/h200/checks/gemm-tune-20261201T0416Z.log``).
#: A run of 8192 splits no product of the sweep's forward cells (the longest
#: ``K`` is 14336) and splits that ``dB`` in four.
LONG_K_RUN = 8192
LONG_K_SPLIT = 4

#: ``tl.dot``'s input precision for float32 operands without ``allow_tf32``
#: (the pointer path). ``"tf32x3"`` splits each operand into a TF32 value and
#: a TF32 remainder and sums three tensor-core products in float32 (the
#: remainders' product, below float32's rounding, is left out); ``"ieee"``
#: multiplies in full float32 on the FMA units. ``scripts/gemm_tune.py`` times
#: both at 4096^3 with each one's error against float64 (the sweep above:
#: tf32x3 ran faster than cuBLAS's float32 product and nearer float64 than it,
#: ieee slower at cuBLAS's error).
#: An infinite operand makes NaN in place of infinity (its remainder is
#: ``inf - inf``).
FP32_PRECISION = "tf32x3"
