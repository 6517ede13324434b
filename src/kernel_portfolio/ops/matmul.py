"""Matrix multiplication ``C = A @ B`` (GEMM), forward and backward.

Math: ``C[m, n] = sum_k A[m, k] * B[k, n]`` for ``A`` of shape ``(M, K)`` and
``B`` of shape ``(K, N)``, accumulated in float32 and rounded once to the
input dtype. float32 inputs keep float32 accuracy (``tl.dot`` with the input
precision ``gemm_rule.FP32_PRECISION``: three TF32 tensor-core products per
pair of tiles) unless the caller passes ``allow_tf32=True``.

Work: ``2 * M * N * K`` floating-point operations. Memory traffic, at the
least: read ``A`` and ``B`` once and write ``C`` once, ``(M*K + K*N + M*N) *
elem_bytes`` bytes. Large products are bound by the tensor cores; a product
of few rows (a linear layer at a small batch: ``M`` of a few hundred or less
against ``N, K`` of thousands) by reading ``B``, ``K*N*elem_bytes`` bytes.
Split-K into ``runs`` adds ``8 * runs`` bytes per output element (float32
partial tiles, each written once and read once, mostly within the L2).

Three kernels, chosen by the launcher:

* ``_matmul_tma_kernel`` (CUDA compute capability 9.x, float16/bfloat16):
  a persistent kernel. One program per streaming multiprocessor walks the
  output tiles ``NUM_SMS`` apart in grouped order (``GROUP_M`` rows of tiles
  at a time, so the rows of ``A`` and columns of ``B`` in flight stay in L2).
  Tiles move through the tensor-memory accelerator: the tensor descriptors
  are built on the host and passed by value (:func:`_descriptors`), the copy
  engine fills zeros past the matrix edges, and the stores are clipped. A transposed
  operand is described in its own memory layout and its tile transposed in
  shared memory, so ``a.T`` and ``b.T`` views are read in place. Needs every
  matrix to have one unit stride, the other stride a multiple of 16 bytes,
  and a 16-byte aligned start. A tile may hold two accumulators side by
  side in ``N`` (``BLOCK_N2``), each the product of the shared tile of ``A``
  with its own slice of ``B``: a tile width that is not a power of two
  (``128 + 16`` columns), which Triton's tensors cannot be, so that a
  product of a few hundred rows fills the SMs in whole waves where no
  power-of-two tile does. A product with too few output tiles to fill
  the SMs splits ``K`` into runs (split-K, :func:`_split_k`): each program
  writes its float32 partial tile to a workspace, and the last run of a tile
  to finish adds the tile's partials in a fixed order and rounds once, in the
  same launch.
* ``_matmul_ws_kernel`` (the same GPUs and dtypes): the same persistent
  walk over the tiles, written in Gluon (Triton's explicit layer) and
  warp-specialised by hand: a loader warp issues the copies into a ring of
  stages, two consumer warpgroups each run the wgmma of half the tile's rows
  and hand each stage back on an mbarrier, with no barrier between the
  groups, and each stores its rows while the loader fills the next tile's
  stages. Its tiles (:attr:`TmaTile.gluon`) keep more stages in flight than
  the Triton kernel's tiles of their size, and never split ``K``. In both
  kernels the last row of tiles ends at ``M`` (:func:`_row_start`), inside
  ``A``, where ``M`` holds a tile's rows. Where
  ``torch.compile`` or another tracer reaches either Hopper kernel, it runs
  through a custom op of its own, ``kp::matmul_tma``: Triton's
  ``wrap_triton`` takes neither Gluon kernels nor descriptors built on the
  host.
* ``_matmul_kernel``: a plain tiled kernel reading through pointers and
  strides (any strides, zero strides included), grouped the same way. It runs
  under the Triton interpreter, on non-Hopper GPUs, for float32, and for
  operands the copy engine cannot describe (odd leading dimensions, offset
  slices, expanded views).

Both accumulate in float32 and compute offsets in int64 where they can pass
2^31. float32 operands take the pointer kernel with ``tl.dot``'s input
precision ``gemm_rule.FP32_PRECISION``.

Plans and tuning. The Hopper kernel's tile and split-K count come from a
measured table, :mod:`kernel_portfolio.ops.gemm_rule` (its ``TMA_RULES`` and
constants, read by :func:`_tma_plan`): ``M`` rounded up to a power of two
(:func:`_bucket`) picks a row of tiles, and the counts of output tiles
against the SMs pick a tile of the row and the split of ``K``
(:func:`_split_k`: the fewest runs that fill the waves of the SMs);
``scripts/gemm_tune.py`` times every tile of :data:`TMA_TILES` at every split
against cuBLAS and summarises which wins per bucket. The pointer kernel is
autotuned over :data:`POINTER_CONFIGS`, keyed by ``N``, the layout and dtype,
and ``M`` and ``K`` bucketed the same way. The batch dimension of a linear
layer is ``M`` in the forward product and in ``dA``, and ``K`` in ``dB``: a
new batch size compiles nothing new unless it changes the tile (at most the
tiles of the table), and under ``torch.compile`` with dynamic shapes the
plan's comparisons become range guards, so a new batch size that keeps the
plan reuses the compiled graph.

Triton also compiles a variant per integer argument class (equal to 1, a
multiple of 16, other). Both kernels opt every size and stride (and the
split-K count) out of that (``do_not_specialize``), so one binary serves
every shape of a dtype, layout and tile (two on the Hopper path: split and
unsplit). The Hopper kernel gains nothing from the knowledge: its tiles move
through descriptors. The pointer kernel needs two facts to turn its masked
loads into 16-byte ``cp.async`` copies (without them it falls back to 2-byte
loads), and gets them as compile-time constants instead, the case study's
``vec-hint`` policy, as the row kernels do:

* which dimension of each matrix has unit stride (``A_UNIT``, ``B_UNIT``,
  ``C_UNIT``: 1 for a row-major matrix, 0 for a transposed view, -1 for
  neither); the kernel replaces that stride by the constant 1, so a
  transposed operand is read in vectors along its own contiguous dimension;
* ``VEC`` (:func:`_pointer_layout`): the largest power of two, up to 16
  bytes of elements, that divides the matrices' other strides and the sizes
  that mask their contiguous dimensions; the kernel rebuilds each of them as
  ``v // VEC * VEC``, the same value, which the compiler now knows to be a
  multiple of ``VEC``.

A new ``M``, ``N`` or ``K`` therefore compiles nothing new unless it changes
``VEC`` (at most four values) or a layout. The batch size of a linear layer
(``M`` of the forward and of ``dA``, ``K`` of ``dB``) does not enter ``VEC``
at all in those products' layouts: it masks no unit-stride dimension there.
Widths that are multiples of 8 half-precision elements but not of 16 (4104)
keep 16-byte loads, which Triton's own specialisation would not give them
(the specialisation case study measured that policy against the others).

Backward: ``dA = dC @ B^T`` and ``dB = A^T @ dC``, each through the same
kernels with the transposed operand read in place, computing only the
gradients that are needed.

The public function and the backward reach the launcher by one of three
routes (:func:`kernel_portfolio.contracts.eager_route`): in eager code
directly when autograd will not record, else through an autograd Function of
this module that calls it directly; under ``torch.compile``, dispatch modes
and ``torch.func`` through the custom op ``kp::matmul``, whose body is the
same code. The Function and the op share one backward.
"""

from __future__ import annotations

import dataclasses
import functools

import torch
import triton
import triton.language as tl
from torch.library import triton_op
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor as GluonTensorDescriptor
from triton.tools.tensor_descriptor import TensorDescriptor

from kernel_portfolio import plans
from kernel_portfolio.contracts import (
    check_same,
    check_tensor,
    device_guard,
    direct_launches,
    direct_route,
    eager_route,
    interpreter_enabled,
    launchable,
    scratch,
    stream_buffer,
)
from kernel_portfolio.ops import gemm_rule

# ---------------------------------------------------------------------------
# Kernels
# ---------------------------------------------------------------------------

#: Registers a thread of :func:`_matmul_ws_kernel`'s loader warp keeps (it
#: only counts and addresses), and of each consumer warpgroup past the first
#: with two consumers and with three (the first, the default partition, gets
#: what the SM has left): the SM's 65536 registers hold the loader's
#: warpgroup at 40 and the consumers' at 232 or 152 each.
WS_LOADER_REGS = gl.constexpr(40)
WS_CONSUMER_REGS = gl.constexpr(232)
WS_CONSUMER3_REGS = gl.constexpr(152)


