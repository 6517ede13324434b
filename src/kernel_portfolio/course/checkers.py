"""Checkers for the course exercises: PASS, FAIL (first wrong index and a hint) or TODO.

:func:`run` checks one exercise file in this process; ``kp check`` calls it
through :func:`main` in a fresh process, which sets ``TRITON_INTERPRET=1``
before ``triton`` is first imported when there is no GPU.

Every check is built to fail on the classic bugs, not just to pass good code:

* outputs are views into larger buffers. The output cells are poisoned with
  :data:`SENTINEL` before the launch (an unwritten cell shows) and so are the
  guard cells around them, the gaps between rows included (a stray store
  shows). Input guard cells hold NaN, so an unmasked load poisons the result;
* inputs are random, never zeros, with rows chosen to expose one bug each:
  ``2048 + 1 + 1`` split across chunks (a float16 accumulator gives 2048),
  all-negative and very large logits, ``-inf`` patterns, a fully masked row;
* every answer is compared with a float64 reference, with a tolerance per dtype.

``tests/test_course.py`` keeps the broken variants each check must reject.
"""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import math
import os
import re
import statistics
import sys
import tempfile
import time
import unittest.mock
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import torch

from kernel_portfolio import reference
from kernel_portfolio.course import exercise, packaged_file

#: Exit codes of ``kp check``.
PASS, FAIL, TODO, CANNOT_RUN = 0, 1, 2, 3

#: Value that output and guard cells hold before a launch. No exercise writes it
#: (softmax is never negative; the other outputs stay far from it), and it is
#: exact in float16.
SENTINEL = -4096.0

#: ``(atol, rtol)`` per output dtype, against the float64 reference.
TOLERANCES = {torch.float32: (1e-5, 1e-5), torch.float16: (1e-3, 2e-3)}

_TODO_LINE = re.compile(r"^\s*#\s*TODO\b")
_MODULE_IDS = itertools.count()


class CheckFailed(Exception):
    """A check found a wrong result.

    Attributes:
        message: What is wrong, with the first wrong index.
        hint: What usually causes it.
    """

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


@dataclass
class Outcome:
    """The result of checking one exercise file.

    Attributes:
        code: :data:`PASS`, :data:`FAIL`, :data:`TODO` or :data:`CANNOT_RUN`.
        lines: What to print, first line first.
    """

    code: int
    lines: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- buffers


@dataclass
class Canvas:
    """A strided view inside a larger buffer; every other cell holds a known fill.

    Attributes:
        buffer: The whole 1-D allocation.
        view: The tensor handed to the kernel.
        pad: Cells before the view's first element.
        inside: Boolean mask over ``buffer``: the cells that belong to ``view``.
    """

    buffer: torch.Tensor
    view: torch.Tensor
    pad: int
    inside: torch.Tensor


def canvas(
    shape: tuple[int, ...],
    strides: tuple[int, ...],
    dtype: torch.dtype,
    device: str,
    fill: float,
) -> Canvas:
    """Allocate a view of ``shape`` and ``strides`` with guard cells all around.

    The guard before and after is as long as the view's span plus 1024 cells,
    so an unmasked access or a program one tile too far stays inside the
    allocation.
    """
    span = 1 + sum((n - 1) * s for n, s in zip(shape, strides, strict=True))
    pad = span + 1024
    buffer = torch.full((2 * pad + span,), fill, dtype=dtype, device=device)
    view = buffer.as_strided(shape, strides, pad)
    inside = torch.zeros(buffer.numel(), dtype=torch.bool)
    inside[torch.arange(buffer.numel()).as_strided(shape, strides, pad).reshape(-1)] = True
    return Canvas(buffer, view, pad, inside)


def guarded_input(values: torch.Tensor, strides: tuple[int, ...], device: str) -> torch.Tensor:
    """Place ``values`` in a strided view whose guard cells and gaps hold NaN."""
    c = canvas(tuple(values.shape), strides, values.dtype, device, math.nan)
    c.view.copy_(values)
    return c.view


def guarded_output(
    shape: tuple[int, ...], strides: tuple[int, ...], dtype: torch.dtype, device: str
) -> Canvas:
    """An output view poisoned with :data:`SENTINEL`, as are its guard cells."""
    return canvas(shape, strides, dtype, device, SENTINEL)


def row_major(n_cols: int, gap: int = 0) -> tuple[int, int]:
    """Strides of a row-major matrix with ``gap`` unused cells after each row."""
    return (n_cols + gap, 1)


