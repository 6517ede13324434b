"""Chunk rules for wide rows: time every row plan and chunk choice over a grid of shapes.

Re-run on the H200 (two independent runs, each writing
``results/h200/chunk_rules_run<N>.json`` and ``.log``; with every kernel
variant in Triton's on-disk cache the two take about 7 minutes; ``--budget-s``
caps each)::

    python scripts/chunk_rules_sweep.py --run 1 --warm-jobs 16 --budget-s 250 --out results/h200
    python scripts/chunk_rules_sweep.py --run 2 --budget-s 165 --out results/h200

``--warm-jobs N`` first compiles every kernel variant of the grid in N
processes (each calls every plan once at the cell's width on two rows: the
row count is a runtime argument, so the variants are the ones the timed cells
use). Without it a run on a fresh machine spends its budget compiling, one
variant after another, and times only a few cells.

then fit the rule on run 1 and score it on run 2 (CPU, seconds)::

    python scripts/chunk_rules_fit.py --out results/h200

CPU plumbing check (Triton interpreter, tiny grid; not a measurement)::

    TRITON_INTERPRET=1 python scripts/chunk_rules_sweep.py --run 1 --dry-run --out /tmp/chunk

The grid: row counts from well below to well above the H200's 132 SMs, times
row widths from 8192 to 2^20 columns (odd ones among them), for softmax and RMSNorm, forward alone
and forward plus backward (the backward kernels take the forward's plan), in
float16. Each cell times every plan the kernels offer: ``block`` (the whole
row in one program) where the row's power-of-two width is at most
:data:`BLOCK_MAX_COLS`, and ``looped`` (one program per row walks it in chunks)
and ``split`` (``plans.split_count`` programs share each row) with every chunk
width in :data:`CHUNKS` up to the row's width and every warp count in
:data:`WARPS`. Cells over :data:`MAX_TENSOR_BYTES` per tensor
are recorded as skipped, and so are the cells left when ``--budget-s`` runs out.

Method: per cell, fresh random inputs (seeded by run and cell), every plan
checked against the float64 reference (``kernel_portfolio.bench.runner``) on
outputs poisoned with NaN, then captured in a CUDA graph (one call; this takes
the host's launch cost out, which would otherwise swamp the small cells) and
timed by CUDA events around each replay with the L2 overwritten first. The
plans are visited in a seeded random order per visit; the cells too run in a
seeded random order, different for each run. Each plan's regret against the
cell's fastest plan (in this run) is saved as the metric ``regret_pct``.
"""

from __future__ import annotations

import argparse
import random
import shlex
import sys
import time
from dataclasses import dataclass

from chunk_rules_fit import impl_name, next_pow2
from sweep_support import SUPPORT_SOURCES, Counts, Run, start_run

SCRIPT = "scripts/chunk_rules_sweep.py"
OPS = ("softmax", "rms_norm")
MODES = ("fwd", "fwdbwd")
#: Row counts: well below to well above the H200's 132 SMs (1, 2 and 4: a decode step's few rows).
ROWS = (1, 2, 4, 16, 66, 132, 264, 1024)
#: Widths: from the widest block down in registers to 2^20; 32769 is one past a power
#: of two, 50257 (GPT-2's vocabulary) an odd width whose rows the kernels peel.
WIDTHS = (8192, 16384, 32769, 50257, 65536, 131072, 262144, 1 << 20)
#: Widest power-of-two row a ``block`` plan may hold (64 KiB of float16 per program).
BLOCK_MAX_COLS = 32768
#: Largest tensor a cell may use (``rows * width * 2`` bytes).
MAX_TENSOR_BYTES = 1 << 30
#: Chunk widths and warp counts of the looped and split plans (and warps of ``block``).
CHUNKS = (2048, 4096, 8192, 16384)
WARPS = (4, 8, 16)
DTYPE = "float16"
EPS = 1e-6
SOURCES = (
    SCRIPT,
    "scripts/chunk_rules_fit.py",
    "src/kernel_portfolio/ops/softmax.py",
    "src/kernel_portfolio/ops/rms_norm.py",
    "src/kernel_portfolio/plans.py",
    "src/kernel_portfolio/bench/runner.py",
    "src/kernel_portfolio/bench/suites.py",
    "src/kernel_portfolio/reference.py",
    "src/kernel_portfolio/contracts.py",
)


