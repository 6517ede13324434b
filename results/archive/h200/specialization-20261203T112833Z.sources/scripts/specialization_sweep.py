"""Specialization vs recompilation: which kernel arguments should be ``tl.constexpr``?

Re-run on the H200 (2 to 3 minutes; writes ``results/h200/specialization.json``
and ``.log``)::

    python scripts/specialization_sweep.py --out results/h200

CPU plumbing check (Triton interpreter, tiny sizes, seconds; not a measurement)::

    TRITON_INTERPRET=1 python scripts/specialization_sweep.py --dry-run --out /tmp/spec

The same softmax, RMSNorm-forward and GEMM kernels exist in four
specialization policies, one file each under ``case_studies/specialization/``:
``constexpr`` (every size a compile-time constant), ``runtime`` (every size a
runtime argument excluded from Triton's integer specialisation),
``default-spec`` (row counts unspecialised, widths and strides left to
Triton's default specialisation) and ``vec-hint`` (every size unspecialised,
plus a ``VEC`` constant that restores 16-byte loads). Two experiments, each
interleaving the policies:

* **A request stream.** A seeded stream of requests, each ``batch x seq``
  rows at one hidden size, goes through every kernel of every policy, as an
  inference server would send them, with Triton's on-disk cache empty at the
  start. Per kernel and policy the result keeps the time of every request as
  the GPU stream saw it (CUDA events around the launch: a request that
  compiles includes its compile) and, as metrics, the number of compiles and
  their total time (Triton's compilation listener), and the number of compiles
  Triton's own cache key predicts for the stream (:func:`predicted_compiles`,
  computable without a GPU). A policy whose compiles for one kernel pass
  ``--compile-budget-s`` stops serving that kernel; the metric ``requests``
  says how far it got.
* **Kernel time.** Each kernel at widths that fill their power-of-two block
  and widths just past one (4096 and 4104, 8192 and 8200), with enough rows to
  fill the GPU many times over: fresh random inputs, outputs poisoned with NaN
  and checked against the float64 reference, cold L2, CUDA events, the GPU
  warmed up, the policies visited in a seeded random order per visit, median
  of all samples. Registers per thread and spilled bytes come from the
  compiled kernel, and the count of 16-byte and narrower global loads from its
  PTX.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import random
import re
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from sweep_support import SUPPORT_SOURCES, Counts, Run, start_run

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = "scripts/specialization_sweep.py"
POLICY_DIR = "case_studies/specialization"
#: Policy name -> its kernel source (repo-relative). Order is the display order.
POLICIES = {
    "constexpr": f"{POLICY_DIR}/constexpr_all.py",
    "runtime": f"{POLICY_DIR}/runtime_all.py",
    "default-spec": f"{POLICY_DIR}/default_spec.py",
    "vec-hint": f"{POLICY_DIR}/vec_hint.py",
}
KERNELS = ("softmax", "rms_norm", "matmul")
#: Other files the numbers depend on: this script and the launch arithmetic
#: (``sweep_support`` adds the timers).
HARNESS = (SCRIPT, "src/kernel_portfolio/plans.py")
#: Hidden sizes of the request stream: powers of two, a multiple of 16 that is
#: not one (5120), and a width that is not a multiple of 16 (4104).
HIDDENS = (4096, 4104, 5120, 8192)
#: Sequence lengths of the stream: decode steps (1) and prefill chunks.
SEQS = (1, 8, 32, 128)
MAX_BATCH = 64
#: Widths of the kernel-time experiment: each power of two and one just past it.
TIMED_WIDTHS = (4096, 4104, 8192, 8200)
#: Rows of the row kernels in the kernel-time experiment (many rows per SM).
TIMED_ROWS = 16384
#: M of the GEMM in the kernel-time experiment (N = K = the width).
TIMED_GEMM_M = 4096
#: One fixed GEMM tile and launch, so the policies differ only in specialization.
GEMM_CONFIG = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}
GEMM_LAUNCH = {"num_warps": 8, "num_stages": 3}
EPS = 1e-6
DTYPE = "float16"
#: Rows (of C, for GEMM) compared with the float64 reference.
CHECK_ROWS = 256
#: Relative-error bound against float64 for float16 outputs.
REL_TOL = 2e-3


@dataclass(frozen=True)
class Scale:
    """The sizes of one run: the H200 run, or the interpreter's dry run."""

    requests: int
    hiddens: tuple[int, ...]
    seqs: tuple[int, ...]
    max_batch: int
    widths: tuple[int, ...]
    rows: int
    gemm_m: int
    gemm_config: dict
    gemm_launch: dict
    visits: int
    samples: int


