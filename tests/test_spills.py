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

import pytest
import torch
from kp_testing import captured_launches, global_memory_ops

from kernel_portfolio import plans
from kernel_portfolio.bench import suites
from kernel_portfolio.ops import rms_norm, row_sum, softmax

ROW_OPS = ("softmax", "rms_norm", "residual_rms_norm", "row_sum")
#: Hidden sizes of current models past the suite's widths, 4096 rows.
MODEL_WIDTHS = (5120, 12288, 16384, 20000)
#: Bytes spilled by ``(shape, dtype, launcher, kernel)``, as known: the RMSNorm
#: backward's block rows of 32 columns a thread (with the weight loaded each
#: row: 168 and 196 bytes held); and the softmax backward's block of 32768
#: columns over ``softmax.FULL_BLOCK_BWD_WARPS`` warps (vocabularies of 30520,
#: 30522 and 32000, ``plan_rule.FULL_BLOCK_MAX_BYTES``; the first two held in
#: one block by ``softmax.FULL_BLOCK_MIN_FILL``), which its A/Bs timed ahead of
#: the looped plan and of 16 warps (56 bytes at 32000) all the same. The residual RMSNorm
#: backward at the peeled vocabulary widths spilled 4 and 8 bytes with its
#: prefetch, which its launch rule now leaves out there. The RMSNorm forward at the
#: peeled vocabulary widths spilled in 16 warps (64 registers a thread); in
#: ``rms_norm.UNALIGNED_FWD_WARPS`` it holds everything in 128. A change
#: either way fails, so the table stays the compiler's word.
KNOWN_SPILLS = {
    ("4096x12288", "float16", "residual bwd", "_bwd_kernel"): 80,
    ("4096x12288", "float16", "rms_norm bwd", "_bwd_kernel"): 44,
    ("4096x16384", "float16", "residual bwd", "_bwd_kernel"): 80,
    ("4096x16384", "float16", "rms_norm bwd", "_bwd_kernel"): 44,
    ("4096x30520", "bfloat16", "softmax bwd", "_bwd_block_kernel"): 80,
    ("4096x30520", "float16", "softmax bwd", "_bwd_block_kernel"): 88,
    ("4096x30522", "bfloat16", "softmax bwd", "_bwd_block_kernel"): 64,
    ("4096x30522", "float16", "softmax bwd", "_bwd_block_kernel"): 60,
    ("4096x32000", "float16", "softmax bwd", "_bwd_block_kernel"): 88,
}


def _shapes() -> list[tuple[tuple[int, int], str]]:
    cases = suites.SUITES["default"].cases + suites.SUITES["models"].cases
    shapes = {(tuple(c.shape), c.dtype) for c in cases if c.op in ROW_OPS}
    shapes |= {((4096, n), d) for n in MODEL_WIDTHS for d in ("float16", "float32")}
    return sorted(shapes)


def _launchers(x: torch.Tensor, dy: torch.Tensor, plan: plans.RowPlan | None = None) -> dict:
    """Each launcher of the row operators on ``x`` (and ``dy``), by name: ``(plan kind, call)``
    at ``plan`` (or auto)."""
    fwd_plan = plan or softmax._forward_plan(x, "auto")
    bwd_plan = plan or softmax._backward_plan(x, "auto")
    n_rows, n_cols = x.shape
    w, rstd = torch.randn(n_cols, dtype=x.dtype), torch.randn(n_rows)
    rms_plan = plan or rms_norm._forward_plan(x, w, "auto", False)
    residual_plan = plan or rms_norm._forward_plan(x, w, "auto", True)
    plan = plan or plans.choose_for(x)

    def out():
        return torch.empty_like(x)

    return {
        "softmax fwd": (fwd_plan, lambda: softmax._launch_forward(x, out(), fwd_plan)),
        "softmax bwd": (bwd_plan, lambda: softmax._launch_backward(x, dy, out(), bwd_plan)),
        "row_sum": (
            plan,
            lambda: row_sum._launch_row_sum(x, torch.empty(n_rows, dtype=x.dtype), plan),
        ),
        "rms_norm fwd": (
            rms_plan,
            lambda: rms_norm._forward(x, None, w, 1e-6, rms_plan, out(), None, rstd),
        ),
        "residual fwd": (
            residual_plan,
            lambda: rms_norm._forward(x, dy, w, 1e-6, residual_plan, out(), out(), rstd),
        ),
        "rms_norm bwd": (
            plan,
            lambda: rms_norm._backward(
                dy, x, w, rstd, None, plan, out(), None, torch.empty_like(w)
            ),
        ),
        "residual bwd": (
            plan,
            lambda: rms_norm._backward(dy, x, w, rstd, dy, plan, out(), out(), torch.empty_like(w)),
        ),
    }


