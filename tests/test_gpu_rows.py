"""Row kernels (softmax, row sum) on a real GPU: real sizes, compile, opcheck, no recompiles.

Run on the lent H200 (``pytest -m gpu tests/test_gpu_rows.py``); skipped
without CUDA. The interpreter files test every path at small sizes; this one
repeats the matrix at sizes the GPU meets (1823 x 781 with more rows than the
persistent grid holds, widths past 4096, few wide rows that split, rows past
2^20), checks the torch.library registration with ``opcheck`` and
``torch.compile(fullgraph=True)``, counts compiled kernels across batch sizes,
and reads tensors of more than 2^31 elements.
"""

from __future__ import annotations

import pytest
import torch
from kp_testing import assert_matches, first_batch_of_each_form, poison
from torch.library import opcheck

import kernel_portfolio as kp
from kernel_portfolio import contracts, plan_rule, plans, reference
from kernel_portfolio.ops import row_sum as row_sum_ops
from kernel_portfolio.ops import softmax as softmax_ops

pytestmark = pytest.mark.gpu

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
# (shape, why). Forced block plans run up to width 32768: wider ones need more
# registers than a thread has (they spill) and are not what any plan picks.
SHAPES = [
    ((1823, 781), "odd sizes"),
    ((8192, 1024), "more rows than the persistent grid's programs"),
    ((512, 4104), "width 8 * 513: 16-byte loads without Triton's 16-divisibility; pieces"),
    ((300, 5000), "block pieces 4096 + 1024"),
    ((256, 32769), "just past a power of two, looped when auto"),
    ((4, 32769), "few wide rows: split when auto"),
    ((512, 50257), "GPT-2's vocabulary: one row in eight 16-byte aligned, peeled"),
    ((100, 30522), "BERT's vocabulary: rows 4-byte aligned, peeled"),
    ((64, 131072), "the 64 x 131072 benchmark shape"),
    ((2, 2**20 + 1), "rows wider than 2^20"),
]
PLANS = ["auto", "block", "looped", "split", plans.RowPlan("split", 1024, 4, 7)]
PLAN_IDS = ["auto", "block", "looped", "split", "split1024x7"]


def _cases():
    for shape, why in SHAPES:
        for plan, plan_id in zip(PLANS, PLAN_IDS, strict=True):
            if plan == "block" and shape[-1] > 32768:
                continue
            yield pytest.param(shape, plan, id=f"{why}-{plan_id}")


def _logits(shape, dtype):
    """Random logits with -inf entries, a masked first 5000 columns and a fully masked row."""
    x = torch.randn(shape, device="cuda") * 3
    x[torch.rand(shape, device="cuda") < 0.1] = float("-inf")
    x[0, :5000] = float("-inf")
    x[0, -1] = 0.0
    x[-1] = float("-inf")
    return x.to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("shape", "plan"), list(_cases()))
def test_softmax_forward_backward(shape, plan, dtype):
    x = _logits(shape, dtype)
    chosen = plans.choose_for(x, plan)
    y = poison(torch.empty_like(x))
    softmax_ops._launch_forward(x, y, chosen)
    assert_matches(y, reference.softmax(x), dtype, f"y, {chosen}")
    live = ~torch.isinf(x).all(-1, keepdim=True)
    assert (y[torch.isinf(x) & live] == 0).all()
    dy = (torch.randn(shape, device="cuda") + 3).to(dtype)
    dx = poison(torch.empty_like(x))
    softmax_ops._launch_backward(y, dy, dx, chosen)
    assert_matches(dx, reference.softmax_backward(y, dy), dtype, f"dx, {chosen}")


# (shape, plan) of split forwards that run as one cooperative launch on the H200.
COOPERATIVE = [
    ((4, 32769), "auto"),
    ((1, 65536), "auto"),
    ((1, 262144), "auto"),  # 128 programs on 132 SMs
    ((3, 50257), "auto"),  # peeled rows: program 0 of a row holds its head and tail
    ((3, 9000), plans.RowPlan("split", 1024, 4, 9)),
    ((33, 16384), plans.RowPlan("split", 4096, 16, 4)),
]


