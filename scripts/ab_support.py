"""What the A/B scripts share: the device set-up and interleaved timing.

An A/B script times a few settings of one thing on the same inputs, in one
process, and prints a table for the performance notes (never quoted by the
site). Each call runs with a cold L2 (:class:`~kernel_portfolio.bench.timing.L2Flusher`)
behind a device spin (:func:`~kernel_portfolio.bench.timing.lead_for`), and the
settings are visited in alternating order so that drift falls on all alike.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Hashable, Mapping, Sequence

import torch

from kernel_portfolio.bench import timing

VISITS, SAMPLES = 6, 20
#: Back-to-back calls one CUDA graph captures in :func:`graph_medians`.
GRAPH_CALLS = 20


def setup(script: str) -> tuple[timing.L2Flusher, float]:
    """Seed, warm the GPU, measure the copy bandwidth; print the header line.

    Returns:
        The L2 flusher and the copy bandwidth in GB/s.
    """
    if not torch.cuda.is_available():
        raise SystemExit(f"{script}: needs a CUDA device")
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


def graph_medians(calls: Mapping[Hashable, Callable[[], object]]) -> dict:
    """Median ms a call of each, as the suite times latency-bound cases.

    Each call is captured :data:`GRAPH_CALLS` times back to back in a CUDA
    graph; the graphs are replayed with a warm L2, visited as in
    :func:`interleaved_medians`.
    """
    graphs = {name: timing.capture_graph(call, GRAPH_CALLS) for name, call in calls.items()}
    medians = interleaved_medians({name: g.replay for name, g in graphs.items()}, None, 0.0)
    return {name: ms / GRAPH_CALLS for name, ms in medians.items()}


def compare_settings(
    call: Callable[[], object],
    outputs: Sequence[torch.Tensor],
    apply: Callable[[Hashable], object],
    settings: Sequence[Hashable],
    shipped: Hashable,
    flush: timing.L2Flusher,
) -> dict:
    """Time ``call`` under each setting of one knob; check its outputs against ``shipped``.

    ``apply(setting)`` sets the knob. Each setting runs once first and keeps a
    copy of ``outputs``; then :func:`interleaved_medians` times them all, with
    the lead measured under ``shipped``, which is left applied.

    Returns:
        Per setting, ``(median ms, largest absolute difference of its outputs
        from the shipped setting's)``.
    """
    results = {}
    for setting in settings:
        apply(setting)
        call()
        results[setting] = [t.clone() for t in outputs]
    apply(shipped)
    lead = timing.lead_for(call)
    calls = {s: (lambda s=s: (apply(s), call())) for s in settings}
    medians = interleaved_medians(calls, flush, lead)
    apply(shipped)
    return {
        s: (
            medians[s],
            max(
                (a.float() - b.float()).abs().max().item()
                for a, b in zip(results[s], results[shipped], strict=True)
            ),
        )
        for s in settings
    }
