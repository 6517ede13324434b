# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Chunk rules for wide rows
#
# **The question.** A row operator (softmax, RMSNorm) must choose, for every call,
# how programs walk the rows. When should a row be one block held in registers,
# when should one program loop over it in chunks (of which width, with how many
# warps), and when should several programs split it? `plans.choose` answers with a
# rule; this page fits that rule to measurements on one run of a grid of shapes,
# and scores it on a second, independent run.
#
# **The arithmetic.** For `M` rows of `N` half-precision values:
#
# * `block`: one program per row holds the row in registers. Each byte moves once:
#   `2MN` bytes forward. A program holds `N` float32 values across its threads, so
#   the width it can hold is bounded by the register file; and only `M` programs
#   run, so with fewer rows than SMs (132 on the H200) some SMs sit idle.
# * `looped`: one program per row walks it in chunks, twice (statistics, then the
#   write): `3MN` bytes unless the second pass finds the row still in L2. Same `M`
#   programs; each holds only one chunk, so any width fits.
# * `split`: `S` programs share each row: `M * S` programs, so a few rows can fill
#   the GPU, at the price of a second kernel launch and of reading the row twice
#   (`3MN` bytes plus a few statistics per row).
#
# So the row count against the SM count decides whether a row should be split, and
# the width decides whether it can be a block; inside the looped and split plans,
# the chunk width and warp count trade registers for parallelism in ways that
# arithmetic does not settle. That is what the grid measures.

# %%
import sys

import pandas as pd
import plotly.graph_objects as go
from IPython.display import HTML, Markdown, display
from plotly.subplots import make_subplots

from kernel_portfolio import charts
from kernel_portfolio.evidence import quote
from kernel_portfolio.results import load, repo_root

ROOT = repo_root()
sys.path.insert(0, str(ROOT / "scripts"))
import chunk_rules_fit as fitting  # the fit's own definitions
import chunk_rules_sweep as sweep  # the grid's own definitions

RUN_IDS = ("h200/chunk_rules_run1", "h200/chunk_rules_run2")
FIT_ID = "h200/chunk_rules_fit"


def load_id(result_id: str):
    path = ROOT / "results" / f"{result_id}.json"
    return load(path) if path.exists() else None


runs = [load_id(r) for r in RUN_IDS]
fitted = load_id(FIT_ID)
KINDS = ("block", "looped", "split")
KIND_COLORS = ("#1c7ed6", "#37b24d", "#f59f00")
GROUPS = [(op, mode) for op in sweep.OPS for mode in sweep.MODES]

grid = sweep.FULL
example = sweep.candidates(4, 65536, 132, grid)
display(
    Markdown(
        f"The grid: rows {', '.join(map(str, grid.rows))}; widths "
        f"{', '.join(map(str, grid.widths))}; softmax and RMSNorm, forward and forward "
        f"plus backward (the backward kernels take the forward's plan), float16. Each "
        f"cell times every plan: `block` where the row's power-of-two width is at most "
        f"{grid.block_max_cols}, `looped` and `split` with chunks of "
        f"{', '.join(map(str, grid.chunks))} columns and {', '.join(map(str, grid.warps))} "
        f"warps. A cell of 4 rows of 65536 columns, for instance, times "
        + ", ".join(f"{sum(p.kind == k for p in example)} {k}" for k in KINDS)
        + " plans (a split plan with `plans.split_count` programs per row). Cells whose "
        "tensors would pass 1 GiB are left out."
    )
)

# %% [markdown]
# **The method.** Per cell: fresh random inputs; every plan checked against the
# float64 reference on an output poisoned with NaN; then each plan's call captured
# once in a CUDA graph, which takes the host's launch cost out (it would otherwise
# swamp every plan alike on the small cells), and timed by CUDA events around each
# replay with the L2 overwritten before it, the plans visited in a new random order
# on every visit. The cells run in a random order too, seeded differently in each
# of the two runs. A plan's *regret* in a cell is how much slower its median is than
# the fastest plan's median in the same cell and run.