FULL = Scale(
    200, HIDDENS, SEQS, MAX_BATCH, TIMED_WIDTHS, TIMED_ROWS, TIMED_GEMM_M, GEMM_CONFIG,
    GEMM_LAUNCH, visits=10, samples=5,
)  # fmt: skip
#: Same shape of experiment, sizes the interpreter runs in seconds: 64/72/80/128
#: stand for 4096/4104/5120/8192 (a power of two, not a multiple of 16, ...).
DRY = Scale(
    6, (64, 72, 80, 128), (1, 2), 3, (64, 72), 8, 8,
    {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 2}, {}, visits=2, samples=1,
)  # fmt: skip


@dataclass(frozen=True)
class Request:
    """One request of the stream: ``rows = batch * seq`` rows of ``hidden`` columns."""

    rows: int
    hidden: int


def request_stream(
    n: int, seed: int, *, hiddens: Sequence[int], seqs: Sequence[int], max_batch: int
) -> list[Request]:
    """A seeded stream of ``n`` requests: batch uniform in ``1..max_batch``, seq and hidden uniform.

    Raises:
        ValueError: ``n`` is negative, a choice list is empty or ``max_batch < 1``.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if not hiddens or not seqs or max_batch < 1:
        raise ValueError("hiddens and seqs must be non-empty and max_batch >= 1")
    rng = random.Random(seed)
    return [
        Request(rng.randint(1, max_batch) * rng.choice(seqs), rng.choice(hiddens)) for _ in range(n)
    ]


def load_policy(name: str, root: Path = ROOT) -> ModuleType:
    """Import one policy's kernel file by path (``case_studies`` is not a package).

    Raises:
        ValueError: ``name`` is not one of :data:`POLICIES`.
    """
    if name not in POLICIES:
        raise ValueError(f"policy must be one of {tuple(POLICIES)}, got {name!r}")
    module_name = "kp_specialization_" + name.replace("-", "_")
    spec = importlib.util.spec_from_file_location(module_name, root / POLICIES[name])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class Launch:
    """One kernel launch: which kernel, its grid, its arguments by name, its launch options.

    ``args`` may name parameters that a policy's kernel does not have (``VEC``);
    :meth:`bound` keeps the ones it does.
    """

    kernel: str
    grid: tuple[int, ...]
    args: dict
    options: dict

    def bound(self, module: ModuleType) -> tuple[object, dict]:
        """``(kernel function, keyword arguments)`` for ``module``'s version of the kernel."""
        fn = getattr(module, f"{self.kernel}_kernel")
        names = set(fn.arg_names)
        return fn, {k: v for k, v in self.args.items() if k in names} | self.options

    def run(self, module: ModuleType):
        """Launch; returns Triton's compiled kernel (``None`` under the interpreter)."""
        fn, kwargs = self.bound(module)
        return fn[self.grid](**kwargs)


def make_launch(kernel: str, tensors: dict, *, sm_count: int, scale: Scale = FULL) -> Launch:
    """The launch of ``kernel`` on ``tensors`` (``x``, ``y``, ``w``; or ``a``, ``b``, ``c``).

    Row kernels use the project's launch arithmetic (:mod:`kernel_portfolio.plans`):
    the block plan's ``BLOCK`` and warps, its persistent grid, and ``VEC``.

    Raises:
        ValueError: unknown ``kernel``.
    """
    import triton

    from kernel_portfolio import plans

    if kernel in ("softmax", "rms_norm"):
        x, y = tensors["x"], tensors["y"]
        n_rows, n_cols = x.shape
        elem = x.element_size()
        plan = plans.choose(n_rows, n_cols, elem_bytes=elem, sm_count=sm_count, plan="block")
        args = {"x_ptr": x, "y_ptr": y, "n_rows": n_rows, "n_cols": n_cols}
        args |= {"stride_xm": x.stride(0), "stride_ym": y.stride(0), "BLOCK": plan.block}
        args["VEC"] = plans.vec_width(elem, n_cols, (x.stride(0), y.stride(0)))
        if kernel == "rms_norm":
            args |= {"w_ptr": tensors["w"], "eps": EPS}
        grid = (plans.persistent_programs(n_rows, plan, sm_count),)
        return Launch(kernel, grid, args, {"num_warps": plan.num_warps})
    if kernel != "matmul":
        raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
    a, b, c = tensors["a"], tensors["b"], tensors["c"]
    (m, k), n = a.shape, b.shape[1]
    cfg = scale.gemm_config
    strides = {"stride_am": a.stride(0), "stride_bk": b.stride(0), "stride_cm": c.stride(0)}
    args = {"a_ptr": a, "b_ptr": b, "c_ptr": c, "M": m, "N": n, "K": k, **strides, **cfg}
    args["VEC"] = plans.vec_width(a.element_size(), n, (k, *strides.values()))
    grid = (triton.cdiv(m, cfg["BLOCK_M"]) * triton.cdiv(n, cfg["BLOCK_N"]),)
    return Launch(kernel, grid, args, dict(scale.gemm_launch))


