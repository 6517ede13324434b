"""Benchmark suites, as data.

A suite is a list of :class:`Case` rows: (op, mode, shape, dtype, timer,
implementations). Nothing here runs anything; the runner walks the rows. Each
operator's compulsory memory traffic and arithmetic are written once, as
formula strings in :data:`OPS`, and the same strings both compute the byte and
FLOP counts and go into every result, so the formula a reader sees is the one
that produced the number.

Formula variables: ``M, N`` (rows, columns) for row operators; ``n`` (elements)
for ``add``; ``M, N, K`` for ``matmul`` (``A`` is ``M x K``, ``B`` is ``K x N``);
``s`` is the element size in bytes.

Implementation names: ``ours`` (kernel_portfolio), ``torch`` (eager PyTorch),
``compile`` (``torch.compile(dynamic=False)``, compile time excluded and saved
as the metric ``compile_ms``), ``liger`` (Liger-Kernel) and ``cublas``
(``torch.mm``, the GEMM baseline).
"""

from __future__ import annotations

import ast
import functools
import itertools
from dataclasses import dataclass
from pathlib import Path

MODES = ("fwd", "fwdbwd")
TIMERS = ("events", "cuda_graph")
CACHES = ("cold", "warm")
IMPLS = ("ours", "torch", "compile", "liger", "cublas")
DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}

#: Relative-error bound (||out - ref|| / ||ref|| against float64) per dtype; an
#: implementation above it is recorded as failed and never timed.
REL_TOL = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}

#: Files every measured number depends on besides the operator's own file:
#: input checks, the float64 references, and the harness that times, counts
#: and summarises.
HARNESS_SOURCES = (
    "src/kernel_portfolio/contracts.py",
    "src/kernel_portfolio/reference.py",
    "src/kernel_portfolio/bench/suites.py",
    "src/kernel_portfolio/bench/timing.py",
    "src/kernel_portfolio/bench/runner.py",
    "src/kernel_portfolio/bench/records.py",
)
#: Glob (repo-relative) of the operator files and their helpers (the peeling
#: helpers, the GEMM's plan table); all of them are hashed into every result.
OPS_GLOB = "src/kernel_portfolio/ops/*.py"
#: The row plans and the constants of their ``auto`` rule, also hashed into every
#: result. An operator's ``depends_on`` names the files it imports
#: (:func:`imported_sources`), all of which these and ``OPS_GLOB`` cover.
PLANS_SOURCE = "src/kernel_portfolio/plans.py"
PLAN_RULE_SOURCE = "src/kernel_portfolio/plan_rule.py"
#: The package's source folder, repo-relative, and on disk.
_PACKAGE_DIR = "src/kernel_portfolio"
_PACKAGE_PATH = Path(__file__).resolve().parents[1]


def _module_file(module: str) -> str | None:
    """Repo-relative file of a ``kernel_portfolio`` submodule (None for a package or other)."""
    parts = module.split(".")
    if parts[0] != "kernel_portfolio" or len(parts) < 2:
        return None
    rel = "/".join(parts[1:]) + ".py"
    return f"{_PACKAGE_DIR}/{rel}" if (_PACKAGE_PATH / rel).is_file() else None


