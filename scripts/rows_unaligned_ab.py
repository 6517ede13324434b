"""A/B of the row kernels' settings where the H200 suites miss: odd widths, and a full block.

About three minutes in one process; prints a table and writes nothing else::

    python scripts/rows_unaligned_ab.py > results/<gpu>/checks/rows-unaligned-ab-<stamp>.log

The settings were measured on an H100; on the H200 (faster memory, the same
SMs) the models suite found the residual RMSNorm's backward at 50257 and
51865 bfloat16 columns at 0.86-0.87 of its aligned neighbour's bandwidth, the
RMSNorm forward at 30522 at 0.88, and the softmax forward and backward at
32000 float16 columns at 0.95 of Liger-Kernel. This times each launcher
alone (``rms_norm._forward``, ``rms_norm._backward``,
``softmax._launch_backward``) at 4096 and 16384 rows under its shipped
setting and under each alternative, beside the shipped setting at the
aligned neighbour width (``N`` rounded down to a multiple of 8, its own
alternatives where the rule would change it too): the backward's shifted
weight copies off (``SHIFT_W_BWD_MIN_ELEMENTS``), its next-row prefetch off
(``BWD_PREFETCH_BYTES``), other warps, and the block plan of a row held in
registers (``plan_rule.FULL_BLOCK_MIN_FILL``) against the looped one; and
the RMSNorm and residual forwards at 1, 32 and 132 rows of 127 and 1031 columns
without the peel (``peel.row_vec``'s narrower vectors), where the default
suite found it at 0.945 of Liger-Kernel at 32x127. Fresh
random inputs, each call with a cold L2 behind a device spin, visited in
alternating order (six visits of twenty samples). Every alternative's outputs
are compared with the shipped setting's (to rounding: another warp count
reduces in another order). The share of copy bandwidth counts the
compulsory bytes: ``x`` and ``y`` (RMSNorm forward, plus ``residual`` and
``h``), ``dy``, ``h`` and ``dx`` (backward, plus ``dh`` and the second ``dx``
of the residual RMSNorm), ``y``, ``dy`` and ``dx`` (softmax backward).
"""

from __future__ import annotations

import dataclasses

import torch
from copy_floor import interleaved_medians, setup

from kernel_portfolio import plans
from kernel_portfolio.bench import timing
from kernel_portfolio.ops import rms_norm, softmax

ROWS = (4096, 16384)
#: Rows of a launch that a narrow row's peel may slow: few, each one program's latency.
FEW_ROWS = (1, 32, 132)
#: (op, dtype, widths, rows): odd widths with their aligned neighbours, and the full block.
CASES = (
    ("residual_bwd", torch.bfloat16, (30522, 30520), ROWS),
    ("residual_bwd", torch.bfloat16, (50257, 50256), ROWS),
    ("residual_bwd", torch.bfloat16, (51865, 51864), ROWS),
    ("rms_bwd", torch.bfloat16, (50257, 50256), ROWS),
    ("rms_fwd", torch.bfloat16, (30522, 50257, 30520, 50256), ROWS),
    ("residual_fwd", torch.bfloat16, (30522, 30520), ROWS),
    ("softmax_bwd", torch.float16, (32000, 32768, 30520), ROWS),
    ("residual_fwd", torch.bfloat16, (127, 120, 1031, 1024), FEW_ROWS),
    ("rms_fwd", torch.bfloat16, (127, 120, 1031, 1024), FEW_ROWS),
)


def _no_peel(elem_bytes, n_cols, row_strides, unit_cols=True):
    """``peel.row_vec`` without the peel: the widest vector every row stride allows."""
    return plans.vec_width(elem_bytes, n_cols, row_strides), False


#: Bytes moved, in rows of the input: tensors read and written.
TENSORS = {"residual_bwd": 5, "rms_bwd": 3, "rms_fwd": 2, "residual_fwd": 4, "softmax_bwd": 3}


@dataclasses.dataclass
class Setting:
    """Module constants to set around a call, and a plan to launch instead of the shipped one."""

    constants: dict
    plan: plans.RowPlan | None = None


def _settings(op: str, shipped: plans.RowPlan, n: int) -> dict[str, Setting]:
    found = {"shipped": Setting({})}
    if op.endswith("bwd") and op != "softmax_bwd":
        found["no shift"] = Setting({(rms_norm, "SHIFT_W_BWD_MIN_ELEMENTS"): 1 << 62})
        found["no prefetch"] = Setting({(rms_norm, "BWD_PREFETCH_BYTES"): 0})
        for warps in (8, 16):
            if warps != shipped.num_warps:
                found[f"w{warps}"] = Setting({}, dataclasses.replace(shipped, num_warps=warps))
    elif op == "softmax_bwd":
        for warps in (8, 32):
            if shipped.kind == "block":
                found[f"w{warps}"] = Setting({}, dataclasses.replace(shipped, num_warps=warps))
        if shipped.kind == "block":
            found["looped"] = Setting({}, plans.RowPlan("looped", 8192, 8))
        else:
            for warps in (16, 32):
                found[f"block w{warps}"] = Setting({}, plans.RowPlan("block", 32768, warps))
    elif n < 4096:
        found["no peel"] = Setting({(rms_norm, "row_vec"): _no_peel})
    else:
        for warps in (8, 16):
            if warps != shipped.num_warps:
                found[f"w{warps}"] = Setting({}, dataclasses.replace(shipped, num_warps=warps))
        if n <= 32768:
            for warps in (16, 32):
                found[f"block w{warps}"] = Setting({}, plans.RowPlan("block", 32768, warps))
    return found


