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
# # sm_120a: check the premise, not only the patch
#
# In March 2026 a Triton pull request,
# [#9734](https://github.com/triton-lang/triton/pull/9734), changed compute
# capability 12.0 (consumer Blackwell, the RTX 50 series) to compile for `sm_120`
# instead of `sm_120a`. Its premise: `sm_120a` is not a real target, and asking
# for it made Triton emit tensor-memory (`tcgen05`) instructions that consumer
# Blackwell does not have. It was merged, and reverted the next day by
# [#9755](https://github.com/triton-lang/triton/pull/9755): `sm_120a` is a real
# architecture-specific target that CUTLASS and PyTorch build for, and without
# the suffix `ptxas` rejects `tensormap.replace`.
#
# Review checked the patch against its premise. This page checks the premise
# itself, with nothing but the triton wheel, on a machine without a GPU. Every
# table, chart and error message in sections 1 to 3 is produced while the page is
# built; section 4 renders a committed release matrix, whose raw log is one
# click away.
#
# **The question.** Does the `a` in `sm_120a` make Triton emit `tcgen05`, and
# does dropping it cost anything?
#
# **What would predict the answer.** Two mechanisms, both checkable:
#
# 1. Triton picks a kernel's matrix instructions while lowering it, from the
#    compute capability it compiles for: `mma.sync` on Ampere, `wgmma` on Hopper,
#    `tcgen05` on datacenter Blackwell. If the suffix steered that choice, a
#    `tl.dot` compiled for 120 would contain `tcgen05` the way one compiled for
#    100 does.
# 2. `ptxas` checks every instruction against the PTX `.target`. An `a` target
#    ("architecture-specific") unlocks features that only that exact chip has. If
#    `sm_120a` were meaningless, removing the `a` would change nothing; if it is
#    real, some instruction Triton emits for 120 is refused without it.
#
# **The experiment.** Compile two small kernels ahead of time for capabilities
# 80, 90, 100, 120 and 121; count instruction families in the PTX; hand the PTX
# to the `ptxas` that ships in the wheel, with and without the suffix.

# %% tags=["remove-input"]
import html
import json

import pandas as pd
import plotly.graph_objects as go
from IPython.display import HTML, Markdown, display
from plotly.subplots import make_subplots

from kernel_portfolio import arch, charts
from kernel_portfolio.results import repo_root

FAMILY_COLORS = dict(
    zip(arch.FAMILIES, ("#d62728", "#9467bd", "#1f77b4", "#2ca02c", "#ff7f0e"), strict=True)
)


def pre(text: str) -> HTML:
    """Captured text, shown verbatim."""
    return HTML(f"<pre>{html.escape(text)}</pre>")


def shorten(text: str, head: int = 4) -> str:
    """The first lines and the last line of a long tool output, saying how many were left out."""
    lines = text.splitlines()
    if len(lines) <= head + 2:
        return text
    return "\n".join([*lines[:head], f"[... {len(lines) - head - 1} more lines ...]", lines[-1]])


display(
    Markdown(
        f"Installed: **triton {arch.triton.__version__}**. "
        f"Probe kernels: {', '.join(f'`{k}`' for k in arch.KERNELS)}. "
        f"Capabilities: {', '.join(map(str, arch.CAPABILITIES))}. No GPU is used."
    )
)

# %% [markdown]
# ## 1. What Triton emits for each target
#
# Triton compiles for a target without a device: `triton.compile` takes a
# `GPUTarget("cuda", capability, 32)`. The probes in `kernel_portfolio.arch` are
# two kernels:
#
# * `dot`: one 64 by 64 float16 tile through `tl.dot`, the kernel that would show
#   `tcgen05` if anything does;
# * `descriptor`: a copy through tensor descriptors built on the device with
#   `tl.make_tensor_descriptor`, which from Hopper on fills a TMA descriptor in
#   memory (`tensormap.replace`) and copies through it (`cp.async.bulk.tensor`).
#
# Each compile runs the whole pipeline, `ptxas` included, from an empty cache.
# The same table prints from a shell with `kp arch probe`.

