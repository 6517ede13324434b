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

# %% tags=["remove-input"]
import inspect
import math
import sys

import pandas as pd
import plotly.graph_objects as go
from IPython.display import HTML, Markdown, display
from plotly.subplots import make_subplots

from kernel_portfolio import charts, plans
from kernel_portfolio.evidence import quote
from kernel_portfolio.ops import matmul as src_matmul
from kernel_portfolio.ops import rms_norm as src_rms_norm
from kernel_portfolio.ops import softmax as src_softmax
from kernel_portfolio.results import load, repo_root

ROOT = repo_root()
sys.path.insert(0, str(ROOT / "scripts"))
import specialization_sweep as sweep  # the sweep's own definitions

RESULT_ID = "h100-80gb-hbm3/specialization"
result = load(ROOT / "results" / f"{RESULT_ID}.json")
data = result.data
modules = {name: sweep.load_policy(name) for name in sweep.POLICIES}
POLICIES = list(sweep.POLICIES)
POLICY_COLORS = dict(zip(POLICIES, ("#d6336c", "#868e96", "#1c7ed6", "#37b24d"), strict=True))
KERNEL_NAMES = {"softmax": "softmax", "rms_norm": "RMSNorm", "matmul": "GEMM"}
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
# The softmax kernel, as the `vec-hint` policy declares it
# (`case_studies/specialization/vec_hint.py`): a block plan, one row in registers,
# on a persistent grid. The three `// VEC * VEC` lines are the hint; the other
# policies drop them and change only the decorator and the signature.

# %% tags=["remove-input"]
kernel_source = inspect.getsource(modules["vec-hint"].softmax_kernel.fn)
display(Markdown(f"```python\n{kernel_source}```"))

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