def _eager_runs_cooperative(x: torch.Tensor, plan: str | plans.RowPlan) -> bool:
    """Whether an eager softmax forward of 2-D ``x`` takes the one cooperative launch."""
    row_plan = plans.choose_for(x, plan)
    if row_plan.kind != "split":
        return False
    chunks_per_split, n_splits = plans.split_segments(x.shape[-1], row_plan)
    return softmax_ops._cooperative(x.shape[0], n_splits, chunks_per_split, x.device)


def _symbolic_rows_take_other_warps(x: torch.Tensor, plan: str | plans.RowPlan) -> bool:
    """Whether a symbolic row count (``torch.compile``'s second batch size) takes
    other block warps than eager at ``x``'s rows: only a known count of at most
    ``plan_rule.FEW_ROWS_PER_SM`` rows an SM rounds them up (``plans.choose``)."""
    chosen, sms = plans.choose_for(x, plan), plans.sm_count(x.device)
    n_cols, elem = x.shape[-1], x.element_size()
    rows = plan_rule.FEW_ROWS_PER_SM * sms + 1
    many = plans.choose(rows, n_cols, elem_bytes=elem, sm_count=sms, plan="block")
    return chosen.kind == "block" and chosen.num_warps != many.num_warps


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("shape", "plan"), COOPERATIVE, ids=str)
def test_a_cooperative_split_matches_the_reference_and_two_launches(
    shape, plan, dtype, monkeypatch
):
    x = _logits(shape, dtype)
    chosen = plans.choose_for(x, plan)
    assert _eager_runs_cooperative(x, plan), chosen
    together = poison(torch.empty_like(x))
    softmax_ops._launch_forward(x, together, chosen)
    assert_matches(together, reference.softmax(x), dtype, f"one launch, {chosen}")
    monkeypatch.setattr(softmax_ops, "_cooperative", lambda *args: False)
    apart = poison(torch.empty_like(x))
    softmax_ops._launch_forward(x, apart, chosen)
    assert torch.equal(together.isnan(), apart.isnan())  # the fully masked row
    assert_matches(together, apart, dtype, f"one launch against two, {chosen}")


@pytest.mark.parametrize(
    ("shape", "dtype"),
    [
        ((1024, 32000), torch.float16),
        ((300, 32768), torch.bfloat16),
        ((512, 16000), torch.float32),
        ((1024, 28992), torch.float16),  # a looped plan's fill, held in one block
        ((264, 30522), torch.bfloat16),  # the same, rows not 16 bytes apart
    ],
    ids=str,
)
def test_full_block_forward_in_more_warps_on_every_route(shape, dtype):
    """``auto``'s block of a row past ``plan_rule.MAX_BLOCK_BYTES``: the forward in
    ``FULL_BLOCK_FWD_WARPS``, the backward in the plan's warps, the same bits on
    the direct, autograd and op routes, and the reference's values."""
    x = torch.randn(shape, device="cuda").mul(3).to(dtype)
    plan = softmax_ops._forward_plan(x, "auto")
    assert (plan.kind, plan.num_warps) == ("block", softmax_ops.FULL_BLOCK_FWD_WARPS)
    assert plans.choose_for(x).num_warps < plan.num_warps
    direct = kp.softmax(x)
    assert_matches(direct, reference.softmax(x), dtype, "y")
    dy = torch.randn(shape, device="cuda").to(dtype)
    xg = x.clone().requires_grad_()
    y = kp.softmax(xg)
    (dx,) = torch.autograd.grad(y, xg, dy)
    assert torch.equal(y, direct)
    assert_matches(dx, reference.softmax_backward(direct, dy), dtype, "dx")
    x_op = x.clone().requires_grad_()
    y_op = torch.ops.kp.softmax(x_op, "auto", 0, 0, 0)
    (dx_op,) = torch.autograd.grad(y_op, x_op, dy)
    assert torch.equal(y_op, direct) and torch.equal(dx_op, dx)


