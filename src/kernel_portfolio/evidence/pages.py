"""Pages generated from ``results/`` at build time: evidence, benchmarks, indexes.

Every number these pages show is either a claim (benchmarks tables, checked by
the gate like any quote) or, on a result's own evidence page, an evidence value
``<span class="kp-value" data-result=... data-field=JSON-pointer data-unit=...>``
that the gate checks against the saved JSON. The Benchmarks pages also show
the speed and cost targets: each bar as a ``span.kp-target`` (a goal from
:mod:`kernel_portfolio.bench.targets`, which the gate checks against it) and
each miss as an ``a.kp-shortfall`` that the gate recomputes from the saved
values. Nothing here types a number.
"""

from __future__ import annotations

import html
import json
import posixpath
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass

from kernel_portfolio import charts
from kernel_portfolio.bench import targets
from kernel_portfolio.bench.suites import SUITES
from kernel_portfolio.evidence.quote import (
    PLACEHOLDER,
    Claim,
    case_anchor,
    format_value,
    make_claim,
)

#: Implementations in the order tables list them.
IMPL_ORDER = ("ours", "torch", "compile", "liger", "cublas")
#: A result with more implementation records than this (a sweep: hundreds of
#: cases times dozens of plans) shows its cases on detail pages of at most this
#: many records each (``evidence/<id>/<op>.md``, or ``<op>-<k>.md`` when one
#: operator needs several), so that no page grows past what a phone loads
#: comfortably; its evidence page keeps each case's anchor, where claims link.
PAGE_ROWS = 800
#: Front matter of those detail pages: left out of the site search, whose index
#: they would dominate with per-plan tables (and whose build time they did); the
#: run's evidence page and the case anchors that link to them stay searchable.
_UNSEARCHED = ["---", "search:", "  exclude: true", "---", ""]
#: A run whose Benchmarks page would weigh more bytes than this has its tables on a
#: page per operator (``benchmarks/<gpu>/<stem>/<op>.md``), its page keeping the
#: picture and a count of the targets met: no page should pass a megabyte.
BENCH_PAGE_BYTES = 750_000


@dataclass(frozen=True)
class GeneratedFile:
    """A file the build adds to the site: ``src_uri`` as if it sat in ``docs/``."""

    src_uri: str
    content: str


def _esc(text: object) -> str:
    return "—" if text is None else html.escape(str(text), quote=True)


