"""Replays of direct-route calls (``contracts.Replays``): what they record, what they give.

On the CPU (the interpreter) a replay is never launched, but its recording is:
two calls with one signature and different tensors must record the same
launches (grids, every non-tensor argument) with each tensor argument mapped
to the same input or output, and calls that read memory of their own must
not be replayable. On a GPU (``-m gpu``) a replayed call must give the bits
the operator's body gives, with every output element written.
"""

from __future__ import annotations

import pytest
import torch

import kernel_portfolio as kp
from kernel_portfolio import contracts, plans
from kernel_portfolio.ops import add as add_ops
from kernel_portfolio.ops import rms_norm as rms_ops
from kernel_portfolio.ops import row_sum as row_sum_ops
from kernel_portfolio.ops import softmax as softmax_ops

H = torch.float16
#: A split plan at a width the interpreter runs quickly: 5 chunks over 3 programs a row.
SPLIT = plans.RowPlan("split", 1024, 4, 3)


def _randn(*shape, dtype=H, device="cpu"):
    return torch.randn(*shape, dtype=dtype, device=device)


def _pair(*shape_and_device) -> tuple[torch.Tensor, torch.Tensor]:
    """Two random tensors of one shape (``(*shape, device)``): a gradient and a saved tensor."""
    *shape, device = shape_and_device
    return _randn(*shape, device=device), _randn(*shape, device=device)


def _rstd(n_rows: int, device: str) -> torch.Tensor:
    """A float32 ``rstd`` as the RMSNorm forward saves it (positive)."""
    return torch.rand(n_rows, dtype=torch.float32, device=device) + 0.5


def _plan(n_rows: int, n_cols: int) -> plans.RowPlan:
    """The ``auto`` plan of float16 rows, as the Functions choose it before they replay."""
    return plans.choose_for(torch.empty(n_rows, n_cols, dtype=H, device="meta"))


