"""The evidence gate, adversarially: every way to publish an unbacked number must fail.

Three layers: the figure patterns on text, attributes and chart figures; the
gate on a copy of the built fixture site (fast, and honest for what only
depends on the rendered HTML, the chart files and results/: hand-typed figures
in text, in attributes a browser shows and in charts, tampering, staleness);
and real rebuilds of a light copy of the docs for what must fail the *build*
(a figure typed in a Markdown page, printed by a notebook, drawn by a chart,
written in a docstring; a claim on a missing case).
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import site_workspace as sw

from kernel_portfolio.evidence import gate
from kernel_portfolio.evidence.quote import Claim, make_claim
from kernel_portfolio.evidence.sitebuild import rewrite_claim_links

# ----------------------------------------------------------------- patterns


@pytest.mark.parametrize(
    ("text", "figure"),
    [
        ("the kernel takes 12.5 ms per call", "12.5 ms"),
        ("about 67 µs", "67 µs"),
        ("about 67 μs with a Greek mu", "67 μs"),
        ("in 450us", "450us"),
        ("2.5 seconds end to end", "2.5 seconds"),
        ("reaches 3,900 GB/s", "3,900 GB/s"),
        ("close to 4.8 TB/s", "4.8 TB/s"),
        ("runs at 218 TFLOP/s", "218 TFLOP/s"),
        ("runs at 218 TFLOPS", "218 TFLOPS"),
        ("a 1.8x speed-up", "1.8x"),
        ("it is 1.8× faster", "1.8×"),
        ("1.8 × faster", "1.8 × "),
        ("it is 3 times faster", "3 times "),
        ("a speed-up of 1.8 over torch", "speed-up of 1.8"),
        ("91.4% of the copy bandwidth", "91.4%"),
        ("reaches 80 % of cuBLAS", "80 %"),
        ("20% faster than torch", "20%"),
    ],
)
def test_figures_that_look_measured(text, figure):
    found = gate.find_figures(text)
    assert [f.text for f in found] == [figure.strip()], found


@pytest.mark.parametrize(
    "text",
    [
        "a 8192x8192 float16 matrix",
        "shape 4096 x 4096",
        "M x N elements, 2 × N bytes",
        "mask 0x1F",
        "Triton 3.6.0 on sm_90 and an H200",
        "50% of the rows are masked",
        "2^31 elements, 1e-6 epsilon, 132 SMs, 3201 MHz",
        "lesson 2 says",
    ],
)
def test_numbers_that_are_not_measurements(text):
    assert gate.find_figures(text) == []


@pytest.mark.parametrize(
    ("text", "figure"),
    [
        ("ours is twice as fast as torch", "twice as fast"),
        ("three times faster than eager", "three times faster"),
        ("one and a half times as fast", "one and a half times as fast"),
        ("it is twice as slow", "twice as slow"),
        ("at ten times the bandwidth", "ten times the bandwidth"),
        ("at twice the speed of torch", "twice the speed"),
        ("the split plan halves the time", "halves the time"),
        ("fusing doubles the throughput", "doubles the throughput"),
        ("and the latency halved", "latency halved"),
        ("in a third of the time", "a third of the time"),
        ("in half the time", "half the time"),
        ("a threefold speed-up", "threefold speed-up"),
        ("a 3-fold speedup", "3-fold speedup"),
        ("an order of magnitude faster", "order of magnitude faster"),
        ("a speed-up of two", "speed-up of two"),
        ("a speed-up of about 1.8", "speed-up of about 1.8"),
        ("a slow-down of 2 there", "slow-down of 2"),
        ("faster by a factor of 2", "faster by a factor of 2"),
        ("a factor of three slower", "a factor of three slower"),
    ],
)
def test_speed_ups_in_words(text, figure):
    (found,) = gate.find_figures(text)
    assert (found.kind, found.text) == ("speedup", figure)


@pytest.mark.parametrize(
    "text",
    [  # lesson prose of the site: counts, sizes and settings, not measurements
        "dy and h are therefore read twice",
        "a float32 row is twice the bytes of a float16 row",
        "taken again on a lead twice as long",
        "a buffer twice the size of the L2",
        "its chunks are twice as wide",
        "at 32768x8192, four times the bytes",
        "four times the host time to queue one call",
        "eight times the load instructions",
        "would not give half the SMs a program",
        "so half the row bytes in flight",
        "double backward is not supported",
        "so it doubles both counts",
        "every bar stands orders of magnitude above the line",
        "the chunk-rules sweep runs twice",
        "times one hundred",
    ],
)
def test_words_that_are_not_speed_ups(text):
    assert gate.find_figures(text) == []


def test_claims_are_masked_but_split_figures_are_not():
    page = (
        "<html><body><article>"
        '<p>Reaches <a class="kp-claim" data-result="r">3900 GB/s</a> today.</p>'
        "<p>But <strong>1.8</strong>× here.</p>"
        "<pre><code><span>elapsed</span> = <span>12.5</span> <span>ms</span></code></pre>"
        "<nav><a>Timing 5 ms</a></nav>"
        "<script>var t = '7 ms';</script>"
        "</article></body></html>"
    )
    scan = gate.scan_page("p/", page)
    assert [f.text for f in scan.figures] == ["1.8×", "12.5 ms"]
    assert [text for _, text in scan.claims] == ["3900 GB/s"]


def test_table_columns_with_a_unit_header():
    page = (
        "<table><thead><tr><th>shape</th><th>median (µs)</th><th>speed-up</th></tr></thead>"
        "<tbody><tr><td>8192x8192</td><td>67.7</td><td>1.80</td></tr>"
        '<tr><td>1024x1024</td><td><a class="kp-claim">9.59 µs</a></td><td>—</td></tr>'
        "</tbody></table>"
    )
    scan = gate.scan_page("t/", page)
    assert sorted(f.text for f in scan.figures) == ["1.80", "67.7"]


def test_table_columns_naming_a_cost():
    page = (
        "<table><thead><tr><th>case</th><th>ours: peak memory</th><th>torch: host cost</th>"
        "</tr></thead><tbody><tr><td>8x8</td><td>3.00 MiB</td><td>8.00</td></tr></tbody></table>"
    )
    scan = gate.scan_page("t/", page)
    assert sorted(f.text for f in scan.figures) == ["3.00 MiB", "8.00"]


def _listed(*claims: Claim) -> str:
    return html.escape(json.dumps([c.record() for c in claims]))


RATIO = Claim("r/s", "softmax/fwd/8x8/float16", "speedup", "ours", "torch", 1.8, "1.80×")


def test_attributes_a_browser_shows_are_read():
    page = (
        '<body><img src="a.png" alt="the copy took 12.5 ms"><abbr title="a 1.8x win">w</abbr>'
        '<button aria-label="twice as fast">b</button><input placeholder="850 GB/s">'
        '<span data-note="9 ms">not shown</span><nav><a title="7 ms">menu</a></nav></body>'
    )
    scan = gate.scan_page("p/", page)
    assert [(f.kind, f.text, f.context.split(":")[0]) for f in scan.figures] == [
        ("time", "12.5 ms", "alt of <img>"),
        ("speedup", "1.8x", "title of <abbr>"),
        ("speedup", "twice as fast", "aria-label of <button>"),
        ("bandwidth", "850 GB/s", "placeholder of <input>"),
    ]


def test_claims_an_element_lists_are_checked_not_hand_typed():
    listed = f'data-kp-claims="{_listed(RATIO)}"'
    scan = gate.scan_page("p/", f'<img alt="ours at 1.80× torch, 2.5x eager" {listed}>')
    assert [f.text for f in scan.figures] == ["2.5x"]  # the one the element does not list
    ((attrs, text),) = scan.claims
    assert (attrs[gate.LISTED_IN], text) == ("an attribute of <img>", "1.80×")
    assert scan.errors == []
    # Listed but not shown, an unreadable list, and a list on another element:
    (error,) = gate.scan_page("p/", f'<img alt="ours" {listed}>').errors
    assert error.endswith(
        "the claim '1.80×' (r/s softmax/fwd/8x8/float16 speedup) but does not show it"
    )
    assert "not a JSON list" in gate.scan_page("p/", '<img alt="x" data-kp-claims="{">').errors[0]
    page = f'<p><span {listed}>a</span><img alt="1.80× faster"></p>'
    assert [f.text for f in gate.scan_page("p/", page).figures] == ["1.80×"]


def test_a_figure_equal_to_a_claim_elsewhere_on_the_page_is_still_hand_typed():
    link = RATIO.html()
    scan = gate.scan_page("p/", f'<p>ours at {link}</p><img alt="ours at 1.80× torch">')
    assert [f.text for f in scan.figures] == ["1.80×"]
    assert [attrs.get(gate.LISTED_IN) for attrs, _ in scan.claims] == [None]  # the link only


def _figure(trace: dict | None = None, **layout) -> dict:
    """A bar chart whose data holds figures of every kind, with ``trace`` and ``layout`` set."""
    bars = {
        "type": "bar",
        "name": "ours",
        "x": ["8192x8192", "2.5x", "12 ms"],  # data, whatever it looks like
        "y": [1.5, 2.5, 3.5],
        "text": ["1.8x", "12 ms", "90% of copy"],
        "customdata": ["twice as fast", "850 GB/s", "12.5 ms"],
        "hovertemplate": "%{x}: %{y:.1f} ms, %{customdata}<extra>%{text}</extra>",
        "marker": {"colorbar": {"tickvals": [1, 2], "ticktext": ["1 ms", "2 ms"]}},
    }
    return {
        "data": [{**bars, **(trace or {})}],
        "layout": {"title": {"text": "softmax: GB/s by case"}, **layout},
    }


def _scan_figure(figure: dict) -> gate.PageScan:
    scan = gate.PageScan("p/")
    gate.scan_figure(json.dumps(figure), "chart 'c'", scan)
    return scan


def test_chart_data_is_data():
    scan = _scan_figure(_figure())
    assert scan.figures == [] and scan.claims == [] and scan.errors == []


@pytest.mark.parametrize(
    ("path", "layout", "trace", "figure"),
    [
        ("layout.title.text", {"title": {"text": "softmax: 1.8x faster"}}, {}, "1.8x"),
        ("layout.xaxis.title.text", {"xaxis": {"title": {"text": "took 12.5 ms"}}}, {}, "12.5 ms"),
        ("layout.legend.title.text", {"legend": {"title": {"text": "850 GB/s"}}}, {}, "850 GB/s"),
        ("layout.annotations[0].text", {"annotations": [{"text": "halves the <b>time</b>"}]}, {},
         "halves the time"),
        ("layout.updatemenus[0].buttons[0].label",
         {"updatemenus": [{"buttons": [{"label": "at 218 TFLOP/s"}]}]}, {}, "218 TFLOP/s"),
        ("layout.meta[0]", {"meta": ["3 times faster"]}, {}, "3 times"),
        ("data[0].name", {}, {"name": "ours (91.4% of copy)"}, "91.4%"),
        ("data[0].hovertemplate", {}, {"hovertemplate": "%{y:.1f} GB/s, 2.5x faster"}, "2.5x"),
        ("data[0].texttemplate", {}, {"texttemplate": "%{text}<br>4.2<br>ms"}, "4.2 ms"),
        ("data[0].hovertext", {}, {"hovertext": "twice as fast"}, "twice as fast"),
    ],
)  # fmt: skip
def test_chart_text_is_read(path, layout, trace, figure):
    (found,) = _scan_figure(_figure(trace, **layout)).figures
    assert found.text == figure and found.context.startswith(f"chart 'c' {path}: ")


def test_claims_a_chart_lists_are_checked_not_hand_typed():
    fig = _figure(title={"text": "ours at 1.80× torch"}, meta={"kp-claims": [RATIO.record()]})
    scan = _scan_figure(fig)
    assert scan.figures == [] and scan.errors == []
    ((attrs, text),) = scan.claims
    assert (attrs["data-result"], attrs[gate.LISTED_IN], text) == ("r/s", "chart 'c'", "1.80×")
    fig["layout"]["title"]["text"] = "ours"
    assert "but does not show it" in _scan_figure(fig).errors[0]
    fig["data"][0]["text"] = ["1.80×", "", ""]  # shown in the bars' text: listed rightly
    assert _scan_figure(fig).errors == []
    del fig["layout"]["meta"]
    fig["layout"]["title"]["text"] = "ours at 1.80× torch"
    assert [f.text for f in _scan_figure(fig).figures] == ["1.80×"]
    scan = gate.PageScan("p/")
    gate.scan_figure("{not json", "chart 'c'", scan)
    assert "does not parse" in scan.errors[0]


def test_resources_from_other_hosts():
    page = (
        '<head><script src="https://cdn.example.org/mathjax.js"></script>'
        '<link rel="stylesheet" href="//fonts.example.com/css">'
        '<link rel="canonical" href="https://site.example.org/page/"></head>'
        '<body><img src="http://img.example.org/a.png"><img src="../a.png">'
        "<script>import('https://cdn.example.org/mermaid.mjs')</script></body>"
    )
    external = gate.scan_page("x/", page).external
    assert len(external) == 4
    assert not any("canonical" in e or "../a.png" in e for e in external)


# --------------------------------------------------- the built fixture site


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    result = sw.fixture_site(tmp_path_factory)
    assert result.returncode == 0, result.output[-4000:]
    return result


@pytest.fixture
def site(built, tmp_path):
    """A copy of the built site's pages (the gate reads HTML only)."""
    dest = tmp_path / "site"
    shutil.copytree(built.site, dest, ignore=shutil.ignore_patterns("*.js", "*.css", "*.map"))
    return dest