# %%
probes = arch.probe()
table = pd.DataFrame(arch.probe_table(probes))
display(HTML(table.to_html(index=False)))

# %% [markdown]
# The same counts as a chart: one group of bars per capability, labelled with the
# `.target` Triton chose; one panel per kernel.

# %% tags=["remove-input"]
fig = make_subplots(
    rows=len(arch.KERNELS),
    cols=1,
    subplot_titles=[f"{k} kernel" for k in arch.KERNELS],
    vertical_spacing=0.2,
)
for row_number, kernel in enumerate(arch.KERNELS, start=1):
    rows = table[table.kernel == kernel]
    labels = [f"{c}<br>{t}" for c, t in zip(rows.capability, rows.target, strict=True)]
    for family in arch.FAMILIES:
        fig.add_trace(
            go.Bar(
                x=labels,
                y=rows[family],
                name=family,
                legendgroup=family,
                showlegend=row_number == 1,
                marker_color=FAMILY_COLORS[family],
            ),
            row=row_number,
            col=1,
        )
fig.update_yaxes(title_text="instructions")
fig.update_layout(barmode="group", legend={"orientation": "h", "y": -0.15}, height=600)
charts.show(fig, "sm120a-families")

# %% tags=["remove-input"]
# The text below relies on these; if a Triton release changes them, the build stops here.
by_key = {(p.kernel, p.capability): p for p in probes}
assert all(p.compiled and p.target == arch.rule_arch(p.capability) for p in probes)
assert by_key["dot", 100].counts["tcgen05"] > 0
assert by_key["dot", 120].counts["tcgen05"] == 0 and by_key["dot", 120].counts["mma.sync"] > 0
assert by_key["dot", 121].counts["tcgen05"] == 0
assert by_key["descriptor", 120].counts["tensormap.replace"] > 0
assert by_key["descriptor", 80].counts["tensormap.replace"] == 0

# %% [markdown]
# **What it shows.** Every capability from 90 on gets an `a` target, 120
# included (`sm_120a`), and both kernels compile for all of them. Yet the `dot`
# kernel holds `tcgen05` only at 100. At 120 and 121, with the suffix, it holds
# `mma.sync`, the warp-level instruction Ampere already had: the instruction
# family follows the capability, not the suffix. The `descriptor` kernel holds
# `tensormap.replace` and `cp.async.bulk.tensor` from 90 on and neither at 80,
# where Triton rewrites descriptors into plain pointer arithmetic.
#
# So the first half of the premise does not hold: compiling for `sm_120a` does
# not produce tensor-memory instructions.

# %% [markdown]
# ## 2. What ptxas says with and without the suffix
#
# Now the second mechanism. The `descriptor` kernel's PTX for capability 120 is
# assembled twice by the wheel's own `ptxas` (the binary Triton itself runs for
# that capability): once with `.target sm_120a`, once with `.target sm_120`. A
# third run asks the reverse question: if `sm_120a` were the door to tensor
# memory, the `dot` kernel built for `sm_100a` would assemble for `sm_120a`.
# From a shell: `kp arch ptxas --capability 120`.

# %%
checks = arch.ptxas_checks(probes)
for check in checks:
    verdict = "accepted" if check["returncode"] == 0 else "rejected"
    display(
        Markdown(
            f"**`{check['kernel']}` kernel compiled for {check['from_capability']}, assembled "
            f"with `.target {check['gpu_name']}`** by `{check['ptxas']}` {check['version']}: "
            f"{verdict} (exit status {check['returncode']})."
        )
    )
    if check["output"]:
        display(pre(shorten(check["output"])))

# %% tags=["remove-input"]
outcome = {(c["kernel"], c["gpu_name"]): c for c in checks}
assert outcome["descriptor", "sm_120a"]["status"] == "accepted"
assert outcome["descriptor", "sm_120"]["status"] == "rejected"
assert (
    "'tensormap.replace' not supported on .target 'sm_120'"
    in (outcome["descriptor", "sm_120"]["output"])
)
assert outcome["dot", "sm_120a"]["status"] == "rejected"
assert "tcgen05" in outcome["dot", "sm_120a"]["output"]