# ------------------------------------------------------------ Triton's cache key
@functools.cache
def _backend():
    """Triton's CUDA backend for an sm_90 target: cache keys need no GPU."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend

    return make_backend(GPUTarget("cuda", 90, 32))


def jit_function(fn):
    """The ``JITFunction`` behind ``fn`` (rebuilt from its Python function when interpreted)."""
    from triton.runtime.jit import JITFunction

    if isinstance(fn, JITFunction):
        return fn
    return JITFunction(fn.fn, **fn.kwargs)


def cache_key(module: ModuleType, launch: Launch) -> str:
    """The key under which Triton 3.6 caches the binary of ``launch`` on an sm_90 GPU.

    Triton's own binder (``create_function_from_signature``), which turns a
    launch's arguments into a specialisation, run without a GPU: launches with
    the same key share one compile. The sweep checks this prediction against
    the compiles it counts on the GPU.
    """
    from triton.runtime.jit import compute_cache_key

    fn, kwargs = launch.bound(module)
    _, specialization, options = _binder(fn)(**kwargs)
    return str(compute_cache_key({}, specialization, options))


@functools.cache
def _binder(fn):
    """Triton's argument binder of a kernel (built once per kernel: it is generated code)."""
    from triton.runtime.jit import create_function_from_signature

    jit = jit_function(fn)
    return create_function_from_signature(jit.signature, jit.params, _backend())


def predicted_compiles(module: ModuleType, launches: Sequence[Launch]) -> int:
    """Distinct cache keys among ``launches``: the compiles Triton does for them, cache empty."""
    return len({cache_key(module, launch) for launch in launches})


def specialisation_table(fn) -> dict[str, str]:
    """How a kernel declares each non-pointer parameter.

    Returns:
        ``{name: "constexpr" | "do_not_specialize" | "default"}``; ``default`` is
        Triton's integer specialisation (a value of 1 becomes a constant,
        divisibility by 16 an alignment hint; floats are never specialised).
    """
    table = {}
    for param in jit_function(fn).params:
        if param.name.endswith("_ptr"):
            continue
        if param.is_constexpr:
            table[param.name] = "constexpr"
        else:
            table[param.name] = "do_not_specialize" if param.do_not_specialize else "default"
    return table


# ------------------------------------------------------------------ PTX loads
_PRED = r"^\s*(?:@!?%p\d+\s+)?"
#: ``ld.global[.modifiers][.v2|.v4].<type><bits>``; modifiers such as ``.L1::evict_last``.
_LD = re.compile(_PRED + r"ld\.global(?:\.[\w:]+?)*?(?:\.(v2|v4))?\.[bfsu](8|16|32|64)\b", re.M)
#: ``cp.async.<cache>.shared.global [dst], [src], <bytes>[, <src bytes>];``
_CP_ASYNC = re.compile(
    _PRED + r"cp\.async\.\w+\.shared\.global[^;]*?,\s*(0x[0-9a-fA-F]+|\d+)\s*[,;]", re.M
)


def ptx_load_widths(ptx: str) -> dict[int, int]:
    """Global loads in PTX by width in bytes: ``ld.global`` (vector or not) and ``cp.async``."""
    widths: dict[int, int] = {}
    for match in _LD.finditer(ptx):
        nbytes = {"v2": 2, "v4": 4}.get(match[1], 1) * int(match[2]) // 8
        widths[nbytes] = widths.get(nbytes, 0) + 1
    for match in _CP_ASYNC.finditer(ptx):
        nbytes = int(match[1], 0)
        widths[nbytes] = widths.get(nbytes, 0) + 1
    return widths