@functools.cache
def imported_sources(path: str) -> tuple[str, ...]:
    """The package's files that ``path`` imports, directly or through them, sorted.

    ``path`` is repo-relative, under ``src/kernel_portfolio``. Every
    ``import kernel_portfolio.x`` and ``from kernel_portfolio[.x] import y``
    counts, at module level or inside a function (``y`` when it is a
    submodule); package ``__init__`` files do not (``kernel_portfolio``'s own
    imports the whole package).
    """
    seen: set[str] = set()
    todo = [path]
    while todo:
        rel = todo.pop().removeprefix(f"{_PACKAGE_DIR}/")
        tree = ast.parse((_PACKAGE_PATH / rel).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            else:
                continue
            for found in filter(None, map(_module_file, modules)):
                if found != path and found not in seen:
                    seen.add(found)
                    todo.append(found)
    return tuple(sorted(seen))


@dataclass(frozen=True)
class OpSpec:
    """What the harness needs to know about one operator.

    Attributes:
        name: Operator name, as in ``kernel_portfolio.<name>``.
        source: Repo-relative path of the file that implements it.
        dims: Names of the shape's dimensions, in order, for the formulas.
        bytes_fwd: Compulsory bytes of the forward pass.
        bytes_fwdbwd: Compulsory bytes of forward plus backward.
        flops_fwd: Floating-point operations of the forward pass (GEMM only).
        flops_fwdbwd: Same for forward plus backward.
        row_op: Whether the operator walks rows.
        traffic: One sentence that derives the byte formulas.
    """

    name: str
    source: str
    dims: tuple[str, ...]
    bytes_fwd: str
    bytes_fwdbwd: str
    flops_fwd: str | None = None
    flops_fwdbwd: str | None = None
    row_op: bool = True
    traffic: str = ""

    def depends_on(self) -> tuple[str, ...]:
        """Repo-relative files whose change makes this operator's numbers stale.

        Its own file, every file of the package that it imports (the plan
        rules, the peeling helpers, a tuned table: :func:`imported_sources`),
        and the harness.
        """
        own = (self.source, *imported_sources(self.source))
        return (*own, *(p for p in HARNESS_SOURCES if p not in own))


_OPS_DIR = "src/kernel_portfolio/ops"
OPS: dict[str, OpSpec] = {
    spec.name: spec
    for spec in (
        OpSpec(
            "add",
            f"{_OPS_DIR}/add.py",
            ("n",),
            "3*n*s",
            "6*n*s",
            row_op=False,
            traffic="fwd reads x, y and writes out; bwd reads dout and writes dx and dy",
        ),
        OpSpec(
            "row_sum",
            f"{_OPS_DIR}/row_sum.py",
            ("M", "N"),
            "(M*N + M)*s",
            "(2*M*N + 2*M)*s",
            traffic="fwd reads x and writes one value per row; bwd reads dout and writes dx",
        ),
        OpSpec(
            "softmax",
            f"{_OPS_DIR}/softmax.py",
            ("M", "N"),
            "2*M*N*s",
            "5*M*N*s",
            traffic="fwd reads x and writes y; bwd reads y and dy and writes dx",
        ),
        OpSpec(
            "rms_norm",
            f"{_OPS_DIR}/rms_norm.py",
            ("M", "N"),
            "(2*M*N + N)*s",
            "(5*M*N + 3*N)*s",
            traffic=(
                "fwd reads x, w and writes y; bwd reads x, dy, w and writes dx, dw "
                "(the per-row 1/rms a kernel may save is not compulsory)"
            ),
        ),
        OpSpec(
            "residual_rms_norm",
            f"{_OPS_DIR}/rms_norm.py",
            ("M", "N"),
            "(4*M*N + N)*s",
            "(9*M*N + 3*N)*s",
            traffic=(
                "fwd reads x, r, w and writes y, h = x + r; bwd reads h, dy, dh, w and "
                "writes dx, dr (equal values, two tensors) and dw"
            ),
        ),
        OpSpec(
            "matmul",
            f"{_OPS_DIR}/matmul.py",
            ("M", "N", "K"),
            "(M*K + K*N + M*N)*s",
            "(3*M*K + 3*K*N + 2*M*N)*s",
            "2*M*N*K",
            "6*M*N*K",
            row_op=False,
            traffic=(
                "fwd reads A, B and writes C; bwd reads dC, A, B and writes dA = dC B^T "
                "and dB = A^T dC"
            ),
        ),
    )
}


def eval_formula(formula: str, values: dict[str, int]) -> int:
    """Evaluate a byte or FLOP formula (integers, names, ``+ - *`` and parentheses).

    Args:
        formula: The formula, e.g. ``"(2*M*N + N)*s"``.
        values: Value of every name in it.

    Returns:
        The integer value.

    Raises:
        ValueError: the formula uses anything else, or a name with no value.
    """

    def walk(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in values:
                raise ValueError(f"formula {formula!r} uses {node.id!r}, which has no value")
            return int(values[node.id])
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult)):
            left, right = walk(node.left), walk(node.right)
            if isinstance(node.op, ast.Add):
                return left + right
            return left - right if isinstance(node.op, ast.Sub) else left * right
        raise ValueError(f"formula {formula!r} may only use integers, names, + - * and ()")

    return walk(ast.parse(formula, mode="eval"))


