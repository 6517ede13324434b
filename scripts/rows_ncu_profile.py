"""Nsight Compute profile of the row operators' forwards at unaligned widths and their neighbours.

Run on the GPU (under a minute; one call of each setting, cold caches, every
replay pass of ncu)::

    ncu --clock-control none --profile-from-start off --section SpeedOfLight \\
        --metrics dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,\\
    gpu__time_duration.sum,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,\\
    l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,smsp__inst_executed.sum \\
        python3 scripts/rows_ncu_profile.py

The RMSNorm and residual RMSNorm forwards (bfloat16) at 4096 rows of 50257
and 30522 columns against 50256 and 30520, and the softmax forward (float16)
at 30522 against 30520. Each setting runs twice unprofiled (compiles, the
weight's shifted copies), then once between cudaProfilerStart and Stop, after
a "PROFILE" line naming it.
"""

from __future__ import annotations

import torch

import kernel_portfolio as kp

ROWS = 4096


def _settings():
    for n in (50257, 50256, 30522, 30520):
        x = torch.randn(ROWS, n, device="cuda", dtype=torch.bfloat16)
        r = torch.randn_like(x)
        w = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        yield f"rms_norm fwd {ROWS}x{n} bfloat16", lambda x=x, w=w: kp.rms_norm(x, w)
        yield (
            f"residual_rms_norm fwd {ROWS}x{n} bfloat16",
            lambda x=x, r=r, w=w: kp.residual_rms_norm(x, r, w),
        )
    for n in (30522, 30520):
        x = torch.randn(ROWS, n, device="cuda", dtype=torch.float16)
        yield f"softmax fwd {ROWS}x{n} float16", lambda x=x: kp.softmax(x)


def main() -> None:
    runs = []
    with torch.no_grad():
        for name, call in _settings():
            call()
            call()
            runs.append((name, call))
        torch.cuda.synchronize()
        for name, call in runs:
            print("PROFILE", name, flush=True)
            torch.cuda.cudart().cudaProfilerStart()
            call()
            torch.cuda.synchronize()
            torch.cuda.cudart().cudaProfilerStop()


if __name__ == "__main__":
    main()
