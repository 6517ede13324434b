"""The copy bandwidth at each row target's size: the floor of a kernel moving those bytes.

The suite's share of copy bandwidth divides by one copy of 4 GiB. A kernel
that moves 128 MiB (softmax forward at 32768x1024 float16: read the rows once,
write them once) also pays its ramp-up and its tail, and so does a copy of
128 MiB. This times ``dst.copy_(src)`` at the traffic of each named row
shape, with the softmax and RMSNorm forwards at that shape (the same bytes
read and written; RMSNorm also reads its weight, one row), interleaved, cold
L2, as the A/B scripts time, and prints each as a share of the 4 GiB copy. A
diagnostic for the performance notes; the site quotes the benchmark results,
never this::

    python scripts/copy_floor.py > results/h200/checks/copy-floor-<UTC stamp>.log
"""

from __future__ import annotations

import torch
from ab_support import interleaved_medians, setup

import kernel_portfolio as kp
from kernel_portfolio.bench import timing

SHAPES = ((8192, 8192), (32768, 1024), (16384, 4104), (16384, 8192), (1024, 131072))


def main() -> None:
    flush, copy_gbps = setup("copy_floor.py")
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
