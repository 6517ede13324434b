"""Fit the row-plan rule for wide rows on one run of the chunk-rules grid; score it on the other.

Re-run (CPU, seconds; reads the two committed grid runs)::

    python scripts/chunk_rules_fit.py \\
        --fit results/h200/chunk_rules_run1.json --score results/h200/chunk_rules_run2.json \\
        --out results/h200

It writes ``results/h200/chunk_rules_fit.json`` (+ ``.log``) in the project's result
schema: one case per grid cell whose implementations are the rules compared
(``fitted``: thresholds fitted on the first run; ``current``: ``plans.choose`` as it
is now; ``run1-best``: each cell's best plan in the first run, a lookup table that
no rule can beat on the run it was fitted on) with their regret on the *other*
run in ``metrics``, plus one summary case per rule. The fitted thresholds are in
the log, in the console output, and in ``timing.notes``.

Regret of a plan in a cell is ``median(plan) / median(best plan in that cell) - 1``,
with both medians from the same run. A rule that picks a plan the run did not
measure (skipped or failed) scores an infinite regret there, so the fit never
chooses one.

The rule family mirrors ``kernel_portfolio.plans.choose``: split the row across
programs when there are few rows and the row is wide; otherwise hold the row in
one block when its power-of-two width fits; otherwise loop over chunks, with one
chunk and warp count up to a width threshold and another beyond it.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import itertools
import math
import shlex
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

SCRIPT = "scripts/chunk_rules_fit.py"

#: Regret above which a cell counts as badly served (a fraction, 0.10 = 10 %).
BAD_REGRET = 0.10


def next_pow2(n: int) -> int:
    """Smallest power of two ``>= n`` (1 for ``n <= 1``)."""
    return 1 << max(0, int(n) - 1).bit_length()


def impl_name(kind: str, block: int, num_warps: int) -> str:
    """The implementation name a plan is recorded under, e.g. ``looped-4096-w8``."""
    return f"{kind}-{block}-w{num_warps}"


def parse_impl(name: str) -> tuple[str, int, int]:
    """Split an implementation name into ``(kind, block, num_warps)``.

    Raises:
        ValueError: ``name`` is not of the form ``<kind>-<block>-w<warps>``.
    """
    parts = name.split("-")
    if len(parts) != 3 or not parts[2].startswith("w"):
        raise ValueError(f"implementation name must look like 'looped-4096-w8', got {name!r}")
    kind, block, warps = parts
    if kind not in ("block", "looped", "split"):
        raise ValueError(f"implementation {name!r}: unknown plan kind {kind!r}")
    try:
        return kind, int(block), int(warps[1:])
    except ValueError:
        raise ValueError(f"implementation {name!r}: block and warps must be integers") from None


@dataclass(frozen=True)
class Cell:
    """One grid cell of one run: an operator, a mode and a shape, and every plan's median.

    Attributes:
        op: ``"softmax"`` or ``"rms_norm"``.
        mode: ``"fwd"`` or ``"fwdbwd"``.
        n_rows: Rows.
        n_cols: Row width.
        medians: Median time (ms) of every plan measured in this cell (status ok).
        case_id: The case's id in its result.
    """

    op: str
    mode: str
    n_rows: int
    n_cols: int
    medians: Mapping[str, float]
    case_id: str = ""

    @property
    def key(self) -> tuple[str, str, int, int]:
        return (self.op, self.mode, self.n_rows, self.n_cols)

    @functools.cached_property
    def best(self) -> str:
        """The fastest plan (ties go to the name that sorts first)."""
        return min(sorted(self.medians), key=self.medians.__getitem__)

    def regret(self, impl: str) -> float:
        """``median(impl) / median(best) - 1``; infinite when ``impl`` was not measured."""
        if impl not in self.medians:
            return math.inf
        return self.medians[impl] / self.medians[self.best] - 1.0


def cells_from_result(data: Mapping) -> dict[tuple[str, str, int, int], Cell]:
    """Read the grid cells of one chunk-rules run (a result dict in the project schema).

    Cases with no successfully measured plan are left out.

    Raises:
        ValueError: a case's shape is not ``[rows, cols]`` or an implementation name
            does not parse.
    """
    cells = {}
    for case in data["cases"]:
        shape = case["shape"]
        if len(shape) != 2:
            raise ValueError(f"case {case['id']}: shape must be [rows, cols], got {shape}")
        medians = {}
        for name, impl in case["impls"].items():
            parse_impl(name)
            if impl["status"] == "ok":
                medians[name] = float(impl["median_ms"])
        if medians:
            rows, cols = int(shape[0]), int(shape[1])
            cell = Cell(case["op"], case["mode"], rows, cols, medians, case["id"])
            cells[cell.key] = cell
    return cells


def cooperative(n_rows: int, n_cols: int, chunk: int, sm_count: int) -> bool:
    """Whether a split plan of ``chunk``-wide chunks, one a program, fits the SMs (0: never).

    The same test as ``plans.choose``'s for its cooperative chunk.
    """
    return chunk > 0 and n_rows * -(-n_cols // min(chunk, next_pow2(n_cols))) <= sm_count


@dataclass(frozen=True)
class ChunkRule:
    """A row-plan rule for rows of 8192 columns and wider.

    ``split`` when ``n_rows <= split_rows_per_sm * sm_count`` and ``n_cols >
    split_min_cols``: with ``coop_chunk``/``coop_warps`` where a program a chunk over
    all rows fits the SMs (``n_rows * ceil(n_cols / coop_chunk) <= sm_count``: the
    kernels then run the split forward as one cooperative launch; 0 = never), else
    ``split_chunk``/``split_warps``; else ``block`` when the row's power-of-two width is
    at most ``max_block_cols``; else ``looped``, with ``narrow_chunk``/``narrow_warps``
    up to ``narrow_max_cols`` columns and ``wide_chunk``/``wide_warps`` beyond.
    Chunks never exceed the row's power-of-two width.
    """

    split_rows_per_sm: float
    split_min_cols: int
    split_chunk: int
    split_warps: int
    max_block_cols: int
    block_warps: int
    narrow_max_cols: int
    narrow_chunk: int
    narrow_warps: int
    wide_chunk: int
    wide_warps: int
    coop_chunk: int = 0
    coop_warps: int = 0

    def kind(self, n_rows: int, n_cols: int, sm_count: int) -> str:
        """The plan kind for a shape."""
        if n_rows <= self.split_rows_per_sm * sm_count and n_cols > self.split_min_cols:
            return "split"
        if next_pow2(n_cols) <= self.max_block_cols:
            return "block"
        return "looped"

    def impl(self, n_rows: int, n_cols: int, sm_count: int) -> str:
        """The implementation name of the plan this rule picks for a shape."""
        width = next_pow2(n_cols)
        kind = self.kind(n_rows, n_cols, sm_count)
        if kind == "split":
            if cooperative(n_rows, n_cols, self.coop_chunk, sm_count):
                return impl_name("split", min(self.coop_chunk, width), self.coop_warps)
            return impl_name("split", min(self.split_chunk, width), self.split_warps)
        if kind == "block":
            return impl_name("block", width, self.block_warps)
        if n_cols <= self.narrow_max_cols:
            return impl_name("looped", min(self.narrow_chunk, width), self.narrow_warps)
        return impl_name("looped", min(self.wide_chunk, width), self.wide_warps)


@dataclass(frozen=True)
class Score:
    """How well a rule serves a set of cells.

    Attributes:
        mean: Mean regret over the cells (a fraction).
        worst: Largest regret.
        bad: Cells whose regret exceeds :data:`BAD_REGRET`.
        cells: Number of cells scored.
        regrets: Regret per cell key.
        picks: Implementation picked per cell key.
    """

    mean: float
    worst: float
    bad: int
    cells: int
    regrets: Mapping[tuple, float]
    picks: Mapping[tuple, str]


def score(pick, cells: Iterable[Cell]) -> Score:
    """Score a picking function ``pick(cell) -> impl name`` over ``cells``.

    Raises:
        ValueError: ``cells`` is empty.
    """
    cells = list(cells)
    if not cells:
        raise ValueError("cells is empty: nothing to score")
    picks = {c.key: pick(c) for c in cells}
    regrets = {c.key: c.regret(picks[c.key]) for c in cells}
    values = list(regrets.values())
    return Score(
        mean=sum(values) / len(values),
        worst=max(values),
        bad=sum(v > BAD_REGRET for v in values),
        cells=len(values),
        regrets=regrets,
        picks=picks,
    )


def rule_picker(rule: ChunkRule, sm_count: int):
    """A picking function for :func:`score` that applies ``rule``."""
    return lambda cell: rule.impl(cell.n_rows, cell.n_cols, sm_count)


def _best_option(options, cells, impl_of) -> tuple[tuple[float, float], object]:
    """The option minimising (total regret, worst regret) over ``cells``; first wins ties."""
    best_cost, best = (math.inf, math.inf), None
    for option in options:
        regrets = [c.regret(impl_of(option, c)) for c in cells]
        cost = (sum(regrets), max(regrets, default=0.0))
        if best is None or cost < best_cost:
            best_cost, best = cost, option
    return best_cost, best


def fit(cells: Iterable[Cell], sm_count: int) -> ChunkRule:
    """Fit a :class:`ChunkRule` that minimises mean regret (then worst regret) over ``cells``.

    The search is exhaustive over thresholds placed at the grid's own row counts
    and widths, and over the chunk widths and warp counts measured. Each threshold
    choice splits the cells into split, block and looped groups whose chunk and
    warp choices are independent, so each group is fitted on its own.

    Raises:
        ValueError: ``cells`` is empty or ``sm_count`` is not positive.
    """
    cells = list(cells)
    if not cells:
        raise ValueError("cells is empty: nothing to fit")
    if sm_count < 1:
        raise ValueError(f"sm_count must be positive, got {sm_count}")
    rows = sorted({c.n_rows for c in cells})
    widths = sorted({c.n_cols for c in cells})
    measured = [parse_impl(name) for c in cells for name in c.medians]
    pairs = sorted({(block, warps) for kind, block, warps in measured if kind != "block"})
    warps_ = sorted({warps for _, _, warps in measured})
    block_widths = sorted({block for kind, block, _ in measured if kind == "block"}) or [0]

    def looped(option, cell):
        chunk, warps = option
        return impl_name("looped", min(chunk, next_pow2(cell.n_cols)), warps)

    best_cost, best_rule = (math.inf, math.inf), None
    for split_rows, split_min, max_block in itertools.product(
        [0, *rows], [0, *widths[:-1]], block_widths
    ):
        ratio = split_rows / sm_count
        probe = ChunkRule(ratio, split_min, 0, 0, max_block, 0, 0, 0, 0, 0, 0)
        groups = {"split": [], "block": [], "looped": []}
        for c in cells:
            groups[probe.kind(c.n_rows, c.n_cols, sm_count)].append(c)
        split_cost, (coop, split_chunk, split_warps) = _fit_split(pairs, groups["split"], sm_count)
        block_cost, block_warps = _best_option(
            warps_, groups["block"], lambda w, c: impl_name("block", next_pow2(c.n_cols), w)
        )
        loop_cost, loop = (math.inf, math.inf), None
        for narrow_max in [0, *widths]:
            narrow = [c for c in groups["looped"] if c.n_cols <= narrow_max]
            wide = [c for c in groups["looped"] if c.n_cols > narrow_max]
            n_cost, n_opt = _best_option(pairs, narrow, looped)
            w_cost, w_opt = _best_option(pairs, wide, looped)
            cost = (n_cost[0] + w_cost[0], max(n_cost[1], w_cost[1]))
            if loop is None or cost < loop_cost:
                loop_cost, loop = cost, (narrow_max, n_opt, w_opt)
        cost = (
            split_cost[0] + block_cost[0] + loop_cost[0],
            max(split_cost[1], block_cost[1], loop_cost[1]),
        )
        if best_rule is None or cost < best_cost:
            narrow_max, (n_chunk, n_warps), (w_chunk, w_warps) = loop
            best_cost = cost
            best_rule = ChunkRule(
                split_rows_per_sm=ratio,
                split_min_cols=split_min,
                split_chunk=split_chunk,
                split_warps=split_warps,
                max_block_cols=max_block,
                block_warps=block_warps,
                narrow_max_cols=narrow_max,
                narrow_chunk=n_chunk,
                narrow_warps=n_warps,
                wide_chunk=w_chunk,
                wide_warps=w_warps,
                coop_chunk=coop[0],
                coop_warps=coop[1],
            )
    return best_rule


def _fit_split(pairs, cells, sm_count: int):
    """The split group's ``(cost, ((coop_chunk, coop_warps), split_chunk, split_warps))``.

    Each ``(chunk, warps)`` measured, or none (``(0, 0)``, tried first so that it
    wins ties), as the cooperative choice for the cells it fits; the best pair
    for the rest.
    """

    def split(option, cell):
        return impl_name("split", min(option[0], next_pow2(cell.n_cols)), option[1])

    best_cost, best = (math.inf, math.inf), None
    for coop in [(0, 0), *pairs]:
        together, apart = [], []
        for c in cells:
            fits = cooperative(c.n_rows, c.n_cols, coop[0], sm_count)
            (together if fits else apart).append(c)
        c_cost, _ = _best_option([coop], together, split)  # (0, 0) over no cells
        s_cost, s_opt = _best_option(pairs, apart, split)
        cost = (c_cost[0] + s_cost[0], max(c_cost[1], s_cost[1]))
        if best is None or cost < best_cost:
            best_cost, best = cost, (coop if together else (0, 0), *s_opt)
    return best_cost, best


def describe(rule: ChunkRule) -> str:
    """The rule as the lines ``plans.choose`` should implement for ``auto``."""
    if rule.split_rows_per_sm == 0:
        split = "split  never"
    else:
        split = (
            f"split  when n_rows <= {rule.split_rows_per_sm:g} * sm_count and n_cols > "
            f"{rule.split_min_cols}: chunk {rule.split_chunk}, {rule.split_warps} warps, "
            "plans.split_count programs per row"
        )
        if rule.coop_chunk:
            split += (
                f"; chunk {rule.coop_chunk}, {rule.coop_warps} warps where "
                f"n_rows * ceil(n_cols / {rule.coop_chunk}) <= sm_count (one cooperative launch)"
            )
    wide = f"chunk {rule.wide_chunk}, {rule.wide_warps} warps"
    if rule.narrow_max_cols == 0:
        looped = f"looped otherwise: {wide}"
    else:
        looped = (
            f"looped otherwise: chunk {rule.narrow_chunk}, {rule.narrow_warps} warps up to "
            f"{rule.narrow_max_cols} columns; {wide} beyond"
        )
    block = f"block  when next_pow2(n_cols) <= {rule.max_block_cols}: {rule.block_warps} warps"
    note = "(a chunk never exceeds the row's power-of-two width)"
    return "\n".join([split, block, f"{looped} {note}"])


def current_picker(sm_count: int, elem_bytes: int = 2):
    """A picking function for :func:`score` that asks ``plans.choose`` as it is now."""
    from kernel_portfolio.plans import choose

    def pick(cell: Cell) -> str:
        plan = choose(cell.n_rows, cell.n_cols, elem_bytes=elem_bytes, sm_count=sm_count)
        return impl_name(plan.kind, plan.block, plan.num_warps)

    return pick


def run_spread(fit_cells: Mapping, test_cells: Mapping) -> float:
    """Median over (cell, plan) measured in both runs of ``|median2 / median1 - 1|``: the noise."""
    ratios = sorted(
        abs(test.medians[name] / fit_cells[key].medians[name] - 1.0)
        for key, test in test_cells.items()
        if key in fit_cells
        for name in test.medians
        if name in fit_cells[key].medians
    )
    if not ratios:
        raise ValueError("the two runs share no measured plan")
    mid = len(ratios) // 2
    return ratios[mid] if len(ratios) % 2 else (ratios[mid - 1] + ratios[mid]) / 2


# ----------------------------------------------------------------- the result
#: The rules scored on the held-out run, by implementation name in the fit result.
RULES = ("fitted", "current", "lookup")


def _pick_record(test_case: dict, pick: str, regret: float) -> dict:
    """The held-out run's record of the plan a rule picked, with its regret and its name."""
    rec = test_case["impls"].get(pick)
    if rec is None or rec["status"] != "ok" or not math.isfinite(regret):
        # No plan name in the reason: its digits would read as figures where pages show it.
        if rec is None:
            reason = "the held-out run did not measure the plan this rule picks (see plan)"
        else:
            reason = f"the plan this rule picks (see plan) is {rec['status']} in the held-out run"
        return {
            "status": "skipped",
            "reason": reason,
            "rel_error": None,
            "samples_ms": [],
            "median_ms": None,
            "q10_ms": None,
            "q90_ms": None,
            "gbps": None,
            "pct_copy": None,
            "tflops": None,
            "peak_mem_bytes": None,
            "metrics": {},
            "plan": pick,
        }
    metrics = {"regret_pct": {"value": 100.0 * regret, "unit": "%"}}
    return {**rec, "metrics": metrics, "plan": pick}