@dataclass(frozen=True)
class Case:
    """One benchmark case: an operator at one shape, dtype and mode.

    Attributes:
        op: Operator name (a key of :data:`OPS`).
        mode: ``"fwd"`` or ``"fwdbwd"`` (forward plus backward through autograd).
        shape: The problem shape (``(n,)``, ``(M, N)`` or ``(M, N, K)``).
        dtype: ``"float16"``, ``"bfloat16"`` or ``"float32"``.
        timer: ``"events"`` (CUDA events around each call) or ``"cuda_graph"``
            (CUDA-graph replay, for latency-bound shapes; the L2 stays warm).
        impls: Implementations to check and time, ``"ours"`` first.
    """

    op: str
    mode: str
    shape: tuple[int, ...]
    dtype: str
    timer: str
    impls: tuple[str, ...]

    def __post_init__(self) -> None:
        spec = OPS.get(self.op)
        if spec is None:
            raise ValueError(f"op must be one of {sorted(OPS)}, got {self.op!r}")
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if len(self.shape) != len(spec.dims) or any(d < 1 for d in self.shape):
            raise ValueError(f"shape of {self.op} must be {len(spec.dims)} positive sizes")
        if self.dtype not in DTYPE_BYTES:
            raise ValueError(f"dtype must be one of {sorted(DTYPE_BYTES)}, got {self.dtype!r}")
        if self.timer not in TIMERS:
            raise ValueError(f"timer must be one of {TIMERS}, got {self.timer!r}")
        if not self.impls or self.impls[0] != "ours" or not set(self.impls) <= set(IMPLS):
            raise ValueError(f"impls must start with 'ours' and come from {IMPLS}: {self.impls}")

    @property
    def id(self) -> str:
        """``"<op>/<mode>/<shape joined by x>/<dtype>"``."""
        return f"{self.op}/{self.mode}/{shape_str(self.shape)}/{self.dtype}"

    @property
    def spec(self) -> OpSpec:
        """The operator's :class:`OpSpec`."""
        return OPS[self.op]

    def _values(self) -> dict[str, int]:
        return {**dict(zip(self.spec.dims, self.shape, strict=True)), "s": self.elem_bytes}

    @property
    def elem_bytes(self) -> int:
        """Bytes per element of the case's dtype."""
        return DTYPE_BYTES[self.dtype]

    @property
    def bytes_formula(self) -> str:
        """The byte formula with its values, e.g. ``"2*M*N*s with M=8, N=4, s=2"``."""
        formula = self.spec.bytes_fwd if self.mode == "fwd" else self.spec.bytes_fwdbwd
        return _with_values(formula, self._values())

    @property
    def bytes(self) -> int:
        """Compulsory bytes moved through device memory by one call."""
        formula = self.spec.bytes_fwd if self.mode == "fwd" else self.spec.bytes_fwdbwd
        return eval_formula(formula, self._values())

    @property
    def flops_formula(self) -> str | None:
        """The FLOP formula with its values, or ``None`` for a memory-bound operator."""
        formula = self.spec.flops_fwd if self.mode == "fwd" else self.spec.flops_fwdbwd
        return None if formula is None else _with_values(formula, self._values())

    @property
    def flops(self) -> int | None:
        """Floating-point operations of one call, or ``None``."""
        formula = self.spec.flops_fwd if self.mode == "fwd" else self.spec.flops_fwdbwd
        return None if formula is None else eval_formula(formula, self._values())


def shape_str(shape: tuple[int, ...] | list[int]) -> str:
    """``(8192, 8192)`` -> ``"8192x8192"``."""
    return "x".join(str(int(d)) for d in shape)


def _with_values(formula: str, values: dict[str, int]) -> str:
    used = [
        k
        for k in values
        if k in {n.id for n in ast.walk(ast.parse(formula)) if isinstance(n, ast.Name)}
    ]
    return f"{formula} with " + ", ".join(f"{k}={values[k]}" for k in used)