@pytest.fixture
def root(built, tmp_path):
    """A copy of the fixture workspace's results, the sources they hash, and the allow-list.

    A git repository reading this checkout's history: archived results are
    judged against the sources at their commit.
    """
    dest = tmp_path / "root"
    for part in ("results", "src", "scripts", "case_studies", "docs/evidence"):
        shutil.copytree(built.ws / part, dest / part)
    return sw.link_history(dest)


def _failures(site: Path, root: Path) -> list[str]:
    return [str(f) for f in gate.check_site(site, root).failures]


def _inject(site: Path, url: str, html: str, where: str = "</article>") -> None:
    page = site / url / "index.html"
    text = page.read_text(encoding="utf-8")
    assert where in text, f"{where!r} not in {url}"
    page.write_text(text.replace(where, html + where, 1), encoding="utf-8")


def test_untouched_fixture_site_passes(site, root):
    report = gate.check_site(site, root)
    assert report.ok, report.summary()
    pages = {c.page for c in report.claims}
    wanted = {"fixture-claims/", "fixture-notebook/", "benchmarks/fixture/smoke/", "evidence/"}
    assert wanted <= pages
    # Six links and two claims in attributes; two links, one in an attribute, one in a chart.
    assert sum(c.page == "fixture-claims/" for c in report.claims) == 8
    assert sum(c.page == "fixture-notebook/" for c in report.claims) == 4
    for c in report.claims:  # archived exactly when the quoted result is an archived one
        assert c.status == ("archived" if c.result_id.startswith("archive/") else "current")


