"""kp.add and kp.matmul on a real GPU: real sizes, torch.library checks, torch.compile.

Runs on the lent H200 (skipped without CUDA); the Hopper-only tests skip on
other GPUs. Covers what the interpreter cannot: the autotuned pointer
kernel, the TMA path on the copy engine itself (every tile, split and
unsplit; the plan table at the models layer shapes; split-K's sum the same
bits whichever run of a tile finishes last), ``opcheck``'s fake-tensor and
compile checks, ``torch.compile(fullgraph=True)`` forward and backward, recompilation
across batch sizes, and an addition past 2^31 elements.
"""

from __future__ import annotations

import pytest
import torch
from kp_testing import assert_matches, poison
from test_matmul import _assert_exact, _integer_operands, _operands, _tol
from torch.library import opcheck
from torch.utils._python_dispatch import TorchDispatchMode

import kernel_portfolio as kp
from kernel_portfolio import reference
from kernel_portfolio.contracts import stream_buffer
from kernel_portfolio.ops import gemm_rule
from kernel_portfolio.ops import matmul as mm

pytestmark = pytest.mark.gpu

HALF_DTYPES = (torch.float16, torch.bfloat16)
DTYPES = (torch.float32, *HALF_DTYPES)
LAYOUTS = [(False, False), (False, True), (True, False), (True, True)]


def _is_hopper() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9


hopper_only = pytest.mark.skipif(not _is_hopper(), reason="needs compute capability 9.x")


def _sms() -> int:
    return torch.cuda.get_device_properties(0).multi_processor_count


#: Autotuning candidates of the pointer path while these tests run: compiling
#: every candidate for every dtype and layout (and every shape's key) takes
#: minutes. The Hopper path is not autotuned (its plan table), and
#: test_every_tma_tile checks each of its tiles.
TEST_POINTER_CONFIGS = mm.POINTER_CONFIGS[:1]


@pytest.fixture(autouse=True, scope="module")
def _short_tuning_list():
    saved = mm._matmul_tuned.configs
    mm._matmul_tuned.configs = TEST_POINTER_CONFIGS
    yield
    mm._matmul_tuned.configs = saved


def _free_bytes() -> int:
    return torch.cuda.mem_get_info()[0] if torch.cuda.is_available() else 0


# --- add ---


@pytest.mark.parametrize("dtype", DTYPES)
def test_add_real_sizes_equal_torch(dtype):
    n = (1 << 24) + 3  # full vectorised blocks and a masked tail
    x, y = (torch.randn(n, device="cuda").to(dtype) for _ in range(2))
    assert torch.equal(kp.add(x, y), torch.add(x, y))
    x = torch.randn(8192, 4096, device="cuda").to(dtype)
    for y in (
        torch.randn(4096, device="cuda").to(dtype),  # bias
        torch.randn(8192, 1, device="cuda").to(dtype),  # column
        torch.randn(4096, 8192, device="cuda").to(dtype).t(),  # transposed
    ):
        assert torch.equal(kp.add(x, y), torch.add(x, y))
    small_x, small_y = x[:64, :96], torch.randn(96, device="cuda").to(dtype)
    assert_matches(kp.add(small_x, small_y), reference.add(small_x, small_y), dtype)


@pytest.mark.bigmem
@pytest.mark.skipif(_free_bytes() < (20 << 30), reason="needs 20 GiB of free GPU memory")
def test_add_past_2_31_elements():
    n = (1 << 31) + 4096
    x = torch.randn(n, device="cuda", dtype=torch.float16)
    y = torch.randn(n, device="cuda", dtype=torch.float16)
    assert torch.equal(kp.add(x, y), torch.add(x, y))  # flat kernel, int64 offsets
    del y
    rows = (1 << 21) + 1  # x viewed as (rows, 1024) plus a broadcast row: the strided kernel
    x2 = x[: rows * 1024].view(rows, 1024)
    bias = torch.randn(1024, device="cuda", dtype=torch.float16)
    assert torch.equal(kp.add(x2, bias), torch.add(x2, bias))


@pytest.mark.parametrize("dtype", DTYPES)
def test_add_opcheck(dtype):
    assert callable(kp.add)  # the first use imports kernel_portfolio.ops.add: torch.ops.kp.add
    x = torch.randn(64, 96, device="cuda").to(dtype).requires_grad_()
    for y in (torch.randn(64, 96, device="cuda"), torch.randn(96, device="cuda")):
        opcheck(torch.ops.kp.add.default, (x, y.to(dtype).requires_grad_()))


