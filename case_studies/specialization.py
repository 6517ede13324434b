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
# # Specialization vs recompilation
#
# **The question.** Which kernel arguments should be `tl.constexpr`? A value
# the compiler knows can make a kernel faster; every distinct value of it is also
# a new compile, paid by whichever request first brings it. Row kernels see a new
# row count with every batch, and a new width with every model; a GEMM sees a new
# `M` with every batch.
#
# **What specialisation changes.** Triton compiles one binary per *cache key*:
# the kernel's source, the launch options (warps, stages), the dtype and 16-byte
# alignment of every pointer, the value of every `tl.constexpr`, and for every
# other integer argument two facts about its value: whether it equals 1 (it then
# becomes a constant) and whether it is divisible by 16 (an alignment hint), unless
# the kernel lists it in `do_not_specialize`. What the compiler can do with a
# known value:
#
# * **Masks fold.** With the width a constant equal to `BLOCK`, `cols < n_cols` is
#   always true and the mask disappears; at a width just past a power of two
#   (4104 in a block of 8192) it stays whatever the policy.
# * **Loads widen.** A 16-byte load (8 half-precision values) needs the compiler
#   to prove that the 8 addresses are contiguous, start on a 16-byte boundary, and
#   share one mask value. For `x_ptr + row * stride + cols` that means knowing
#   `stride` and `n_cols` are multiples of 8: from a constant, from the divisible-
#   by-16 hint, or from an explicit hint (`VEC` below). Without any of them the
#   loads are 2 bytes wide: eight times the instructions for the same bytes.
# * **Loop bounds fix.** A constant trip count lets the compiler unroll and
#   pipeline (the GEMM's `K` loop).
# * **Registers follow.** Everything above changes how many registers each thread
#   holds, which sets how many programs fit on an SM at once.
#
# **The experiment.** The same three kernels (softmax and RMSNorm forward on the
# block plan with a persistent grid, and a fixed-tile GEMM) in four declarations,
# one file each under `case_studies/specialization/`, identical below the
# signature:

# %%
import sys

import pandas as pd
import plotly.graph_objects as go
from IPython.display import HTML, Markdown, display
from plotly.subplots import make_subplots

from kernel_portfolio import charts
from kernel_portfolio.evidence import quote
from kernel_portfolio.ops import matmul as src_matmul
from kernel_portfolio.ops import rms_norm as src_rms_norm
from kernel_portfolio.ops import softmax as src_softmax
from kernel_portfolio.results import load, repo_root

ROOT = repo_root()
sys.path.insert(0, str(ROOT / "scripts"))
import specialization_sweep as sweep  # the sweep's own definitions

RESULT_ID = "h200/specialization"
RESULT_PATH = ROOT / "results" / f"{RESULT_ID}.json"
result = load(RESULT_PATH) if RESULT_PATH.exists() else None
modules = {name: sweep.load_policy(name) for name in sweep.POLICIES}
POLICY_COLORS = dict(zip(sweep.POLICIES, ("#d6336c", "#868e96", "#1c7ed6", "#37b24d"), strict=True))
DESCRIPTIONS = {
    "constexpr": "every size a compile-time constant",
    "runtime": "every size a runtime argument in do_not_specialize",
    "default-spec": "row count (GEMM M) in do_not_specialize; widths and strides left "
    "to Triton's divisible-by-16 specialisation",
    "vec-hint": "every size in do_not_specialize, plus a VEC constant: the largest "
    "power of two up to 16 bytes that divides the width and strides",
}
declared = pd.concat(
    {
        kernel: pd.DataFrame(
            {
                policy: sweep.specialisation_table(getattr(module, f"{kernel}_kernel"))
                for policy, module in modules.items()
            }
        ).fillna("(absent)")
        for kernel in sweep.KERNELS
    },
    names=["kernel", "parameter"],
)
display(
    Markdown("\n".join(f"* **{p}**: {d} (`{sweep.POLICIES[p]}`)" for p, d in DESCRIPTIONS.items()))
)
display(HTML(declared.to_html()))

