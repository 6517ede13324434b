"""A/B of the RMSNorm backward's row prefetch, register cap and chunk on a GPU.

About four minutes in one process; prints a table and writes nothing else::

    python scripts/row_prefetch_ab.py > results/h200/checks/row-prefetch-ab-<UTC stamp>.log

A backward program walks several rows; with the prefetch (up to
``rms_norm.BWD_PREFETCH_BYTES`` of each row a thread) it loads its next row's
``dy``, ``h`` and ``rstd`` while it reduces the current one, and the launch
caps each thread's registers (``maxnreg``) at what the programs it counts on
per SM leave; a looped row goes in chunks of at most
``rms_norm.BWD_CHUNK_ELEMS`` columns a thread. Times the RMSNorm backward and
the residual RMSNorm's (which adds ``dh`` and writes two ``dx``) under four
settings ``(prefetch bytes, capped, chunk)``: as shipped, never prefetching,
without the cap, and in the looped plan's own chunks (32 columns a thread,
which only a looped row changes). All on the same inputs, visited in alternating order (six
visits of twenty samples), each call with a cold L2 and a device spin ahead of
its start event. Each setting's outputs are checked against the shipped
setting's (the weight gradient may differ in its last bit: the settings keep
different numbers of partial rows). The share of copy bandwidth counts the
compulsory bytes (as the suite does; without the float32 weight-gradient
partials). The last lines give the mean change of the median time per operator
and setting. A diagnostic for the performance notes: the site quotes the
benchmark results, never this.
"""

from __future__ import annotations

import statistics

import torch
from ab_support import compare_settings, setup

from kernel_portfolio import plans
from kernel_portfolio.ops import rms_norm

CASES = (
    (32768, 1024, torch.float16),
    (16384, 2048, torch.float16),
    (512, 4096, torch.float16),
    (16384, 4104, torch.float16),
    (8192, 8192, torch.float16),
    (32768, 8192, torch.float16),
    (8192, 8192, torch.float32),
    (4096, 20000, torch.float16),  # looped
    (4096, 20000, torch.float32),
    (64, 131072, torch.float16),  # split
)
_LAUNCH = rms_norm._bwd_launch


def _uncapped(*args) -> rms_norm.BwdLaunch:
    return _LAUNCH(*args)._replace(max_registers=None)


def _set(setting: tuple[int, bool, int]) -> None:
    rms_norm.BWD_PREFETCH_BYTES, capped, rms_norm.BWD_CHUNK_ELEMS = setting
    rms_norm._bwd_launch = _LAUNCH if capped else _uncapped


def _cases(m: int, n: int, dtype: torch.dtype) -> dict:
    """Per operator: ``(call, outputs, elements moved per row element)``."""
    x, dy, dh = (torch.randn(m, n, device="cuda", dtype=dtype) for _ in range(3))
    w = torch.randn(n, device="cuda", dtype=dtype)
    plan = plans.choose_for(x)
    dx, dx2 = torch.empty_like(x), torch.empty_like(x)
    rstd = torch.rsqrt(x.float().pow(2).mean(-1) + 1e-6)
    dw = torch.empty_like(w)
    return {
        "rms_norm bwd": (
            lambda: rms_norm._backward(dy, x, w, rstd, None, plan, dx, None, dw),
            (dx, dw),
            3,
        ),
        "residual bwd": (
            lambda: rms_norm._backward(dy, x, w, rstd, dh, plan, dx, dx2, dw),
            (dx, dx2, dw),
            5,
        ),
    }


def main() -> None:
    flush, copy_gbps = setup("row_prefetch_ab")
    bytes_, chunk = rms_norm.BWD_PREFETCH_BYTES, rms_norm.BWD_CHUNK_ELEMS
    shipped = (bytes_, True, chunk)
    settings = (shipped, (0, True, chunk), (bytes_, False, chunk), (bytes_, True, 32))
    print(f"\nRMSNorm backward, (BWD_PREFETCH_BYTES, capped, BWD_CHUNK_ELEMS): shipped {shipped}")
    head = f"{'op':<13} {'shape':<13} {'dtype':<8} {'setting':>15} {'block':>6} {'prefetch':>8}"
    print(f"{head} {'cap':>4} {'median us':>10} {'% copy':>7} {'max diff':>9}")
    changes = {}
    for m, n, dtype in CASES:
        for op, (call, outs, elems) in _cases(m, n, dtype).items():
            timed = compare_settings(call, outs, _set, settings, shipped, flush)
            x = outs[0]
            for setting in settings:
                median, diff = timed[setting]
                _set(setting)
                launch = rms_norm._bwd_launch(
                    plans.choose_for(x), n, x.element_size(), op == "residual bwd"
                )
                _set(shipped)
                pct = 100 * elems * m * n * x.element_size() / median / 1e6 / copy_gbps
                row = f"{op:<13} {m}x{n:<7} {str(dtype)[6:]:<8} {str(setting):>15}"
                row += f" {launch.block:>6} {launch.prefetch!s:>8} {launch.max_registers!s:>4}"
                print(f"{row} {median * 1e3:>10.1f} {pct:>6.1f}% {diff:>9.2e}")
                changes.setdefault((op, setting), []).append(median / timed[shipped][0] - 1)
        torch.cuda.empty_cache()
    print("\nmean change of the median time against the shipped setting:")
    for (op, setting), c in changes.items():
        if setting != shipped:
            print(f"  {op} {setting}: {100 * statistics.mean(c):+.2f}%")


if __name__ == "__main__":
    main()