def _make(op: str, m: int, n: int, dtype: torch.dtype):
    """``(inputs and outputs, shipped plan)`` of ``op`` at ``m x n``, shared by its settings."""
    torch.manual_seed(m + n)

    def rand(*shape):
        return torch.randn(*shape, device="cuda", dtype=dtype)

    t = {"x": rand(m, n), "w": rand(n)}
    if op == "softmax_bwd":
        t["y"] = torch.softmax(t.pop("x").float(), -1).to(dtype)
        t |= {"dy": rand(m, n), "outs": (torch.empty(m, n, device="cuda", dtype=dtype),)}
        return t, plans.choose_for(t["y"])
    if op.endswith("bwd"):
        has_dh = op == "residual_bwd"
        t |= {"dy": rand(m, n), "dh": rand(m, n) if has_dh else None}
        t["rstd"] = torch.rsqrt(t["x"].float().pow(2).mean(-1) + 1e-6)
        outs = (torch.empty_like(t["x"]), torch.empty_like(t["x"]) if has_dh else None, rand(n))
        t["outs"] = outs
        return t, plans.choose_for(t["x"])
    t["r"] = rand(m, n) if op == "residual_fwd" else None
    t["outs"] = (torch.empty_like(t["x"]), torch.empty_like(t["x"]) if t["r"] is not None else None)
    if t["r"] is None:
        return t, rms_norm._forward_plan(t["x"], t["w"], "auto")
    return t, plans.choose_for(t["x"])


def _call(op: str, t: dict, plan: plans.RowPlan):
    """The launcher call of ``op`` on ``t`` under ``plan``."""
    if op == "softmax_bwd":
        return lambda: softmax._launch_backward(t["y"], t["dy"], t["outs"][0], plan)
    if op.endswith("bwd"):
        args = (t["dy"], t["x"], t["w"], t["rstd"], t["dh"], plan, *t["outs"])
        return lambda: rms_norm._backward(*args)
    return lambda: rms_norm._forward(t["x"], t["r"], t["w"], 1e-6, plan, *t["outs"], None)


def _with(setting: Setting, call):
    def run():
        saved = {key: getattr(*key) for key in setting.constants}
        for (module, name), value in setting.constants.items():
            setattr(module, name, value)
        try:
            call()
        finally:
            for (module, name), value in saved.items():
                setattr(module, name, value)

    return run


def main() -> None:
    flush, copy_gbps = setup()
    print(f"{'op':<13} {'rows x cols':>12} {'setting':<12} {'us':>9} {'/shipped':>9} {'%copy':>7}"
          "  plan")  # fmt: skip
    for op, dtype, widths, rows in CASES:
        for m in rows:
            calls, info = {}, {}
            for n in widths:
                t, shipped = _make(op, m, n, dtype)
                ref = None
                for name, setting in _settings(op, shipped, n).items():
                    plan = setting.plan or shipped
                    call = _with(setting, _call(op, t, plan))
                    outs = [o for o in t["outs"] if o is not None]
                    for o in outs:
                        o.fill_(float("nan"))
                    call()
                    torch.cuda.synchronize()
                    got = [o.float().clone() for o in outs]
                    if ref is None:
                        ref = got
                    for a, b in zip(got, ref, strict=True):
                        if not torch.allclose(a, b, rtol=2e-2, atol=2e-2):
                            raise SystemExit(f"{op} {m}x{n} {name}: outputs differ from shipped")
                    del got
                    calls[(n, name)] = call
                    info[(n, name)] = plan
                del ref
            lead = timing.lead_for(next(iter(calls.values())))
            med = interleaved_medians(calls, flush, lead)
            for (n, name), ms in med.items():
                pct = 100 * TENSORS[op] * m * n * dtype.itemsize / (ms * 1e-3) / 1e9 / copy_gbps
                base = med[(n, "shipped")]
                p = info[(n, name)]
                print(f"{op:<13} {f'{m}x{n}':>12} {name:<12} {ms * 1e3:>9.1f} {ms / base:>9.3f}"
                      f" {pct:>6.1f}%  {p.kind} {p.block} w{p.num_warps}", flush=True)  # fmt: skip
            del calls
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