# (id, body, replays, make(device) -> (tensors, params)): calls whose launches
# read only their inputs and outputs, one per plan kind and layout.
REPLAYABLE = [
    ("softmax-block", softmax_ops._softmax, softmax_ops._REPLAYS,
     lambda d: ((_randn(32, 127, device=d),), (-1, "auto"))),
    ("softmax-looped", softmax_ops._softmax, softmax_ops._REPLAYS,
     lambda d: ((_randn(3, 5000, device=d),), (-1, "looped"))),
    ("softmax-dim0-transposed", softmax_ops._softmax, softmax_ops._REPLAYS,
     lambda d: ((_randn(40, 24, device=d).t(),), (0, "auto"))),
    ("softmax-3d", softmax_ops._softmax, softmax_ops._REPLAYS,
     lambda d: ((_randn(2, 3, 200, dtype=torch.bfloat16, device=d),), (-1, "auto"))),
    ("softmax-split", softmax_ops._softmax, softmax_ops._REPLAYS,
     lambda d: ((_randn(3, 5000, device=d),), (-1, SPLIT))),
    ("row_sum-float32-out", row_sum_ops._row_sum_checked, row_sum_ops._REPLAYS,
     lambda d: ((_randn(17, 300, device=d),), (torch.float32, "auto"))),
    ("row_sum-split", row_sum_ops._row_sum_checked, row_sum_ops._REPLAYS,
     lambda d: ((_randn(3, 5000, device=d),), (None, SPLIT))),
    ("rms_norm-weight", rms_ops._rms_norm_checked, rms_ops._RMS_NORM_REPLAYS,
     lambda d: ((_randn(9, 1000, device=d), _randn(1000, device=d)), (1e-6, "auto"))),
    ("rms_norm-no-weight-looped", rms_ops._rms_norm_checked, rms_ops._RMS_NORM_REPLAYS,
     lambda d: ((_randn(3, 5000, device=d), None), (1e-5, "looped"))),
    ("residual", rms_ops._residual_rms_norm_checked, rms_ops._RESIDUAL_REPLAYS,
     lambda d: ((_randn(9, 1000, device=d), _randn(9, 1000, device=d), _randn(1000, device=d)),
                (1e-6, "auto"))),
    ("residual-split", rms_ops._residual_rms_norm_checked, rms_ops._RESIDUAL_REPLAYS,
     lambda d: ((_randn(3, 5000, device=d), _randn(3, 5000, device=d), _randn(5000, device=d)),
                (1e-6, SPLIT))),
    ("add-same", add_ops._add_checked, add_ops._REPLAYS,
     lambda d: ((_randn(64, 33, device=d), _randn(64, 33, device=d)), ())),
    ("add-broadcast", add_ops._add_checked, add_ops._REPLAYS,
     lambda d: ((_randn(64, 33, device=d), _randn(33, device=d)), ())),
    # The eager autograd Functions' forwards and backwards (what they replay).
    ("softmax-function-backward", softmax_ops._backward_direct, softmax_ops._BACKWARD_REPLAYS,
     lambda d: (_pair(32, 127, d), (_plan(32, 127),))),
    ("softmax-function-backward-split", softmax_ops._backward_direct,
     softmax_ops._BACKWARD_REPLAYS, lambda d: (_pair(3, 5000, d), (SPLIT,))),
    ("rms_norm-function-forward", rms_ops._forward_direct, rms_ops._FORWARD_REPLAYS,
     lambda d: ((_randn(2, 9, 1000, device=d), None, _randn(1000, device=d)),
                (1e-6, _plan(18, 1000), True))),
    ("residual-function-forward-split", rms_ops._forward_direct, rms_ops._FORWARD_REPLAYS,
     lambda d: ((_randn(3, 5000, device=d), _randn(3, 5000, device=d), _randn(5000, device=d)),
                (1e-6, SPLIT, True))),
    ("rms_norm-function-backward", rms_ops._grad_rows, rms_ops._BACKWARD_REPLAYS,
     lambda d: ((*_pair(2, 9, 1000, d), _randn(1000, device=d), _rstd(18, d), None),
                (_plan(18, 1000), False))),
    ("rms_norm-function-backward-no-weight-looped", rms_ops._grad_rows,
     rms_ops._BACKWARD_REPLAYS,
     lambda d: ((*_pair(3, 5000, d), None, _rstd(3, d), None),
                (plans.RowPlan("looped", 2048, 4, 1), False))),
    ("residual-function-backward-two-dx-split", rms_ops._grad_rows, rms_ops._BACKWARD_REPLAYS,
     lambda d: ((*_pair(3, 5000, d), _randn(5000, device=d), _rstd(3, d),
                 _randn(3, 5000, device=d)), (SPLIT, True))),
]  # fmt: skip
IDS = [case[0] for case in REPLAYABLE]
#: Scratch buffers a case's replay allocates besides its outputs: the split plans' partials,
#: the RMSNorm backward's weight-gradient partials (and, for rows in chunks, its row sums).
SCRATCH = {
    "softmax-split": 2,
    "row_sum-split": 1,
    "residual-split": 1,
    "softmax-function-backward-split": 1,
    "residual-function-forward-split": 1,
    "rms_norm-function-backward": 1,
    "rms_norm-function-backward-no-weight-looped": 1,
    "residual-function-backward-two-dx-split": 2,
}

#: Per-stream buffers a case's replay looks up (:func:`contracts.stream_buffer`): the split
#: row sum's counters.
BUFFERS = {"row_sum-split": 1}


def _steps(replay) -> list:
    """A replay's launches without the compiled kernels (``None`` in the interpreter)."""
    return [(grid, values, slots) for _, grid, _, values, slots in replay.steps]


@pytest.mark.parametrize(("name", "body", "replays", "make"), REPLAYABLE, ids=IDS)
def test_one_signature_records_one_set_of_launches(name, body, replays, make, device):
    """Two calls, same signature, other tensors: the same launches, tensors in the same slots."""
    first, params = make(device)
    out, replay = contracts.record(body, first, params)
    assert replay is not None, f"{name}: not replayable"
    second, _ = make(device)
    _, again = contracts.record(body, second, params)
    assert _steps(again) == _steps(replay)
    assert again.allocations == replay.allocations
    outs = (out,) if isinstance(out, torch.Tensor) else out
    assert replay.n_outputs == len(outs)
    want = tuple((tuple(o.shape), o.stride(), o.dtype) for o in outs)
    assert replay.allocations[: len(outs)] == want
    assert len(replay.allocations) - len(outs) == SCRATCH.get(name, 0), "scratch memory"
    assert len(replay.buffers) == BUFFERS.get(name, 0), "per-stream buffers"
    assert replay.steps, "no launch recorded"
    for _, _, _, values, slots in replay.steps:
        assert not any(isinstance(v, torch.Tensor) for v in values), "the memo keeps a tensor"
        n_slots = len(first) + len(replay.allocations) + len(replay.buffers)
        assert slots and all(0 <= slot < n_slots for _, slot in slots)
    written = {slot for step in replay.steps for _, slot in step[4]}
    assert all(len(first) + j in written for j in range(len(outs))), "an output no launch gets"


