"""The quoting mechanism: values, units and rounding come from the saved result."""

from __future__ import annotations

import html
import json
import math
import re

import pytest
from site_workspace import fixture_result

from kernel_portfolio.evidence import Claim, quote
from kernel_portfolio.evidence.quote import (
    CLAIMS_ATTRIBUTE,
    claims_to_text,
    expand_markdown,
    format_time_us,
    format_value,
    make_claim,
    parse_markdown_claim,
    quotables,
    render_attribute_claims,
    resolve,
    significant,
)
from kernel_portfolio.results import save

SP = "\u202f"
SOFTMAX = "softmax/fwd/1024x4096/float16"
MATMUL = "matmul/fwd/512x512x512/float16"


@pytest.fixture(scope="module")
def data():
    from site_workspace import ROOT

    return fixture_result(ROOT)


@pytest.fixture
def root(tmp_path, data):
    save(data, tmp_path / "results" / "fixture" / "smoke.json")
    return tmp_path


@pytest.mark.parametrize(
    ("value", "text"),
    [(123.456, "123"), (12.3456, "12.3"), (1.23456, "1.23"), (0.0123456, "0.0123"),
     (999.6, "1000"), (99.96, "100"), (4267.0, "4270"), (0.0, "0")],
)  # fmt: skip
def test_significant_digits(value, text):
    assert significant(value) == text


@pytest.mark.parametrize(
    ("us", "text"),
    [(67.68, "67.7 µs"), (999.4, "999 µs"), (999.6, "1.00 ms"), (1234.5, "1.23 ms"),
     (0.5, "500 ns"), (2.5e6, "2.50 s"), (0.0, "0 µs")],
)  # fmt: skip
def test_time_picks_unit_after_rounding(us, text):
    assert format_time_us(us) == text.replace(" ", SP)


@pytest.mark.parametrize(
    ("value", "unit", "text"),
    [(3966.4, "GB/s", "3966 GB/s"), (91.44, "%", "91.4%"), (1.8049, "x", "1.80×"),
     (218.4, "TFLOP/s", "218 TFLOP/s"), (0.8123, "ms", "812 µs"), (812.0, "ms", "812 ms"),
     (3.14159, "GiB", "3.14 GiB"), (0.5, "", "0.500"),
     # counts: whole values in full, never rounded to 3 digits or given decimals
     (7.0, "", "7"), (150, "compiles", "150 compiles"), (12345, "requests", "12345 requests"),
     (40.0, "registers/thread", "40 registers/thread"), (0, "bytes/thread", "0 bytes/thread"),
     (2.5, "compiles", "2.50 compiles"),
     # sizes: bytes in full under 1 KiB, then binary prefixes with 3 significant digits
     (0, "bytes", "0 B"), (512.0, "bytes", "512 B"), (1024, "bytes", "1.00 KiB"),
     (1 << 20, "bytes", "1.00 MiB"), (12726272, "bytes", "12.1 MiB"),
     (268435456, "bytes", "256 MiB"), (3 << 30, "bytes", "3.00 GiB")],
)  # fmt: skip
def test_format_value_by_unit(value, unit, text):
    assert format_value(value, unit) == text.replace(" ", SP)


def test_resolve_reads_saved_fields(data):
    case = next(c for c in data["cases"] if c["id"] == SOFTMAX)
    ours = case["impls"]["ours"]
    assert resolve(data, SOFTMAX, "median_us") == (ours["median_ms"] * 1000.0, "us")
    assert resolve(data, SOFTMAX, "gbps") == (ours["gbps"], "GB/s")
    assert resolve(data, SOFTMAX, "pct_copy") == (ours["pct_copy"], "%")
    assert resolve(data, SOFTMAX, "peak_mem_bytes") == (ours["peak_mem_bytes"], "bytes")
    assert make_claim("fixture/smoke", data, SOFTMAX, "peak_mem_bytes").text == f"1.00{SP}MiB"
    ratio = next(r for r in case["ratios"] if r["baseline"] == "torch")
    assert resolve(data, SOFTMAX, "speedup", "ours", "torch") == (ratio["median"], "x")
    gemm = next(c for c in data["cases"] if c["id"] == MATMUL)
    cublas = next(r for r in gemm["ratios"] if r["baseline"] == "cublas")
    assert resolve(data, MATMUL, "pct_cublas") == (cublas["median"] * 100.0, "%")
    assert resolve(data, MATMUL, "tflops")[0] == gemm["impls"]["ours"]["tflops"]


