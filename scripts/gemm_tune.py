"""Tune the Hopper GEMM plan: every tile at every split-K count against cuBLAS.

Re-run on the H200 (``--budget-s`` stops starting cells 330 s after the
start, the warm pass included, and ``--cell-budget-s`` bounds a cell's checks:
the 101 cells of the grid before :data:`BETWEEN_M` and :data:`OTHER_NK` took
1.5 to 2 minutes with compiles, and those add about as many timed tiles again;
on an H100 the budget left 15 of the 177 cells untimed, recorded as skipped;
writes ``results/h200/gemm_tune.json`` and ``.log``)::

    PYTHONPATH=$PWD/src python scripts/gemm_tune.py --out results/h200 --warm-jobs 14

Print the summary of a saved run again (CPU, seconds)::

    PYTHONPATH=$PWD/src python scripts/gemm_tune.py --summary results/h200/gemm_tune.json

CPU plumbing check (Triton interpreter, tiny shapes, seconds; not a measurement)::

    TRITON_INTERPRET=1 PYTHONPATH=$PWD/src python scripts/gemm_tune.py --dry-run --out /tmp/gemm

The cells: ``A (M, K) @ B (K, N)``, both row-major, float16 and bfloat16, at
the models layer shapes (:data:`MODEL_NK`: attention output, the fused QKV
of Llama-3-8B, the MLP up/gate and down of Llama-3-8B and Mistral-7B) for
every batch ``M`` of :data:`MODEL_M`, plus the committed suite's GEMM shapes;
and in bfloat16 the same layer shapes at the batches between those
(:data:`BETWEEN_M`, none a whole number of 64-row tiles)
and the layers of two other models (:data:`OTHER_NK`) at both, so that the
fit sees a class of shapes rather than the suite's cells. None of them is a
shape of ``scripts/heldout_scan.py``, which tests the fit where it has not
looked.
Each forward cell times cuBLAS (``torch.mm``), ``kp.matmul`` as users get it
(``ours``: the plan of ``gemm_rule.TMA_RULES``), and the Hopper kernel forced to
every tile of ``matmul.TMA_TILES`` at every split-K count from 1 to
:data:`MAX_SPLIT` that the plan rule can take (:func:`split_counts`: runs
that hold two 128-wide ``K`` steps, work items that fill the waves better
than fewer runs do) (``tile <name> split <s>``). At
:data:`W_T_NK` in bfloat16 it also times ``B = W.T`` (a linear layer's
weight read in place: ``ours w.T`` against ``cublas w.T``). Forward and
backward through autograd at :data:`FWDBWD_SHAPES` (ours against cuBLAS,
``B`` row-major as in the suite), and float32 at 4096^3: cuBLAS, ours, and
the pointer kernel with each config of ``matmul.POINTER_CONFIGS`` and
:data:`FP32_EXTRA` at each precision of :data:`FP32_PRECISIONS`.

Method, per cell: fresh random inputs (seeded by the cell); each
implementation run once on a NaN-poisoned output, every element checked
finite and sampled rows compared with a float64 product computed on the
device (the bound of ``kernel_portfolio.bench.runner.tolerance``); a failed
check is recorded with its error and not timed. Then :data:`VISITS` visits in
a seeded random order, each taking :data:`SAMPLES` samples of every
implementation with CUDA events (the suite's ``events`` timer: the L2
overwritten before each call, the stream spinning for a lead so that the
host has queued the whole call). Ratios are per visit (cuBLAS's median over
the implementation's) and summarised, as in the suite. A cell whose checks
pass ``--cell-budget-s`` times only what it checked; cells left when
``--budget-s`` is spent are recorded as skipped, and the run saves what it has.

The summary (printed last, and again by ``--summary``) is the mechanical
choice: for every combination of ``WAVE_FILL`` and ``SPLIT_K_MIN_RUN`` in
:data:`FIT_GRID`, the plan table whose rows (one per ``M`` bucket: a tile,
or a tile and the one to take when the first would leave the SMs idle, and
the most split-K runs, one of :data:`MAX_SPLITS`) give the best geometric
mean of the measured ratio over the bucket's cells, both dtypes and every
``(N, K)``; the combination with the best mean over all cells wins, and the
rows and constants to set in ``ops/gemm_rule.py`` are printed as code, with the
fit's score on each layer shape left out of it in turn. Then ours against the
targets, the float32 candidates with their errors, and forward and backward
against the committed suite's ratio at the same shape.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import random
import shlex
import sys
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

from sweep_support import ROOT, SUPPORT_SOURCES, Run, start_run

SCRIPT = "scripts/gemm_tune.py"
#: (N, K) of the models layer shapes: attention output (4096, 4096); fused QKV
#: of Llama-3-8B, 32 query and 2 x 8 key/value heads of 128 (6144, 4096); MLP
#: up/gate (14336, 4096) and down (4096, 14336) of Llama-3-8B and Mistral-7B.
MODEL_NK = ((4096, 4096), (6144, 4096), (14336, 4096), (4096, 14336))
#: Batch sizes (tokens): decode steps to prefill.
MODEL_M = (16, 32, 64, 128, 256, 384, 512, 1024, 2048, 4096, 16384)
#: Batch sizes between those of :data:`MODEL_M` below 1024, timed in bfloat16 at
#: every layer shape. A batch of tokens is rarely a multiple of a tile's rows:
#: none of these is a multiple of 64, so the last row of tiles is part-empty
#: (16 to 32 rows past a multiple of 64, 32 to 96 past one of 128), and they
#: put the tile counts between the waves the suite's batches give (224 rows of
#: 4096 columns: 128 tiles of 64x128 for 132 SMs; 336 rows: 192, a second wave
#: half full).
BETWEEN_M = (80, 160, 224, 336, 464, 600, 800)
#: (N, K) of the layers of two other models (``hidden_size``,
#: ``intermediate_size``, heads of each published configuration), timed in
#: bfloat16 at :data:`OTHER_M` and :data:`BETWEEN_M`: a fit left to the four
#: layer shapes above chose tiles for their widths.
OTHER_NK = {
    (7168, 5120): "Qwen2.5-14B fused QKV (40 query and 2 x 8 key/value heads of 128)",
    (13824, 5120): "Qwen2.5-14B MLP up/gate (hidden 5120, intermediate 13824)",
    (5120, 13824): "Qwen2.5-14B MLP down",
    (8192, 2048): "Llama-3.2-1B MLP up/gate (hidden 2048, intermediate 8192)",
}
#: The batch sizes of :data:`MODEL_M` timed at :data:`OTHER_NK`: from a wave of
#: 64-row tiles to a few waves of the widest.
OTHER_M = (64, 128, 256, 512, 1024)
#: The dtype of the cells at :data:`BETWEEN_M` and :data:`OTHER_NK` (the held-out
#: scan's: which tile fills the waves does not depend on it).
CLASS_DTYPE = "bfloat16"
#: The committed suite's GEMM shapes not already in the grid (4096^3 is).
SUITE_SHAPES = ((8192, 8192, 8192), (8192, 8192, 512), (65536, 1024, 1024))
#: The (N, K) also timed with B = W.T, in bfloat16.
W_T_NK = (14336, 4096)
#: Forward + backward, bfloat16: few rows at three models shapes, and the suite's.
FWDBWD_SHAPES = (
    (64, 14336, 4096),
    (256, 4096, 14336),
    (1024, 6144, 4096),
    (4096, 4096, 4096),
    (8192, 8192, 512),
    (65536, 1024, 1024),
)
#: Most split-K runs timed.
MAX_SPLIT = 8
#: The ``max_split`` a plan table row may take in the fit (none past :data:`MAX_SPLIT`).
MAX_SPLITS = (1, 2, 3, 4, 6, 8)
#: Pointer configs timed for float32 beside ``matmul.POINTER_CONFIGS``: the
#: ones that compile for sm_90a without spills at both precisions (the
#: ahead-of-time compile of ``tests/test_matmul.py``'s kind).
FP32_EXTRA = ((128, 128, 32, 8, 3), (128, 128, 16, 8, 3), (128, 128, 64, 8, 3))
FP32_PRECISIONS = ("ieee", "tf32x3")
FP32_SHAPE = (4096, 4096, 4096)
VISITS, SAMPLES = 3, 5
#: Rows of each output compared with the float64 product (the first, the last, random).
CHECK_ROWS = 256
#: The fit's constants: every combination is scored on the measured cells.
FIT_GRID = {
    "WAVE_FILL": (0.8, 0.85, 0.9, 0.95, 1.01),
    "SPLIT_K_MIN_RUN": (512, 1024, 2048),
}
#: A two-tile row starts with one of the bucket's this many best single tiles.
#: On the H100 sweep that ``gemm_rule`` cites any first tile fitted the cells
#: better and scored no better on the layer shapes left out of the fit
#: (:func:`held_out`): the wider search fitted cells, not a class.
FIRST_TILES = 3
#: A bucket keeps the previous bucket's row when that row's mean is within
#: this share of the best row's: a tile changes where the gain shows over the
#: noise of a class of cells, not of one (per-visit ratios of one
#: implementation spread by about this much).
MERGE_WITHIN = 0.01
#: Targets of ours / cuBLAS, forward (issue 32): from these M on.
TARGETS = ((1024, 0.97), (64, 0.90))
SOURCES = (
    SCRIPT,
    "src/kernel_portfolio/ops/matmul.py",
    "src/kernel_portfolio/plans.py",
    "src/kernel_portfolio/contracts.py",
    "src/kernel_portfolio/reference.py",
    "src/kernel_portfolio/bench/runner.py",
    "src/kernel_portfolio/bench/suites.py",
)
SUITE_RESULT = ROOT / "results" / "h200" / "default.json"


@dataclass(frozen=True)
class Grid:
    """The cells and sample counts of one run (the H200's, or a dry run's)."""

    model_nk: tuple
    model_m: tuple
    between_m: tuple  # timed in CLASS_DTYPE at model_nk and other_nk
    other_nk: tuple
    other_m: tuple
    suite_shapes: tuple
    w_t_nk: tuple
    fwdbwd: tuple
    fp32: tuple
    dtypes: tuple
    tile_names: tuple | None  # None: every tile of TMA_TILES
    fp32_configs: int | None  # None: every config of pointer_configs()
    min_run: int  # shortest run of K a timed split-K count leaves
    visits: int
    samples: int


FULL = Grid(
    MODEL_NK, MODEL_M, BETWEEN_M, tuple(OTHER_NK), OTHER_M, SUITE_SHAPES, W_T_NK, FWDBWD_SHAPES,
    FP32_SHAPE,
    ("float16", "bfloat16"), None, None, 256, VISITS, SAMPLES,
)  # fmt: skip
#: The same kinds of cell at sizes the interpreter runs in seconds (a row of
#: each of the first two buckets of the plan table, split-K included).
DRY = Grid(
    ((96, 128),), (3, 130), (70,), ((64, 96),), (), (), (96, 128), ((40, 64, 128),), (64, 64, 64),
    ("float16", "bfloat16"), ("64x128x128 w4 s4", "128x128x64 w8 s4"), 1, 64, 2, 1,
)  # fmt: skip


@dataclass(frozen=True)
class Cell:
    """One cell: forward or forward + backward, ``(M, N, K)``, a dtype, and whether W.T too."""

    mode: str
    shape: tuple
    dtype: str
    w_t: bool = False

    @property
    def id(self) -> str:
        return f"matmul/{self.mode}/{'x'.join(map(str, self.shape))}/{self.dtype}"


def cells(grid: Grid, seed: int) -> list[Cell]:
    """float32 first, then forward + backward, then the forward cells in a seeded random order."""
    fwd = [
        Cell("fwd", (m, n, k), dtype, w_t=(n, k) == grid.w_t_nk and dtype == "bfloat16")
        for n, k in grid.model_nk
        for m in grid.model_m
        for dtype in grid.dtypes
    ]
    fwd += [Cell("fwd", (m, n, k), CLASS_DTYPE) for n, k in grid.model_nk for m in grid.between_m]
    other_m = sorted({*grid.other_m, *grid.between_m})
    fwd += [Cell("fwd", (m, n, k), CLASS_DTYPE) for n, k in grid.other_nk for m in other_m]
    fwd += [Cell("fwd", shape, dtype) for shape in grid.suite_shapes for dtype in grid.dtypes]
    random.Random(seed).shuffle(fwd)
    both = [Cell("fwdbwd", shape, "bfloat16") for shape in grid.fwdbwd]
    return [Cell("fwd", grid.fp32, "float32"), *both, *fwd]


def tiles(grid: Grid) -> list:
    from kernel_portfolio.ops import matmul as mm

    if grid.tile_names is None:
        return list(mm.TMA_TILES)
    return [mm._TILES_BY_NAME[name] for name in grid.tile_names]


def split_counts(tile, m: int, n: int, k: int, sms: int, min_run: int) -> list[int]:
    """The split-K counts timed for ``tile``: every count ``matmul._split_k`` can take.

    1, and each count up to :data:`MAX_SPLIT` whose runs of ``K`` are
    ``min_run`` or longer and whose work items fill the waves of ``sms``
    strictly better than every smaller count's: ``_split_k`` takes the fewest
    runs that fill ``WAVE_FILL`` of the waves, else the best filling, so for
    any constants of :data:`FIT_GRID` it takes one of these.
    """
    from kernel_portfolio.ops import matmul as mm

    out_tiles = tile.count(m, n)
    counts = [1]
    if tile.splits:
        for s in range(2, MAX_SPLIT + 1):
            if k // s >= min_run and all(
                mm._fills_better(out_tiles * s, sms, out_tiles * c) for c in counts
            ):
                counts.append(s)
    return counts


def tile_impl(tile, split: int) -> str:
    return f"tile {tile.name} split {split}"


def plan_text(plan) -> str:
    """The plan in words; a plan of two column parts names both (``matmul._column_split``)."""
    text = f"{plan.tile.name} split {plan.split_k}"
    return text + (f", columns from {plan.cols}: {plan_text(plan.rest)}" if plan.rest else "")


def pointer_configs(grid: Grid) -> list:
    """The float32 candidates: ``matmul.POINTER_CONFIGS`` and :data:`FP32_EXTRA`."""
    from kernel_portfolio.ops import matmul as mm

    configs = [*mm.POINTER_CONFIGS, *(mm._pointer_config(*spec) for spec in FP32_EXTRA)]
    return configs[: grid.fp32_configs]


def pointer_impl(config, precision: str) -> str:
    kw = config.kwargs
    return (
        f"pointer {kw['BLOCK_M']}x{kw['BLOCK_N']}x{kw['BLOCK_K']} "
        f"w{config.num_warps} s{config.num_stages} {precision}"
    )


# ------------------------------------------------------------------ checks
class CheckFailed(Exception):
    """An implementation's output is unwritten, not finite, or off the float64 product."""

    def __init__(self, message: str, rel_error: float | None = None) -> None:
        super().__init__(message)
        self.rel_error = rel_error