# %% [markdown]
# The table reads the declarations from the kernels themselves (`constexpr`,
# `do_not_specialize`, or Triton's `default` specialisation); a float such as
# `eps` is never specialised whatever it says.
#
# ## Which policy `src/` uses
#
# The same reading of the project's own kernels, compared parameter by parameter
# with the four policies (feature flags such as `HAS_WEIGHT` are not sizes and are
# left out):

# %%
SRC_KERNELS = {
    "softmax": ("src/kernel_portfolio/ops/softmax.py", src_softmax._fwd_block_kernel),
    "rms_norm": ("src/kernel_portfolio/ops/rms_norm.py", src_rms_norm._fwd_kernel),
    "matmul": ("src/kernel_portfolio/ops/matmul.py", src_matmul._matmul_kernel),
}
src_policy = {}
lines = []
for kernel, (path, fn) in SRC_KERNELS.items():
    matches = sweep.matching_policies(fn, kernel, modules)
    src_policy[kernel] = matches[0] if len(matches) == 1 else None
    found = ", ".join(f"**{m}**" for m in matches) or "none of the four"
    lines.append(f"* `{path}` (`{fn.__name__}`): {found}")
tma = sweep.matching_policies(src_matmul._matmul_tma_kernel, "matmul", modules)
lines.append(
    "* `src/kernel_portfolio/ops/matmul.py` (`_matmul_tma_kernel`, for comparison only): "
    + (", ".join(f"**{m}**" for m in tma) or "none of the four")
)
display(Markdown("\n".join(lines)))

# %% [markdown]
# The GEMM the H200 runs for float16 is `matmul.py`'s TMA kernel, whose tiles move
# through tensor descriptors rather than pointer arithmetic, so the study's pointer
# GEMM says nothing about its declarations; the pointer kernel compared here is the
# one it falls back to, and the one the study's GEMM mirrors.
#
# ## The arithmetic of compiles
#
# The request stream is seeded: each request has a batch drawn from 1 to 64, a
# sequence length from the list below (1 is a decode step, the others prefill
# chunks), and one of four hidden sizes: two powers of two, a multiple of 16 that
# is not one (5120), and a width that is not a multiple of 16 (4104). Rows are
# batch times sequence length. Triton's cache key for every launch of the stream
# can be computed without a GPU (`specialization_sweep.cache_key` runs Triton's
# own argument binder), so the number of compiles each policy needs is known
# before anything runs:

# %%
predicted = sweep.predict_stream()
scale = sweep.FULL
display(
    Markdown(
        f"Stream: {scale.requests} requests, hidden sizes {', '.join(map(str, scale.hiddens))}, "
        f"sequence lengths {', '.join(map(str, scale.seqs))}, batch 1 to {scale.max_batch}."
    )
)
display(HTML(pd.DataFrame(predicted).T.rename_axis("kernel").to_html()))

# %% [markdown]
# With every size constant, each distinct (rows, hidden) pair of the stream is a
# compile, for every kernel. The other policies compile the row kernels once per
# `BLOCK` (4096, or 8192 for the three wider hidden sizes) and the GEMM once, plus
# once per hint value: `default-spec` again for the width that is not divisible by
# 16, `vec-hint` only when `VEC` changes (all four widths are multiples of 8
# elements, so never here). These counts are the cost side; the measurements below
# price them and set them against kernel time.

# %%
if result is None:
    display(
        Markdown(
            f"**Not yet measured.** `results/{RESULT_ID}.json` does not exist yet: the "
            "sweep that produces it runs on the H200 with "
            "`python scripts/specialization_sweep.py --out results/h200`. Until it is "
            "committed, this page shows the arithmetic above and no measurement."
        )
    )
else:
    data = result.data
    env = data["env"]
    display(
        Markdown(
            f"Measured on **{env['gpu_name']}** ({env['sm_count']} SMs), torch {env['torch']}, "
            f"triton {env['triton']}, `{data['command']}`, finished {data['finished_utc']}."
        )
    )