@dataclass(frozen=True)
class Grid:
    """The shapes, plan choices and sample counts of one run (the H200 run, or a dry run)."""

    rows: tuple[int, ...]
    widths: tuple[int, ...]
    chunks: tuple[int, ...]
    warps: tuple[int, ...]
    block_max_cols: int
    visits: int
    samples: int


FULL = Grid(ROWS, WIDTHS, CHUNKS, WARPS, BLOCK_MAX_COLS, visits=4, samples=2)
#: A dry run: the same kinds of cell at sizes the interpreter runs in seconds.
DRY = Grid((3,), (64, 129), (32,), (4,), 64, visits=2, samples=1)


def candidates(n_rows: int, n_cols: int, sm_count: int, grid: Grid):
    """Every plan timed for one shape, in a fixed order.

    ``block`` where the power-of-two width fits :attr:`Grid.block_max_cols`;
    ``looped`` and ``split`` for every chunk up to that width (a split plan only
    where the row has at least two chunks).
    """
    from kernel_portfolio.plans import RowPlan, split_count

    width = next_pow2(n_cols)
    plans = []
    if width <= grid.block_max_cols:
        plans += [RowPlan("block", width, w) for w in grid.warps]
    for chunk in (c for c in grid.chunks if c <= width):
        plans += [RowPlan("looped", chunk, w) for w in grid.warps]
    for chunk in (c for c in grid.chunks if c <= width and c < n_cols):
        splits = split_count(n_rows, n_cols, chunk, sm_count)
        plans += [RowPlan("split", chunk, w, splits) for w in grid.warps]
    return plans


@dataclass(frozen=True)
class Cell:
    """One grid cell: an operator, a mode and a shape."""

    op: str
    mode: str
    n_rows: int
    n_cols: int

    @property
    def id(self) -> str:
        return f"{self.op}/{self.mode}/{self.n_rows}x{self.n_cols}/{DTYPE}"

    def suite_case(self):
        """The harness's :class:`~kernel_portfolio.bench.suites.Case` for this cell."""
        from kernel_portfolio.bench.suites import Case

        shape = (self.n_rows, self.n_cols)
        return Case(self.op, self.mode, shape, DTYPE, "cuda_graph", ("ours",))


def cells(grid: Grid, seed: int) -> list[Cell]:
    """Every cell of the grid, in a seeded random order."""
    out = [
        Cell(op, mode, r, w) for op in OPS for mode in MODES for r in grid.rows for w in grid.widths
    ]
    random.Random(seed).shuffle(out)
    return out


def plan_fn(op: str, plan):
    """``kernel_portfolio``'s operator with ``plan`` forced, as the harness calls it."""
    import kernel_portfolio as kp

    if op == "softmax":
        return lambda x: kp.softmax(x, plan=plan)
    return lambda x, w: kp.rms_norm(x, w, eps=EPS, plan=plan)


def regret_metrics(outcomes: dict) -> None:
    """Add each measured plan's ``regret_pct`` against the cell's fastest plan, in place."""
    import statistics

    medians = {
        name: statistics.median(s for visit in out.visits for s in visit)
        for name, out in outcomes.items()
        if out.status == "ok"
    }
    if not medians:
        return
    best = min(medians.values())
    for name, median in medians.items():
        outcomes[name].metrics["regret_pct"] = {"value": 100.0 * (median / best - 1.0), "unit": "%"}