def kernel_metrics(compiled) -> dict[str, dict]:
    """Registers, spills and global-load widths of a compiled kernel, as result metrics."""
    widths = ptx_load_widths(compiled.asm["ptx"])
    return {
        "registers": {"value": int(compiled.n_regs), "unit": "registers/thread"},
        "spill_bytes": {"value": int(compiled.n_spills), "unit": "bytes/thread"},
        "loads_16b": {"value": widths.get(16, 0), "unit": "instructions (PTX)"},
        "loads_narrow": {
            "value": sum(n for w, n in widths.items() if w < 16),
            "unit": "instructions (PTX)",
        },
    }


# ---------------------------------------------------------------- compiles
@dataclass
class CompileLog:
    """Triton's compilation listener: one ``(cache hit, milliseconds)`` entry per compile call."""

    events: list[tuple[bool, float]] = field(default_factory=list)

    def __call__(self, *, src, metadata, metadata_group, times, cache_hit) -> None:
        self.events.append((bool(cache_hit), times.total / 1e3))


# ----------------------------------------------------------------- the stream
@dataclass
class StreamTally:
    """What one policy's kernel did over the stream."""

    samples: list[float] = field(default_factory=list)
    compiles: int = 0
    compile_ms: float = 0.0
    launches: list[Launch] = field(default_factory=list)
    stopped: bool = False
    rel_error: float = 0.0
    failure: str | None = None


@dataclass
class StreamBuffers:
    """Tensors every request of a stream views: inputs, outputs and one weight per hidden size.

    Attributes:
        x: Flat input buffer (fresh random values, or uninitialised for key prediction).
        y: Flat output buffer, shared by the kernels (each launch overwrites it).
        weights: GEMM ``B`` (``hidden x hidden``) per hidden size.
        norm_w: RMSNorm weight per hidden size.
        weights64: ``weights`` in float64 on the CPU, for the reference (empty unless checked).
    """

    x: object
    y: object
    weights: dict
    norm_w: dict
    weights64: dict

    @classmethod
    def allocate(cls, stream, hiddens, device: str, seed: int | None) -> StreamBuffers:
        """Buffers for ``stream``: random with ``seed``, or uninitialised when ``seed`` is None."""
        import torch

        n = max(r.rows for r in stream) * max(hiddens)
        if seed is None:
            make = lambda *shape: torch.empty(*shape, device=device, dtype=torch.float16)
        else:
            gen = torch.Generator(device=device).manual_seed(seed)
            make = lambda *shape: torch.randn(
                *shape, generator=gen, device=device, dtype=torch.float16
            )
        weights = {h: make(h, h) for h in hiddens}
        weights64 = {} if seed is None else {h: w.double().cpu() for h, w in weights.items()}
        return cls(make(n), make(n), weights, {h: make(h) for h in hiddens}, weights64)

    def tensors(self, req: Request) -> dict[str, dict]:
        """Each kernel's tensors for one request (contiguous views of the buffers)."""
        n = req.rows * req.hidden
        x = self.x[:n].view(req.rows, req.hidden)
        y = self.y[:n].view(req.rows, req.hidden)
        return {
            "softmax": {"x": x, "y": y},
            "rms_norm": {"x": x, "y": y, "w": self.norm_w[req.hidden]},
            "matmul": {"a": x, "b": self.weights[req.hidden], "c": y},
        }


def predict_stream(scale: Scale = FULL, seed: int = 0, sm_count: int = 132) -> dict:
    """Compiles each policy's kernels would need for the whole stream: ``{kernel: {policy: n}}``.

    Needs no GPU: the launches are built on uninitialised CPU tensors and keyed
    by :func:`cache_key`.
    """
    stream = request_stream(
        scale.requests, seed, hiddens=scale.hiddens, seqs=scale.seqs, max_batch=scale.max_batch
    )
    buffers = StreamBuffers.allocate(stream, scale.hiddens, "cpu", None)
    launches = {k: [] for k in KERNELS}
    for req in stream:
        tensors = buffers.tensors(req)
        for kernel in KERNELS:
            launches[kernel].append(
                make_launch(kernel, tensors[kernel], sm_count=sm_count, scale=scale)
            )
    modules = {name: load_policy(name) for name in POLICIES}
    return {k: {p: predicted_compiles(m, launches[k]) for p, m in modules.items()} for k in KERNELS}


