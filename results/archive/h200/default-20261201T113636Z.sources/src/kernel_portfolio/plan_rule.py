"""The constants of the ``auto`` row-plan rule (:func:`kernel_portfolio.plans.choose`).

Only numbers live here (the logic that reads them stays in ``plans``), so that
fitting them never touches :mod:`kernel_portfolio.plans`: the chunk-rules sweep forces
its plans through ``plans.py`` and hashes it, and the fitted constants must not
make the sweep's own results stale. Benchmarks of the row operators do depend
on this file, since ``auto`` decides what they run.

The values are the rule that ``scripts/chunk_rules_fit.py`` fitted on the first
H200 run of the chunk-rules sweep and scored on the second (whether refitting
on the second gives the same rule is recorded in the fit)
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
SPLIT_CHUNK = 4096
SPLIT_WARPS: int | None = 16
#: Else ``block`` (one program holds the row in registers) when the row's
#: power-of-two width times ``elem_bytes`` is at most ``MAX_BLOCK_BYTES``:
#: 16384 half-precision elements.
MAX_BLOCK_BYTES = 32 * 1024
BLOCK_WARPS: int | None = None
#: Else ``looped``: rows of at most ``NARROW_MAX_BYTES`` take the narrow chunk
#: and warps, wider rows the wide ones (0: every row is wide).
NARROW_MAX_BYTES = 32769 * 2
NARROW_CHUNK = 8192
NARROW_WARPS: int | None = 8
WIDE_CHUNK = 16384
WIDE_WARPS: int | None = 16