# %% [markdown]
# **What it shows.** With `sm_120a` the descriptor kernel assembles. With
# `sm_120` the same PTX is refused, one error per `tensormap.replace` (the output
# above is shortened in the middle, nothing in it was typed). This is the error
# the revert cited: `tensormap.replace` is an architecture-specific instruction,
# and capability 12.0 accepts it only under the `a` target. Dropping the suffix
# does not remove an unsafe instruction; it breaks every kernel that builds a
# descriptor on the device.
#
# The third run closes the other door: `tcgen05` is refused for `sm_120a` too.
# The suffix does not make tensor-memory code legal on capability 12.0, so it
# cannot be the way such code would reach an RTX 50-series card.

# %% [markdown]
# ## 3. Triton's own rule for the suffix
#
# The rule is a few lines of the CUDA backend, read here from the installed
# package rather than retyped (`kp arch rule` prints the same):

# %%
rule = arch.arch_rule()
display(Markdown(f"`{rule.path}`, triton {arch.triton.__version__}:"))
display(pre("\n".join(f"{number:5d}  {text}" for number, text in rule.lines)))
display(
    Markdown(
        "Applied to the probed capabilities: "
        + ", ".join(f"{c} → `{arch.rule_arch(c)}`" for c in arch.CAPABILITIES)
        + "."
    )
)

# %% [markdown]
# Every capability from Hopper on gets the `a`. #9734 changed this rule so that
# 120 did not; #9755 restored it. Whether some future capability should be
# singled out is a separate question; the evidence above says only that for 120
# the suffix is needed, and that it does not bring `tcgen05` with it.

# %% [markdown]
# ## 4. One step further: the same probes across Triton releases
#
# Was it always so? `scripts/triton_release_matrix.py` downloads each release's
# wheel from PyPI, records its SHA-256 next to the hash the index publishes,
# installs it alone into a scratch virtual environment (ahead-of-time compiles
# need neither torch nor a driver) and runs the probes above. Each compile runs
# in its own process, so a release that aborts on a target it does not know
# yields a failed row with its failure text instead of no row. The output is
# committed as `results/triton-releases/matrix.json`
# ([raw JSON](../../evidence/triton-releases/matrix.json)) with the console log
# of the run ([raw log](../../evidence/triton-releases/matrix.log)); it holds no
# timings.

# %% tags=["remove-input"]
matrix_path = repo_root() / "results" / "triton-releases" / "matrix.json"
matrix = arch.validate_release_matrix(json.loads(matrix_path.read_text()), name="matrix.json")
releases = [r for r in matrix["releases"] if r["status"] == "ok"]
capabilities = matrix["capabilities"]
display(
    Markdown(
        f"{len(matrix['releases'])} releases, probed on {matrix['started_utc'][:10]} with "
        f"`{matrix['command']}` (Python {matrix['host']['python']}, {matrix['host']['machine']})."
    )
)


def cell(release: dict, kernel: str, capability: int) -> dict:
    """One probe of one release."""
    return next(
        p for p in release["probes"] if (p["kernel"], p["capability"]) == (kernel, capability)
    )


def first_line(text: str | None) -> str:
    return text.strip().splitlines()[0] if text and text.strip() else ""


def describe(probe: dict) -> str:
    if probe["target"] is None:
        return "no PTX"
    return probe["target"] + ("" if probe["compiled"] else ", refused")


def why(probe: dict) -> str:
    """The recorded line that says what went wrong, beyond the exception's name."""
    error = probe["error"].strip().splitlines()
    messages = (probe["messages"] or "").strip().splitlines()
    if probe["error"].startswith("compiler process died"):
        return messages[-1] if messages else ""  # a fatal error is the last thing printed
    if probe["target"] is not None:  # PTX was made, then refused: ptxas's own line
        return next((line for line in error if line.startswith("ptxas")), "")
    return messages[0] if messages else ""