def matching_policies(src_kernel, kernel: str, modules: dict[str, ModuleType]) -> list[str]:
    """The policies whose ``kernel`` declares its parameters as ``src_kernel`` does.

    Compared: every parameter the two kernels share, and every compile-time
    constant of a policy that only one of the two kernels has (``VEC``). The
    source kernel's own feature flags (``HAS_WEIGHT``) are not sizes and are left
    out, and so are runtime sizes only one kernel takes (the row count of a
    kernel launched one program per row).
    """
    src = specialisation_table(src_kernel)
    tables = {p: specialisation_table(getattr(m, f"{kernel}_kernel")) for p, m in modules.items()}
    known = set().union(*tables.values())
    out = []
    for policy, table in tables.items():
        only = (set(table) ^ set(src)) & known
        names = (set(table) & set(src)) | {
            n for n in only if "constexpr" in (table.get(n), src.get(n))
        }
        if all(table.get(n) == src.get(n) for n in names):
            out.append(policy)
    return out


def run_stream(
    run: Run, modules: dict[str, ModuleType], scale: Scale, seed: int, budget_s: float
) -> tuple[list[Request], dict[str, dict[str, StreamTally]]]:
    """Send the request stream through every kernel of every policy (shuffled per request)."""
    import triton

    stream = request_stream(
        scale.requests, seed, hiddens=scale.hiddens, seqs=scale.seqs, max_batch=scale.max_batch
    )
    buffers = StreamBuffers.allocate(stream, scale.hiddens, run.device, seed)
    first = slice(0, 1)  # each request is checked on its first row
    listener = CompileLog()
    triton.knobs.compilation.listener = listener
    tallies = {k: {p: StreamTally() for p in modules} for k in KERNELS}
    order = random.Random(seed)
    for i, req in enumerate(stream, 1):
        tensors = buffers.tensors(req)
        y = tensors["softmax"]["y"]
        refs = {
            k: reference_rows(k, tensors[k], first, buffers.weights64[req.hidden]) for k in KERNELS
        }
        policies = list(modules)
        order.shuffle(policies)
        for policy in policies:
            for kernel in KERNELS:
                tally = tallies[kernel][policy]
                if tally.stopped:
                    continue
                launch = make_launch(kernel, tensors[kernel], sm_count=run.sm_count, scale=scale)
                seen = len(listener.events)
                y.fill_(float("nan"))
                run.sync()
                call = lambda launch=launch, m=modules[policy]: launch.run(m)
                tally.samples += run.time(call, 1, cold=False)
                new = [ms for hit, ms in listener.events[seen:] if not hit]
                tally.compiles += len(new)
                tally.compile_ms += sum(new)
                tally.launches.append(launch)
                try:
                    err = check_output(y, refs[kernel], first)
                    tally.rel_error = max(tally.rel_error, err)
                except ValueError as exc:
                    tally.failure = f"request {i} ({req.rows}x{req.hidden}): {exc}"
                    tally.stopped = True
                    run.log(f"  {policy} {kernel}: FAILED {tally.failure}")
                if tally.compile_ms > budget_s * 1e3:
                    tally.stopped = True
                    run.log(f"  {policy} {kernel}: compile budget spent after request {i}")
        if i % 20 == 0 or i == len(stream):
            done = ", ".join(f"{p} {sum(tallies[k][p].compiles for k in KERNELS)}" for p in modules)
            run.log(f"  request {i}/{len(stream)}: compiles so far: {done}")
    triton.knobs.compilation.listener = None
    return stream, tallies


# ------------------------------------------------------------------ checking
def reference_rows(kernel: str, tensors: dict, rows: slice, b64=None):
    """The float64 reference of ``kernel`` on ``rows`` (``b64``: ``b`` already in float64)."""
    from kernel_portfolio import reference

    if kernel == "softmax":
        return reference.softmax(tensors["x"][rows])
    if kernel == "rms_norm":
        return reference.rms_norm(tensors["x"][rows], tensors["w"], EPS)
    return reference.matmul(tensors["a"][rows], tensors["b"] if b64 is None else b64)