def _row_states() -> list[torch.Tensor]:
    return [t for key, t in contracts._STREAM_BUFFERS.items() if key[0] == "softmax row state"]


def test_cooperative_launches_of_several_program_counts_share_a_stream():
    """Rows of three program counts in turn on one stream: each counts its own generations.

    Every counter ends a multiple of its program count (counter ``row * SMs +
    programs - 1``, after the two word arrays) and grows by exactly that a
    launch; one counter for all program counts would give a launch of 8
    programs after one of 9 two generations among its programs, whose tags
    would never all agree.
    """
    xs = [
        torch.randn(shape, device="cuda", dtype=torch.float16)
        for shape in ((4, 32769), (4, 32768), (1, 65536))
    ]
    counts = []
    for x in xs:
        per_program, n_splits = plans.split_segments(x.shape[-1], plans.choose_for(x))
        assert softmax_ops._cooperative(x.shape[0], n_splits, per_program, x.device)
        counts.append(n_splits)
    assert len(set(counts)) == 3, counts
    want = [reference.softmax(x) for x in xs]
    for x in xs:
        kp.softmax(x)
    torch.cuda.synchronize()
    key = ("softmax row state", 0, torch.cuda.current_stream().cuda_stream)
    sms = plans.sm_count(xs[0].device)
    counters = contracts._STREAM_BUFFERS[key][2 * sms : (2 + sms) * sms]
    before = counters.view(sms, sms).cpu()
    for _ in range(5):
        for x, w in zip(xs, want, strict=True):
            assert_matches(kp.softmax(x), w, x.dtype)
    torch.cuda.synchronize()
    after = counters.view(sms, sms).cpu()
    assert not (after % torch.arange(1, sms + 1)).any()
    expected = torch.zeros(sms, sms, dtype=torch.int64)
    for x, n in zip(xs, counts, strict=True):
        expected[: x.shape[0], n - 1] += 5 * n
    assert torch.equal(after - before, expected)