def test_resolve_extra_metric(data):
    data = {**data, "cases": [dict(c) for c in data["cases"]]}
    case = next(c for c in data["cases"] if c["id"] == SOFTMAX)
    case["impls"] = {**case["impls"], "compile": dict(case["impls"]["compile"])}
    case["impls"]["compile"]["metrics"] = {"compile_ms": {"value": 812.0, "unit": "ms"}}
    claim = make_claim("fixture/smoke", data, SOFTMAX, "metrics.compile_ms", "compile")
    assert claim.text == f"812{SP}ms"


@pytest.mark.parametrize(
    ("case", "stat", "impl", "baseline", "match"),
    [
        ("softmax/fwd/1x1/float16", "gbps", "ours", None, "not in the result"),
        (SOFTMAX, "gbps", "cublas", None, "not measured"),
        (SOFTMAX, "bogus", "ours", None, "not one of"),
        (SOFTMAX, "speedup", "ours", None, "needs baseline"),
        (SOFTMAX, "gbps", "ours", "torch", "only for ratio"),
        (SOFTMAX, "tflops", "ours", None, "no value"),
        (SOFTMAX, "pct_cublas", "ours", None, "not measured"),
        (SOFTMAX, "metrics.none", "ours", None, "no metric"),
    ],
)
def test_resolve_refuses(data, case, stat, impl, baseline, match):
    with pytest.raises(ValueError, match=match):
        resolve(data, case, stat, impl, baseline)


def test_resolve_refuses_an_unrecorded_peak_memory(data):
    data = {**data, "cases": [dict(c) for c in data["cases"]]}
    case = next(c for c in data["cases"] if c["id"] == SOFTMAX)
    case["impls"] = {**case["impls"], "ours": {**case["impls"]["ours"], "peak_mem_bytes": None}}
    with pytest.raises(ValueError, match="no value for 'peak_mem_bytes'"):
        resolve(data, SOFTMAX, "peak_mem_bytes")
    assert (SOFTMAX, "ours", "peak_mem_bytes") not in {
        (c.case_id, c.impl, c.stat) for c in quotables("fixture/smoke", data)
    }


def test_resolve_refuses_skipped_impl():
    from site_workspace import ROOT

    data = fixture_result(ROOT, skip={"liger": "not installed"})
    with pytest.raises(ValueError, match="status 'skipped'"):
        resolve(data, SOFTMAX, "gbps", "liger")
    with pytest.raises(ValueError, match="status 'skipped'"):
        resolve(data, SOFTMAX, "speedup", "ours", "liger")


def test_claim_html_carries_everything_the_gate_checks(data):
    claim = make_claim("fixture/smoke", data, SOFTMAX, "speedup", "ours", "torch")
    html = claim.html()
    assert html.startswith('<a class="kp-claim" href="kp-evidence:fixture/smoke#softmax-fwd-')
    attrs = {"result": "fixture/smoke", "case": SOFTMAX, "stat": "speedup", "impl": "ours",
             "baseline": "torch", "value": repr(claim.value)}  # fmt: skip
    for name, value in attrs.items():
        assert f'data-{name}="{value}"' in html
    assert html.endswith(f">{claim.text}</a>") and claim.text.endswith("×")
    assert str(claim) == claim._repr_html_() == html
    back = Claim.from_element(
        {"data-result": "fixture/smoke", "data-case": SOFTMAX, "data-stat": "speedup",
         "data-impl": "ours", "data-baseline": "torch", "data-value": repr(claim.value)},
        claim.text,
    )  # fmt: skip
    assert back == claim


def test_quote_loads_from_root(root, data):
    claim = quote("fixture/smoke", SOFTMAX, "gbps", root=root)
    assert claim.value == resolve(data, SOFTMAX, "gbps")[0]
    assert not claim.archived


@pytest.mark.parametrize("bad", ["../etc/passwd", "/abs/x", "", "a//b"])
def test_quote_refuses_paths_outside_results(root, bad):
    with pytest.raises(ValueError, match="not a path under results"):
        quote(bad, SOFTMAX, "gbps", root=root)


def test_quote_refuses_missing_result(root):
    with pytest.raises(ValueError, match="does not exist"):
        quote("fixture/nope", SOFTMAX, "gbps", root=root)


def test_quote_refuses_invalid_results_file(root):
    import json

    path = root / "results" / "fixture" / "smoke.json"
    data = json.loads(path.read_text())
    data["cases"][0]["impls"]["ours"]["median_ms"] *= 0.5  # no longer the median of its samples
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="median"):
        quote("fixture/smoke", SOFTMAX, "gbps", root=root)


