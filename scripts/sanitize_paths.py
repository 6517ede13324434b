"""Run every kernel path once at small shapes, checked against the float64 references.

Writes the memcheck log ``results/h200/checks/memcheck-<UTC stamp>.log`` (its
console output under the sanitizer; ``scripts/h200_session.sh checks`` runs it
so). Re-run on the GPU machine (about a minute)::

    compute-sanitizer --tool memcheck --error-exitcode 1 python3 scripts/sanitize_paths.py \
        > results/h200/checks/memcheck-$(date -u +%Y%m%dT%H%MZ).log 2>&1

Under ``compute-sanitizer --tool memcheck`` each path runs once, on ragged
shapes (rows not a multiple of any block, matrices not a multiple of any
tile), so an out-of-bounds load or store shows as a memcheck error.
``PYTORCH_NO_CUDA_MEMORY_CACHING=1`` is set before torch is imported, so every
tensor is its own ``cudaMalloc`` and memcheck sees the exact bounds of each
allocation (with the caching allocator an overrun can land inside a larger
cached block and go unseen).

Paths: ``add`` (dense and strided kernels) in each dtype; ``row_sum``,
``softmax``, ``rms_norm`` and ``residual_rms_norm`` with each row plan forced
(block; looped and split with several chunks), forward and backward, one dtype
per plan so each dtype runs once per operator, at an aligned and a peeled
(odd) width; the softmax's cooperative split on few wide rows and its full
blocks (the backward's a program a row); RMSNorm and
residual RMSNorm at enough peeled rows to read the weight's shifted copies;
and the row sum's block plan on rows narrow enough that a program sums
several; GEMM forward with every
tile of the Hopper path and every autotuning config of the pointer path
(operands row-major), with the first of each path on the backward's operand
layouts (A or B column-major), split-K on the Hopper path, and a Hopper plan
of two parts, each over its own columns (``B`` transposed). The GEMM
paths use fixed settings: autotuning under memcheck would time every config
many times over.

Each path prints one line; the exit status is 1 if any output or gradient is
missing, non-finite or off the float64 reference by more than the dtype's
bound (:func:`kernel_portfolio.bench.runner.tolerance`), or if a path raises.

Usage:
    python3 scripts/sanitize_paths.py            # on a GPU, without the sanitizer
    TRITON_INTERPRET=1 python3 scripts/sanitize_paths.py --small   # on a CPU
"""

from __future__ import annotations

import os