def _captured_specs(monkeypatch, call, specs: dict) -> list[str]:
    """Capture ``call``'s launches into ``specs``, one spec per key; return their keys in order.

    The key is the spec without its grid: launches that differ only in their
    program count compile to the same kernel.
    """
    keys = []
    for spec in captured_launches(monkeypatch, (softmax, rms_norm, row_sum), call):
        key = json.dumps({k: v for k, v in spec.items() if k != "grid"}, sort_keys=True)
        specs.setdefault(key, spec)
        keys.append(key)
    return keys


@pytest.fixture(scope="module")
def compiled_launches() -> list[tuple[tuple, dict, list[str]]]:
    """``(launch, spec, PTX ops)`` of every launch: ``launch`` is ``(shape, dtype,
    launcher, kernel, plan kind)``; each distinct spec is compiled once."""
    launches, specs = [], {}
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(plans, "sm_count", lambda _device: 132)  # an H200's
        for shape, dtype in _shapes():
            # Captured, not run: the launchers never read the values.
            x, dy = (torch.empty(shape, dtype=getattr(torch, dtype)) for _ in range(2))
            for name, (plan, call) in _launchers(x, dy).items():
                for key in _captured_specs(monkeypatch, call, specs):
                    launch = (suites.shape_str(shape), dtype, name, specs[key]["kernel"], plan.kind)
                    launches.append((launch, key))
    compiled = dict(zip(specs, global_memory_ops(list(specs.values())), strict=True))
    assert len(specs) > 100  # every plan kind, dtype and kernel
    return [(launch, specs[key], compiled[key]) for launch, key in launches]


def test_spilled_bytes_are_the_known_ones(compiled_launches):
    spilled = {
        launch[:4]: int(op.removeprefix("spills."))
        for launch, _, ops in compiled_launches
        for op in ops
        if op.startswith("spills.") and op != "spills.0"
    }
    assert spilled == KNOWN_SPILLS


def _expected_hints(launcher: str, kernel: str, kind: str, spec: dict, dtype: str) -> set[str]:
    """The eviction hints a launch's loads carry: the row sum's ``LOAD_POLICY`` on
    every load of a 16-bit row; the two passes of a looped softmax, and of a looped RMSNorm
    forward whose row takes more than one chunk; no hint anywhere else."""
    if kernel == "_shift_weight_kernel":
        return set()  # it copies the weight, once a call: no row
    if launcher == "row_sum":
        if dtype == "float32":
            return set()
        return {f"ld.{row_sum.LOAD_POLICY}"}
    looped = ("softmax fwd", "softmax bwd", "rms_norm fwd", "residual fwd")
    if kind != "looped" or launcher not in looped or spec["values"].get("ONE_CHUNK"):
        return set()
    module = softmax if launcher.startswith("softmax") else rms_norm
    return {f"ld.{module.LOOPED_FIRST_PASS}", f"ld.{module.LOOPED_SECOND_PASS}"}


def test_loads_carry_the_eviction_hints_of_their_plan(compiled_launches):
    """Read from the PTX: each kernel's ``ld.evict_*`` hints are its plan's
    (module constants above), looped launches are among those checked, and no
    store carries one."""
    hinted = 0
    for launch, spec, ops in compiled_launches:
        got = {op for op in ops if op.startswith(("ld.evict", "st.evict"))}
        want = _expected_hints(launch[2], launch[3], launch[4], spec, launch[1])
        assert got == want, (launch, sorted(ops))
        hinted += launch[4] == "looped" and bool(want)
    assert hinted >= 4  # softmax forward and backward, RMSNorm forward, residual