wheels, outcomes, failures = [], [], []
for release in matrix["releases"]:
    version = release["version"]
    if release["status"] != "ok":
        failures.append(f"{version}: {first_line(release['error'])}")
        continue
    bundled = release["ptxas"]["bundled"]
    wheels.append(
        {
            "triton": version,
            "wheel sha256 (first 16)": release["wheel"]["sha256"][:16],
            "ptxas": bundled["ptxas"]["version"],
            "ptxas-blackwell": bundled.get("ptxas-blackwell", {}).get("version", "-"),
            "used for 120": release["ptxas"]["by_capability"]["120"],
            "suffix rule": release["rule"]["function"] or "inline",
        }
    )
    split = {
        c["gpu_name"]: c["status"] for c in release["ptxas_checks"] if c["kernel"] == "descriptor"
    }
    dot120 = cell(release, "dot", 120)
    outcomes.append(
        {
            "triton": version,
            "dot 120": describe(dot120),
            "tcgen05": "" if dot120["counts"] is None else dot120["counts"]["tcgen05"],
            "descriptor 120": describe(cell(release, "descriptor", 120)),
            "as sm_120a": split["sm_120a"],
            "as sm_120": split["sm_120"],
            "dot 121": describe(cell(release, "dot", 121)),
            "descriptor 121": describe(cell(release, "descriptor", 121)),
        }
    )
    for p in release["probes"]:
        if not p["compiled"]:
            detail = why(p)
            failures.append(
                f"{version} {p['kernel']} {p['capability']}: {first_line(p['error'])}"
                + (f"\n    {detail}" if detail else "")
            )

display(Markdown("**The wheels**: what each bundles, and where its suffix rule lives."))
display(HTML(pd.DataFrame(wheels).to_html(index=False)))
display(
    Markdown(
        "**At 120 and 121**: the `.target` of each kernel (`refused`: the release's own "
        "`ptxas` did not accept it), `tcgen05` in the `dot` kernel, and the descriptor "
        "kernel's PTX assembled as `sm_120a` and as `sm_120`."
    )
)
display(HTML(pd.DataFrame(outcomes).to_html(index=False)))
display(Markdown("**Every failure, first line as recorded** (the JSON and the log hold the rest):"))
display(pre("\n".join(failures)))


# %% tags=["remove-input"]
fig = make_subplots(
    rows=2,
    cols=1,
    subplot_titles=["dot kernel: tcgen05", "descriptor kernel: tensormap.replace"],
    vertical_spacing=0.12,
)
for row_number, (kernel, family) in enumerate(
    (("dot", "tcgen05"), ("descriptor", "tensormap.replace")), start=1
):
    grid = [[cell(r, kernel, c) for c in capabilities] for r in releases]
    fig.add_trace(
        go.Heatmap(
            z=[[None if p["counts"] is None else p["counts"][family] for p in row] for row in grid],
            x=[str(c) for c in capabilities],
            y=[r["version"] for r in releases],
            text=[["no PTX" if p["target"] is None else describe(p) for p in row] for row in grid],
            texttemplate="%{z}",
            textfont={"size": 12},
            colorscale="Reds",
            zmin=0,
            showscale=False,
            hovertemplate=f"triton %{{y}}, capability %{{x}}: %{{text}}, {family} %{{z}}"
            "<extra></extra>",
        ),
        row=row_number,
        col=1,
    )
fig.update_xaxes(title_text="compute capability", type="category")
fig.update_yaxes(title_text="triton", type="category", autorange="reversed")
fig.update_layout(height=180 + 2 * 34 * len(releases))
charts.show(fig, "sm120a-releases")


# %% [markdown]
# The chart: instructions of the family named above each panel, per release and
# capability; a blank cell is a compile that produced no PTX. Hover a cell for
# the `.target` Triton chose there and whether the release's own `ptxas` accepted it.


# %% tags=["remove-input"]
def versions(predicate) -> str:
    found = [r["version"] for r in releases if predicate(r)]
    return ", ".join(found) if found else "none"


def counts_at(release: dict, kernel: str, capability: int) -> dict:
    return cell(release, kernel, capability)["counts"] or {}


def tcgen05_for_consumer_blackwell(release: dict) -> bool:
    return any(
        counts_at(release, k, c).get("tcgen05")
        for k in arch.KERNELS
        for c in capabilities
        if c >= 120
    )