def check_output(out, ref, rows: slice) -> float:
    """Relative error of ``out[rows]`` against ``ref``, once all of ``out`` is known written.

    Raises:
        ValueError: ``out`` holds a NaN or infinity (it was poisoned with NaN before
            the launch, so an unwritten element shows), or the error is above
            :data:`REL_TOL`.
    """
    import torch

    from kernel_portfolio.reference import rel_error

    if not torch.isfinite(out).all():
        raise ValueError("output has NaN or inf (unwritten elements?)")
    err = rel_error(out[rows], ref)
    if not err <= REL_TOL:
        raise ValueError(f"relative error {err:.3g} > {REL_TOL:g} (float64 reference)")
    return err


# ---------------------------------------------------------------- kernel time
def timed_tensors(kernel: str, width: int, scale: Scale, gen, dev: str) -> dict:
    """Fresh random inputs (and an output buffer) for one kernel-time case."""
    import torch

    fresh = lambda *shape: torch.randn(*shape, generator=gen, device=dev, dtype=torch.float16)
    if kernel == "matmul":
        a, b = fresh(scale.gemm_m, width), fresh(width, width)
        return {"a": a, "b": b, "c": torch.empty(scale.gemm_m, width, device=dev, dtype=a.dtype)}
    x = fresh(scale.rows, width)
    tensors = {"x": x, "y": torch.empty_like(x)}
    if kernel == "rms_norm":
        tensors["w"] = fresh(width)
    return tensors


def case_shape(kernel: str, width: int, scale: Scale) -> list[int]:
    """The case shape: ``[rows, width]``, or ``[M, N, K]`` for the GEMM."""
    return [scale.gemm_m, width, width] if kernel == "matmul" else [scale.rows, width]


def run_kernel_time(
    run: Run,
    modules: dict[str, ModuleType],
    scale: Scale,
    seed: int,
) -> list[tuple[str, int, dict]]:
    """Check and time every kernel of every policy at every width.

    Returns:
        ``(kernel, width, {policy: ImplOutcome})`` per case.
    """
    import torch

    from kernel_portfolio.bench.records import ImplOutcome

    out = []
    gen = torch.Generator(device=run.device).manual_seed(seed + 1)
    rng = random.Random(seed)
    for kernel in KERNELS:
        for width in scale.widths:
            tensors = timed_tensors(kernel, width, scale, gen, run.device)
            launch = make_launch(kernel, tensors, sm_count=run.sm_count, scale=scale)
            result = tensors["c" if kernel == "matmul" else "y"]
            rows = slice(0, CHECK_ROWS)
            ref = reference_rows(kernel, tensors, rows)
            outcomes, ready = {}, []
            for policy, module in modules.items():
                result.fill_(float("nan"))
                try:
                    compiled = launch.run(module)
                    run.sync()
                    err = check_output(result, ref, rows)
                except Exception as exc:  # a policy that fails to compile or is wrong
                    outcomes[policy] = ImplOutcome("failed", f"{type(exc).__name__}: {exc}"[:300])
                    continue
                metrics = {} if compiled is None else kernel_metrics(compiled)
                outcomes[policy] = ImplOutcome("ok", None, err, [], None, metrics)
                ready.append(policy)
            run.busy(50.0)
            for _ in range(scale.visits):
                rng.shuffle(ready)
                for policy in ready:
                    call = lambda launch=launch, m=modules[policy]: launch.run(m)
                    outcomes[policy].visits.append(run.time(call, scale.samples, cold=True))
            out.append((kernel, width, outcomes))
            run.log(f"  {kernel} width {width}: " + ", ".join(
                f"{p} {statistics.median(s for v in o.visits for s in v):.4f} ms"
                if o.status == "ok" else f"{p} {o.status} ({o.reason})"
                for p, o in outcomes.items()
            ))  # fmt: skip
    return out