@triton.jit
def _tile_coords(tile_id, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    """Map a linear tile index to ``(pid_m, pid_n)`` in grouped order.

    Tiles are visited ``GROUP_M`` tile-rows at a time, column by column, so
    consecutive programs share rows of ``A`` and columns of ``B`` in L2.
    """
    tiles_per_group = GROUP_M * num_pid_n
    group = tile_id // tiles_per_group
    first_m = group * GROUP_M
    group_rows = min(num_pid_m - first_m, GROUP_M)
    local = tile_id - group * tiles_per_group
    return first_m + local % group_rows, local // group_rows


@triton.jit
def _row_start(pid_m, M, BLOCK_M: tl.constexpr):
    """The first output row of row ``pid_m`` of tiles: the last row of tiles ends at ``M``.

    Where ``M`` is at least ``BLOCK_M``, the last row of tiles starts at
    ``M - BLOCK_M`` rather than past the rows before it, so that every box of
    ``A`` it loads lies inside ``A``; the rows it shares with the row of
    tiles before are computed twice, to the same values (the same products
    in the same order), and stored twice. A last row of tiles mostly past
    ``M`` ran far slower than a full one, the same tiles
    (``results/h100-80gb-hbm3/checks/gemm-shift-ab-20261207T0838Z.log``: the
    Gluon 128x128 tile at 400x4096x14336 1.5 times as fast shifted).
    """
    return tl.maximum(tl.minimum(pid_m * BLOCK_M, M - BLOCK_M), 0)


#: The pointer kernel's runtime sizes and strides, none specialised by Triton
#: (the module docstring says what replaces that).
_POINTER_RUNTIME_ARGS = [
    "M",
    "N",
    "K",
    "stride_am",
    "stride_ak",
    "stride_bk",
    "stride_bn",
    "stride_cm",
    "stride_cn",
    "M_BUCKET",
    "K_BUCKET",
]


@triton.jit(do_not_specialize=_POINTER_RUNTIME_ARGS)
def _matmul_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    M_BUCKET,
    K_BUCKET,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    INPUT_PRECISION: tl.constexpr,
    WIDEN_OPERANDS: tl.constexpr,
    A_UNIT: tl.constexpr,
    B_UNIT: tl.constexpr,
    C_UNIT: tl.constexpr,
    VEC: tl.constexpr,
):
    """One ``BLOCK_M x BLOCK_N`` tile of ``C`` per program, through pointers.

    ``M_BUCKET`` and ``K_BUCKET`` are unused in the body: they exist for the
    autotuning key. ``WIDEN_OPERANDS`` converts the tiles to float32 before
    the dot; see ``_widen_operands``. ``A_UNIT``, ``B_UNIT``, ``C_UNIT`` and
    ``VEC``: see the module docstring and :func:`_pointer_layout`.
    """
    # Unit strides become constants; the strides and sizes that align the
    # vectors along them are rebuilt as the same values, now visibly multiples
    # of VEC (_pointer_layout chose VEC to divide exactly these).
    if A_UNIT == 1:
        stride_ak = 1
        stride_am = stride_am // VEC * VEC
        K = K // VEC * VEC
    elif A_UNIT == 0:
        stride_am = 1
        stride_ak = stride_ak // VEC * VEC
        M = M // VEC * VEC
    if B_UNIT == 1:
        stride_bn = 1
        stride_bk = stride_bk // VEC * VEC
        N = N // VEC * VEC
    elif B_UNIT == 0:
        stride_bk = 1
        stride_bn = stride_bn // VEC * VEC
        K = K // VEC * VEC
    if C_UNIT == 1:
        stride_cn = 1
        stride_cm = stride_cm // VEC * VEC
        N = N // VEC * VEC
    elif C_UNIT == 0:
        stride_cm = 1
        stride_cn = stride_cn // VEC * VEC
        M = M // VEC * VEC
    pid_m, pid_n = _tile_coords(tl.program_id(0), tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)
    rm = pid_m.to(tl.int64) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n.to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K).to(tl.int64)
    mask_m = rm < M
    mask_n = rn < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for ki in range(tl.cdiv(K, BLOCK_K)):
        ks = ki * BLOCK_K + rk
        mask_k = ks < K
        a = tl.load(
            a_ptr + rm[:, None] * stride_am + ks[None, :] * stride_ak,
            mask=mask_m[:, None] & mask_k[None, :],
            other=0.0,
        )
        b = tl.load(
            b_ptr + ks[:, None] * stride_bk + rn[None, :] * stride_bn,
            mask=mask_k[:, None] & mask_n[None, :],
            other=0.0,
        )
        if WIDEN_OPERANDS:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
    tl.store(
        c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn,
        acc.to(c_ptr.dtype.element_ty),
        mask=mask_m[:, None] & mask_n[None, :],
    )


@triton.jit
def _load_tile(desc, row, col, COL_MAJOR: tl.constexpr):
    """The operand's tile at ``(row, col)`` from its descriptor ``desc`` (:func:`_descriptors`).

    A column-major operand's tile arrives in its memory layout and is
    transposed in shared memory, where wgmma reads either order.
    """
    return desc.load([col, row]).T if COL_MAJOR else desc.load([row, col])


@triton.jit
def _store_tile(c_desc, tile, off_m, off_n, EPILOGUE_SPLIT: tl.constexpr):
    """Store a rounded output tile through the descriptor, in ``EPILOGUE_SPLIT`` column slices."""
    if EPILOGUE_SPLIT == 2:
        BLOCK_M: tl.constexpr = tile.shape[0]
        SUB_N: tl.constexpr = tile.shape[1] // 2
        left, right = tl.split(tl.permute(tl.reshape(tile, (BLOCK_M, 2, SUB_N)), (0, 2, 1)))
        c_desc.store([off_m, off_n], left)
        c_desc.store([off_m, off_n + SUB_N], right)
    else:
        c_desc.store([off_m, off_n], tile)


@triton.jit(do_not_specialize=["M", "N", "K", "split_k"])
def _matmul_tma_kernel(
    a_desc,
    b_desc,
    c_desc,
    b2_desc,
    c2_desc,
    ws_ptr,
    count_ptr,
    M,
    N,
    K,
    split_k,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    A_COL_MAJOR: tl.constexpr,
    B_COL_MAJOR: tl.constexpr,
    NUM_SMS: tl.constexpr,
    FLATTEN: tl.constexpr,
    EPILOGUE_SPLIT: tl.constexpr,
    WIDEN_OPERANDS: tl.constexpr,
    PARTIALS: tl.constexpr,
    SWAP_AB: tl.constexpr,
    BLOCK_N2: tl.constexpr,
):
    """Persistent GEMM through tensor descriptors (Hopper's copy engine).

    ``a_desc`` to ``c2_desc`` are :func:`_descriptors`' five, built on the
    host; ``M``, ``N`` and ``K`` are the product's sizes. ``A_COL_MAJOR``
    means ``A``'s unit stride is along ``M`` (``A`` is a transposed view);
    ``B_COL_MAJOR`` means ``B``'s unit stride is along
    ``K`` (the weight of a linear layer, ``W.T``). ``FLATTEN`` lets the
    compiler fuse the tile loop with the K loop so the next tile's loads start
    during this tile's epilogue. ``EPILOGUE_SPLIT`` stores the tile in that
    many column slices, which needs less shared memory for the epilogue and
    leaves more for stages.
    ``WIDEN_OPERANDS``: see ``_widen_operands``. ``SWAP_AB`` computes the
    transposed tile, ``C^T = B^T A^T``, and transposes the accumulator once
    after the ``K`` loop: a ``BLOCK_M`` under 64 rows then takes the ``N``
    side of the tensor-core instruction (wgmma's ``N`` may be 8 to 256,
    its ``M`` is 64 a warpgroup), so a tile of few rows still runs on wgmma
    instead of ``mma.sync``. ``BLOCK_N2`` (0: none) adds a second
    accumulator of ``BLOCK_N2`` columns beside the first, the tile's columns
    ``BLOCK_N`` to ``BLOCK_N + BLOCK_N2``, loaded and stored through
    descriptors of their own; the tiles then step ``N`` by the sum. Not with
    ``SWAP_AB`` or ``PARTIALS``.

    Split-K (``PARTIALS``): ``K`` is cut into ``split_k`` runs of whole
    ``BLOCK_K`` steps, as even as they divide; the programs walk ``split_k x``
    the output tiles (run ``r`` of every tile before run ``r + 1``). Each
    stores its float32 partial tile in the workspace ``ws_ptr`` (one whole
    ``BLOCK_M x BLOCK_N`` block per tile and run, tile-major) and counts
    itself in on the tile's counter (``count_ptr[tile]``, 0 between
    launches): its stores are released with its count, and the run that
    counts last acquires the others', adds the tile's ``split_k`` partials in
    run order (the same sum whichever run finishes last), rounds once into
    ``C`` and sets the counter back to 0. No program waits for another.
    Without ``PARTIALS``, ``split_k``, ``ws_ptr`` and ``count_ptr`` are
    unused.
    """
    TILE_N: tl.constexpr = BLOCK_N + BLOCK_N2
    out_ty = c_desc.dtype

    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, TILE_N)
    num_tiles = num_pid_m * num_pid_n
    k_tiles = tl.cdiv(K, BLOCK_K)
    n_items = num_tiles
    if PARTIALS:
        n_items = num_tiles * split_k
    # The epilogue recomputes its tile from a counter of its own: sharing
    # pid_m/pid_n between the loads and the store would tie the prologue of
    # the next tile to the epilogue of this one once the loops are fused.
    epilogue_item = tl.program_id(0) - NUM_SMS
    for item in tl.range(tl.program_id(0), n_items, NUM_SMS, flatten=FLATTEN):
        tile = item
        k_first = 0
        k_end = k_tiles
        if PARTIALS:
            tile = item % num_tiles
            run = item // num_tiles
            k_first = run * k_tiles // split_k
            k_end = (run + 1) * k_tiles // split_k
        pid_m, pid_n = _tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
        off_m = _row_start(pid_m, M, BLOCK_M)
        off_n = pid_n * TILE_N
        if SWAP_AB:
            acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
        else:
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        if BLOCK_N2 > 0:
            acc2 = tl.zeros((BLOCK_M, BLOCK_N2), dtype=tl.float32)
        for ki in range(k_first, k_end):
            off_k = ki * BLOCK_K
            a = _load_tile(a_desc, off_m, off_k, A_COL_MAJOR)
            b = _load_tile(b_desc, off_k, off_n, B_COL_MAJOR)
            if WIDEN_OPERANDS:
                a = a.to(tl.float32)
                b = b.to(tl.float32)
            acc = tl.dot(b.T, a.T, acc) if SWAP_AB else tl.dot(a, b, acc)
            if BLOCK_N2 > 0:
                b2 = _load_tile(b2_desc, off_k, off_n + BLOCK_N, B_COL_MAJOR)
                if WIDEN_OPERANDS:
                    b2 = b2.to(tl.float32)
                acc2 = tl.dot(a, b2, acc2)
        if SWAP_AB:
            acc = acc.T

        epilogue_item += NUM_SMS
        tile = epilogue_item
        if PARTIALS:
            tile = epilogue_item % num_tiles
        pid_m, pid_n = _tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
        off_m = _row_start(pid_m, M, BLOCK_M)
        off_n = pid_n * TILE_N
        if PARTIALS:
            # Partial tiles are whole BLOCK_M x BLOCK_N blocks, tile by tile and
            # run by run: offsets the compiler knows, no masks (the store to C
            # clips the edges).
            in_tile = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
            partials = ws_ptr + tile.to(tl.int64) * split_k * (BLOCK_M * BLOCK_N)
            run = epilogue_item // num_tiles
            tl.store(partials + run * (BLOCK_M * BLOCK_N) + in_tile, acc)
            tl.debug_barrier()  # every thread's stores before the count
            arrived = tl.atomic_add(count_ptr + tile, 1, sem="acq_rel", scope="gpu")
            if arrived == split_k - 1:
                total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
                for r in range(split_k):
                    # .cg: from the L2, where the other runs' stores are, never a stale L1 line.
                    total += tl.load(
                        partials + r * (BLOCK_M * BLOCK_N) + in_tile, cache_modifier=".cg"
                    )
                _store_tile(c_desc, total.to(out_ty), off_m, off_n, EPILOGUE_SPLIT)
                tl.atomic_xchg(count_ptr + tile, 0, sem="relaxed", scope="gpu")
        else:
            _store_tile(c_desc, acc.to(out_ty), off_m, off_n, EPILOGUE_SPLIT)
            if BLOCK_N2 > 0:
                c2_desc.store([off_m, off_n + BLOCK_N], acc2.to(out_ty))