def test_add_compiles_without_graph_breaks():
    fn = torch.compile(lambda x, y: kp.add(x, y).square().sum(), fullgraph=True)
    x = torch.randn(512, 384, device="cuda", requires_grad=True)
    y = torch.randn(384, device="cuda", requires_grad=True)
    loss = fn(x, y)
    loss.backward()
    gx, gy = x.grad, y.grad
    x.grad = y.grad = None
    kp.add(x, y).square().sum().backward()
    torch.testing.assert_close(loss, kp.add(x, y).square().sum())
    torch.testing.assert_close(gx, x.grad)
    torch.testing.assert_close(gy, y.grad)


def test_add_new_batch_size_does_not_recompile():
    torch._dynamo.reset()
    fn = torch.compile(kp.add, fullgraph=True, dynamic=True)
    bias = torch.randn(768, device="cuda")
    fn(torch.randn(1000, 768, device="cuda"), bias)
    with torch.compiler.set_stance("fail_on_recompile"):
        x = torch.randn(3000, 768, device="cuda")
        assert torch.equal(fn(x, bias), torch.add(x, bias))


# --- matmul ---


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("a_t", "b_t"), LAYOUTS)
@pytest.mark.parametrize("shape", [(4096, 4096, 4096), (1000, 1536, 776), (127, 255, 65)])
def test_matmul_real_sizes(dtype, a_t, b_t, shape):
    m, n, k = shape
    a, b = _operands(m, n, k, dtype, "cuda", a_t=a_t, b_t=b_t)
    assert_matches(kp.matmul(a, b), reference.matmul(a, b), dtype, tol=_tol(dtype, k))


@hopper_only
@pytest.mark.parametrize("dtype", HALF_DTYPES)
@pytest.mark.parametrize(("a_t", "b_t"), LAYOUTS)
def test_tma_and_pointer_paths_agree(dtype, a_t, b_t):
    m, n, k = 2048, 1536, 1032  # K not a multiple of any BLOCK_K: zero fill in K
    a, b = _operands(m, n, k, dtype, "cuda", a_t=a_t, b_t=b_t)
    ref = reference.matmul(a, b)
    outs = {}
    for path in ("tma", "pointer"):
        out = poison(torch.empty(m, n, dtype=dtype, device="cuda"))
        mm._launch_matmul(a, b, out, allow_tf32=False, path=path)
        assert_matches(out, ref, dtype, path, tol=_tol(dtype, k))
        outs[path] = out
    # Both round the same float32 sums once; they may differ only where the
    # summation order tips a rounding.
    assert_matches(outs["tma"], outs["pointer"].double().cpu(), dtype, "tma vs pointer")


TILE_IDS = [tile.name.replace(" ", "-") for tile in mm.TMA_TILES]


@hopper_only
@pytest.mark.parametrize("tile", mm.TMA_TILES, ids=TILE_IDS)
def test_every_tma_tile(tile):
    """Each tile of the table's catalogue, unsplit with ``B`` transposed, split with ``A`` (dB)."""
    m, n, k = 1000, 1280, 776
    for splits, a_t, b_t in ((1, False, True), (2, True, False)):
        if splits > 1 and not tile.splits:
            continue
        a, b = _operands(m, n, k, torch.bfloat16, "cuda", a_t=a_t, b_t=b_t)
        out = poison(torch.empty(m, n, dtype=torch.bfloat16, device="cuda"))
        plan = mm.TmaPlan(tile, splits)
        mm._launch_matmul(a, b, out, allow_tf32=False, path="tma", plan=plan)
        what = f"{tile.name} split {splits}"
        assert_matches(out, reference.matmul(a, b), torch.bfloat16, what, _tol(torch.bfloat16, k))


GLUON_TILES = [tile for tile in mm.TMA_TILES if tile.gluon]