def _summary_record(picked: list[dict], score_: Score, spread: float | None) -> dict:
    """One rule over one (op, mode): the held-out medians of its picks, and its regret figures.

    Its samples are the held-out medians of the plans the rule picked, one per
    cell; the quotable figures are the metrics.
    """
    from kernel_portfolio.results.schema import quantiles

    ok = [r for r in picked if r["status"] == "ok"]
    samples = [r["median_ms"] for r in ok]
    finite = [v for v in score_.regrets.values() if math.isfinite(v)]
    metrics = {
        "mean_regret_pct": {"value": 100.0 * sum(finite) / len(finite), "unit": "%"},
        "worst_regret_pct": {"value": 100.0 * max(finite), "unit": "%"},
        "cells_over_10pct": {"value": sum(v > BAD_REGRET for v in finite), "unit": "cells"},
        "cells": {"value": len(finite), "unit": "cells"},
        "unmeasured_picks": {"value": score_.cells - len(finite), "unit": "cells"},
    }
    if spread is not None:
        metrics["run_spread_pct"] = {"value": 100.0 * spread, "unit": "%"}
    q10, median, q90 = quantiles(samples)
    return {
        "status": "ok",
        "reason": None,
        "rel_error": max(r["rel_error"] for r in ok),
        "samples_ms": samples,
        "median_ms": median,
        "q10_ms": q10,
        "q90_ms": q90,
        "gbps": None,
        "pct_copy": None,
        "tflops": None,
        "peak_mem_bytes": None,
        "metrics": metrics,
    }


