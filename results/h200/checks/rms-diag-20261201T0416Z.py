"""Diagnostic (not committed): block-plan RMSNorm forward structure, one program per row.

hoist: the weight loaded before the row (as ops/rms_norm.py ships); after: loaded after
the reduction; after+r32: the same compiled with maxnreg=32. Reference: kp.rms_norm and
Liger-Kernel. Interleaved visits, cold L2, lead; prints registers and % of copy.
"""
import statistics
import torch
import triton
import triton.language as tl
import kernel_portfolio as kp
from kernel_portfolio import plans
from kernel_portfolio.bench import timing
from liger_kernel.ops.rms_norm import LigerRMSNormFunction


@triton.jit(do_not_specialize=["n_cols", "stride"])
def k_hoist(x_ptr, w_ptr, y_ptr, n_cols, stride, eps, BLOCK: tl.constexpr, VEC: tl.constexpr):
    n_cols = n_cols // VEC * VEC
    stride = stride // VEC * VEC
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, 0) / n_cols + eps)
    tl.store(y_ptr + row * stride + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit(do_not_specialize=["n_cols", "stride"])
def k_after(x_ptr, w_ptr, y_ptr, n_cols, stride, eps, BLOCK: tl.constexpr, VEC: tl.constexpr):
    n_cols = n_cols // VEC * VEC
    stride = stride // VEC * VEC
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = tl.rsqrt(tl.sum(x * x, 0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * stride + cols, (x * rstd * w).to(y_ptr.dtype.element_ty), mask=mask)


def launcher(kernel, **opts):
    def run(x, w):
        m, n = x.shape
        y = torch.empty_like(x)
        block = triton.next_power_of_2(n)
        warps = plans.warps_for(n, x.element_size())
        h = kernel[(m,)](x, w, y, n, x.stride(0), 1e-6, BLOCK=block, VEC=8, num_warps=warps, **opts)
        run.regs = getattr(h, "n_regs", None)
        return y
    run.regs = None
    return run


VARIANTS = {
    "shipped": lambda x, w: kp.rms_norm(x, w),
    "hoist": launcher(k_hoist),
    "after": launcher(k_after),
    "after+r32": launcher(k_after, maxnreg=32),
    "liger": lambda x, w: LigerRMSNormFunction.apply(x, w, 1e-6, 0.0, "llama", False),
}
SHAPES = ((8192, 8192), (32768, 8192), (32768, 1024), (16384, 4096), (8192, 16384))


def main():
    torch.manual_seed(0)
    props = torch.cuda.get_device_properties(0)
    flush = timing.L2Flusher(getattr(props, "L2_cache_size", None))
    timing.busy(500)
    nbytes, copy_ms = timing.copy_bandwidth()
    copy = nbytes / statistics.median(copy_ms) / 1e6
    print(f"{props.name}; copy bandwidth {copy:.0f} GB/s; torch {torch.__version__}; triton {triton.__version__}")
    for m, n in SHAPES:
        for dtype in (torch.float16, torch.bfloat16):
            x = torch.randn(m, n, device="cuda", dtype=dtype)
            w = torch.randn(n, device="cuda", dtype=dtype)
            ref = torch.nn.functional.rms_norm(x.double(), (n,), w.double(), 1e-6)
            times = {k: [] for k in VARIANTS}
            for k, f in VARIANTS.items():
                err = (f(x, w).double() - ref).abs().max().item()
                assert err < 0.1, (k, err)
            lead = timing.lead_for(lambda: VARIANTS["shipped"](x, w))
            names = list(VARIANTS)
            for visit in range(6):
                for k in names if visit % 2 == 0 else names[::-1]:
                    times[k] += timing.time_events(lambda: VARIANTS[k](x, w), 20, flush=flush, lead_ms=lead)
            moved = (2 * m * n + n) * x.element_size()
            for k in names:
                med = statistics.median(times[k])
                regs = getattr(VARIANTS[k], "regs", None)
                print(f"rms_norm {m}x{n} {str(dtype)[6:]:9} {k:10} regs {str(regs):4} {med*1e3:8.1f} us {100*moved/med/1e6/copy:6.1f}%")
            del x, w, ref
            torch.cuda.empty_cache()


main()