def run_cell(run: Run, cell: Cell, grid: Grid, seed: int) -> dict:
    """Check and time every plan of one cell; returns ``{impl name: ImplOutcome}``."""
    from kernel_portfolio.bench import runner, timing
    from kernel_portfolio.bench.records import ImplOutcome

    case = cell.suite_case()
    inputs = runner.make_inputs(case, seed, device=run.device)
    outcomes, ready = {}, {}
    for plan in candidates(cell.n_rows, cell.n_cols, run.sm_count, grid):
        name = impl_name(plan.kind, plan.block, plan.num_warps)
        metrics = {}
        if plan.kind == "split":
            metrics["splits"] = {"value": plan.splits, "unit": "programs/row"}
        fn = plan_fn(cell.op, plan)
        try:
            rel = runner.check(case, fn, inputs)
            call, prepare = runner.make_call(case, fn, inputs)
            if run.dry_run:
                timed = call if prepare is None else (lambda c=call, p=prepare: (p(), c()))
            else:
                timed = timing.capture_graph(call, 1, prepare=prepare).replay
        except Exception as exc:  # a plan that fails its check or to compile is recorded
            outcomes[name] = ImplOutcome("failed", f"{type(exc).__name__}: {exc}"[:300])
            continue
        outcomes[name] = ImplOutcome("ok", None, rel, [], None, metrics)
        ready[name] = timed
    run.busy(20.0)
    order = random.Random(f"{seed}:{cell.id}")
    names = list(ready)
    for _ in range(grid.visits):
        order.shuffle(names)
        for name in names:
            outcomes[name].visits.append(run.time(ready[name], grid.samples, cold=True))
    regret_metrics(outcomes)
    return outcomes


#: Rows of a warm-pass call: the row count is a runtime argument of every row
#: kernel, so two rows compile what any row count runs.
WARM_ROWS = 2


def warm_cell(op: str, mode: str, n_cols: int, plans: list, device: str) -> int:
    """Call ``plans`` once each on a ``WARM_ROWS x n_cols`` input (a warm-pass task).

    Runs in a worker process: compiling is all it is for, so outputs are not
    checked (the timed pass checks every plan). Returns the number of calls.
    """
    import torch

    from kernel_portfolio.bench import runner

    case = Cell(op, mode, WARM_ROWS, n_cols).suite_case()
    inputs = runner.make_inputs(case, 0, device=device)
    for plan in plans:
        call, prepare = runner.make_call(case, plan_fn(op, plan), inputs)
        if prepare is not None:
            prepare()
        call()
    if device == "cuda":
        torch.cuda.synchronize()
    return len(plans)


def warm_cache(todo: list[Cell], grid: Grid, run: Run, jobs: int) -> int:
    """Compile every kernel variant the cells in ``todo`` use, in ``jobs`` processes.

    One task per operator, mode and width, holding the union of the plans of
    its row counts (a split plan's program count is a runtime argument too).
    Returns the number of plan calls made.
    """
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    tasks: dict[tuple, dict] = {}
    for cell in todo:
        if cell.n_rows * cell.n_cols * 2 > MAX_TENSOR_BYTES:
            continue
        plans = tasks.setdefault((cell.op, cell.mode, cell.n_cols), {})
        for plan in candidates(cell.n_rows, cell.n_cols, run.sm_count, grid):
            plans.setdefault((plan.kind, plan.block, plan.num_warps), plan)
    context = multiprocessing.get_context("spawn")  # CUDA cannot be forked
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        futures = [
            pool.submit(warm_cell, op, mode, n_cols, list(plans.values()), run.device)
            for (op, mode, n_cols), plans in tasks.items()
        ]
        return sum(f.result() for f in futures)


def case_record(cell: Cell, outcomes: dict, copy_gbps: float) -> dict:
    """The result record of one cell (no ratios: the regret metrics compare the plans)."""
    from kernel_portfolio.bench.records import impl_record

    case = cell.suite_case()
    counts = Counts(case.bytes, None)
    return {
        "id": cell.id,
        "op": cell.op,
        "mode": cell.mode,
        "shape": [cell.n_rows, cell.n_cols],
        "dtype": DTYPE,
        "timer": "cuda_graph",
        "cache": "cold",
        "bytes": case.bytes,
        "bytes_formula": case.bytes_formula,
        "flops": None,
        "flops_formula": None,
        "depends_on": [*SOURCES, *SUPPORT_SOURCES],
        "impls": {name: impl_record(counts, out, copy_gbps) for name, out in outcomes.items()},
        "ratios": [],
    }