def fit_result(fit_data: dict, test_data: dict, *, fit_id: str, test_id: str) -> tuple[dict, dict]:
    """Fit on one run, score on the other: the fit result's cases, and the rule as data.

    Returns:
        ``(cases, rule)``: schema-1 case records (one per held-out cell, then one
        summary per operator and mode) and a dict describing the fitted rule.

    Raises:
        ValueError: the runs come from different GPUs or share no cell.
    """
    sm_count = test_data["env"]["sm_count"]
    if fit_data["env"]["sm_count"] != sm_count or fit_data["gpu_slug"] != test_data["gpu_slug"]:
        raise ValueError("the two runs must come from the same GPU")
    fit_cells, test_cells = cells_from_result(fit_data), cells_from_result(test_data)
    shared = [key for key in test_cells if key in fit_cells]
    if not shared:
        raise ValueError("the two runs share no measured cell")
    rule = fit(fit_cells.values(), sm_count)
    refit = fit(test_cells.values(), sm_count)
    pickers = {
        "fitted": rule_picker(rule, sm_count),
        "current": current_picker(sm_count),
        "lookup": lambda cell: fit_cells[cell.key].best,
    }
    spread = run_spread(fit_cells, test_cells)
    by_id = {case["id"]: case for case in test_data["cases"]}
    cases, groups = [], {}
    for key in shared:
        cell = test_cells[key]
        test_case = by_id[cell.case_id]
        impls = {}
        for name, pick in pickers.items():
            chosen = pick(cell)
            impls[name] = _pick_record(test_case, chosen, cell.regret(chosen))
        cases.append({**test_case, "impls": impls, "ratios": []})
        group = (cell.op, cell.mode, test_case["dtype"], test_case["timer"], test_case["cache"])
        groups.setdefault(group, []).append((cell, impls))
    for (op, mode, dtype, timer, cache), members in groups.items():
        impls = {}
        for name, pick in pickers.items():
            sc = score(pick, [cell for cell, _ in members])
            picked = [rec[name] for _, rec in members]
            impls[name] = _summary_record(picked, sc, spread if name == "lookup" else None)
        cases.append(
            {
                "id": f"{op}-rule/{mode}/{len(members)}/{dtype}",
                "op": f"{op}-rule",
                "mode": mode,
                "shape": [len(members)],
                "dtype": dtype,
                "timer": timer,
                "cache": cache,
                "bytes": None,
                "bytes_formula": None,
                "flops": None,
                "flops_formula": None,
                "depends_on": [],
                "impls": impls,
                "ratios": [],
            }
        )
    described = {
        "fitted_on": fit_id,
        "scored_on": test_id,
        "sm_count": sm_count,
        "thresholds": dataclasses.asdict(rule),
        "text": describe(rule),
        "refit_on_scored_run": dataclasses.asdict(refit),
        "same_when_refit": rule == refit,
    }
    return cases, described