def rel_error(out, ref) -> float:
    """``||out - ref|| / ||ref||`` in float64 on the tensors' device (``ref`` is float64)."""
    return ((out.double() - ref).norm() / ref.norm()).item()


def check(out, rows, ref, tol: float, what: str) -> float:
    """Every element of ``out`` finite (a poisoned one was written), ``out[rows]`` near ``ref``."""
    import torch

    if not torch.isfinite(out).all():
        raise CheckFailed(f"{what}: NaN or inf (unwritten elements?)")
    err = rel_error(out[rows], ref)
    if not err <= tol:
        raise CheckFailed(f"{what}: relative error {err:.3g} > {tol:.3g}", err)
    return err


def check_rows(m: int, device: str):
    """Rows compared with the reference: all, or CHECK_ROWS of them with the first and last.

    Seeded by ``m`` alone (a CPU generator), so a shape is always checked at the same rows.
    """
    import torch

    if m <= CHECK_ROWS:
        return torch.arange(m, device=device)
    gen = torch.Generator().manual_seed(m)
    inner = torch.randint(1, m - 1, (CHECK_ROWS - 2,), generator=gen)
    return torch.cat([torch.tensor([0, m - 1]), inner]).unique().to(device)


# ------------------------------------------------------------------ a cell
@dataclass
class Impl:
    """One implementation of a cell: its call, how to poison what it writes, and its check."""

    call: object
    poison: object
    verify: object
    prepare: object = None