def test_a_slot_follows_its_tensor(device):
    """An output maps to the output slot, inputs to theirs (softmax: x is 0, y is 1)."""
    x = _randn(8, 64, device=device)
    _, replay = contracts.record(softmax_ops._softmax, (x,), (-1, "auto"))
    ((_, _, _, values, slots),) = replay.steps
    assert slots == ((0, 0), (1, 1))
    assert values[2:4] == [0, 64]  # first row, width: plain values from the signature


def _twice(x: torch.Tensor) -> tuple:
    return x, x


@pytest.mark.parametrize(
    ("why", "body", "make"),
    [
        ("strides no kernel reads in place: a copy", softmax_ops._softmax,
         lambda d: ((_randn(4, 5, 6, device=d)[:, ::2],), (-1, "auto"))),
        ("a strided weight is copied", rms_ops._rms_norm_checked,
         lambda d: ((_randn(9, 100, device=d), _randn(100, 2, device=d)[:, 0]), (1e-6, "auto"))),
        ("one tensor passed twice", add_ops._add_checked,
         lambda d: (_twice(_randn(16, 16, device=d)), ())),
    ],
)  # fmt: skip
def test_calls_reading_other_memory_are_not_replayable(why, body, make, device):
    tensors, params = make(device)
    _, replay = contracts.record(body, tensors, params)
    assert replay is None, why


def test_a_body_that_fills_an_output_is_not_replayable(device):
    """No rows: the RMSNorm backward fills ``dweight`` with zeros, which a replay would skip."""
    tensors = (*_pair(0, 300, device), _randn(300, device=device), _rstd(0, device), None)
    (_, dw), replay = contracts.record(rms_ops._grad_rows, tensors, (_plan(0, 300), False))
    assert torch.equal(dw, torch.zeros_like(dw))
    assert replay is None


def test_nothing_is_memoised_off_the_direct_route(device):
    """Interpreted (CPU) tensors, inputs that require grad: the body runs, the memo stays empty."""
    replays = contracts.Replays()
    calls = []

    def body(x, dim, plan):
        calls.append(x)
        return softmax_ops._softmax(x, dim, plan)

    x = _randn(8, 64, device=device)
    with torch.no_grad():  # the direct route: replayed on a GPU only
        replays.call(body, (x,), (-1, "auto"))
    assert len(replays._memo) == (device == "cuda")
    replays.clear()
    x.requires_grad_()
    for _ in range(2):
        replays.call(body, (x,), (-1, "auto"))
    assert len(calls) == 3
    assert not replays._memo


def test_a_bad_argument_still_gets_its_error(device):
    """Errors come from the body: an unhashable or wrong-typed argument is not replayed."""
    x = _randn(8, 64, device=device)
    kp.softmax(x, dim=1)
    kp.softmax(x, dim=1)  # recorded on a GPU: dim=True (equal to 1 as a key) must not replay it
    with pytest.raises(TypeError, match="dim must be an int"):
        kp.softmax(x, dim=[1])
    with pytest.raises(TypeError, match="dim must be an int"):
        kp.softmax(x, dim=True)


# ---------------------------------------------------------------------------
# On a GPU: a replay gives the body's bits
# ---------------------------------------------------------------------------

GPU_CASES = [
    *REPLAYABLE,
    ("softmax-block-many-rows", softmax_ops._softmax, softmax_ops._REPLAYS,
     lambda d: ((_randn(8192, 1024, device=d),), (-1, "auto"))),
    ("softmax-split-auto", softmax_ops._softmax, softmax_ops._REPLAYS,
     lambda d: ((_randn(4, 32769, device=d),), (-1, "auto"))),
    ("rms_norm-split-auto", rms_ops._rms_norm_checked, rms_ops._RMS_NORM_REPLAYS,
     lambda d: ((_randn(4, 32769, device=d), _randn(32769, device=d)), (1e-6, "auto"))),
    ("rms_norm-pieces", rms_ops._rms_norm_checked, rms_ops._RMS_NORM_REPLAYS,
     lambda d: ((_randn(512, 4104, dtype=torch.bfloat16, device=d),
                 _randn(4104, dtype=torch.bfloat16, device=d)), (1e-6, "auto"))),
    ("row_sum-split", row_sum_ops._row_sum_checked, row_sum_ops._REPLAYS,
     lambda d: ((_randn(4, 32769, device=d),), (None, plans.RowPlan("split", 1024, 4, 7)))),
    # Peeled rows past both SHIFT_W thresholds: the weight's shifted copies are scratch.
    ("rms_norm-shifted-weight", rms_ops._rms_norm_checked, rms_ops._RMS_NORM_REPLAYS,
     lambda d: ((_randn(700, 50257, dtype=torch.bfloat16, device=d),
                 _randn(50257, dtype=torch.bfloat16, device=d)), (1e-6, "auto"))),
]  # fmt: skip