def main(argv: list[str] | None = None) -> int:
    """Fit on ``--fit``, score on ``--score``, write ``<out>/chunk_rules_fit.json`` (+ ``.log``)."""
    from sweep_support import utc_now

    from kernel_portfolio.bench.records import build_result
    from kernel_portfolio.results import (
        ResultError,
        commit_run,
        git_state,
        load,
        repo_root,
        result_id,
        source_hashes,
    )

    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="results folder, e.g. results/h200")
    parser.add_argument("--fit", help="run to fit on (default: <out>/chunk_rules_run1.json)")
    parser.add_argument("--score", help="run to score on (default: <out>/chunk_rules_run2.json)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    fit_path = Path(args.fit or out / "chunk_rules_run1.json")
    test_path = Path(args.score or out / "chunk_rules_run2.json")
    root = repo_root()
    try:
        runs = [load(fit_path), load(test_path)]
        rel = [p.resolve().relative_to(root).as_posix() for p in (fit_path, test_path)]
    except (ResultError, OSError) as err:
        print(f"chunk_rules_fit: {err}", file=sys.stderr)
        return 2
    except ValueError:
        print("chunk_rules_fit: both runs must be under the repository's results/", file=sys.stderr)
        return 2
    started = utc_now()
    try:
        cases, rule = fit_result(
            runs[0].data, runs[1].data, fit_id=result_id(fit_path), test_id=result_id(test_path)
        )
    except ValueError as err:
        print(f"chunk_rules_fit: {err}", file=sys.stderr)
        return 2
    test = runs[1].data
    # The fit reads the two runs and nothing else: its sources are this script and
    # their files; what the runs measured stays in their own sources, which a
    # result's staleness follows (kernel_portfolio.results: a result computed
    # from results is current while they are).
    sources = source_hashes(root, [SCRIPT, *rel])
    for case in cases:
        case["depends_on"] = sorted(sources)
    lines = [f"$ {shlex.join(['python', SCRIPT, *argv])}", "fitted rule:", rule["text"]]
    lines.append(f"refitting on the scored run gives the same rule: {rule['same_when_refit']}")
    for case in cases:
        if case["op"].endswith("-rule"):
            lines.append(case["id"] + ": " + ", ".join(
                f"{name} mean {rec['metrics']['mean_regret_pct']['value']:.1f}% "
                f"worst {rec['metrics']['worst_regret_pct']['value']:.1f}%"
                for name, rec in case["impls"].items()
            ))  # fmt: skip
    print("\n".join(lines))
    data = build_result(
        suite="chunk_rules_fit",
        gpu_slug=test["gpu_slug"],
        command=lines[0][2:],
        started_utc=started,
        finished_utc=utc_now(),
        git=git_state(root),
        sources=sources,
        env=test["env"],
        gpu_state=test["gpu_state"],
        copy_bandwidth=test["copy_bandwidth"],
        timing={
            **test["timing"],
            "notes": (
                f"No new timing: rules fitted on {rule['fitted_on']} and scored on the "
                f"held-out {rule['scored_on']}, whose samples every record here copies. "
                "Per cell, each rule's record is the held-out record of the plan it picks, "
                "with regret_pct against the held-out cell's fastest plan; per operator "
                "and mode, samples are those picks' held-out medians and the metrics give "
                "mean and worst regret. lookup = each cell's fastest plan in the fitting "
                "run; its run_spread_pct is the median |t2/t1 - 1| over every plan measured "
                "in both runs. The fitted rule:\n" + rule["text"]
            ),
        },
        cases=cases,
        log="chunk_rules_fit.log",
    )
    data["rule"] = rule
    done = commit_run(data, out, "chunk_rules_fit", "\n".join(lines) + "\n", root)
    print(f"wrote {done.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