def forward_impls(cell: Cell, grid: Grid, sms: int, device: str, gen) -> tuple[dict, dict]:
    """``({name: Impl}, {name: plan text})`` of a forward cell, inputs and references made here."""
    import torch

    import kernel_portfolio as kp
    from kernel_portfolio.bench.runner import _poison_allocator, tolerance
    from kernel_portfolio.contracts import direct_launches
    from kernel_portfolio.ops import matmul as mm

    m, n, k = cell.shape
    dtype = getattr(torch, cell.dtype)
    a = torch.randn(m, k, generator=gen, device=device).to(dtype)
    b = torch.randn(k, n, generator=gen, device=device).to(dtype)
    rows = check_rows(m, device)
    ref = a[rows].double() @ b.double()
    tol = tolerance(ref, cell.dtype)
    out = torch.empty(m, n, dtype=dtype, device=device)
    fresh = lambda: _poison_allocator(m * n * a.element_size())
    refill = lambda: out.fill_(float("nan"))
    verify = lambda got, what: check(got, rows, ref, tol, what)

    def launch(**fixed):
        with direct_launches():
            mm._launch_matmul(a, b, out, allow_tf32=False, **fixed)
        return out

    impls = {
        "cublas": Impl(lambda: torch.mm(a, b), fresh, verify),
        "ours": Impl(lambda: kp.matmul(a, b), fresh, verify),
    }
    plans = {}
    if cell.dtype == "float32":
        for config in pointer_configs(grid):
            for precision in FP32_PRECISIONS:
                call = lambda c=config, p=precision: launch(path="pointer", config=c, precision=p)
                impls[pointer_impl(config, precision)] = Impl(call, refill, verify)
        return impls, plans
    plans["ours"] = plan_text(mm._tma_plan(m, n, k, sms))
    if cell.w_t:
        w = torch.randn(n, k, generator=gen, device=device).to(dtype)
        ref_w = a[rows].double() @ w.double().T
        verify_w = lambda got, what: check(got, rows, ref_w, tol, what)
        impls["cublas w.T"] = Impl(lambda: torch.mm(a, w.T), fresh, verify_w)
        impls["ours w.T"] = Impl(lambda: kp.matmul(a, w.T), fresh, verify_w)
        plans["ours w.T"] = plans["ours"]
    for tile in tiles(grid):
        for split in split_counts(tile, m, n, k, sms, grid.min_run):
            plan = mm.TmaPlan(tile, split)
            call = lambda plan=plan: launch(path="tma", plan=plan)
            impls[tile_impl(tile, split)] = Impl(call, refill, verify)
    return impls, plans


