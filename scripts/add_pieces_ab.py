"""A/B of the flat add kernel's small pieces against its large ones, where both can run.

Under a minute on a GPU in one process; prints a table and writes nothing else::

    python scripts/add_pieces_ab.py > results/h200/checks/add-pieces-ab-<UTC stamp>.log

Below a large piece for each of half the SMs (``FLAT_BYTES_PER_PROGRAM``
times half the SM count), ``ops/add.py`` takes pieces of ``FLAT_SMALL_BYTES_PER_PROGRAM`` over
``FLAT_SMALL_NUM_WARPS``. This times that (``small``) against the large
pieces at the same sizes (``large``), with ``torch.add`` beside them, two
ways: twenty back-to-back calls captured in a CUDA graph and replayed (warm
L2, as the suite times its small add), and one call a sample behind a device
spin with a cold L2 (as the suite times large shapes); six visits of each in
alternating order. Every output is checked bit for bit against ``torch.add``.
A diagnostic for the performance notes: the site quotes the benchmark
results, never this.
"""

from __future__ import annotations

import statistics
from unittest.mock import patch

import torch
from ab_support import graph_medians, interleaved_medians, setup

from kernel_portfolio import plans
from kernel_portfolio.bench import timing
from kernel_portfolio.ops import add as add_op

SIZES = (4096, 65536, 262144, 524288)
DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def _large(call):
    """``call`` run with the large pieces at every size."""

    def run():
        with (
            patch.object(add_op, "FLAT_SMALL_BYTES_PER_PROGRAM", add_op.FLAT_BYTES_PER_PROGRAM),
            patch.object(add_op, "FLAT_SMALL_NUM_WARPS", add_op.FLAT_NUM_WARPS),
        ):
            return call()

    return run


def main() -> None:
    flush, _ = setup("add_pieces_ab")
    print(
        f"\n{'n':>8} {'dtype':<9} {'graph us a call: small':>22} {'large':>7} {'torch':>7}"
        f"   {'cold us: small':>14} {'large':>7} {'torch':>7}"
    )
    changes = []
    for dtype in DTYPES:
        for n in SIZES:
            x, y = (torch.randn(n, device="cuda", dtype=dtype) for _ in range(2))
            if 2 * n >= plans.sm_count(x.device) * (
                add_op.FLAT_BYTES_PER_PROGRAM // x.element_size()
            ):
                continue  # large pieces either way
            small = lambda x=x, y=y: add_op._add(x, y)  # noqa: E731
            calls = {"small": small, "large": _large(small), "torch": lambda x=x, y=y: x + y}
            want = torch.add(x, y)
            for name, call in calls.items():
                assert torch.equal(call(), want), (name, n, dtype)
            graph = {k: ms * 1e3 for k, ms in graph_medians(calls).items()}
            cold = interleaved_medians(calls, flush, timing.lead_for(small))
            cold = {k: ms * 1e3 for k, ms in cold.items()}
            print(
                f"{n:>8} {str(dtype)[6:]:<9} {graph['small']:>22.2f} {graph['large']:>7.2f}"
                f" {graph['torch']:>7.2f}   {cold['small']:>14.2f} {cold['large']:>7.2f}"
                f" {cold['torch']:>7.2f}"
            )
            changes.append(graph["small"] / graph["large"] - 1)
    print(
        f"\nmean change under graph replay, small pieces against large: "
        f"{100 * statistics.mean(changes):+.2f}%"
    )


if __name__ == "__main__":
    main()