# (sentence, the figure the gate must name)
FIGURES = [("took 12.5 ms", "12.5 ms"), ("reaches 850 GB/s", "850 GB/s"),
           ("at 218 TFLOP/s", "218 TFLOP/s"), ("a 1.8x win", "1.8x"),
           ("91.4% of copy", "91.4%")]  # fmt: skip
# (page, where to put the text): a Markdown page, a notebook's output area, a docstring.
PLACES = [
    ("fixture-claims/", "<p>{}</p>", "</article>"),
    ("fixture-notebook/", '<div class="jp-OutputArea-output"><pre>{}</pre></div>', "</article>"),
    ("kernels/add/", '<div class="doc doc-contents"><p>{}</p></div>', "</article>"),
]


@pytest.mark.parametrize(("sentence", "figure"), FIGURES, ids=[f[1] for f in FIGURES])
@pytest.mark.parametrize(("url", "wrap", "where"), PLACES, ids=[p[0] for p in PLACES])
def test_hand_typed_figure_fails_naming_the_page(site, root, sentence, figure, url, wrap, where):
    _inject(site, url, wrap.format(sentence), where)
    (failure,) = _failures(site, root)
    assert failure.startswith(url) and f"figure '{figure}'" in failure
    assert "is not a claim; nearest saved values" in failure