# %%
if None in runs:
    missing = [r for r, res in zip(RUN_IDS, runs, strict=True) if res is None]
    display(
        Markdown(
            f"**Not yet measured.** {', '.join(f'`results/{m}.json`' for m in missing)} "
            "does not exist yet. The grid runs on the H200 with "
            "`python scripts/chunk_rules_sweep.py --run 1 --out results/h200` and "
            "`--run 2`, and the fit with `python scripts/chunk_rules_fit.py --out "
            "results/h200`. Until they are committed, this page shows the arithmetic "
            "above and no measurement."
        )
    )
else:
    env = runs[0].data["env"]
    display(
        Markdown(
            f"Measured on **{env['gpu_name']}** ({env['sm_count']} SMs), torch "
            f"{env['torch']}, triton {env['triton']}: "
            + "; ".join(f"`{r.data['command']}` ({r.data['finished_utc']})" for r in runs)
            + "."
        )
    )

# %% [markdown]
# ## The best plan in each cell
#
# Colour is the kind of the fastest plan in the first run; the label gives its chunk
# width and warps. A star marks a cell whose fastest plan in the second run is of
# another kind; blank cells were not run (over the memory cap, or past the run's
# time budget).


# %%
def best_plans(result) -> dict[tuple, str]:
    """The fastest plan of each cell (by its saved regret), keyed (op, mode, rows, width)."""
    out = {}
    for case in result.data["cases"]:
        ok = {
            name: rec["metrics"]["regret_pct"]["value"]
            for name, rec in case["impls"].items()
            if rec["status"] == "ok"
        }
        if ok:
            rows, cols = case["shape"]
            out[(case["op"], case["mode"], rows, cols)] = min(sorted(ok), key=ok.__getitem__)
    return out


def heatmap_axes(result) -> tuple[list[int], list[int]]:
    shapes = {tuple(c["shape"]) for c in result.data["cases"] if len(c["shape"]) == 2}
    return sorted({r for r, _ in shapes}), sorted({w for _, w in shapes})


if None not in runs:
    best = [best_plans(r) for r in runs]
    rows_axis, widths_axis = heatmap_axes(runs[0])
    fig = make_subplots(
        rows=2, cols=2, subplot_titles=[f"{op} {mode}" for op, mode in GROUPS],
        horizontal_spacing=0.08, vertical_spacing=0.14,
    )  # fmt: skip
    for i, (op, mode) in enumerate(GROUPS):
        z = [[None] * len(widths_axis) for _ in rows_axis]
        text = [[""] * len(widths_axis) for _ in rows_axis]
        for y, r in enumerate(rows_axis):
            for x, w in enumerate(widths_axis):
                name = best[0].get((op, mode, r, w))
                if name is None:
                    continue
                other = best[1].get((op, mode, r, w))
                kind, block, warps = fitting.parse_impl(name)
                star = "*" if other and fitting.parse_impl(other)[0] != kind else ""
                z[y][x] = KINDS.index(kind)
                text[y][x] = f"{kind}{star}<br>{block}/w{warps}"
        fig.add_trace(
            go.Heatmap(
                x=[str(w) for w in widths_axis],
                y=[str(r) for r in rows_axis],
                z=z,
                text=text,
                texttemplate="%{text}",
                zmin=-0.5,
                zmax=2.5,
                colorscale=[[edge / 3, KIND_COLORS[k]] for k in range(3) for edge in (k, k + 1)],
                showscale=i == 0,
                colorbar={"tickvals": [0, 1, 2], "ticktext": list(KINDS), "title": "plan"},
                hovertemplate="rows %{y}, width %{x}: %{text}<extra></extra>",
            ),
            row=i // 2 + 1,
            col=i % 2 + 1,
        )
    fig.update_xaxes(title_text="width (columns)", type="category")
    fig.update_yaxes(title_text="rows", type="category")
    fig.update_layout(title="Fastest plan per cell (first run; * = the second run disagrees)",
                      height=820)  # fmt: skip
    display(charts.show(fig, "chunk-rules-best"))

# %% [markdown]
# ## The rule, fitted on one run and scored on the other
#
# `scripts/chunk_rules_fit.py` searches a family of rules shaped like
# `plans.choose`: *split* when there are at most a given number of rows per SM and
# the row is wider than a threshold; otherwise *block* when the row's power-of-two
# width fits a threshold; otherwise *loop*, with one chunk and warp count up to a
# width and another beyond. Thresholds sit at the grid's own row counts and widths;
# chunks and warps range over those measured. The search picks the rule with the
# least mean regret over every cell of the first run, and the page scores it on the
# second run, which it never saw. Three rules are scored there:
#
# * **fitted**: the fitted rule;
# * **current**: `plans.choose` as it was when the fit ran (the last section compares
#   the fitted rule with `plans.choose` as this build of the page finds it);
# * **lookup**: no rule at all, each cell's fastest plan in the first run. No rule
#   can do better on the first run; on the second, its regret is what noise between
#   two runs alone costs a per-cell choice, the floor under which a difference
#   between rules means nothing.

