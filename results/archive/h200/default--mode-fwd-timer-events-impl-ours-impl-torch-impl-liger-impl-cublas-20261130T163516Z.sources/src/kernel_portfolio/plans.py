"""Row plans: how a row operator (row sum, softmax, RMSNorm) walks its rows.

No GPU needed, so every rule here is unit-tested on a CPU.

* ``block``: one program holds a whole row in registers (``block >= n_cols``).
  Each byte is read once and written once.
* ``looped``: one program walks a row in ``block``-wide chunks, keeping a
  running statistic (an online max/sum for softmax), then walks it again to
  write.
* ``split``: few wide rows. ``splits`` programs share each row; each reduces
  its slice to partial statistics, and a second kernel merges them and writes.

Besides :func:`choose`, this module holds the launch arithmetic every row
kernel shares: the SM count, the persistent grid, the rows view and the vector
width that lets Triton emit 16-byte loads.

The ``auto`` thresholds below are a documented first guess; the wide-rows case
study (``case_studies/chunk_rules``) fits them on the H200 and this rule must
cite that committed result once it exists.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
import triton

PLAN_KINDS = ("block", "looped", "split")

#: Widest row, in bytes, that ``auto`` lets one program hold in registers
#: (16384 float32 or 32768 half-precision elements). First guess, see above.
MAX_BLOCK_BYTES = 64 * 1024
#: Widest ``block`` Triton can build at all (its largest tensor): a forced
#: ``block`` plan for a wider row is refused rather than failing to compile.
MAX_BLOCK_COLS = 1 << 20
#: Chunk width, in elements, of the looped and split plans. First guess.
LOOP_CHUNK = 4096
#: Most programs that may share one row in the split plan. The merge kernel
#: loads every partial statistic of a row as one ``MAX_SPLITS``-wide vector, a
#: compile-time size, so a change of row count never recompiles it.
MAX_SPLITS = 256
#: Warps an H100/H200 SM keeps resident; the persistent grid fills it.
WARPS_PER_SM = 64
#: SM count assumed for CPU tensors (the interpreter): the H200's, so plans
#: chosen in CPU tests are the plans the H200 runs.
CPU_SM_COUNT = 132


@dataclass(frozen=True)
class RowPlan:
    """A launch plan for one row operator call.

    Attributes:
        kind: ``"block"``, ``"looped"`` or ``"split"``.
        block: Columns a program handles per step (a power of two).
        num_warps: Warps per program.
        splits: Programs per row (1 unless ``kind == "split"``, at most
            ``MAX_SPLITS``).
    """

    kind: str
    block: int
    num_warps: int
    splits: int = 1

    def __post_init__(self) -> None:
        if self.kind not in PLAN_KINDS:
            raise ValueError(f"plan kind must be one of {PLAN_KINDS}, got {self.kind!r}")
        if self.block < 1 or self.block & (self.block - 1) or self.block > MAX_BLOCK_COLS:
            raise ValueError(
                f"plan block must be a power of two <= {MAX_BLOCK_COLS}, got {self.block}"
            )
        if self.num_warps not in (1, 2, 4, 8, 16, 32):
            raise ValueError(f"plan num_warps must be a power of two <= 32, got {self.num_warps}")
        if not 1 <= self.splits <= MAX_SPLITS:
            raise ValueError(f"plan splits must be in 1..{MAX_SPLITS}, got {self.splits}")
        if self.kind != "split" and self.splits != 1:
            raise ValueError(f"plan splits must be 1 for a {self.kind!r} plan, got {self.splits}")


def _check_plan_name(plan: object) -> None:
    if plan not in ("auto", *PLAN_KINDS):
        raise ValueError(
            f"plan must be 'auto', 'block', 'looped', 'split' or a RowPlan, got {plan!r}"
        )


def _warps_for(block: int, elem_bytes: int) -> int:
    """Warps so that each thread holds about two 16-byte vectors, 4..16 warps."""
    per_warp = 32 * max(1, 16 // elem_bytes)
    return max(4, min(16, block // (per_warp * 2)))


def choose(
    n_rows: int, n_cols: int, *, elem_bytes: int, sm_count: int, plan: str | RowPlan = "auto"
) -> RowPlan:
    """Choose a row plan.

    ``auto`` holds a row in one program while it fits in ``MAX_BLOCK_BYTES``;
    wider rows are split when there are at most half as many rows as SMs (one
    program per row would leave SMs idle) and looped otherwise.

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
        ValueError: ``plan`` is not one of the allowed values, or is a
            ``block`` plan (forced or given) that cannot hold a whole row.
    """
    width = triton.next_power_of_2(max(n_cols, 1))
    if isinstance(plan, RowPlan):
        if plan.kind == "block" and plan.block < n_cols:
            raise ValueError(
                f"plan has block={plan.block} but a block plan must hold the whole row "
                f"({n_cols} columns)"
            )
        return plan
    _check_plan_name(plan)
    if plan == "auto":
        if width * elem_bytes <= MAX_BLOCK_BYTES:
            plan = "block"
        elif n_rows * 2 <= sm_count:
            plan = "split"
        else:
            plan = "looped"
    if plan == "block":
        if width > MAX_BLOCK_COLS:
            raise ValueError(
                f"plan='block' cannot hold a row of {n_cols} columns (at most {MAX_BLOCK_COLS}); "
                "use 'looped' or 'split'"
            )
        return RowPlan("block", width, _warps_for(width, elem_bytes))
    chunk = min(LOOP_CHUNK, width)
    if plan == "looped":
        return RowPlan("looped", chunk, _warps_for(chunk, elem_bytes))
    splits = split_count(n_rows, n_cols, chunk, sm_count)
    return RowPlan("split", chunk, _warps_for(chunk, elem_bytes), splits)


def split_count(n_rows: int, n_cols: int, block: int, sm_count: int) -> int:
    """Programs per row of a split plan with ``block``-wide chunks.

    Enough programs for about two per SM over all rows, but never more than the
    row has chunks, nor more than ``MAX_SPLITS``. The wide-rows case study uses
    this for every chunk width it tries.
    """
    chunks = triton.cdiv(max(n_cols, 1), block)
    return max(1, min(chunks, triton.cdiv(2 * sm_count, max(n_rows, 1)), MAX_SPLITS))


def choose_for(x: torch.Tensor, plan: str | RowPlan = "auto") -> RowPlan:
    """:func:`choose` for the rows of ``x``'s last dimension, on ``x``'s device.

    Under ``torch.compile`` with dynamic shapes the width arrives symbolic;
    ``int`` specialises it, as it must be: it picks the compile-time ``BLOCK``.
    The row count stays symbolic.
    """
    return choose(
        math.prod(x.shape[:-1]),
        int(x.shape[-1]),
        elem_bytes=x.element_size(),
        sm_count=sm_count(x.device),
        plan=plan,
    )


def to_op_args(plan: str | RowPlan) -> tuple[str, int, int, int]:
    """Encode ``plan`` as custom-op arguments ``(kind, block, num_warps, splits)``.

    A ``torch.library`` op takes only plain types, so a :class:`RowPlan`
    travels as its four fields, and a plan name as ``(name, 0, 0, 0)``: the op
    then calls :func:`choose` itself, inside its body, where ``torch.compile``
    runs it as plain Python instead of tracing the SM-count query.

    Raises:
        ValueError: ``plan`` is neither a :class:`RowPlan` nor an allowed name.
    """
    if isinstance(plan, RowPlan):
        return plan.kind, plan.block, plan.num_warps, plan.splits
    _check_plan_name(plan)
    return plan, 0, 0, 0


def from_op_args(kind: str, block: int, num_warps: int, splits: int) -> str | RowPlan:
    """Decode what :func:`to_op_args` encoded."""
    return RowPlan(kind, block, num_warps, splits) if block else kind


def split_segments(n_cols: int, plan: RowPlan) -> tuple[int, int]:
    """How a split plan cuts a row: ``(chunks per program, programs per row)``.

    Each program takes whole chunks, so the programs actually launched can be
    fewer than ``plan.splits`` (10 chunks over 4 splits is 3, 3, 3, 1; over 6
    splits it is five programs of 2, as a sixth would have nothing to do).
    """
    chunks = triton.cdiv(max(n_cols, 1), plan.block)
    per_program = triton.cdiv(chunks, min(plan.splits, chunks))
    return per_program, triton.cdiv(chunks, per_program)


@functools.cache
def _cuda_sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def sm_count(device: torch.device) -> int:
    """Streaming multiprocessors of ``device``, cached per device.

    CPU tensors (the interpreter) get ``CPU_SM_COUNT``, the H200's count.
    """
    if device.type != "cuda":
        return CPU_SM_COUNT
    index = device.index if device.index is not None else torch.cuda.current_device()
    return _cuda_sm_count(index)


def persistent_programs(n_rows: int, plan: RowPlan, sm_count: int) -> int:
    """Programs to launch for a plan that loops over rows (block, looped).

    A persistent grid: at most as many programs as the SMs keep resident
    (``WARPS_PER_SM // num_warps`` each), every program walking rows
    ``pid, pid + programs, ...``; fewer when there are fewer rows.
    """
    resident = sm_count * max(1, WARPS_PER_SM // plan.num_warps)
    return max(1, min(n_rows, resident))


def as_rows(x: torch.Tensor) -> torch.Tensor:
    """``x`` as an ``(n_rows, n_cols)`` matrix over its last dimension.

    A view whenever the leading dimensions collapse into one row stride (any
    contiguous tensor, a 2-D transposed or expanded view, rows with gaps); the
    kernels then read it natively through ``(stride_xm, stride_xn)``.
    Otherwise ``reshape`` makes the one copy this module allows.
    """
    return x.reshape(math.prod(x.shape[:-1]), x.shape[-1])


def vec_width(elem_bytes: int, n_cols: int, row_strides: tuple[int, ...]) -> int:
    """Elements per 16-byte vector the rows allow: the ``VEC`` kernel argument.

    Triton emits a 16-byte load only when it can prove that a vector's
    addresses and mask are aligned. It knows the base pointers are 16-byte
    aligned, but it does not specialise ``n_cols`` and the row strides (they are
    runtime arguments, so new shapes do not recompile). The kernels rebuild them
    as ``v // VEC * VEC``, which the compiler reads as a multiple of ``VEC``,
    and this returns the largest power of two up to ``16 // elem_bytes`` that
    divides ``n_cols`` and every row stride, so the rebuilt value is unchanged.
    """
    vec = max(1, 16 // elem_bytes)
    while vec > 1 and any(v % vec for v in (n_cols, *row_strides)):
        vec //= 2
    return vec