# %% [markdown]
# ## Compiles over the stream
#
# Each request went through every kernel of every policy, the policies in a
# random order per request, with Triton's on-disk cache empty at the start. A
# request's time is taken by CUDA events around the launch, so a request that
# compiled includes its compile. A policy whose compiles for one kernel passed the
# sweep's compile budget stopped serving that kernel there.


# %%
def stream_cases(data: dict) -> dict[str, dict]:
    """The stream case of each kernel, by kernel name."""
    return {k: next(c for c in data["cases"] if c["op"] == f"{k}-stream") for k in sweep.KERNELS}


def metric(record: dict, name: str) -> float | None:
    """A saved metric's value; ``None`` when the run did not record it (an interpreted dry run)."""
    return record["metrics"].get(name, {}).get("value")


if result is not None:
    streams = stream_cases(data)
    fig = make_subplots(rows=1, cols=len(sweep.KERNELS), subplot_titles=sweep.KERNELS)
    for col, kernel in enumerate(sweep.KERNELS, start=1):
        for policy, rec in streams[kernel]["impls"].items():
            if rec["status"] != "ok":
                continue
            total, cumulative = 0.0, []
            for ms in rec["samples_ms"]:
                total += ms
                cumulative.append(total / 1e3)
            fig.add_trace(
                go.Scatter(
                    x=list(range(1, len(cumulative) + 1)),
                    y=cumulative,
                    name=policy,
                    legendgroup=policy,
                    showlegend=col == 1,
                    line_color=POLICY_COLORS[policy],
                ),
                row=1,
                col=col,
            )
    fig.update_layout(
        title="Time the stream spent in each kernel, requests in order (compiles included)",
        xaxis_title="request",
        yaxis_title="cumulative seconds",
        height=420,
    )
    fig.update_yaxes(type="log")
    display(charts.show(fig, "specialization-stream"))

    fig = make_subplots(rows=1, cols=len(sweep.KERNELS), subplot_titles=sweep.KERNELS)
    for col, kernel in enumerate(sweep.KERNELS, start=1):
        recs = streams[kernel]["impls"]
        ok = [p for p in recs if recs[p]["status"] == "ok"]
        fig.add_trace(
            go.Bar(
                x=ok,
                y=[metric(recs[p], "compiles") for p in ok],
                name="compiles counted",
                marker_color=[POLICY_COLORS[p] for p in ok],
                showlegend=False,
                text=[f"{int(metric(recs[p], 'requests'))} requests" for p in ok],
            ),
            row=1,
            col=col,
        )
        fig.add_trace(
            go.Scatter(
                x=ok,
                y=[metric(recs[p], "predicted_compiles") for p in ok],
                mode="markers",
                marker={"symbol": "line-ew-open", "size": 28, "color": "black"},
                name="predicted from Triton's cache key",
                showlegend=col == 1,
            ),
            row=1,
            col=col,
        )
    fig.update_layout(title="Compiles per policy over the requests it served", height=420)
    fig.update_yaxes(type="log", title_text="compiles", col=1)
    display(charts.show(fig, "specialization-compiles"))