def test_cooperative_launches_on_two_streams_at_once():
    """Each stream counts on buffers of its own: overlapping launches neither mix nor hang."""
    xs = [torch.randn(4, 32769, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    streams = [torch.cuda.Stream() for _ in xs]
    outs: list[list[torch.Tensor]] = [[], []]
    for stream in streams:
        stream.wait_stream(torch.cuda.current_stream())
    for _ in range(50):
        for i, (x, stream) in enumerate(zip(xs, streams, strict=True)):
            with torch.cuda.stream(stream):
                outs[i].append(kp.softmax(x))
    torch.cuda.synchronize()
    for x, ys in zip(xs, outs, strict=True):
        want = kp.softmax(x)
        assert all(torch.equal(y, want) for y in ys)
    assert len(_row_states()) >= 2


def test_cooperative_forward_allocates_only_its_output():
    """The tagged words and the counters live in the stream's buffer: no scratch a call."""
    x = torch.randn(4, 32769, device="cuda", dtype=torch.float16)
    kp.softmax(x)  # the stream's buffer, made once
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    y = softmax_ops._forward(x, plans.choose_for(x, "auto"))
    torch.cuda.synchronize()
    # The allocator rounds each block up to 512 bytes; the two float32 partial
    # arrays of the two launches would take a block each.
    assert 0 <= torch.cuda.max_memory_allocated() - before - y.untyped_storage().nbytes() < 512
    assert_matches(y, reference.softmax(x), x.dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("shape", "plan"), list(_cases()))
def test_row_sum(shape, plan, dtype):
    x = torch.randn(shape, device="cuda").to(dtype)
    for out_dtype in (dtype, torch.float32):
        out = poison(torch.empty(shape[:-1], device="cuda", dtype=out_dtype))
        row_sum_ops._launch_row_sum(x, out, plans.choose_for(x, plan))
        assert_matches(out, reference.row_sum(x), out_dtype, f"{plan} -> {out_dtype}")


def test_row_sum_split_counters_are_back_at_zero_after_each_launch():
    """Split row sums of 4, 17 and 64 programs a row in turn on one stream, five times.

    The last program of a row to finish writes it and sets the row's counter
    back to 0: left at its count, the next launch's last program would never
    see ``n_splits - 1`` and the row would keep the poison.
    """
    xs = [
        torch.randn(shape, device="cuda", dtype=torch.bfloat16)
        for shape in ((64, 131072), (4, 32769), (1, 131072))
    ]
    splits = {plans.choose_for(x).splits for x in xs}
    assert all(plans.choose_for(x).kind == "split" for x in xs) and len(splits) == 3, splits
    for _ in range(5):
        for x in xs:
            out = poison(torch.empty(x.shape[0], device="cuda", dtype=x.dtype))
            row_sum_ops._launch_row_sum(x, out, plans.choose_for(x))
            assert_matches(out, reference.row_sum(x), x.dtype)
    torch.cuda.synchronize()
    key = ("row sum counters", 0, torch.cuda.current_stream().cuda_stream)
    counters = contracts._STREAM_BUFFERS[key]
    assert counters.numel() >= 64 and not counters.any()


@pytest.mark.parametrize("plan", ["block", "looped", "split"])
def test_strided_and_autograd_through_public_functions(plan):
    base = torch.randn(300, 9000, device="cuda", dtype=torch.bfloat16)
    layouts = {
        "row gaps": base[:, :8193],
        "transposed": base[:, :2000].t(),  # 2000 rows of 300, column stride 9000
        "expanded": base[:1, :5000].expand(300, 5000),
        "3-D, dim 1": base[:, :6000].reshape(30, 10, 6000).transpose(1, 2),
    }
    for name, x in layouts.items():
        x = x.detach().requires_grad_(True)
        dim = 1 if name.startswith("3-D") else -1
        y = kp.softmax(x, dim=dim, plan=plan)
        assert_matches(y, reference.softmax(x, dim), x.dtype, name)
        dy = torch.randn_like(y) + 3
        (dx,) = torch.autograd.grad(y, x, dy)
        assert_matches(dx, reference.softmax_backward(y, dy, dim), x.dtype, f"dx, {name}")
        s = kp.row_sum(x, plan=plan)
        assert_matches(s, reference.row_sum(x), x.dtype, f"row_sum, {name}")


@pytest.mark.parametrize("plan", ["block", "looped", "split"])
def test_opcheck(plan):
    x = torch.randn(64, 9000, device="cuda", requires_grad=True)  # split: 3 programs per row
    opcheck(torch.ops.kp.softmax.default, (x, plan, 0, 0, 0))
    y = kp.softmax(x.detach(), plan=plan)
    dy = torch.randn_like(y)
    opcheck(torch.ops.kp.softmax_backward.default, (y, dy, plan, 0, 0, 0))
    opcheck(torch.ops.kp.row_sum.default, (x, None, plan, 0, 0, 0))
    opcheck(torch.ops.kp.row_sum.default, (x.half(), torch.float32, plan, 0, 0, 0))


@pytest.mark.parametrize("plan", ["auto", "looped", "split"])
def test_torch_compile_fullgraph_forward_and_backward(plan):
    """Compiled and eager give the same bits where they run the same launches.

    A traced launch never takes the softmax's cooperative launch
    (``softmax._cooperative``), whose last bit may differ from the two
    launches': where eager takes it (the split plan here, whose 64 and 96
    rows of 5000 columns fit the SMs), both must match the float64
    reference instead. So must the second batch size of the block plan
    (``auto``): it compiles with a symbolic row count, whose block warps are
    those of many rows, where eager's 96 rows round them up.
    """
    torch._dynamo.reset()

    def step(x, dy):
        y = kp.softmax(x, plan=plan)
        return y, (y * dy).sum() + kp.row_sum(x, plan=plan).sum()

    compiled = torch.compile(step, fullgraph=True)
    for rows in (64, 96):  # a second batch size: recompiles without a graph break
        x = torch.randn(rows, 5000, device="cuda", dtype=torch.float16)
        dy = torch.randn_like(x)
        x_eager, x_comp = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
        y_eager, loss_eager = step(x_eager, dy)
        y_comp, loss_comp = compiled(x_comp, dy)
        loss_eager.backward()
        loss_comp.backward()
        symbolic = rows == 96 and _symbolic_rows_take_other_warps(x, plan)
        if not (_eager_runs_cooperative(x, plan) or symbolic):
            assert torch.equal(y_comp, y_eager)
            assert torch.equal(x_comp.grad, x_eager.grad)
            continue
        for name, y, grad in (("eager", y_eager, x_eager.grad), ("compiled", y_comp, x_comp.grad)):
            assert_matches(y, reference.softmax(x), x.dtype, name)
            # The row sum adds 1 to every element's gradient.
            want_dx = reference.softmax_backward(y, dy) + 1
            assert_matches(grad, want_dx, x.dtype, f"dx, {name}")


def _compiled_count(*kernels):
    """Compiled binaries held in the Triton JIT caches of ``kernels``."""
    return sum(len(cache[0]) for k in kernels for cache in k.device_caches.values())


@pytest.mark.parametrize(
    ("width", "plan"), [(1000, "block"), (20000, "looped"), (131072, "split"), (4104, "auto")]
)
def test_new_batch_sizes_do_not_recompile(width, plan):
    """Once each compiled form has run (`first_batch_of_each_form`), no batch compiles."""
    kernels = [
        obj
        for module in (softmax_ops, row_sum_ops)
        for obj in vars(module).values()
        if hasattr(obj, "device_caches")
    ]
    batches = (1, 2, 3, 16, 17, 33, 64, 127, 1000)  # 1 and multiples of 16: Triton's defaults

    def step(rows):
        x = torch.randn(rows, width, device="cuda", requires_grad=True)
        kp.softmax(x, plan=plan).sum().backward()
        kp.row_sum(x.detach(), plan=plan)

    sms = plans.sm_count(torch.device("cuda"))
    for rows in first_batch_of_each_form(batches, width, 4, plan, sms):
        step(rows)
    before = _compiled_count(*kernels)
    for rows in batches:
        step(rows)
    assert _compiled_count(*kernels) == before


@pytest.mark.bigmem
def test_tensors_past_2_31_elements():
    """65537 x 32768 float16 (2^31 + 2^15 elements), and its transpose read through strides."""
    x = torch.randn(2**16 + 1, 2**15, device="cuda", dtype=torch.float16)
    picks = [0, 40000, 2**16]  # the last row starts past element 2^31
    y = kp.softmax(x)
    s = kp.row_sum(x)
    assert_matches(y[picks], reference.softmax(x[picks]), torch.float16, "softmax rows")
    assert_matches(s[picks], reference.row_sum(x[picks]), torch.float16, "row_sum rows")
    del y, s
    xt = x.t()  # 32768 rows, column stride 32768: column offsets pass 2^31
    picks = [0, 12345, 2**15 - 1]
    yt = kp.softmax(xt)
    assert_matches(yt[picks], reference.softmax(xt[picks]), torch.float16, "softmax of x.t()")
    assert_matches(kp.row_sum(xt)[picks], reference.row_sum(xt[picks]), torch.float16, "x.t()")


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_tensor_on_second_gpu_while_first_is_current():
    x = torch.randn(300, 5000, device="cuda:1")
    with torch.cuda.device(0):
        for plan in ("block", "looped", "split"):
            assert_matches(kp.softmax(x, plan=plan), reference.softmax(x), x.dtype, plan)
            assert_matches(kp.row_sum(x, plan=plan), reference.row_sum(x), x.dtype, plan)