@dataclass(frozen=True)
class Suite:
    """A named list of cases and how many samples to take of each.

    Attributes:
        name: Suite name (the results file is ``results/<gpu>/<name>.json``).
        description: One line for ``kp bench --list``.
        cases: The cases, in the order they run.
        visits: Times each case's implementations are visited, in a seeded
            random order per visit, so that drift hits all alike.
        samples: Timed calls per implementation per visit.
        graph_calls: Calls captured in one CUDA graph (``cuda_graph`` timer);
            one sample is one replay divided by this.
        notes: What the suite leaves out on purpose, saved with the result.
    """

    name: str
    description: str
    cases: tuple[Case, ...]
    visits: int = 5
    samples: int = 10
    graph_calls: int = 20
    notes: str = ""

    def __post_init__(self) -> None:
        ids = [c.id for c in self.cases]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"suite {self.name!r} repeats cases {dupes}")


#: Each operator's main dtype: the one the costly baselines run at (below).
MAIN_DTYPE = {
    "add": "float16",
    "row_sum": "float16",
    "softmax": "float16",
    "rms_norm": "bfloat16",
    "residual_rms_norm": "bfloat16",
    "matmul": "bfloat16",
}
#: Operators Liger-Kernel implements.
LIGER_OPS = ("softmax", "rms_norm", "residual_rms_norm")

# Large row shapes hold at least 4x the H200's 60 MiB L2 in float16:
# 8192x8192 (128 MiB), 32768x8192 (512 MiB), 32768x1024 (64 MiB per tensor,
# 5 tensors in fwdbwd), 16384x4104 (a width just past a power of two).
_ROW_LARGE = [(8192, 8192), (32768, 8192), (32768, 1024), (16384, 4104)]
_ROW_WIDE = [(64, 131072)]  # few wide rows, 16 MiB per tensor in float16
#: Latency-bound shapes, timed by CUDA-graph replay: a few microseconds of GPU
#: work each, which an event timer would bury under the host's launch cost.
#: 4x32769 is four rows just past a power of two (256 KiB in float16).
_ROW_SMALL = [(512, 4096), (32, 127), (4, 32769)]
#: Wide rows at scale: 1024x131072 is 256 MiB per tensor in float16, over 4x the
#: L2, where the wide-rows bandwidth target applies.
_SOFTMAX_WIDE_LARGE = [(1024, 131072)]
_GEMM = [(4096, 4096, 4096), (8192, 8192, 8192), (8192, 8192, 512), (65536, 1024, 1024)]
_HALF = ("float16", "bfloat16")

#: Shapes where torch.compile runs (at the main dtype). It compiles one graph
#: per (shape, dtype, mode), a few seconds each, so it skips 32768x8192,
#: 32768x1024 and 16384x4104 (large, like 8192x8192), 32x127 (host-bound) and
#: GEMM (inductor calls the same cuBLAS as torch.mm).
COMPILE_SHAPES = {
    "add": [(1 << 27,)],
    "row_sum": [(16384, 8192), (64, 131072)],
    **{op: [(8192, 8192), (64, 131072), (4, 32769), (512, 4096)] for op in LIGER_OPS},
}


def grid(op, shapes, dtypes, *, timer="events", modes=MODES) -> list[Case]:
    """Cases for every (mode, shape, dtype) of one operator.

    Every case runs ``ours`` and the cheap baseline (``torch``; ``cublas`` for
    GEMM). The baselines that cost seconds of compilation per case run at the
    operator's :data:`MAIN_DTYPE` only: Liger-Kernel (where it has the
    operator) and ``torch.compile`` (at :data:`COMPILE_SHAPES`).

    Args:
        op: Operator name.
        shapes: Shapes to run.
        dtypes: Dtype names to run.
        timer: Timer of every case.
        modes: Modes to run.

    Returns:
        The cases, mode-major.
    """
    base = ("ours", "cublas") if op == "matmul" else ("ours", "torch")
    cases = []
    for mode, shape, dtype in itertools.product(modes, shapes, dtypes):
        impls = base
        if dtype == MAIN_DTYPE[op]:
            impls += ("liger",) if op in LIGER_OPS else ()
            impls += ("compile",) if tuple(shape) in COMPILE_SHAPES.get(op, ()) else ()
        cases.append(Case(op, mode, tuple(shape), dtype, timer, impls))
    return cases