# (HTML planted, the figure the gate must name): what a browser shows besides the
# page's text, and a speed-up in words.
SHOWN = [('<img src="a.png" alt="the copy took 12.5 ms">', "12.5 ms"),
         ('<abbr title="a 1.8x win">win</abbr>', "1.8x"),
         ('<input placeholder="850 GB/s">', "850 GB/s"),
         ("<span>ours is twice as fast as torch</span>", "twice as fast")]  # fmt: skip


def test_figures_in_attributes_and_words_fail_naming_the_page(site, root):
    for url, wrap, where in PLACES:
        for planted, _ in SHOWN:
            _inject(site, url, wrap.format(planted), where)
    failures = _failures(site, root)
    assert len(failures) == len(PLACES) * len(SHOWN), failures
    for url, _, _ in PLACES:
        for _, figure in SHOWN:
            named = [f for f in failures if f.startswith(url) and f"figure '{figure}'" in f]
            assert named, (url, figure, failures)


def _edit_chart(site: Path, url: str, edit) -> None:
    """Edit the figure of the page's first chart, inline or in its file."""
    page = site / url / "index.html"
    text = page.read_text(encoding="utf-8")
    inline = re.search(r'<template class="kp-chart-figure">(.*?)</template>', text, re.S)
    if inline:
        figure = json.loads(inline[1])
        edit(figure)
        payload = json.dumps(figure).replace("<", "\\u003c").replace(">", "\\u003e")
        page.write_text(text.replace(inline[1], payload.replace("&", "\\u0026")), "utf-8")
        return
    src = site / url / re.search(r'<div class="kp-chart"[^>]* data-src="([^"]+)"', text)[1]
    figure = json.loads(src.read_text(encoding="utf-8"))
    edit(figure)
    src.write_text(json.dumps(figure), encoding="utf-8")


# (how to plant a figure in a chart's text, the figure the gate must name)
CHART_TEXT = [
    (lambda fig: fig["layout"]["title"].update(text=fig["layout"]["title"]["text"] + ", 1.8x"),
     "1.8x"),
    (lambda fig: fig["data"][0].update(name="ours at 850 GB/s"), "850 GB/s"),
    (lambda fig: fig["layout"].update(annotations=[{"text": "halves the time"}]),
     "halves the time"),
    (lambda fig: fig["data"][0].update(hovertemplate="%{y:.0f} GB/s, 12.5 ms a call"),
     "12.5 ms"),
]  # fmt: skip