os.environ["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"  # before torch allocates anything

import argparse  # noqa: E402
import itertools  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402

import torch  # noqa: E402

import kernel_portfolio as kp  # noqa: E402
from kernel_portfolio import plans  # noqa: E402
from kernel_portfolio.bench.runner import EPS, check, make_inputs  # noqa: E402
from kernel_portfolio.bench.suites import Case  # noqa: E402
from kernel_portfolio.contracts import interpreter_enabled  # noqa: E402
from kernel_portfolio.ops import gemm_rule, rms_norm  # noqa: E402
from kernel_portfolio.ops import matmul as mm  # noqa: E402

ROW_OPS = ("row_sum", "softmax", "rms_norm", "residual_rms_norm")
DTYPES = ("float16", "bfloat16", "float32")
#: Shapes on a GPU and, with ``--small``, under the interpreter: rows wider than
#: the looped/split chunk and not a multiple of it, at a width whose rows are
#: 16-byte aligned and at one whose rows are peeled (odd); GEMM sizes off every tile.
SHAPES = {
    False: {
        "rows": ((37, 3000), (37, 3001)),
        "chunk": 512,
        "splits": 3,
        "add": 70001,
        "gemm": (200, 136, 72),
    },
    True: {
        "rows": ((5, 300), (5, 301)),
        "chunk": 64,
        "splits": 2,
        "add": 1001,
        "gemm": (40, 48, 32),
    },
}
#: Few wide rows whose auto plan is the cooperative split forward (one launch,
#: programs waiting on each other: never under the interpreter), aligned and peeled.
COOPERATIVE_ROWS = ((4, 32768), (3, 50257))
#: Width of the RMSNorm paths whose weight is read from its shifted copies
#: (``ops.rms_norm.SHIFT_W_MIN_ELEMENTS`` and ``SHIFT_W_BWD_MIN_ELEMENTS``;
#: never under the interpreter).
SHIFTED_WIDTH = 50257
#: Width of the peeled RMSNorm rows that ``auto``'s forward holds in one full block
#: (``ops.rms_norm.FULL_BLOCK_FWD_MIN_FILL``), reading the weight's shifted copies.
FULL_BLOCK_WIDTH = 30522
#: Softmax rows of a full block: peeled float16 rows that ``auto`` walks looped
#: forward and holds in one block backward (a program a row, the product in
#: half precision), and aligned bfloat16 rows in one block both ways.
SOFTMAX_FULL_BLOCK_ROWS = (((300, FULL_BLOCK_WIDTH), "float16"), ((300, 32768), "bfloat16"))


def _row_plan(kind: str, shape: tuple[int, int], chunk: int, splits: int, dtype: str):
    """A forced plan: block (the whole row), or looped / split plans of several chunks."""
    if kind == "looped":
        return plans.RowPlan("looped", chunk, 4, 1)
    if kind == "split":
        return plans.RowPlan("split", chunk, 4, splits)
    elem = torch.empty((), dtype=getattr(torch, dtype)).element_size()
    return plans.choose(*shape, elem_bytes=elem, sm_count=plans.CPU_SM_COUNT, plan="block")


def _row_fn(op: str, plan: plans.RowPlan) -> Callable:
    if op == "row_sum":
        return lambda x: kp.row_sum(x, plan=plan)
    if op == "softmax":
        return lambda x: kp.softmax(x, plan=plan)
    if op == "rms_norm":
        return lambda x, w: kp.rms_norm(x, w, eps=EPS, plan=plan)
    return lambda x, r, w: kp.residual_rms_norm(x, r, w, eps=EPS, plan=plan)


def _strided(x: torch.Tensor) -> torch.Tensor:
    """The same values as ``x`` in a stride-2 view (not dense: the strided add kernel)."""
    return torch.stack([x, x], -1)[..., 0]


def _layout(t: torch.Tensor, col_major: bool) -> torch.Tensor:
    """The same matrix, stored column-major when asked (the backward's operand layouts)."""
    return t.t().contiguous().t() if col_major else t


def _gemm_fn(path: str, setting, a_col: bool, b_col: bool, split_k: int = 1) -> Callable:
    """A product on ``path`` with ``setting`` fixed: a pointer config, a Hopper tile or plan.

    ``setting=None`` leaves the choice to the launcher (the interpreter's small
    config or tile); ``split_k`` splits ``K`` on the Hopper path.
    """
    if isinstance(setting, mm.TmaPlan):
        fixed = {"plan": setting}
    elif path == "tma":
        tile = mm.INTERPRETER_TILE if setting is None else setting
        fixed = {"plan": mm.TmaPlan(tile, split_k)}
    else:
        fixed = {"config": setting}

    def fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        out = torch.full((a.shape[0], b.shape[1]), float("nan"), dtype=a.dtype, device=a.device)
        mm._launch_matmul(
            _layout(a, a_col), _layout(b, b_col), out, allow_tf32=False, path=path, **fixed
        )
        return out

    return fn


def _setting_text(setting) -> str:
    if setting is None:
        return "interpreter setting"
    if isinstance(setting, mm.TmaTile):
        return setting.name
    kw = setting.kwargs
    tile = "x".join(str(kw[k]) for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K"))
    return f"{tile} w{setting.num_warps} s{setting.num_stages}"


def paths(small: bool) -> Iterator[tuple[str, Case, Callable]]:
    """Every ``(label, case, fn)`` to run once."""
    s = SHAPES[small]
    for dtype in DTYPES:
        case = Case("add", "fwdbwd", (s["add"],), dtype, "events", ("ours", "torch"))
        yield f"add dense {dtype} fwd+bwd", case, lambda x, y: kp.add(x, y)
    case = Case("add", "fwdbwd", (s["add"],), "float16", "events", ("ours", "torch"))
    yield "add strided float16 fwd+bwd", case, lambda x, y: kp.add(_strided(x), y)
    for op, rows in itertools.product(ROW_OPS, s["rows"]):
        for kind, dtype in zip(("block", "looped", "split"), DTYPES, strict=True):
            plan = _row_plan(kind, rows, s["chunk"], s["splits"], dtype)
            case = Case(op, "fwdbwd", rows, dtype, "events", ("ours", "torch"))
            label = f"{op} {kind} (block {plan.block}, splits {plan.splits}) {dtype} "
            yield label + f"{rows[1]} columns fwd+bwd", case, _row_fn(op, plan)
    for rows in () if small else COOPERATIVE_ROWS:
        case = Case("softmax", "fwdbwd", rows, "float16", "events", ("ours", "torch"))
        yield (
            f"softmax cooperative {rows[0]}x{rows[1]} float16 fwd+bwd",
            case,
            _row_fn("softmax", "auto"),
        )
    for rows, dtype in () if small else SOFTMAX_FULL_BLOCK_ROWS:
        case = Case("softmax", "fwdbwd", rows, dtype, "events", ("ours", "torch"))
        label = f"softmax full block {rows[0]}x{rows[1]} {dtype} fwd+bwd"
        yield label, case, _row_fn("softmax", "auto")
    # Peeled RMSNorm rows past both thresholds: the weight's shifted copies.
    least = max(rms_norm.SHIFT_W_MIN_ELEMENTS, rms_norm.SHIFT_W_BWD_MIN_ELEMENTS)
    for op in () if small else ("rms_norm", "residual_rms_norm"):
        rows = (plans.cdiv(least, SHIFTED_WIDTH), SHIFTED_WIDTH)
        case = Case(op, "fwdbwd", rows, "bfloat16", "events", ("ours", "torch"))
        label = f"{op} shifted weight {rows[0]}x{rows[1]} bfloat16 fwd+bwd"
        yield label, case, _row_fn(op, "auto")
        rows = (plans.cdiv(rms_norm.SHIFT_W_MIN_ELEMENTS, FULL_BLOCK_WIDTH), FULL_BLOCK_WIDTH)
        case = Case(op, "fwdbwd", rows, "bfloat16", "events", ("ours", "torch"))
        label = f"{op} full block, shifted weight {rows[0]}x{rows[1]} bfloat16 fwd+bwd"
        yield label, case, _row_fn(op, "auto")
    narrow = (s["rows"][0][0], s["rows"][0][1] // 10)  # several rows a row-sum block program
    plan = _row_plan("block", narrow, s["chunk"], s["splits"], "float16")
    case = Case("row_sum", "fwdbwd", narrow, "float16", "events", ("ours", "torch"))
    yield f"row_sum block {narrow[1]} columns, float16 fwd+bwd", case, _row_fn("row_sum", plan)
    m, n, k = s["gemm"]
    gpu_settings = {
        "tma": list(zip(mm.TMA_TILES, itertools.cycle(("float16", "bfloat16")))),
        "pointer": list(zip(mm.POINTER_CONFIGS, itertools.cycle(("float32", "bfloat16")))),
    }
    for path, settings in gpu_settings.items():
        if small:
            settings = [(None, "float16" if path == "tma" else "float32")]
        for i, (setting, dtype) in enumerate(settings):
            layouts = [(False, False)] + ([(True, False), (False, True)] if i == 0 else [])
            for a_col, b_col in layouts:
                case = Case("matmul", "fwd", (m, n, k), dtype, "events", ("ours", "cublas"))
                order = f"{'t' if a_col else 'n'}{'t' if b_col else 'n'}"
                label = f"matmul {path} {_setting_text(setting)} {order} {dtype} fwd"
                yield label, case, _gemm_fn(path, setting, a_col, b_col)
    # Split-K (the dB layout: A transposed) with the first row's tile of the
    # plan table: float32 partial tiles, then the last run's sum of them.
    tile = None if small else mm._TILES_BY_NAME[gemm_rule.TMA_RULES[0].tiles[0]]
    case = Case("matmul", "fwd", (m, n, k), "bfloat16", "events", ("ours", "cublas"))
    yield "matmul tma split-k 2 tn bfloat16 fwd", case, _gemm_fn("tma", tile, True, False, 2)
    # A plan of two parts (matmul._column_split; B transposed): a Gluon tile over
    # the first columns, then the rest's views of B and C, a split tile over them.
    if small:
        plan = mm.TmaPlan(mm.INTERPRETER_TILE, 1, 32, mm.TmaPlan(mm.INTERPRETER_TILE, 2))
    else:
        rest = mm.TmaPlan(mm._TILES_BY_NAME[gemm_rule.TMA_RULES[3].tiles[0]], 2)
        plan = mm.TmaPlan(mm._TILES_BY_NAME[gemm_rule.GLUON_TILES[-1]], 1, 128, rest)
    label = f"matmul tma columns {plan.cols} + {n - plan.cols} nt bfloat16 fwd"
    yield label, case, _gemm_fn("tma", plan, False, True)


def main(argv: list[str] | None = None) -> int:
    """Run every path; returns 0 when all match their references, else 1."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--small", action="store_true", help="interpreter-sized shapes (CPU, TRITON_INTERPRET=1)"
    )
    parser.add_argument("--only", default="", help="run only the paths whose label contains this")
    args = parser.parse_args(argv)
    if torch.cuda.is_available():
        device = "cuda"
    elif interpreter_enabled():
        device = "cpu"
    else:
        print("no CUDA device: set TRITON_INTERPRET=1 (with --small) to run on the CPU")
        return 2
    failed = 0
    count = 0
    for label, case, fn in paths(args.small):
        if args.only not in label:
            continue
        count += 1
        start = time.perf_counter()
        try:
            inputs = make_inputs(case, seed=0, device=device)
            err = check(case, fn, inputs)
            line = f"ok    rel_error {err:.1e}"
        except Exception as exc:  # a mismatch (CheckFailed) or a path that raised
            failed += 1
            first = (str(exc).strip().splitlines() or [""])[0][:200]
            line = f"FAIL  {type(exc).__name__}: {first}"
        if device == "cuda":
            torch.cuda.synchronize()
        print(f"{label:<64} {line} ({time.perf_counter() - start:.1f} s)", flush=True)
    if count == 0:
        print(f"no path matches --only {args.only!r}")
        return 2
    print(f"{count} paths, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