@hopper_only
@pytest.mark.parametrize("dtype", HALF_DTYPES)
@pytest.mark.parametrize("tile", GLUON_TILES, ids=[t.name.replace(" ", "-") for t in GLUON_TILES])
def test_gluon_tiles_in_every_layout(tile, dtype):
    """The warp-specialised kernel with each operand in place or transposed (``x @ W.T``,
    ``dA``, ``dB``), at sizes off its tile and ``K`` step, and with fewer tiles than SMs."""
    for m, n, k in ((1000, 1280, 776), (136, 200, 72)):
        for a_t in (False, True):
            for b_t in (False, True):
                a, b = _operands(m, n, k, dtype, "cuda", a_t=a_t, b_t=b_t)
                out = poison(torch.empty(m, n, dtype=dtype, device="cuda"))
                plan = mm.TmaPlan(tile)
                mm._launch_matmul(a, b, out, allow_tf32=False, path="tma", plan=plan)
                what = f"{tile.name} {m}x{n}x{k} a_t={a_t} b_t={b_t}"
                assert_matches(out, reference.matmul(a, b), dtype, what, _tol(dtype, k))


class _PassThrough(TorchDispatchMode):
    """A dispatch mode that changes nothing: inside it ``kp.matmul`` takes the op route."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


@hopper_only
@pytest.mark.parametrize(
    ("m", "n", "k", "kind"),
    (
        (2048, 2048, 512, "gluon"),
        (384, 4096, 4096, "two accumulators"),
        (64, 1024, 16384, "split"),
        (1024, 14336, 4096, "columns"),
        (768, 6144, 4096, "one wave"),
    ),
)
def test_hopper_plan_on_every_route(m, n, k, kind):
    """Where the plan takes a Hopper tile, eager, op and compiled routes give the same bits.

    A Gluon tile, a Triton tile of two accumulators, a swapped tile split in
    ``K``, a plan of two parts over their own columns (:attr:`TmaPlan.rest`:
    two launches, two calls of ``kp::matmul_tma`` when traced), and a Gluon
    tile's one-wave form (its epilogue in halves: ``gemm_rule.ONE_WAVE_TILES``). Under
    ``torch.compile`` and ``opcheck``'s fake tensors the launcher is traced
    and reaches the kernel through ``kp::matmul_tma`` (Triton's wrapper takes
    neither Gluon kernels nor host descriptors); the op route
    under a pass-through dispatch mode runs the op's body eagerly. All must
    give the eager bits, and the compiled backward float64's gradients to
    rounding.
    """
    plan = mm._tma_plan(m, n, k, _sms())
    shown = {
        "gluon": plan.tile.gluon,
        "two accumulators": plan.tile.block_n2 > 0,
        "columns": plan.rest is not None,
        "one wave": plan.tile.gluon and plan.tile.epilogue_split == 2,
    }
    assert shown.get(kind, plan.split_k > 1), plan
    a, b = _operands(m, n, k, torch.bfloat16, "cuda", b_t=True)
    eager = kp.matmul(a, b)
    assert_matches(eager, reference.matmul(a, b), torch.bfloat16, tol=_tol(torch.bfloat16, k))
    with _PassThrough():
        assert torch.equal(kp.matmul(a, b), eager)
    compiled = torch.compile(kp.matmul, fullgraph=True)
    assert torch.equal(compiled(a, b), eager)
    opcheck(torch.ops.kp.matmul.default, (a.requires_grad_(), b.requires_grad_()))
    a.grad = b.grad = None
    grad = torch.randn(m, n, device="cuda").to(torch.bfloat16)
    torch.compile(lambda a, b: (kp.matmul(a, b) * grad).sum(), fullgraph=True)(a, b).backward()
    g64, a64, b64 = (t.detach().double().cpu() for t in (grad, a, b))
    tol = _tol(torch.bfloat16, max(m, n))
    assert_matches(a.grad, g64 @ b64.T, torch.bfloat16, "grad a", tol=tol)
    assert_matches(b.grad, a64.T @ g64, torch.bfloat16, "grad b", tol=tol)


#: Products of a linear layer at a small batch, at the models layer shapes
#: (N, K) of ``scripts/gemm_tune.py``: every row of the plan table, batch
#: sizes off every tile (1, 17, 100, 257, 384, 544, 640, 704), split and
#: unsplit, each tile of two accumulators (257, 384, 480, 544 and 704 rows)
#: and each Gluon tile (384, 480, 512, 640, 704 and 1024 rows).
FEW_ROWS = [
    (1, 4096, 4096),
    (17, 6144, 4096),
    (64, 14336, 4096),
    (100, 4096, 14336),
    (257, 4096, 4096),
    (384, 6144, 4096),
    (480, 6144, 4096),
    (512, 4096, 14336),
    (544, 4096, 4096),
    (640, 4096, 4096),
    (704, 6144, 4096),
    (1024, 6144, 4096),
    (1024, 4096, 14336),
]


@hopper_only
@pytest.mark.parametrize("dtype", HALF_DTYPES)
@pytest.mark.parametrize("b_t", [False, True], ids=["b", "wT"])
@pytest.mark.parametrize("shape", FEW_ROWS, ids=["x".join(map(str, s)) for s in FEW_ROWS])
def test_plan_table_at_model_shapes(shape, b_t, dtype):
    m, n, k = shape
    a, b = _operands(m, n, k, dtype, "cuda", b_t=b_t)  # b_t: x @ W.T, W read in place
    assert mm._tma_layout(b) == ((True, k) if b_t else (False, n))
    out = poison(torch.empty(m, n, dtype=dtype, device="cuda"))
    mm._launch_matmul(a, b, out, allow_tf32=False)
    assert_matches(out, reference.matmul(a, b), dtype, tol=_tol(dtype, k))
    counters = stream_buffer("matmul split-k counters", 1, torch.int32, torch.device("cuda"))
    assert not counters.any(), "a tile's split-K counter was left above 0"


@hopper_only
def test_split_k_sum_does_not_depend_on_which_run_finishes_last():
    """The same bits, run after run: the tile's last run adds the partials in slice order.

    On the GPU the runs of a tile finish in any order; a sum in arrival order
    would change the low bits between runs of the same product.
    """
    m, n, k = 64, 1024, 32768  # few output tiles over a long K: the plan splits K
    plan = mm._tma_plan(m, n, k, _sms())
    assert plan.split_k > 1, plan
    a, b = _operands(m, n, k, torch.bfloat16, "cuda")
    first = kp.matmul(a, b)
    for _ in range(20):
        assert torch.equal(kp.matmul(a, b), first)
    assert_matches(first, reference.matmul(a, b), torch.bfloat16, tol=_tol(torch.bfloat16, k))


@hopper_only
@pytest.mark.parametrize("splits", range(1, 9))
def test_every_split_count_of_the_few_rows_tile(splits):
    m, n, k = 64, 4096, 4096
    tile = mm._TILES_BY_NAME[gemm_rule.TMA_RULES[0].tiles[0]]
    a, b = _operands(m, n, k, torch.float16, "cuda", b_t=True)
    out = poison(torch.empty(m, n, dtype=torch.float16, device="cuda"))
    mm._launch_matmul(a, b, out, allow_tf32=False, path="tma", plan=mm.TmaPlan(tile, splits))
    assert_matches(out, reference.matmul(a, b), torch.float16, tol=_tol(torch.float16, k))


@hopper_only
@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_split_k_real_size(dtype):
    # The dB layout of a linear layer with a large batch: A transposed, few
    # output tiles, so the plan splits K.
    m, n, k = 1024, 1024, 16384
    assert (
        mm._tma_plan(m, n, k, torch.cuda.get_device_properties(0).multi_processor_count).split_k > 1
    )
    a, b = _operands(m, n, k, dtype, "cuda", a_t=True)
    out = poison(torch.empty(m, n, dtype=dtype, device="cuda"))
    mm._launch_matmul(a, b, out, allow_tf32=False)
    assert_matches(out, reference.matmul(a, b), dtype, tol=_tol(dtype, k))


@hopper_only
@pytest.mark.parametrize("m", [17, 64, 384])
def test_backward_of_a_small_batch(m):
    """A linear layer at a small batch, forward and backward: dB's ``K`` is the batch."""
    n, k = 4096, 14336
    a, b = _operands(m, n, k, torch.bfloat16, "cuda", b_t=True)
    a.requires_grad_()
    b.requires_grad_()
    grad = torch.randn(m, n, device="cuda").to(torch.bfloat16)
    kp.matmul(a, b).backward(grad)
    g64, a64, b64 = (t.detach().double().cpu() for t in (grad, a, b))
    assert_matches(a.grad, g64 @ b64.T, torch.bfloat16, "grad a", tol=_tol(torch.bfloat16, n))
    assert_matches(b.grad, a64.T @ g64, torch.bfloat16, "grad b", tol=_tol(torch.bfloat16, m))