def column_major(n_rows: int, gap: int = 0) -> tuple[int, int]:
    """Strides of a column-major matrix (a transposed view) with ``gap`` cells after each column."""
    return (1, n_rows + gap)


def _randn(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _close(got: torch.Tensor, want: torch.Tensor, atol: float, rtol: float) -> torch.Tensor:
    both_nan = torch.isnan(got) & torch.isnan(want)
    same_inf = torch.isinf(want) & (got == want)
    return both_nan | same_inf | ((got - want).abs() <= atol + rtol * want.abs())


def expect(
    out: Canvas | torch.Tensor,
    want: torch.Tensor,
    *,
    what: str,
    hint: str,
    guard_hint: str = "",
    notes: dict[int, str] | None = None,
) -> None:
    """Compare an output with its float64 reference, then check its guard cells.

    Args:
        out: The output canvas the kernel wrote into, or a plain tensor (no guard).
        want: The reference, any float dtype, same shape as the output.
        what: Names the output in the message.
        hint: Shown when a value is wrong.
        guard_hint: Shown when a cell outside a canvas output changed.
        notes: Optional description per row (first index) of what that row tests.

    Raises:
        CheckFailed: naming the first wrong element or the first changed guard cell.
    """
    view = out.view if isinstance(out, Canvas) else out
    atol, rtol = TOLERANCES[view.dtype]
    got = view.detach().to("cpu", torch.float64)
    want = want.detach().to("cpu", torch.float64)
    if got.shape != want.shape:
        raise CheckFailed(
            f"{what}: shape {tuple(got.shape)}, expected {tuple(want.shape)}",
            "keep the starter's launcher: it allocates nothing and returns what it returned",
        )
    bad = ~_close(got, want, atol, rtol)
    if bad.any():
        index = tuple(int(i) for i in bad.nonzero()[0])
        g, w = got[index].item(), want[index].item()
        where = index[0] if len(index) == 1 else index
        unwritten = " (never written)" if g == SENTINEL else ""
        message = (
            f"{what}: first wrong element at {where}: got {g:.6g}{unwritten}, expected {w:.6g}"
        )
        if notes and index[0] in notes:
            message += f"; row {index[0]} is {notes[index[0]]}"
        raise CheckFailed(message, hint)
    if not isinstance(out, Canvas):
        return
    changed = (~out.inside) & (out.buffer.to("cpu") != SENTINEL)
    if changed.any():
        k = int(changed.nonzero()[0]) - out.pad
        span = out.inside.numel() - 2 * out.pad
        if k < 0:
            where = f"{-k} cells before its first element"
        elif k >= span:
            where = f"{k - span + 1} cells after its last element"
        else:
            where = f"in a gap between its rows ({k} cells after its first element)"
        raise CheckFailed(f"{what}: a store wrote outside the output, {where}", guard_hint)


# --------------------------------------------------------------------------- lessons 1-6

_MASK_STORE = "a store wrote past the data: mask every store (offsets < n), tail included"


def _check_add(mod: ModuleType, device: str) -> list[str]:
    """Lesson 1: lengths that are not a multiple of the block, float32 and float16."""
    for dtype, n in ((torch.float32, 1000), (torch.float16, 300)):
        x = guarded_input(_randn(n, dtype=dtype, seed=1), (1,), device)
        y = guarded_input(_randn(n, dtype=dtype, seed=2), (1,), device)
        out = guarded_output((n,), (1,), dtype, device)
        mod.add(x, y, out.view, block=128)
        expect(
            out,
            reference.add(x, y),
            what=f"add, {n} {dtype_name(dtype)} elements",
            hint="program pid owns offsets pid * BLOCK + tl.arange(0, BLOCK), and the grid "
            "needs triton.cdiv(n_elements, BLOCK) programs so the tail is covered",
            guard_hint=_MASK_STORE,
        )
    return []


def _check_add2d(mod: ModuleType, device: str) -> list[str]:
    """Lesson 2: transposed, row-gapped, broadcast and column-major views."""
    M, N = 37, 45
    x = guarded_input(_randn(M, N, seed=1), column_major(M, 3), device)
    y = guarded_input(_randn(M, N, seed=2), row_major(N, 7), device)
    out = guarded_output((M, N), row_major(N, 5), torch.float32, device)
    cases = [("x transposed, y and out with row gaps", x, y, out)]
    x = guarded_input(_randn(M, N, seed=3), row_major(N, 2), device)
    y = guarded_input(_randn(1, N, seed=4), (N, 1), device).expand(M, N)  # row stride 0
    out = guarded_output((M, N), column_major(M), torch.float32, device)
    cases.append(("y a broadcast row (stride 0), out column-major", x, y, out))
    for label, x, y, out in cases:
        mod.add2d(x, y, out.view, block_m=16, block_n=32)
        expect(
            out,
            reference.add(x, y),
            what=f"add2d {M}x{N}, {label}",
            hint="address element (i, j) as ptr + i * stride_m + j * stride_n with each "
            "tensor's own strides; pid_m = program_id(0) picks rows, pid_n = program_id(1) "
            "columns; mask rows < M and columns < N",
            guard_hint="a store wrote outside the output: the mask needs both "
            "rows[:, None] < M and cols[None, :] < N",
        )
    return []


def _check_row_sum(mod: ModuleType, device: str) -> list[str]:
    """Lesson 3: float32 accumulation (2048 + 1 + 1), row gaps, a transposed view."""
    n_rows, n_cols, block = 7, 300, 64
    values = _randn(n_rows, n_cols, dtype=torch.float16, seed=1)
    values[3] = 0.0
    values[3, [0, block, 2 * block]] = torch.tensor([2048.0, 1.0, 1.0], dtype=torch.float16)
    notes = {3: "2048 + 1 + 1 in three chunks: 2050 in float32, 2048 in float16"}
    cases = [
        ("rows with gaps", guarded_input(values, row_major(n_cols, 13), device)),
        ("a transposed view", guarded_input(values, column_major(n_rows, 5), device)),
    ]
    for label, x in cases:
        out = guarded_output((n_rows,), (1,), torch.float32, device)
        mod.row_sum(x, out.view, block=block)
        expect(
            out,
            reference.row_sum(x),
            what=f"row_sum {n_rows}x{n_cols} float16, {label}",
            hint="accumulate in float32 (tl.zeros(..., dtype=tl.float32) and "
            "x.to(tl.float32)); mask the tail with other=0; step rows by stride_xm and "
            "columns by stride_xn",
            guard_hint="one float32 per row: store only at out_ptr + row",
            notes=notes,
        )
    return []


def _check_softmax(mod: ModuleType, device: str) -> list[str]:
    """Lesson 4: stability, ``-inf`` lanes, fully masked rows, all-negative rows."""
    inf = math.inf
    values = _randn(7, 300, seed=1) * 3
    values[1] = _randn(300, seed=2) - 100
    values[2] = _randn(300, seed=3) * 200
    values[3, 5:] = -inf
    values[4, ::3] = -inf
    values[5] = -inf
    values[6, :-1] = -inf
    notes = {
        1: "all negative, near -100",
        2: "very large logits, whose exp overflows float32 unless the maximum is subtracted",
        3: "-inf past its fifth column, so most lanes see only -inf",
        4: "-inf in every third column (those outputs must be exactly 0)",
        5: "entirely -inf (PyTorch gives NaN for every entry)",
        6: "-inf except its last column (which must be exactly 1)",
    }
    cases = [(values, 128), (values[:3].to(torch.float16), 64)]
    for x_values, block in cases:
        n_rows, n_cols = x_values.shape
        x = guarded_input(x_values, row_major(n_cols, 9), device)
        out = guarded_output((n_rows, n_cols), row_major(n_cols, 4), x.dtype, device)
        mod.softmax(x, out.view, block=block)
        expect(
            out,
            reference.softmax(x),
            what=f"softmax {n_rows}x{n_cols} {dtype_name(x.dtype)}",
            hint="subtract the running maximum; load the tail as -inf; a lane whose maximum "
            "is still -inf must shift by 0 (tl.where), since exp(-inf - (-inf)) is NaN",
            guard_hint=_MASK_STORE,
            notes=notes,
        )
    return []


def _check_rms_norm(mod: ModuleType, device: str) -> list[str]:
    """Lesson 5: float32 statistics (float16 squares overflow), rstd, dx and a stored dw."""
    n_rows, n_cols, eps, rows_per_program = 9, 200, 1e-6, 4
    x_values = _randn(n_rows, n_cols, dtype=torch.float16, seed=1) * 2
    x_values[4, :10] = 300.0  # 300**2 overflows float16
    notes = {4: "has entries of 300, whose squares overflow float16"}
    x = guarded_input(x_values, row_major(n_cols, 11), device)
    w = guarded_input(1 + 0.5 * _randn(n_cols, dtype=torch.float16, seed=2), (1,), device)
    out = guarded_output((n_rows, n_cols), row_major(n_cols, 6), x.dtype, device)
    rstd = guarded_output((n_rows,), (1,), torch.float32, device)
    mod.rms_norm_forward(x, w, out.view, rstd.view, eps=eps)

    x64 = x.detach().to("cpu", torch.float64).requires_grad_()
    w64 = w.detach().to("cpu", torch.float64).requires_grad_()
    stats_hint = (
        "compute the statistics in float32: x = tl.load(...).to(tl.float32), "
        "rstd = 1 / sqrt(sum(x * x) / n_cols + eps)"
    )
    expect(
        rstd,
        torch.rsqrt(x64.detach().pow(2).mean(-1) + eps),
        what="rms_norm forward rstd",
        hint=stats_hint + "; store one float32 per row at rstd_ptr + row",
        guard_hint="one float32 per row: store only at rstd_ptr + row",
        notes=notes,
    )
    expect(
        out,
        reference.rms_norm(x, w, eps),
        what=f"rms_norm forward {n_rows}x{n_cols} float16",
        hint=stats_hint + "; y = x * rstd * w",
        guard_hint=_MASK_STORE,
        notes=notes,
    )

    dy = guarded_input(
        _randn(n_rows, n_cols, dtype=torch.float16, seed=3), row_major(n_cols, 3), device
    )
    dx = guarded_output((n_rows, n_cols), row_major(n_cols, 2), x.dtype, device)
    n_programs = math.ceil(n_rows / rows_per_program)
    dw_partial = torch.full((n_programs, n_cols), math.nan, device=device)
    dw = mod.rms_norm_backward(
        x, w, rstd.view, dy, dx.view, dw_partial, rows_per_program=rows_per_program
    )
    y64 = torch.nn.functional.rms_norm(x64, (n_cols,), w64, eps)
    y64.backward(dy.detach().to("cpu", torch.float64))
    expect(
        dx,
        x64.grad,
        what="rms_norm backward dx",
        hint="dx = rstd * (g - xhat * mean(g * xhat)) with g = dy * w and xhat = x * rstd, "
        "in float32; the mean is over the row's n_cols",
        guard_hint=_MASK_STORE,
        notes=notes,
    )
    expect(
        dw,
        w64.grad,
        what="rms_norm backward dw",
        hint="each program adds dy * xhat over its rows in float32 and stores that partial "
        "row with tl.store at dw_partial_ptr + pid * n_cols (the scratch starts as NaN, so "
        "tl.atomic_add cannot work); rows past n_rows must not count",
    )
    return []


def grouped_order(num_pid_m: int, num_pid_n: int, group_m: int) -> list[tuple[int, int]]:
    """Tiles in grouped order: ``group_m`` tile rows at a time, column by column."""
    order = []
    for first in range(0, num_pid_m, group_m):
        for pid_n in range(num_pid_n):
            order.extend((pid_m, pid_n) for pid_m in range(first, min(first + group_m, num_pid_m)))
    return order


def _check_matmul(mod: ModuleType, device: str) -> list[str]:
    """Lesson 6: grouped order, ragged tiles, a transposed ``b``, float32 accumulation."""
    for num_pid_m, num_pid_n, group_m in ((5, 3, 2), (4, 4, 4), (3, 5, 1)):
        got = [
            tuple(tile) for tile in mod.tile_order(num_pid_m, num_pid_n, group_m, device).tolist()
        ]
        want = grouped_order(num_pid_m, num_pid_n, group_m)
        if got != want:
            pid = next(p for p, (g, w) in enumerate(zip(got, want, strict=True)) if g != w)
            raise CheckFailed(
                f"tile order on a {num_pid_m}x{num_pid_n} grid of tiles with GROUP_M={group_m}: "
                f"program {pid} computes tile {got[pid]}, expected {want[pid]}",
                "grouped order takes GROUP_M tile rows at a time and walks them column by "
                "column; the last group can be shorter (group_size_m = min(num_pid_m - "
                "first_pid_m, GROUP_M))",
            )
    M, N, K = 80, 72, 80
    a = guarded_input(_randn(M, K, dtype=torch.float16, seed=1), row_major(K, 8), device)
    b = guarded_input(_randn(K, N, dtype=torch.float16, seed=2), column_major(K, 6), device)
    hint = (
        "walk K in BLOCK_K steps with the masks rk < K - k on both loads (other=0); "
        "accumulate tl.dot into a float32 tile; in grouped order, the last group can be "
        "shorter than GROUP_M (group_size_m)"
    )
    guard_hint = "a store wrote outside c: mask the store with rm < M and rn < N"
    info = []
    for block_m, block_n, block_k, group_m in ((32, 32, 32, 4), (16, 32, 16, 2)):
        c = guarded_output((M, N), row_major(N, 4), torch.float16, device)
        kernel = mod.matmul(
            a, b, c.view, block_m=block_m, block_n=block_n, block_k=block_k, group_m=group_m
        )
        config = f"BLOCK_M={block_m} BLOCK_N={block_n} BLOCK_K={block_k} GROUP_M={group_m}"
        expect(
            c,
            reference.matmul(a, b),
            what=f"matmul {M}x{N}x{K} float16, {config}",
            hint=hint,
            guard_hint=guard_hint,
        )
        if hasattr(kernel, "n_regs"):
            info.append(
                f"{config}: {kernel.n_regs} registers per thread, {kernel.n_spills} spilled"
            )

    a_values = _randn(16, 48, dtype=torch.float16, seed=3)
    a_values[0] = 0.0
    a_values[0, [0, 16, 32]] = torch.tensor([2048.0, 1.0, 1.0], dtype=torch.float16)
    a = guarded_input(a_values, row_major(48), device)
    b = guarded_input(torch.ones(48, 16, dtype=torch.float16), row_major(16), device)
    c = guarded_output((16, 16), row_major(16), torch.float16, device)
    mod.matmul(a, b, c.view, block_m=16, block_n=16, block_k=16, group_m=1)
    expect(
        c,
        reference.matmul(a, b),
        what="matmul 16x16x48 float16 with BLOCK_K=16",
        hint=hint,
        guard_hint=guard_hint,
        notes={0: "2048 + 1 + 1 over three K steps: 2050 in float32, 2048 in float16"},
    )
    return info


# --------------------------------------------------------------------------- lesson 7


class SimulatedGPU:
    """A host clock and one stream: enough to tell a right timer from a wrong one.

    A launch costs the host :attr:`LAUNCH_MS` and queues the kernel behind the
    work already on the stream. ``synchronize`` moves the host clock to when
    the stream is idle. An event completes when the stream reaches it, and
    reading ``elapsed_time`` before the end event completed raises, as CUDA does.
    """

    LAUNCH_MS = 0.01

    def __init__(self) -> None:
        self.host_ms = 0.0
        self.idle_at_ms = 0.0

    def launch(self, work_ms: float) -> None:
        """Queue a kernel that runs ``work_ms`` on the GPU."""
        self.host_ms += self.LAUNCH_MS
        self.idle_at_ms = max(self.host_ms, self.idle_at_ms) + work_ms

    def perf_counter(self) -> float:
        """The host clock in seconds, like ``time.perf_counter``."""
        return self.host_ms / 1e3

    def synchronize(self, device: object = None) -> None:
        """Wait until the stream is idle, like ``torch.cuda.synchronize``."""
        self.host_ms = max(self.host_ms, self.idle_at_ms)

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """Stand in for ``time.perf_counter`` and ``torch.cuda`` events and synchronize."""
        gpu = self

        class Event:
            def __init__(self, enable_timing: bool = False, **_: object) -> None:
                self.enable_timing = enable_timing
                self.at_ms: float | None = None

            def record(self, stream: object = None) -> None:
                self.at_ms = max(gpu.host_ms, gpu.idle_at_ms)

            def synchronize(self) -> None:
                if self.at_ms is not None:
                    gpu.host_ms = max(gpu.host_ms, self.at_ms)

            def elapsed_time(self, end: Event) -> float:
                if not (self.enable_timing and end.enable_timing):
                    raise RuntimeError("both events must be created with enable_timing=True")
                if self.at_ms is None or end.at_ms is None:
                    raise RuntimeError("both events must be recorded before elapsed_time")
                if gpu.host_ms < end.at_ms:
                    raise RuntimeError("CUDA error: device not ready (end event not reached yet)")
                return end.at_ms - self.at_ms

        with (
            unittest.mock.patch.object(time, "perf_counter", self.perf_counter),
            unittest.mock.patch.object(torch.cuda, "synchronize", self.synchronize),
            unittest.mock.patch.object(torch.cuda, "Event", Event),
        ):
            yield


#: Per timer: the hint when it measured too little, and when it measured too much.
_TIMER_HINTS = {
    "wall_clock_ms": (
        "a launch returns before the kernel runs: torch.cuda.synchronize() after the call, "
        "before reading the clock",
        "torch.cuda.synchronize() before starting the clock, so earlier work is not counted",
    ),
    "event_ms": (
        "record start right before the call and end right after it",
        "time exactly one call: record start right before it and end right after it",
    ),
}


def _check_timer(timer: Callable[[Callable[[], object]], float], name: str) -> None:
    too_little, too_much = _TIMER_HINTS[name]
    gpu = SimulatedGPU()
    gpu.launch(5.0)  # earlier work still running when the timer starts
    with gpu.installed():
        try:
            ms = timer(lambda: gpu.launch(1.0))
        except RuntimeError as err:
            raise CheckFailed(
                f"{name} raised: {err}",
                "record both events, then wait for the end event (end.synchronize()) before "
                "start.elapsed_time(end)",
            ) from None
    measured = f"{name} measured a simulated kernel of 1.0 ms as {ms:.3g} ms"
    if ms < 1.0:
        raise CheckFailed(measured, too_little)
    if ms > 1.0 + 2 * gpu.LAUNCH_MS:
        raise CheckFailed(measured + ", counting work queued before the call", too_much)


def _check_bench(bench: Callable[..., dict[str, list[float]]]) -> None:
    log: list[tuple[str, ...]] = []
    names, visits = ("a", "b", "c"), 6
    fns = {name: (lambda name=name: log.append(("call", name))) for name in names}

    def timer(fn: Callable[[], object]) -> float:
        log.append(("start",))
        fn()
        timed = log[-1][1] if log[-1][0] == "call" else "?"
        log.append(("stop",))
        return float(names.index(timed) + 1) if timed in names else math.nan

    samples = bench(fns, visits=visits, timer=timer, flush=lambda: log.append(("flush",)))
    starts = [i for i, entry in enumerate(log) if entry == ("start",)]
    if not starts:
        raise CheckFailed("bench never called the timer", "call timer(fn) once per sample")
    warmed = {entry[1] for entry in log[: starts[0]] if entry[0] == "call"}
    if warmed != set(names):
        raise CheckFailed(
            f"bench timed before warming up {sorted(set(names) - warmed)}",
            "call every function once before timing: the first call compiles the kernel",
        )
    order = []
    for i in starts:
        if log[i - 1] != ("flush",):
            raise CheckFailed(
                f"timed call {len(order) + 1} did not come right after a flush",
                "call flush() before every timed call, outside the timer, so each sample "
                "starts with a cold L2",
            )
        if log[i + 1][0] != "call" or log[i + 2] != ("stop",):
            raise CheckFailed(
                f"timed call {len(order) + 1} timed more than one function call",
                "pass the function itself to the timer; keep the flush outside it",
            )
        order.append(log[i + 1][1])
    rounds = [tuple(order[i : i + len(names)]) for i in range(0, len(order), len(names))]
    if len(order) != visits * len(names) or any(sorted(r) != list(names) for r in rounds):
        raise CheckFailed(
            f"bench timed {order} for {visits} visits of {list(names)}",
            "each visit times every function exactly once",
        )
    if len(set(rounds)) == 1:
        raise CheckFailed(
            f"every visit used the order {list(rounds[0])}",
            "shuffle the order on each visit, so that slow moments and order effects do not "
            "always land on the same function",
        )
    for number, name in enumerate(names, start=1):
        if samples.get(name) != [float(number)] * visits:
            raise CheckFailed(
                f"bench returned {samples.get(name)} for {name!r}",
                "return {name: [one timer result per visit]}, each under its own name",
            )


def _check_measure(mod: ModuleType, device: str) -> list[str]:
    """Lesson 7: the copy kernel, both timers, the bench loop and the GB/s formula.

    The timers and the loop run against :class:`SimulatedGPU` and recording
    fakes on any machine; on a GPU the harness then times the copy kernel and
    returns the learner's own numbers as information.
    """
    x = guarded_input(_randn(3000, seed=1), (1,), device)
    out = guarded_output((3000,), (1,), torch.float32, device)
    mod.copy(x, out.view)
    expect(
        out,
        x,
        what="copy, 3000 elements",
        hint="copy_kernel comes complete: compare it with the starter's",
        guard_hint=_MASK_STORE,
    )
    _check_timer(mod.wall_clock_ms, "wall_clock_ms")
    _check_timer(mod.event_ms, "event_ms")
    _check_bench(mod.bench)
    got = mod.gbps(3 * 10**9, 1.5)
    if not math.isclose(got, 2000.0, rel_tol=1e-9):
        raise CheckFailed(
            f"gbps(3e9 bytes, 1.5 ms) returned {got:.6g}, expected 2000",
            "GB/s is 10**9 bytes per second: bytes / (ms * 1e-3) / 1e9",
        )
    if device == "cuda":
        return _time_copy(mod)
    return ["timers and bench checked on a simulated GPU clock; on a GPU they also time the copy"]


def _time_copy(mod: ModuleType) -> list[str]:
    x = torch.randn(1 << 26, device="cuda")
    out = torch.empty_like(x)
    flush = mod.make_flush(torch.cuda.get_device_properties(0).L2_cache_size, "cuda")
    fns = {"triton copy": lambda: mod.copy(x, out), "torch copy_": lambda: out.copy_(x)}
    lines = ["your timings on this GPU (cold L2, median of 10 visits; for you, not for the site):"]
    for timer in (mod.event_ms, mod.wall_clock_ms):
        samples = mod.bench(fns, visits=10, timer=timer, flush=flush)
        for name, values in samples.items():
            median = statistics.median(values)
            rate = mod.gbps(2 * x.nbytes, median)
            lines.append(f"  {timer.__name__:14} {name:12} {median:.4f} ms  {rate:.0f} GB/s")
    return lines


# --------------------------------------------------------------------------- lesson 8

#: Broken copies of the lesson 8 solution's ``scale``: (what it does wrong,
#: text to replace, replacement, what a test needs to catch it).
SCALE_MUTANTS = (
    (
        "it stores without a mask, past the end of out",
        "tl.store(out_ptr + offsets, x * alpha, mask=mask)",
        "tl.store(out_ptr + offsets, x * alpha)",
        "put guard cells after the output (a larger buffer, pass a view) and assert they "
        "keep their sentinel",
    ),
    (
        "it launches n // BLOCK programs, so the tail is never written",
        "triton.cdiv(n_elements, block)",
        "n_elements // block",
        "use a length that is not a multiple of the block and fill the output with a "
        "sentinel before the launch",
    ),
    (
        "it ignores alpha",
        "x * alpha, mask=mask",
        "x, mask=mask",
        "use an alpha that is neither 0 nor 1",
    ),
    (
        "it writes zeros",
        "x * alpha, mask=mask",
        "x * 0.0, mask=mask",
        "use random inputs: on zeros, a kernel that writes zeros looks right",
    ),
    (
        "program pid writes block pid + 1, so the first block is never written",
        "tl.program_id(0) * BLOCK",
        "(tl.program_id(0) + 1) * BLOCK",
        "compare every element of the output, from the first",
    ),
    (
        "it rounds the result through float16",
        "x * alpha, mask=mask",
        "(x * alpha).to(tl.float16).to(tl.float32), mask=mask",
        "compare with a float64 reference at a float32 tolerance (rtol about 1e-6): a "
        "loose tolerance hides float16 rounding",
    ),
)


def _check_mutants(mod: ModuleType, device: str) -> list[str]:
    """Lesson 8: the learner's test passes the correct ``scale`` and rejects each mutant."""
    test = mod.check_scale
    with packaged_file("solutions", exercise("mutants")) as path:
        source = path.read_text(encoding="utf-8")
        correct = load_module(path).scale
    try:
        test(correct, device)
    except Exception as err:  # any exception: the test rejected the correct kernel
        raise CheckFailed(
            f"check_scale rejected a correct scale: {type(err).__name__}: {err}",
            "a test that fails on correct code is as useless as one that cannot fail",
        ) from None
    with tempfile.TemporaryDirectory() as tmp:
        for number, (wrong, old, new, needs) in enumerate(SCALE_MUTANTS, start=1):
            path = Path(tmp) / f"scale_mutant_{number}.py"
            path.write_text(apply_mutation(source, old, new), encoding="utf-8")
            broken = load_module(path).scale
            try:
                test(broken, device)
            except Exception:  # rejected, as it should be
                continue
            raise CheckFailed(f"check_scale accepted a broken scale: {wrong}", needs)
    return [f"check_scale rejected all {len(SCALE_MUTANTS)} broken kernels"]


# --------------------------------------------------------------------------- running

CHECKS: dict[str, Callable[[ModuleType, str], list[str]]] = {
    "add": _check_add,
    "add2d": _check_add2d,
    "row_sum": _check_row_sum,
    "softmax": _check_softmax,
    "rms_norm": _check_rms_norm,
    "matmul": _check_matmul,
    "measure": _check_measure,
    "mutants": _check_mutants,
}


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.float16`` -> ``"float16"``."""
    return str(dtype).removeprefix("torch.")


def apply_mutation(source: str, old: str, new: str, count: int = 1) -> str:
    """Replace the ``count`` occurrences of ``old`` in ``source`` with ``new``.

    Raises:
        ValueError: ``old`` does not occur exactly ``count`` times, so the
            mutation would silently test the unchanged code or the wrong place.
    """
    found = source.count(old)
    if found != count:
        raise ValueError(f"mutation expects {count} of {old!r} in the source, found {found}")
    return source.replace(old, new)


def load_module(path: Path) -> ModuleType:
    """Import a Python file under a fresh module name (Triton reads its source)."""
    name = f"kp_course_{path.stem}_{next(_MODULE_IDS)}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def todo_lines(source: str) -> list[tuple[int, str]]:
    """The ``# TODO`` lines of an exercise file, as (line number, text)."""
    return [
        (number, line.strip())
        for number, line in enumerate(source.splitlines(), start=1)
        if _TODO_LINE.match(line)
    ]


def _device() -> str | None:
    # Imported here: ``contracts`` imports ``triton``, which must come after main() has
    # decided on the interpreter.
    from kernel_portfolio.contracts import interpreter_enabled

    if interpreter_enabled():
        return "cpu"
    return "cuda" if torch.cuda.is_available() else None


def run(name: str, path: Path) -> Outcome:
    """Check the exercise ``name`` in the file ``path``.

    A file with ``# TODO`` lines left is reported as unfinished without running.
    Kernels run on the GPU, or on the CPU when ``TRITON_INTERPRET=1`` was set
    before ``triton`` was imported.

    Args:
        name: The exercise name, e.g. ``"add"``.
        path: The learner's (or the solution's) file.

    Returns:
        The outcome; ``code`` is the exit code for ``kp check``.
    """
    check = CHECKS[exercise(name).name]
    todos = todo_lines(path.read_text(encoding="utf-8"))
    if todos:
        number, text = todos[0]
        return Outcome(
            TODO,
            [
                f"TODO: {path.name} line {number}: {text}",
                f"{len(todos)} TODO line(s) left: delete each one once you have written that part",
            ],
        )
    try:
        import triton  # noqa: F401 - only to learn whether it can be imported here
    except ImportError as err:
        return Outcome(CANNOT_RUN, [f"cannot run here: triton does not import ({err})"])
    device = _device()
    if device is None:
        why = "no GPU, and TRITON_INTERPRET=1 was not set before triton was imported"
        return Outcome(CANNOT_RUN, [f"cannot run here: {why} (kp check sets it for you)"])
    where = "CPU, Triton interpreter" if device == "cpu" else torch.cuda.get_device_name()
    with warnings.catch_warnings():
        # The interpreter computes with numpy, which warns on exp(inf) and inf - inf;
        # those values are part of what the checks feed the kernels.
        warnings.simplefilter("ignore", RuntimeWarning)
        try:
            module = load_module(path)
        except Exception as err:  # any import failure is the learner's to fix
            return Outcome(FAIL, [f"FAIL: {path.name} does not import: {_first_lines(err)}"])
        try:
            info = check(module, device)
        except CheckFailed as failed:
            return Outcome(FAIL, [f"FAIL: {failed.message}", f"hint: {failed.hint}"])
        except Exception as err:  # a kernel that crashes fails its check
            hint = "the exercise raised before its results could be checked; keep the "
            hint += "starter's function names and arguments"
            return Outcome(
                FAIL, [f"FAIL: {type(err).__name__}: {_first_lines(err)}", f"hint: {hint}"]
            )
    return Outcome(PASS, [f"PASS ({where})", *info])


def _first_lines(err: BaseException, limit: int = 20) -> str:
    lines = str(err).strip().splitlines() or [type(err).__name__]
    return "\n".join(lines[:limit])


def main(argv: list[str] | None = None) -> int:
    """Run ``python -m kernel_portfolio.course.checkers NAME FILE``; return the exit code.

    Without a usable GPU this switches Triton's interpreter on first: nothing
    imported so far imports ``triton``, so the setting takes effect.
    """
    name, path = argv if argv is not None else sys.argv[1:]
    if "triton" not in sys.modules and not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"
    outcome = run(name, Path(path))
    prefix = f"kp check {name}: "
    for i, line in enumerate(outcome.lines):
        print(prefix + line if i == 0 else "  " + line)
    return outcome.code


if __name__ == "__main__":
    raise SystemExit(main())
