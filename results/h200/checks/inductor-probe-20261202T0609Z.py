"""Dump Inductor's kernels for the cases where torch.compile beat ours, and time fwd ones."""
import os, glob, statistics, torch
from ab_support import interleaved_medians, setup
from kernel_portfolio.bench.runner import DRIVERS, _ours
from kernel_portfolio.bench import timing

CASES = [
    ("row_sum", "fwd", (16384, 8192), torch.float16, lambda m, n, s: (m * n + m) * s),
    ("rms_norm", "fwd", (8192, 8192), torch.bfloat16, lambda m, n, s: (2 * m * n + n) * s),
    ("rms_norm", "fwd", (512, 4096), torch.bfloat16, lambda m, n, s: (2 * m * n + n) * s),
    ("residual_rms_norm", "fwd", (512, 4096), torch.bfloat16, lambda m, n, s: (4 * m * n + n) * s),
    ("row_sum", "fwd", (64, 131072), torch.float16, lambda m, n, s: (m * n + m) * s),
    ("rms_norm", "fwdbwd", (64, 131072), torch.bfloat16, None),
    ("residual_rms_norm", "fwdbwd", (64, 131072), torch.bfloat16, None),
]

flush, copy = setup("probe")
for op, mode, shape, dt, moved in CASES:
    torch._dynamo.reset()
    d = DRIVERS[op]
    args = [torch.randn(s, device="cuda", dtype=dt, requires_grad=(mode == "fwdbwd")) for s in d.inputs(shape)]
    comp = torch.compile(d.baseline, dynamic=False)
    ours = _ours(op)
    print(f"=== {op} {mode} {shape} {dt}", flush=True)
    if mode == "fwd":
        with torch.no_grad():
            comp(*args); ours(*args)
            lead = timing.lead_for(lambda: ours(*args))
            med = interleaved_medians({"ours": lambda: ours(*args), "compile": lambda: comp(*args)}, flush, lead)
        m, n = shape
        for k, v in med.items():
            print(f"{k:8} {v*1e3:8.1f} us {100*moved(m,n,args[0].element_size())/v/1e6/copy:6.1f}% copy")
    else:
        out = comp(*args)
        out = out[0] if isinstance(out, tuple) else out
        out.backward(torch.randn_like(out))
    torch.cuda.synchronize()