@pytest.mark.parametrize("path", ["tma", "pointer"])
def test_exact_float16_case(path):
    if path == "tma" and not _is_hopper():
        pytest.skip("needs compute capability 9.x")
    a, b = _integer_operands(256, 384, 1024, "cuda")
    out = poison(torch.empty(256, 384, dtype=torch.float16, device="cuda"))
    mm._launch_matmul(a, b, out, allow_tf32=False, path=path)
    _assert_exact(out, a, b)


def test_tf32_only_when_allowed():
    a, b = _operands(1024, 1024, 2048, torch.float32, "cuda")
    ref = reference.matmul(a, b)
    assert_matches(kp.matmul(a, b), ref, torch.float32, tol=_tol(torch.float32, 2048))
    out = kp.matmul(a, b, allow_tf32=True)
    assert_matches(out, ref, torch.float32, tol=_tol(torch.float32, 2048, tf32=True))


@pytest.mark.parametrize("dtype", DTYPES)
def test_matmul_backward_real_sizes(dtype):
    m, n, k = 2048, 1024, 1536
    a, b = _operands(m, n, k, dtype, "cuda", b_t=True)  # a linear layer: x @ W.T
    a.requires_grad_()
    b.requires_grad_()
    grad = torch.randn(m, n, device="cuda").to(dtype)
    kp.matmul(a, b).backward(grad)
    g64, a64, b64 = (t.detach().double().cpu() for t in (grad, a, b))
    assert_matches(a.grad, g64 @ b64.T, dtype, "grad a", tol=_tol(dtype, n))
    assert_matches(b.grad, a64.T @ g64, dtype, "grad b", tol=_tol(dtype, m))


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16))
def test_matmul_opcheck(dtype):
    a, b = _operands(256, 128, 192, dtype, "cuda")
    opcheck(torch.ops.kp.matmul.default, (a.requires_grad_(), b.requires_grad_()))
    opcheck(torch.ops.kp.matmul.default, (a, b.detach().t().contiguous().t()), {"allow_tf32": True})


