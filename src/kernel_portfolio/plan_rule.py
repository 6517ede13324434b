"""The constants of the ``auto`` row-plan rule (:func:`kernel_portfolio.plans.choose`).

Only numbers live here (the logic that reads them stays in ``plans``), so that
fitting them never touches :mod:`kernel_portfolio.plans`: the chunk-rules sweep forces
its plans through ``plans.py`` and hashes it, and the fitted constants must not
make the sweep's own results stale. Benchmarks of the row operators do depend
on this file, since ``auto`` decides what they run.

The values (all but the block pieces' two and the full block's two, which
the sweep does not reach and A/B scripts measured) are the rule that
``scripts/chunk_rules_fit.py`` fitted on the first H200 run of the
chunk-rules sweep and scored on the second (whether refitting on the second
gives the same rule is recorded in the fit)
(``results/h200/chunk_rules_fit.json``; the case study "Chunk rules for wide
rows" shows the fit and its held-out regret). Thresholds are in bytes so that
one rule serves every dtype; the sweep measured float16, so its column counts
are half these. A warp count of ``None`` means "derived from the columns a
program loads and the dtype" by :func:`kernel_portfolio.plans.warps_for`
(about two 16-byte vectors per thread): the block plan keeps it, since the
fitted 16 warps is what it derives at the swept widths (8192 and 16384
half-precision columns) and the sweep says nothing about narrower rows.
"""

from __future__ import annotations

#: ``split`` first, when there are few rows and each is wide:
#: ``n_rows <= SPLIT_ROWS_PER_SM * sm_count`` and ``n_cols * elem_bytes > SPLIT_MIN_BYTES``.
SPLIT_ROWS_PER_SM = 0.5
SPLIT_MIN_BYTES = 32 * 1024
#: Chunk width (elements) and warps of a ``split`` plan.
SPLIT_CHUNK = 8192
SPLIT_WARPS: int | None = 16
#: ... unless a program a ``COOP_CHUNK`` chunk over all rows fits the SMs
#: (``n_rows * ceil(n_cols / COOP_CHUNK) <= sm_count``; 0: never): then chunks
#: of ``COOP_CHUNK`` with ``COOP_WARPS``, one a program, which the softmax
#: forward runs as one cooperative launch (``softmax._cooperative``).
COOP_CHUNK = 4096
COOP_WARPS: int | None = 8
#: Else ``block`` (one program holds the row in registers) when the row's
#: power-of-two width times ``elem_bytes`` is at most ``MAX_BLOCK_BYTES``:
#: 16384 half-precision elements.
MAX_BLOCK_BYTES = 32 * 1024
BLOCK_WARPS: int | None = None
#: A block plan of at most ``FEW_ROWS_PER_SM * sm_count`` rows rounds its
#: derived warps up (``plans.warps_for``): with a few rows an SM, a row's
#: warps are most of the loads in flight. Not fitted by the sweep (its rows
#: are thousands): ``scripts/rows_warps_ab.py`` timed the softmax, RMSNorm
#: and residual RMSNorm forwards at 133 to 1584 rows, and rounding up ran
#: faster on the geometric mean at every row count, never slower through 396
#: rows and by a few percent at most a width beyond
#: (``results/h100-80gb-hbm3/checks/rows-warps-ab-20261207T1049Z.log``).
FEW_ROWS_PER_SM = 8
#: ... or when that width times ``elem_bytes`` is at most ``FULL_BLOCK_MAX_BYTES``
#: and the row fills at least ``FULL_BLOCK_MIN_FILL`` of it (a vocabulary of
#: 32000 half-precision columns fills 98% of 32768): a looped plan reads such a
#: row twice, a block plan once. Not fitted by the chunk-rules sweep (it has no
#: width between 16384 and 32769): ``scripts/wide_block_ab.py`` measured it on
#: an H100 (``results/h100-80gb-hbm3/checks/wide-block-ab-20261205T2140Z.log``).
#: At 32000 to 32768 columns and 1024 to 16384 rows the block plan beat the
#: looped one on every operator timed (softmax forward 3-9%, forward and
#: backward 3-8%, RMSNorm forward 21-25%, residual forward 12-15%); at 20000
#: and 24576 columns (61% and 75% full) it lost up to 20% on the softmax, and
#: at 30522 (93%) it lost up to 3% on the residual forward. The RMSNorm
#: backward walks such a row in chunks whatever the plan (``rms_norm._backward``:
#: as a block it ran 2.4-3.8 times slower).
FULL_BLOCK_MAX_BYTES = 64 * 1024
FULL_BLOCK_MIN_FILL = 15 / 16
#: A ``block`` plan holds a row just past a power of two as a main block and a
#: small tail (:func:`kernel_portfolio.plans.block_pieces`) when its block has
#: at least ``PIECE_MIN_BLOCK`` columns and the tail is at most
#: ``1 / PIECE_TAIL_DIVISOR`` of the block (0: never). Not fitted by the
#: chunk-rules sweep (its widths are powers of two or wider than a block):
#: ``scripts/block_pieces_ab.py`` measured it on the H200
#: (``results/h200/checks/block-pieces-ab-20261201T2134Z.log``). Tails of 8
#: columns won with blocks of 4096 to 16384 (softmax forward at 4104 columns
#: 61% -> 83% of copy, the RMSNorm backward 49% -> 68%); tails of 64 and 256
#: in a block of 8192 lost 7-10 points on the RMSNorm and row-sum forwards,
#: and 1024 + 8 lost on the RMSNorm backward: so blocks from 4096 columns,
#: tails of at most 8, 16 and 32 columns in blocks of 4096, 8192 and 16384.
PIECE_MIN_BLOCK = 4096
PIECE_TAIL_DIVISOR = 512
#: Else ``looped``: rows of at most ``NARROW_MAX_BYTES`` take the narrow chunk
#: and warps, wider rows the wide ones (0: every row is wide).
NARROW_MAX_BYTES = 32769 * 2
NARROW_CHUNK = 8192
NARROW_WARPS: int | None = 8
WIDE_CHUNK = 16384
WIDE_WARPS: int | None = 16