def test_figures_in_chart_text_fail_naming_the_page(site, root):
    """In a chart drawn from the page (a notebook's) and from a file beside it (generated)."""
    charts = ("fixture-notebook/", "benchmarks/fixture/smoke/")
    for url in charts:
        _edit_chart(site, url, lambda fig: [plant(fig) for plant, _ in CHART_TEXT])
    failures = _failures(site, root)
    assert len(failures) == len(charts) * len(CHART_TEXT), failures
    for url in charts:
        for _, figure in CHART_TEXT:
            message = f"figure '{figure}' in “chart '"
            assert any(f.startswith(url) and message in f for f in failures), (url, failures)


def _tamper_attribute_claim(site: Path) -> None:
    page = site / "fixture-claims" / "index.html"
    text = page.read_text(encoding="utf-8")
    record = re.search(r"&quot;value&quot;: [^,]+,", text)[0]
    page.write_text(text.replace(record, "&quot;value&quot;: 1.0,", 1), encoding="utf-8")


def _tamper_chart_claim(figure: dict) -> None:
    (record,) = figure["layout"]["meta"]["kp-claims"]
    figure["layout"]["title"]["text"] = figure["layout"]["title"]["text"].replace(
        record["text"], "9.99×"
    )
    record["text"] = "9.99×"


def test_claims_where_no_link_can_go_are_checked(site, root):
    _tamper_attribute_claim(site)
    _edit_chart(site, "fixture-notebook/", _tamper_chart_claim)
    failures = _failures(site, root)
    assert len(failures) == 2, failures
    for url, where in [("fixture-claims/", "in an attribute of <abbr>"),
                       ("fixture-notebook/", "in chart 'fixture-softmax'")]:  # fmt: skip
        assert any(f.startswith(url) and f"{where} differs from" in f for f in failures), failures


def test_a_chart_that_does_not_list_its_claim_shows_a_hand_typed_figure(site, root):
    _edit_chart(site, "fixture-notebook/", lambda fig: fig["layout"].pop("meta"))
    (failure,) = _failures(site, root)
    assert failure.startswith("fixture-notebook/: hand-typed speedup figure"), failure
    assert "in “chart 'fixture-softmax' layout.title.text: softmax: ours at" in failure


def test_nearest_saved_values_are_quotable(site, root):
    for real in (root / "results").iterdir():  # thousands of saved values: keep the fixture's
        if real.is_dir() and real.name != sw.FIXTURE_ID.split("/")[0]:
            shutil.rmtree(real)
    _inject(site, "fixture-claims/", "<p>about 1750 GB/s</p>")
    (failure,) = [f for f in _failures(site, root) if f.startswith("fixture-claims/")]
    assert "{{ claim fixture/smoke softmax/fwd/1024x4096/float16 ours gbps }}" in failure


@pytest.mark.parametrize("figure", [gate.Figure("table", "5", "column 'time'"),
                                    gate.Figure("time", "0 ms", "took 0 ms")])  # fmt: skip
def test_nearest_saved_values_survive_zero(figure):
    saved = [
        Claim("r/s", "c", "metrics.spills", "ours", None, 0.0, "0 bytes"),
        Claim("r/s", "c", "metrics.spills", "torch", None, -1.0, "-1 bytes"),
        Claim("r/s", "c", "median_us", "ours", None, 4.0, "4.00\u202fµs"),
        Claim("r/s", "c", "median_us", "torch", None, 6.0, "6.00\u202fµs"),
    ]
    shown = gate._nearest(figure, saved)
    if figure.kind == "table":
        assert shown.index("torch median_us") < shown.index("ours median_us")  # 6 is nearer 5
    else:
        assert "median_us" in shown and "spills" not in shown


def test_allow_list_needs_a_reason(site, root):
    _inject(site, "methodology/", "<p>the datasheet says 4.8 TB/s</p>")
    allow = root / gate.ALLOWLIST
    allow.write_text('- text: "4.8 TB/s"\n  pages: ["methodology/"]\n', encoding="utf-8")
    failures = _failures(site, root)
    assert any("allowlist.yml" in f and "no reason" in f for f in failures), failures
    assert any(f.startswith("methodology/") and "4.8 TB/s" in f for f in failures), failures
    allow.write_text(
        '- text: "4.8 TB/s"\n  pages: ["methodology/"]\n  reason: datasheet peak, not measured\n',
        encoding="utf-8",
    )
    assert _failures(site, root) == []
    _inject(site, "contributing/", "<p>the datasheet says 4.8 TB/s</p>")
    (failure,) = _failures(site, root)
    assert failure.startswith("contributing/")  # the entry is for methodology/ only


def test_claim_on_a_missing_case(site, root):
    page = site / "fixture-claims" / "index.html"
    text = page.read_text(encoding="utf-8")
    text = text.replace(
        'smoke" data-case="softmax/fwd/1024x4096', 'smoke" data-case="softmax/fwd/4096x4096', 1
    )
    page.write_text(text, encoding="utf-8")
    (failure,) = _failures(site, root)
    assert failure.startswith("fixture-claims/") and "softmax/fwd/4096x4096/float16" in failure
    assert "not in the result" in failure