@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16))
def test_matmul_compiles_without_graph_breaks(dtype):
    fn = torch.compile(lambda a, b: kp.matmul(a, b).float().square().sum(), fullgraph=True)
    a, b = _operands(512, 384, 256, dtype, "cuda", b_t=True)
    a.requires_grad_()
    b.requires_grad_()
    loss = fn(a, b)
    loss.backward()
    ga, gb = a.grad, b.grad
    a.grad = b.grad = None
    eager = kp.matmul(a, b).float().square().sum()
    eager.backward()
    tol = 10 * _tol(dtype, 512)
    torch.testing.assert_close(loss, eager, rtol=tol, atol=0)
    torch.testing.assert_close(ga, a.grad, rtol=tol, atol=tol)
    torch.testing.assert_close(gb, b.grad, rtol=tol, atol=tol)


@hopper_only
def test_new_batch_size_with_the_same_plan_reuses_the_compiled_graph():
    b = torch.randn(512, 768, device="cuda", dtype=torch.float16)

    def batch(m):
        return torch.randn(m, 512, device="cuda", dtype=torch.float16)

    # M=33 and M=40 share a plan (bucket 64).
    assert mm._tma_plan(33, 768, 512, _sms()) == mm._tma_plan(40, 768, 512, _sms())

    # Compiled with dynamic shapes: a new M with the same plan reuses the graph.
    torch._dynamo.reset()
    fn = torch.compile(kp.matmul, fullgraph=True, dynamic=True)
    fn(batch(33), b)
    with torch.compiler.set_stance("fail_on_recompile"):
        a = batch(40)
        assert_matches(
            fn(a, b), reference.matmul(a, b), torch.float16, tol=_tol(torch.float16, 512)
        )
    a = batch(300)  # another bucket and another tile: a recompile at most, still correct
    assert_matches(fn(a, b), reference.matmul(a, b), torch.float16, tol=_tol(torch.float16, 512))


def test_matmul_on_a_second_device():
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    a, b = _operands(300, 200, 100, torch.float16, "cuda:1")
    assert_matches(
        kp.matmul(a, b), reference.matmul(a, b), torch.float16, tol=_tol(torch.float16, 100)
    )
    x = torch.randn(1000, device="cuda:1")
    assert torch.equal(kp.add(x, x), x + x)