#: Launchers whose rows move in 16-byte vectors at any alignment.
VECTOR_LAUNCHERS = (
    "softmax fwd",
    "softmax bwd",
    "row_sum",
    "rms_norm fwd",
    "residual fwd",
    "rms_norm bwd",
    "residual bwd",
)


def test_row_bodies_move_in_16_byte_vectors(compiled_launches):
    """Every launch loads its rows in 16-byte vectors, at any row alignment (sm_90).

    An aligned launch of 16-bit rows has no 2-byte access at all; a peeled one
    (``PEEL``: rows not 16 bytes apart, such as the models suite's 50257 and
    30522 columns) keeps 2-byte accesses for its head, tail and (RMSNorm) the
    unaligned weight, and a kernel that stores 2-byte elements stores its body
    in vectors too (so does a block's small second piece: ``TAIL``). Peeled
    launches of every launcher checked are among them. A thread that holds
    one element of a chunk loads it alone, aligned or not: those launches
    are left out.
    """
    peeled = set()
    for launch, spec, ops in compiled_launches:
        if launch[2] not in VECTOR_LAUNCHERS:
            continue
        if launch[3] == "_shift_weight_kernel":
            # It reads the weight from a column past a boundary, an element at a
            # time, and writes the shifted copies in vectors.
            assert "st.global.v4.b32" in ops, (launch, sorted(ops))
            continue
        if spec["values"].get("BLOCK", 0) == 32 * spec["num_warps"]:
            continue  # a thread holds one element a chunk (the RMSNorm backward of 127 columns)
        # 16 bytes, or 8 where a thread holds 4 elements of a tiny block (127 columns)
        assert {"ld.global.v4.b32", "ld.global.v2.b32"} & set(ops), (launch, sorted(ops))
        if launch[1] == "float32":
            continue
        # The row sum stores one 2-byte value a row, the weight-gradient reduction
        # one row a call: only their loads are rows.
        rows_stored = launch[2] != "row_sum" and launch[3] != "_dw_reduce_kernel"
        narrow = {op for op in ops if op == "ld.global.b16" or rows_stored and op.endswith(".b16")}
        if spec["values"].get("PEEL"):
            peeled.add(launch[2])
            stored = {"st.global.v4.b32", "st.global.v2.b32"} & set(ops)
            assert "st.global.b16" not in narrow or stored, (launch, sorted(ops))
        elif not spec["values"].get("TAIL"):  # a block's small second piece may be narrow
            assert not narrow, (launch, sorted(ops))
    assert peeled == set(VECTOR_LAUNCHERS), peeled


#: Forced chunked plans for :func:`test_every_chunked_plan_compiles_in_every_dtype`.
CHUNKED_PLANS = (plans.RowPlan("looped", 2048, 8), plans.RowPlan("split", 2048, 8, 3))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_every_chunked_plan_compiles_in_every_dtype(dtype):
    """Every row launcher compiles for sm_90 at the looped and split plans, aligned and peeled.

    The suites reach some plan and dtype pairs only at shapes they do not
    hold. A split float32 row sum that reduced into its accumulator twice a
    loop step (commit b012a56, fixed in a285df8) ran under the interpreter
    and failed to compile for the GPU: a Triton 3.6 pass asserted.
    """
    specs = {}
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(plans, "sm_count", lambda _device: 132)
        for width in (50256, 50257):
            x, dy = (torch.empty((4, width), dtype=getattr(torch, dtype)) for _ in range(2))
            for plan in CHUNKED_PLANS:
                for _, call in _launchers(x, dy, plan).values():
                    _captured_specs(monkeypatch, call, specs)
    assert {spec["kernel"] for spec in specs.values()} >= {"_split_kernel", "_looped_kernel"}
    assert all(global_memory_ops(list(specs.values())))
