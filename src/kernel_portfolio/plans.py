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

The ``auto`` rule reads its thresholds, chunk widths and warps from
:mod:`kernel_portfolio.plan_rule`, a documented first guess that the wide-rows
case study (``case_studies/chunk_rules``) fits on the H200. They live apart so
that fitting them leaves this file, which the study's sweep hashes, unchanged.

Host cost: a row operator calls :func:`choose_for` on every call, so the
decision for plain-int shapes is cached (:func:`choose` is a pure function of
its arguments) and so is the SM count per device.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch

from kernel_portfolio import plan_rule

PLAN_KINDS = ("block", "looped", "split")

#: Widest ``block`` Triton can build at all (its largest tensor): a forced
#: ``block`` plan for a wider row is refused rather than failing to compile.
MAX_BLOCK_COLS = 1 << 20
#: Most programs that may share one row in the split plan. The merge kernel
#: loads every partial statistic of a row as one ``MAX_SPLITS``-wide vector, a
#: compile-time size, so a change of row count never recompiles it.
MAX_SPLITS = 256
#: Warps an H100/H200 SM keeps resident; the persistent grid fills it.
WARPS_PER_SM = 64
#: Programs (thread blocks) an H100/H200 SM keeps resident, whatever their warps.
PROGRAMS_PER_SM = 32
#: Most programs of a one-dimensional CUDA grid.
MAX_GRID = 2**31 - 1
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


def block_pieces(n_cols: int, block: int) -> tuple[int, int]:
    """``(main, tail)``: the widths a block plan's kernel covers a row with.

    A row just past a power of two (4104 columns) has a power-of-two block
    twice its width (8192): half the lanes would load nothing, and the
    registers they hold limit how many rows an SM keeps in flight. Such a row
    is covered by ``main = block // 2`` columns, all inside the row, and a
    ``tail``, the power of two covering the rest (4104: 4096 and 8). The
    kernels take both as compile-time sizes (``BLOCK`` and ``TAIL``), so each
    pair compiles once. Only where the block has at least
    ``plan_rule.PIECE_MIN_BLOCK`` columns and the tail is at most ``1 /
    plan_rule.PIECE_TAIL_DIVISOR`` of it (a divisor of 0: never); otherwise
    ``(block, 0)``, one piece: a wider tail costs a second reduction per row
    and narrow vector accesses for more than the lanes it saves.
    """
    main = block // 2
    divisor = plan_rule.PIECE_TAIL_DIVISOR
    if divisor and block >= plan_rule.PIECE_MIN_BLOCK and main < n_cols <= block:
        tail = 1 << (n_cols - main - 1).bit_length()
        if tail * divisor <= block:
            return main, tail
    return block, 0


def _check_plan_name(plan: object) -> None:
    if plan not in ("auto", *PLAN_KINDS):
        raise ValueError(
            f"plan must be 'auto', 'block', 'looped', 'split' or a RowPlan, got {plan!r}"
        )


