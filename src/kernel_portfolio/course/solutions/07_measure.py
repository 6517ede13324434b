"""Lesson 7: measuring a kernel. A small timing harness around a copy kernel.

A kernel launch returns before the kernel has run. A host clock must therefore
wait for the GPU (``torch.cuda.synchronize()``) before it starts and before it
stops; CUDA events are recorded on the stream itself and time only the GPU work
between them. ``bench`` warms every function up (the first call compiles),
flushes the L2 cache before each timed call (a cold-cache measurement) and visits
the functions in a new order each round, so that a burst of noise costs one
sample of each instead of every sample of one.

Check it:  kp check measure --dir DIR
On a CPU the check drives these functions with a simulated GPU clock; on a GPU it
also times the copy kernel and prints your numbers (they are yours, not the site's).
"""

import random
import time
from collections.abc import Callable

import torch
import triton
import triton.language as tl


@triton.jit
def copy_kernel(x_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask), mask=mask)


def copy(x: torch.Tensor, out: torch.Tensor, block: int = 1024) -> None:
    """Copy the contiguous ``x`` into ``out``."""
    n_elements = out.numel()
    copy_kernel[(triton.cdiv(n_elements, block),)](x, out, n_elements, BLOCK=block)


def wall_clock_ms(fn: Callable[[], object]) -> float:
    """Time one call of ``fn`` with the host clock, in milliseconds."""
    torch.cuda.synchronize()  # earlier GPU work must not land inside the interval
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()  # the launch returned early: wait for the kernel itself
    return (time.perf_counter() - start) * 1e3


def event_ms(fn: Callable[[], object]) -> float:
    """Time one call of ``fn`` with CUDA events, in milliseconds."""
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()  # the end event must have happened before it can be read
    return start.elapsed_time(end)


def bench(
    fns: dict[str, Callable[[], object]],
    *,
    visits: int,
    timer: Callable[[Callable[[], object]], float],
    flush: Callable[[], object],
    seed: int = 0,
) -> dict[str, list[float]]:
    """Time each function once per visit, in a shuffled order; return the samples by name."""
    for fn in fns.values():
        fn()  # warm-up: compilation and first-touch costs stay out of the samples
    rng = random.Random(seed)
    names = list(fns)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(visits):
        rng.shuffle(names)
        for name in names:
            flush()  # outside the timed call: every sample starts with a cold L2
            samples[name].append(timer(fns[name]))
    return samples


def gbps(n_bytes: int, ms: float) -> float:
    """Bandwidth in GB/s (10**9 bytes per second) for ``n_bytes`` moved in ``ms`` milliseconds."""
    return n_bytes / (ms * 1e-3) / 1e9


def make_flush(l2_bytes: int, device: str) -> Callable[[], object]:
    """Return a function that evicts the L2 cache by writing a buffer twice its size."""
    buffer = torch.empty(2 * l2_bytes, dtype=torch.uint8, device=device)
    return buffer.zero_