def _row_op_cases(op: str) -> list[Case]:
    return [
        *grid(op, _ROW_LARGE + _ROW_WIDE, _HALF),
        *grid(op, [(8192, 8192)], ("float32",)),
        *grid(op, _ROW_SMALL, _HALF, timer="cuda_graph"),
    ]


_DEFAULT_CASES = (
    *grid("add", [(1 << 27,)], (*_HALF, "float32")),  # 256 MiB per float16 operand
    *grid("add", [(65536,)], _HALF, timer="cuda_graph"),
    *grid("row_sum", [(16384, 8192), (64, 131072)], _HALF),  # 256 MiB in float16
    *grid("row_sum", [(16384, 8192)], ("float32",)),
    *grid("row_sum", [(512, 4096), (4, 32769)], _HALF, timer="cuda_graph"),
    *_row_op_cases("softmax"),
    *grid("softmax", _SOFTMAX_WIDE_LARGE, _HALF),
    *_row_op_cases("rms_norm"),
    *_row_op_cases("residual_rms_norm"),
    *grid("matmul", _GEMM, _HALF, modes=("fwd",)),
    *grid("matmul", _GEMM, ("bfloat16",), modes=("fwdbwd",)),
    *grid("matmul", [(4096, 4096, 4096)], ("float32",), modes=("fwd",)),
)

# ---------------------------------------------------------------------------
# The models suite: shapes of popular open models, beside the tuned-on cells.
# Each width is taken from the model's published configuration (its
# config.json on the Hugging Face Hub: ``vocab_size``, ``hidden_size``,
# ``intermediate_size``, head counts).
# ---------------------------------------------------------------------------

