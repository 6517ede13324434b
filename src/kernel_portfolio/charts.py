"""Plotly figures from results frames, and the one way a page shows them.

A chart on the site is a ``<div class="kp-chart">`` that the site's own script
(``docs/assets/kp/kp.js``) fills with ``Plotly.newPlot`` after a hard load and
after every instant navigation. The figure itself travels as JSON: either a file
next to the page (``data-src``, for generated pages) or inline in a
``<template class="kp-chart-figure">`` inside the div (for notebooks, which do
not know where the site will put them). plotly.js is served once from the site's
assets, never from a CDN and never inlined per figure. Every chart offers its
data as a JSON download.

A measured figure in a chart's text (its title, an axis title, an annotation,
a trace name, a hover template's words) is a claim, as anywhere else: put the
claim itself in the string (``title=f"softmax: ours at {claim}"``, with
``claim`` from :func:`kernel_portfolio.evidence.quote`). :func:`figure_json`
shows its text there and lists it in ``layout.meta["kp-claims"]``, where the
evidence gate checks it; any other such figure fails the build.

Example (a notebook cell)::

    from kernel_portfolio import charts, results

    frame = results.load("results/h200/default.json").frame()
    charts.show(charts.summary_figure(frame, "softmax"), "softmax-default")
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio

from kernel_portfolio.evidence.quote import FIGURE_CLAIMS, Claim, claims_to_text

#: Colours by implementation, so one implementation looks the same on every chart.
IMPL_COLORS = {
    "ours": "#d6336c",
    "torch": "#1c7ed6",
    "compile": "#37b24d",
    "liger": "#f59f00",
    "cublas": "#7048e8",
}
_TEMPLATE = "plotly_white"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def _check_frame(frame: object, name: str = "frame") -> pd.DataFrame:
    if not isinstance(frame, pd.DataFrame):
        raise TypeError(f"{name} must be a pandas DataFrame, got {type(frame).__name__}")
    return frame


def _case_label(row: pd.Series) -> str:
    return f"{row['shape']} {row['dtype']} {row['mode']}"


def summary_figure(frame: pd.DataFrame, op: str) -> go.Figure:
    """Grouped bars of one operator's cases: TFLOP/s for GEMM-like ops, else GB/s.

    Args:
        frame: A results frame (``Result.frame()``), one row per case and
            implementation.
        op: The operator to draw, e.g. ``"softmax"``.

    Returns:
        The figure; implementations that did not run (status other than
        ``"ok"``) are left out.

    Raises:
        TypeError: ``frame`` is not a DataFrame.
        ValueError: ``frame`` has no measured row for ``op``.
    """
    frame = _check_frame(frame)
    rows = frame[(frame["op"] == op) & (frame["status"] == "ok")]
    if rows.empty:
        raise ValueError(f"op {op!r} has no measured rows in frame")
    metric, title = (
        ("tflops", "TFLOP/s") if rows["tflops"].notna().any() else ("gbps", "GB/s (bytes moved)")
    )
    fig = go.Figure()
    labels = rows.apply(_case_label, axis=1)
    for impl, group in rows.groupby("impl", sort=False):
        fig.add_bar(
            name=str(impl),
            x=labels[group.index].tolist(),
            y=group[metric].tolist(),
            marker_color=IMPL_COLORS.get(str(impl)),
        )
    fig.update_layout(
        barmode="group",
        yaxis_title=title,
        xaxis_title=None,
        title=f"{op}: {title} by case (higher is better)",
    )
    return _style(fig)


def samples_figure(data: dict) -> go.Figure:
    """The spread of every case's samples in one result: a box per case and implementation.

    A box spans the saved q10 to q90 of the samples around the saved median;
    its whiskers reach the fastest and the slowest sample. The samples
    themselves are not copied into the figure: they are in the result's raw
    JSON, which the evidence page links beside the chart.

    Args:
        data: A result's data (``Result.data``): the samples live there, not in
            the frame.

    Returns:
        The figure (time per call in microseconds, on a log axis), one trace
        per implementation, the cases in the result's order.

    Raises:
        TypeError: ``data`` is not a dict.
        ValueError: the result has no samples.
    """
    if not isinstance(data, dict):
        raise TypeError(f"data must be a result's data dict, got {type(data).__name__}")
    per_impl: dict[str, dict[str, list]] = {}
    for case in data.get("cases", []):
        label = f"{case['op']} {'x'.join(map(str, case['shape']))} {case['dtype']} {case['mode']}"
        for impl, record in case.get("impls", {}).items():
            samples = record.get("samples_ms") or []
            if not samples or record.get("median_ms") is None:
                continue
            box = per_impl.setdefault(impl, {k: [] for k in ("x", "lo", "q1", "mid", "q3", "hi")})
            box["x"].append(label)
            for key, ms in (
                ("lo", min(samples)),
                ("q1", record["q10_ms"]),
                ("mid", record["median_ms"]),
                ("q3", record["q90_ms"]),
                ("hi", max(samples)),
            ):
                box[key].append(ms * 1000.0)
    if not per_impl:
        raise ValueError("the result has no samples")
    fig = go.Figure()
    for impl, box in per_impl.items():
        # numpy arrays skip plotly's per-element validation (the build's largest cost for
        # results with many records); dtype=object keeps the times plain JSON numbers.
        fig.add_box(
            name=impl,
            x=np.asarray(box["x"]),
            lowerfence=np.asarray(box["lo"], dtype=object),
            q1=np.asarray(box["q1"], dtype=object),
            median=np.asarray(box["mid"], dtype=object),
            q3=np.asarray(box["q3"], dtype=object),
            upperfence=np.asarray(box["hi"], dtype=object),
            marker_color=IMPL_COLORS.get(impl),
            line={"width": 1},
        )
    fig.update_layout(
        boxmode="group",
        yaxis={"title": "time per call (µs)", "type": "log"},
        title="Samples of every case: q10 to q90 around the median, whiskers to the extremes",
    )
    return _style(fig)


#: Panels of :func:`cliff_figure`, top to bottom, and how each operator's shape maps to
#: the panel's x axis and to its lines.
_CLIFF_OPS = ("softmax", "rms_norm", "residual_rms_norm", "row_sum", "add", "matmul")
_CLIFF_MODES = ("fwd", "fwdbwd")
_MODE_WORDS = {"fwd": "forward", "fwdbwd": "forward + backward"}
_DTYPE_SYMBOLS = {"float16": "circle", "bfloat16": "square", "float32": "diamond"}


def _cliff_axes(op: str, shape: Sequence[int]) -> tuple[int, str, tuple[int, ...]]:
    """``(x, line label, sort key of the line)`` of one case: what its panel plots it against.

    Row operators: the row width, one line per row count. GEMM: ``M``, one
    line per ``(N, K)``. The elementwise add: the element count, one line.
    """
    if op == "matmul":
        m, n, k = shape
        return m, f"N {n}, K {k}", (n, k)
    if len(shape) == 2:
        return shape[1], f"{shape[0]} row{'s' if shape[0] != 1 else ''}", (shape[0],)
    return shape[0], "elements", (0,)


def cliff_points(result_id: str, data: dict) -> list[dict]:
    """Ours over the best baseline in every case of one result, with the bar it is held to.

    The values and bars are :func:`kernel_portfolio.bench.targets.evaluate`'s
    every-shape rows (ours over the fastest of torch, compile and Liger-Kernel;
    over cuBLAS for GEMM) and floor rows (the share of that baseline no case
    may fall below). A case where ours or every baseline did not run has no
    point.

    Returns:
        One dict per case: ``result``, ``case``, ``op``, ``mode``, ``dtype``,
        ``x``, ``line``, ``line_key``, ``value``, ``baseline``, ``threshold``
        (the every-shape bar), ``met`` and ``floor``.
    """
    from kernel_portfolio.bench import targets

    chosen: dict[str, dict] = {}
    floors: dict[str, float] = {}
    for row in targets.evaluate(data):
        if row["target"] == targets.FLOOR:
            floors[row["case"]] = row["threshold"]
        elif row["target"] == targets.EVERY_SHAPE and row["value"] is not None:
            chosen[row["case"]] = row
    points = []
    for case in data.get("cases", []):
        row = chosen.get(case["id"])
        if row is None:
            continue
        x, line, key = _cliff_axes(case["op"], case["shape"])
        points.append(
            {
                "result": result_id,
                "case": case["id"],
                "op": case["op"],
                "mode": case["mode"],
                "dtype": case["dtype"],
                "x": x,
                "line": line,
                "line_key": key,
                "value": row["value"],
                "baseline": row["baseline"],
                "threshold": row["threshold"],
                "met": row["met"],
                "floor": floors[case["id"]],
            }
        )
    return points


def cliff_figure(results: Sequence[tuple[str, dict]]) -> go.Figure:
    """Where ours wins and where it loses: ours over the best baseline, for every case.

    One panel per operator and mode (forward left, forward + backward right),
    on log axes: the row operators against the row width, one line per row
    count; GEMM against ``M``, one line per ``(N, K)``; the add against the
    element count. Colour follows the line (few rows light, many dark), the
    marker the dtype; a filled marker meets its bar, an open one misses it.
    Dotted lines are the bars the cases of the panel are held to, their floor
    included (:mod:`kernel_portfolio.bench.targets`), the grey line parity. Hover a
    point for its case, its baseline and its result.

    Args:
        results: ``(result id, data)`` of each result to draw.

    Returns:
        The figure.

    Raises:
        ValueError: no result has a case with a speed-up to draw.
    """
    from plotly.colors import sample_colorscale
    from plotly.subplots import make_subplots

    points = [p for rid, data in results for p in cliff_points(rid, data)]
    if not points:
        raise ValueError("no case has a speed-up of ours over a baseline to draw")
    ops = [op for op in _CLIFF_OPS if any(p["op"] == op for p in points)]
    ops += sorted({p["op"] for p in points} - set(ops))
    panels = {(op, mode): (i + 1, j + 1) for i, op in enumerate(ops) for j, mode in
              enumerate(_CLIFF_MODES)}  # fmt: skip
    fig = make_subplots(
        rows=len(ops),
        cols=len(_CLIFF_MODES),
        subplot_titles=[f"{op}, {_MODE_WORDS[mode]}" for op, mode in panels],
        horizontal_spacing=0.08,
        vertical_spacing=min(0.3, 0.5 / len(ops)),
    )
    keys = sorted({(p["op"] == "matmul", p["line_key"], p["line"]) for p in points})
    shades = sample_colorscale("Viridis", [0.85 * (1 - i / max(len(keys) - 1, 1))
                                           for i in range(len(keys))])  # fmt: skip
    color = {line: shade for (_, _, line), shade in zip(keys, shades, strict=True)}
    rank = {line: i for i, (_, _, line) in enumerate(keys)}
    shown: set[str] = set()
    groups: dict[tuple, list[dict]] = {}
    for p in points:
        if (p["op"], p["mode"]) in panels:
            groups.setdefault((p["op"], p["mode"], p["line"], p["dtype"], p["result"]), [])
            groups[p["op"], p["mode"], p["line"], p["dtype"], p["result"]].append(p)
    for (op, mode, line, dtype, _), group in sorted(groups.items(), key=lambda kv: kv[0][:2]):
        group.sort(key=lambda p: p["x"])
        symbol = _DTYPE_SYMBOLS.get(dtype, "triangle-up")
        row, col = panels[op, mode]
        fig.add_trace(
            go.Scatter(
                x=[p["x"] for p in group],
                y=[p["value"] for p in group],
                mode="lines+markers",
                name=line,
                legendgroup=line,
                legendrank=rank[line],
                showlegend=line not in shown,
                line={"color": color[line], "width": 1},
                marker={
                    "color": color[line],
                    "size": 8,
                    "symbol": [symbol + ("" if p["met"] else "-open") for p in group],
                    "line": {"color": color[line], "width": 1.5},
                },
                customdata=[
                    [
                        p["case"],
                        p["baseline"],
                        p["result"],
                        "meets its bar" if p["met"] else "misses its bar",
                    ]
                    for p in group
                ],
                hovertemplate="%{customdata[0]}<br>ours over %{customdata[1]}: %{y:.3f}×"
                "<br>%{customdata[3]}<extra>%{customdata[2]}</extra>",
            ),
            row=row,
            col=col,
        )
        shown.add(line)
    for (op, mode), (row, col) in panels.items():
        here = [p for p in points if (p["op"], p["mode"]) == (op, mode)]
        bars = {p[key] for p in here for key in ("threshold", "floor")}
        fig.add_hline(y=1.0, line={"color": "#adb5bd", "width": 1}, row=row, col=col)
        for bar in sorted(bars):
            fig.add_hline(y=bar, line={"color": "#e03131", "width": 1, "dash": "dot"},
                          row=row, col=col)  # fmt: skip
        x_title = {"matmul": "M", "add": "elements"}.get(op, "row width (columns)")
        fig.update_xaxes(type="log", title_text=x_title, row=row, col=col)
    fig.update_yaxes(type="log")
    fig.update_yaxes(title_text="ours / best baseline", col=1)
    styled(fig, height=140 + 230 * len(ops))
    fig.update_layout(
        title="Ours over the best baseline, every case",
        legend={"orientation": "h", "y": -60 / (230 * len(ops)), "yanchor": "top"},
        margin={"t": 90, "b": 140},
    )
    return fig


def _style(fig: go.Figure) -> go.Figure:
    fig.update_layout(
        template=_TEMPLATE,
        height=380,
        margin={"l": 60, "r": 20, "t": 50, "b": 60},
        legend={"orientation": "h", "y": -0.2},
        font={"family": "system-ui, sans-serif", "size": 12},
    )
    return fig


def figure_json(fig: go.Figure) -> str:
    """The figure as compact JSON, the form the site's script and the download use.

    Each claim in the figure's strings (``<a class="kp-claim">``, as ``str()``
    of a claim writes it) is replaced by its text and listed in
    ``layout.meta["kp-claims"]`` (the claims' records, see
    :meth:`kernel_portfolio.evidence.Claim.record`).

    Raises:
        TypeError: ``fig`` is not a plotly Figure.
        ValueError: the figure quotes a claim and its ``layout.meta`` is set to
            something other than a dict.
    """
    if not isinstance(fig, go.Figure):
        raise TypeError(f"fig must be a plotly Figure, got {type(fig).__name__}")
    text = pio.to_json(fig, validate=False, pretty=False)
    if "kp-claim" not in text:  # the cheap test: most figures quote nothing
        return text
    claims: list[Claim] = []

    def shown(node):
        if isinstance(node, str):
            node, found = claims_to_text(node)
            claims.extend(found)
            return node
        if isinstance(node, list):
            return [shown(item) for item in node]
        if isinstance(node, dict):
            return {key: shown(value) for key, value in node.items()}
        return node

    figure = shown(json.loads(text))
    layout = figure.setdefault("layout", {})
    meta = layout.setdefault("meta", {})
    if not isinstance(meta, dict):
        raise ValueError(
            f"layout.meta is a {type(meta).__name__}: a chart that quotes a claim lists it "
            f"in layout.meta[{FIGURE_CLAIMS!r}], so meta must be a dict"
        )
    meta[FIGURE_CLAIMS] = [c.record() for c in dict.fromkeys(claims)]
    return json.dumps(figure, separators=(",", ":"), ensure_ascii=False)


def _check_name(name: object) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(
            f"name must be a file-name-safe string (letters, digits, '.', '_', '-'), got {name!r}"
        )
    return name


def chart_div(fig: go.Figure | None, name: str, *, src: str | None = None) -> str:
    """The HTML of one chart.

    Args:
        fig: The figure, embedded inline; ``None`` when ``src`` is given.
        name: A file-name-safe name; the download is ``<name>.json``.
        src: URL (relative to the page) of the figure's JSON file.

    Returns:
        A ``<div class="kp-chart">`` for the site's script to render.

    Raises:
        ValueError: neither or both of ``fig`` and ``src`` are given, or a bad name.
    """
    _check_name(name)
    if (fig is None) == (src is None):
        raise ValueError("give exactly one of fig (inline) and src (a JSON file)")
    if src is not None:
        return (
            f'<div class="kp-chart" data-name="{html.escape(name)}" '
            f'data-src="{html.escape(src, quote=True)}"></div>'
        )
    # An inert <template> (not a <script>: Material's instant navigation re-runs
    # every script it swaps in); with <, > and & escaped the JSON holds no markup.
    payload = (
        figure_json(fig).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    )
    return (
        f'<div class="kp-chart" data-name="{html.escape(name)}">'
        f'<template class="kp-chart-figure">{payload}</template></div>'
    )


@dataclass(frozen=True)
class Chart:
    """A figure a notebook displays (see :func:`show`)."""

    html: str

    def _repr_html_(self) -> str:
        return self.html


def show(fig: go.Figure, name: str) -> Chart:
    """Display a figure in a notebook the way the site renders charts.

    The figure JSON is embedded in the output, the site's script draws it with
    the site's own plotly.js, and offers it as ``<name>.json`` for download.
    Make it the last expression of a cell, or pass it to ``display()``.

    Args:
        fig: The figure.
        name: A file-name-safe name for the download.

    Returns:
        An object whose HTML representation is the chart.
    """
    return Chart(chart_div(fig, name))


def styled(fig: go.Figure, *, height: int = 380) -> go.Figure:
    """Give a figure the site's look (template, font, margins, legend below it).

    For figures a page builds itself, so that they look like the generated ones.

    Args:
        fig: The figure; changed in place.
        height: Height in pixels.

    Returns:
        ``fig``.

    Raises:
        TypeError: ``fig`` is not a plotly Figure.
        ValueError: ``height`` is not a positive integer.
    """
    if not isinstance(fig, go.Figure):
        raise TypeError(f"fig must be a plotly Figure, got {type(fig).__name__}")
    if not isinstance(height, int) or isinstance(height, bool) or height < 1:
        raise ValueError(f"height must be a positive integer (pixels), got {height!r}")
    _style(fig)
    fig.update_layout(height=height)
    return fig


def discrete_colorscale(colors: Sequence[str]) -> list[list]:
    """A colorscale that paints the integers ``0 .. len(colors) - 1`` in ``colors``.

    Use it with ``zmin=-0.5`` and ``zmax=len(colors) - 0.5``, so that each integer
    sits in the middle of its own flat band.

    Raises:
        ValueError: ``colors`` is empty.
    """
    colors = list(colors)
    if not colors:
        raise ValueError("colors is empty: a discrete colorscale needs at least one colour")
    n = len(colors)
    return [[edge / n, color] for k, color in enumerate(colors) for edge in (k, k + 1)]


@dataclass(frozen=True)
class HeatmapPanel:
    """One panel of :func:`heatmap_grid`.

    Attributes:
        title: Title above the panel.
        z: One row of values per y label, one value per x label (``None``: an
            empty cell).
        text: Text written in each cell, same shape as ``z``.
        hover: Text shown on hover, same shape as ``z``; ``None``: ``text``.
    """

    title: str
    z: Sequence[Sequence[float | None]]
    text: Sequence[Sequence[str]]
    hover: Sequence[Sequence[str]] | None = None


def _check_grid(name: str, rows: object, n_y: int, n_x: int) -> list[list]:
    if not isinstance(rows, Sequence) or isinstance(rows, str) or len(rows) != n_y:
        raise ValueError(f"{name} must have one row per y label ({n_y})")
    out = []
    for row in rows:
        if not isinstance(row, Sequence) or isinstance(row, str) or len(row) != n_x:
            raise ValueError(f"{name} must have one value per x label ({n_x}) in every row")
        out.append(list(row))
    return out


def heatmap_grid(
    panels: Sequence[HeatmapPanel],
    *,
    x: Sequence[str],
    y: Sequence[str],
    x_title: str,
    y_title: str,
    colorscale: str | list,
    zmin: float,
    zmax: float,
    colorbar: dict | None = None,
    cols: int = 2,
    panel_height: int = 300,
    title: str | None = None,
) -> go.Figure:
    """Heatmaps over the same categorical axes, side by side, one shared colour scale.

    Args:
        panels: The panels, filled row by row.
        x: Labels of the columns of every panel (drawn as categories).
        y: Labels of the rows of every panel (drawn as categories, first at the bottom).
        x_title: Title of the x axes.
        y_title: Title of the y axes.
        colorscale: A plotly colorscale (a name, or a list such as
            :func:`discrete_colorscale` returns).
        zmin: Value at the bottom of the colour scale.
        zmax: Value at the top of the colour scale.
        colorbar: Plotly ``colorbar`` settings, shown once; ``None``: no colour bar.
        cols: Panels per row.
        panel_height: Height in pixels of one row of panels.
        title: Figure title.

    Returns:
        The figure, styled like the site's other charts.

    Raises:
        ValueError: no panel, ``cols`` or ``panel_height`` not positive, or a panel
            whose ``z``, ``text`` or ``hover`` does not have one row per ``y`` label and
            one value per ``x`` label.
    """
    from plotly.subplots import make_subplots

    panels = list(panels)
    if not panels:
        raise ValueError("panels is empty: nothing to draw")
    if not isinstance(cols, int) or cols < 1:
        raise ValueError(f"cols must be a positive integer, got {cols!r}")
    if not isinstance(panel_height, int) or panel_height < 1:
        raise ValueError(f"panel_height must be a positive integer (pixels), got {panel_height!r}")
    x, y = [str(v) for v in x], [str(v) for v in y]
    cols = min(cols, len(panels))
    n_rows = -(-len(panels) // cols)
    fig = make_subplots(
        rows=n_rows,
        cols=cols,
        subplot_titles=[p.title for p in panels],
        horizontal_spacing=0.08,
        vertical_spacing=min(0.3, 110 / (panel_height * n_rows)),  # about 110 px between rows
    )
    for i, panel in enumerate(panels):
        where = f"panel {panel.title!r}"
        z = _check_grid(f"{where}: z", panel.z, len(y), len(x))
        text = _check_grid(f"{where}: text", panel.text, len(y), len(x))
        hover = text if panel.hover is None else panel.hover
        hover = _check_grid(f"{where}: hover", hover, len(y), len(x))
        fig.add_trace(
            go.Heatmap(
                x=x,
                y=y,
                z=z,
                text=text,
                customdata=hover,
                texttemplate="%{text}",
                textfont={"size": 10},
                zmin=zmin,
                zmax=zmax,
                colorscale=colorscale,
                showscale=colorbar is not None and i == 0,
                colorbar=colorbar,
                hoverongaps=False,
                hovertemplate=f"{y_title} %{{y}}, {x_title} %{{x}}<br>%{{customdata}}"
                "<extra></extra>",
            ),
            row=i // cols + 1,
            col=i % cols + 1,
        )
    fig.update_xaxes(title_text=x_title, type="category")
    fig.update_yaxes(title_text=y_title, type="category")
    styled(fig, height=120 + panel_height * n_rows)
    if title is not None:
        fig.update_layout(title=title, margin={"t": 90})
    return fig