def test_claim_on_a_missing_result(site, root):
    shutil.rmtree(root / "results" / "fixture")
    failures = _failures(site, root)
    assert failures and all("cannot be used" in f for f in failures)
    assert any(f.startswith("fixture-notebook/") for f in failures)


def test_edited_kernel_makes_its_claims_stale(site, root):
    softmax = root / "src" / "kernel_portfolio" / "ops" / "softmax.py"
    softmax.write_text(softmax.read_text(encoding="utf-8") + "\n# edited\n", encoding="utf-8")
    failures = _failures(site, root)
    assert failures and all("stale" in f and "ops/softmax.py" in f for f in failures)
    fixture = [f for f in failures if "fixture/smoke" in f]
    assert fixture and all("softmax/fwd/1024x4096/float16" in f for f in fixture)  # not its GEMM
    assert any(f.startswith("fixture-claims/") for f in failures)
    assert any(f.startswith("fixture-notebook/") for f in failures)


@pytest.mark.parametrize(
    ("field", "factor"), [("median_ms", 0.5), ("gbps", 1.1), ("pct_copy", 1.01)]
)
def test_tampered_values_in_results_file(site, root, field, factor):
    path = root / "results" / "fixture" / "smoke.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data["cases"][0]["impls"]["ours"][field] *= factor
    path.write_text(json.dumps(data), encoding="utf-8")
    failures = _failures(site, root)
    assert any(f.startswith("results/fixture/smoke.json") and field in f for f in failures)
    assert any(f.startswith("fixture-claims/") for f in failures)


def test_tampered_ratio_in_results_file(site, root):
    path = root / "results" / "fixture" / "smoke.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    gemm = next(c for c in data["cases"] if c["op"] == "matmul")
    gemm["ratios"][0]["median"] *= 1.05  # the % of cuBLAS a page quotes
    path.write_text(json.dumps(data), encoding="utf-8")
    failures = _failures(site, root)
    assert any(f.startswith("results/fixture/smoke.json") and "ratios" in f for f in failures)


def test_tampered_hashes_in_results_file(site, root):
    path = root / "results" / "fixture" / "smoke.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data["sources"]["src/kernel_portfolio/ops/softmax.py"] = "0" * 64
    path.write_text(json.dumps(data), encoding="utf-8")
    failures = _failures(site, root)
    assert failures and any(f.startswith("fixture-claims/") and "stale" in f for f in failures)


@pytest.mark.parametrize("what", ["text", "value"])
def test_tampered_claim_on_a_page(site, root, what):
    page = site / "fixture-claims" / "index.html"
    text = page.read_text(encoding="utf-8")
    claim = re.search(r'<a [^>]*data-stat="gbps"[^>]*data-value="([^"]+)"[^>]*>([^<]+)</a>', text)
    if what == "text":
        edited = claim[0].replace(f">{claim[2]}<", ">9999\u202fGB/s<")
    else:
        edited = claim[0].replace(f'data-value="{claim[1]}"', 'data-value="9999.0"')
    page.write_text(text.replace(claim[0], edited), encoding="utf-8")
    (failure,) = _failures(site, root)
    assert failure.startswith("fixture-claims/") and "tampered" in failure


def test_claim_link_must_lead_to_its_evidence(site, root):
    page = site / "fixture-claims" / "index.html"
    text = page.read_text(encoding="utf-8")
    page.write_text(text.replace("#softmax-fwd-1024x4096-float16", "#elsewhere", 1), "utf-8")
    (failure,) = _failures(site, root)
    assert failure.startswith("fixture-claims/") and "links to" in failure


def test_evidence_values_are_checked_against_the_json(site, root):
    page = site / "evidence" / "fixture" / "smoke" / "index.html"
    text = page.read_text(encoding="utf-8")
    value = re.search(r'<span class="kp-value"[^>]*data-unit="GB/s"[^>]*>([^<]+)</span>', text)
    page.write_text(text.replace(value[0], value[0].replace(value[1], "1\u202fGB/s")), "utf-8")
    (failure,) = _failures(site, root)
    assert failure.startswith("evidence/fixture/smoke/") and "tampered" in failure


def test_evidence_rows_point_at_their_own_record(site, root):
    """A table row names its record once (data-kp-base); pointing it elsewhere is tampering."""
    page = site / "evidence" / "fixture" / "smoke" / "index.html"
    text = page.read_text(encoding="utf-8")
    assert 'data-kp-base="/cases/0/impls/ours"' in text
    page.write_text(
        text.replace('data-kp-base="/cases/0/impls/ours"', 'data-kp-base="/cases/0/impls/torch"'),
        encoding="utf-8",
    )
    failures = _failures(site, root)
    assert failures and all(
        f.startswith("evidence/fixture/smoke/") and "/cases/0/impls/torch/" in f and "tampered" in f
        for f in failures
    )


