"""The copy bandwidth at each row target's size: the floor of a kernel moving those bytes.

Writes the log ``results/h200/checks/copy-floor-<UTC stamp>.log`` that the
methodology page links (its console output; nothing else). Re-run on the H200
(under a minute)::

    python scripts/copy_floor.py > results/h200/checks/copy-floor-$(date -u +%Y%m%dT%H%MZ).log

The suite's share of copy bandwidth divides by one copy of 4 GiB. A kernel
that moves 128 MiB (softmax forward at 32768x1024 float16: read the rows once,
write them once) also pays its ramp-up and its tail, and so does a copy of
128 MiB. This times ``dst.copy_(src)`` at the traffic of each named row
shape, with the softmax and RMSNorm forwards at that shape (the same bytes
read and written; RMSNorm also reads its weight, one row), each call with a
cold L2 behind a device spin, the three visited in alternating order
(:data:`VISITS` visits of :data:`SAMPLES` samples) so that drift falls on all
alike, and prints each as a share of the 4 GiB copy. A diagnostic for the
methodology page; the site quotes the benchmark results, never this.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Hashable, Mapping

import torch

import kernel_portfolio as kp
from kernel_portfolio.bench import timing

VISITS, SAMPLES = 6, 20
SHAPES = ((8192, 8192), (32768, 1024), (16384, 4104), (16384, 8192), (1024, 131072))


def setup() -> tuple[timing.L2Flusher, float]:
    """Seed, warm the GPU, measure the copy bandwidth; print the header line.

    Returns:
        The L2 flusher and the copy bandwidth in GB/s.
    """
    if not torch.cuda.is_available():
        raise SystemExit("copy_floor.py: needs a CUDA device")
    torch.manual_seed(0)
    props = torch.cuda.get_device_properties(0)
    flush = timing.L2Flusher(getattr(props, "L2_cache_size", None))
    timing.busy(500)
    nbytes, copy_ms = timing.copy_bandwidth()
    copy_gbps = nbytes / statistics.median(copy_ms) / 1e6
    print(f"{props.name}; copy bandwidth {copy_gbps:.0f} GB/s; torch {torch.__version__}")
    return flush, copy_gbps


def interleaved_medians(
    calls: Mapping[Hashable, Callable[[], object]], flush: timing.L2Flusher, lead_ms: float
) -> dict:
    """Median time (ms) of each call: :data:`VISITS` visits of :data:`SAMPLES` samples.

    Odd visits take the calls in reverse order.
    """
    names = list(calls)
    times = {name: [] for name in names}
    for visit in range(VISITS):
        for name in names if visit % 2 == 0 else names[::-1]:
            times[name] += timing.time_events(calls[name], SAMPLES, flush=flush, lead_ms=lead_ms)
    return {name: statistics.median(t) for name, t in times.items()}


def main() -> None:
    flush, copy_gbps = setup()
    print(f"{'shape (float16)':<18} {'MiB moved':>10}  share of the 4 GiB copy's bandwidth")
    for n_rows, n_cols in SHAPES:
        x = torch.randn(n_rows, n_cols, dtype=torch.float16, device="cuda")
        w = torch.randn(n_cols, dtype=torch.float16, device="cuda")
        dst = torch.empty_like(x)
        calls = {
            "copy": lambda x=x, dst=dst: dst.copy_(x),
            "softmax": lambda x=x: kp.softmax(x),
            "rms_norm": lambda x=x, w=w: kp.rms_norm(x, w),
        }
        for call in calls.values():
            call()
        lead = max(timing.lead_for(call) for call in calls.values())
        medians = interleaved_medians(calls, flush, lead)
        moved = 2 * x.numel() * x.element_size()
        shares = "  ".join(
            f"{name} {medians[name] * 1e3:7.1f} us {moved / medians[name] / 1e6 / copy_gbps:6.1%}"
            for name in calls
        )
        print(f"{n_rows}x{n_cols:<12} {moved / 2**20:>10.0f}  {shares}")


if __name__ == "__main__":
    main()