def _pointer(*parts: object) -> str:
    return "/" + "/".join(str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def _saved(data: dict, *path: object) -> object:
    """The saved item at ``path`` (keys and list indexes) of a result's data."""
    node: object = data
    for part in path:
        node = node[part]  # type: ignore[index]
    return node


def _value(
    result_id: str, data: dict, unit: str, *path: object, scale: float = 1.0, base: tuple = ()
) -> str:
    """An evidence value: the saved number at ``base + path`` (times ``scale``), formatted.

    The span carries the JSON pointer of the number, so the gate can check it.
    With ``base``, the span names only ``path``: the result and the base
    pointer come from enclosing elements (``data-result`` on the table,
    ``data-kp-base`` on the row), which keeps tables of many rows small.
    """
    node = _saved(data, *base, *path)
    if node is None:
        return "—"
    extra = f' data-scale="{scale!r}"' if scale != 1.0 else ""
    result = "" if base else f'data-result="{_esc(result_id)}" '
    return (
        f'<span class="kp-value" {result}'
        f'data-field="{_esc(_pointer(*path))}" data-unit="{_esc(unit)}"{extra}>'
        f"{_esc(format_value(float(node) * scale, unit))}</span>"
    )


def _text(result_id: str, data: dict, *path: object, base: tuple = ()) -> str:
    """Saved text (a command, notes, a reason) as an evidence value the gate checks.

    Its words are the run's record, not an author's figures: a note that says
    how long a warm-up lasts is checked against the JSON, not read as a
    hand-typed timing. Whitespace is collapsed to single spaces.
    """
    node = _saved(data, *base, *path)
    if node is None:
        return "—"
    result = "" if base else f'data-result="{_esc(result_id)}" '
    return (
        f'<span class="kp-value kp-text" {result}data-field="{_esc(_pointer(*path))}">'
        f"{_esc(' '.join(str(node).split()))}</span>"
    )


def _impls(case: dict) -> list[str]:
    names = list(case.get("impls", {}))
    return sorted(names, key=lambda n: (IMPL_ORDER.index(n) if n in IMPL_ORDER else 99, n))


def _ops(data: dict) -> list[str]:
    return list(dict.fromkeys(c["op"] for c in data.get("cases", [])))


def raw_names(result_id: str, data: dict) -> tuple[str, str | None]:
    """Site paths (as docs ``src_uri``) of a result's raw JSON and raw log copies.

    The log is ``None`` when the result saved none.
    """
    stem = result_id.rsplit("/", 1)[-1]
    log = data.get("log")
    return f"evidence/{result_id}/{stem}.json", (f"evidence/{result_id}/{log}" if log else None)


# ------------------------------------------------------------ evidence pages


def evidence_page(
    result_id: str, data: dict, stale: dict[str, list[str]], repo_url: str | None = None
) -> list[GeneratedFile]:
    """The evidence page of one result, and its chart files.

    Args:
        result_id: Result id.
        data: The result's data.
        stale: For each stale case id, the sources that changed since the run
            (for an archived result: whose file at its commit differs).
        repo_url: The repository's web address (``repo_url`` of ``mkdocs.yml``):
            each source links to its file at the run's commit there. Without
            it the page shows the ``git show COMMIT:PATH`` that prints the file.

    Returns:
        The page (``evidence/<id>.md``), its samples chart JSON, and for a
        result of more than :data:`PAGE_ROWS` implementation records its
        detail pages.
    """
    raw_json, raw_log = raw_names(result_id, data)
    here = posixpath.dirname(f"evidence/{result_id}.md")
    env, state = data.get("env", {}), data.get("gpu_state", {})
    git = data.get("git", {})
    archived = result_id.startswith("archive/")
    lines = [
        f"# Evidence: {result_id}",
        "",
        "The raw record of one benchmark run, as saved. Every number below is read from "
        "the saved JSON when the site is built, and the build checks each against it.",
        "",
        f"[Raw JSON]({posixpath.relpath(raw_json, here)}) · "
        + (
            f"[Raw log]({posixpath.relpath(raw_log, here)}) · "
            if raw_log
            else "no raw log saved · "
        )
        + "[How these numbers are taken]("
        + posixpath.relpath("methodology.md", here)
        + ")",
        "",
    ]
    if archived:
        lines += [
            '!!! note "Archived result"',
            "    This run was superseded. Git keeps the sources it measured at its commit, "
            "and the build checks the hashes it recorded against those files (Sources, "
            "below), so it stays quotable as a record of the past.",
            "",
        ]
    if stale:
        lines += [
            '!!! warning "Stale cases"',
            f"    {len(stale)} case(s) depend on sources "
            + (
                "whose files at the run's commit differ from the hashes it recorded"
                if archived
                else "that changed since this run"
            )
            + "; the site refuses to quote them until they are measured again.",
            "",
        ]
    run_rows = [
        ("command", f"<code>{_text(result_id, data, 'command')}</code>"),
        (
            "commit",
            f"<code>{_text(result_id, data, 'git', 'commit')}</code>"
            + (" (dirty: the tree had uncommitted changes)" if git.get("dirty") else ""),
        ),
        ("started (UTC)", _esc(data.get("started_utc", ""))),
        ("finished (UTC)", _esc(data.get("finished_utc", ""))),
        (
            "GPU",
            f"{_esc(env.get('gpu_name', ''))}, {_esc(env.get('sm_count', ''))} SMs, "
            f"L2 {_esc(env.get('l2_bytes', ''))} bytes, "
            f"memory clock {_esc(env.get('memory_clock_mhz', ''))} MHz",
        ),
        (
            "software",
            ", ".join(
                f"{k} {_esc(env[k])}"
                for k in ("driver", "cuda", "torch", "triton", "liger_kernel", "python")
                if k in env
            ),
        ),
        ("platform", _esc(env.get("platform", ""))),
    ]
    timing = data.get("timing", {})
    timing_text = ", ".join(
        f"{k} {_esc(timing[k])}" for k in ("cache", "visits", "seed") if k in timing
    )
    if timing.get("warmup_ms") is not None:
        timing_text += ", warm-up " + _value(result_id, data, "ms", "timing", "warmup_ms")
    if timing.get("notes"):
        timing_text += "; " + _text(result_id, data, "timing", "notes")
    run_rows.append(("timing", timing_text))
    for when in ("before", "after"):
        s = state.get(when) or {}
        run_rows.append(
            (
                f"GPU {when}",
                f"utilisation {_esc(s.get('utilization_pct'))} %, "
                f"SM clock {_esc(s.get('sm_clock_mhz'))} MHz, "
                f"memory clock {_esc(s.get('mem_clock_mhz'))} MHz, "
                f"{_esc(s.get('temperature_c'))} °C",
            )
        )
    run_rows.append(("busy at start", _esc(state.get("busy_at_start"))))
    if data.get("copy_bandwidth"):
        run_rows.append(
            (
                "copy bandwidth",
                _value(result_id, data, "GB/s", "copy_bandwidth", "gbps")
                + " (median "
                + _value(result_id, data, "ms", "copy_bandwidth", "median_ms")
                + f" to read and write {_esc(data['copy_bandwidth'].get('bytes'))} bytes)",
            )
        )
    lines += ["## Run", "", _table(None, run_rows), ""]
    lines += _sources_section(result_id, data, archived, repo_url)

    files: list[GeneratedFile] = []
    lines += _samples_section(result_id, data, raw_json, here, files)
    cases = list(enumerate(data.get("cases", [])))
    split = sum(len(case.get("impls", {})) for _, case in cases) > PAGE_ROWS
    page = f"evidence/{result_id}.md"
    for op in _ops(data):
        lines += [f"## {op}", ""]
        in_op = [(i, case) for i, case in cases if case["op"] == op]
        if not split:
            lines += _op_sections(result_id, data, in_op, stale)
            continue
        parts = _parts(in_op)
        where: dict[str, str] = {}
        for k, part in enumerate(parts, 1):
            name = op if len(parts) == 1 else f"{op}-{k}"
            detail = f"evidence/{result_id}/{name}.md"
            title = op if len(parts) == 1 else f"{op}, part {k} of {len(parts)}"
            body = [
                *_UNSEARCHED,
                f"# Evidence: {result_id}, {title}",
                "",
                f"Every implementation of each case below, from "
                f"[{result_id}]({posixpath.relpath(page, posixpath.dirname(detail))})"
                ", the run's evidence page (environment, raw JSON, raw log).",
                "",
                *_op_sections(result_id, data, part, stale),
            ]
            files.append(GeneratedFile(detail, "\n".join(body)))
            where.update((case["id"], name) for _, case in part)
        lines += [
            f"{len(in_op)} case(s), each with every implementation and its samples on "
            + ", ".join(
                f"[{op if len(parts) == 1 else f'part {k}'}]"
                f"({posixpath.relpath(f'evidence/{result_id}/{name}.md', here)})"
                for k, name in enumerate(dict.fromkeys(where.values()), 1)
            )
            + ".",
            "",
            _case_index(in_op, stale, where),
            "",
        ]
    files.append(GeneratedFile(page, "\n".join(lines)))
    return files


def _sources_section(result_id: str, data: dict, archived: bool, repo_url: str | None) -> list[str]:
    """The files the numbers depend on: recorded hash, and the file at the run's commit."""
    commit = data["git"]["commit"]
    against = (
        "an archived result's are checked against the files at this commit"
        if archived
        else "a current result's are checked against the files in the tree"
    )
    rows = []
    for path in sorted(data.get("sources", {})):
        if repo_url:
            url = f"{repo_url.rstrip('/')}/blob/{commit}/{urllib.parse.quote(path)}"
            where = f'<a href="{_esc(url)}">the file at the commit</a>'
        else:
            where = f"<code>git show {_esc(commit)}:{_esc(path)}</code>"
        rows.append(
            [
                f"<code>{_esc(path)}</code>",
                f"<code>{_text(result_id, data, 'sources', path)}</code>",
                where,
            ]
        )
    return [
        "## Sources",
        "",
        "The SHA-256 (LF line ends) of every file the numbers depend on, as the run "
        f"recorded them; {against}. Git keeps each file as the run's commit holds it.",
        "",
        _table(["file", "SHA-256", "at its commit"], rows),
        "",
    ]


def _parts(in_op: list) -> list[list]:
    """Consecutive groups of cases of at most :data:`PAGE_ROWS` implementation records each."""
    parts: list[list] = [[]]
    rows = 0
    for item in in_op:
        n = len(item[1].get("impls", {}))
        if parts[-1] and rows + n > PAGE_ROWS:
            parts.append([])
            rows = 0
        parts[-1].append(item)
        rows += n
    return parts


def _samples_section(
    result_id: str, data: dict, raw_json: str, here: str, files: list
) -> list[str]:
    """The result's one samples chart (its figure added to ``files``), linking the raw samples."""
    try:
        fig = charts.samples_figure(data)
    except ValueError:
        return []  # no samples: every implementation was skipped
    name = f"{result_id.rsplit('/', 1)[-1]}-samples"
    chart_uri = f"evidence/{result_id}/{name}.json"
    files.append(GeneratedFile(chart_uri, charts.figure_json(fig)))
    return [
        "## Samples",
        "",
        # data-src is relative to the page's URL (the .md path without .md, a folder).
        charts.chart_div(None, name, src=posixpath.relpath(chart_uri, f"evidence/{result_id}")),
        "",
        f"[Chart data (JSON)]({posixpath.relpath(chart_uri, here)}) · every sample of every "
        f"case: the [raw JSON]({posixpath.relpath(raw_json, here)}) (`samples_ms`).",
        "",
    ]


def _op_sections(result_id: str, data: dict, in_op: list, stale: dict) -> list[str]:
    """The case sections of ``in_op`` (``(index, case)`` pairs of one operator)."""
    lines: list[str] = []
    for index, case in in_op:
        lines += _case_section(result_id, data, index, case, stale.get(case["id"]))
    return lines


def _case_index(in_op: list, stale: dict, where: dict[str, str]) -> str:
    """The cases of a split evidence page, one row each.

    A row holds the case's anchor (where claims link) and links to the detail
    page that shows the case (``where[case id]``, a page name).
    """
    rows = []
    for _, case in in_op:
        anchor = case_anchor(case["id"])
        statuses = [rec.get("status") for rec in case.get("impls", {}).values()]
        counts = ", ".join(f"{statuses.count(s)} {s}" for s in dict.fromkeys(statuses))
        rows.append(
            f'<tr id="{anchor}"><td><a href="{_esc(where[case["id"]])}/#{anchor}">'
            f"<code>{_esc(case['id'])}</code></a></td><td>{_esc(counts)}</td>"
            f"<td>{'stale' if case['id'] in stale else 'current'}</td></tr>"
        )
    return (
        "<table><thead><tr><th>case</th><th>implementations</th><th>sources</th></tr></thead>"
        "<tbody>" + "".join(rows) + "</tbody></table>"
    )


#: Units of the saved statistics of an implementation record, as evidence values show them.
_UNITS = {"gbps": "GB/s", "pct_copy": "%", "tflops": "TFLOP/s", "peak_mem_bytes": "bytes"}


def _case_section(result_id: str, data: dict, index: int, case: dict, changed) -> list[str]:
    anchor = case_anchor(case["id"])
    formula = f"bytes {_esc(case.get('bytes'))} = <code>{_esc(case.get('bytes_formula'))}</code>"
    if case.get("flops_formula"):
        formula += f", FLOPs {_esc(case.get('flops'))} = <code>{_esc(case['flops_formula'])}</code>"
    status = (
        "stale: changed since the run: " + ", ".join(f"<code>{_esc(c)}</code>" for c in changed)
        if changed
        else "current"
    )
    records = {impl: case["impls"][impl] for impl in _impls(case)}
    ok = [r for r in records.values() if r.get("status") == "ok"]
    # Columns that no implementation of the case fills are left out, and each saved
    # metric gets a column of its own: a sweep's case has dozens of implementations.
    columns = [("GB/s", "gbps"), ("% of copy", "pct_copy")]
    columns += [("TFLOP/s", "tflops")] if any(r.get("tflops") is not None for r in ok) else []
    if any(r.get("peak_mem_bytes") is not None for r in ok):
        columns += [("peak memory", "peak_mem_bytes")]
    metrics = list(dict.fromkeys(name for r in ok for name in r.get("metrics") or {}))
    rows, row_attrs = [], []
    for impl, record in records.items():
        base = ("cases", index, "impls", impl)
        row_attrs.append(f' data-kp-base="{_esc(_pointer(*base))}"')
        if record.get("status") != "ok":
            reason = _text(result_id, data, "reason", base=base)
            rows.append(
                [_esc(impl), f"{_esc(record.get('status'))}: {reason}"]
                + ["—"] * (4 + len(columns) + len(metrics))
            )
            continue

        def value(unit: str, *key: str, base=base) -> str:
            return _value(result_id, data, unit, *key, base=base)

        saved = record.get("metrics") or {}
        rows.append(
            [
                _esc(impl),
                "ok",
                f"{record['rel_error']:.1e}" if record.get("rel_error") is not None else "—",
                value("ms", "median_ms"),
                value("ms", "q10_ms") + " – " + value("ms", "q90_ms"),
                *(value(_UNITS[key], key) for _, key in columns),
                _esc(len(record.get("samples_ms") or [])),
                *(
                    value(saved[name].get("unit", ""), "metrics", name, "value")
                    if name in saved
                    else "—"
                    for name in metrics
                ),
            ]
        )
    lines = [
        f"### {_esc(case['id'])} {{ #{anchor} }}",
        "",
        # Raw HTML blocks (<p>), so that Markdown leaves the formulas' * alone.
        f"<p>{_esc(case['mode'])}, timer <code>{_esc(case.get('timer'))}</code>, "
        f"cache {_esc(case.get('cache'))}; {formula}; {status}.</p>",
        "",
        _table(
            ["impl", "status", "rel. error", "median", "q10 – q90"]
            + [header for header, _ in columns]
            + ["samples"]
            + [f"metric {name}" for name in metrics],
            rows,
            attrs=f' data-result="{_esc(result_id)}"',
            row_attrs=row_attrs,
        ),
        "",
    ]
    ratios = []
    for i, ratio in enumerate(case.get("ratios", [])):
        if ratio.get("median") is None:
            continue
        base = ("cases", index, "ratios", i)
        ratios.append(
            f"{_esc(ratio['impl'])} over {_esc(ratio['baseline'])}: "
            + _value(result_id, data, "x", *base, "median")
            + (
                " (" + _value(result_id, data, "%", *base, "median", scale=100.0) + " of cuBLAS)"
                if ratio["baseline"] == "cublas"
                else ""
            )
            + (
                " (q10 "
                + _value(result_id, data, "x", *base, "q10")
                + ", q90 "
                + _value(result_id, data, "x", *base, "q90")
                + ")"
                if ratio.get("q10") is not None and ratio.get("q90") is not None
                else ""
            )
        )
    if ratios:
        lines += [
            "<p>Speed-ups (baseline time / implementation time, per visit): "
            + "; ".join(ratios)
            + ".</p>",
            "",
        ]
    return lines


def _table(
    headers: list[str] | None,
    rows: Iterable[Iterable[str]],
    *,
    attrs: str = "",
    row_attrs: list[str] | None = None,
) -> str:
    """An HTML table of cell HTML; without ``headers``, each row's first cell heads it.

    ``attrs`` goes into the ``<table>`` tag and ``row_attrs[i]`` into row ``i``'s ``<tr>``.
    """
    out = [f"<table{attrs}>"]
    if headers is not None:
        out.append(
            "<thead><tr>" + "".join(f"<th>{_esc(h)}</th>" for h in headers) + "</tr></thead>"
        )
    out.append("<tbody>")
    for i, row in enumerate(rows):
        cells = list(row)
        if headers is None:
            first, cells = f'<th scope="row">{cells[0]}</th>', cells[1:]
        else:
            first = ""
        tr = row_attrs[i] if row_attrs else ""
        out.append(f"<tr{tr}>" + first + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    out.append("</tbody></table>")
    return "\n".join(out)


# ----------------------------------------------------------- benchmarks pages


#: How to read :func:`kernel_portfolio.charts.cliff_figure`, below each one.
_CLIFF_CAPTION = (
    "Each point is one case: ours over the fastest of torch, torch.compile and Liger-Kernel "
    "in the same case (over cuBLAS for GEMM), on log axes, forward on the left and forward "
    "plus backward on the right. Row operators are drawn against the row width, one line per "
    "row count; GEMM against `M`, one line per `N` and `K`; the add against its element "
    "count. A filled marker meets its every-shape bar, an open one misses it; the dotted "
    "lines are those bars and the floor no case may fall below (the speed targets), the grey "
    "line parity. Circles are float16, squares bfloat16, diamonds float32. Hover a point for "
    "its case."
)


def overview_chart(gpu: str) -> str:
    """Site path (as a docs ``src_uri``) of a GPU's overview chart, for the Benchmarks index."""
    return f"benchmarks/{gpu}/overview.json"


def _chart(name: str, chart_uri: str, page_url: str, page_dir: str) -> list[str]:
    """A chart drawn from its JSON file, and the file's download link, for one page.

    ``page_url`` is the page's URL as a folder (``data-src`` is relative to it);
    ``page_dir`` the folder of its ``.md`` file (Markdown links are relative to it).
    """
    return [
        charts.chart_div(None, name, src=posixpath.relpath(chart_uri, page_url)),
        "",
        f"[Chart data (JSON)]({posixpath.relpath(chart_uri, page_dir)})",
        "",
    ]


def benchmarks_pages(gpu: str, results: list[tuple[str, dict, object]]) -> list[GeneratedFile]:
    """The benchmarks pages of one GPU: per result, the picture first, then the tables.

    Each current result of a ``kp bench`` suite gets ``benchmarks/<gpu>/<stem>.md``:
    ours over the best baseline in every case
    (:func:`kernel_portfolio.charts.cliff_figure`), the speed targets, then per
    operator a chart and a table of claims; past :data:`BENCH_PAGE_BYTES`, the
    targets and tables of each operator on a page of its own. The GPU's overview
    chart (every result on one picture, :func:`overview_chart`) goes on the
    Benchmarks index.

    Args:
        gpu: GPU slug (the folder under ``results/``).
        results: ``(result_id, data, frame)`` for each current result of that GPU.

    Returns:
        The pages and their chart JSON files.
    """
    files: list[GeneratedFile] = []
    try:
        overview = charts.cliff_figure([(rid, data) for rid, data, _ in results])
        files.append(GeneratedFile(overview_chart(gpu), charts.figure_json(overview)))
    except ValueError:
        pass  # no case has a speed-up to draw: the index says so
    for result_id, data, frame in results:
        stem = result_id.rsplit("/", 1)[-1]
        page, url = f"benchmarks/{gpu}/{stem}.md", f"benchmarks/{gpu}/{stem}"
        here = posixpath.dirname(page)
        lines = [
            f"# Benchmarks: {_gpu_name(gpu, data)}, suite `{data.get('suite', stem)}`",
            "",
            f"Run of `{data.get('command', '')}` started {data.get('started_utc', '')} "
            f"([evidence]({posixpath.relpath(f'evidence/{result_id}.md', here)})). "
            "Each number is a claim: it links to the run's evidence page, where the raw "
            "samples and the raw log are one click away. "
            f"[Methodology]({posixpath.relpath('methodology.md', here)}) says how the numbers "
            "are taken and what they do not show.",
            "",
        ]
        try:
            fig = charts.cliff_figure([(result_id, data)])
        except ValueError:
            fig = None
        if fig is not None:
            name = f"{stem}-cliff"
            lines += _chart(name, f"{url}/{name}.json", url, here)
            lines += [_CLIFF_CAPTION, ""]
            files.append(GeneratedFile(f"{url}/{name}.json", charts.figure_json(fig)))
        charts_of_one_page: list[GeneratedFile] = []
        body = _targets_section(result_id, data)
        for op in _ops(data):
            body += [f"## {op}", ""]
            body += _op_tables(
                result_id, data, frame, op, f"{url}/{stem}-{op}", url, charts_of_one_page
            )
        if len("\n".join(lines + body).encode()) <= BENCH_PAGE_BYTES:
            files += charts_of_one_page
            files.append(GeneratedFile(page, "\n".join(lines + body)))
            continue
        lines += [
            "## Speed targets",
            "",
            "Per operator, how many of the speed targets' rows this run meets; each "
            "operator's page has its rows, its chart and its table.",
            "",
            _table(
                ["operator", "cases", "targets met"],
                (
                    [
                        f'<a href="{_esc(op)}/">{_esc(op)}</a>',
                        _esc(sum(case["op"] == op for case in data["cases"])),
                        _esc(_tally(_target_rows(data, op))),
                    ]
                    for op in _ops(data)
                ),
            ),
            "",
        ]
        files.append(GeneratedFile(page, "\n".join(lines)))
        for op in _ops(data):
            op_page, op_url = f"{url}/{op}.md", f"{url}/{op}"
            body = [
                f"# Benchmarks: {_gpu_name(gpu, data)}, suite `{data.get('suite', stem)}`, {op}",
                "",
                f"The {op} cases of the run on [its page](../{stem}.md), which starts with the "
                "picture of every case.",
                "",
                *_targets_section(result_id, data, op),
                f"## {op}",
                "",
                *_op_tables(result_id, data, frame, op, f"{op_url}/{stem}-{op}", op_url, files),
            ]
            files.append(GeneratedFile(op_page, "\n".join(body)))
    return files


def _gpu_name(gpu: str, data: dict) -> str:
    """The GPU a result ran on, as its environment names it (its slug if it does not)."""
    return data.get("env", {}).get("gpu_name") or gpu


def _op_tables(result_id, data, frame, op: str, chart: str, url: str, files: list) -> list[str]:
    """One operator's chart (its JSON, ``chart`` + ``.json``, added to ``files``) and table.

    ``url`` is the URL of the page they go on, as a folder.
    """
    lines: list[str] = []
    try:
        fig = charts.summary_figure(frame, op)
    except ValueError:
        fig = None
    if fig is not None:
        uri = f"{chart}.json"
        lines += _chart(posixpath.basename(chart), uri, url, posixpath.dirname(f"{url}.md"))
        files.append(GeneratedFile(uri, charts.figure_json(fig)))
    return [*lines, _benchmark_table(result_id, data, op), ""]


def _claim_or_dash(result_id, data, case_id, stat, impl, baseline=None) -> str:
    try:
        return make_claim(result_id, data, case_id, stat, impl, baseline).html()
    except ValueError:
        return "—"


def _benchmark_table(result_id: str, data: dict, op: str) -> str:
    cases = [c for c in data.get("cases", []) if c["op"] == op]
    with_flops = any(c.get("flops") for c in cases)
    stats = ["median_us", "gbps", "pct_copy"] + (["tflops"] if with_flops else [])
    headers = ["shape", "dtype", "mode", "impl", "status", "median time", "GB/s", "% of copy"]
    headers += ["TFLOP/s"] if with_flops else []
    headers += ["ours: speed-up over it"]
    rows = []
    for case in cases:
        for impl in _impls(case):
            record = case["impls"][impl]
            row = [
                "x".join(map(str, case["shape"])),
                _esc(case["dtype"]),
                _esc(case["mode"]),
                _esc(impl),
            ]
            if record.get("status") != "ok":
                # The reason goes in the status column: its words are not a measured figure.
                status = f"{_esc(record.get('status'))}: {_esc(record.get('reason'))}"
                rows.append(row + [status] + ["—"] * (len(stats) + 1))
                continue
            row.append("ok")
            row += [_claim_or_dash(result_id, data, case["id"], s, impl) for s in stats]
            row.append(
                ""
                if impl == "ours"
                else _claim_or_dash(result_id, data, case["id"], "speedup", "ours", impl)
            )
            rows.append(row)
    return _table(headers, rows)


def _target(text: str) -> str:
    """A bar, marked as a target (a goal, not a measurement) for the gate."""
    return f'<span class="kp-target">{_esc(text)}</span>'


def _shortfall(result_id: str, row: dict) -> str:
    """By how much a row's value misses its bar: a link to the case's evidence.

    The link carries what a claim carries, plus the bar, so the gate can
    recompute the shortfall from the saved values
    (:func:`kernel_portfolio.bench.targets.target_value`).
    """
    baseline = None if row["stat"] == "pct_copy" else row["baseline"]
    attrs = {
        "class": "kp-shortfall",
        "href": f"{PLACEHOLDER}{result_id}#{case_anchor(row['case'])}",
        "data-result": result_id,
        "data-case": row["case"],
        "data-stat": row["stat"],
        "data-impl": "ours",
        **({"data-baseline": baseline} if baseline else {}),
        "data-threshold": repr(row["threshold"]),
    }
    joined = " ".join(f'{k}="{_esc(v)}"' for k, v in attrs.items())
    text = targets.shortfall_text(row["stat"], row["value"], row["threshold"])
    return f"<a {joined}>{_esc(text)}</a>"


def _target_cells(result_id: str, data: dict, row: dict, *, name_baseline: bool) -> list[str]:
    """The value (a claim), bar, met and short-by cells of one target row.

    With ``name_baseline``, a speed-up says which implementation it is over.
    Why a value is missing goes in the met column: its words (a skip reason
    may hold numbers) stay out of the columns whose headers name a unit.
    """
    baseline = row["baseline"] if row["stat"] == "speedup" else None
    if row["value"] is None:
        return ["—", _target(row["bar"]), f"no: {_esc(row['reason'])}", "—"]
    value = _claim_or_dash(result_id, data, row["case"], row["stat"], "ours", baseline)
    if baseline and name_baseline:
        value += f" over {_esc(baseline)}"
    short = "" if row["met"] else _shortfall(result_id, row)
    return [value, _target(row["bar"]), "yes" if row["met"] else "no", short]


#: Per cost target: what it costs, in the words of the table headers (each names
#: a measured cost, so the gate holds every number in those columns to a claim),
#: and how the page introduces it.
_COSTS = {
    targets.HOST_COST: (
        "host cost",
        "Host cost per call: the eager time one call spends in Python and the launch path "
        "(the metric `host_us`, saved for the cases timed with CUDA graphs), ours against "
        "torch's in the same case, with the bar",
    ),
    targets.PEAK_MEMORY: (
        "peak memory",
        "Peak memory per call: the device memory one call allocates above what was allocated "
        "before it, ours against that of the fastest of torch, compile and Liger-Kernel in "
        "the same case, with the bar",
    ),
}


def _cost_table(
    result_id: str, data: dict, cost: targets.CostTarget, rows: list[dict]
) -> list[str]:
    """The rows of one cost target: both saved costs (claims), the bar, met, the excess."""
    what, intro = _COSTS[cost.name]
    best = cost.baseline == targets.BEST
    headers = ["case", *(["best baseline"] if best else [])]
    headers += [f"ours: {what}", f"its {what}" if best else f"{cost.baseline}: {what}"]
    headers += ["bar", "met", f"{what}: over the bar by"]
    bar = targets.bar_text(cost.stat, cost.threshold, cost.baseline)
    return [
        f"{intro} {_target(bar)}: {_tally(rows)}",
        "",
        _table(
            headers,
            (
                [
                    f"<code>{_esc(row['case'])}</code>",
                    *([_esc(row["baseline"])] if best else []),
                    _claim_or_dash(result_id, data, row["case"], row["stat"], "ours"),
                    _claim_or_dash(result_id, data, row["case"], row["stat"], row["baseline"]),
                    _target(row["bar"]),
                    "yes" if row["met"] else "no",
                    "" if row["met"] else _shortfall(result_id, row),
                ]
                for row in rows
            ),
        ),
        "",
    ]


def _target_rows(data: dict, op: str | None = None) -> list[dict]:
    """:func:`kernel_portfolio.bench.targets.evaluate`'s rows, of ``op``'s cases only if given."""
    rows = targets.evaluate(data)
    if op is None:
        return rows
    ids = {case["id"] for case in data.get("cases", []) if case["op"] == op}
    return [row for row in rows if row["case"] in ids]


def _tally(rows: list[dict]) -> str:
    met = sum(row["met"] for row in rows)
    return f"{met} met, {len(rows) - met} not met."


def _why(row: dict) -> str:
    """``": <reason>"`` for a row without a value, else nothing."""
    return f": {_esc(row['reason'])}" if row["value"] is None else ""


def _every_shape_table(result_id: str, data: dict, rows: list[dict]) -> str:
    """Every-shape (or floor) rows: the best baseline, its share of copy, ours over it."""
    return _table(
        [
            "case",
            "best baseline",
            "its % of copy",
            "ours: speed-up over it",
            "bar",
            "met",
            "short by (×)",
        ],  # fmt: skip
        (
            [
                f"<code>{_esc(row['case'])}</code>",
                _esc(row["baseline"]),
                _claim_or_dash(result_id, data, row["case"], "pct_copy", row["baseline"]),
                *_target_cells(result_id, data, row, name_baseline=False),
            ]
            for row in rows
        ),
    )


def _targets_section(result_id: str, data: dict, op: str | None = None) -> list[str]:
    """The speed targets (:mod:`kernel_portfolio.bench.targets`) against one result.

    Tables for the named targets, one row per target and case, for the
    every-shape bar, one row per case, and for each cost target, one row per
    case that saves the cost; each with a count of met and not met. With
    ``op``, the rows of that operator's cases only.
    """
    rows = _target_rows(data, op)
    names = {t.name for t in targets.TARGETS}
    named = [r for r in rows if r["target"] in names]
    every = [r for r in rows if r["target"] == targets.EVERY_SHAPE]
    floors = [r for r in rows if r["target"] == targets.FLOOR]
    floor_misses = [r for r in floors if not r["met"]]
    aligned = [r for r in rows if r["target"] == targets.ALIGNED]
    lines = [
        "## Speed targets",
        "",
        "The project's speed targets (`kernel_portfolio.bench.targets`) against this run. "
        "Each value is a claim; each bar is a target, not a measurement (% of copy is the "
        "share of the copy bandwidth measured in the same run); a value under its bar says "
        "by how much, in the bar's unit, and links to the evidence it is computed from. "
        "The costs per call below are held to at most their bar: ours' cost minus the "
        "baseline's, and a cost over its bar says by how much.",
        "",
    ]
    if named:
        lines += [
            f"Named targets, per case: {_tally(named)}",
            "",
            _table(
                ["target", "case", "% of copy or speed-up", "bar", "met", "short by (points or ×)"],
                (
                    [
                        _esc(row["target"]),
                        f"<code>{_esc(row['case'])}</code>",
                        *_target_cells(result_id, data, row, name_baseline=True),
                    ]
                    for row in named
                ),
            ),
            "",
        ]
    found = {r["target"] for r in rows}
    absent = [t.name for t in targets.TARGETS + targets.COST_TARGETS if t.name not in found]
    if absent and op is None:
        lines += ["No case of this run falls under: " + "; ".join(absent) + ".", ""]
    if every:
        full = targets.bar_text("speedup", targets.EVERY_SHAPE_BAR, targets.BEST)
        floor = targets.bar_text("speedup", targets.FLOOR_BAR, targets.BEST)
        lines += [
            "Every shape: ours against the fastest of torch, compile and Liger-Kernel in the "
            f"same case, with the bar {_target(full)}, lowered to "
            + _target(targets.bar_text("speedup", targets.NEAR_ROOF_BAR, targets.BEST))
            + f" where that baseline already runs at {_target(targets.NEAR_ROOF_TEXT)}; "
            "GEMM against cuBLAS, with the bar "
            + _target(targets.bar_text("speedup", targets.EVERY_SHAPE_BAR, "cublas"))
            + f" from {targets.GEMM_FULL_BAR_M} rows and "
            + _target(targets.bar_text("speedup", targets.FLOOR_BAR, "cublas"))
            + f" below: {_tally(every)}",
            "",
            _every_shape_table(result_id, data, every),
            "",
            f"No case below the floor {_target(floor)} (cuBLAS for GEMM): "
            f"{len(floor_misses)} of {len(floors)} cases below it"
            + (", these:" if floor_misses else "."),
            "",
        ]
        if floor_misses:
            lines += [_every_shape_table(result_id, data, floor_misses), ""]
    if aligned:
        bar = targets.bar_text(targets.ALIGNED_SHARE, targets.ALIGNED_BAR)
        lines += [
            "Unaligned rows: a row width whose rows are not 16 bytes apart against its aligned "
            "neighbour (the width rounded down to a multiple of a 16-byte vector, same rows, "
            f"op, mode and dtype, in this run): ours' share of copy at each, with the bar "
            f"{_target(bar)}: {_tally(aligned)}",
            "",
            _table(
                [
                    "case",
                    "neighbour",
                    "ours: % of copy",
                    "at the neighbour: % of copy",
                    "bar",
                    "met",
                ],  # fmt: skip
                (
                    [
                        f"<code>{_esc(row['case'])}</code>",
                        f"<code>{_esc(row['neighbour'])}</code>",
                        _claim_or_dash(result_id, data, row["case"], "pct_copy", "ours"),
                        _claim_or_dash(result_id, data, row["neighbour"], "pct_copy", "ours"),
                        _target(row["bar"]),
                        "yes" if row["met"] else f"no{_why(row)}",
                    ]
                    for row in aligned
                ),
            ),
            "",
        ]
    for cost in targets.COST_TARGETS:
        cost_rows = [r for r in rows if r["target"] == cost.name]
        if cost_rows:
            lines += _cost_table(result_id, data, cost, cost_rows)
    return lines


def on_benchmarks_page(data: dict) -> bool:
    """Whether a result belongs on its GPU's Benchmarks page.

    Runs of a ``kp bench`` suite (full or filtered) do; sweeps and studies,
    whose suites are their own (hundreds of plan variants per case), get their
    evidence page only, and the notebooks that study them quote them.
    """
    return data.get("suite") in SUITES


def benchmarks_index(
    gpus: dict[str, list[tuple[str, dict]]], invalid: list[str], others: list[str] | None = None
) -> str:
    """Markdown of the Benchmarks index: per GPU, its overview chart and its results.

    Args:
        gpus: ``(result id, data)`` of each current ``kp bench`` run, per GPU slug
            (their pages and charts come from :func:`benchmarks_pages`).
        invalid: Ids of results files that do not validate.
        others: Ids of the other published runs (sweeps, studies, archived runs),
            listed with their evidence pages.
    """
    if not gpus:
        lines = [
            "No current benchmark result is committed yet. Once a run of "
            "`kp bench --suite default` is saved under `results/<gpu>/`, this page lists it, "
            "per GPU, with tables and charts; "
            "[Contributing](../contributing.md) says how to produce one.",
        ]
    else:
        lines = []
        for gpu, entries in sorted(gpus.items()):
            lines += [f"## {_gpu_name(gpu, entries[0][1])}", ""]
            if any(charts.cliff_points(rid, data) for rid, data in entries):
                chart = overview_chart(gpu)
                lines += _chart(f"{gpu}-overview", chart, "benchmarks", "benchmarks")
                lines += [_CLIFF_CAPTION, ""]
            else:
                lines += ["No case of these runs has a speed-up of ours to draw.", ""]
            lines += [
                "| results | suite | started (UTC) | cases | targets met |",
                "| --- | --- | --- | ---: | ---: |",
            ]
            for rid, data in entries:
                rows = targets.evaluate(data)
                stem = rid.rsplit("/", 1)[-1]
                lines.append(
                    f"| [tables and charts]({gpu}/{stem}.md) · "
                    f"[evidence](../evidence/{rid}.md) | `{data.get('suite', stem)}` | "
                    f"{data.get('started_utc', '')} | {len(data.get('cases', []))} | "
                    f"{sum(r['met'] for r in rows)} of {len(rows)} |"
                )
            lines.append("")
    if others:
        lines += [
            "",
            "Not tabulated here: the case studies' sweeps, and superseded runs that a page "
            "quotes (archived results, judged against the sources at their commit). Each has "
            "its evidence page: " + ", ".join(f"[`{i}`](../evidence/{i}.md)" for i in others) + ".",
        ]
    if invalid:
        lines += [
            "",
            "These results files do not validate and are not shown: "
            + ", ".join(f"`results/{i}.json`" for i in invalid)
            + ".",
        ]
    return "\n".join(lines)


# ------------------------------------------------------------- evidence index


def results_index(entries: list[tuple[str, dict, int]], unpublished: list[str]) -> str:
    """Markdown table of every published result: id, GPU, time, case and stale case counts.

    Args:
        entries: ``(result id, data, stale case count)`` of each published result.
        unpublished: Ids of the archived results that no written page names,
            which the site does not publish (listed after the table).
    """
    if not entries:
        return "No results are committed yet, so the site quotes none."
    lines = [
        "| result | GPU | started (UTC) | cases | stale cases |",
        "| --- | --- | --- | ---: | ---: |",
    ]
    for result_id, data, n_stale in entries:
        lines.append(
            f"| [`{result_id}`]({result_id}.md) | {data.get('env', {}).get('gpu_name', '')} | "
            f"{data.get('started_utc', '')} | {len(data.get('cases', []))} | {n_stale} |"
        )
    if unpublished:
        lines += [
            "",
            "Archived results that no page quotes have no evidence page here; the repository "
            "keeps them under `results/archive/`: "
            + ", ".join(f"`{rid}`" for rid in unpublished)
            + ".",
        ]
    return "\n".join(lines)


def allowlist_index(entries) -> str:
    """Markdown table of the allow-list with each entry's reason."""
    if not entries:
        return "The allow-list is empty: every measured-looking figure on the site is a claim."
    lines = ["| figure | where | reason |", "| --- | --- | --- |"]
    for e in entries:
        where = ", ".join(f"`{p}`" for p in e.pages) or "any page"
        reason = e.reason.strip() or "**missing: this entry allows nothing**"
        lines.append(f"| <code>{_esc(e.text)}</code> | {where} | {_esc(reason)} |")
    return "\n".join(lines)


#: Pages whose claims the evidence index counts instead of listing one by one:
#: generated benchmark tables quote every statistic of every case.
GENERATED_CLAIM_PAGES = "benchmarks/"


def claims_index(claims: list[tuple[str, dict[str, str], str]], link) -> str:
    """HTML listing every claim on the site.

    Claims written on pages (Markdown and notebooks) are listed one per row;
    claims of the generated benchmark pages are counted per page and result.
    ``claims.json`` beside the index lists every one (see :func:`claims_json`).

    Args:
        claims: ``(page URL, claim attributes, shown text)`` for each claim.
        link: Function rewriting a claim's placeholder href for the evidence index.
    """
    rows, counted = [], {}
    for url, attrs, text in claims:
        claim = Claim.from_element(attrs, text)
        href = posixpath.relpath(url or ".", "evidence") + "/"
        page = f'<a href="{_esc(href)}">{_esc(url or "home")}</a>'
        if url.startswith(GENERATED_CLAIM_PAGES):
            counted.setdefault((page, claim.result_id), 0)
            counted[(page, claim.result_id)] += 1
            continue
        rows.append(
            [
                page,
                link(claim.html()),
                f"<code>{_esc(claim.result_id)}</code>",
                f"<code>{_esc(claim.case_id)}</code>",
                _esc(
                    claim.impl + (f"/{claim.baseline}" if claim.baseline else "") + f" {claim.stat}"
                ),
                "archived" if claim.archived else "current",
            ]
        )
    out = [
        f"<p>{len(claims)} claim(s) in all; every one, with its page, value and source, is in "
        '<a href="claims.json">claims.json</a>.</p>'
    ]
    if rows:
        out.append(
            _table(["page", "value shown", "result", "case", "statistic", "result kind"], rows)
        )
    else:
        out.append("<p>No written page quotes a result yet.</p>")
    if counted:
        out.append("<p>Generated benchmark pages quote every statistic of every case:</p>")
        out.append(
            _table(
                ["page", "result", "claims"],
                [[page, f"<code>{_esc(rid)}</code>", str(n)] for (page, rid), n in counted.items()],
            )
        )
    return "\n".join(out)


def claims_json(claims: list[tuple[str, dict[str, str], str]]) -> str:
    """Every claim on the site as JSON: page, shown text, result, case, impl, baseline, stat."""
    rows = []
    for url, attrs, text in claims:
        c = Claim.from_element(attrs, text)
        rows.append(
            {
                "page": url,
                "text": text,
                "result": c.result_id,
                "case": c.case_id,
                "impl": c.impl,
                "baseline": c.baseline,
                "stat": c.stat,
                "value": c.value,
                "kind": "archived" if c.archived else "current",
            }
        )
    # One claim a line: as easy to read and to diff as an indented list, and lighter.
    return "[\n" + ",\n".join(json.dumps(row, ensure_ascii=False) for row in rows) + "\n]\n"