#: Vocabulary widths: the rows of the logits a softmax (or a row sum) reduces.
VOCAB_WIDTHS = {
    30522: "BERT-base vocab_size (a multiple of 2, not of 8)",
    32000: "Llama 2 and Mistral-7B-v0.1 vocab_size",
    50257: "GPT-2 vocab_size (odd)",
    51865: "Whisper vocab_size (odd)",
    128256: "Llama 3 vocab_size",
    151936: "Qwen2.5 vocab_size",
}
#: The aligned neighbour of each unaligned vocabulary width (rounded down to a
#: multiple of 8): the row-op bar compares an unaligned width's bandwidth with it.
ALIGNED_NEIGHBOURS = {n: n // 8 * 8 for n in VOCAB_WIDTHS if n % 8}
#: Hidden sizes: the rows an RMSNorm (with or without the residual add) normalises.
HIDDEN_WIDTHS = {
    896: "Qwen2.5-0.5B hidden_size",
    2048: "Llama-3.2-1B hidden_size",
    3584: "Qwen2.5-7B hidden_size",
    4096: "Llama-3-8B and Mistral-7B hidden_size",
    5120: "Qwen2.5-14B hidden_size",
    8192: "Llama-3-70B hidden_size",
}
#: Rows: tokens in a batch, from one (decoding) to a long prefill; against 132
#: SMs these are a row a few SMs, a few rows an SM, and many waves of rows.
MODEL_ROWS = (1, 32, 512, 4096, 16384)
#: Projection layers of Llama-3-8B (hidden 4096, 32 query and 8 key-value heads
#: of 128, intermediate 14336; Mistral-7B has the same), as ``(N, K)`` of
#: ``x (M x K) @ W (K x N)``: attention output, fused QKV, MLP up/gate, MLP down.
GEMM_LAYERS = {
    (4096, 4096): "attention output projection",
    (6144, 4096): "fused QKV projection (4096 + 2 x 1024)",
    (14336, 4096): "MLP up and gate projections",
    (4096, 14336): "MLP down projection",
}
#: Tokens in a batch for the projections: M from a decode step to a prefill,
#: against tiles of 64 to 256 rows (384 is three 128-row tiles, 768 four
#: 192-row ones or six 128-row ones).
GEMM_ROWS = (16, 64, 128, 256, 384, 768, 1024, 4096, 16384)
#: A row case this small (bytes of one tensor) is timed by CUDA-graph replay:
#: microseconds of GPU work, which an event timer would bury under host cost.
GRAPH_MAX_BYTES = 4 << 20


def _timed_grid(op, shapes, dtypes, *, modes=MODES, compile_shapes=()) -> list[Case]:
    """:func:`grid`, each shape with its timer (:data:`GRAPH_MAX_BYTES`), torch.compile
    at ``compile_shapes`` (main dtype) on top of :data:`COMPILE_SHAPES`."""
    cases = []
    for shape in shapes:
        timer = "cuda_graph" if shape[0] * shape[1] * 2 <= GRAPH_MAX_BYTES else "events"
        for case in grid(op, [shape], dtypes, timer=timer, modes=modes):
            impls = case.impls
            if shape in compile_shapes and case.dtype == MAIN_DTYPE[op]:
                impls += ("compile",)
            cases.append(Case(case.op, case.mode, case.shape, case.dtype, case.timer, impls))
    return cases


_LOGITS = [(4096, n) for n in sorted({*VOCAB_WIDTHS, *ALIGNED_NEIGHBOURS.values()})]
_LOGIT_ROWS = [(m, 50257) for m in MODEL_ROWS if m != 4096] + [(m, 128256) for m in (1, 32, 512)]
_PAIRS = [(4096, n) for n in sorted({*ALIGNED_NEIGHBOURS, *ALIGNED_NEIGHBOURS.values()})]
_COMPILED_PAIR = [(4096, 50257), (4096, 50256)]
_HIDDEN = [(m, n) for n in HIDDEN_WIDTHS for m in (32, 4096, 16384)] + [(1, 4096), (1, 8192)]

_MODELS_CASES = (
    *_timed_grid(
        "softmax", _LOGITS, ("float16",), compile_shapes=_COMPILED_PAIR + [(4096, 128256)]
    ),
    *_timed_grid("softmax", _LOGIT_ROWS, ("float16",)),
    *_timed_grid("softmax", _COMPILED_PAIR, ("bfloat16",)),
    *_timed_grid("row_sum", _LOGITS, ("float16",), modes=("fwd",), compile_shapes=_COMPILED_PAIR),
    *_timed_grid("row_sum", _COMPILED_PAIR, ("float16",), modes=("fwdbwd",)),
    *_timed_grid("row_sum", [(m, 50257) for m in (1, 32, 512)], ("float16",), modes=("fwd",)),
    *(
        case
        for op in ("rms_norm", "residual_rms_norm")
        for case in _timed_grid(
            op, _HIDDEN + _PAIRS, ("bfloat16",), compile_shapes=_COMPILED_PAIR + [(4096, 4096)]
        )
    ),
    *grid(
        "matmul", [(m, n, k) for (n, k) in GEMM_LAYERS for m in GEMM_ROWS], _HALF, modes=("fwd",)
    ),
    *grid(
        "matmul",
        [(256, 4096, 4096), (4096, 4096, 4096), (256, 14336, 4096)],
        ("bfloat16",),
        modes=("fwdbwd",),
    ),
)

SUITES: dict[str, Suite] = {
    s.name: s
    for s in (
        Suite(
            "default",
            "every op, fwd and fwdbwd, float16/bfloat16 (float32 for a subset), "
            "L2-busting, wide, few-row and latency-bound shapes, GEMM against cuBLAS",
            _DEFAULT_CASES,
            notes=(
                "To stay inside 8 minutes on one H200, the baselines that compile per case run "
                "at one dtype per op (float16 for softmax, add and row_sum; bfloat16 for the "
                "norms): Liger-Kernel (softmax and the norms) at every shape, torch.compile "
                "at 8192x8192, 64x131072, 4x32769 and 512x4096 (row ops), the "
                "large add and row sum; GEMM fwdbwd runs in bfloat16 only, float32 at one "
                "shape per op, fwd only for GEMM. GEMM has no torch or compile baseline: "
                "torch.mm is the cublas baseline."
            ),
        ),
        Suite(
            "models",
            "shapes of popular open models the default suite does not hold: vocabulary "
            "widths (odd ones and their aligned neighbours), hidden sizes, 1 to 16384 rows, "
            "Llama-3-8B projections for M from 16 to 16384",
            _MODELS_CASES,
            notes=(
                "Widths from the models' published configurations (bench/suites.py names "
                "each): softmax and row sum over vocabulary widths at 4096 rows and at 1 to "
                "16384 rows (50257, 128256); RMSNorm and the residual RMSNorm over hidden "
                "sizes at 32, 4096 and 16384 rows (and one row at 4096 and 8192), and over "
                "the unaligned vocabulary widths and their aligned neighbours at 4096 rows "
                "(the row-alignment class; not a "
                "model's norm width); GEMM at Llama-3-8B's four projections for M from 16 to "
                "16384, forward in float16 and bfloat16, forward+backward in bfloat16 at "
                "three shapes. Liger-Kernel runs at the main dtype wherever it can "
                "(rows up to 65536 columns); torch.compile at the 50257/50256 pair, softmax "
                "128256 and RMSNorm 4096x4096. Cases of up to 4 MiB a tensor are timed by "
                "CUDA-graph replay (warm L2)."
            ),
        ),
        Suite(
            "smoke",
            "one small case per timer (events with compile, CUDA graph with fwdbwd) and a GEMM",
            (
                Case(
                    "softmax",
                    "fwd",
                    (1024, 4096),
                    "float16",
                    "events",
                    ("ours", "torch", "compile", "liger"),
                ),
                Case(
                    "rms_norm",
                    "fwdbwd",
                    (32, 127),
                    "bfloat16",
                    "cuda_graph",
                    ("ours", "torch", "liger"),
                ),
                Case("matmul", "fwd", (512, 512, 512), "float16", "events", ("ours", "cublas")),
            ),
            visits=2,
            samples=3,
            graph_calls=5,
        ),
    )
}

FILTER_KEYS = ("op", "mode", "shape", "dtype", "impl", "timer")


def parse_filter(text: str | None) -> dict[str, set[str]]:
    """Parse ``"op=softmax,dtype=float16"`` into ``{"op": {"softmax"}, ...}``.

    A key given twice matches either value (``op=softmax,op=add``); different
    keys must all match.

    Raises:
        ValueError: a term is not ``key=value`` or the key is unknown.
    """
    terms: dict[str, set[str]] = {}
    if not text:
        return terms
    for term in text.split(","):
        key, sep, value = term.strip().partition("=")
        if not sep or not key or not value:
            raise ValueError(f"filter term {term.strip()!r} is not key=value")
        if key not in FILTER_KEYS:
            raise ValueError(f"filter key {key!r} is not one of {', '.join(FILTER_KEYS)}")
        terms.setdefault(key, set()).add(value)
    return terms


def select(cases: tuple[Case, ...] | list[Case], terms: dict[str, set[str]]) -> list[Case]:
    """The cases that match a parsed filter.

    An ``impl`` term keeps the cases that run one of the named implementations
    and drops their other ones; ``ours`` always stays (every ratio is against
    it), so ``impl=liger`` runs ours and Liger-Kernel where Liger is listed.

    Raises:
        ValueError: a filter value matches no case (the message lists the known values).
    """
    fields = {
        "op": lambda c: c.op,
        "mode": lambda c: c.mode,
        "shape": lambda c: shape_str(c.shape),
        "dtype": lambda c: c.dtype,
        "timer": lambda c: c.timer,
    }
    for key, values in terms.items():
        known = (
            {i for c in cases for i in c.impls}
            if key == "impl"
            else {fields[key](c) for c in cases}
        )
        unknown = sorted(values - known)
        if unknown:
            raise ValueError(
                f"filter {key}={unknown[0]} matches no case (known: {', '.join(sorted(known))})"
            )
    out = []
    for case in cases:
        if not all(fields[k](case) in v for k, v in terms.items() if k != "impl"):
            continue
        impls = case.impls
        if "impl" in terms:
            impls = tuple(i for i in case.impls if i == "ours" or i in terms["impl"])
            if "ours" not in terms["impl"] and len(impls) == 1:
                continue
        out.append(Case(case.op, case.mode, case.shape, case.dtype, case.timer, impls))
    if not out:
        raise ValueError("the filter's terms together match no case")
    return out
