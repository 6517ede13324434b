"""GPU timers: CUDA events around each call, CUDA-graph replay, L2 flushing, warm-up.

* :func:`time_events`: a CUDA event pair around every call. With a
  :class:`L2Flusher` the L2 is overwritten before each call (cold cache: the
  call reads its inputs from device memory, as it would inside a larger
  program); the flush and the ``prepare`` step (gradients set to ``None``)
  run outside the timed region. With a lead (``lead_ms``) the stream spins
  for that long before the start event, so that the host has queued the whole
  call before the device reaches it: the events then time the device's work,
  not the host's pace (a forward and backward of 16 MiB tensors is tens of
  microseconds of device work behind hundreds of host work). Host cost is
  :func:`host_cost`'s subject.
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
#: Longest lead :func:`time_events` spins before a call (milliseconds).
MAX_LEAD_MS = 20.0
#: :func:`lead_for`'s lead, in multiples of the host time to queue one call.
LEAD_HOST_MULTIPLE = 4
#: Times :func:`time_events` takes one sample whose host outran its lead.
_LEAD_ATTEMPTS = 3


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
    lead_ms: float = 0.0,
) -> list[float]:
    """Time ``samples`` calls, each between its own pair of CUDA events.

    Args:
        call: The work to time (its return value is dropped).
        samples: Number of timed calls.
        prepare: Run before each call, outside the timed region.
        flush: Run before each call, outside the timed region (L2 flush).
        lead_ms: Spin the stream this long before each start event (see the
            module docstring; :func:`lead_for` picks one). A sample whose call
            took the host longer to queue than its lead is taken again on a
            lead twice as long (at most :data:`MAX_LEAD_MS`, three attempts).

    Returns:
        Milliseconds per call.

    Raises:
        ValueError: ``lead_ms`` is negative or above :data:`MAX_LEAD_MS`.
    """
    if not 0.0 <= lead_ms <= MAX_LEAD_MS:
        raise ValueError(f"lead_ms must be in [0, {MAX_LEAD_MS:g}], got {lead_ms}")
    events = []
    for _ in range(samples):
        for attempt in range(_LEAD_ATTEMPTS):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            if flush is not None:
                flush()
            if prepare is not None:
                prepare()
            queued_from = time.perf_counter()
            if lead_ms:
                torch.cuda._sleep(round(lead_ms * _spin_cycles_per_ms()))
            start.record()
            call()
            end.record()
            host_ms = (time.perf_counter() - queued_from) * 1e3
            # The device cannot have waited for the host if the host queued the
            # call within the spin; else time this sample again on a longer lead.
            if not lead_ms or host_ms <= lead_ms or attempt == _LEAD_ATTEMPTS - 1:
                break
            lead_ms = min(2 * lead_ms, MAX_LEAD_MS)
        events.append((start, end))
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in events]


@functools.cache
def _spin_cycles_per_ms() -> float:
    """Clock cycles of ``torch.cuda._sleep`` per millisecond on the current device."""
    cycles = 1 << 20
    torch.cuda._sleep(cycles)  # warm-up
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    end.synchronize()
    return cycles / start.elapsed_time(end)


def lead_for(call: Callable[[], object], *, prepare: Callable[[], None] | None = None) -> float:
    """A lead for :func:`time_events`, in milliseconds.

    :data:`LEAD_HOST_MULTIPLE` times the slowest of three calls' host time, the
    wall-clock time to queue a call (no synchronisation inside); at least
    0.05 ms, at most :data:`MAX_LEAD_MS`.
    """
    slowest = 0.0
    for _ in range(3):
        if prepare is not None:
            prepare()
        torch.cuda.synchronize()
        start = time.perf_counter()
        call()
        slowest = max(slowest, time.perf_counter() - start)
    torch.cuda.synchronize()
    return min(MAX_LEAD_MS, max(0.05, LEAD_HOST_MULTIPLE * slowest * 1e3))


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