# %%
if result is not None:
    agree = all(
        metric(rec, "compiles") == metric(rec, "predicted_compiles")
        for case in streams.values()
        for rec in case["impls"].values()
        if rec["status"] == "ok"
    )
    sm = streams["softmax"]["id"]
    mm = streams["matmul"]["id"]
    text = [
        (
            "Every compile count equals the number of distinct cache keys predicted "
            "without a GPU: the cost side is arithmetic, not luck."
            if agree
            else "Not every compile count equals its prediction (see the chart): Triton "
            "compiled for reasons the cache key does not show."
        ),
        f"With every size constant, the softmax kernel needed "
        f"{quote(RESULT_ID, sm, 'metrics.compiles', impl='constexpr')}, taking "
        f"{quote(RESULT_ID, sm, 'metrics.compile_ms', impl='constexpr')}, over "
        f"{quote(RESULT_ID, sm, 'metrics.requests', impl='constexpr')}; the GEMM "
        f"{quote(RESULT_ID, mm, 'metrics.compiles', impl='constexpr')}, taking "
        f"{quote(RESULT_ID, mm, 'metrics.compile_ms', impl='constexpr')}, over "
        f"{quote(RESULT_ID, mm, 'metrics.requests', impl='constexpr')}.",
        f"The `vec-hint` softmax needed "
        f"{quote(RESULT_ID, sm, 'metrics.compiles', impl='vec-hint')} "
        f"({quote(RESULT_ID, sm, 'metrics.compile_ms', impl='vec-hint')}), and the "
        f"`default-spec` GEMM {quote(RESULT_ID, mm, 'metrics.compiles', impl='default-spec')} "
        f"({quote(RESULT_ID, mm, 'metrics.compile_ms', impl='default-spec')}).",
    ]
    display(Markdown(" ".join(text)))

# %% [markdown]
# ## Kernel time
#
# Each kernel at widths that fill their power-of-two block (4096, 8192) and widths
# just past one (4104, 8200), float16: the row kernels over enough rows to fill
# every SM many times, the GEMM with `M` fixed and `N = K =` the width. Fresh
# random inputs, the output poisoned with NaN and checked against the float64
# reference, the L2 overwritten before every call, CUDA events, the GPU warmed up
# first, policies visited in a new random order on every visit; the bars are
# medians with the 10th to 90th percentile.


# %%
def time_cases(data: dict, kernel: str) -> list[dict]:
    return [c for c in data["cases"] if c["op"] == kernel]


if result is not None:
    fig = make_subplots(rows=1, cols=len(sweep.KERNELS), subplot_titles=sweep.KERNELS)
    for col, kernel in enumerate(sweep.KERNELS, start=1):
        cases = time_cases(data, kernel)
        widths = [str(c["shape"][1]) for c in cases]
        for policy in sweep.POLICIES:
            recs = [c["impls"][policy] for c in cases]
            ok = [r["status"] == "ok" for r in recs]
            med = [r["median_ms"] * 1e3 if good else None for r, good in zip(recs, ok, strict=True)]
            lo = [
                (r["median_ms"] - r["q10_ms"]) * 1e3 if good else None
                for r, good in zip(recs, ok, strict=True)
            ]
            hi = [
                (r["q90_ms"] - r["median_ms"]) * 1e3 if good else None
                for r, good in zip(recs, ok, strict=True)
            ]
            fig.add_trace(
                go.Bar(
                    x=widths,
                    y=med,
                    error_y={"type": "data", "array": hi, "arrayminus": lo},
                    name=policy,
                    legendgroup=policy,
                    showlegend=col == 1,
                    marker_color=POLICY_COLORS[policy],
                ),
                row=1,
                col=col,
            )
    fig.update_layout(
        barmode="group",
        title="Median kernel time by width (cold L2)",
        yaxis_title="microseconds",
        xaxis_title="width",
        height=440,
    )
    display(charts.show(fig, "specialization-time"))

    fig = make_subplots(
        rows=2,
        cols=len(sweep.KERNELS),
        subplot_titles=[f"{k}: registers/thread" for k in sweep.KERNELS]
        + [f"{k}: global loads under 16 bytes (PTX)" for k in sweep.KERNELS],
        vertical_spacing=0.18,
    )
    for col, kernel in enumerate(sweep.KERNELS, start=1):
        cases = time_cases(data, kernel)
        widths = [str(c["shape"][1]) for c in cases]
        for row, name in ((1, "registers"), (2, "loads_narrow")):
            for policy in sweep.POLICIES:
                recs = [c["impls"][policy] for c in cases]
                fig.add_trace(
                    go.Bar(
                        x=widths,
                        y=[metric(r, name) if r["status"] == "ok" else None for r in recs],
                        name=policy,
                        legendgroup=policy,
                        showlegend=row == 1 and col == 1,
                        marker_color=POLICY_COLORS[policy],
                    ),
                    row=row,
                    col=col,
                )
    fig.update_layout(barmode="group", title="What the compiler made of each policy", height=640)
    display(charts.show(fig, "specialization-compiled"))

