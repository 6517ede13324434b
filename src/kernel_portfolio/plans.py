"""Row plans: how a row operator (row sum, softmax, RMSNorm) walks its rows.

Pure Python, no GPU needed, so the rule is unit-tested on a CPU.

* ``block``: one program holds a whole row in registers (``BLOCK >= n_cols``).
  Each byte is read once and written once.
* ``looped``: one program walks a row in ``BLOCK``-wide chunks, keeping a
  running statistic (an online max/sum for softmax).
* ``split``: few wide rows. ``splits`` programs share each row; each reduces
  its slice to partial statistics, and a second pass merges them and writes.

The ``auto`` thresholds below are a documented first guess; the wide-rows case
study (``case_studies/chunk_rules``) fits them on the H200 and this rule must
cite that committed result once it exists.
"""

from __future__ import annotations

from dataclasses import dataclass

import triton

PLAN_KINDS = ("block", "looped", "split")

#: Widest row (in elements) a single program holds in registers.
MAX_BLOCK_COLS = 16384
#: Chunk width used by the looped and split plans.
LOOP_CHUNK = 4096


@dataclass(frozen=True)
class RowPlan:
    """A launch plan for one row operator call.

    Attributes:
        kind: ``"block"``, ``"looped"`` or ``"split"``.
        block: Columns a program handles per step (a power of two).
        num_warps: Warps per program.
        splits: Programs per row (1 unless ``kind == "split"``).
    """

    kind: str
    block: int
    num_warps: int
    splits: int = 1

    def __post_init__(self) -> None:
        if self.kind not in PLAN_KINDS:
            raise ValueError(f"plan kind must be one of {PLAN_KINDS}, got {self.kind!r}")
        if self.block < 1 or self.block & (self.block - 1):
            raise ValueError(f"plan block must be a power of two, got {self.block}")
        if self.num_warps not in (1, 2, 4, 8, 16, 32):
            raise ValueError(f"plan num_warps must be a power of two <= 32, got {self.num_warps}")
        if self.splits < 1:
            raise ValueError(f"plan splits must be >= 1, got {self.splits}")


def _warps_for(block: int, elem_bytes: int) -> int:
    """Warps so that each thread holds about 16 bytes per vector, 4..16 warps."""
    per_warp = 32 * max(1, 16 // elem_bytes)
    return max(4, min(16, block // (per_warp * 2)))


def choose(
    n_rows: int, n_cols: int, *, elem_bytes: int, sm_count: int, plan: str | RowPlan = "auto"
) -> RowPlan:
    """Choose a row plan.

    Args:
        n_rows: Number of rows.
        n_cols: Row width in elements.
        elem_bytes: Bytes per element of the input dtype.
        sm_count: Streaming multiprocessors on the device.
        plan: ``"auto"``, a forced kind (``"block"``, ``"looped"``, ``"split"``)
            or a ready :class:`RowPlan` (sweeps use this to force chunk sizes).

    Returns:
        The plan to launch.

    Raises:
        ValueError: ``plan`` is not one of the allowed values.
    """
    if isinstance(plan, RowPlan):
        return plan
    if plan not in ("auto", *PLAN_KINDS):
        raise ValueError(f"plan must be 'auto', 'block', 'looped' or 'split', got {plan!r}")
    width = triton.next_power_of_2(max(n_cols, 1))
    if plan == "auto":
        if width <= MAX_BLOCK_COLS:
            plan = "block"
        elif n_rows * 2 <= sm_count:
            plan = "split"
        else:
            plan = "looped"
    if plan == "block":
        return RowPlan("block", width, _warps_for(width, elem_bytes))
    chunk = min(LOOP_CHUNK, width)
    if plan == "looped":
        return RowPlan("looped", chunk, _warps_for(chunk, elem_bytes))
    chunks = triton.cdiv(max(n_cols, 1), chunk)
    splits = max(1, min(chunks, triton.cdiv(2 * sm_count, max(n_rows, 1))))
    return RowPlan("split", chunk, _warps_for(chunk, elem_bytes), splits)