def fwdbwd_impls(cell: Cell, sms: int, device: str, gen) -> tuple[dict, dict]:
    """``({name: Impl}, {product: plan text})`` of a forward + backward cell."""
    import torch

    import kernel_portfolio as kp
    from kernel_portfolio.bench.runner import _poison_allocator, tolerance
    from kernel_portfolio.ops import matmul as mm

    m, n, k = cell.shape
    dtype = getattr(torch, cell.dtype)
    a = torch.randn(m, k, generator=gen, device=device).to(dtype).requires_grad_()
    b = torch.randn(k, n, generator=gen, device=device).to(dtype).requires_grad_()
    grad = torch.randn(m, n, generator=gen, device=device).to(dtype)
    rows = check_rows(m, device)
    a64, b64, g64 = a.detach().double(), b.detach().double(), grad.double()
    refs = {"output": a64[rows] @ b64, "grad a": g64[rows] @ b64.T, "grad b": a64.T @ g64}
    tols = {what: tolerance(ref, cell.dtype) for what, ref in refs.items()}
    outs = {}

    def prepare():
        a.grad = b.grad = None

    def step(fn):
        outs["output"] = fn(a, b)
        outs["output"].backward(grad)

    def verify(_, what):
        got = {"output": outs["output"].detach(), "grad a": a.grad, "grad b": b.grad}
        every = torch.arange(k, device=device)
        picks = {"output": rows, "grad a": rows, "grad b": every}
        errs = [check(got[w], picks[w], refs[w], tols[w], f"{what} {w}") for w in refs]
        return max(errs)

    fresh = lambda: _poison_allocator(2 * (m * n + m * k + k * n) * a.element_size())
    impls = {
        "cublas": Impl(lambda: step(torch.mm), fresh, verify, prepare),
        "ours": Impl(lambda: step(kp.matmul), fresh, verify, prepare),
    }
    plans = {
        "forward": plan_text(mm._tma_plan(m, n, k, sms)),
        "dA": plan_text(mm._tma_plan(m, k, n, sms)),
        "dB": plan_text(mm._tma_plan(k, n, m, sms)),
    }
    return impls, plans


#: Errors after which the CUDA context is unusable: the run stops and saves.
CONTEXT_LOST = ("illegal memory access", "unspecified launch failure", "illegal instruction")


class ContextLost(Exception):
    """A launch broke the CUDA context; carries the cell's outcomes so far."""

    def __init__(self, outcomes: dict, plans: dict, reason: str) -> None:
        super().__init__(reason)
        self.outcomes, self.plans = outcomes, plans


def _failure(exc: Exception) -> str:
    return f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:250]}"


def _lost(outcomes: dict, names, plans: dict, culprit: str, reason: str) -> ContextLost:
    """The cell's outcomes once the context is gone: the culprit failed, the rest untimed."""
    from kernel_portfolio.bench.records import ImplOutcome

    lost = f"not timed: the CUDA context was lost at {culprit}"
    done = {n: ImplOutcome("skipped", lost) for n in names}
    done[culprit] = ImplOutcome("failed", reason)
    return ContextLost(done, plans, reason)


def run_cell(run: Run, cell: Cell, grid: Grid, seed: int, deadline: float) -> tuple[dict, dict]:
    """Check and time every implementation of one cell; ``({name: ImplOutcome}, plans)``.

    Raises:
        ContextLost: a launch left the CUDA context unusable.
    """
    import torch

    from kernel_portfolio.bench import timing
    from kernel_portfolio.bench.records import ImplOutcome

    gen = torch.Generator(device=run.device).manual_seed(seed * 7919 + zlib.crc32(cell.id.encode()))
    if cell.mode == "fwd":
        impls, plans = forward_impls(cell, grid, run.sm_count, run.device, gen)
    else:
        impls, plans = fwdbwd_impls(cell, run.sm_count, run.device, gen)
    outcomes, ready = {}, {}
    for name, impl in impls.items():
        if time.perf_counter() > deadline:
            outcomes[name] = ImplOutcome("skipped", "the cell's time budget was spent")
            continue
        try:
            if impl.prepare is not None:
                impl.prepare()
            impl.poison()
            started = time.perf_counter()
            got = impl.call()
            run.sync()
            first_ms = (time.perf_counter() - started) * 1e3
            err = impl.verify(got, name)
            lead = 0.0 if run.dry_run else timing.lead_for(impl.call, prepare=impl.prepare)
        # A wrong result, or a config that fails to compile or launch, is a finding.
        except Exception as exc:
            if any(text in str(exc) for text in CONTEXT_LOST):
                raise _lost(outcomes, impls, plans, name, _failure(exc)) from exc
            outcomes[name] = ImplOutcome("failed", _failure(exc), getattr(exc, "rel_error", None))
            continue
        metrics = {"first_call_ms": {"value": first_ms, "unit": "ms"}}
        if lead:
            metrics["lead_us"] = {"value": lead * 1e3, "unit": "us"}
        outcomes[name] = ImplOutcome("ok", None, err, [], None, metrics)
        ready[name] = (impl, lead)
    run.busy(20.0)
    order = random.Random(f"{seed}:{cell.id}")
    names = list(ready)
    for _ in range(grid.visits):
        order.shuffle(names)
        for name in list(names):
            impl, lead = ready[name]
            try:
                if run.dry_run:
                    call = impl.call
                    if impl.prepare is not None:
                        call = lambda impl=impl: (impl.prepare(), impl.call())
                    samples = run.time(call, grid.samples, cold=True)
                else:
                    samples = timing.time_events(
                        impl.call, grid.samples, prepare=impl.prepare, flush=run.flusher,
                        lead_ms=lead,
                    )  # fmt: skip
            except Exception as exc:
                if any(text in str(exc) for text in CONTEXT_LOST):
                    raise _lost(outcomes, impls, plans, name, _failure(exc)) from exc
                outcomes[name] = ImplOutcome("failed", f"timing: {_failure(exc)}")
                names.remove(name)
                continue
            outcomes[name].visits.append(samples)
    return outcomes, plans