def test_saved_text_is_checked_evidence_not_a_figure(site, root):
    """Notes and reasons are the run's words: shown verbatim, checked, never read as figures."""
    path = root / "results" / "fixture" / "smoke.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    old_notes = data["timing"]["notes"]
    data["timing"]["notes"] = notes = "host cost: about 20 ms of back-to-back calls"
    path.write_text(json.dumps(data), encoding="utf-8")
    page = site / "evidence" / "fixture" / "smoke" / "index.html"
    text = page.read_text(encoding="utf-8")
    span = re.search(r'<span class="kp-value kp-text"[^>]*data-field="/timing/notes">[^<]*<', text)
    assert span and old_notes in span[0]
    page.write_text(text.replace(span[0], span[0].replace(old_notes, notes)), "utf-8")
    assert _failures(site, root) == []
    page.write_text(text.replace(span[0], span[0].replace(old_notes, "about 2 ms")), "utf-8")
    (failure,) = _failures(site, root)
    assert failure.startswith("evidence/fixture/smoke/") and "tampered" in failure
    _inject(site, "methodology/", f"<p>{span[0]}/span></p>")
    assert any(f.startswith("methodology/") for f in _failures(site, root))


def test_evidence_values_only_on_their_own_evidence_page(site, root):
    text = (site / "evidence" / "fixture" / "smoke" / "index.html").read_text(encoding="utf-8")
    value = re.search(r'<span class="kp-value"[^>]*data-unit="GB/s"[^>]*>[^<]+</span>', text)[0]
    _inject(site, "methodology/", f"<p>copy: {value}</p>")
    (failure,) = _failures(site, root)
    assert failure.startswith("methodology/") and "only appear on its own" in failure