# %%
if fitted is None:
    display(
        Markdown(
            f"**Not yet fitted.** `results/{FIT_ID}.json` does not exist yet: it is "
            "written by `python scripts/chunk_rules_fit.py --out results/h200` from the "
            "two committed runs."
        )
    )
else:
    rule = fitted.data["rule"]
    display(
        Markdown(
            f"Fitted on `{rule['fitted_on']}`, scored on `{rule['scored_on']}`. "
            + (
                "Fitting on the second run instead gives the same rule."
                if rule["same_when_refit"]
                else "Fitting on the second run instead gives a different rule (below): "
                "the runs do not pin every threshold down."
            )
        )
    )
    display(HTML(f"<pre>{rule['text']}</pre>"))
    if not rule["same_when_refit"]:
        display(
            HTML(f"<pre>{fitting.describe(fitting.ChunkRule(**rule['refit_on_scored_run']))}</pre>")
        )


# %%
def cell_regrets(result, impl: str) -> dict[tuple, tuple[float | None, str]]:
    """Held-out regret (percent) and pick of one rule in each cell of the fit result."""
    out = {}
    for case in result.data["cases"]:
        if case["op"].endswith("-rule"):
            continue
        rec = case["impls"][impl]
        rows, cols = case["shape"]
        value = rec["metrics"]["regret_pct"]["value"] if rec["status"] == "ok" else None
        out[(case["op"], case["mode"], rows, cols)] = (value, rec["plan"])
    return out


if fitted is not None:
    rows_axis, widths_axis = heatmap_axes(fitted)
    for impl in ("fitted", "current"):
        regrets = cell_regrets(fitted, impl)
        fig = make_subplots(
            rows=2, cols=2, subplot_titles=[f"{op} {mode}" for op, mode in GROUPS],
            horizontal_spacing=0.08, vertical_spacing=0.14,
        )  # fmt: skip
        for i, (op, mode) in enumerate(GROUPS):
            z = [[regrets.get((op, mode, r, w), (None, ""))[0] for w in widths_axis]
                 for r in rows_axis]  # fmt: skip
            picks = [[regrets.get((op, mode, r, w), (None, ""))[1] for w in widths_axis]
                     for r in rows_axis]  # fmt: skip
            fig.add_trace(
                go.Heatmap(
                    x=[str(w) for w in widths_axis],
                    y=[str(r) for r in rows_axis],
                    z=z,
                    customdata=picks,
                    texttemplate="%{z:.0f}",
                    zmin=0,
                    zmax=50,
                    colorscale="Reds",
                    showscale=i == 0,
                    colorbar={"title": "regret %"},
                    hovertemplate="rows %{y}, width %{x}: %{customdata}, "
                    "regret %{z:.1f} %<extra></extra>",
                ),
                row=i // 2 + 1,
                col=i % 2 + 1,
            )
        fig.update_xaxes(title_text="width (columns)", type="category")
        fig.update_yaxes(title_text="rows", type="category")
        fig.update_layout(
            title=f"Regret of the {impl} rule on the held-out run, per cell (percent; "
            "colour saturates at 50)",
            height=820,
        )
        display(charts.show(fig, f"chunk-rules-regret-{impl}"))

# %% [markdown]
# ## Mean and worst regret on the held-out run


# %%
def summaries(result) -> dict[tuple, dict]:
    """The summary case of each (operator, mode), in the page's order."""
    found = {
        (c["op"].removesuffix("-rule"), c["mode"]): c
        for c in result.data["cases"]
        if c["op"].endswith("-rule")
    }
    return {group: found[group] for group in GROUPS if group in found}


