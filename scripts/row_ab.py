"""A/B of two row-plan settings of branch gpu-next4, each in one process, on a GPU.

About two minutes; prints a table and writes nothing else::

    python scripts/row_ab.py > results/h200/checks/row-ab-<UTC stamp>.log

* ``plan_rule.BLOCK_STAGES`` 1 or 2: the block plan's row loop pipelined or
  not (softmax and RMSNorm forwards at 4096 to 16384 columns).
* The looped plan's L2 cap on or off (``plans.l2_bytes`` as the device says,
  or as good as infinite, which leaves the grid at the resident programs):
  softmax and RMSNorm forwards with rows of 131072 and 262144 columns.

Per forward, both settings run on the same inputs, visited in alternating
order (five visits of twenty samples each), each call with a cold L2
(:class:`~kernel_portfolio.bench.timing.L2Flusher`). The table gives the
median time and the share of the copy bandwidth measured in the same run,
over the bytes the call must move. Each setting's outputs are checked against
torch's first (the largest difference is printed). A diagnostic for the
performance notes: the site quotes the benchmark results, never this.
"""

from __future__ import annotations

import statistics

import torch
import torch.nn.functional as F

import kernel_portfolio as kp
from kernel_portfolio import plan_rule, plans
from kernel_portfolio.bench import timing

VISITS, SAMPLES = 5, 20
_DEVICE_L2 = plans.l2_bytes


def _stages(n: int):
    def apply() -> None:
        plan_rule.BLOCK_STAGES = n

    return apply


def _l2_cap(on: bool):
    def apply() -> None:
        plans.l2_bytes = _DEVICE_L2 if on else (lambda device: 1 << 62)

    return apply


#: (title, shapes, {setting: apply it}), the setting the branch ships last.
EXPERIMENTS = (
    (
        "block-plan row loop, stages",
        ((8192, 8192), (32768, 8192), (16384, 4096), (16384, 16384)),
        {"1": _stages(1), "2": _stages(2)},
    ),
    (
        "looped plan, L2 cap",
        ((1024, 131072), (256, 262144)),
        {"off": _l2_cap(False), "on": _l2_cap(True)},
    ),
)


def _cases(m: int, n: int, dtype: torch.dtype):
    """``(name, call, reference call, bytes moved)`` of each forward at ``m x n``."""
    x = torch.randn(m, n, device="cuda", dtype=dtype)
    r = torch.randn(m, n, device="cuda", dtype=dtype)
    w = torch.randn(n, device="cuda", dtype=dtype)
    size = x.element_size()

    def residual_ref():
        h = x + r
        return F.rms_norm(h, (n,), w, 1e-6), h

    return [
        ("softmax", lambda: kp.softmax(x), lambda: torch.softmax(x, -1), 2 * m * n * size),
        (
            "rms_norm",
            lambda: kp.rms_norm(x, w),
            lambda: F.rms_norm(x, (n,), w, 1e-6),
            (2 * m * n + n) * size,
        ),
        (
            "residual_rms_norm",
            lambda: kp.residual_rms_norm(x, r, w),
            residual_ref,
            (4 * m * n + n) * size,
        ),
    ]


def _max_diff(got, want) -> float:
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    return max((g.float() - e.float()).abs().max().item() for g, e in zip(got, want, strict=True))


def main() -> None:
    if not torch.cuda.is_available():
        raise SystemExit("row_ab: needs a CUDA device")
    torch.manual_seed(0)
    props = torch.cuda.get_device_properties(0)
    flush = timing.L2Flusher(getattr(props, "L2_cache_size", None))
    timing.busy(500)
    nbytes, copy_ms = timing.copy_bandwidth()
    copy_gbps = nbytes / statistics.median(copy_ms) / 1e6
    print(f"{props.name}; copy bandwidth {copy_gbps:.0f} GB/s; torch {torch.__version__}")
    for title, shapes, settings in EXPERIMENTS:
        print(f"\n{title}")
        print(f"{'case':<38} {'setting':>7} {'median us':>10} {'% copy':>7} {'max diff':>9}")
        order = list(settings)
        for m, n in shapes:
            for dtype in (torch.float16, torch.bfloat16):
                for name, call, ref, moved in _cases(m, n, dtype):
                    diffs, times = {}, {s: [] for s in order}
                    for setting in order:
                        settings[setting]()
                        diffs[setting] = _max_diff(call(), ref())
                    for visit in range(VISITS):
                        for setting in order if visit % 2 == 0 else order[::-1]:
                            settings[setting]()
                            times[setting] += timing.time_events(call, SAMPLES, flush=flush)
                    label = f"{name} {m}x{n} {str(dtype).removeprefix('torch.')}"
                    for setting in order:
                        ms = statistics.median(times[setting])
                        pct = 100 * moved / ms / 1e6 / copy_gbps
                        print(
                            f"{label:<38} {setting:>7} {ms * 1e3:>10.1f} {pct:>6.1f}% "
                            f"{diffs[setting]:>9.2e}"
                        )
                torch.cuda.empty_cache()
        settings[order[-1]]()  # leave the branch's setting in place


if __name__ == "__main__":
    main()