# -------------------------------------------------------------------- records
def kernel_case(kernel: str, width: int, outcomes: dict, scale: Scale, copy_gbps: float) -> dict:
    """The result record of one kernel-time case; ratios of every policy against every other."""
    from kernel_portfolio.bench.records import impl_record, visit_ratios
    from kernel_portfolio.bench.suites import DTYPE_BYTES, OPS, eval_formula

    shape = case_shape(kernel, width, scale)
    spec = OPS[kernel]
    values = {**dict(zip(spec.dims, shape, strict=True)), "s": DTYPE_BYTES[DTYPE]}
    counts = Counts(
        eval_formula(spec.bytes_fwd, values),
        None if spec.flops_fwd is None else eval_formula(spec.flops_fwd, values),
    )
    ok = [p for p, o in outcomes.items() if o.status == "ok"]
    return {
        "id": f"{kernel}/fwd/{'x'.join(map(str, shape))}/{DTYPE}",
        "op": kernel,
        "mode": "fwd",
        "shape": shape,
        "dtype": DTYPE,
        "timer": "events",
        "cache": "cold",
        "bytes": counts.bytes,
        "bytes_formula": spec.bytes_fwd,
        "flops": counts.flops,
        "flops_formula": spec.flops_fwd,
        "depends_on": [*POLICIES.values(), *HARNESS, *SUPPORT_SOURCES],
        "impls": {p: impl_record(counts, o, copy_gbps) for p, o in outcomes.items()},
        "ratios": [
            {"impl": p, "baseline": q, **visit_ratios(outcomes[p].visits, outcomes[q].visits)}
            for p in ok
            for q in ok
            if p != q
        ],
    }


def stream_case(kernel: str, tallies: dict, modules: dict, requests: int, copy_gbps: float) -> dict:
    """The result record of one kernel's request stream: per-request times, compile metrics."""
    from kernel_portfolio.bench.records import ImplOutcome, impl_record

    impls = {}
    for policy, tally in tallies.items():
        metrics = {
            "compiles": {"value": tally.compiles, "unit": "compiles"},
            "compile_ms": {"value": round(tally.compile_ms, 3), "unit": "ms"},
            "requests": {"value": len(tally.samples), "unit": "requests"},
            "predicted_compiles": {
                "value": predicted_compiles(modules[policy], tally.launches),
                "unit": "compiles",
            },
        }
        if tally.failure is None:
            outcome = ImplOutcome("ok", None, tally.rel_error, [tally.samples], None, metrics)
        else:
            outcome = ImplOutcome("failed", tally.failure)
        impls[policy] = impl_record(Counts(None, None), outcome, copy_gbps)
    op = f"{kernel}-stream"
    return {
        "id": f"{op}/fwd/{requests}/{DTYPE}",
        "op": op,
        "mode": "fwd",
        "shape": [requests],
        "dtype": DTYPE,
        "timer": "events",
        "cache": "warm",
        "bytes": None,
        "bytes_formula": None,
        "flops": None,
        "flops_formula": None,
        "depends_on": [*POLICIES.values(), *HARNESS, *SUPPORT_SOURCES],
        "impls": impls,
        "ratios": [],
    }


# -------------------------------------------------------------------- verdict
@dataclass(frozen=True)
class Assessment:
    """How one policy fared for one kernel in a saved specialization result.

    Attributes:
        kernel: ``softmax``, ``rms_norm`` or ``matmul``.
        policy: The policy assessed.
        failed: Kernel-time cases where the policy did not run or was wrong.
        beaten: ``(case id, policy)`` where that other policy was faster in at
            least nine visits out of ten (per-visit speed-up's 10th percentile above 1).
        dominated_by: Policies never beaten by this one that compiled fewer times
            over the same requests.
    """

    kernel: str
    policy: str
    failed: tuple[str, ...]
    beaten: tuple[tuple[str, str], ...]
    dominated_by: tuple[str, ...]

    @property
    def supported(self) -> bool:
        """Nothing failed, nothing faster, nothing with fewer compiles and no slower."""
        return not (self.failed or self.beaten or self.dominated_by)


def assess_policy(data: dict, kernel: str, policy: str) -> Assessment:
    """Assess ``policy`` for ``kernel`` from a saved result's kernel-time and stream cases.

    Raises:
        ValueError: the result has no stream case or no kernel-time case for ``kernel``.
    """
    cases = [c for c in data["cases"] if c["op"] == kernel]
    streams = [c for c in data["cases"] if c["op"] == f"{kernel}-stream"]
    if not cases or not streams:
        raise ValueError(f"the result has no stream and kernel-time cases for {kernel!r}")
    stream = streams[0]["impls"]

    def q10(case: dict, impl: str, baseline: str) -> float | None:
        for r in case["ratios"]:
            if r["impl"] == impl and r["baseline"] == baseline:
                return r["q10"]
        return None

    failed = tuple(c["id"] for c in cases if c["impls"][policy]["status"] != "ok")
    beaten = []
    for case in cases:
        faster = [
            (q10(case, other, policy), other)
            for other in case["impls"]
            if other != policy and (q10(case, other, policy) or 0.0) > 1.0
        ]
        if faster:
            beaten.append((case["id"], max(faster)[1]))
    mine = stream[policy]
    dominated = []
    for other, rec in stream.items():
        if other == policy or rec["status"] != "ok" or mine["status"] != "ok":
            continue
        served = rec["metrics"]["requests"]["value"] == mine["metrics"]["requests"]["value"]
        fewer = rec["metrics"]["compiles"]["value"] < mine["metrics"]["compiles"]["value"]
        never_slower = all(
            case["impls"][other]["status"] == "ok" and (q10(case, policy, other) or 0.0) <= 1.0
            for case in cases
        )
        if served and fewer and never_slower:
            dominated.append(other)
    return Assessment(kernel, policy, failed, tuple(beaten), tuple(dominated))


