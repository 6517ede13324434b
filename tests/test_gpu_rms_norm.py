"""RMSNorm and residual + RMSNorm on a real GPU: sizes, registration, compilation.

The interpreter file (``test_rms_norm.py``) also runs on CUDA; this one adds
what only a GPU can check: real sizes in every plan and dtype (with float32 ->
bfloat16 rounding to nearest even, so ``h`` is bit-exact there too),
``torch.library.opcheck``, ``torch.compile(fullgraph=True)`` forward and
backward, no Triton recompile for a new batch size, offsets past 2^31, the
no-grad forward's peak memory (its outputs, no ``rstd``), and a second GPU
while the first is current.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from kp_testing import REL_TOL, assert_matches, first_batch_of_each_form, record_launches
from test_rms_norm import (
    OPS,
    _forward_outputs,
    check_op,
    make_inputs,
    poisoned_allocations,  # noqa: F401  (fixture used by name below)
)

import kernel_portfolio as kp
from kernel_portfolio import plans, reference
from kernel_portfolio.ops import rms_norm as rms_mod

pytestmark = pytest.mark.gpu

DTYPES = (torch.float32, torch.float16, torch.bfloat16)

# Real sizes: a square 4096 matrix on auto (block), rows just past a power of
# two (block pieces, plans.block_pieces), a 2048 x 8192 matrix on
# every forced plan (looped: two 4096-chunks; split: 2048 rows leave one
# program per row), few very wide rows (auto: split) and many wide rows
# (auto: looped, 2^17 columns is past the block limit in every dtype). Rows
# that are not 16-byte aligned, peeled into a head, a 16-byte body and a
# tail (ops/peel.py): odd widths on each auto plan (block, few rows split, a
# vocabulary looped) and a multiple of 4 but not 8 (heads 0 and 4 in 16-bit).
REAL_CASES = [
    ("auto", (4096, 4096)),
    ("auto", (1024, 4104)),  # block pieces 4096 + 8
    ("block", (512, 5000)),  # block pieces 4096 + 1024
    ("block", (2048, 8192)),
    ("looped", (2048, 8192)),
    ("split", (2048, 8192)),
    ("auto", (4, 2**20 + 1)),
    ("auto", (300, 2**17)),
    ("auto", (4096, 4097)),
    ("auto", (2048, 4100)),
    ("auto", (4, 32769)),
    ("auto", (1024, 50257)),
]


def _case_id(value):
    return "x".join(map(str, value)) if isinstance(value, tuple) else value


@pytest.mark.usefixtures("poisoned_allocations")
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(("plan", "shape"), REAL_CASES, ids=_case_id)
def test_real_sizes(plan, shape, dtype, op):
    check_op(op, *make_inputs(op, shape, dtype, "cuda"), plan=plan)


@pytest.mark.usefixtures("poisoned_allocations")
@pytest.mark.parametrize("op", OPS)
def test_strided_real_size(op):
    # A transposed x and a residual with row gaps, 8192 rows of 4099.
    base_x = torch.randn(4099, 8192, device="cuda", dtype=torch.bfloat16)
    base_r = torch.randn(8192, 4200, device="cuda", dtype=torch.bfloat16)
    weight = torch.randn(4099, device="cuda", dtype=torch.bfloat16)
    views = {"x": lambda t: t.t(), "residual": lambda t: t[:, :4099]}
    check_op(op, base_x, base_r if op == "residual" else None, weight, views=views)


def _gpu_rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """``||out - ref|| / ||ref||`` on the GPU (a float64 CPU copy would not fit)."""
    return ((out.float() - ref).norm() / ref.norm()).item()


@pytest.mark.bigmem
def test_offsets_past_2_31():
    # x is a transposed view: element (i, j) sits at j * (2^27 + 1) + i, so the
    # last column's offsets pass 2^31 (4.3 GB of bfloat16). dy is expanded
    # (row stride 0), as the gradient of a broadcast loss would be.
    n_rows, n_cols = 2**27 + 1, 16
    base = torch.randn(n_cols, n_rows, device="cuda", dtype=torch.bfloat16)
    x = base.t().requires_grad_()
    weight = torch.randn(n_cols, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(n_cols, device="cuda", dtype=torch.bfloat16).expand(n_rows, n_cols)
    y = kp.rms_norm(x, weight)
    dx, dw = torch.autograd.grad(y, (x, weight), dy)
    x32 = x.detach().float().requires_grad_()
    w32 = weight.detach().float().requires_grad_()
    y32 = F.rms_norm(x32, (n_cols,), w32, 1e-6)
    tol = REL_TOL[torch.bfloat16]
    assert _gpu_rel_error(y, y32.detach()) <= tol
    dx32, dw32 = torch.autograd.grad(y32, (x32, w32), dy.float())
    assert _gpu_rel_error(dx, dx32) <= tol
    assert _gpu_rel_error(dw, dw32) <= tol


@pytest.mark.parametrize("plan", ["auto", "looped", "split"])
@pytest.mark.parametrize("with_weight", [True, False], ids=["weight", "no_weight"])
def test_opcheck(plan, with_weight):
    x = torch.randn(37, 4099, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    residual = torch.randn_like(x, requires_grad=True)
    weight = torch.randn(4099, device="cuda", dtype=torch.bfloat16) if with_weight else None
    if weight is not None:
        weight.requires_grad_()
    args = (1e-6, *plans.to_op_args(plan))
    torch.library.opcheck(torch.ops.kp.rms_norm.default, (x, weight, *args))
    torch.library.opcheck(torch.ops.kp.residual_rms_norm.default, (x, residual, weight, *args))
    w = weight.detach() if weight is not None else None
    y, h, rstd = torch.ops.kp.residual_rms_norm(x.detach(), residual.detach(), w, *args)
    backward_args = (torch.randn_like(y), h, w, rstd, torch.randn_like(h), True, *args[1:])
    torch.library.opcheck(torch.ops.kp.rms_norm_backward.default, backward_args)


@pytest.mark.parametrize("op", OPS)
def test_compile_fullgraph_forward_backward(op):
    torch._dynamo.reset()
    x, residual, weight = make_inputs(op, (512, 4096), torch.bfloat16, "cuda")

    def loss(x, residual, weight):
        if op == "rms_norm":
            return (kp.rms_norm(x, weight).float() ** 2).sum()
        y, h = kp.residual_rms_norm(x, residual, weight)
        return (y.float() ** 2).sum() + (h.float() * 0.5).sum()

    def loss_and_grads(fn):
        leaves = {"x": x, "residual": residual, "weight": weight}
        leaves = {k: v.detach().requires_grad_() for k, v in leaves.items() if v is not None}
        value = fn(leaves["x"], leaves.get("residual"), leaves["weight"])
        value.backward()
        return {"loss": value.detach(), **{k: v.grad for k, v in leaves.items()}}

    eager = loss_and_grads(loss)
    compiled = loss_and_grads(torch.compile(loss, fullgraph=True))  # a graph break raises
    for name, want in eager.items():
        assert_matches(compiled[name], want, want.dtype, name)


# Few wide rows, where rstd's 16 bytes still take a 512-byte allocator block,
# and 512 x 4096, where rstd is 2 KiB.
@pytest.mark.parametrize("plan", ["block", "looped", "split"])
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("shape", [(4, 32769), (512, 4096)], ids=_case_id)
def test_no_grad_forward_allocates_only_its_outputs(shape, op, plan):
    # Peak memory above the inputs = what the returned outputs hold (y, and h),
    # as the allocator counts them, plus, for the split plan, the float32
    # partial sums of squares (n_rows x slices; small, so one block rounded up
    # to the allocator's 512 bytes) that live during the launch. No rstd.
    x, residual, weight = make_inputs(op, shape, torch.bfloat16, "cuda")
    scratch = 0
    if plan == "split":
        _, n_split = rms_mod._split(shape[1], plans.choose_for(x, plan))
        scratch = -(-shape[0] * n_split * 4 // 512) * 512

    def forward():
        with torch.no_grad():
            return _forward_outputs(op, x, residual, weight, plan)

    forward()  # compile outside the measurement; its outputs are freed
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    outputs = forward()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    held = torch.cuda.memory_allocated() - before
    assert held >= sum(t.numel() * t.element_size() for t in outputs)
    assert peak == held + scratch, f"peak {peak} B: {peak - held - scratch} B beyond the outputs"


_KERNELS = (
    rms_mod._fwd_block_kernel,
    rms_mod._fwd_looped_kernel,
    rms_mod._fwd_partial_kernel,
    rms_mod._fwd_split_kernel,
    rms_mod._bwd_dot_kernel,
    rms_mod._bwd_kernel,
    rms_mod._dw_reduce_kernel,
)


def _compiled_variants() -> dict[str, int]:
    """How many binaries Triton holds for each kernel on GPU 0."""
    return {k.fn.__name__: len(k.device_caches[0][0]) for k in _KERNELS}


@pytest.mark.parametrize(
    ("plan", "width", "batches"),
    [
        ("auto", 2999, [3, 1, 2, 64, 1000, 4097]),
        ("looped", 70001, [2, 1, 7, 300]),
        ("split", 70001, [2, 1, 7, 60]),
    ],
)
def test_new_batch_size_does_not_recompile(plan, width, batches):
    def step(n_rows, dtype=torch.float16):
        for op in OPS:
            x, residual, weight = make_inputs(op, (n_rows, width), dtype, "cuda")
            leaves = [t.requires_grad_() for t in (x, residual, weight) if t is not None]
            if op == "rms_norm":
                outputs = [kp.rms_norm(x, weight, plan=plan)]
            else:
                outputs = list(kp.residual_rms_norm(x, residual, weight, plan=plan))
            torch.autograd.grad(outputs, leaves, [torch.randn_like(t) for t in outputs])
        torch.cuda.synchronize()

    with torch.cuda.device(0):
        sms = plans.sm_count(torch.device("cuda", 0))

        def shifts(n_rows):  # compile-time flags by size: the weight's shifted copies, early
            least = (rms_mod.SHIFT_W_MIN_ELEMENTS, rms_mod.SHIFT_W_BWD_MIN_ELEMENTS)
            early = n_rows <= rms_mod.EARLY_W_ROWS_PER_SM * sms
            return (*(n_rows * width >= n for n in least), early)

        # Binaries another test built in this process (a worker runs many)
        # would hide the compile the last check expects: start from none.
        for kernel in _KERNELS:
            kernel.device_caches[0][0].clear()
        for n_rows in first_batch_of_each_form(batches, width, 2, plan, sms, shifts):
            step(n_rows)
        before = _compiled_variants()
        for n_rows in batches:
            step(n_rows)
        assert _compiled_variants() == before
        # The counter does see a compile: a new dtype builds new binaries.
        step(batches[0], torch.bfloat16)
        assert sum(_compiled_variants().values()) > sum(before.values())


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
@pytest.mark.usefixtures("poisoned_allocations")
@pytest.mark.parametrize("op", OPS)
def test_second_gpu_while_first_is_current(op):
    with torch.cuda.device(0):
        check_op(op, *make_inputs(op, (300, 5000), torch.bfloat16, "cuda:1"))


@pytest.mark.parametrize("n_cols", (30522, 30520, 24577))
@pytest.mark.parametrize("op", ("rms_norm", "residual"))
def test_a_full_block_forward_on_every_route(op, n_cols, monkeypatch):
    """``auto``'s forward of 1024 rows of 24577 to 30522 bfloat16 columns (75%
    to 93% of a block of 32768, ``FULL_BLOCK_FWD_MIN_FILL``): one block, a
    peeled body reading the weight's shifted copies; the backward looped;
    the float64 values of ``y``, ``h`` and every gradient; and the same bits
    from the op route as from the direct one."""
    launches = record_launches(monkeypatch, rms_mod)
    x, residual, weight = make_inputs(op, (1024, n_cols), torch.bfloat16, "cuda")
    check_op(op, x, residual, weight)
    (forward,) = [kw for name, _, kw in launches if name.startswith("_fwd")]
    assert (forward["BLOCK"], forward["SHIFT_W"]) == (32768, n_cols % 8 != 0)
    assert "_bwd_kernel" in {name for name, _, _ in launches}
    if op == "rms_norm":
        direct = kp.rms_norm(x, weight)
        y_op, _ = torch.ops.kp.rms_norm(x, weight, 1e-6, "auto", 0, 0, 0)
    else:
        direct = kp.residual_rms_norm(x, residual, weight)
        y_op, h_op, _ = torch.ops.kp.residual_rms_norm(x, residual, weight, 1e-6, "auto", 0, 0, 0)
        assert torch.equal(h_op, direct[1])
        direct = direct[0]
    assert torch.equal(y_op, direct)


@pytest.mark.parametrize("dtype", (torch.float16, torch.bfloat16), ids=str)
def test_unaligned_forward_in_fewer_warps_on_every_route(dtype):
    """``auto``'s looped plan of rows not 16 bytes apart, with a weight: the
    forward in ``UNALIGNED_FWD_WARPS``, the backward in the plan's warps, the
    same bits on the direct, autograd and op routes, and the float64 values."""
    n = 50257
    x = torch.randn(1024, n, device="cuda").mul(3).to(dtype)
    w = torch.randn(n, device="cuda").to(dtype)
    plan = rms_mod._forward_plan(x, w, "auto", False)
    assert (plan.kind, plan.num_warps) == ("looped", rms_mod.UNALIGNED_FWD_WARPS)
    assert plans.choose_for(x).num_warps > plan.num_warps
    direct = kp.rms_norm(x, w)
    assert_matches(direct, reference.rms_norm(x, w), dtype, "y")
    dy = torch.randn_like(x)
    xg = x.clone().requires_grad_()
    y = kp.rms_norm(xg, w)
    (dx,) = torch.autograd.grad(y, xg, dy)
    assert torch.equal(y, direct)
    x64 = x.double().cpu().requires_grad_()
    y64 = F.rms_norm(x64, (n,), w.double().cpu(), 1e-6)
    (dx64,) = torch.autograd.grad(y64, x64, dy.double().cpu())
    assert_matches(dx, dx64, dtype, "dx")
    x_op = x.clone().requires_grad_()
    y_op, _ = torch.ops.kp.rms_norm(x_op, w, 1e-6, "auto", 0, 0, 0)
    (dx_op,) = torch.autograd.grad(y_op, x_op, dy)
    assert torch.equal(y_op, direct) and torch.equal(dx_op, dx)