# %% tags=["remove-input"]
SRC_KERNELS = {
    "softmax": ("src/kernel_portfolio/ops/softmax.py", src_softmax._fwd_block_kernel),
    "rms_norm": ("src/kernel_portfolio/ops/rms_norm.py", src_rms_norm._fwd_block_kernel),
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
# The GEMM a Hopper GPU runs for float16 is `matmul.py`'s TMA kernel, whose tiles move
# through tensor descriptors rather than pointer arithmetic, so the study's pointer
# GEMM says nothing about its declarations; the pointer kernel compared here is the
# one it falls back to (float32, operands the copy engine cannot describe, GPUs
# before Hopper), and the one the study's GEMM mirrors.
#
# ## The arithmetic
#
# ### Compiles
#
# The request stream is seeded: each request has a batch drawn from 1 to 64, a
# sequence length from the list below (1 is a decode step, the others prefill
# chunks), and one of four hidden sizes: two powers of two, a multiple of 16 that
# is not one (5120), and a width that is not a multiple of 16 (4104). Rows are
# batch times sequence length. Triton's cache key for every launch of the stream
# can be computed without a GPU (`specialization_sweep.cache_key` runs Triton's
# own argument binder), so the number of compiles each policy needs is known
# before anything runs:

# %% tags=["remove-input"]
scale = sweep.FULL
stream = sweep.request_stream(
    scale.requests, 0, hiddens=scale.hiddens, seqs=scale.seqs, max_batch=scale.max_batch
)
shapes = {(r.rows, r.hidden) for r in stream}
predicted = sweep.predict_stream(scale)
display(
    Markdown(
        f"Stream: {scale.requests} requests, hidden sizes {', '.join(map(str, scale.hiddens))}, "
        f"sequence lengths {', '.join(map(str, scale.seqs))}, batch 1 to {scale.max_batch}: "
        f"{len(shapes)} distinct (rows, hidden) shapes. Compiles each policy needs for the "
        "whole stream, from Triton's cache key:"
    )
)
display(HTML(pd.DataFrame(predicted).T.rename_axis("kernel").to_html()))
assert all(predicted[k]["constexpr"] == len(shapes) for k in sweep.KERNELS)
# The row kernels' forms without constant sizes: the block plan's BLOCK and warps.
row_forms = {
    (p.block, p.num_warps)
    for p in (plans.choose(r, h, elem_bytes=2, sm_count=132, plan="block") for r, h in shapes)
}
assert all(predicted[k]["runtime"] == len(row_forms) for k in ("softmax", "rms_norm"))
assert len(row_forms) == 3 and {b for b, _ in row_forms} == {4096, 8192}  # the text below

# %% [markdown]
# With every size constant, each distinct (rows, hidden) shape of the stream is a
# compile, for every kernel: most shapes come once, so almost every request
# compiles. The other policies compile the row kernels once per `BLOCK` and
# warps (4096, or 8192 for the three wider hidden sizes, and at 5120 a second
# 8192 form: at no more rows than SMs its warps round up, `plans.warps_for`) and
# the GEMM once, plus once per hint value: `default-spec` again for the width
# that is not divisible by 16, `vec-hint` only when `VEC` changes (all four
# widths are multiples of 8 elements, so never here).
#
# ### Bytes and load instructions
#
# The kernel-time experiment below runs each kernel at four widths. At one width
# every policy moves the same bytes (the byte formulas below); the policies differ
# only in the instructions that move them. A row kernel's thread holds
# `BLOCK / (32 * warps)` values of a row. As 16-byte vectors that is one load per
# 8 values; as 2-byte loads, one per value. RMSNorm loads the weight the same way,
# so it doubles both counts. The prediction for the row kernels, against the
# `ld.global` instructions counted in each compiled kernel's PTX (saved in the
# result):


# %% tags=["remove-input"]
def cases_of(kernel: str) -> dict[int, dict]:
    """The kernel-time cases of one kernel, by width."""
    return {c["shape"][1]: c for c in data["cases"] if c["op"] == kernel}


def metric(case: dict, impl: str, name: str):
    """A saved metric of one policy in one case."""
    return case["impls"][impl]["metrics"][name]["value"]


def q(case: dict, stat: str, impl: str, baseline: str | None = None):
    """Quote one statistic of one policy in one case of this result."""
    return quote(RESULT_ID, case["id"], stat, impl=impl, baseline=baseline)


def row_plan(width: int) -> plans.RowPlan:
    """The block plan the sweep launches a row kernel with (``make_launch``)."""
    return plans.choose(scale.rows, width, elem_bytes=2, sm_count=data["env"]["sm_count"],
                        plan="block")  # fmt: skip


timed = {kernel: cases_of(kernel) for kernel in sweep.KERNELS}
WIDTHS = list(scale.widths)
assert all(sorted(timed[k]) == WIDTHS for k in sweep.KERNELS)
assert all(
    r["status"] == "ok" for k in timed.values() for c in k.values() for r in c["impls"].values()
)

rows = []
for kernel in ("softmax", "rms_norm"):
    tensors = 2 if kernel == "rms_norm" else 1
    for width in WIDTHS:
        case, plan = timed[kernel][width], row_plan(width)
        per_thread = plan.block // (32 * plan.num_warps)
        wide, narrow = tensors * per_thread // 8, tensors * per_thread
        rows.append({
            "kernel": KERNEL_NAMES[kernel], "width": width,
            "bytes": f"{case['bytes']:,} ({case['bytes_formula']})",
            "BLOCK, warps": f"{plan.block}, {plan.num_warps}",
            "values per thread": per_thread,
            "16-byte loads, predicted": wide,
            "16-byte loads in PTX (constexpr, vec-hint)":
                f"{q(case, 'metrics.loads_16b', 'constexpr')}, "
                f"{q(case, 'metrics.loads_16b', 'vec-hint')}",
            "2-byte loads, predicted": narrow,
            "2-byte loads in PTX (runtime)": str(q(case, "metrics.loads_narrow", "runtime")),
        })  # fmt: skip
        assert (
            metric(case, "constexpr", "loads_16b") == metric(case, "vec-hint", "loads_16b") == wide
        )
        assert metric(case, "runtime", "loads_narrow") == narrow
        assert metric(case, "runtime", "loads_16b") == 0
display(HTML(pd.DataFrame(rows).to_html(index=False, escape=False)))

# %% [markdown]
# The counts are exactly the prediction: `constexpr` and `vec-hint` load 16 bytes
# at a time at every width, `runtime` never does. A memory-bound kernel that issues
# eight times the load instructions need not be slower in proportion (the memory
# system, not the instruction issue, is the usual limit), but it needs more
# registers to hold the addresses and the loaded values, and registers decide how
# much of the row the SM can keep in flight.
#
# ### Registers and occupancy
#
# A Hopper SM (compute capability 9.0) has 65,536 32-bit registers and keeps at most
# 64 warps resident; registers are handed out per warp in units of 256 (CUDA
# Programming Guide, compute-capability tables). The persistent grid launches
# `64 / warps` programs per SM (`plans.persistent_programs`), so it fills the SM
# only if each thread needs at most 32 registers. Above that, fewer programs fit,
# and fewer loads are in flight to hide the memory latency. The registers each
# compiled kernel needs are saved in the result (the compiler's `n_regs`); with
# them, the programs an SM can hold:

# %%
REGISTERS_PER_SM = 65_536
REGISTER_UNIT = 256  # registers are allocated per warp in multiples of this


def resident_programs(registers: int, warps: int) -> int:
    """Programs of ``warps`` warps a Hopper SM holds at once, as registers allow."""
    per_warp = math.ceil(registers * 32 / REGISTER_UNIT) * REGISTER_UNIT
    return min(plans.WARPS_PER_SM // warps, REGISTERS_PER_SM // (per_warp * warps))


assert resident_programs(32, 8) == 8 and resident_programs(64, 16) == 2
assert resident_programs(33, 16) == 3 and resident_programs(255, 8) == 1


def warps_of(kernel: str, width: int) -> int:
    return sweep.GEMM_LAUNCH["num_warps"] if kernel == "matmul" else row_plan(width).num_warps


occupancy = {
    (kernel, width, policy): resident_programs(
        metric(timed[kernel][width], policy, "registers"), warps_of(kernel, width)
    )
    for kernel in sweep.KERNELS
    for width in WIDTHS
    for policy in POLICIES
}
table = pd.DataFrame(
    [
        {
            "kernel": KERNEL_NAMES[kernel],
            "width": width,
            "warps": warps_of(kernel, width),
            **{
                policy: f"{q(timed[kernel][width], 'metrics.registers', policy)}: "
                f"{occupancy[kernel, width, policy]} of "
                f"{plans.WARPS_PER_SM // warps_of(kernel, width)}"
                for policy in POLICIES
            },
        }
        for kernel in sweep.KERNELS
        for width in WIDTHS
    ]
)  # fmt: skip
display(
    Markdown(
        "Registers per thread, then the programs per SM they allow out of the most the "
        "warp limit allows:"
    )
)
display(HTML(table.to_html(index=False, escape=False)))
spills = [
    (c["id"], p) for k in timed.values() for c in k.values() for p in POLICIES
    if metric(c, p, "spill_bytes") != 0
]  # fmt: skip
display(
    Markdown(
        "No compiled kernel spilled registers to memory (`spill_bytes` is zero in every record)."
        if not spills
        else f"Kernels that spilled registers: {', '.join(f'{c} ({p})' for c, p in spills)}."
    )
)

# %% [markdown]
# For the GEMM the registers are only one bound: its three-stage pipeline also
# needs shared memory, which the result does not record, so its column is an upper
# bound on what fits.
#
# **The prediction.** `runtime` will be slower than `vec-hint` at every width,
# powers of two included, since it gives up 16-byte loads and registers at once;
# `default-spec` will match `vec-hint` at 4096 and 8192 (divisible by 16) and fall
# to `runtime` at 4104 and 8200; `vec-hint` and `constexpr` make the same loads,
# and should differ little, most where their registers differ. And `constexpr` will
# spend a compile on almost every request.
#
# ## The measurement
#
# **Compiles over a request stream.** Each request went through every kernel of
# every policy, the policies in a random order per request, with Triton's on-disk
# cache empty at the start. A request's time is taken by CUDA events around the
# launch, so a request that compiled includes its compile. A policy whose compiles
# for one kernel passed the sweep's compile budget (`--compile-budget-s`) stopped
# serving that kernel there.
#
# **Kernel time.** Each kernel at widths that fill their power-of-two block (4096,
# 8192) and widths just past one (4104, 8200), float16: the row kernels over enough
# rows to fill every SM many times, the GEMM with `M` fixed and `N = K =` the width.
# Fresh random inputs, the output poisoned with NaN and checked against the float64
# reference, the L2 overwritten before every call, CUDA events, the GPU warmed up
# first, policies visited in a new random order on every visit.

# %% tags=["remove-input"]
env = data["env"]
display(
    Markdown(
        f"Measured on **{env['gpu_name']}** ({env['sm_count']} SMs), torch {env['torch']}, "
        f"triton {env['triton']}, `{data['command']}`, finished {data['finished_utc']} "
        f"([evidence](../../evidence/{RESULT_ID}/): every sample and the raw log)."
    )
)

# %% [markdown]
# ## Compiles over the stream

# %% tags=["remove-input"]
streams = {k: next(c for c in data["cases"] if c["op"] == f"{k}-stream") for k in sweep.KERNELS}
fig = make_subplots(
    rows=1, cols=len(sweep.KERNELS), subplot_titles=[KERNEL_NAMES[k] for k in sweep.KERNELS]
)
for col, kernel in enumerate(sweep.KERNELS, start=1):
    for policy, rec in streams[kernel]["impls"].items():
        cumulative = pd.Series(rec["samples_ms"]).cumsum() / 1e3
        fig.add_trace(
            go.Scatter(
                x=list(range(1, len(cumulative) + 1)),
                y=cumulative.tolist(),
                name=policy,
                legendgroup=policy,
                showlegend=col == 1,
                line_color=POLICY_COLORS[policy],
            ),
            row=1,
            col=col,
        )
fig.update_xaxes(title_text="request")
fig.update_yaxes(type="log")
fig.update_yaxes(title_text="cumulative seconds", col=1)
charts.styled(fig, height=420)
fig.update_layout(title="Time spent on the stream, compiles included", margin={"t": 90})
display(charts.show(fig, "specialization-stream"))

fig = make_subplots(
    rows=1, cols=len(sweep.KERNELS), subplot_titles=[KERNEL_NAMES[k] for k in sweep.KERNELS]
)
for col, kernel in enumerate(sweep.KERNELS, start=1):
    recs = streams[kernel]["impls"]
    fig.add_trace(
        go.Bar(
            x=POLICIES,
            y=[metric(streams[kernel], p, "compiles") for p in POLICIES],
            marker_color=[POLICY_COLORS[p] for p in POLICIES],
            name="compiles counted",
            showlegend=col == 1,
            hovertext=[f"over {metric(streams[kernel], p, 'requests')} requests" for p in POLICIES],
        ),
        row=1,
        col=col,
    )
    fig.add_trace(
        go.Scatter(
            x=POLICIES,
            y=[metric(streams[kernel], p, "predicted_compiles") for p in POLICIES],
            mode="markers",
            marker={"symbol": "line-ew-open", "size": 28, "color": "black"},
            name="predicted from Triton's cache key, same requests",
            showlegend=col == 1,
        ),
        row=1,
        col=col,
    )
fig.update_yaxes(type="log")
fig.update_yaxes(title_text="compiles", col=1)
charts.styled(fig, height=420)
fig.update_layout(title="Compiles over the requests served", margin={"t": 90})
display(charts.show(fig, "specialization-compiles"))

# %% tags=["remove-input"]
# The text below relies on these.
assert all(
    metric(c, p, "compiles") == metric(c, p, "predicted_compiles")
    for c in streams.values()
    for p in POLICIES
)
assert all(
    metric(c, "constexpr", "compiles") > 10 * metric(c, p, "compiles")
    for c in streams.values()
    for p in POLICIES
    if p != "constexpr"
)
stopped = [k for k, c in streams.items() if metric(c, "constexpr", "requests") < len(stream)]
table = pd.DataFrame(
    {
        policy: {
            KERNEL_NAMES[k]: f"{q(c, 'metrics.compiles', policy)} in "
            f"{q(c, 'metrics.compile_ms', policy)}, {q(c, 'metrics.requests', policy)}; "
            f"median request {q(c, 'median_us', policy)}"
            for k, c in streams.items()
        }
        for policy in POLICIES
    }
)
display(Markdown("Compiles, their total time, the requests served, and the median request time:"))
display(HTML(table.rename_axis("kernel").reset_index().to_html(index=False, escape=False)))
display(
    Markdown(
        "Every compile count equals the number of distinct cache keys Triton's binder "
        "predicts for the same requests, without a GPU: the cost side is arithmetic. "
        + (
            "`constexpr` spent its compile budget "
            + ("on every kernel" if len(stopped) == len(streams) else f"on {len(stopped)} kernels")
            + " before the stream ended ("
            + ", ".join(
                f"{KERNEL_NAMES[k]} after {q(streams[k], 'metrics.requests', 'constexpr')}"
                for k in stopped
            )
            + f" of {len(stream)}): its counts are what the budget allowed, not the stream's "
            "total. "
            if stopped
            else ""
        )
        + "Its median request took "
        + ", ".join(
            f"{q(c, 'median_us', 'constexpr')} ({KERNEL_NAMES[k]})" for k, c in streams.items()
        )
        + ": the median request compiled. With `vec-hint` the median request took "
        + ", ".join(
            f"{q(c, 'median_us', 'vec-hint')} ({KERNEL_NAMES[k]})" for k, c in streams.items()
        )
        + "."
    )
)

# %% [markdown]
# ## Kernel time
#
# Medians with the 10th to 90th percentile of every sample:

# %% tags=["remove-input"]
fig = make_subplots(
    rows=1, cols=len(sweep.KERNELS), subplot_titles=[KERNEL_NAMES[k] for k in sweep.KERNELS]
)
for col, kernel in enumerate(sweep.KERNELS, start=1):
    cases = [timed[kernel][w] for w in WIDTHS]
    for policy in POLICIES:
        recs = [c["impls"][policy] for c in cases]
        fig.add_trace(
            go.Bar(
                x=[str(w) for w in WIDTHS],
                y=[r["median_ms"] * 1e3 for r in recs],
                error_y={
                    "type": "data",
                    "array": [(r["q90_ms"] - r["median_ms"]) * 1e3 for r in recs],
                    "arrayminus": [(r["median_ms"] - r["q10_ms"]) * 1e3 for r in recs],
                },
                name=policy,
                legendgroup=policy,
                showlegend=col == 1,
                marker_color=POLICY_COLORS[policy],
            ),
            row=1,
            col=col,
        )
fig.update_xaxes(title_text="width", type="category")
fig.update_yaxes(title_text="microseconds", col=1)
charts.styled(fig, height=440)
fig.update_layout(barmode="group", title="Median kernel time (lower is better)", margin={"t": 90})
display(charts.show(fig, "specialization-time"))


# %% tags=["remove-input"]
def faster(case: dict, impl: str, baseline: str) -> bool:
    """``impl`` was faster than ``baseline`` in at least nine visits out of ten.

    The per-visit speed-up's 10th percentile is above 1: a difference beyond the
    visit-to-visit noise of this run.
    """
    ratio = next(r for r in case["ratios"] if (r["impl"], r["baseline"]) == (impl, baseline))
    return ratio["q10"] > 1.0


medians = pd.DataFrame(
    [
        {"kernel": KERNEL_NAMES[kernel], "width": width}
        | {p: str(q(case, "median_us", p)) for p in POLICIES}
        for kernel, cases in timed.items()
        for width, case in cases.items()
    ]
)
display(Markdown("Median time per call:"))
display(HTML(medians.to_html(index=False, escape=False)))

# %% tags=["remove-input"]
# The text below relies on these; if a new run changes them, the build stops here.
ALIGNED = [w for w in WIDTHS if w % 16 == 0]
RAGGED = [w for w in WIDTHS if w % 16]
for kernel, cases in timed.items():
    for width, case in cases.items():
        assert faster(case, "vec-hint", "runtime"), (kernel, width)
        same_loads = ("loads_16b", "loads_narrow", "registers")
        like = "vec-hint" if width in ALIGNED else "runtime"
        assert metric(case, "default-spec", "loads_16b") == metric(case, like, "loads_16b")
        if width in RAGGED:
            assert all(
                metric(case, "default-spec", m) == metric(case, "runtime", m) for m in same_loads
            )
            assert faster(case, "vec-hint", "default-spec"), (kernel, width)
        else:
            assert not faster(case, "vec-hint", "default-spec"), (kernel, width)
        assert metric(case, "runtime", "loads_16b") == 0
        assert metric(case, "vec-hint", "loads_16b") == metric(case, "constexpr", "loads_16b")
    for policy in POLICIES if kernel == "softmax" else ():  # the block plan's masked half
        gbps = [cases[w]["impls"][policy]["gbps"] for w in (4096, 4104)]
        assert gbps[1] < gbps[0], (kernel, policy)

sm, mm = timed["softmax"], timed["matmul"]
text = [
    f"**`runtime` is slower than `vec-hint` at every width, powers of two included.** "
    f"Its kernels hold no 16-byte load and more registers: softmax at 4096 needs "
    f"{q(sm[4096], 'metrics.registers', 'runtime')} against "
    f"{q(sm[4096], 'metrics.registers', 'vec-hint')}, and `vec-hint` ran "
    f"{q(sm[4096], 'speedup', 'vec-hint', 'runtime')} its speed there "
    f"({q(sm[4096], 'median_us', 'vec-hint')} against {q(sm[4096], 'median_us', 'runtime')}). "
    f"The GEMM suffers most: at 4096 `vec-hint` ran "
    f"{q(mm[4096], 'speedup', 'vec-hint', 'runtime')} its speed, with "
    f"{q(mm[4096], 'metrics.registers', 'runtime')} against "
    f"{q(mm[4096], 'metrics.registers', 'vec-hint')}.",
    "**`default-spec` is `vec-hint` at 4096 and 8192, and `runtime` at 4104 and 8200.** "
    "Where the width is divisible by 16, Triton's own specialisation proves what `VEC` "
    "proves, and the kernels time alike (no difference in nine visits of ten). Where it "
    "is not, the compiled kernel has `runtime`'s loads and registers; at 4104 `vec-hint` ran "
    "at "
    + ", ".join(
        f"{q(timed[k][4104], 'speedup', 'vec-hint', 'default-spec')} the speed of "
        f"`default-spec` for {KERNEL_NAMES[k]}"
        for k in sweep.KERNELS
    )
    + ".",
    "**Every softmax policy pays for a row just past a power of two.** A row of 4104 "
    "takes a block of 8192 with twice the warps: the same warps per SM, each holding half "
    "masked lanes, so half the row bytes in flight. Even `constexpr` moved the softmax "
    f"rows at {q(sm[4104], 'gbps', 'constexpr')} at 4104 against "
    f"{q(sm[4096], 'gbps', 'constexpr')} at 4096 ({q(sm[4104], 'pct_copy', 'constexpr')} and "
    f"{q(sm[4096], 'pct_copy', 'constexpr')} of the copy bandwidth measured in the same "
    "run). That is a cost of one power-of-two block per row, which no declaration "
    "removes. The library's block plan therefore holds such a row as two pieces, a main "
    "block of 4096 columns and a tail of 8 (`plans.block_pieces`): in the default suite, "
    "which ran on an H200 (this study ran on an H100), "
    "its softmax forward at 16384x4104 float16 moves "
    f"{quote('h200/default', 'softmax/fwd/16384x4104/float16', 'gbps')} "
    f"({quote('h200/default', 'softmax/fwd/16384x4104/float16', 'pct_copy')} of copy), "
    "and the RMSNorm forward "
    f"{quote('h200/default', 'rms_norm/fwd/16384x4104/float16', 'pct_copy')}. "
    "The study's RMSNorm forward under `constexpr` moved its rows "
    f"{q(timed['rms_norm'][4104], 'gbps', 'constexpr')} at 4104 against "
    f"{q(timed['rms_norm'][4096], 'gbps', 'constexpr')} at 4096.",
]
display(Markdown("\n\n".join(text)))

# %% [markdown]
# ## What the compiler made
#
# Registers per thread and the narrow (2-byte) global loads in each compiled
# kernel, from the result:

# %% tags=["remove-input"]
fig = make_subplots(
    rows=2,
    cols=len(sweep.KERNELS),
    subplot_titles=[KERNEL_NAMES[k] for k in sweep.KERNELS],
    vertical_spacing=0.18,
)
for col, kernel in enumerate(sweep.KERNELS, start=1):
    for row, name in ((1, "registers"), (2, "loads_narrow")):
        for policy in POLICIES:
            fig.add_trace(
                go.Bar(
                    x=[str(w) for w in WIDTHS],
                    y=[metric(timed[kernel][w], policy, name) for w in WIDTHS],
                    name=policy,
                    legendgroup=policy,
                    showlegend=row == 1 and col == 1,
                    marker_color=POLICY_COLORS[policy],
                ),
                row=row,
                col=col,
            )
fig.update_xaxes(type="category")
charts.styled(fig, height=640)
fig.update_yaxes(title_text="registers/thread", row=1, col=1)
fig.update_yaxes(title_text="2-byte loads (PTX)", row=2, col=1)
fig.update_layout(barmode="group", title="What the compiler made of each policy", margin={"t": 90})
display(charts.show(fig, "specialization-compiled"))

# %% tags=["remove-input"]
gaps = [
    (kernel, width)
    for kernel, cases in timed.items()
    for width, case in cases.items()
    if faster(case, "constexpr", "vec-hint")
]
ahead = [
    (kernel, width)
    for kernel, cases in timed.items()
    for width, case in cases.items()
    if faster(case, "vec-hint", "constexpr")
]
largest = max(gaps, key=lambda kw: next(
    r["median"] for r in timed[kw[0]][kw[1]]["ratios"]
    if (r["impl"], r["baseline"]) == ("constexpr", "vec-hint")
))  # fmt: skip
# The text below relies on this: where the gap is large, occupancy differs.
assert occupancy[(*largest, "constexpr")] > occupancy[(*largest, "vec-hint")]
big = timed[largest[0]][largest[1]]
display(
    Markdown(
        "**`vec-hint` against `constexpr`.** Both load 16 bytes at a time at every width. "
        f"`constexpr` was faster in nine visits of ten in {len(gaps)} of the "
        f"{len(WIDTHS) * len(sweep.KERNELS)} kernel-width pairs: "
        + "; ".join(
            f"{KERNEL_NAMES[k]} at {w}, {q(timed[k][w], 'speedup', 'constexpr', 'vec-hint')} "
            f"(registers {q(timed[k][w], 'metrics.registers', 'constexpr')} against "
            f"{q(timed[k][w], 'metrics.registers', 'vec-hint')})"
            for k, w in gaps
        )
        + (
            "; `vec-hint` was faster in "
            + "; ".join(
                f"{KERNEL_NAMES[k]} at {w}, {q(timed[k][w], 'speedup', 'vec-hint', 'constexpr')}"
                for k, w in ahead
            )
            if ahead
            else ""
        )
        + f". The largest gap, {KERNEL_NAMES[largest[0]]} at {largest[1]}, is the occupancy "
        f"arithmetic above at work: {q(big, 'metrics.registers', 'constexpr')} let "
        f"{occupancy[(*largest, 'constexpr')]} programs share an SM, "
        f"{q(big, 'metrics.registers', 'vec-hint')} only {occupancy[(*largest, 'vec-hint')]}. "
        "Why the constant width saves registers there (the mask and index arithmetic of a "
        "block past half empty is the likely place) is more than the PTX counts can say."
    )
)

# %% [markdown]
# ## The trade: one compile against time per call
#
# `constexpr` buys its kernel-time gains with a compile per shape. A compile pays
# for itself once the same shape has run often enough for the time saved per call
# to add up to the compile's time. The chart divides the mean time of one
# `constexpr` compile over the stream (total compile time over compiles, table
# above) by the time it saved per call against `vec-hint` at each width, where it
# saved any beyond the noise (no bar: it saved nothing there). The dashed line is
# how often a shape recurred in the stream: requests over distinct shapes.

# %% tags=["remove-input"]
per_compile_ms = {
    k: metric(c, "constexpr", "compile_ms") / metric(c, "constexpr", "compiles")
    for k, c in streams.items()
}
payback = {}
for kernel in sweep.KERNELS:
    for width in WIDTHS:
        case = timed[kernel][width]
        saved_ms = case["impls"]["vec-hint"]["median_ms"] - case["impls"]["constexpr"]["median_ms"]
        worth = faster(case, "constexpr", "vec-hint") and saved_ms > 0
        payback[kernel, width] = per_compile_ms[kernel] / saved_ms if worth else None
per_shape = len(stream) / len(shapes)
paid = [v for v in payback.values() if v is not None]
# The text below relies on this.
assert paid and min(paid) > 100 * per_shape
fig = go.Figure()
for kernel in sweep.KERNELS:
    fig.add_trace(
        go.Bar(
            x=[str(w) for w in WIDTHS],
            y=[payback[kernel, w] for w in WIDTHS],
            name=KERNEL_NAMES[kernel],
        )
    )
fig.add_hline(
    y=per_shape,
    line_dash="dash",
    annotation_text="calls per shape in the stream",
    annotation_position="top left",
)
fig.update_yaxes(
    type="log", title_text="calls to repay a compile", range=[0, math.log10(max(paid)) + 0.3]
)
fig.update_xaxes(title_text="width", type="category")
charts.styled(fig, height=420)
fig.update_layout(barmode="group", title="Calls of one shape to repay a constexpr compile")
display(charts.show(fig, "specialization-payback"))

# %% [markdown]
# The saving per call is measured on 16,384 rows (a 4096-row GEMM); the stream's
# requests are smaller, save less per call, and take longer to repay a compile, so
# the bars are the most favourable case for `constexpr`. Even so, every bar stands
# orders of magnitude above the line: the stream brought each shape about once. A
# server that pads batches to a few sizes and keeps Triton's cache across restarts
# sees each shape far more often; the chart says how often is enough.
#
# ## Does the study support `src/`'s choices?
#
# A policy is *dominated* when another one compiled no more often over the stream,
# was never slower at any timed width (no difference in nine visits of ten), and was
# better on at least one of the two. A dominated policy is never the right choice;
# among the others the choice is the trade priced above. The verdict is computed
# from the saved result each time this page is built.


# %% tags=["remove-input"]
def dominates(kernel: str, better: str, worse: str) -> bool:
    """``better`` compiled no more, was never slower, and was better somewhere."""
    stream_case, cases = streams[kernel], timed[kernel].values()
    fewer = metric(stream_case, better, "compiles") < metric(stream_case, worse, "compiles")
    no_more = metric(stream_case, better, "compiles") <= metric(stream_case, worse, "compiles")
    never_slower = not any(faster(c, worse, better) for c in cases)
    somewhere = any(faster(c, better, worse) for c in cases)
    return no_more and never_slower and (fewer or somewhere)


front = {
    kernel: [p for p in POLICIES if not any(dominates(kernel, o, p) for o in POLICIES if o != p)]
    for kernel in sweep.KERNELS
}
paragraphs = [
    "Not dominated, per kernel: "
    + "; ".join(f"{KERNEL_NAMES[k]}: {', '.join(f'`{p}`' for p in f)}" for k, f in front.items())
    + "."
]
for kernel, policy in src_policy.items():
    path = SRC_KERNELS[kernel][0]
    stream_case = streams[kernel]
    if policy is None:
        paragraphs.append(f"`{path}` follows none of the four policies; no verdict.")
        continue
    if policy in front[kernel]:
        rivals = [p for p in front[kernel] if p != policy]
        parts = [
            f"**{KERNEL_NAMES[kernel]}: `{path}` declares its sizes as `{policy}`, and the data "
            f"supports it.** No policy dominates it: it needed "
            f"{q(stream_case, 'metrics.compiles', policy)} over the stream"
        ]
        parts += [
            f"; `{r}` needed {q(stream_case, 'metrics.compiles', r)} over "
            f"{q(stream_case, 'metrics.requests', r)}, and was faster at "
            + (
                ", ".join(str(w) for w in WIDTHS if faster(timed[kernel][w], r, policy))
                or "no width"
            )
            for r in rivals
        ]
        parts.append(
            ". What the others buy with their compiles is the trade priced above, and on a "
            "stream like this one it does not pay."
            if rivals
            else "."
        )
        paragraphs.append("".join(parts))
    else:
        best = next(o for o in POLICIES if o != policy and dominates(kernel, o, policy))
        wins = [w for w in WIDTHS if faster(timed[kernel][w], best, policy)]
        ragged = bool(wins) and all(w % 16 for w in wins)
        paragraphs.append(
            f"**{KERNEL_NAMES[kernel]}: `{path}` declares its sizes as `{policy}`, and the data "
            f"does not support it.** `{best}` dominates it: it needed "
            f"{q(stream_case, 'metrics.compiles', best)} against "
            f"{q(stream_case, 'metrics.compiles', policy)}, was never slower, and ran "
            + (
                " and ".join(
                    f"{q(timed[kernel][w], 'speedup', best, policy)} its speed at {w}" for w in wins
                )
                if wins
                else "as fast at every width"
            )
            + (
                ", the widths that are not multiples of 16, where Triton's own specialisation "
                "gives no alignment hint"
                if ragged
                else ""
            )
            + f". The study supports `{best}` for this kernel."
        )
display(Markdown("\n\n".join(paragraphs)))

# %% [markdown]
# ## What this shows, and what it does not
#
# * It prices one trade on one GPU: compiles against kernel time, for three kernels
#   in float16 on the block plan. The looped and split plans, the backward kernels
#   and bfloat16 or float32 are not timed here; their declarations in `src/` follow
#   the same rule as the block kernels.
# * The occupancy arithmetic explains the timings; it does not measure them. A
#   profiler's achieved occupancy and the SASS (not the PTX) would say where each
#   register goes; this page reads only the compiler's register count and the PTX
#   load instructions.
# * Compile time is host time: it depends on the CPU of the machine that ran the
#   sweep and on Triton's version, and the stream starts from an empty on-disk
#   cache. A server that keeps its cache directory pays each compile once per
#   deployment, not once per process; one that starts cold pays them all again.
# * The stream is synthetic. A real server's batch sizes are often padded to a few
#   buckets, which shrinks the constant-size policy's compile count; the compile
#   counts are distinct cache keys, so the reader can redo the arithmetic for any
#   other stream with `specialization_sweep.predict_stream`.
# * A mixed policy was not timed: the width a constant and the row count not. It
#   would compile once per hidden size, and might recover `constexpr`'s registers
#   where the width is just past a power of two.
# * The GEMM is a fixed tile with no autotuning, so that only specialisation
#   differs; `src/`'s GEMM on Hopper is a different, TMA-based kernel.