# The warp-specialised Hopper kernel, in Gluon (Triton's explicit layer): one
# warp copies tiles into a ring of stages, two or three consumer warpgroups run
# the wgmma and hand each stage back on an mbarrier. See _matmul_ws_kernel.


@gluon.jit
def _ws_loader(
    a_desc,
    b_desc,
    b2_desc,
    a_bufs,
    b_bufs,
    b2_bufs,
    ready,
    empty,
    M,
    N,
    K,
    BLOCK_M: gl.constexpr,
    BLOCK_N: gl.constexpr,
    BLOCK_N2: gl.constexpr,
    BLOCK_K: gl.constexpr,
    GROUP_M: gl.constexpr,
    A_COL_MAJOR: gl.constexpr,
    B_COL_MAJOR: gl.constexpr,
    NUM_SMS: gl.constexpr,
):
    """The loader warp: each tile's ``K`` steps into the ring, as its consumers free stages.

    A stage holds ``B``'s block and ``A``'s rows in boxes of ``A_BOX`` rows:
    one box of a 128-row tile, a box a consumer of a 192-row tile (the copy
    engine takes boxes of power-of-two sides).
    """
    STAGES: gl.constexpr = b_bufs.type.shape[0]
    BOXES: gl.constexpr = a_bufs.type.shape[0] // STAGES
    A_BOX: gl.constexpr = BLOCK_M // BOXES
    num_pid_m = gl.cdiv(M, BLOCK_M)
    num_pid_n = gl.cdiv(N, BLOCK_N + BLOCK_N2)
    b_bytes: gl.constexpr = b_desc.block_type.nbytes + (
        b2_desc.block_type.nbytes if BLOCK_N2 else 0
    )
    count = 0
    for tile in range(gl.program_id(0), num_pid_m * num_pid_n, NUM_SMS):
        pid_m, pid_n = _tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
        off_m = _row_start(pid_m, M, BLOCK_M)
        off_n = pid_n * (BLOCK_N + BLOCK_N2)
        for off_k in range(0, K, BLOCK_K):
            s = count % STAGES
            # A fresh mbarrier counts as having completed the phase before its first.
            mbarrier.wait(empty.index(s), ((count // STAGES) & 1) ^ 1)
            bar = ready.index(s)
            mbarrier.expect(bar, BOXES * a_desc.block_type.nbytes + b_bytes)
            for box in gl.static_range(BOXES):
                a_buf = a_bufs.index(s * BOXES + box)
                if A_COL_MAJOR:
                    tma.async_copy_global_to_shared(
                        a_desc, [off_k, off_m + box * A_BOX], bar, a_buf
                    )
                else:
                    tma.async_copy_global_to_shared(
                        a_desc, [off_m + box * A_BOX, off_k], bar, a_buf
                    )
            if B_COL_MAJOR:
                tma.async_copy_global_to_shared(b_desc, [off_n, off_k], bar, b_bufs.index(s))
            else:
                tma.async_copy_global_to_shared(b_desc, [off_k, off_n], bar, b_bufs.index(s))
            if BLOCK_N2:
                b2 = b2_bufs.index(s)
                if B_COL_MAJOR:
                    tma.async_copy_global_to_shared(b2_desc, [off_n + BLOCK_N, off_k], bar, b2)
                else:
                    tma.async_copy_global_to_shared(b2_desc, [off_k, off_n + BLOCK_N], bar, b2)
            count += 1


@gluon.jit
def _ws_consumer(
    a_bufs,
    b_bufs,
    b2_bufs,
    ready,
    empty,
    c_desc,
    c2_desc,
    c_smem,
    c2_smem,
    M,
    N,
    K,
    PART: gl.constexpr,
    BLOCK_M: gl.constexpr,
    BLOCK_N: gl.constexpr,
    BLOCK_N2: gl.constexpr,
    BLOCK_K: gl.constexpr,
    GROUP_M: gl.constexpr,
    A_COL_MAJOR: gl.constexpr,
    B_COL_MAJOR: gl.constexpr,
    NUM_SMS: gl.constexpr,
):
    """A consumer warpgroup: rows ``PART * SUB_M`` on of every tile, and their store.

    Each ``K`` step waits for its stage, issues the wgmma asynchronously and
    waits for the step before's, whose stage it then hands back (an
    mbarrier arrival: no barrier with the other warps). The output goes
    through shared memory and the copy engine, the store of one tile in
    flight while the next tile's ``K`` loop runs; a split epilogue (the
    tile's one-wave form) stores its parts one after another through one
    buffer of half the tile's width.
    """
    STAGES: gl.constexpr = b_bufs.type.shape[0]
    BOXES: gl.constexpr = a_bufs.type.shape[0] // STAGES
    A_BOX: gl.constexpr = BLOCK_M // BOXES
    SUB_M: gl.constexpr = c_desc.block_type.shape[0]
    # The epilogue's columns a store: BLOCK_N, or half of it through one buffer
    # that the second accumulator (as wide, or none) shares.
    EPI_N: gl.constexpr = c_desc.block_type.shape[1]
    gl.static_assert(EPI_N == BLOCK_N or (2 * EPI_N == BLOCK_N and BLOCK_N2 % EPI_N == 0))
    # This consumer's rows: the box that holds them, and where in it they start.
    BOX: gl.constexpr = PART * SUB_M // A_BOX
    ROW: gl.constexpr = PART * SUB_M % A_BOX
    layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 16]
    )
    # A second accumulator's width: BLOCK_N2, or a stand-in never used without one.
    N2: gl.constexpr = BLOCK_N2 if BLOCK_N2 else 8
    layout2: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, N2, 16]
    )
    # Steps' wgmma groups in flight after a step's wait: the step's own.
    IN_FLIGHT: gl.constexpr = 2 if BLOCK_N2 else 1
    num_pid_m = gl.cdiv(M, BLOCK_M)
    num_pid_n = gl.cdiv(N, BLOCK_N + BLOCK_N2)
    count = 0
    for tile in range(gl.program_id(0), num_pid_m * num_pid_n, NUM_SMS):
        pid_m, pid_n = _tile_coords(tile, num_pid_m, num_pid_n, GROUP_M)
        acc = gl.zeros((SUB_M, BLOCK_N), dtype=gl.float32, layout=layout)
        acc2 = gl.zeros((SUB_M, N2), dtype=gl.float32, layout=layout2)
        first = count
        for _ in range(0, K, BLOCK_K):
            s = count % STAGES
            mbarrier.wait(ready.index(s), (count // STAGES) & 1)
            if A_COL_MAJOR:
                a = a_bufs.index(s * BOXES + BOX).slice(ROW, SUB_M, dim=1).permute((1, 0))
            else:
                a = a_bufs.index(s * BOXES + BOX).slice(ROW, SUB_M, dim=0)
            b = b_bufs.index(s)
            if B_COL_MAJOR:
                b = b.permute((1, 0))
            acc = warpgroup_mma(a, b, acc, is_async=True)
            if BLOCK_N2:
                b2 = b2_bufs.index(s)
                if B_COL_MAJOR:
                    b2 = b2.permute((1, 0))
                acc2 = warpgroup_mma(a, b2, acc2, is_async=True)
                acc, acc2 = warpgroup_mma_wait(IN_FLIGHT, deps=[acc, acc2])
            else:
                acc = warpgroup_mma_wait(IN_FLIGHT, deps=[acc])
            mbarrier.arrive(empty.index((count + STAGES - 1) % STAGES), pred=count > first)
            count += 1
        acc, acc2 = warpgroup_mma_wait(0, deps=[acc, acc2])
        mbarrier.arrive(empty.index((count + STAGES - 1) % STAGES), pred=count > first)
        off_m = _row_start(pid_m, M, BLOCK_M) + PART * SUB_M
        off_n = pid_n * (BLOCK_N + BLOCK_N2)
        if EPI_N == BLOCK_N:
            tma.store_wait(0)  # the previous tile's stores have left c_smem and c2_smem
            c_smem.store(acc.to(c_desc.dtype))
            if BLOCK_N2:
                c2_smem.store(acc2.to(c_desc.dtype))
            fence_async_shared()
            tma.async_copy_shared_to_global(c_desc, [off_m, off_n], c_smem)
            if BLOCK_N2:
                tma.async_copy_shared_to_global(c2_desc, [off_m, off_n + BLOCK_N], c2_smem)
        else:
            # Both halves of the accumulator, then the second accumulator, one
            # after another through the one buffer of EPI_N columns.
            lo, hi = gl.split(acc.reshape([SUB_M, 2, EPI_N]).permute((0, 2, 1)))
            _ws_store(c_desc, c_smem, lo, off_m, off_n)
            _ws_store(c_desc, c_smem, hi, off_m, off_n + EPI_N)
            if BLOCK_N2:
                _ws_store(c2_desc, c_smem, acc2, off_m, off_n + BLOCK_N)
    tma.store_wait(0)


@gluon.jit
def _ws_store(c_desc, c_smem, part, off_m, off_n):
    """Store ``part`` at ``(off_m, off_n)`` through ``c_smem``, once its last store has left it."""
    tma.store_wait(0)
    c_smem.store(part.to(c_desc.dtype))
    fence_async_shared()
    tma.async_copy_shared_to_global(c_desc, [off_m, off_n], c_smem)


@gluon.jit(do_not_specialize=["M", "N", "K"])
def _matmul_ws_kernel(
    a_desc,
    b_desc,
    c_desc,
    b2_desc,
    c2_desc,
    M,
    N,
    K,
    BLOCK_M: gl.constexpr,
    BLOCK_N: gl.constexpr,
    BLOCK_N2: gl.constexpr,
    BLOCK_K: gl.constexpr,
    STAGES: gl.constexpr,
    GROUP_M: gl.constexpr,
    A_COL_MAJOR: gl.constexpr,
    B_COL_MAJOR: gl.constexpr,
    NUM_SMS: gl.constexpr,
):
    """Persistent GEMM, warp-specialised: a loader warp and a consumer warpgroup per 64 rows.

    The programs walk the output tiles as :func:`_matmul_tma_kernel` does,
    with its arguments (less split-K, swapped tiles and the epilogue's
    options: the launcher's :func:`_descriptors` gives it its own boxes), and
    ``num_warps=4``: the default partition is the first consumer warpgroup,
    and the loader warp and the other consumer warpgroups (one for a
    128-row tile, two for a 192-row tile) are worker partitions beside it (a
    warp alone takes a warpgroup's registers: 12 or 16 warps in all).
    Operands arrive through the copy engine into ``STAGES`` stages, each with
    two mbarriers: ``ready`` (its copies landed: the loader's expected bytes
    arrived) and ``empty`` (every consumer has handed it back). Consumer
    ``p`` computes rows ``64 * p`` on of each tile from the shared stage (a
    wgmma takes 64 rows a warpgroup), its accumulator in its own registers,
    and stores them through its own shared buffer. No warp waits at a barrier
    for another group's warps: the Triton kernel's warps all meet at one
    every ``K`` step.
    """
    SUB_M: gl.constexpr = c_desc.block_type.shape[0]
    CONSUMERS: gl.constexpr = BLOCK_M // SUB_M
    # A's rows a box (the launcher's choice): a stage holds BLOCK_M // A_BOX boxes.
    A_BOX: gl.constexpr = a_desc.block_type.shape[1 if A_COL_MAJOR else 0]
    dtype: gl.constexpr = c_desc.dtype
    shape_a: gl.constexpr = [STAGES * BLOCK_M // A_BOX] + a_desc.block_type.shape
    a_bufs = gl.allocate_shared_memory(dtype, shape_a, a_desc.layout)
    b_bufs = gl.allocate_shared_memory(dtype, [STAGES] + b_desc.block_type.shape, b_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=CONSUMERS)
    c0 = gl.allocate_shared_memory(dtype, c_desc.block_type.shape, c_desc.layout)
    c1 = gl.allocate_shared_memory(dtype, c_desc.block_type.shape, c_desc.layout)
    c2 = c0
    if CONSUMERS == 3:
        c2 = gl.allocate_shared_memory(dtype, c_desc.block_type.shape, c_desc.layout)
    # The second block of columns (BLOCK_N2), or stand-ins that are never used.
    b2_bufs = b_bufs
    d0 = c0
    d1 = c1
    d2 = c2
    if BLOCK_N2:
        shape_b2: gl.constexpr = [STAGES] + b2_desc.block_type.shape
        b2_bufs = gl.allocate_shared_memory(dtype, shape_b2, b2_desc.layout)
    # A split epilogue (half of BLOCK_N a store) stores both accumulators through c0..c2.
    D_BUFFERS: gl.constexpr = BLOCK_N2 > 0 and c_desc.block_type.shape[1] == BLOCK_N
    if D_BUFFERS:
        d0 = gl.allocate_shared_memory(dtype, c2_desc.block_type.shape, c2_desc.layout)
        d1 = gl.allocate_shared_memory(dtype, c2_desc.block_type.shape, c2_desc.layout)
        d2 = d0
        if CONSUMERS == 3:
            d2 = gl.allocate_shared_memory(dtype, c2_desc.block_type.shape, c2_desc.layout)
    # The partitions' arguments are written out in the call: Gluon takes no
    # starred arguments, and a tuple kept in a variable turns constants into tensors.
    if CONSUMERS == 2:
        gl.warp_specialize(
            [
                (
                    _ws_consumer,
                    (a_bufs, b_bufs, b2_bufs, ready, empty, c_desc, c2_desc, c0, d0, M, N, K,
                     0, BLOCK_M, BLOCK_N, BLOCK_N2, BLOCK_K, GROUP_M, A_COL_MAJOR, B_COL_MAJOR,
                     NUM_SMS),
                ),
                (
                    _ws_loader,
                    (a_desc, b_desc, b2_desc, a_bufs, b_bufs, b2_bufs, ready, empty, M, N, K,
                     BLOCK_M, BLOCK_N, BLOCK_N2, BLOCK_K, GROUP_M, A_COL_MAJOR, B_COL_MAJOR,
                     NUM_SMS),
                ),
                (
                    _ws_consumer,
                    (a_bufs, b_bufs, b2_bufs, ready, empty, c_desc, c2_desc, c1, d1, M, N, K,
                     1, BLOCK_M, BLOCK_N, BLOCK_N2, BLOCK_K, GROUP_M, A_COL_MAJOR, B_COL_MAJOR,
                     NUM_SMS),
                ),
            ],
            [1, 4],
            [WS_LOADER_REGS, WS_CONSUMER_REGS],
        )  # fmt: skip
    else:
        gl.warp_specialize(
            [
                (
                    _ws_consumer,
                    (a_bufs, b_bufs, b2_bufs, ready, empty, c_desc, c2_desc, c0, d0, M, N, K,
                     0, BLOCK_M, BLOCK_N, BLOCK_N2, BLOCK_K, GROUP_M, A_COL_MAJOR, B_COL_MAJOR,
                     NUM_SMS),
                ),
                (
                    _ws_loader,
                    (a_desc, b_desc, b2_desc, a_bufs, b_bufs, b2_bufs, ready, empty, M, N, K,
                     BLOCK_M, BLOCK_N, BLOCK_N2, BLOCK_K, GROUP_M, A_COL_MAJOR, B_COL_MAJOR,
                     NUM_SMS),
                ),
                (
                    _ws_consumer,
                    (a_bufs, b_bufs, b2_bufs, ready, empty, c_desc, c2_desc, c1, d1, M, N, K,
                     1, BLOCK_M, BLOCK_N, BLOCK_N2, BLOCK_K, GROUP_M, A_COL_MAJOR, B_COL_MAJOR,
                     NUM_SMS),
                ),
                (
                    _ws_consumer,
                    (a_bufs, b_bufs, b2_bufs, ready, empty, c_desc, c2_desc, c2, d2, M, N, K,
                     2, BLOCK_M, BLOCK_N, BLOCK_N2, BLOCK_K, GROUP_M, A_COL_MAJOR, B_COL_MAJOR,
                     NUM_SMS),
                ),
            ],
            [1, 4, 4],
            [WS_LOADER_REGS, WS_CONSUMER3_REGS, WS_CONSUMER3_REGS],
        )  # fmt: skip


# ---------------------------------------------------------------------------
# Launcher
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TmaTile:
    """A tile of the Hopper kernel and how it is launched.

    Shared memory is ``(block_m + tile_n) * block_k * 2`` bytes a stage plus
    ``block_m * tile_n * 2`` for the epilogue (``block_n`` of it divided by
    ``epilogue_split``), within the
    H200's 227 KiB (the ahead-of-time compile in ``tests/test_matmul.py``
    checks every tile of :data:`TMA_TILES`). A 128x256 accumulator needs 8
    warps to stay in registers.

    Attributes:
        block_m: Rows of the output tile.
        block_n: Columns of the output tile.
        block_k: The ``K`` step.
        warps: ``num_warps``.
        stages: ``num_stages``, the operand tiles in flight.
        epilogue_split: Column slices the output tile is stored in (1 or 2).
            The Gluon kernel stores its two halves, then a second accumulator
            as wide, one after another through one buffer of half the width,
            which frees a stage of shared memory for the tile's one-wave
            form (``gemm_rule.ONE_WAVE_TILES``).
        swap_ab: Compute the transposed tile (the kernel's ``SWAP_AB``): for
            ``block_m`` under 64, whose rows wgmma cannot take as its ``M``.
        block_n2: Columns of a second accumulator beside the first (the
            kernel's ``BLOCK_N2``; 0: none): the tile is ``block_n +
            block_n2`` columns wide. Such a tile runs its tile and ``K``
            loops apart, and never splits ``K``.
        gluon: The warp-specialised Gluon kernel (:func:`_matmul_ws_kernel`:
            a loader warp and two consumer warpgroups, ``stages`` its ring of
            stages; ``warps`` is 4, a warpgroup) instead of the Triton kernel
            (:func:`_matmul_tma_kernel`). Such a tile never splits ``K``.
    """

    block_m: int
    block_n: int
    block_k: int
    warps: int
    stages: int
    epilogue_split: int = 1
    swap_ab: bool = False
    block_n2: int = 0
    gluon: bool = False

    @property
    def tile_n(self) -> int:
        """Columns of the output tile: ``block_n`` plus ``block_n2``."""
        return self.block_n + self.block_n2

    def count(self, M, N):
        """Output tiles of an ``M x N`` product: the work items of one run of ``K``."""
        return plans.cdiv(M, self.block_m) * plans.cdiv(N, self.tile_n)

    @property
    def splits(self) -> bool:
        """Whether the tile may split ``K`` (:func:`_split_k`): a Triton tile of one accumulator.

        The partial tiles of split-K are one ``block_m x block_n`` block each,
        so a tile of two accumulators (``block_n2``) never splits; nor does
        the Gluon kernel, which has no split epilogue.
        """
        return not self.block_n2 and not self.gluon

    @property
    def name(self) -> str:
        """The sweep's label: ``128x256x64 w8 s3``, ``128x128+16x64 w4 s4``, `` sw`` where swapped.

        A tile of the Gluon kernel: ``128x128x64 s6 gluon``.
        """
        cols = f"{self.block_n}+{self.block_n2}" if self.block_n2 else f"{self.block_n}"
        size = f"{self.block_m}x{cols}x{self.block_k}"
        name = (
            f"{size} s{self.stages} gluon" if self.gluon else f"{size} w{self.warps} s{self.stages}"
        )
        return name + f" e{self.epilogue_split}" * (self.epilogue_split > 1) + " sw" * self.swap_ab

    def launch_args(self) -> dict:
        """The kernel's tile constants and launch options (its kernel: :attr:`gluon`)."""
        if self.gluon:
            return {
                "BLOCK_M": self.block_m,
                "BLOCK_N": self.block_n,
                "BLOCK_N2": self.block_n2,
                "BLOCK_K": self.block_k,
                "STAGES": self.stages,
                "GROUP_M": 8,
                "num_warps": self.warps,
            }
        return {
            "BLOCK_M": self.block_m,
            "BLOCK_N": self.block_n,
            "BLOCK_K": self.block_k,
            "GROUP_M": 8,
            # Fused, a tile of two accumulators resets the second with a select
            # inside the K loop, and ptxas then serialises every wgmma (C7515).
            "FLATTEN": not self.block_n2,
            "EPILOGUE_SPLIT": self.epilogue_split,
            "SWAP_AB": self.swap_ab,
            "BLOCK_N2": self.block_n2,
            "num_warps": self.warps,
            "num_stages": self.stages,
        }


@dataclasses.dataclass(frozen=True)
class TmaPlan:
    """What one product launches on the Hopper path: a tile and the runs ``K`` is split into.

    With ``rest``, the tile covers only the first ``cols`` columns of the
    output, the columns of its full waves, and ``rest`` (a plan of its own,
    unsplit in columns) the others, in a second launch (:func:`_column_split`).
    """

    tile: TmaTile
    split_k: int = 1
    cols: int = 0
    rest: TmaPlan | None = None

    def parts(self, N) -> list[tuple[TmaPlan, int, int]]:
        """Each launch over ``N`` columns: its plan (one tile), first column and width."""
        if self.rest is None:
            return [(self, 0, N)]
        head = TmaPlan(self.tile, self.split_k)
        return [(head, 0, self.cols), (self.rest, self.cols, N - self.cols)]


#: Every tile the Hopper path may take: what ``scripts/gemm_tune.py`` times,
#: each with every split-K count that fits the SMs, against cuBLAS at the
#: models layer shapes; ``gemm_rule.TMA_RULES`` takes its tiles from it.
#: 128- and 256-row tiles are for products that fill the SMs with output tiles;
#: 64-row tiles (one warpgroup) for few rows, where the product is bound by
#: reading ``B`` and the tile count matters more than the tile's rate (a
#: 64x128x64 tile ran the cubes at 0.60-0.65x of cuBLAS in
#: ``results/h200/checks/gemm-tune-20261201T0416Z.log``); narrow ones (32 and
#: 64 columns, 256 of ``K`` a step) give a few-row product enough output tiles
#: to fill the SMs without splitting ``K``; a 32-row tile (``mma.sync``, under
#: wgmma's 64 rows) fetches half a 64-row tile's rows of ``A`` for 32 rows or
#: fewer. Swapped tiles (`` sw``, :attr:`TmaTile.swap_ab`) of 16, 32 and 64
#: rows put the rows on wgmma's ``N`` side: a 16- or 32-row tile then runs on
#: wgmma, and fetches only its own rows of ``A``. The three after them hold
#: two accumulators (:attr:`TmaTile.block_n2`): 192 and 144 columns, widths
#: that fill the SMs at a few hundred rows where the powers of two leave a
#: wave part-empty. The next six run on the warp-specialised Gluon kernel
#: (:attr:`TmaTile.gluon`), which keeps more stages in flight than the Triton
#: kernel's tiles of their size and has no barrier between its warpgroups each
#: ``K`` step: three of one accumulator (``gemm_rule.GLUON_TILES``) and three of
#: two, 192, 192 and 144 columns wide (``gemm_rule.GLUON_WIDE_TILES``, and the
#: 144-column one in ``WIDE_TILES_FEW``). The four after them are one-wave
#: forms of four of those (``gemm_rule.ONE_WAVE_TILES``: a stage more, the
#: epilogue in halves through one buffer), which the plan runs in place of
#: their tiles where a launch's tiles fit one wave. The Triton kernel's own
#: warp-specialised tiles (``tl.range(warp_specialize=True)``) left the
#: catalogue when the descriptors moved to the host: Triton 3.6's
#: warp-specialisation pass rejects their store through a descriptor argument,
#: and no plan took them (they ran slower than the plan or level with it in
#: ``results/h100-80gb-hbm3/checks/wide-ws-ab-20261206T1040Z.log``).
TMA_TILES = (
    TmaTile(128, 256, 64, 8, 3),
    TmaTile(128, 256, 64, 8, 4, epilogue_split=2),
    TmaTile(256, 128, 64, 8, 3),
    TmaTile(128, 128, 64, 8, 4),
    TmaTile(128, 128, 64, 4, 4),
    TmaTile(128, 128, 128, 8, 3),
    TmaTile(128, 64, 128, 4, 4),
    TmaTile(64, 256, 64, 4, 4),
    TmaTile(64, 128, 128, 4, 4),
    TmaTile(64, 128, 64, 4, 8),
    TmaTile(64, 64, 128, 4, 6),
    TmaTile(64, 64, 256, 4, 3),
    TmaTile(64, 32, 256, 4, 4),
    TmaTile(32, 128, 128, 4, 5),
    TmaTile(16, 128, 128, 4, 6, swap_ab=True),
    TmaTile(16, 64, 256, 4, 4, swap_ab=True),
    TmaTile(32, 128, 128, 4, 5, swap_ab=True),
    TmaTile(32, 64, 256, 4, 4, swap_ab=True),
    TmaTile(64, 128, 64, 4, 8, swap_ab=True),
    TmaTile(64, 128, 64, 4, 6, block_n2=64),
    TmaTile(128, 128, 64, 4, 4, block_n2=16),
    TmaTile(128, 128, 64, 8, 4, block_n2=64),
    TmaTile(128, 256, 64, 4, 3, gluon=True),
    TmaTile(128, 128, 64, 4, 6, gluon=True),
    TmaTile(192, 128, 64, 4, 4, gluon=True),
    TmaTile(192, 128, 64, 4, 3, block_n2=64, gluon=True),
    TmaTile(128, 128, 64, 4, 4, block_n2=64, gluon=True),
    TmaTile(128, 128, 64, 4, 5, block_n2=16, gluon=True),
    TmaTile(128, 256, 64, 4, 4, epilogue_split=2, gluon=True),
    TmaTile(192, 128, 64, 4, 5, epilogue_split=2, gluon=True),
    TmaTile(192, 128, 64, 4, 4, epilogue_split=2, block_n2=64, gluon=True),
    TmaTile(128, 128, 64, 4, 5, epilogue_split=2, block_n2=64, gluon=True),
)
_TILES_BY_NAME = {tile.name: tile for tile in TMA_TILES}

#: Streaming multiprocessors assumed under the interpreter: an odd count, so
#: the persistent tile loop's stride is exercised on the CPU too.
_INTERPRETER_SMS = 3


def _bucket(n) -> int:
    """``n`` rounded up to a power of two, at least 16 (the plan table's and tuning key's bucket).

    Written as a loop of comparisons so that a symbolic size under
    ``torch.compile`` becomes a range guard rather than a specialisation.
    """
    bucket = 16
    while bucket < n:
        bucket *= 2
    return bucket


@functools.cache
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


@functools.cache
def _compute_major(index: int) -> int:
    """The major compute capability of CUDA device ``index`` (asked once per device)."""
    return torch.cuda.get_device_capability(index)[0]


def _fills(items, num_sms: int, fill: float) -> bool:
    """Whether ``items`` work items keep at least ``fill`` of the SMs' time busy.

    The items run in whole waves of one an SM: ``cdiv(items, num_sms)`` waves
    of ``num_sms`` slots. Integer arithmetic, so that symbolic sizes under
    ``torch.compile`` become guards on ranges.
    """
    return 100 * items >= round(100 * fill) * plans.cdiv(items, num_sms) * num_sms


def _fills_better(items, num_sms: int, than) -> bool:
    """Whether ``items`` work items fill their waves strictly better than ``than`` items."""
    busy, than_busy = (plans.cdiv(n, num_sms) * num_sms for n in (items, than))
    return items * than_busy > than * busy


def _split_k(tile: TmaTile, tiles, K, num_sms: int, max_split: int) -> int:
    """Runs of ``K`` for ``tiles`` output tiles of ``tile``: the fewest that fill the waves.

    Output tiles run in waves of one an SM, and a last wave only partly full
    leaves SMs idle for a whole tile's ``K`` loop: a 64 x 4096 output is 32
    tiles of 64x128 for 132 SMs (one wave, 24% busy), a 384 x 4096 output 96
    tiles of 128x128 (73%), and the ``dB`` of a linear layer with a large
    batch (``1024 x 1024`` from ``K = 65536``: 64 tiles of 128x128) ran at
    0.65-0.67x of cuBLAS (``results/h200/checks/gemm-tune-20261201T0416Z.log``).
    Splitting ``K`` into runs multiplies the work items: this takes the fewest
    runs whose items keep ``gemm_rule.WAVE_FILL`` of the SMs' time busy, else
    the count that fills the waves best (the fewest on a tie). A count may be
    taken when its runs are at most ``max_split`` (the plan table row's) each
    at least ``gemm_rule.SPLIT_K_MIN_RUN`` of ``K`` long, or at most
    ``gemm_rule.LONG_K_SPLIT`` each at least ``gemm_rule.LONG_K_RUN`` long.
    Each run past the first costs a float32 partial tile, written once and
    read once, mostly within the L2. A tile that may not split
    (:attr:`TmaTile.splits`) never does.
    """
    if not tile.splits:
        return 1
    best = 1
    for runs in range(1, max(max_split, gemm_rule.LONG_K_SPLIT) + 1):
        short = runs <= max_split and runs * gemm_rule.SPLIT_K_MIN_RUN <= K
        long = runs <= gemm_rule.LONG_K_SPLIT and runs * gemm_rule.LONG_K_RUN <= K
        if runs > 1 and not (short or long):
            break
        if _fills(tiles * runs, num_sms, gemm_rule.WAVE_FILL):
            return runs
        if _fills_better(tiles * runs, num_sms, tiles * best):
            best = runs
    return best


def _tma_plan(M, N, K, num_sms: int, split_columns: bool = True) -> TmaPlan:
    """The Hopper path's tile and split-K count for an ``M x N x K`` product.

    The row of ``gemm_rule.TMA_RULES`` for ``M``'s bucket names the tiles;
    each gets its split-K count (:func:`_split_k`, at most the row's
    ``max_split``), and the first whose work items keep at least
    ``gemm_rule.WAVE_FILL`` of the SMs' time busy is taken, else the one that
    keeps the most (the first on a tie); then, with ``split_columns``, the
    columns of a part-empty last wave may go to a second launch
    (:func:`_column_split`). Integer arithmetic only, so that symbolic sizes
    under ``torch.compile`` become guards on ranges.
    """
    bucket = _bucket(M)
    rule = next(r for r in gemm_rule.TMA_RULES if r.max_m is None or bucket <= r.max_m)
    best = None
    for name in rule.tiles:
        tile = _TILES_BY_NAME[name]
        tiles = tile.count(M, N)
        split = _split_k(tile, tiles, K, num_sms, rule.max_split)
        items = tiles * split
        if _fills(items, num_sms, gemm_rule.WAVE_FILL):
            best = (TmaPlan(tile, split), items)
            break
        if best is None or _fills_better(items, num_sms, best[1]):
            best = (TmaPlan(tile, split), items)
    plan = TmaPlan(_one_wave(best[0].tile, best[1], num_sms), best[0].split_k)
    return _column_split(plan, M, N, K, num_sms) if split_columns else plan


def _one_wave(tile: TmaTile, items, num_sms: int) -> TmaTile:
    """``tile``, or its one-wave form (``gemm_rule.ONE_WAVE_TILES``) where ``items`` fit one wave.

    In one wave no program has a next tile whose ``K`` loop its stores could
    overlap, so the one-wave form spends the shared memory of the epilogue
    buffers on a stage more.
    """
    if items <= num_sms and tile.name in gemm_rule.ONE_WAVE_TILES:
        return _TILES_BY_NAME[gemm_rule.ONE_WAVE_TILES[tile.name]]
    return tile


def _column_split(plan: TmaPlan, M, N, K, num_sms: int) -> TmaPlan:
    """``plan``, or its tile over its full waves' columns and a plan of their own for the rest.

    A product of several waves of output tiles whose last wave leaves more
    than ``1 - gemm_rule.COLUMN_SPLIT_FILL`` of the SMs' time idle (a 1024 x
    14336 output: 448 tiles of 128x256 for 132 SMs, four waves 85% busy)
    keeps its tile over as many whole columns of tiles as its full waves hold
    (49 columns of 8 tiles: three waves, 99% busy), and the remaining columns
    (1792) are a narrower product with its own plan (112 tiles of 128x128:
    one wave of tiles half the size), launched after it. Columns, not rows:
    each launch reads only its own columns of ``B``, the large operand of a
    product of few rows, and all of ``A``, which the second launch finds in
    the L2. Only where the second product's waves take less time than the
    last wave they replace, counted in output elements a program computes
    (its tile over its runs of ``K``); not for a split ``K``.
    """
    tile = plan.tile
    rows = plans.cdiv(M, tile.block_m)
    items = tile.count(M, N)
    if plan.split_k > 1 or items <= num_sms or _fills(items, num_sms, gemm_rule.COLUMN_SPLIT_FILL):
        return plan
    head = (plans.cdiv(items, num_sms) - 1) * num_sms // rows  # whole tile columns
    if head == 0:
        return plan
    cols = head * tile.tile_n
    rest = _tma_plan(M, N - cols, K, num_sms, split_columns=False)
    rest_waves = plans.cdiv(rest.tile.count(M, N - cols) * rest.split_k, num_sms)
    area, rest_area = (t.block_m * t.tile_n for t in (tile, rest.tile))
    if rest_waves * rest_area >= area * rest.split_k:
        return plan
    return TmaPlan(_one_wave(tile, rows * head, num_sms), 1, cols, rest)


#: :func:`_tma_plan` for plain integer sizes, cached: the host cost of a call
#: matters at the small products (symbolic sizes skip the cache).
_tma_plan_cached = functools.lru_cache(maxsize=4096)(_tma_plan)


def _fixed_config_kwargs(config: triton.Config) -> dict:
    """A fixed pointer-path config's launch arguments (meta-parameters, warps, stages).

    ``num_ctas`` is left out: ``wrap_triton`` refuses it as a launch argument,
    and every config here runs one CTA per program (its default).
    """
    return {k: v for k, v in config.all_kwargs().items() if k != "num_ctas"}


def _pointer_config(bm, bn, bk, warps, stages):
    return triton.Config(
        {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8},
        num_warps=warps,
        num_stages=stages,
    )


#: Candidate configs of the pointer path (any GPU, any strides).
POINTER_CONFIGS = [
    _pointer_config(128, 128, 32, 4, 4),
    _pointer_config(128, 256, 32, 8, 3),
    _pointer_config(128, 64, 32, 4, 4),
    _pointer_config(64, 128, 32, 4, 4),
    _pointer_config(64, 64, 32, 4, 4),
]

#: What runs under the Triton interpreter, where the autotuner cannot time
#: anything: small tiles keep the CPU emulation fast.
INTERPRETER_POINTER_CONFIG = _pointer_config(32, 32, 32, 4, 1)
INTERPRETER_TILE = TmaTile(32, 32, 32, 4, 1)


_matmul_tuned = triton.autotune(
    configs=POINTER_CONFIGS,
    key=["M_BUCKET", "N", "K_BUCKET", "INPUT_PRECISION", "A_UNIT", "B_UNIT", "C_UNIT", "VEC"],
)(_matmul_kernel)


def _widen_operands(dtype: torch.dtype, interpreter: bool) -> bool:
    """Whether the kernels must convert tiles to float32 before ``tl.dot``.

    Only under the Triton 3.6 interpreter (``interpreter``: what
    :func:`~kernel_portfolio.contracts.interpreter_enabled` says), for
    bfloat16: its ``tl.dot`` has
    no bfloat16 case and multiplies the raw 16-bit patterns as integers. The
    conversion is exact (a product of two bfloat16 values fits in float32's
    mantissa), so the interpreter then computes what the GPU computes.
    """
    return interpreter and dtype == torch.bfloat16


def _tma_layout(t: torch.Tensor) -> tuple[bool, int] | None:
    """How the copy engine can describe the matrix ``t``, or None if it cannot.

    Returns ``(col_major, stride)``: whether the unit stride is along the
    first dimension, and the other (leading) stride. The copy engine needs a
    16-byte aligned start, a unit stride, and a leading stride that is a
    positive multiple of 16 bytes and at least the row length. The start is
    judged by the storage offset (PyTorch's allocators align every storage to
    far more than 16 bytes), so the check also works on the fake tensors that
    ``torch.compile`` traces with.
    """
    elem = t.element_size()
    if (t.storage_offset() * elem) % 16 != 0:
        return None
    rows, cols = t.shape
    s0, s1 = t.stride()
    if s1 == 1 and s0 >= max(cols, 1) and (s0 * elem) % 16 == 0:
        return False, s0
    if s0 == 1 and s1 >= max(rows, 1) and (s1 * elem) % 16 == 0:
        return True, s1
    return None


def _pointer_layout(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> dict[str, int]:
    """The pointer kernel's layout constants: ``A_UNIT``, ``B_UNIT``, ``C_UNIT`` and ``VEC``.

    Each matrix's unit-stride dimension: 1 (row-major), 0 (a transposed view)
    or -1 (neither). Along it the kernel loads (or stores) vectors, which are
    16-byte aligned when the matrix's other stride and the size that masks
    that dimension are multiples of the vector. ``VEC`` is the largest power
    of two up to 16 bytes of elements dividing all of those
    (:func:`kernel_portfolio.plans.vec_width`); a matrix without a unit
    stride adds nothing (it is read element by element whatever ``VEC`` is).
    """
    (M, K), N = a.shape, b.shape[1]
    units, aligned = [], []
    for (s0, s1), (n0, n1) in ((a.stride(), (M, K)), (b.stride(), (K, N)), (out.stride(), (M, N))):
        if s1 == 1:
            units.append(1)
            aligned += (s0, n1)
        elif s0 == 1:
            units.append(0)
            aligned += (s1, n0)
        else:
            units.append(-1)
    vec = plans.vec_width(a.element_size(), aligned[0], aligned[1:]) if aligned else 1
    return {"A_UNIT": units[0], "B_UNIT": units[1], "C_UNIT": units[2], "VEC": vec}


def _tma_supported(a: torch.Tensor) -> bool:
    """Whether the Hopper path exists for ``a``'s device and dtype (when not interpreting)."""
    if a.device.type != "cuda":
        return False
    return a.dtype in (torch.float16, torch.bfloat16) and _compute_major(a.device.index) == 9


def _launch_matmul(
    a: torch.Tensor,
    b: torch.Tensor,
    out: torch.Tensor,
    *,
    allow_tf32: bool,
    path: str = "auto",
    config: triton.Config | None = None,
    plan: TmaPlan | None = None,
    precision: str | None = None,
) -> None:
    """Write ``a @ b`` into ``out`` (shape ``(M, N)``, any strides for the pointer path).

    Args:
        a: ``(M, K)`` matrix.
        b: ``(K, N)`` matrix.
        out: ``(M, N)`` output; tests pass a NaN-poisoned one.
        allow_tf32: float32 inputs may use TF32 tensor cores.
        path: ``"auto"`` (the Hopper path where it applies, else pointers),
            ``"tma"`` or ``"pointer"`` to force one; tests and the tuning
            script force paths.
        config: A fixed pointer-path ``triton.Config`` instead of autotuning
            (tuning script, tests); under the interpreter
            :data:`INTERPRETER_POINTER_CONFIG`.
        plan: A fixed Hopper-path plan instead of :func:`_tma_plan`'s (tuning
            script, tests); under the interpreter :data:`INTERPRETER_TILE`,
            unsplit.
        precision: The pointer path's ``tl.dot`` input precision for float32
            operands instead of ``"tf32"`` or ``gemm_rule.FP32_PRECISION`` (tuning
            script).

    Raises:
        ValueError: ``path="tma"`` for operands the copy engine cannot
            describe, an unknown path, or a ``plan`` whose ``split_k`` is
            below 1 (or above 1 for a tile that may not split).
    """
    M, K = a.shape
    N = b.shape[1]
    if M == 0 or N == 0:
        return
    if K == 0:
        out.zero_()
        return
    interpreter = interpreter_enabled()  # one environment lookup per call
    layouts = [_tma_layout(t) for t in (a, b, out)]
    usable = all(layout is not None for layout in layouts) and not layouts[2][0]
    if path == "auto":
        path = "tma" if usable and not interpreter and _tma_supported(a) else "pointer"
    if path not in ("tma", "pointer"):
        raise ValueError(f"path must be 'auto', 'tma' or 'pointer', got {path!r}")
    if path == "tma" and a.dtype not in (torch.float16, torch.bfloat16):
        raise ValueError(f"path='tma' supports float16 and bfloat16, not {a.dtype}")

    if path == "pointer":
        if config is None and interpreter:
            config = INTERPRETER_POINTER_CONFIG
        if precision is None:
            precision = "ieee"
            if a.dtype == torch.float32:
                precision = "tf32" if allow_tf32 else gemm_rule.FP32_PRECISION
        kernel = _matmul_tuned if config is None else _matmul_kernel
        extra = {} if config is None else _fixed_config_kwargs(config)
        grid = lambda meta: (plans.cdiv(M, meta["BLOCK_M"]) * plans.cdiv(N, meta["BLOCK_N"]),)
        launchable(kernel)[grid](
            a,
            b,
            out,
            M,
            N,
            K,
            *a.stride(),
            *b.stride(),
            *out.stride(),
            M_BUCKET=_bucket(M),
            K_BUCKET=_bucket(K),
            INPUT_PRECISION=precision,
            WIDEN_OPERANDS=_widen_operands(a.dtype, interpreter),
            **_pointer_layout(a, b, out),
            **extra,
        )
        return

    if not usable:
        raise ValueError(
            "path='tma' needs a unit stride, a leading stride that is a multiple of 16 bytes "
            "and a 16-byte aligned start for a, b and a row-major out"
        )
    # Under device_guard the current device is a's.
    num_sms = _INTERPRETER_SMS if interpreter else _sm_count(torch.cuda.current_device())
    if plan is None:
        if interpreter:
            plan = TmaPlan(INTERPRETER_TILE)
        elif type(M) is int and type(N) is int and type(K) is int:
            plan = _tma_plan_cached(M, N, K, num_sms)
        else:
            plan = _tma_plan(M, N, K, num_sms)
    tile = plan.tile
    if plan.split_k < 1:
        raise ValueError(f"plan.split_k must be at least 1, got {plan.split_k}")
    if plan.split_k > 1 and not tile.splits:
        raise ValueError(f"plan.split_k must be 1 for the tile {tile.name}, got {plan.split_k}")
    if tile.gluon and interpreter:
        raise ValueError(
            f"the tile {tile.name} runs on a Hopper GPU: the interpreter runs no Gluon"
        )
    eager = eager_route()
    for part, first, width in plan.parts(N):
        if eager:
            _launch_tma(a, b, out, part, layouts, num_sms, first, width)
        else:  # traced: Triton's wrapper takes neither Gluon kernels nor host descriptors
            torch.ops.kp.matmul_tma(a, b, out, part.tile.name, part.split_k, first, width)


def _launch_tma(
    a: torch.Tensor,
    b: torch.Tensor,
    out: torch.Tensor,
    plan: TmaPlan,
    layouts: list[tuple[bool, int]],
    num_sms: int,
    first: int,
    width: int,
) -> None:
    """Launch the Hopper kernel of ``plan``'s tile over ``width`` columns from ``first``.

    ``layouts`` are :func:`_tma_layout`'s for ``a``, ``b`` and ``out``, and
    hold for their column slices too (a slice keeps the strides, and starts
    on a 16-byte boundary: ``first`` is a multiple of a tile's width). A
    program that finds no tile exits at once, so the grid is simply one
    program per multiprocessor: no size-dependent grid, nothing to guard.
    """
    if width != b.shape[1]:
        b, out = b[:, first : first + width], out[:, first : first + width]
    tile = plan.tile
    (M, K), N = a.shape, b.shape[1]
    descriptors = _descriptors(a, b, out, tile, layouts)
    layout_args = {"A_COL_MAJOR": layouts[0][0], "B_COL_MAJOR": layouts[1][0], "NUM_SMS": num_sms}
    if tile.gluon:
        launchable(_matmul_ws_kernel)[(num_sms,)](
            *descriptors, M, N, K, **layout_args, **tile.launch_args()
        )
        return
    partials = plan.split_k > 1
    ws = counts = out  # unused unless K is split
    if partials:
        n_tiles = tile.count(M, N)  # a tile that splits K has one accumulator
        ws = scratch((n_tiles, plan.split_k, tile.block_m, tile.block_n), torch.float32, out.device)
        counts = stream_buffer("matmul split-k counters", n_tiles, torch.int32, out.device)
    launchable(_matmul_tma_kernel)[(num_sms,)](
        *descriptors,
        ws,
        counts,
        M,
        N,
        K,
        plan.split_k,
        WIDEN_OPERANDS=_widen_operands(a.dtype, interpreter_enabled()),
        PARTIALS=partials,
        **layout_args,
        **tile.launch_args(),
    )


#: Rows of a consumer warpgroup of :func:`_matmul_ws_kernel` (a wgmma takes 64 rows a
#: warpgroup): its output boxes, and its boxes of ``A`` where a tile's rows are no power of two.
_WS_SUB_M = 64

_GLUON_DTYPES = {torch.float16: gl.float16, torch.bfloat16: gl.bfloat16}


@functools.cache
def _shared_layout(box: tuple[int, int], dtype: torch.dtype) -> gl.NVMMASharedLayout:
    """The Gluon kernel's shared-memory layout of a ``box`` of ``dtype`` (swizzled for wgmma)."""
    return gl.NVMMASharedLayout.get_default_for(list(box), _GLUON_DTYPES[dtype])


def _descriptor(
    t: torch.Tensor, stride: int, box: tuple[int, int], col_major: bool, gluon: bool
) -> TensorDescriptor | GluonTensorDescriptor:
    """A TMA descriptor of the matrix ``t`` for ``box``-sized blocks of it (rows, columns).

    It describes ``t`` in its own memory layout: a ``col_major`` matrix (unit
    stride along its rows, a transposed view) as its transpose, whose blocks
    the kernels transpose in shared memory; ``stride`` is the other stride.
    The Gluon kernel's descriptors also carry their shared-memory layout.
    """
    shape, box = list(t.shape), list(box)
    if col_major:
        shape, box = shape[::-1], box[::-1]
    if not gluon:
        return TensorDescriptor(t, shape, [stride, 1], box)
    return GluonTensorDescriptor(t, shape, [stride, 1], box, _shared_layout(tuple(box), t.dtype))


def _descriptors(a, b, out, tile: TmaTile, layouts) -> tuple:
    """The five descriptors the Hopper kernels take: ``A``, ``B``, ``C``, ``B2`` and ``C2``.

    Built on the host and passed by value, as cuBLAS passes its own: built in
    the kernel, every program wrote them into global memory and fenced them
    before its first copy, a cost of each launch that weighed most on the
    shortest products (``checks/ws-descriptor-ab-20261206T1711Z.log``). ``B2``
    and ``C2`` describe a second accumulator's columns (``BLOCK_N2``); a tile
    without one passes ``B`` and ``C`` again, unused.
    """
    (a_col, stride_a), (b_col, stride_b), (_, stride_c) = layouts
    gluon = tile.gluon
    a_rows = tile.block_m
    c_rows = tile.block_m
    if gluon:  # boxes of a consumer's rows, and A in one box a stage where it can
        a_rows = _WS_SUB_M if tile.block_m % 128 else tile.block_m
        c_rows = _WS_SUB_M
    a_desc = _descriptor(a, stride_a, (a_rows, tile.block_k), a_col, gluon)
    b_desc = _descriptor(b, stride_b, (tile.block_k, tile.block_n), b_col, gluon)
    c_box = (c_rows, tile.block_n // tile.epilogue_split)
    c_desc = _descriptor(out, stride_c, c_box, False, gluon)
    if not tile.block_n2:
        return a_desc, b_desc, c_desc, b_desc, c_desc
    b2_desc = _descriptor(b, stride_b, (tile.block_k, tile.block_n2), b_col, gluon)
    c2_desc = _descriptor(out, stride_c, (c_rows, tile.block_n2), False, gluon)
    return a_desc, b_desc, c_desc, b2_desc, c2_desc


@torch.library.custom_op("kp::matmul_tma", mutates_args=("out",))
def _matmul_tma_op(
    a: torch.Tensor,
    b: torch.Tensor,
    out: torch.Tensor,
    tile: str,
    split_k: int,
    first: int,
    width: int,
) -> None:
    """Write columns ``[first, first + width)`` of ``a @ b`` into ``out`` with a Hopper ``tile``.

    ``tile`` is a :attr:`TmaTile.name`; a plan of two parts
    (:attr:`TmaPlan.rest`) calls it once a part.

    The launcher's route for the Hopper path where it is traced
    (``kp::matmul`` under ``torch.compile``, dispatch modes, ``torch.func``):
    Triton's ``wrap_triton`` takes neither Gluon kernels nor descriptors built
    on the host, so the traced graph calls this op, which launches the same
    kernel with the same arguments as the eager routes. Its fake
    implementation writes nothing (``out`` is mutated).
    """
    with device_guard(a):
        layouts = [_tma_layout(t) for t in (a, b, out)]
        num_sms = _sm_count(torch.cuda.current_device())
        plan = TmaPlan(_TILES_BY_NAME[tile], split_k)
        _launch_tma(a, b, out, plan, layouts, num_sms, first, width)


# ---------------------------------------------------------------------------
# torch.library registration (custom op + autograd)
# ---------------------------------------------------------------------------


def _matmul(a: torch.Tensor, b: torch.Tensor, allow_tf32: bool) -> torch.Tensor:
    """``a @ b`` in a new tensor: the body of ``kp::matmul`` and of the eager routes."""
    out = torch.empty(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)
    with device_guard(a):
        _launch_matmul(a, b, out, allow_tf32=allow_tf32)
    return out


@triton_op("kp::matmul", mutates_args=())
def _matmul_op(a: torch.Tensor, b: torch.Tensor, *, allow_tf32: bool = False) -> torch.Tensor:
    return _matmul(a, b, allow_tf32)


def _product(a: torch.Tensor, b: torch.Tensor, allow_tf32: bool) -> torch.Tensor:
    """``a @ b`` by the route its context allows (:func:`kernel_portfolio.contracts.eager_route`).

    The eager routes (the launcher directly when autograd will not record,
    else the autograd Function :class:`_Matmul`) skip the dispatcher and its
    autograd wrapper, whose host time per call can be as long as a mid-sized
    product on the GPU. The public function and both backwards use this, so
    the backward products take the route of their own context (autograd runs
    them with grad disabled: the direct one, in eager code).
    """
    if direct_route(a, b):
        with direct_launches():
            return _matmul(a, b, allow_tf32)
    if eager_route():
        return _Matmul.apply(a, b, allow_tf32)
    return torch.ops.kp.matmul(a, b, allow_tf32=allow_tf32)


def _save(ctx, a: torch.Tensor, b: torch.Tensor, allow_tf32: bool) -> None:
    """Save what the backward needs: ``a`` only for ``dB``, ``b`` only for ``dA``."""
    need_a, need_b = ctx.needs_input_grad[:2]
    ctx.save_for_backward(a if need_b else None, b if need_a else None)
    ctx.allow_tf32 = allow_tf32


def _setup_context(ctx, inputs, keyword_only_inputs, output) -> None:
    a, b = inputs
    _save(ctx, a, b, keyword_only_inputs["allow_tf32"])


def _backward(ctx, grad_c):
    a, b = ctx.saved_tensors
    grad_a = grad_b = None
    if ctx.needs_input_grad[0]:
        grad_a = _product(grad_c, b.mT, ctx.allow_tf32)
    if ctx.needs_input_grad[1]:
        grad_b = _product(a.mT, grad_c, ctx.allow_tf32)
    return grad_a, grad_b


_matmul_op.register_autograd(_backward, setup_context=_setup_context)


class _Matmul(torch.autograd.Function):
    """``matmul`` on the eager route: the launcher without the dispatcher; one backward."""

    @staticmethod
    def forward(ctx, a, b, allow_tf32):
        with direct_launches():
            out = _matmul(a, b, allow_tf32)
        _save(ctx, a, b, allow_tf32)
        return out

    @staticmethod
    def backward(ctx, grad_c):
        return (*_backward(ctx, grad_c), None)


# ---------------------------------------------------------------------------
# Public function
# ---------------------------------------------------------------------------


def matmul(a: torch.Tensor, b: torch.Tensor, *, allow_tf32: bool = False) -> torch.Tensor:
    """Matrix product ``a @ b`` of two 2-D tensors; equals ``torch.mm(a, b)``.

    Accumulates in float32 and rounds once to the input dtype. On a Hopper
    GPU (compute capability 9.x), float16 and bfloat16 products whose
    operands the tensor-memory accelerator can describe run a persistent,
    autotuned TMA kernel; everything else runs a tiled pointer kernel that
    reads any strides. Transposed views (``a.T``, ``b.T``) are read in place,
    never copied. Differentiable: ``dA = dC @ B^T`` and ``dB = A^T @ dC``
    through the same kernels.

    Args:
        a: ``(M, K)`` float32, float16 or bfloat16 matrix on a CUDA device (or
            on the CPU with ``TRITON_INTERPRET=1``).
        b: ``(K, N)`` matrix of the same dtype and device.
        allow_tf32: Let float32 inputs use TF32 tensor cores (about 10 bits
            of mantissa per product). Off by default: float32 keeps float32
            accuracy (``gemm_rule.FP32_PRECISION``).

    Returns:
        A new contiguous ``(M, N)`` tensor of the inputs' dtype. ``K == 0``
        gives zeros; ``M == 0`` or ``N == 0`` an empty result.

    Raises:
        TypeError: ``a`` or ``b`` is not a tensor or has an unsupported
            dtype, the dtypes differ, or ``allow_tf32`` is not a bool.
        ValueError: an operand is not 2-D, the inner dimensions differ
            (``b`` is named), or the devices are unusable or differ.

    Example:
        >>> import kernel_portfolio as kp
        >>> c = kp.matmul(x, w.T)   # x: (tokens, d_in), w: (d_out, d_in)
    """
    check_tensor(a, "a")
    check_tensor(b, "b")
    check_same(a, "a", b, "b")
    for name, t in (("a", a), ("b", b)):
        if t.dim() != 2:
            raise ValueError(
                f"{name} must be a 2-D matrix, got a {t.dim()}-D tensor of shape {tuple(t.shape)}"
            )
    if b.shape[0] != a.shape[1]:
        raise ValueError(
            f"b has {b.shape[0]} rows but a has {a.shape[1]} columns; "
            f"cannot multiply {tuple(a.shape)} by {tuple(b.shape)}"
        )
    if not isinstance(allow_tf32, bool):
        raise TypeError(f"allow_tf32 must be a bool, got {type(allow_tf32).__name__}")
    return _product(a, b, allow_tf32)