def baseline_of(name: str) -> str | None:
    """The cuBLAS implementation an implementation is compared with (None for cuBLAS)."""
    if name.startswith("cublas"):
        return None
    return "cublas w.T" if name.endswith(" w.T") else "cublas"


def case_record(cell: Cell, outcomes: dict, plans: dict, copy_gbps: float) -> dict:
    """The result record of one cell: every implementation, and its ratio against cuBLAS."""
    from kernel_portfolio.bench.records import impl_record, visit_ratios
    from kernel_portfolio.bench.suites import Case

    case = Case("matmul", cell.mode, cell.shape, cell.dtype, "events", ("ours", "cublas"))
    ratios = []
    for name, out in outcomes.items():
        base = outcomes.get(baseline_of(name) or "")
        if out.status == "ok" and base is not None and base.status == "ok":
            base_name = baseline_of(name)
            ratios.append(
                {"impl": name, "baseline": base_name, **visit_ratios(out.visits, base.visits)}
            )
    return {
        "id": cell.id,
        "op": "matmul",
        "mode": cell.mode,
        "shape": list(cell.shape),
        "dtype": cell.dtype,
        "timer": "events",
        "cache": "cold",
        "bytes": case.bytes,
        "bytes_formula": case.bytes_formula,
        "flops": case.flops,
        "flops_formula": case.flops_formula,
        "traffic": case.spec.traffic,
        "depends_on": [*SOURCES, *SUPPORT_SOURCES],
        "impls": {name: impl_record(case, out, copy_gbps) for name, out in outcomes.items()},
        "ratios": ratios,
        "plans": plans,
    }


def skipped(reason: str) -> tuple[dict, dict]:
    """Outcomes of a cell that is not run: cuBLAS and ours skipped, with the reason."""
    from kernel_portfolio.bench.records import ImplOutcome

    return {name: ImplOutcome("skipped", reason) for name in ("cublas", "ours")}, {}


# ------------------------------------------------------------- warm pass
def variants(todo: list[Cell], grid: Grid, sms: int) -> list[tuple]:
    """Every kernel variant the cells launch: ``("tma", tile, dtype, a_col, b_col, split)``
    and ``("pointer", config index, precision)``. Sizes are runtime arguments, so a tiny
    launch of each compiles what any size runs."""
    from kernel_portfolio.ops import matmul as mm

    found = {}
    configs = pointer_configs(grid)
    for cell in todo:
        m, n, k = cell.shape
        if cell.dtype == "float32":
            for i in range(len(configs)):
                for precision in FP32_PRECISIONS:
                    found[("pointer", i, precision)] = None
            continue
        products = [((m, n, k), False, False)]  # A, B row-major
        if cell.w_t:
            products.append(((m, n, k), False, True))
        if cell.mode == "fwdbwd":  # dA = dC B^T (B^T column-major), dB = A^T dC
            products += [((m, k, n), False, True), ((k, n, m), True, False)]
        for shape, a_col, b_col in products:
            for part, _, _ in mm._tma_plan(*shape, sms).parts(shape[1]):
                key = ("tma", part.tile.name, cell.dtype, a_col, b_col, min(part.split_k, 2))
                found[key] = None
        if cell.mode == "fwd":
            for tile in tiles(grid):
                for split in split_counts(tile, m, n, k, sms, grid.min_run)[:2]:
                    found[("tma", tile.name, cell.dtype, False, False, split)] = None
    return list(found)


def warm(batch: list[tuple], grid: Grid, device: str) -> int:
    """Launch each variant of ``batch`` once at a tiny size (a warm-pass task, in a worker)."""
    import torch

    from kernel_portfolio.contracts import direct_launches
    from kernel_portfolio.ops import matmul as mm

    configs = pointer_configs(grid)
    done = 0
    for variant in batch:
        if variant[0] == "pointer":
            _, index, precision = variant
            (m, n, k), dtype, a_col, b_col = (64, 64, 64), torch.float32, False, False
            fixed = {"path": "pointer", "config": configs[index], "precision": precision}
        else:  # 256 of K: two 128-wide steps, so a split launch has two runs
            _, name, dtype, a_col, b_col, split = variant
            (m, n, k), dtype = (64, 256, 256), getattr(torch, dtype)
            fixed = {"path": "tma", "plan": mm.TmaPlan(mm._TILES_BY_NAME[name], split)}
        a = torch.randn(k, m, device=device).t() if a_col else torch.randn(m, k, device=device)
        b = torch.randn(n, k, device=device).t() if b_col else torch.randn(k, n, device=device)
        out = torch.empty(m, n, dtype=dtype, device=device)
        try:
            with direct_launches():
                mm._launch_matmul(a.to(dtype), b.to(dtype), out, allow_tf32=False, **fixed)
        except Exception:  # the timed pass records what fails; here only compiles count
            continue
        done += 1
    if device == "cuda":
        torch.cuda.synchronize()
    return done