def skipped(cell: Cell, grid: Grid, sm_count: int, reason: str) -> dict:
    """Outcomes of a cell that is not run: every plan skipped, with the reason."""
    from kernel_portfolio.bench.records import ImplOutcome

    return {
        impl_name(p.kind, p.block, p.num_warps): ImplOutcome("skipped", reason)
        for p in candidates(cell.n_rows, cell.n_cols, sm_count, grid)
    }


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=int, choices=(1, 2), required=True, help="run number")
    parser.add_argument("--out", required=True, help="results folder, e.g. results/h200")
    parser.add_argument(
        "--seed", type=int, default=None, help="seed of inputs and orders (default: the run number)"
    )
    parser.add_argument(
        "--budget-s",
        type=float,
        default=180.0,
        help="stop starting new cells after this many seconds; the rest are recorded as skipped",
    )
    parser.add_argument(
        "--warm-jobs",
        type=int,
        default=0,
        help="compile every kernel variant in this many processes before timing (0: none)",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="tiny grid under TRITON_INTERPRET=1 on the CPU"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run one pass over the grid and write ``<out>/chunk_rules_run<N>.json`` (+ ``.log``)."""
    from kernel_portfolio.cli import UserError

    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    try:
        return sweep(args, shlex.join(["python", SCRIPT, *argv]))
    except UserError as err:
        print(f"chunk_rules_sweep: {err}", file=sys.stderr)
        return err.code


def sweep(args: argparse.Namespace, command: str) -> int:
    """The sweep itself (see the module docstring)."""
    import torch

    run = start_run(args.dry_run, command)
    grid = DRY if args.dry_run else FULL
    seed = args.run if args.seed is None else args.seed
    todo = cells(grid, seed)
    if args.warm_jobs > 0:
        warm_start = time.perf_counter()
        variants = warm_cache(todo, grid, run, args.warm_jobs)
        run.log(
            f"warm pass: {variants} plan calls in {args.warm_jobs} processes, "
            f"{time.perf_counter() - warm_start:.0f} s (not counted in the budget)"
        )
    run.log(f"run {args.run}, seed {seed}: {len(todo)} cells, budget {args.budget_s:.0f} s")
    records, start = [], time.perf_counter()
    for i, cell in enumerate(todo, 1):
        elapsed = time.perf_counter() - start
        if cell.n_rows * cell.n_cols * 2 > MAX_TENSOR_BYTES:
            reason = "memory cap: a tensor of this cell is larger than MAX_TENSOR_BYTES"
            outcomes = skipped(cell, grid, run.sm_count, reason)
        elif elapsed >= args.budget_s:
            reason = "the run's time budget (--budget-s) was spent before this cell"
            outcomes = skipped(cell, grid, run.sm_count, reason)
        else:
            outcomes = run_cell(run, cell, grid, seed)
            if not args.dry_run:
                torch.cuda.empty_cache()
        records.append(case_record(cell, outcomes, run.copy["gbps"]))
        best = [n for n, o in outcomes.items() if "regret_pct" in o.metrics]
        best = min(best, key=lambda n: outcomes[n].metrics["regret_pct"]["value"], default=None)
        status = f"best {best}" if best else next(iter(outcomes.values())).reason
        run.log(f"[{i}/{len(todo)}] {cell.id}: {status} ({time.perf_counter() - start:.0f} s)")
    suite = f"chunk_rules_run{args.run}"
    notes = (
        "cuda_graph: each plan's call (forward, or forward plus backward through "
        "autograd) captured once in a CUDA graph; each sample is one replay between "
        "CUDA events with the L2 overwritten before it. regret_pct: the plan's median "
        "over the fastest plan's median in the same cell and run, minus 1, in percent."
    )
    if args.dry_run:
        notes += " DRY RUN on the CPU under the Triton interpreter: nothing here is a measurement."
    path = run.save(
        suite=suite,
        command=command,
        sources=list(SOURCES),
        timing={
            "cache": "cold",
            "visits": grid.visits,
            "samples_per_visit": grid.samples,
            "seed": seed,
            "budget_s": args.budget_s,
            "notes": notes,
        },
        cases=records,
        out_dir=args.out,
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