def warps_for(cols: int, elem_bytes: int, warps: int | None = None, *, up: bool = False) -> int:
    """``warps`` if given, else enough for about two 16-byte vectors per thread of ``cols``.

    A power of two from 1 to 16, rounded down; with ``up`` (a block plan of
    few rows an SM, :func:`choose`), the fewest that hold ``cols`` at two
    vectors a thread, once ``cols`` fills two warps' worth. ``cols`` is what a
    program loads at a time: a chunk, or for a block plan the row itself,
    not its power-of-two block: a row of 4104 columns in a block of 8192 is
    half masked, and warps sized to the block would each load one vector and
    then spend as long as a full block on the row's reductions, with half as
    many rows resident per SM. Narrow rows take few warps (1024
    half-precision columns: 2), so that an SM holds many rows in flight:
    ``scripts/block_warps_ab.py`` put softmax at 32768x1024 float16 at 86% of
    copy with 2 warps and 78% with 4
    (``results/h200/checks/block-warps-ab-20261201T0555Z.log``). With a few
    rows an SM, a row's warps are most of the loads its SM has in flight:
    rounded up, the bfloat16 forwards of softmax, RMSNorm and residual RMSNorm
    at 1 to 132 rows of 1536, 2560, 3584, 5120 and 7168 columns ran 4-20%
    faster on the H100 (at 896, 2048 and 4096 columns, where rounding up
    changed nothing, twice as many gained nothing, and at 896 one warp, which
    reduces without shared memory, beat two:
    ``results/h100-80gb-hbm3/checks/few-rows-warps-ab-20261205T1740Z.log``),
    and so did 133 to 1056 rows of 1152 to 7168 columns, 1152 and 2304 among
    them, whose two vectors a thread were a little short of a power of two
    (``results/h100-80gb-hbm3/checks/rows-warps-ab-20261207T1049Z.log``).
    """
    if warps is not None:
        return warps
    per_warp = 2 * 32 * max(1, 16 // elem_bytes)  # columns of two vectors a thread
    wanted = max(1, cols // per_warp)
    if up and wanted > 1:
        wanted = cdiv(cols, per_warp)
        return min(16, 1 << (wanted - 1).bit_length())
    return min(16, 1 << (wanted.bit_length() - 1))


def choose(
    n_rows: int, n_cols: int, *, elem_bytes: int, sm_count: int, plan: str | RowPlan = "auto"
) -> RowPlan:
    """Choose a row plan.

    ``auto`` (constants from :mod:`kernel_portfolio.plan_rule`): ``split`` when
    there are few rows (at most ``SPLIT_ROWS_PER_SM`` per SM; one program per
    row would leave SMs idle) and each is wider than ``SPLIT_MIN_BYTES``, in
    chunks of ``COOP_CHUNK`` when one program a chunk over all rows fits the
    SMs (the softmax forward then runs as one cooperative launch), else of
    ``SPLIT_CHUNK``; else
    ``block`` while the row fits in ``MAX_BLOCK_BYTES``, or in
    ``FULL_BLOCK_MAX_BYTES`` and fills ``FULL_BLOCK_MIN_FILL`` of its
    power-of-two width; else ``looped``, with
    a narrow or a wide chunk. A chunk never exceeds the row's power-of-two width.

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
    width = 1 << (max(n_cols, 1) - 1).bit_length()  # the next power of two
    if isinstance(plan, RowPlan):
        if plan.kind == "block" and plan.block < n_cols:
            raise ValueError(
                f"plan has block={plan.block} but a block plan must hold the whole row "
                f"({n_cols} columns)"
            )
        return plan
    _check_plan_name(plan)
    if plan == "auto":
        # Width first: a symbolic row count (torch.compile) is then guarded on
        # only for rows wide enough to split.
        if (
            n_cols * elem_bytes > plan_rule.SPLIT_MIN_BYTES
            and n_rows <= plan_rule.SPLIT_ROWS_PER_SM * sm_count
        ):
            plan = "split"
        elif width * elem_bytes <= plan_rule.MAX_BLOCK_BYTES or (
            width * elem_bytes <= plan_rule.FULL_BLOCK_MAX_BYTES
            and n_cols >= plan_rule.FULL_BLOCK_MIN_FILL * width
        ):
            plan = "block"
        else:
            plan = "looped"
    if plan == "block":
        if width > MAX_BLOCK_COLS:
            raise ValueError(
                f"plan='block' cannot hold a row of {n_cols} columns (at most {MAX_BLOCK_COLS}); "
                "use 'looped' or 'split'"
            )
        # A symbolic row count rounds down: the graph does not guard on it. A
        # row in pieces (4104 columns: 4096 and 8) counts its main piece: its
        # tail's few columns sent 4104 columns from 8 warps to 16 rounded up,
        # slower at every direction and row count of rows-warps-rule-ab's log.
        few = type(n_rows) is int and n_rows <= plan_rule.FEW_ROWS_PER_SM * sm_count
        cols = min(n_cols, block_pieces(n_cols, width)[0])
        warps = warps_for(cols, elem_bytes, plan_rule.BLOCK_WARPS, up=few)
        return RowPlan("block", width, warps)
    if plan == "looped":
        if n_cols * elem_bytes <= plan_rule.NARROW_MAX_BYTES:
            chunk, warps = min(plan_rule.NARROW_CHUNK, width), plan_rule.NARROW_WARPS
        else:
            chunk, warps = min(plan_rule.WIDE_CHUNK, width), plan_rule.WIDE_WARPS
        return RowPlan("looped", chunk, warps_for(chunk, elem_bytes, warps))
    chunk, warps = min(plan_rule.COOP_CHUNK, width), plan_rule.COOP_WARPS
    if not (plan_rule.COOP_CHUNK and n_rows * cdiv(max(n_cols, 1), chunk) <= sm_count):
        chunk, warps = min(plan_rule.SPLIT_CHUNK, width), plan_rule.SPLIT_WARPS
    splits = split_count(n_rows, n_cols, chunk, sm_count)
    return RowPlan("split", chunk, warps_for(chunk, elem_bytes, warps), splits)


#: :func:`choose` for plain-int shapes, memoised: it runs on every operator call.
_choose_cached = functools.lru_cache(maxsize=4096)(choose)


def cdiv(a: int, b: int) -> int:
    """``ceil(a / b)`` for positive ``b``, in plain Python.

    Launchers use this rather than ``triton.cdiv``, a Triton ``constexpr``
    function whose every call from host code costs several microseconds.
    """
    return -(-a // b)


def split_count(n_rows: int, n_cols: int, block: int, sm_count: int) -> int:
    """Programs per row of a split plan with ``block``-wide chunks.

    Enough programs for about two per SM over all rows, but never more than the
    row has chunks, nor more than ``MAX_SPLITS``. The wide-rows case study uses
    this for every chunk width it tries.
    """
    chunks = cdiv(max(n_cols, 1), block)
    return max(1, min(chunks, cdiv(2 * sm_count, max(n_rows, 1)), MAX_SPLITS))


def choose_for(x: torch.Tensor, plan: str | RowPlan = "auto") -> RowPlan:
    """:func:`choose` for the rows of ``x``'s last dimension, on ``x``'s device.

    Under ``torch.compile`` with dynamic shapes the width arrives symbolic;
    ``int`` specialises it, as it must be: it picks the compile-time ``BLOCK``.
    The row count stays symbolic, and a symbolic call skips the cache.
    """
    n_rows = math.prod(x.shape[:-1])
    pick = _choose_cached if type(n_rows) is int else choose
    return pick(
        n_rows,
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
    chunks = cdiv(max(n_cols, 1), plan.block)
    per_program = cdiv(chunks, min(plan.splits, chunks))
    return per_program, cdiv(chunks, per_program)


@functools.cache
def _cuda_sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def sm_count(device: torch.device) -> int:
    """Streaming multiprocessors of ``device``, cached per device index.

    CPU tensors (the interpreter) get ``CPU_SM_COUNT``, the H200's count.
    """
    if device.type != "cuda":
        return CPU_SM_COUNT
    index = device.index
    return _cuda_sm_count(index if index is not None else torch.cuda.current_device())


def persistent_programs(n_rows: int, plan: RowPlan, sm_count: int) -> int:
    """Programs to launch for a plan whose programs loop over rows (looped forwards, backwards).

    A persistent grid: at most as many programs as the SMs keep resident
    (``WARPS_PER_SM // num_warps`` each, at most ``PROGRAMS_PER_SM``), every
    program walking rows ``pid, pid + programs, ...``; fewer when there are
    fewer rows. Backwards stay persistent: the RMSNorm backward keeps one
    weight-gradient partial per program.
    """
    resident = sm_count * max(1, min(PROGRAMS_PER_SM, WARPS_PER_SM // plan.num_warps))
    return max(1, min(n_rows, resident))


def block_launches(n_rows: int) -> tuple[tuple[int, int], ...]:
    """``(first row, programs)`` of each launch of a block-plan forward.

    A program per row, no row loop: the hardware starts a program as another
    retires. An H200 A/B against a persistent grid
    (``results/h200/checks/row-ab-20261201T0349Z.log``) put one program per
    row 2.8% ahead on the mean. Dropping the row loop that let a program take
    more rows (a barrier and a branch a program) sped the block forwards up
    by 0.6-1.9% on the mean, up to 8% (``scripts/revision_ab.py``,
    ``results/h200/checks/revision-ab-20261202T2031Z.log``). One launch
    unless the rows outnumber a grid's first dimension (:data:`MAX_GRID`); a
    kernel adds its launch's first row to its program id.
    """
    if n_rows <= MAX_GRID:
        return ((0, n_rows),)
    return tuple((first, min(n_rows - first, MAX_GRID)) for first in range(0, n_rows, MAX_GRID))


def as_rows(x: torch.Tensor) -> torch.Tensor:
    """``x`` as an ``(n_rows, n_cols)`` matrix over its last dimension.

    A view whenever the leading dimensions collapse into one row stride (any
    contiguous tensor, a 2-D transposed or expanded view, rows with gaps); the
    kernels then read it natively through ``(stride_xm, stride_xn)``.
    Otherwise ``reshape`` makes the one copy this module allows. A 2-D ``x``
    is returned as it is (a reshape would give an equal view, at a cost of
    host time on every call).
    """
    if x.ndim == 2:
        return x
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
