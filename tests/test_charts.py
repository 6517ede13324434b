"""Charts: plotly figures from results frames, and the HTML the site's script draws."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from site_workspace import fixture_result

from kernel_portfolio import charts
from kernel_portfolio.results import Result


@pytest.fixture(scope="module")
def result():
    from site_workspace import ROOT

    data = fixture_result(ROOT, skip={"liger": "not installed"})
    return Result("results/fixture/smoke.json", data)


def test_summary_figure_uses_gbps_for_memory_bound_ops(result):
    fig = charts.summary_figure(result.frame(), "softmax")
    names = [t.name for t in fig.data]
    assert names == ["ours", "torch", "compile"]  # liger was skipped: not drawn
    frame = result.frame()
    ours = frame[(frame.op == "softmax") & (frame.impl == "ours")]
    assert list(fig.data[0].y) == ours["gbps"].tolist()
    assert "GB/s" in fig.layout.yaxis.title.text


def test_summary_figure_uses_tflops_for_gemm(result):
    fig = charts.summary_figure(result.frame(), "matmul")
    assert "TFLOP/s" in fig.layout.yaxis.title.text
    frame = result.frame()
    assert (
        list(fig.data[0].y)
        == frame[(frame.op == "matmul") & (frame.impl == "ours")]["tflops"].tolist()
    )


def test_summary_figure_refuses_bad_input(result):
    with pytest.raises(TypeError, match="frame must be a pandas DataFrame"):
        charts.summary_figure(result.data, "softmax")
    with pytest.raises(ValueError, match="no measured rows"):
        charts.summary_figure(result.frame(), "add")
    with pytest.raises(ValueError, match="no measured rows"):
        charts.summary_figure(pd.DataFrame(columns=result.frame().columns), "softmax")


def test_samples_figure_boxes_each_record_from_its_samples(result):
    fig = charts.samples_figure(result.data)
    drawn = {t.name: t for t in fig.data}
    assert set(drawn) == {"ours", "torch", "compile", "cublas"}  # liger was skipped: not drawn
    case = result.case("softmax/fwd/1024x4096/float16")
    ours, record = drawn["ours"], case["impls"]["ours"]
    i = list(ours.x).index("softmax 1024x4096 float16 fwd")
    assert ours.median[i] == pytest.approx(record["median_ms"] * 1000)
    assert (ours.q1[i], ours.q3[i]) == pytest.approx((record["q10_ms"] * 1000,
                                                       record["q90_ms"] * 1000))  # fmt: skip
    samples = [s * 1000 for s in record["samples_ms"]]
    assert (ours.lowerfence[i], ours.upperfence[i]) == pytest.approx((min(samples), max(samples)))
    assert "samples_ms" not in charts.figure_json(fig)  # the samples stay in the raw JSON
    with pytest.raises(ValueError, match="no samples"):
        charts.samples_figure({"cases": []})
    with pytest.raises(TypeError, match="data must be"):
        charts.samples_figure(result.frame())


def test_cliff_points_hold_ours_over_the_best_baseline_to_the_targets_bars(result):
    from kernel_portfolio.bench import targets

    points = {p["case"]: p for p in charts.cliff_points("fixture/smoke", result.data)}
    every = {r["case"]: r for r in targets.evaluate(result.data)
             if r["target"] == targets.EVERY_SHAPE}  # fmt: skip
    assert set(every) <= set(points)
    for case, row in every.items():
        point = points[case]
        assert (point["value"], point["baseline"], point["threshold"], point["met"]) == (
            row["value"],
            row["baseline"],
            row["threshold"],
            row["met"],
        )
    softmax = points["softmax/fwd/1024x4096/float16"]
    assert (softmax["x"], softmax["line"]) == (4096, "1024 rows")
    gemm = points["matmul/fwd/512x512x512/float16"]  # held to cuBLAS, with the bar for its M
    assert (gemm["x"], gemm["line"], gemm["baseline"]) == (512, "N 512, K 512", "cublas")
    assert gemm["value"] == targets.target_value(result.data, gemm["case"], "speedup", "cublas")
    assert all(p["floor"] == targets.FLOOR_BAR for p in points.values())


def test_cliff_figure_draws_a_panel_per_operator_and_mode_with_the_bars(result):
    from kernel_portfolio.bench import targets

    fig = charts.cliff_figure([("fixture/smoke", result.data)])
    titles = [a.text for a in fig.layout.annotations]
    assert {"softmax, forward", "rms_norm, forward + backward", "matmul, forward"} <= set(titles)
    drawn = sorted(y for t in fig.data for y in t.y)
    points = charts.cliff_points("fixture/smoke", result.data)
    assert drawn == sorted(p["value"] for p in points)
    bars = {shape.y0 for shape in fig.layout.shapes if shape.line.dash == "dot"}
    assert bars == {p[key] for p in points for key in ("threshold", "floor")}
    assert targets.FLOOR_BAR in bars
    missed = [s for t in fig.data for s in t.marker.symbol if s.endswith("-open")]
    assert len(missed) == sum(not p["met"] for p in points)
    with pytest.raises(ValueError, match="no case"):
        charts.cliff_figure([("fixture/smoke", {"cases": []})])


def test_served_plotly_js_is_the_version_plotly_writes_figures_for():
    import plotly.offline
    from site_workspace import ROOT

    head = (ROOT / "docs/assets/kp/plotly-cartesian.min.js").read_text(encoding="utf-8")[:200]
    assert f" v{plotly.offline.get_plotlyjs_version()}\n" in head, "run `make plotly-js`"


def test_inline_chart_embeds_figure_json_safely(result):
    fig = charts.summary_figure(result.frame(), "softmax")
    fig.update_layout(title="a </template><b>title</b> & more")
    html = charts.chart_div(fig, "softmax-1")
    start = '<div class="kp-chart" data-name="softmax-1"><template class="kp-chart-figure">'
    assert html.startswith(start) and html.endswith("</template></div>")
    payload = html[len(start) : -len("</template></div>")]
    assert "<" not in payload and ">" not in payload and "&" not in payload
    assert json.loads(payload)["layout"]["title"]["text"] == "a </template><b>title</b> & more"
    assert "plotly.min.js" not in html and "cdn" not in html.lower()


def test_file_chart_points_at_its_json():
    html = charts.chart_div(None, "default-softmax", src="default-softmax.json")
    assert html == (
        '<div class="kp-chart" data-name="default-softmax" data-src="default-softmax.json"></div>'
    )


@pytest.mark.parametrize("name", ["", "../x", "a b", "x/y", None])
def test_chart_names_are_file_names(name):
    with pytest.raises(ValueError, match="name must be"):
        charts.chart_div(None, name, src="x.json")


def test_chart_div_needs_exactly_one_source(result):
    fig = charts.summary_figure(result.frame(), "softmax")
    with pytest.raises(ValueError, match="exactly one"):
        charts.chart_div(fig, "x", src="x.json")
    with pytest.raises(ValueError, match="exactly one"):
        charts.chart_div(None, "x")
    with pytest.raises(TypeError, match="plotly Figure"):
        charts.figure_json({"data": []})


def test_show_displays_the_inline_chart(result):
    fig = charts.summary_figure(result.frame(), "matmul")
    shown = charts.show(fig, "gemm")
    assert shown._repr_html_() == charts.chart_div(fig, "gemm")


def test_a_claim_in_a_chart_shows_its_text_and_is_listed(result):
    from kernel_portfolio.evidence.quote import Claim, make_claim

    claim = make_claim("fixture/smoke", result.data, "softmax/fwd/1024x4096/float16", "gbps")
    fig = charts.summary_figure(result.frame(), "softmax")
    fig.update_layout(title=f"softmax reaches {claim}", meta={"note": "kept"})
    fig.add_annotation(text=f"<b>{claim}</b>", x=0, y=0)
    figure = json.loads(charts.figure_json(fig))
    assert figure["layout"]["title"]["text"] == f"softmax reaches {claim.text}"
    assert figure["layout"]["annotations"][0]["text"] == f"<b>{claim.text}</b>"
    assert figure["layout"]["meta"]["note"] == "kept"
    (record,) = figure["layout"]["meta"]["kp-claims"]  # listed once, shown twice
    assert Claim.from_record(record) == claim
    assert "kp-claim" not in charts.figure_json(charts.summary_figure(result.frame(), "softmax"))
    fig.update_layout(meta=["a template's value"])
    with pytest.raises(ValueError, match="meta must be a dict"):
        charts.figure_json(fig)