def suffix_split(release: dict) -> bool:
    checks = [c for c in release["ptxas_checks"] if c["kernel"] == "descriptor"]
    return {c["gpu_name"]: c["status"] for c in checks} == {
        "sm_120a": "accepted",
        "sm_120": "rejected",
    }


facts = [
    ("suffix rule inline, not `sm_arch_from_capability`", lambda r: r["rule"]["function"] is None),
    ("`dot` at 120 gets `.target sm_120a`", lambda r: cell(r, "dot", 120)["target"] == "sm_120a"),
    ("`dot` at 120 gets no PTX at all", lambda r: cell(r, "dot", 120)["target"] is None),
    ("`tcgen05` in any kernel compiled for 120 or 121", tcgen05_for_consumer_blackwell),
    ("descriptor PTX for 120 accepted as `sm_120a`, refused as `sm_120`", suffix_split),
    (
        "a probe at 121 without PTX or refused by the wheel's own `ptxas`",
        lambda r: not all(cell(r, k, 121)["compiled"] for k in arch.KERNELS),
    ),
]
display(Markdown("\n".join(f"* {label}: {versions(test)}" for label, test in facts)))

# The text below relies on these.
assert not any(tcgen05_for_consumer_blackwell(r) for r in releases)
has_descriptor_ptx = [r for r in releases if cell(r, "descriptor", 120)["target"] is not None]
assert has_descriptor_ptx and all(suffix_split(r) for r in has_descriptor_ptx)
oldest = releases[0]
assert oldest["rule"]["function"] is None
assert all("capability == 90" in text for _, text in oldest["rule"]["lines"])
assert all(cell(oldest, "dot", c)["target"] is None for c in capabilities if c >= 100)
assert any(
    cell(r, "dot", 121)["target"] == "sm_121a" and not cell(r, "dot", 121)["compiled"]
    for r in releases
)

# %% [markdown]
# **What it shows.** No release in the matrix, with or without the suffix, put
# `tcgen05` into a kernel compiled for 120 or 121. Every release that gets the
# descriptor kernel to PTX at 120 shows the same split as section 2: accepted
# with `sm_120a`, refused with `sm_120`. The oldest release builds the
# architecture string inline and gives the `a` to 90 alone, but it cannot lower
# the `dot` kernel for any Blackwell capability in the first place (the failure
# text is in the table and the raw log). Which `ptxas` a wheel bundles decides
# which targets assemble at all: a release whose Blackwell `ptxas` does not know
# capability 12.1 emits `sm_121a` PTX that its own `ptxas` refuses.
#
# ## What this does not show
#
# * **Ahead-of-time compilation shows what the compiler emits, not whether a
#   kernel runs.** No consumer Blackwell card was used. A crash on an RTX 50-series
#   card could still have a cause this page cannot see: the driver, a miscompiled
#   sequence of ordinary instructions, the program around the kernel.
# * Two probe kernels are not every kernel. Another `tl.dot` shape, dtype or
#   `num_warps` may lower differently; the claim checked here is narrower: the
#   suffix is not what selects `tcgen05`.
# * The matrix covers the newest patch of each minor release, for one Python
#   version on one platform (`host` in the JSON); other wheels of the same release
#   were not hashed or probed.
#
# ## A checklist for the next confident premise
#
# 1. **Find the sentence the patch depends on** ("`sm_120a` is not a real
#    target") and ask what would be different if it were false.
# 2. **Look outside the repository.** A claim about a toolchain target is settled
#    by the toolchain (`ptxas --help`, its error messages) and by the other
#    projects that build for it, not by the diff.
# 3. **Reproduce the claimed cause, not only the fix.** Here: does the suffix
#    change which instructions are emitted? Compile both ways and count.
# 4. **Run the check that fails if the patch is wrong.** Here: assemble PTX that
#    uses an architecture-specific instruction without the suffix.
# 5. **Make sure the test can fail.** An elementwise kernel never emits matrix
#    instructions, whatever the target, so a test built on one proves nothing
#    about `tcgen05`.
# 6. **Say what the evidence does not cover** (hardware, other kernels, other
#    releases) before anything is merged on it.
