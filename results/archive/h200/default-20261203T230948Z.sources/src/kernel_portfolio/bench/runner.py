"""Runs a suite on the GPU: check every implementation, time the correct ones, save.

For each case, in order:

1. Fresh random inputs (seeded per case; never zeros) and, for ``fwdbwd``, a
   fixed upstream gradient of fresh random values.
2. Correctness of every implementation, before any timing: one call (for
   ``torch.compile`` after a first call that compiles, timed as the metric
   ``compile_ms``) on memory poisoned with NaN (the caching allocator is
   handed NaN-filled blocks, so an unwritten output element shows), then
   every output and gradient must be finite on the device and match the
   float64 reference: forward outputs against :mod:`kernel_portfolio.reference`
   on a seeded subset of rows (first and last included; all rows of small
   cases), gradients against float64 autograd through the torch baseline on
   the device. An implementation above :func:`tolerance` (``REL_TOL`` of
   :mod:`~kernel_portfolio.bench.suites`, or twice the output's own rounding error)
   is recorded as failed and never timed; a baseline that cannot run the case
   (it raises) is recorded as skipped with the reason.
3. Warm-up calls, one call under the peak-memory counter, a CUDA-graph capture
   for ``cuda_graph`` cases, and a short busy period so clocks are up.
4. ``visits`` visits; each visits every implementation once, in a seeded
   random order, and takes ``samples`` timed samples of it.

The run starts with GPU state (utilisation, clocks), a 0.5 s warm-up and the
copy bandwidth, and ends with the GPU state again; everything printed goes to
the log saved beside the result.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import math
import random
import re
import signal
import statistics
import sys
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from kernel_portfolio import reference
from kernel_portfolio.bench import env as bench_env
from kernel_portfolio.bench import plan, timing
from kernel_portfolio.bench.records import (
    ImplOutcome,
    bench_sources,
    build_case_record,
    build_result,
    copy_record,
    summary_table,
)
from kernel_portfolio.bench.suites import REL_TOL, Case, Suite
from kernel_portfolio.results import (
    RESULTS_DIR,
    ResultError,
    commit_run,
    compare_runs,
    git_state,
    load,
    repo_root,
    write_text_atomic,
)

#: RMSNorm epsilon used by every implementation.
EPS = 1e-6
#: Elements compared per tensor against the reference (rows are sampled above this).
CHECK_ELEMS = 1 << 20
#: Warm-up of the whole run, and before each case's timing (milliseconds).
RUN_WARMUP_MS = 500.0
CASE_WARMUP_MS = 50.0
#: Untimed calls of each implementation before it is timed.
WARMUP_CALLS = 3
#: Copy-bandwidth samples.
COPY_SAMPLES = 20


# ------------------------------------------------------------ implementations
def _torch_add(x, y):
    return torch.add(x, y)


def _torch_row_sum(x):
    return x.sum(-1)


def _torch_softmax(x):
    return torch.softmax(x, -1)


def _torch_rms_norm(x, w):
    return F.rms_norm(x, (x.shape[-1],), w, EPS)


def _torch_residual_rms_norm(x, r, w):
    h = x + r
    return F.rms_norm(h, (h.shape[-1],), w, EPS), h


def _torch_mm(a, b):
    return torch.mm(a, b)


def _ours(op: str) -> Callable:
    import kernel_portfolio as kp

    if op in ("rms_norm", "residual_rms_norm"):
        fn = getattr(kp, op)
        return lambda *args: fn(*args, eps=EPS)
    return getattr(kp, op)


def _liger(op: str) -> Callable:
    """Liger-Kernel's autograd function for ``op`` (raises ImportError without Liger)."""
    if op == "softmax":
        from liger_kernel.ops.softmax import LigerSoftmaxFunction

        return LigerSoftmaxFunction.apply
    if op == "rms_norm":
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction

        # casting_mode "llama" (Liger's default); in_place=False so that the
        # backward does not overwrite the harness's fixed upstream gradient.
        return lambda x, w: LigerRMSNormFunction.apply(x, w, EPS, 0.0, "llama", False)
    if op == "residual_rms_norm":
        from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction

        return lambda x, r, w: LigerFusedAddRMSNormFunction.apply(x, r, w, EPS, 0.0, "llama", False)
    raise ValueError(f"Liger-Kernel has no {op}")