def test_markdown_expansion_outside_code_only(root):
    page = (
        f"Reaches {{{{ claim fixture/smoke {SOFTMAX} ours gbps }}}} here, "
        f"and `{{{{ claim fixture/smoke {SOFTMAX} ours gbps }}}}` in code.\n\n"
        f"```\n{{{{ claim fixture/smoke {SOFTMAX} ours/torch speedup }}}}\n```\n"
    )
    out = expand_markdown(page, root)
    assert out.count('class="kp-claim"') == 1
    assert out.count("{{ claim") == 2


def test_claim_records_round_trip(data):
    claim = make_claim("fixture/smoke", data, SOFTMAX, "speedup", "ours", "torch")
    assert Claim.from_record(json.loads(json.dumps(claim.record()))) == claim
    with pytest.raises(ValueError, match="claim record"):
        Claim.from_record({"result": "fixture/smoke", "case": SOFTMAX})


def test_a_claim_shows_its_text_where_no_link_can_go(data):
    claim = make_claim("fixture/smoke", data, SOFTMAX, "gbps")
    assert claims_to_text(f"softmax at {claim}, <b>bold</b>") == (
        f"softmax at {claim.text}, <b>bold</b>",
        [claim],
    )


def test_markdown_escapes_a_claim_inside_a_raw_html_tag(root):
    page = f'<abbr title="{{{{ claim fixture/smoke {SOFTMAX} ours gbps }}}}">HBM</abbr> and a < b'
    out = expand_markdown(page, root)
    assert out.startswith('<abbr title="&lt;a class=&quot;kp-claim&quot; href=')
    assert out.endswith('&lt;/a&gt;">HBM</abbr> and a < b')


def _in_attribute(form: str, link: str) -> str:
    """A claim link inside an attribute, as each writer of a page puts it there."""
    import markdown

    if form == "markdown":  # an image's alt text and a link's title
        return markdown.markdown(f'![softmax at {link}](a.png) [x](b.html "softmax at {link}")')
    if form == "raw-html":  # expand_markdown, inside a tag
        return f'<abbr title="softmax at {html.escape(link)}">x</abbr>'
    return f"<abbr title='softmax at {html.escape(link, quote=False)}'>x</abbr>"  # nbconvert


@pytest.mark.parametrize("form", ["markdown", "raw-html", "nbconvert"])
def test_claims_in_attributes_become_their_text(data, form):
    claim = make_claim("fixture/smoke", data, SOFTMAX, "gbps")
    out = render_attribute_claims(_in_attribute(form, claim.html()))
    assert "kp-claim" not in out.replace(CLAIMS_ATTRIBUTE, "") and "&lt;" not in out
    listed = re.findall(rf'(\w+)="softmax at ([^"]*)"[^>]*{CLAIMS_ATTRIBUTE}="([^"]*)"', out)
    assert listed and len(listed) == (2 if form == "markdown" else 1)
    for _, shown, records in listed:
        assert shown.split() == claim.text.split()  # a link's title keeps no no-break space
        (record,) = json.loads(html.unescape(records))
        assert Claim.from_record(record).data_attrs() == claim.data_attrs()
    assert render_attribute_claims("<p>no claim here</p>") == "<p>no claim here</p>"


def test_markdown_expansion_reports_every_bad_claim(root):
    page = (
        f"{{{{ claim fixture/smoke softmax/fwd/2x2/float16 ours gbps }}}} and "
        f"{{{{ claim fixture/smoke {SOFTMAX} ours speedup }}}} and {{{{ claim too few }}}}"
    )
    with pytest.raises(ValueError) as err:
        expand_markdown(page, root)
    lines = str(err.value).splitlines()
    assert len(lines) == 3
    assert "softmax/fwd/2x2/float16" in lines[0] and "needs baseline" in lines[1]
    assert "4 arguments" in lines[2]


def test_parse_markdown_claim():
    assert parse_markdown_claim("r c ours/torch speedup") == ("r", "c", "speedup", "ours", "torch")
    assert parse_markdown_claim("r c ours gbps") == ("r", "c", "gbps", "ours", None)


def test_quotables_cover_every_measured_value(data):
    claims = list(quotables("fixture/smoke", data))
    stats = {(c.case_id, c.impl, c.stat) for c in claims}
    assert (SOFTMAX, "ours", "median_us") in stats
    assert (SOFTMAX, "ours", "speedup") in stats
    assert (MATMUL, "ours", "tflops") in stats
    assert (SOFTMAX, "torch", "peak_mem_bytes") in stats
    assert all(math.isfinite(c.value) and c.text for c in claims)