# ----------------------------------------------------------------------- main
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="results folder, e.g. results/h200")
    parser.add_argument("--seed", type=int, default=0, help="seed of the stream and inputs")
    parser.add_argument(
        "--compile-budget-s",
        type=float,
        default=20.0,
        help="stop a policy's kernel in the stream once its compiles took this long",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="tiny sizes under TRITON_INTERPRET=1 on the CPU: tests the plumbing, measures nothing",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the sweep and write ``<out>/specialization.json`` (+ ``.log``)."""
    from kernel_portfolio.cli import UserError

    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    try:
        return sweep(args, shlex.join(["python", SCRIPT, *argv]))
    except UserError as err:
        print(f"specialization_sweep: {err}", file=sys.stderr)
        return err.code


def sweep(args: argparse.Namespace, command: str) -> int:
    """The sweep itself (see the module docstring)."""
    run = start_run(args.dry_run, command)
    import triton

    scale = DRY if args.dry_run else FULL
    # An empty on-disk cache: every compile the stream needs is a real compile.
    cache_dir = triton.knobs.cache.dir
    triton.knobs.cache.dir = tempfile.mkdtemp(prefix="kp-specialization-")
    try:
        modules = {name: load_policy(name) for name in POLICIES}
        run.log(
            f"stream: {scale.requests} requests, hiddens {scale.hiddens}, seqs {scale.seqs}, "
            f"batch 1..{scale.max_batch}, seed {args.seed}"
        )
        t0 = time.perf_counter()
        stream, tallies = run_stream(run, modules, scale, args.seed, args.compile_budget_s)
        run.log(f"stream done in {time.perf_counter() - t0:.1f} s")
        t0 = time.perf_counter()
        timed = run_kernel_time(run, modules, scale, args.seed)
        run.log(f"kernel time done in {time.perf_counter() - t0:.1f} s")
    finally:
        triton.knobs.cache.dir = cache_dir
    gbps = run.copy["gbps"]
    cases = [stream_case(k, tallies[k], modules, len(stream), gbps) for k in KERNELS]
    for case in cases:
        for policy, rec in case["impls"].items():
            m = {name: metric["value"] for name, metric in rec["metrics"].items()}
            run.log(
                f"{case['id']} {policy}: {m['compiles']} compiles ({m['predicted_compiles']} "
                f"predicted) in {m['compile_ms']:.0f} ms over {m['requests']} requests"
            )
    cases += [kernel_case(k, w, o, scale, gbps) for k, w, o in timed]
    notes = (
        "Kernel-time cases: CUDA events around each call, L2 overwritten before each "
        "call, policies visited in a seeded random order per visit. Stream cases "
        "(<kernel>-stream, shape = requests): one sample per request served, CUDA events "
        "around the launch with a warm L2, so a request that compiled includes the "
        "compile; Triton's on-disk cache started empty; compile metrics come from "
        "Triton's compilation listener; predicted_compiles counts distinct Triton cache "
        "keys of the requests served."
    )
    if args.dry_run:
        notes += " DRY RUN on the CPU under the Triton interpreter: nothing here is a measurement."
    path = run.save(
        suite="specialization",
        command=command,
        sources=[*POLICIES.values(), *HARNESS],
        timing={
            "cache": "cold",
            "visits": scale.visits,
            "samples_per_visit": scale.samples,
            "seed": args.seed,
            "compile_budget_s": args.compile_budget_s,
            "notes": notes,
        },
        cases=cases,
        out_dir=args.out,
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