@dataclass(frozen=True)
class Driver:
    """How to feed, run and check one operator.

    Attributes:
        inputs: Input shapes from the case shape.
        outputs: Output shapes from the case shape.
        row_args: Inputs that the forward reference takes row by row (dim 0).
        grad_args: Inputs that require grad in ``fwdbwd``.
        baseline: The torch baseline (also the graph of the float64 gradient reference).
        reference: Float64 forward reference from :mod:`kernel_portfolio.reference`.
    """

    inputs: Callable[[tuple], list[tuple]]
    outputs: Callable[[tuple], list[tuple]]
    row_args: tuple[int, ...]
    grad_args: tuple[int, ...]
    baseline: Callable
    reference: Callable


DRIVERS = {
    "add": Driver(lambda s: [s, s], lambda s: [s], (0, 1), (0, 1), _torch_add, reference.add),
    "row_sum": Driver(
        lambda s: [s], lambda s: [s[:1]], (0,), (0,), _torch_row_sum, reference.row_sum
    ),
    "softmax": Driver(lambda s: [s], lambda s: [s], (0,), (0,), _torch_softmax, reference.softmax),
    "rms_norm": Driver(
        lambda s: [s, s[1:]],
        lambda s: [s],
        (0,),
        (0, 1),
        _torch_rms_norm,
        lambda x, w: reference.rms_norm(x, w, EPS),
    ),
    "residual_rms_norm": Driver(
        lambda s: [s, s, s[1:]],
        lambda s: [s, s],
        (0, 1),
        (0, 1, 2),
        _torch_residual_rms_norm,
        lambda x, r, w: reference.residual_rms_norm(x, r, w, EPS),
    ),
    "matmul": Driver(
        lambda s: [(s[0], s[2]), (s[2], s[1])],
        lambda s: [(s[0], s[1])],
        (0,),
        (0, 1),
        _torch_mm,
        reference.matmul,
    ),
}


def implementation(case: Case, name: str) -> Callable:
    """The callable of implementation ``name`` for a case.

    Raises:
        ImportError: Liger-Kernel (or our operator's module) does not import.
    """
    driver = DRIVERS[case.op]
    if name == "ours":
        return _ours(case.op)
    if name in ("torch", "cublas"):
        return driver.baseline
    if name == "compile":
        return torch.compile(driver.baseline, dynamic=False)
    if name == "liger":
        return _liger(case.op)
    raise ValueError(f"unknown implementation {name!r}")


# --------------------------------------------------------------- correctness
class CheckFailed(Exception):
    """An implementation gave a wrong, non-finite or mis-shaped result."""


