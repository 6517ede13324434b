"""Lesson 7: measuring a kernel. A small timing harness around a copy kernel.

``copy`` is complete. Finish the two timers, the benchmark loop and the
bandwidth formula. A kernel launch returns before the kernel has run; CUDA
events are recorded on the stream itself; the first call of a kernel compiles
it; a flush before each timed call gives cold-L2 numbers; and visiting the
functions in a new order each round spreads noise over all of them.

Fill in the lines below each ``# TODO``, then delete the ``# TODO`` line.
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
    # TODO: wait for earlier GPU work, so that it does not land inside the interval
    start = time.perf_counter()
    fn()
    # TODO: the launch returned early: wait for the kernel before stopping the clock
    return (time.perf_counter() - start) * 1e3


def event_ms(fn: Callable[[], object]) -> float:
    """Time one call of ``fn`` with CUDA events, in milliseconds."""
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    # TODO: record start before the call and end after it, then wait for the end event
    fn()
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
    # TODO: warm up: call every function once before timing anything
    rng = random.Random(seed)
    names = list(fns)
    samples: dict[str, list[float]] = {name: [] for name in names}
    # TODO: a new order on every visit: shuffle inside the loop
    rng.shuffle(names)
    for _ in range(visits):
        for name in names:
            # TODO: flush the L2 before each timed call, outside the timer
            samples[name].append(timer(fns[name]))
    return samples


def gbps(n_bytes: int, ms: float) -> float:
    """Bandwidth in GB/s (10**9 bytes per second) for ``n_bytes`` moved in ``ms`` milliseconds."""
    # TODO: convert: ms is in milliseconds, and a GB is 10**9 bytes
    return n_bytes / ms


def make_flush(l2_bytes: int, device: str) -> Callable[[], object]:
    """Return a function that evicts the L2 cache by writing a buffer twice its size."""
    buffer = torch.empty(2 * l2_bytes, dtype=torch.uint8, device=device)
    return buffer.zero_