# %% [markdown]
# ## Does the study support `src/`'s choices?
#
# A policy is *supported* here when no other policy is faster at any timed width
# in at least nine visits out of ten (the 10th percentile of the per-visit speed-up
# above 1), and no policy that is never slower compiles less often over the
# stream. The verdict below is computed from the saved result each time this page
# is built.

# %%
if result is not None:
    paragraphs = []
    for kernel, policy in src_policy.items():
        path = SRC_KERNELS[kernel][0]
        if policy is None:
            paragraphs.append(f"`{path}` follows none of the four policies; no verdict.")
            continue
        verdict = sweep.assess_policy(data, kernel, policy)
        stream_id = streams[kernel]["id"]
        parts = [
            f"**{kernel}** (`{path}`, policy `{policy}`): "
            + ("supported." if verdict.supported else "not supported.")
        ]
        where = {c["id"]: f"width {c['shape'][1]}" for c in time_cases(data, kernel)}
        parts += [f"At {where[case_id]} it failed its check." for case_id in verdict.failed]
        for case_id, faster in verdict.beaten:
            regs = "registers" in result.case(case_id)["impls"][policy]["metrics"]
            parts.append(
                f"At {where[case_id]}, `{faster}` ran "
                f"{quote(RESULT_ID, case_id, 'speedup', impl=faster, baseline=policy)} "
                f"the speed of `{policy}` "
                f"({quote(RESULT_ID, case_id, 'median_us', impl=faster)} against "
                f"{quote(RESULT_ID, case_id, 'median_us', impl=policy)}"
                + (
                    f"; registers {quote(RESULT_ID, case_id, 'metrics.registers', impl=faster)}"
                    f" against {quote(RESULT_ID, case_id, 'metrics.registers', impl=policy)})."
                    if regs
                    else ")."
                )
            )
        for other in verdict.dominated_by:
            parts.append(
                f"`{other}` was never slower and needed "
                f"{quote(RESULT_ID, stream_id, 'metrics.compiles', impl=other)} over the "
                f"stream against {quote(RESULT_ID, stream_id, 'metrics.compiles', impl=policy)}."
            )
        if verdict.supported:
            parts.append(
                f"It needed {quote(RESULT_ID, stream_id, 'metrics.compiles', impl=policy)} "
                f"over the stream, against "
                f"{quote(RESULT_ID, stream_id, 'metrics.compiles', impl='constexpr')} with "
                "every size constant."
            )
        paragraphs.append(" ".join(parts))
    display(Markdown("\n\n".join(paragraphs)))

# %% [markdown]
# ## What this shows, and what it does not
#
# * It prices one trade on one GPU: compiles against kernel time, for three kernels
#   in float16 on the block plan. The looped and split plans, the backward kernels
#   and bfloat16 or float32 are not timed here.
# * Compile time is host time: it depends on the CPU of the machine that ran the
#   sweep and on Triton's version, and the stream starts from an empty on-disk
#   cache. A server that keeps its cache directory pays each compile once per
#   deployment, not once per process; one that starts cold pays them all again.
# * The stream is synthetic. A real server's batch sizes are often padded to a few
#   buckets, which shrinks the constant-size policy's compile count; the chart of
#   compiles counts distinct keys, so the reader can redo the arithmetic for any
#   other stream with `specialization_sweep.predict_stream`.
# * Registers and load widths come from the compiled kernels (`n_regs`, and the
#   `ld.global` and `cp.async` widths in the PTX); they explain a difference, they
#   do not measure it.
# * The GEMM is a fixed tile with no autotuning, so that only specialisation
#   differs; `src/`'s GEMM on the H200 is a different, TMA-based kernel.
