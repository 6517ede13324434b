"""What the row-operator kernels spill on sm_90a (``ptxas -v``, compiled on the CPU).

A spill parks a thread's values in local memory inside a row loop, where each
one costs a load and a store per row. The test starts every launcher of the
row operators (forward and backward) at each row shape and dtype of the
default benchmark suite, and at model widths beyond it, with the kernels
captured instead of run (:func:`kp_testing.captured_launches`); each distinct
launch is compiled as Triton's launcher would, with its warps and register
cap, and the spills ptxas reports are compared with the known ones below.
"""

from __future__ import annotations

import json

import torch
from kp_testing import captured_launches, global_memory_ops

from kernel_portfolio import plans
from kernel_portfolio.bench import suites
from kernel_portfolio.ops import rms_norm, row_sum, softmax

ROW_OPS = ("softmax", "rms_norm", "residual_rms_norm", "row_sum")
#: Hidden sizes of current models past the suite's widths, 4096 rows.
MODEL_WIDTHS = (5120, 12288, 16384, 20000)
#: Bytes spilled by ``(shape, dtype, launcher, kernel)``, as known (NOTES.md,
#: v14 candidate): the RMSNorm backward's block rows of 32 columns a thread
#: (with the weight loaded each row: 168 and 196 bytes held), the softmax
#: backward's looped float32 chunk, and the split backward of four rows of
#: 32769 columns (one chunk a slice, under the 64-register cap of a light
#: program without the prefetch; 64x131072 does not spill). A change either
#: way fails, so the table stays the compiler's word.
KNOWN_SPILLS = {
    ("4x32769", "bfloat16", "residual bwd", "_bwd_kernel"): 32,
    ("4x32769", "bfloat16", "rms_norm bwd", "_bwd_kernel"): 8,
    ("4x32769", "float16", "residual bwd", "_bwd_kernel"): 32,
    ("4x32769", "float16", "rms_norm bwd", "_bwd_kernel"): 8,
    ("4096x12288", "float16", "residual bwd", "_bwd_kernel"): 80,
    ("4096x12288", "float16", "rms_norm bwd", "_bwd_kernel"): 48,
    ("4096x12288", "float32", "softmax bwd", "_bwd_looped_kernel"): 4,
    ("4096x16384", "float16", "residual bwd", "_bwd_kernel"): 80,
    ("4096x16384", "float16", "rms_norm bwd", "_bwd_kernel"): 48,
    ("4096x16384", "float32", "softmax bwd", "_bwd_looped_kernel"): 4,
}


def _shapes() -> list[tuple[tuple[int, int], str]]:
    cases = suites.SUITES["default"].cases
    shapes = {(tuple(c.shape), c.dtype) for c in cases if c.op in ROW_OPS}
    shapes |= {((4096, n), d) for n in MODEL_WIDTHS for d in ("float16", "float32")}
    return sorted(shapes)


def _launchers(x: torch.Tensor, dy: torch.Tensor) -> dict:
    """Each launcher of the row operators on ``x`` (and ``dy``), by name."""
    plan = plans.choose_for(x)
    n_rows, n_cols = x.shape
    w, rstd = torch.randn(n_cols, dtype=x.dtype), torch.randn(n_rows)

    def out():
        return torch.empty_like(x)

    return {
        "softmax fwd": lambda: softmax._launch_forward(x, out(), plan),
        "softmax bwd": lambda: softmax._launch_backward(x, dy, out(), plan),
        "row_sum": lambda: row_sum._launch_row_sum(x, torch.empty(n_rows, dtype=x.dtype), plan),
        "rms_norm fwd": lambda: rms_norm._forward(x, None, w, 1e-6, plan, out(), None, rstd),
        "residual fwd": lambda: rms_norm._forward(x, dy, w, 1e-6, plan, out(), out(), rstd),
        "rms_norm bwd": lambda: rms_norm._backward(
            dy, x, w, rstd, None, plan, out(), None, torch.empty_like(w)
        ),
        "residual bwd": lambda: rms_norm._backward(
            dy, x, w, rstd, dy, plan, out(), out(), torch.empty_like(w)
        ),
    }


def test_spilled_bytes_are_the_known_ones(monkeypatch):
    monkeypatch.setattr(plans, "sm_count", lambda _device: 132)  # an H200's
    launches, specs = [], {}
    for shape, dtype in _shapes():
        x, dy = (torch.randn(shape, dtype=getattr(torch, dtype)) for _ in range(2))
        for name, call in _launchers(x, dy).items():
            for spec in captured_launches(monkeypatch, (softmax, rms_norm, row_sum), call):
                key = json.dumps({k: v for k, v in spec.items() if k != "grid"}, sort_keys=True)
                specs.setdefault(key, spec)
                launches.append((suites.shape_str(shape), dtype, name, spec["kernel"], key))
    compiled = dict(zip(specs, global_memory_ops(list(specs.values())), strict=True))
    spilled = {
        tuple(launch): int(op.removeprefix("spills."))
        for *launch, key in launches
        for op in compiled[key]
        if op.startswith("spills.") and op != "spills.0"
    }
    assert len(specs) > 100  # every plan kind, dtype and kernel
    assert spilled == KNOWN_SPILLS
