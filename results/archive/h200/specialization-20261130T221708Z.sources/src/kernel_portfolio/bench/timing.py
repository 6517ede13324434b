"""GPU timers: CUDA events around each call, CUDA-graph replay, L2 flushing, warm-up.

* :func:`time_events`: a CUDA event pair around every call. With a
  :class:`L2Flusher` the L2 is overwritten before each call (cold cache: the
  call reads its inputs from device memory, as it would inside a larger
  program); the flush and the ``prepare`` step (gradients set to ``None``)
  run outside the timed region.
* :func:`capture_graph` + :func:`time_graph`: ``calls`` calls captured in one
  CUDA graph and replayed; a sample is one replay's time divided by ``calls``.
  This removes the host's launch cost, which dominates latency-bound shapes;
  the L2 stays warm between the captured calls.
* :func:`host_cost`: the eager per-call cost on the host: wall-clock time of
  many back-to-back calls, synchronised once before and once after the loop
  (never inside it). With inputs small enough that the GPU work per call is a
  few microseconds, the host (Python, argument checks, dispatch, launch) is
  the bottleneck, so the time per call is the host's cost; when the device
  work per call is longer, the number is bounded by the device instead.
* :func:`busy`: keeps the GPU busy for a while before timing, since an idle
  GPU's clocks are down and distort the first samples.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable

import torch

#: Wall-clock length of one :func:`host_cost` loop (milliseconds) and its repeats.
HOST_LOOP_MS = 20.0
HOST_REPEATS = 3
#: Calls of the first :func:`host_cost` loop, which sizes the others.
HOST_PROBE_CALLS = 20

#: Bytes copied by :func:`copy_bandwidth` (the source; the count is read + write).
COPY_BYTES = 2 << 30


class L2Flusher:
    """Overwrites a buffer of at least twice the L2 size, evicting whatever the L2 held.

    Args:
        l2_bytes: L2 size of the device (``None``: assume 64 MiB).
        device: The CUDA device.
    """

    def __init__(self, l2_bytes: int | None, device: torch.device | str = "cuda") -> None:
        self.nbytes = 2 * max(int(l2_bytes or 0), 64 << 20)
        self.buffer = torch.empty(self.nbytes, dtype=torch.uint8, device=device)

    def __call__(self) -> None:
        self.buffer.fill_(0x5A)


def busy(ms: float, device: torch.device | str = "cuda") -> float:
    """Run bfloat16 matrix products for at least ``ms`` milliseconds; returns the time spent."""
    a = torch.randn(4096, 4096, device=device, dtype=torch.bfloat16)
    start = time.perf_counter()
    while (elapsed := (time.perf_counter() - start) * 1e3) < ms:
        for _ in range(8):
            a @ a
        torch.cuda.synchronize(device)
    return elapsed


def time_events(
    call: Callable[[], object],
    samples: int,
    *,
    prepare: Callable[[], None] | None = None,
    flush: Callable[[], None] | None = None,
) -> list[float]:
    """Time ``samples`` calls, each between its own pair of CUDA events.

    Args:
        call: The work to time (its return value is dropped).
        samples: Number of timed calls.
        prepare: Run before each call, outside the timed region.
        flush: Run before each call, outside the timed region (L2 flush).

    Returns:
        Milliseconds per call.
    """
    events = [
        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        for _ in range(samples)
    ]
    for start, end in events:
        if flush is not None:
            flush()
        if prepare is not None:
            prepare()
        start.record()
        call()
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in events]


def host_cost(
    call: Callable[[], object],
    *,
    prepare: Callable[[], None] | None = None,
    loop_ms: float = HOST_LOOP_MS,
    repeats: int = HOST_REPEATS,
) -> list[float]:
    """Microseconds per eager call, one value per repeat of a loop of about ``loop_ms``.

    Each loop runs ``n`` calls back to back (``prepare`` before each, inside
    the loop: it only drops gradients) between one synchronisation before and
    one after, and its wall-clock time (``time.perf_counter``, the final
    synchronisation included) is divided by ``n``. A first loop of
    :data:`HOST_PROBE_CALLS` calls sizes ``n``.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    if not loop_ms > 0:
        raise ValueError(f"loop_ms must be > 0, got {loop_ms}")

    def loop(n: int) -> float:
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(n):
            if prepare is not None:
                prepare()
            call()
        torch.cuda.synchronize()
        return (time.perf_counter() - start) / n

    per_call = loop(HOST_PROBE_CALLS)
    n = max(HOST_PROBE_CALLS, round(loop_ms * 1e-3 / max(per_call, 1e-7)))
    return [loop(n) * 1e6 for _ in range(repeats)]


def capture_graph(
    call: Callable[[], object], calls: int, *, prepare: Callable[[], None] | None = None
) -> torch.cuda.CUDAGraph:
    """Capture ``calls`` back-to-back calls in one CUDA graph (after a warm-up on a side stream)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            if prepare is not None:
                prepare()
            call()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            if prepare is not None:
                prepare()
            call()
    torch.cuda.synchronize()
    return graph


def time_graph(graph: torch.cuda.CUDAGraph, samples: int, calls: int) -> list[float]:
    """Replay a captured graph ``samples`` times; milliseconds per captured call."""
    graph.replay()
    return [ms / calls for ms in time_events(graph.replay, samples)]


def peak_memory(call: Callable[[], object], *, prepare: Callable[[], None] | None = None) -> int:
    """Peak device memory (bytes) one call allocates above what was allocated before it."""
    if prepare is not None:
        prepare()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = call()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    del out
    return int(peak)


def copy_bandwidth(samples: int = 20, nbytes: int = COPY_BYTES) -> tuple[int, list[float]]:
    """Time a device-to-device copy of ``nbytes``.

    Returns:
        ``(bytes read + written per copy, milliseconds per copy)``.
    """
    src = torch.randn(nbytes // 2, device="cuda", dtype=torch.float16)
    dst = torch.empty_like(src)
    dst.copy_(src)
    return 2 * nbytes, time_events(functools.partial(dst.copy_, src), samples)