def _commit_tree(root: Path) -> str:
    """Commit every file under ``root`` (a git repository); the commit."""
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(root)]
    subprocess.run([*git, "add", "-A"], check=True, capture_output=True)
    subprocess.run([*git, "commit", "-qm", "tree"], check=True, capture_output=True)
    return subprocess.run(
        [*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True
    ).stdout.strip()


def _archive_fixture(root: Path, commit: str) -> tuple[Path, str]:
    """Archive the fixture result as measured at ``commit``; the archived file and its id."""
    from kernel_portfolio.results import archive_result, load

    current = load(root / "results/fixture/smoke.json")
    current.data["git"]["commit"] = commit
    archived = archive_result(current)
    assert load(archived).staleness(root).current
    return archived, archived.relative_to(root / "results").with_suffix("").as_posix()


def test_archived_result_is_judged_against_its_commit(site, root):
    from kernel_portfolio.results import load, save

    archived, result_id = _archive_fixture(root, _commit_tree(root))
    data = load(archived).data
    claim = make_claim(result_id, data, "softmax/fwd/1024x4096/float16", "gbps")
    _inject(site, "methodology/", "<p>Once " + rewrite_claim_links(claim.html(), "methodology/"))
    softmax = root / "src" / "kernel_portfolio" / "ops" / "softmax.py"
    softmax.write_text(softmax.read_text(encoding="utf-8") + "\n# edited\n", encoding="utf-8")
    report = gate.check_site(site, root)
    archived_claims = [c for c in report.claims if c.result_id == result_id]
    assert [c.status for c in archived_claims] == ["archived"]
    assert not any(f.page.startswith("methodology/") for f in report.failures)
    assert any(f.page.startswith("fixture-claims/") for f in report.failures)  # current: stale
    # A recorded hash that the file at the commit does not match: stale, whatever the tree holds.
    data["sources"]["src/kernel_portfolio/ops/softmax.py"] = "0" * 64
    save(data, archived)
    report = gate.check_site(site, root)
    (failure,) = [f for f in report.failures if f.page.startswith("methodology/")]
    assert "stale: the files at its commit differ" in failure.message
    assert "src/kernel_portfolio/ops/softmax.py" in failure.message


def test_archived_result_whose_commit_is_missing_stops_the_check(site, root, capsys):
    from kernel_portfolio.cli import main
    from kernel_portfolio.results import load

    archived, result_id = _archive_fixture(root, _commit_tree(root))
    claim = make_claim(result_id, load(archived).data, "softmax/fwd/1024x4096/float16", "gbps")
    _inject(site, "methodology/", "<p>Once " + rewrite_claim_links(claim.html(), "methodology/"))
    text = archived.read_text(encoding="utf-8")
    commit = json.loads(text)["git"]["commit"]
    archived.write_text(text.replace(commit, "f" * 40), encoding="utf-8")
    assert main(["claims", "check", str(site), "--root", str(root)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "f" * 40 in err and "git fetch --unshallow" in err


def test_resource_from_another_host(site, root):
    _inject(site, "", '<script src="https://cdn.example.org/x.js"></script>', "</body>")
    (failure,) = _failures(site, root)
    assert failure.startswith("home") and "another host" in failure


def test_cli_exit_codes(built, site, root, capsys):
    from kernel_portfolio.cli import main

    assert main(["claims", "check", str(site), "--root", str(root)]) == 0
    assert "ok" in capsys.readouterr().out
    assert main(["claims", "list", str(site), "--root", str(root)]) == 0
    listed = capsys.readouterr().out
    assert "fixture-claims/\t" in listed and "fixture/smoke" in listed
    _inject(site, "methodology/", "<p>it took 12.5 ms</p>")
    assert main(["claims", "check", str(site), "--root", str(root)]) == 1
    assert "methodology/" in capsys.readouterr().out
    assert main(["claims", "check", str(site / "nope"), "--root", str(root)]) == 2
    assert "not a built site" in capsys.readouterr().err


# ------------------------------------------------------ rebuilds of the docs


@pytest.fixture
def light(tmp_path):
    ws = sw.copy_tree(tmp_path / "ws", light=True)
    sw.add_fixture(ws)
    return ws


def test_build_fails_on_hand_typed_figures(light):
    """Every kind of figure, planted at once: in text, attributes and words, and in a chart."""
    with open(light / "docs" / "methodology.md", "a", encoding="utf-8") as fh:
        fh.write(
            '\nOn our GPU the copy took 12.5 ms; [the copy](index.md "took 7.5 µs") is '
            'three times faster, <abbr title="at 640 GB/s">HBM</abbr>.\n'
        )
    with open(light / "docs" / "fixture-notebook.py", "a", encoding="utf-8") as fh:
        fh.write(
            '\n# %%\nprint("reached 850 GB/s; the split plan halves the time")\n'
            'display(HTML(\'<img src="a.png" alt="reached 91.4% of copy">\'))\n'
            "\n# %%\nimport plotly.graph_objects as go\n"
            "charts.show(go.Figure(layout={'title': 'a 2.5x win, twice as fast'}), 'planted')\n"
        )
    add = light / "src" / "kernel_portfolio" / "ops" / "add.py"
    source = add.read_text(encoding="utf-8")
    doc = re.search(r'def add\(.*?\n    """(.*?)\n', source, re.S)
    add.write_text(source.replace(doc[0], doc[0] + "\n    Runs 1.8x faster than torch.\n", 1))
    result = sw.build(light)
    assert result.returncode != 0
    out = result.output
    assert "evidence gate" in out
    methodology = "methodology/ (docs/methodology.md)"
    notebook = "fixture-notebook/ (docs/fixture-notebook.py)"
    for page, kind, figure, where in [
        (methodology, "time", "12.5 ms", "On our GPU"),
        (methodology, "time", "7.5 µs", "title of <a>"),
        (methodology, "speedup", "three times faster", "is three times"),
        (methodology, "bandwidth", "640 GB/s", "title of <abbr>"),
        (notebook, "bandwidth", "850 GB/s", "reached"),
        (notebook, "speedup", "halves the time", "split plan"),
        (notebook, "percent", "91.4%", "alt of <img>"),
        (notebook, "speedup", "2.5x", "chart 'planted' layout.title.text"),
        (notebook, "speedup", "twice as fast", "chart 'planted' layout.title.text"),
        ("kernels/add/ (docs/kernels/add.md)", "speedup", "1.8x", "faster than torch"),
    ]:
        message = f"{page}: hand-typed {kind} figure '{figure}' in “"
        lines = [line for line in out.splitlines() if message in line]  # (code cells show it too)
        assert any(where in line for line in lines), (message, where, out[-3000:])


def test_build_fails_on_claim_of_missing_case(light):
    page = light / "docs" / "fixture-claims.md"
    text = page.read_text(encoding="utf-8")
    page.write_text(text.replace("1024x4096/float16 ours gbps", "4096x4096/float16 ours gbps", 1))
    result = sw.build(light)
    assert result.returncode != 0
    assert "docs/fixture-claims.md: a claim cannot be resolved" in result.output
    assert "softmax/fwd/4096x4096/float16" in result.output


def test_build_fails_on_notebook_claim_of_missing_case(light):
    nb = light / "docs" / "fixture-notebook.py"
    nb.write_text(nb.read_text().replace('case = "softmax/fwd/1024x4096/float16"',
                                         'case = "softmax/fwd/4096x4096/float16"'))  # fmt: skip
    result = sw.build(light)
    assert result.returncode != 0
    assert "fixture-notebook.py" in result.output
    assert "softmax/fwd/4096x4096/float16" in result.output