if fitted is not None:
    summary = summaries(fitted)
    fig = make_subplots(rows=1, cols=2, subplot_titles=["mean regret", "worst regret"])
    labels = [f"{op} {mode}" for op, mode in summary]
    for col, stat in enumerate(("mean_regret_pct", "worst_regret_pct"), start=1):
        for impl, color in zip(fitting.RULES, ("#d6336c", "#868e96", "#1c7ed6"), strict=True):
            fig.add_trace(
                go.Bar(
                    x=labels,
                    y=[c["impls"][impl]["metrics"][stat]["value"] for c in summary.values()],
                    name=impl,
                    legendgroup=impl,
                    showlegend=col == 1,
                    marker_color=color,
                ),
                row=1,
                col=col,
            )
    fig.update_layout(barmode="group", title="Regret on the held-out run", height=420)
    fig.update_yaxes(title_text="percent", col=1)
    display(charts.show(fig, "chunk-rules-summary"))

    paragraphs = []
    for (op, mode), case in summary.items():
        cid = case["id"]

        def q(impl: str, stat: str, cid: str = cid) -> str:
            return str(quote(FIT_ID, cid, f"metrics.{stat}", impl=impl))

        rec = {impl: case["impls"][impl]["metrics"] for impl in fitting.RULES}
        mean = {impl: rec[impl]["mean_regret_pct"]["value"] for impl in fitting.RULES}
        gain, floor = mean["current"] - mean["fitted"], mean["lookup"]
        if gain > floor:
            verdict = "a gain larger than the noise floor"
        elif gain < -floor:
            verdict = "a loss larger than the noise floor"
        else:
            verdict = "no difference beyond the noise floor"
        paragraphs.append(
            f"**{op} {mode}** ({case['shape'][0]} cells): the fitted rule's mean regret "
            f"is {q('fitted', 'mean_regret_pct')} (worst {q('fitted', 'worst_regret_pct')}), "
            f"the current rule's {q('current', 'mean_regret_pct')} (worst "
            f"{q('current', 'worst_regret_pct')}); the lookup from the first run pays "
            f"{q('lookup', 'mean_regret_pct')} for noise alone, and a plan's median moved "
            f"by {q('lookup', 'run_spread_pct')} between the runs (median over plans): "
            f"{verdict}."
        )
    display(Markdown("\n\n".join(paragraphs)))

# %% [markdown]
# ## What `plans.py` should say
#
# The rule in `plans.choose` must be the fitted one, and cite this result. The
# check below asks `plans.choose(..., plan="auto")`, as the source tree has it
# while this page is built, for every cell of the grid, and compares its plan with
# the fitted rule's.

# %%
if fitted is not None:
    now = fitting.current_picker(fitted.data["rule"]["sm_count"])
    fit_picks = {k: v[1] for k, v in cell_regrets(fitted, "fitted").items()}
    now_picks = {k: now(fitting.Cell(k[0], k[1], k[2], k[3], {})) for k in fit_picks}
    differ = sorted(k for k in fit_picks if fit_picks[k] != now_picks[k])
    if not differ:
        display(Markdown("`plans.choose` picks the fitted rule's plan in every cell of the grid."))
    else:
        frame = pd.DataFrame(
            [
                {"op": k[0], "mode": k[1], "rows": k[2], "width": k[3],
                 "plans.choose now": now_picks[k], "fitted rule": fit_picks[k]}
                for k in differ
            ]
        )  # fmt: skip
        display(
            Markdown(
                f"`plans.choose` differs from the fitted rule in {len(differ)} of "
                f"{len(fit_picks)} cells; it should implement the rule above (thresholds "
                f"in `results/{FIT_ID}.json`, key `rule.thresholds`):"
            )
        )
        display(HTML(frame.to_html(index=False)))

# %% [markdown]
# ## What this shows, and what it does not
#
# * One GPU, float16, two operators, one grid. The rule's thresholds sit at the
#   grid's row counts and widths; between grid points it interpolates by
#   assumption, not by measurement. A float32 row is twice the bytes of a float16
#   row of the same width, so a rule fitted in float16 need not carry over.
# * Times are GPU times from graph replays with a cold L2: they leave out the
#   host's launch cost, which adds per launch (the split plan launches twice) and
#   matters most in the small cells.
# * The two runs share a machine and a day: the held-out score guards against
#   fitting noise, not against a different GPU, driver or Triton version.
# * Row sum and the fused residual RMSNorm use the same plans and inherit the rule
#   without having been timed here.