def _as_tuple(out) -> tuple:
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def sample_rows(n: int, width: int) -> torch.Tensor | slice:
    """Rows compared with the reference: all of them, or a seeded subset with the first and last.

    About ``CHECK_ELEMS / width`` rows are taken. The subset depends only on
    ``(n, width)``, so tensors of one shape are always compared at the same rows.
    """
    count = max(2, CHECK_ELEMS // max(width, 1))
    if count >= n:
        return slice(None)
    gen = torch.Generator().manual_seed(n * 1_000_003 + width)
    inner = torch.randint(1, n - 1, (count - 2,), generator=gen)
    return torch.cat([torch.tensor([0, n - 1]), inner]).unique()


def _rows_of(t: torch.Tensor, width: int | None = None) -> torch.Tensor | slice:
    width = width if width is not None else (t[0].numel() if t.ndim > 1 else 1)
    rows = sample_rows(t.shape[0], width)
    return rows if isinstance(rows, slice) else rows.to(t.device)


def _subset(t: torch.Tensor) -> torch.Tensor:
    return t if t.numel() <= CHECK_ELEMS else t[_rows_of(t)]


def _rel(out: torch.Tensor, ref: torch.Tensor, what: str) -> float:
    try:
        return reference.rel_error(out, ref)
    except ValueError as err:  # shape mismatch
        raise CheckFailed(f"{what}: {err}") from err


@dataclass
class CaseInputs:
    """The tensors of one case: inputs, fixed upstream gradients, and float64 references."""

    args: list[torch.Tensor]
    upstream: list[torch.Tensor]
    rows: torch.Tensor | slice
    ref_outputs: tuple[torch.Tensor, ...]
    ref_grads: list[torch.Tensor]


def make_inputs(case: Case, seed: int, device: str = "cuda") -> CaseInputs:
    """Fresh random inputs for a case, seeded by ``seed`` and the case id, and their references."""
    driver = DRIVERS[case.op]
    dtype = getattr(torch, case.dtype)
    gen = torch.Generator(device=device).manual_seed(seed * 7919 + zlib.crc32(case.id.encode()))
    randn = lambda shape: torch.randn(shape, generator=gen, device=device, dtype=dtype)
    args = [randn(s) for s in driver.inputs(case.shape)]
    if case.mode == "fwdbwd":
        for i in driver.grad_args:
            args[i].requires_grad_(True)
    upstream = [randn(s) for s in driver.outputs(case.shape)] if case.mode == "fwdbwd" else []
    first = args[driver.row_args[0]]
    out_width = max(math.prod(shape[1:]) for shape in driver.outputs(case.shape))
    rows = _rows_of(first, max(math.prod(first.shape[1:]), out_width))
    sliced = [a.detach()[rows] if i in driver.row_args else a.detach() for i, a in enumerate(args)]
    ref_outputs = _as_tuple(driver.reference(*sliced))
    ref_grads = []
    if case.mode == "fwdbwd":
        leaves = [
            a.detach().double().requires_grad_(i in driver.grad_args) for i, a in enumerate(args)
        ]
        outs = _as_tuple(driver.baseline(*leaves))
        torch.autograd.backward(outs, [u.double() for u in upstream])
        ref_grads = [leaves[i].grad.detach() for i in driver.grad_args]
    return CaseInputs(args, upstream, rows, ref_outputs, ref_grads)


def make_call(case: Case, fn: Callable, inputs: CaseInputs):
    """``(call, prepare)``: one forward (or forward + backward) and what runs before it."""
    args = inputs.args
    if case.mode == "fwd":
        return (lambda: fn(*args)), None
    leaves = [args[i] for i in DRIVERS[case.op].grad_args]

    def prepare() -> None:
        for t in leaves:
            t.grad = None

    def call() -> None:
        torch.autograd.backward(_as_tuple(fn(*args)), inputs.upstream)

    return call, prepare


def _poison_allocator(nbytes: int) -> None:
    """Leave NaN-filled (0xFF bytes) blocks in the caching allocator for the next allocations."""
    if not torch.cuda.is_available():
        return
    torch.cuda.empty_cache()
    blocks = [torch.empty(nbytes, dtype=torch.uint8, device="cuda")]
    blocks += [torch.empty(1 << 19, dtype=torch.uint8, device="cuda") for _ in range(4)]
    for block in blocks:
        block.fill_(0xFF)
    del blocks


def tolerance(ref: torch.Tensor, dtype: str) -> float:
    """The relative-error bound for an output whose float64 reference is ``ref``.

    ``REL_TOL[dtype]``, or twice the error of ``ref`` itself correctly rounded to
    ``dtype`` where that is larger: no implementation can beat the rounding of its
    own output, and half-precision softmax outputs of rows wider than about 2^17
    are subnormal (values near ``1 / n_cols``), where that rounding alone passes
    ``REL_TOL``.
    """
    floor = reference.rel_error(ref.to(getattr(torch, dtype)), ref)
    return max(REL_TOL[dtype], 2 * floor)


def check(case: Case, fn: Callable, inputs: CaseInputs) -> float:
    """Run ``fn`` once on poisoned memory and compare it with the float64 references.

    Returns:
        The largest relative error over its outputs and gradients.

    Raises:
        CheckFailed: a missing or non-finite value, a wrong shape, or an error
            above :func:`tolerance`.
    """
    driver = DRIVERS[case.op]
    args = inputs.args
    fwdbwd = case.mode == "fwdbwd"
    if fwdbwd:
        for i in driver.grad_args:
            args[i].grad = None
    elems = sum(math.prod(s) for s in [*driver.outputs(case.shape), *driver.inputs(case.shape)])
    _poison_allocator(2 * elems * case.elem_bytes + (1 << 21))
    outs = _as_tuple(fn(*args))
    grad_args = driver.grad_args if fwdbwd else ()
    if fwdbwd:
        torch.autograd.backward(outs, inputs.upstream)
    grads = [args[i].grad for i in grad_args]
    if len(outs) != len(inputs.ref_outputs):
        raise CheckFailed(f"returned {len(outs)} outputs, expected {len(inputs.ref_outputs)}")
    named = [(f"output {k}", o) for k, o in enumerate(outs)]
    named += [(f"grad of input {i}", g) for i, g in zip(grad_args, grads, strict=True)]
    for what, t in named:
        if t is None:
            raise CheckFailed(f"{what} was not produced")
        if not torch.isfinite(t).all():
            raise CheckFailed(f"{what} has NaN or inf (unwritten elements?)")
    pairs = [
        (f"output {k}", o[inputs.rows], r)
        for k, (o, r) in enumerate(zip(outs, inputs.ref_outputs, strict=True))
    ]
    pairs += [
        (f"grad of input {i}", _subset(g), _subset(r))
        for i, g, r in zip(grad_args, grads, inputs.ref_grads, strict=True)
    ]
    worst = 0.0
    for what, out, ref in pairs:
        err = _rel(out, ref, what)
        bound = tolerance(ref, case.dtype)
        if not err <= bound:
            raise CheckFailed(
                f"{what}: relative error {err:.3g} > {bound:.3g} against the float64 reference"
            )
        worst = max(worst, err)
    return worst


# -------------------------------------------------------------------- timing
def _not_ok(name: str, what: str, err: BaseException) -> ImplOutcome:
    """A wrong result fails; an error fails ours but only skips a baseline that cannot run."""
    if isinstance(err, CheckFailed):
        return ImplOutcome("failed", f"{what}: {err}"[:300])
    first = str(err).strip().splitlines()[0] if str(err).strip() else ""
    status = "failed" if name == "ours" else "skipped"
    return ImplOutcome(status, f"{what}: {type(err).__name__}: {first}"[:300])


@dataclass
class _Ready:
    call: Callable
    prepare: Callable | None
    graph: torch.cuda.CUDAGraph | None
    lead_ms: float
    outcome: ImplOutcome


def _prepare_impl(
    case: Case, name: str, inputs: CaseInputs, graph_calls: int
) -> _Ready | ImplOutcome:
    try:
        fn = implementation(case, name)
    except Exception as err:  # an implementation that does not import
        return _not_ok(name, "not importable", err)
    call, prepare = make_call(case, fn, inputs)
    metrics = {}
    try:
        if prepare is not None:
            prepare()
        torch.cuda.synchronize()
        start = time.perf_counter()
        call()  # first call: Triton JIT, autotuning, torch.compile
        torch.cuda.synchronize()
        if name == "compile":
            metrics["compile_ms"] = {"value": (time.perf_counter() - start) * 1e3, "unit": "ms"}
        rel = check(case, fn, inputs)
    except Exception as err:
        return _not_ok(name, "check", err)
    try:
        for _ in range(WARMUP_CALLS):
            if prepare is not None:
                prepare()
            call()
        peak = timing.peak_memory(call, prepare=prepare)
        graph, lead_ms = None, 0.0
        if case.timer == "cuda_graph":
            graph = timing.capture_graph(call, graph_calls, prepare=prepare)
        else:
            lead_ms = timing.lead_for(call, prepare=prepare)
            metrics["lead_us"] = {"value": lead_ms * 1e3, "unit": "us"}
    except Exception as err:
        return _not_ok(name, "timing set-up", err)
    return _Ready(call, prepare, graph, lead_ms, ImplOutcome("ok", None, rel, [], peak, metrics))


def _measure_host_cost(ready: dict[str, _Ready], outcomes: dict[str, ImplOutcome]) -> None:
    """Add the metric ``host_us`` (eager per-call host cost) to every ready implementation.

    Only latency-bound (``cuda_graph``) cases get it: their inputs are small,
    so the GPU work per call is a few microseconds and the host is the
    bottleneck of back-to-back eager calls (see :func:`timing.host_cost`).
    """
    for name, r in list(ready.items()):
        try:
            values = timing.host_cost(r.call, prepare=r.prepare)
        except Exception as err:
            outcomes[name] = _not_ok(name, "host cost", err)
            ready.pop(name)
            continue
        r.outcome.metrics["host_us"] = {"value": statistics.median(values), "unit": "us"}


def run_case(
    case: Case,
    *,
    suite: Suite,
    visits: int,
    cache: str,
    seed: int,
    flusher: timing.L2Flusher,
) -> tuple[dict[str, ImplOutcome], str]:
    """Check and time every implementation of one case.

    Returns:
        ``(outcomes by implementation, cache state of the samples)``.
    """
    torch._dynamo.reset()
    inputs = make_inputs(case, seed)
    outcomes: dict[str, ImplOutcome] = {}
    ready: dict[str, _Ready] = {}
    for name in case.impls:
        got = _prepare_impl(case, name, inputs, suite.graph_calls)
        if isinstance(got, _Ready):
            ready[name] = got
            outcomes[name] = got.outcome
        else:
            outcomes[name] = got
    case_cache = "warm" if case.timer == "cuda_graph" or cache == "warm" else "cold"
    flush = flusher if case_cache == "cold" else None
    rng = random.Random(f"{seed}:{case.id}")
    if ready:
        timing.busy(CASE_WARMUP_MS)
    for _ in range(visits):
        order = list(ready)
        rng.shuffle(order)
        for name in order:
            r = ready[name]
            try:
                if r.graph is not None:
                    samples = timing.time_graph(r.graph, suite.samples, suite.graph_calls)
                else:
                    samples = timing.time_events(
                        r.call, suite.samples, prepare=r.prepare, flush=flush, lead_ms=r.lead_ms
                    )
            except Exception as err:
                outcomes[name] = _not_ok(name, "timing", err)
                ready.pop(name)
                continue
            r.outcome.visits.append(samples)
    if case.timer == "cuda_graph":
        _measure_host_cost(ready, outcomes)
    for r in ready.values():
        if r.prepare is not None:
            r.prepare()
    del ready, inputs
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return outcomes, case_cache


# ------------------------------------------------------------------ the run
class _Tee:
    """A text stream that writes to the console and to a shared log."""

    def __init__(self, stream, log: list[str]) -> None:
        self.stream = stream
        self.log = log

    def write(self, text: str) -> int:
        self.log.append(text)
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return self.stream.isatty()


def _terminated(signum, frame) -> None:
    raise SystemExit(f"terminated by signal {signum}")


def _utc_now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def result_stem(suite: str, filter_text: str | None) -> str:
    """File stem of a run: the suite, plus the filter for a partial run.

    A filtered run therefore never replaces the full suite's file.
    """
    if not filter_text:
        return suite
    return f"{suite}--{re.sub(r'[^a-z0-9]+', '-', filter_text.lower()).strip('-')}"


def _case_line(index: int, total: int, record: dict) -> str:
    ours = record["impls"]["ours"]
    head = f"[{index}/{total}] {record['id']} ({record['timer']}, {record['cache']})"
    if ours["status"] != "ok":
        return f"{head}: ours {ours['status']}: {ours['reason']}"
    parts = [f"ours {ours['median_ms'] * 1e3:.2f} us", f"err {ours['rel_error']:.1e}"]
    parts += [
        f"{name} host {rec['metrics']['host_us']['value']:.1f} us"
        for name, rec in record["impls"].items()
        if "host_us" in rec.get("metrics", {})
    ]
    parts += [f"{r['baseline']} {r['median']:.2f}x" for r in record["ratios"]]
    parts += [
        f"{name} {rec['status']}: {rec['reason']}"
        for name, rec in record["impls"].items()
        if rec["status"] != "ok"
    ]
    return f"{head}: " + "; ".join(parts)


def case_not_run(case: Case, err: BaseException) -> dict[str, ImplOutcome]:
    """Outcomes of a case that raised outside any one implementation's check or timing.

    Ours is recorded as failed (the harness could not measure it, and that is
    a finding), the baselines as skipped, all with the error as the reason.
    """
    first = str(err).strip().splitlines()[0][:200] if str(err).strip() else ""
    reason = f"case not run: {type(err).__name__}: {first}"
    return {
        name: ImplOutcome("failed" if name == "ours" else "skipped", reason) for name in case.impls
    }


def _measure_cases(cases, *, suite, visits, cache, seed, flusher, copy_gbps, sources) -> list:
    """Run every case with a progress bar whose ETA follows the plan's per-case estimates."""
    from tqdm import tqdm

    estimate = plan.estimate(suite, cases, visits=visits, cache=cache).per_case
    total_est = sum(estimate.values())
    records = []
    bar = tqdm(
        total=round(total_est, 1),
        file=sys.__stderr__,
        disable=None,  # a bar on a terminal only; the case lines carry the ETA
        dynamic_ncols=True,
        bar_format="{l_bar}{bar}| {elapsed}<{remaining} {postfix}",
    )
    run_start = time.perf_counter()
    done_est = 0.0
    for i, case in enumerate(cases, 1):
        bar.set_postfix_str(case.id)
        start = time.perf_counter()
        try:
            outcomes, case_cache = run_case(
                case, suite=suite, visits=visits, cache=cache, seed=seed, flusher=flusher
            )
        except Exception as err:  # the case itself raised: record it and go on
            torch.cuda.empty_cache()
            outcomes = case_not_run(case, err)
            case_cache = cache
        record = build_case_record(
            case, outcomes, copy_gbps=copy_gbps, cache=case_cache, sources=sources
        )
        records.append(record)
        now = time.perf_counter()
        done_est += estimate[case.id]
        eta = (now - run_start) / done_est * (total_est - done_est)
        line = _case_line(i, len(cases), record)
        tqdm.write(f"{line} [{now - start:.1f} s, ~{eta / 60:.1f} min left]", file=sys.stdout)
        bar.update(round(estimate[case.id], 1))
    bar.close()
    return records


def _timing_block(suite: Suite, cache, visits, seed, warm_ms, flusher) -> dict:
    notes = (
        "events: CUDA events around each call, the stream spinning for a lead before the "
        "start event (metric lead_us: four times the host time to queue one call, doubled "
        "for a sample whose host outran it), so that the events time the device's work even "
        "where the host's work per call is longer (autograd fwdbwd of mid-size shapes); cold: a "
        "buffer of twice the L2 is overwritten before each call; cuda_graph: graph_calls calls "
        "per replay, warm L2; speed-up ratios are computed per visit (baseline median / impl "
        "median), then summarised over visits; compile time is excluded (metric compile_ms); "
        f"host_us (cuda_graph cases only): eager wall-clock time per call of about "
        f"{timing.HOST_LOOP_MS:g} ms of back-to-back calls synchronised only before and after "
        f"the loop, median of {timing.HOST_REPEATS} loops; "
        "the inputs are small (GPU work of a few us per call), so the host is the "
        "bottleneck and this is the per-call host cost of the Python entry point."
    )
    return {
        "cache": cache,
        "visits": visits,
        "samples_per_visit": suite.samples,
        "graph_calls": suite.graph_calls,
        "seed": seed,
        "warmup_ms": round(warm_ms, 1),
        "case_warmup_ms": CASE_WARMUP_MS,
        "l2_flush_bytes": flusher.nbytes,
        "notes": f"{notes} {suite.notes}".strip(),
    }


def _report_changes(data: dict, candidates: list[Path]) -> None:
    for path in candidates:
        if not path.exists():
            continue
        try:
            previous = load(path)
        except ResultError as err:
            print(f"the previous result does not load: {err}")
            return
        changes = compare_runs(previous.data, data)
        print(f"\nchanges vs {path} ({len(changes)}):")
        for line in changes or ["none beyond the spread of the samples"]:
            print(f"  {line}")
        return


def run_suite(
    suite: Suite,
    cases: list[Case],
    *,
    command: str,
    out_dir: str | Path | None = None,
    cache: str = "cold",
    visits: int | None = None,
    seed: int = 0,
    filter_text: str | None = None,
) -> Path:
    """Run ``cases`` of ``suite`` on the current GPU and commit the result.

    Everything printed is also saved as ``<stem>.log`` beside the result; if
    the run dies, what it printed so far is saved as ``<stem>.failed.log``.

    Args:
        suite: The suite (its sample counts apply).
        cases: The cases to run (the suite's, or a filtered subset).
        command: The exact command line, saved in the result.
        out_dir: Results folder (default ``results/<gpu-slug>/`` of the repository).
        cache: ``"cold"`` (L2 flushed before each call) or ``"warm"``.
        visits: Visits per case (default: the suite's).
        seed: Seed of the inputs and of the visiting order.
        filter_text: The ``--filter`` text of a partial run.

    Returns:
        The results file written.
    """
    props = bench_env.require_gpu()
    root = repo_root()
    slug = bench_env.gpu_slug(props.name)
    default_dir = root / RESULTS_DIR / slug
    out_dir = Path(out_dir) if out_dir is not None else default_dir
    stem = result_stem(suite.name, filter_text)
    visits = visits or suite.visits
    log: list[str] = []
    started = _utc_now()
    clock = time.perf_counter()
    old_term = signal.signal(signal.SIGTERM, _terminated)
    try:
        with (
            contextlib.redirect_stdout(_Tee(sys.stdout, log)),
            contextlib.redirect_stderr(_Tee(sys.stderr, log)),
        ):
            print(f"$ {command}")
            print(
                f"{props.name} ({slug}); suite {suite.name}: {len(cases)} cases, cache {cache}, "
                f"{visits} visits x {suite.samples} samples, seed {seed}"
            )
            sources = bench_sources(root)
            git = git_state(root)
            env = bench_env.capture_env(props)
            before = bench_env.gpu_state(props)
            busy = (before["utilization_pct"] or 0) > bench_env.BUSY_UTIL_PCT
            if busy:
                print(
                    f"WARNING: the GPU is busy at the start ({before['utilization_pct']}% "
                    "utilisation): timings may be disturbed"
                )
            warm_ms = timing.busy(RUN_WARMUP_MS)
            copy = copy_record(*timing.copy_bandwidth(COPY_SAMPLES))
            print(f"copy bandwidth: {copy['gbps']:.0f} GB/s (median of {COPY_SAMPLES} copies)")
            flusher = timing.L2Flusher(env["l2_bytes"])
            records = _measure_cases(
                cases,
                suite=suite,
                visits=visits,
                cache=cache,
                seed=seed,
                flusher=flusher,
                copy_gbps=copy["gbps"],
                sources=sources,
            )
            data = build_result(
                suite=suite.name,
                gpu_slug=slug,
                command=command,
                started_utc=started,
                finished_utc=_utc_now(),
                git=git,
                sources=sources,
                env=env,
                gpu_state={
                    "before": before,
                    "after": bench_env.gpu_state(props),
                    "busy_at_start": busy,
                },
                copy_bandwidth=copy,
                timing=_timing_block(suite, cache, visits, seed, warm_ms, flusher),
                cases=records,
                log=f"{stem}.log",
                filter=filter_text,
            )
            print()
            print(summary_table(data))
            _report_changes(data, [out_dir / f"{stem}.json", default_dir / f"{stem}.json"])
            print(f"\n{len(cases)} cases in {(time.perf_counter() - clock) / 60:.1f} min")
            print(f"writing {out_dir / stem}.json and .log")
    except BaseException:
        write_text_atomic(out_dir / f"{stem}.failed.log", "".join(log))
        raise
    finally:
        signal.signal(signal.SIGTERM, old_term)
    done = commit_run(data, out_dir, stem, "".join(log), root)
    if done.archived is not None:
        print(f"archived the previous result as {done.archived}")
    for note in done.notes:
        print(note)
    print(f"wrote {done.path}")
    return done.path