def _poison_allocator(nbytes: int) -> None:
    """Leave NaN bytes in the caching allocator's free blocks: an unwritten output shows."""
    block = torch.empty(nbytes, dtype=torch.uint8, device="cuda").fill_(0xFF)
    del block


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("name", "body", "replays", "make"), GPU_CASES, ids=[c[0] for c in GPU_CASES]
)
def test_a_replay_gives_the_bits_of_the_body(name, body, replays, make):
    """Record with one input, replay with another, compare with the body on that input."""
    replays.clear()
    first, params = make("cuda")
    replays.call(body, first, params)
    assert len(replays._memo) == 1
    (entry,) = replays._memo.values()
    assert isinstance(entry, contracts._Replay), f"{name}: not replayable"
    second, _ = make("cuda")
    want = body(*second, *params)
    want = (want,) if isinstance(want, torch.Tensor) else want
    _poison_allocator(sum(w.numel() * w.element_size() for w in want) + (1 << 20))
    got = replays.call(body, second, params)
    got = (got,) if isinstance(got, torch.Tensor) else got
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.stride() == w.stride() and g.dtype == w.dtype
        assert torch.equal(g, w), f"{name}: the replay differs from the body"


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(32, 127), (4, 32769)], ids=str)  # a block, a cooperative split
def test_a_replay_is_captured_by_a_cuda_graph(shape):
    """The suite times small shapes by graph replay: a captured replay writes the output."""
    x = _randn(*shape, device="cuda")
    kp.softmax(x)
    kp.softmax(x)  # the second call replays
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        kp.softmax(x)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = kp.softmax(x)
    for _ in range(2):
        x.copy_(_randn(*shape, device="cuda"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(y, softmax_ops._softmax(x, -1, "auto"))


def _grads_of(fn, shape: tuple[int, int], seed: int) -> list:
    """Outputs and input gradients of one forward + backward of ``fn(x, w)`` on fresh inputs."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(shape, generator=gen, dtype=H, device="cuda").requires_grad_()
    w = torch.randn(shape[-1], generator=gen, dtype=H, device="cuda").requires_grad_()
    out = fn(x, w)
    outs = (out,) if isinstance(out, torch.Tensor) else out
    torch.autograd.backward(outs, [torch.randn(o.shape, generator=gen, dtype=H, device="cuda")
                                   for o in outs])  # fmt: skip
    return [o.detach() for o in outs] + [x.grad, w.grad]


FUNCTIONS = [
    ("softmax", lambda x, w: kp.softmax(x),
     (softmax_ops._FORWARD_REPLAYS, softmax_ops._BACKWARD_REPLAYS)),
    ("rms_norm", kp.rms_norm, (rms_ops._FORWARD_REPLAYS, rms_ops._BACKWARD_REPLAYS)),
    ("residual", lambda x, w: kp.residual_rms_norm(x, x.detach().flip(0), w),
     (rms_ops._FORWARD_REPLAYS, rms_ops._BACKWARD_REPLAYS)),
    ("row_sum", lambda x, w: kp.row_sum(x), (row_sum_ops._FORWARD_REPLAYS,)),
    ("add", kp.add, (add_ops._FORWARD_REPLAYS,)),
]  # fmt: skip


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(512, 4096), (3, 5000), (4, 32769)], ids=str)
@pytest.mark.parametrize(("name", "fn", "memos"), FUNCTIONS, ids=[f[0] for f in FUNCTIONS])
def test_a_function_replays_its_forward_and_backward(name, fn, memos, shape):
    """Through the autograd Functions: a signature's second call replays, with the body's bits."""
    for memo in memos:
        memo.clear()
    first = _grads_of(fn, shape, seed=0)
    for memo in memos:
        (entry,) = memo._memo.values()
        assert isinstance(entry, contracts._Replay), f"{name}: not replayable"
    _poison_allocator(sum(t.numel() * t.element_size() for t in first if t is not None) << 1)
    replayed = _grads_of(fn, shape, seed=1)
    for memo in memos:
        memo.clear()
    body = _grads_of(fn, shape, seed=1)
    for got, want in zip(replayed, body, strict=True):
        assert (got is None) == (want is None)
        assert got is None or torch.equal(got, want), f"{name}: the replay differs from the body"