def warm_cache(todo: list[Cell], grid: Grid, run: Run, jobs: int, timeout_s: float) -> str:
    """Compile every variant of ``todo`` in ``jobs`` processes, for at most ``timeout_s``."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, wait

    found = variants(todo, grid, run.sm_count)
    batches = [found[i::jobs] for i in range(jobs) if found[i::jobs]]
    context = multiprocessing.get_context("spawn")  # CUDA cannot be forked
    pool = ProcessPoolExecutor(max_workers=len(batches), mp_context=context)
    futures = [pool.submit(warm, batch, grid, run.device) for batch in batches]
    finished, pending = wait(futures, timeout=timeout_s)
    pool.shutdown(wait=not pending, cancel_futures=True)
    compiled = sum(f.result() for f in finished if f.exception() is None)
    late = f", {len(pending)} workers still compiling at the warm timeout" if pending else ""
    return f"{compiled} of {len(found)} kernel variants launched in {len(batches)} processes{late}"


# ----------------------------------------------------------------- summary
def _geomean(values: list[float]) -> float | None:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def _fmt(value, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def _bucket(m: int) -> int:
    from kernel_portfolio.ops import matmul as mm

    return mm._bucket(m)


def forward_table(data: dict) -> dict:
    """``{(M, N, K, dtype): {impl: ratio against its cuBLAS}}``, forward, half precision."""
    table = {}
    for case in data["cases"]:
        if case["mode"] != "fwd" or case["dtype"] == "float32":
            continue
        m, n, k = case["shape"]
        ratios = {r["impl"]: r["median"] for r in case["ratios"]}
        if ratios:
            table[(m, n, k, case["dtype"])] = ratios
    return table


@contextlib.contextmanager
def rule_constants(**values):
    """``gemm_rule``'s plan table and constants set to ``values`` for the block, then restored."""
    from kernel_portfolio.ops import gemm_rule

    saved = {name: getattr(gemm_rule, name) for name in values}
    for name, value in values.items():
        setattr(gemm_rule, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(gemm_rule, name, value)


def row_score(row: tuple, members: list, sms: int) -> float | None:
    """Geometric mean over ``members`` of the measured ratio of what ``row`` plans for each.

    ``row`` is a one-row table's ``(tiles, max_split)``; a member is
    ``(ratios, M, N, K)``. None when a planned candidate was not timed (or
    failed) at some member.
    """
    from kernel_portfolio.ops import gemm_rule
    from kernel_portfolio.ops import matmul as mm

    got = []
    with rule_constants(TMA_RULES=(gemm_rule.TmaRule(None, *row),)):
        for ratios, m, n, k in members:  # the sweep times each tile over whole products
            plan = mm._tma_plan(m, n, k, sms, split_columns=False)
            ratio = ratios.get(tile_impl(plan.tile, plan.split_k))
            if ratio is None:
                return None
            got.append(ratio)
    return _geomean(got)


def _by_bucket(table: dict) -> dict:
    """``table``'s cells as ``{bucket: [(ratios, M, N, K), ...]}``."""
    by_bucket = {}
    for (m, n, k, _), ratios in table.items():
        by_bucket.setdefault(_bucket(m), []).append((ratios, m, n, k))
    return by_bucket


def _choose_rows(by_bucket: dict, sms: int) -> dict | None:
    """Each bucket's best row under the constants in force (:func:`fit`); None if one has none."""
    import itertools

    from kernel_portfolio.ops import matmul as mm

    names = [tile.name for tile in mm.TMA_TILES]
    rows = {}
    for bucket, members in sorted(by_bucket.items()):
        options = {}
        for name, split in itertools.product(names, MAX_SPLITS):
            score = row_score(((name,), split), members, sms)
            if score is not None:
                options[((name,), split)] = score
        top = list(dict.fromkeys(
            r[0][0] for r in sorted(options, key=options.get, reverse=True)
        ))[:FIRST_TILES]  # fmt: skip
        for first, second, split in itertools.product(top, names, MAX_SPLITS):
            score = row_score(((first, second), split), members, sms) if second != first else None
            if score is not None:
                options[((first, second), split)] = score
        if not options:
            return None
        row = max(options, key=options.get)
        # In catalogue order, so that a tie (two fronts planned alike) goes to the first tile
        # whatever the hash seed: a set here made the printed table differ from run to run.
        fronts = [((name, *row[0]), row[1]) for name in names if name not in row[0]]
        scored = {f: s for f in fronts if (s := row_score(f, members, sms)) is not None}
        front = max(scored, key=scored.get, default=None)
        if front is not None and scored[front] > (1 + MERGE_WITHIN) * options[row]:
            options[front] = scored[front]  # a wider tile first, where it alone fills the waves
            row = front
        previous = rows[max(rows)][0] if rows else None
        if previous in options and options[previous] >= (1 - MERGE_WITHIN) * options[row]:
            row = previous  # within the noise of the best: one row for both buckets
        others = [v for r, v in options.items() if r[0][0] != row[0][0]]
        rows[bucket] = (row, options[row], max(others, default=None))
    return rows


def fit(table: dict, sms: int) -> dict | None:
    """The plan table and constants with the best geometric-mean ratio over ``table``'s cells.

    For each combination of :data:`FIT_GRID`, each ``M`` bucket takes the row
    (one tile, or one of its :data:`FIRST_TILES` best tiles then any other,
    each with every ``max_split`` of :data:`MAX_SPLITS`) whose planned
    candidates have the best geometric mean over the bucket's cells; then a
    third tile in front of that row where the mean gains more than
    :data:`MERGE_WITHIN` (``_tma_plan`` takes a tile only where its work
    items fill the waves, so a wide tile in front serves the bucket's wide
    outputs and leaves the others to the row as it was); or the
    previous bucket's row where that is within :data:`MERGE_WITHIN` of the
    best; a row with a cell whose planned candidate was not timed (or failed)
    is not eligible. Each bucket also keeps the best mean of a row that starts
    with another tile (the margin of its choice). None when no combination
    has an eligible row for every bucket.
    """
    import itertools

    by_bucket = _by_bucket(table)
    best = None
    for values in itertools.product(*FIT_GRID.values()) if by_bucket else ():
        consts = dict(zip(FIT_GRID, values, strict=True))
        with rule_constants(**consts):
            rows = _choose_rows(by_bucket, sms)
        if rows is None:
            continue
        logs = [math.log(rows[b][1]) for b, members in by_bucket.items() for _ in members]
        if best is None or sum(logs) > best["score"]:
            best = {"consts": consts, "rows": rows, "score": sum(logs), "cells": len(logs)}
    if best is not None:
        best["gmean"] = math.exp(best["score"] / best["cells"])
    return best


def held_out(table: dict, sms: int, consts: dict) -> tuple[float, int] | None:
    """The fit's geometric mean on layer shapes it did not see, and over how many cells.

    For each ``(N, K)`` of ``table`` in turn, the rows are chosen (under
    ``consts``, as :func:`fit` chooses them) from the cells of the other
    shapes and scored on that shape's cells, in the buckets both hold. A
    table that holds its score here chose tiles for a class of shapes, not
    for the cells it was fitted on. None with fewer than two shapes.
    """
    shapes = sorted({(n, k) for (_, n, k, _) in table})
    logs = []
    with rule_constants(**consts):
        for shape in shapes if len(shapes) > 1 else ():
            seen = {key: r for key, r in table.items() if key[1:3] != shape}
            rows = _choose_rows(_by_bucket(seen), sms) or {}
            for bucket, members in _by_bucket(
                {k: r for k, r in table.items() if k not in seen}
            ).items():
                score = row_score(rows[bucket][0], members, sms) if bucket in rows else None
                if score is not None:
                    logs += [math.log(score)] * len(members)
    return (math.exp(sum(logs) / len(logs)), len(logs)) if logs else None


def table_code(best: dict) -> list[str]:
    """``TMA_RULES`` and the constants as code: consecutive buckets with one row merged."""
    merged = []
    for bucket, (row, _, _) in sorted(best["rows"].items()):
        if merged and merged[-1][1] == row:
            merged[-1][0] = bucket
        else:
            merged.append([bucket, row])
    merged[-1][0] = None
    lines = ["TMA_RULES = ("]
    for bound, (tiles, split) in merged:
        names = ", ".join(f'"{name}"' for name in tiles) + ("," if len(tiles) == 1 else "")
        lines.append(f"    TmaRule({bound}, ({names}), {split}),")
    lines.append(")")
    lines += [f"{name} = {value}" for name, value in best["consts"].items()]
    return lines


def target_for(m: int) -> float | None:
    return next((target for low, target in TARGETS if m >= low), None)


def _misses(ratio: float | None, m: int) -> bool:
    """Whether ours / cuBLAS at ``M = m``, ``ratio``, is under the target there."""
    target = target_for(m)
    return ratio is not None and target is not None and ratio < target


def _ratio_cell(ratio: float | None, m: int) -> str:
    """A table cell of ours / cuBLAS at ``M = m``, starred under its target."""
    return f"{_fmt(ratio, '.3f'):>14}{'*' if _misses(ratio, m) else ' '}"


def under_target(table: dict) -> list[str]:
    """The cells where ours misses its target, each with the fastest tile timed there.

    A miss that some timed tile meets is the plan table's to fix (a row, a
    constant); one that no timed tile meets is the tiles' (their rate, or how
    their waves fill the SMs). The last line counts both.
    """
    lines = ["== under the target: ours / cuBLAS, and the fastest timed tile (tile, split)"]
    misses = by_table = 0
    for (m, n, k, d), ratios in sorted(table.items()):
        ours, target = ratios.get("ours"), target_for(m)
        if not _misses(ours, m):
            continue
        timed = {name: r for name, r in ratios.items() if name.startswith("tile ")}
        best = max(timed, key=timed.get, default=None)
        misses += 1
        by_table += best is not None and timed[best] >= target
        fastest = f"{timed[best]:.3f} ({best.removeprefix('tile ')})" if best else "-"
        lines.append(f"  {m}x{n}x{k} {d}: ours {ours:.3f}, fastest tile {fastest}")
    lines.append(f"{misses} cells under the target; a timed tile meets it at {by_table} of them")
    return lines


def summary(data: dict) -> list[str]:
    """The summary lines of a result (or of a run's ``env`` and ``cases``; module docstring)."""
    sms = data["env"]["sm_count"]
    table = forward_table(data)
    lines = []
    best = fit(table, sms)
    current = {}
    for (m, *_), ratios in table.items():
        current.setdefault(_bucket(m), []).append(ratios.get("ours"))
    lines.append(
        "== chosen per bucket (geometric mean of the planned candidate / cuBLAS; other: the "
        "best row with another first tile)"
    )
    if best is None:
        lines.append("no cells, or no combination of FIT_GRID with a timed candidate at each")
    else:
        lines.append(
            f"{'bucket':>7} {'row (<=: most runs)':<48} {'gmean':>6} {'other':>6} {'ours now':>8}"
        )
        for bucket, (row, score, runner_up) in sorted(best["rows"].items()):
            now = [v for v in current.get(bucket, []) if v is not None]
            lines.append(
                f"{bucket:>7} {' | '.join(row[0]) + f' <={row[1]}':<48} {score:>6.3f} "
                f"{_fmt(runner_up, '6.3f')} "
                f"{_fmt(_geomean(now), '8.3f')}"
            )
        now = [v for vals in current.values() for v in vals if v is not None]
        unseen = held_out(table, sms, best["consts"])
        lines.append(
            f"fit: {best['gmean']:.3f} over {best['cells']} cells; on a layer shape left out "
            f"of its fit: {_fmt(unseen and unseen[0], '.3f')} over {unseen and unseen[1]}; "
            f"ours as measured: {_fmt(_geomean(now), '.3f')} over {len(now)}. "
            "Set in ops/gemm_rule.py:"
        )
        lines += ["    " + line for line in table_code(best)]
    lines.append("== ours / cuBLAS, forward (* under the target: 0.90 from M=64, 0.97 from 1024)")
    columns = [(n, k, d) for n, k in MODEL_NK for d in ("float16", "bfloat16")]
    header = " ".join(
        f"{f'{n}x{k}':>10} {'f16' if d == 'float16' else 'bf16':>4}" for n, k, d in columns
    )
    lines.append(f"{'M':>6} {header} {'w.T bf16':>9}")
    for m in sorted({m for (m, n, k, _) in table if (n, k) in MODEL_NK}):
        row = [_ratio_cell(table.get((m, n, k, d), {}).get("ours"), m) for n, k, d in columns]
        w_t = table.get((m, *W_T_NK, "bfloat16"), {}).get("ours w.T")
        lines.append(f"{m:>6}{''.join(row)} {_fmt(w_t, '.3f'):>8}")
    other_m = sorted({m for (m, n, k, _) in table if (n, k) in OTHER_NK})
    if other_m:
        lines.append(f"{'M':>6} " + " ".join(f"{f'{n}x{k}':>10} bf16" for n, k in OTHER_NK))
    for m in other_m:
        cells = (table.get((m, n, k, CLASS_DTYPE), {}).get("ours") for n, k in OTHER_NK)
        lines.append(f"{m:>6}" + "".join(_ratio_cell(ratio, m) for ratio in cells))
    layers = {*MODEL_NK, *OTHER_NK}
    others = sorted((key, r.get("ours")) for key, r in table.items() if key[1:3] not in layers)
    for (m, n, k, d), ratio in others:
        lines.append(f"  {m}x{n}x{k} {d}: {_fmt(ratio, '.3f')}")
    lines += under_target(table)
    for case in data["cases"]:
        if case["mode"] == "fwd" and case["dtype"] == "float32":
            lines.append(f"== float32 {'x'.join(map(str, case['shape']))}: speed, error")
            rows = []
            for name, rec in case["impls"].items():
                ratio = next((r["median"] for r in case["ratios"] if r["impl"] == name), None)
                rows.append((ratio or 0.0, name, rec))
            for ratio, name, rec in sorted(rows, reverse=True, key=lambda r: r[0]):
                status = rec["status"] if rec["status"] != "ok" else ""
                lines.append(
                    f"  {name:<34} {_fmt(ratio or None, '.3f'):>6} x cuBLAS  "
                    f"rel err {_fmt(rec['rel_error'], '.1e')} {status}"
                )
    suite = {}
    if SUITE_RESULT.exists():
        for case in json.loads(SUITE_RESULT.read_text())["cases"]:
            for r in case["ratios"]:
                if r["impl"] == "ours" and r["baseline"] == "cublas":
                    suite[case["id"]] = r["median"]
    lines.append("== forward + backward, ours / cuBLAS (the committed suite's ratio beside it)")
    for case in data["cases"]:
        if case["mode"] == "fwdbwd":
            ratio = next((r["median"] for r in case["ratios"] if r["impl"] == "ours"), None)
            plans = ", ".join(f"{p} {t}" for p, t in case.get("plans", {}).items())
            before = _fmt(suite.get(case["id"]), ".3f")
            lines.append(f"  {case['id']:<36} {_fmt(ratio, '.3f')} (suite {before})  {plans}")
    return lines


# ------------------------------------------------------------------- main
def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="results folder, e.g. results/h200")
    parser.add_argument("--summary", help="print the summary of this saved result and stop")
    parser.add_argument("--seed", type=int, default=0, help="seed of the inputs and orders")
    parser.add_argument(
        "--budget-s",
        type=float,
        default=330.0,
        help="stop starting cells this long after the start (warm pass included)",
    )
    parser.add_argument(
        "--cell-budget-s",
        type=float,
        default=20.0,
        help="stop checking a cell's implementations after this long (those left are skipped)",
    )
    parser.add_argument(
        "--warm-jobs",
        type=int,
        default=0,
        help="compile every kernel variant in this many processes first (0: none)",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="tiny grid under TRITON_INTERPRET=1 on the CPU"
    )
    args = parser.parse_args(argv)
    if (args.out is None) == (args.summary is None):
        parser.error("give one of --out (a run) and --summary (a saved result)")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the sweep and write ``<out>/gemm_tune.json`` (+ ``.log``), or print a summary."""
    from kernel_portfolio.cli import UserError

    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    try:
        if args.summary:
            path = Path(args.summary)
            if not path.is_file():
                raise UserError(f"no such result: {path}")
            print("\n".join(summary(json.loads(path.read_text()))))
            return 0
        return sweep(args, shlex.join(["python", SCRIPT, *argv]))
    except UserError as err:
        print(f"gemm_tune: {err}", file=sys.stderr)
        return err.code


def sweep(args: argparse.Namespace, command: str) -> int:
    """The sweep itself (see the module docstring)."""
    import torch

    start = time.perf_counter()
    deadline = start + args.budget_s
    run = start_run(args.dry_run, command)
    grid = DRY if args.dry_run else FULL
    todo = cells(grid, args.seed)
    full = cells(FULL, args.seed)
    impls = sum(
        2
        + (2 if c.w_t else 0)
        + sum(len(split_counts(t, *c.shape, run.sm_count, FULL.min_run)) for t in tiles(FULL))
        for c in full
        if c.mode == "fwd" and c.dtype != "float32"
    )
    run.log(
        f"full grid: {len(full)} cells, {impls} timed forward implementations in half "
        f"precision, {len(variants(full, FULL, run.sm_count))} kernel variants"
    )
    if args.warm_jobs > 0:
        warm_start = time.perf_counter()
        timeout = max(0.0, min(0.4 * args.budget_s, deadline - warm_start))
        note = warm_cache(todo, grid, run, args.warm_jobs, timeout)
        run.log(f"warm pass: {note}, {time.perf_counter() - warm_start:.0f} s")
    left = deadline - time.perf_counter()
    run.log(f"{len(todo)} cells, budget {args.budget_s:.0f} s ({left:.0f} s left)")
    records, lost = [], None
    for i, cell in enumerate(todo, 1):
        if lost is not None:
            outcomes, plans = skipped(lost)
        elif time.perf_counter() >= deadline:
            reason = "the run's time budget (--budget-s) was spent before this cell"
            outcomes, plans = skipped(reason)
        else:
            cell_deadline = min(deadline, time.perf_counter() + args.cell_budget_s)
            try:
                outcomes, plans = run_cell(run, cell, grid, args.seed, cell_deadline)
            except ContextLost as exc:
                outcomes, plans = exc.outcomes, exc.plans
                lost = f"not run: the CUDA context was lost in {cell.id} ({exc})"
                run.log(f"stopping: {lost}")
            if not args.dry_run and lost is None:
                torch.cuda.empty_cache()
        record = case_record(cell, outcomes, plans, run.copy["gbps"])
        records.append(record)
        ok = sum(out.status == "ok" for out in outcomes.values())
        ours = next((r["median"] for r in record["ratios"] if r["impl"] == "ours"), None)
        ratios = [r["median"] for r in record["ratios"] if r["impl"].startswith("tile ")]
        best = max(ratios, default=None)
        run.log(
            f"[{i}/{len(todo)}] {cell.id}: {ok}/{len(outcomes)} ok, ours {_fmt(ours, '.3f')}"
            f" ({plans.get('ours') or plans.get('forward', '')}), best tile {_fmt(best, '.3f')}"
            f" ({time.perf_counter() - start:.0f} s)"
        )
    notes = (
        "events: CUDA events around each call, the L2 overwritten before it and the stream "
        "spinning for a lead (metric lead_us) first; every implementation checked on a "
        "NaN-poisoned output against a float64 product on the device before timing; ratios "
        "per visit against cuBLAS (w.T implementations against cuBLAS on the same W.T), "
        "summarised over visits. Case field plans: what ours launches (tile, split-K runs). "
        "first_call_ms: the first call, compile or cache load included."
    )
    if args.dry_run:
        notes += " DRY RUN on the CPU under the Triton interpreter: nothing here is a measurement."
    for line in summary({"env": run.env, "cases": records}):
        run.log(line)
    data_path = run.save(
        suite="gemm_tune",
        command=command,
        sources=list(SOURCES),
        timing={
            "cache": "cold",
            "visits": grid.visits,
            "samples_per_visit": grid.samples,
            "seed": args.seed,
            "budget_s": args.budget_s,
            "notes": notes,
        },
        cases=records,
        out_dir=args.out,
    )
    print(f"wrote {data_path} ({time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
