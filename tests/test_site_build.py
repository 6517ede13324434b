"""The built site: within its size budget, offline, every internal link resolving.

The full build executes every notebook of the working tree, plus a fixture
result and two pages that quote it (see ``site_workspace``); the real
``results/`` may not hold a benchmark result yet.
"""

from __future__ import annotations

import html
import json
import os
import posixpath
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
import site_workspace as sw
import yaml

from kernel_portfolio.bench import targets
from kernel_portfolio.evidence import gate, htmltree
from kernel_portfolio.evidence.quote import case_anchor

#: Bytes one page's HTML may weigh: what a phone loads comfortably.
PAGE_BUDGET = 1_000_000
#: Bytes the whole built site may weigh, every file counted. The evidence gate
#: parses every byte of HTML in pure Python (about 3 MB/s on two cores), so this
#: also bounds the build's time without a wall-clock assertion, which a busy
#: machine would make flaky. A GPU's suite weighs a few MB of pages and charts
#: (the H100's `models` suite added 4.9 MB), a chunk-rules fit's two runs
#: about 9 to 17 MB (their evidence pages, kept beside the fit that quotes
#: them): this holds both suites of the H200 and of the H100, and the case
#: studies' sweeps, chunk rules on both cards.
SITE_BUDGET = 45_000_000
#: Bytes of HTML a case study's page may weigh.
CASE_STUDY_BUDGET = 500_000


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    result = sw.fixture_site(tmp_path_factory)
    assert result.returncode == 0, result.output[-4000:]
    return result


def _pages(site: Path) -> list[Path]:
    return sorted(site.rglob("*.html"))


def test_build_passes_the_gate(built):
    print(f"full site build: {built.seconds:.1f} s")
    assert "evidence gate:" in built.output


def test_nav_by_reader_intent(built):
    root = htmltree.parse((built.site / "index.html").read_text(encoding="utf-8"))
    tabs = next(n for n in root.iter("nav") if "md-tabs" in n.classes)
    titles = [re.sub(r"\s+", " ", a.text()).strip() for a in tabs.iter("a")]
    assert titles == ["Home", "Course", "Case studies", "Kernels", "Benchmarks", "Methodology",
                      "Evidence", "Contributing", "Fixtures"]  # fmt: skip


def test_one_api_page_per_operator(built):
    for op, functions in [("add", ["add"]), ("row_sum", ["row_sum"]), ("softmax", ["softmax"]),
                          ("rms_norm", ["rms_norm", "residual_rms_norm"]),
                          ("matmul", ["matmul"])]:  # fmt: skip
        page = (built.site / "kernels" / op / "index.html").read_text(encoding="utf-8")
        for name in functions:
            assert f'id="kernel_portfolio.ops.{op}.{name}"' in page, (op, name)


def test_notebooks_executed_with_claims_and_charts(built):
    page = (built.site / "fixture-notebook" / "index.html").read_text(encoding="utf-8")
    assert page.count('class="kp-claim"') == 2
    assert 'href="../evidence/fixture/smoke/#softmax-fwd-1024x4096-float16"' in page
    assert (
        '<div class="kp-chart" data-name="fixture-softmax"><template class="kp-chart-figure">'
        in page
    )
    assert "kp-evidence:" not in page  # every placeholder href was rewritten


def test_claims_where_no_link_can_go_show_their_text(built):
    """In an attribute or a chart's title a claim is its text, listed beside it for the gate."""
    for url, count in (("fixture-claims", 2), ("fixture-notebook", 1)):
        page = (built.site / url / "index.html").read_text(encoding="utf-8")
        assert "&lt;a class=" not in page and "&lt;/a&gt;" not in page
        shown = re.findall(r'title="([^"]*)" data-kp-claims="([^"]*)"', page)
        assert len(shown) == count, shown
        for title, listed in shown:
            records = json.loads(html.unescape(listed))
            assert records and all(r["text"].split()[0] in title for r in records)
    page = (built.site / "fixture-notebook" / "index.html").read_text(encoding="utf-8")
    figure = json.loads(re.search(r'<template class="kp-chart-figure">(.*?)</template>', page)[1])
    (record,) = figure["layout"]["meta"]["kp-claims"]
    assert figure["layout"]["title"]["text"] == f"softmax: ours at {record['text']} torch"


def test_evidence_page_links_raw_json_and_log(built):
    page = (built.site / "evidence/fixture/smoke/index.html").read_text(encoding="utf-8")
    for case in ("softmax-fwd-1024x4096-float16", "rms-norm-fwdbwd-32x127-bfloat16",
                 "matmul-fwd-512x512x512-float16"):  # fmt: skip
        assert f'id="{case}"' in page
    assert "<code>2*M*N*s with M=1024, N=4096, s=2</code>" in page  # formulas as saved
    assert "kp:aside" not in page  # every table set aside from Markdown came back
    assert 'href="smoke.json"' in page and 'href="smoke.log"' in page
    raw = built.site / "evidence/fixture/smoke/smoke.json"
    assert raw.read_bytes() == (built.ws / "results/fixture/smoke.json").read_bytes()
    assert (built.site / "evidence/fixture/smoke/smoke.log").is_file()


def test_evidence_index_lists_every_claim(built):
    index = (built.site / "evidence" / "index.html").read_text(encoding="utf-8")
    listed = json.loads((built.site / "evidence" / "claims.json").read_text(encoding="utf-8"))
    on_pages = [
        (scan.url, text)
        for scan in gate.scan_site(built.site)
        if scan.url != "evidence/"
        for _, text in scan.claims
    ]
    assert sorted((c["page"], c["text"]) for c in listed) == sorted(on_pages)
    for c in listed:  # a claim is archived exactly when it quotes an archived result
        assert c["kind"] == ("archived" if c["result"].startswith("archive/") else "current")
    assert any(c["kind"] == "current" for c in listed)
    for url in ("fixture-claims/", "fixture-notebook/"):
        assert f'<a href="../{url}">{url}</a>' in index
    entries, _ = gate.load_allowlist(built.ws / gate.ALLOWLIST)
    if entries:
        assert all(e.text in index and e.reason in index for e in entries)
    else:
        assert "The allow-list is empty" in index


def test_plotly_served_once_from_own_assets(built):
    copies = [p.relative_to(built.site).as_posix() for p in built.site.rglob("plotly*.js")]
    assert copies == ["assets/kp/plotly-cartesian.min.js"]
    for page in _pages(built.site):
        text = page.read_text(encoding="utf-8")
        assert "plotly-cartesian.min.js" not in text and "Plotly.newPlot" not in text, page


def test_notebook_pages_link_one_copy_of_the_notebook_styles(built):
    from kernel_portfolio.evidence.sitebuild import NOTEBOOK_CSS, notebook_styles

    shared = (built.site / NOTEBOOK_CSS).read_text(encoding="utf-8")
    assert all(style in shared for style in notebook_styles())
    page = (built.site / "fixture-notebook" / "index.html").read_text(encoding="utf-8")
    assert f'<link rel="stylesheet" href="../{NOTEBOOK_CSS}">' in page
    assert not any(style.strip()[:200] in page for style in notebook_styles())
    # The theme's source maps and lunr's other languages: no page loads them, none is published.
    assert not list(built.site.rglob("*.map"))
    assert not (built.site / "assets/javascripts/lunr").exists()


@pytest.mark.parametrize("url", ["benchmarks/", "benchmarks/fixture/smoke/"])
def test_chart_json_files_are_downloadable(built, url):
    page = (built.site / url / "index.html").read_text(encoding="utf-8")
    srcs = re.findall(r'<div class="kp-chart" data-name="[^"]+" data-src="([^"]+)"', page)
    assert srcs
    for src in srcs:
        figure = json.loads((built.site / url / src).read_text(encoding="utf-8"))
        assert figure["data"]
        assert f'href="{src}"' in page  # the download link


def test_benchmarks_pages_start_with_the_picture(built):
    index = (built.site / "benchmarks/index.html").read_text(encoding="utf-8")
    article = index[index.index("<article") :]
    assert article.index('data-name="fixture-overview"') < article.index('href="fixture/smoke/"')
    page = (built.site / "benchmarks/fixture/smoke/index.html").read_text(encoding="utf-8")
    assert page.index('data-name="smoke-cliff"') < page.index("<table")


def test_benchmarks_page_holds_the_results_to_the_speed_targets(built):
    page = (built.site / "benchmarks/fixture/smoke/index.html").read_text(encoding="utf-8")
    section = page[page.index('id="speed-targets"') : page.index('id="softmax"')]
    assert "falls under: add at 256 MiB per operand; " in section  # the smoke suite has none
    scan = gate.scan_page("benchmarks/fixture/", section)
    # Every-shape rows: each best baseline's share of copy and ours over it, both claims.
    assert len(scan.claims) >= 4 and scan.figures == []
    bars = {text for attrs, text in scan.targets if "kp-target" in attrs["class"]}
    assert "≥ 0.97× best baseline" in bars and bars <= targets.target_texts()


def over_budget(site: Path, page_budget: int, site_budget: int) -> list[str]:
    """What a built site has over its budgets: each page over ``page_budget``, the total."""
    sizes = {
        p.relative_to(site).as_posix(): p.stat().st_size for p in site.rglob("*") if p.is_file()
    }
    problems = [f"{path}: {size:,} bytes" for path, size in sorted(sizes.items())
                if path.endswith(".html") and size > page_budget]  # fmt: skip
    if sum(sizes.values()) > site_budget:
        largest = sorted(sizes.items(), key=lambda kv: -kv[1])[:5]
        problems.append(f"site: {sum(sizes.values()):,} bytes; largest files: {largest}")
    return problems


def test_site_and_pages_within_size_budget(built):
    sizes = [p.stat().st_size for p in built.site.rglob("*") if p.is_file()]
    print(f"site: {sum(sizes):,} bytes in {len(sizes)} files")
    assert over_budget(built.site, PAGE_BUDGET, SITE_BUDGET) == []
    assert over_budget(built.site / "case-studies", CASE_STUDY_BUDGET, SITE_BUDGET) == []


def test_size_budget_catches_a_heavy_page_and_a_heavy_site(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "index.html").write_bytes(b"x" * 1200)
    (tmp_path / "data.json").write_bytes(b"x" * 900)
    assert over_budget(tmp_path, 2000, 2100) == []
    assert over_budget(tmp_path, 1000, 2100) == ["a/index.html: 1,200 bytes"]
    (problem,) = over_budget(tmp_path, 2000, 2000)
    assert problem.startswith("site: 2,100 bytes") and "data.json" in problem


def test_nothing_loaded_from_other_hosts(built):
    external = {
        gate.page_url(built.site, p): scan
        for p in _pages(built.site)
        if (scan := gate.scan_page("", p.read_text(encoding="utf-8")).external)
    }
    assert external == {}
    config = yaml.safe_load(
        (built.ws / "mkdocs.yml").read_text(encoding="utf-8").replace("!ENV", "")
    )
    assert config["theme"]["font"] is False


def _targets(node: htmltree.Node) -> list[str]:
    attrs = {"a": "href", "link": "href", "script": "src", "img": "src", "source": "src"}
    if node.tag in attrs and node.attrs.get(attrs[node.tag]):
        if node.tag == "link" and node.attrs.get("rel") in ("canonical",):
            return []
        return [node.attrs[attrs[node.tag]]]
    if node.tag == "div" and "kp-chart" in node.classes and node.attrs.get("data-src"):
        return [node.attrs["data-src"]]
    return []


def test_every_internal_link_resolves(built):
    site = built.site
    ids: dict[Path, set[str]] = {}

    def anchors(path: Path) -> set[str]:
        if path not in ids:
            tree = htmltree.parse(path.read_text(encoding="utf-8"))
            ids[path] = {n.attrs["id"] for n in tree.iter() if "id" in n.attrs}
        return ids[path]

    broken = []
    checked = 0
    for page in _pages(site):
        base = page.relative_to(site).parent.as_posix()
        for node in htmltree.parse(page.read_text(encoding="utf-8")).iter():
            for target in _targets(node):
                parts = urlsplit(target)
                if parts.scheme or target.startswith(("//", "mailto:", "blob:")):
                    continue  # external links are the reader's choice, not a resource
                path = unquote(parts.path)
                if not path:
                    dest = page
                else:
                    # 404.html links from the site root (the default SITE_URL's path is /)
                    rel = posixpath.normpath(posixpath.join(base, path)).lstrip("/")
                    dest = site / rel
                    if dest.is_dir() or path.endswith("/"):
                        dest = dest / "index.html"
                checked += 1
                if not dest.is_file():
                    broken.append(f"{page.relative_to(site)}: {target}")
                elif (
                    parts.fragment
                    and dest.suffix == ".html"
                    and unquote(parts.fragment) not in anchors(dest)
                ):
                    broken.append(f"{page.relative_to(site)}: {target} (no such anchor)")
    assert checked > 100
    assert broken == [], "\n".join(broken)


def test_mkdocs_jupyter_never_serves_stale_outputs():
    config = yaml.safe_load(
        (sw.ROOT / "mkdocs.yml").read_text(encoding="utf-8").replace("!ENV", "")
    )
    jupyter = next(p["mkdocs-jupyter"] for p in config["plugins"] if isinstance(p, dict)
                   and "mkdocs-jupyter" in p)  # fmt: skip
    assert jupyter["execute"] is True and jupyter["allow_errors"] is False
    assert jupyter["cache"] is False
    assert config["strict"] is True


def test_empty_results_render_an_empty_state(tmp_path):
    ws = sw.copy_tree(tmp_path / "ws", light=True)
    for path in (ws / "results").rglob("*.json"):
        path.unlink()
    for page in (ws / "docs").rglob("*.md"):  # the written pages' own quotes need results
        text = page.read_text(encoding="utf-8")
        page.write_text(re.sub(r"\{\{ claim [^}]*\}\}", "a figure", text), encoding="utf-8")
    result = sw.build(ws)
    assert result.returncode == 0, result.output[-4000:]
    page = (result.site / "benchmarks" / "index.html").read_text(encoding="utf-8")
    assert "No current benchmark result is committed yet" in page
    index = (result.site / "evidence" / "index.html").read_text(encoding="utf-8")
    assert "No results are committed yet" in index and "No written page quotes" in index


def test_a_written_quote_of_a_removed_result_fails_the_build(tmp_path):
    ws = sw.copy_tree(tmp_path / "ws", light=True)
    for path in (ws / "results").rglob("*.json"):
        path.unlink()
    result = sw.build(ws)
    assert result.returncode != 0
    assert "methodology.md" in result.output and "does not exist" in result.output


@pytest.mark.interpreter
def test_readme_example_runs_as_written(tmp_path):
    readme = (sw.ROOT / "README.md").read_text(encoding="utf-8")
    example = re.search(r"```python\n(.*?)```", readme, re.S)[1]
    assert "TRITON_INTERPRET" in example
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run(
        [sys.executable, "-c", example], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_nav_globs_expand_in_name_order():
    from kernel_portfolio.evidence.sitebuild import expand_nav

    nav = [
        {"Course": ["course/index.md", "course/[0-9][0-9]-*"]},
        {"Evidence": ["evidence/index.md", "evidence/*.md"]},
        {"Only": "case-studies/*.py"},
    ]
    uris = ["course/index.md", "course/02-b.py", "course/01-a.md", "course/notes.txt",
            "evidence/index.md", "evidence/h200/default.md", "evidence/h200/default/d.json",
            "case-studies/x.py", "case-studies/index.md"]  # fmt: skip
    assert expand_nav(nav, uris) == [
        {"Course": ["course/index.md", "course/01-a.md", "course/02-b.py"]},
        {"Evidence": ["evidence/index.md", "evidence/h200/default.md"]},
        {"Only": ["case-studies/x.py"]},
    ]


def test_claim_links_are_relative_to_each_page():
    from kernel_portfolio.evidence.sitebuild import relative_href, rewrite_claim_links

    assert relative_href("", "h200/default", "a") == "evidence/h200/default/#a"
    assert relative_href("course/04-softmax/", "h200/default", "a") == (
        "../../evidence/h200/default/#a"
    )
    assert relative_href("evidence/", "h200/default", None) == "h200/default/"
    html = '<a class="kp-claim" href="kp-evidence:h200/default#x">1</a>'
    assert rewrite_claim_links(html, "methodology/") == (
        '<a class="kp-claim" href="../evidence/h200/default/#x">1</a>'
    )


def test_generated_html_blocks_skip_markdown_and_come_back_unchanged():
    import markdown

    from kernel_portfolio.evidence.sitebuild import SiteBuild

    table = "<table>\n<tr><td>2*M*N*s</td><td>_a_ *b*</td></tr>\n</table>"
    source = f"## Run {{ #run }}\n\n{table}\n\n<p>x*y*z</p>\n\nSome *text*."
    build = SiteBuild()
    aside = build._set_aside(source, "evidence/x/")
    assert table not in aside and aside.count("kp:aside") == 2
    md = markdown.Markdown(extensions=["attr_list", "md_in_html", "toc"])
    page = type("Page", (), {"url": "evidence/x/", "file": type("F", (), {"abs_src_path": ""})})
    out = build.on_page_content(md.convert(aside), page, files=None)
    assert table in out and "<p>x*y*z</p>" in out
    assert '<h2 id="run">Run</h2>' in out and "<em>text</em>" in out
    assert "kp:aside" not in out


def test_notebook_toc_follows_heading_ids():
    from mkdocs.structure.toc import get_toc

    from kernel_portfolio.evidence.sitebuild import align_notebook_toc

    content = (
        '<h1 id="study">Study</h1><h2 id="what-planspy-says">What <code>plans.py</code> says'
        '<a class="anchor-link" href="#what-planspy-says">¶</a></h2>'
        '<h2 id="srcs-choice">The <code>src/</code>\'s choice</h2>'
    )
    toc = get_toc([
        {"level": 1, "id": "study", "name": "Study", "children": [
            {"level": 2, "id": "what-says", "name": "What says", "children": []},
            {"level": 2, "id": "the-s-choice", "name": "The 's choice", "children": []},
        ]},
    ])  # fmt: skip
    align_notebook_toc(content, toc)
    (top,) = list(toc)
    assert [c.id for c in top.children] == ["what-planspy-says", "srcs-choice"]


def _generated(root: Path) -> dict[str, str]:
    """What the build would add to the site for the results under ``root`` (no mkdocs run)."""
    from kernel_portfolio.evidence.sitebuild import SiteBuild

    build = SiteBuild()
    build.root, build.results = root, gate.ResultSet(root)
    build._generate()
    return {
        **{f.src_uri: f.content for f in build.generated},
        **build.markers,
    }


def test_sweeps_get_evidence_pages_but_no_benchmark_tables(tmp_path):
    from kernel_portfolio.results import save

    save(sw.fixture_result(sw.ROOT), tmp_path / "results/fixture/smoke.json")
    filtered = sw.fixture_result(sw.ROOT)
    filtered["filter"] = "op=softmax"
    save(filtered, tmp_path / "results/fixture/smoke--op-softmax.json")
    sweep = sw.fixture_result(sw.ROOT)
    sweep["suite"] = "chunk_rules_run1"
    save(sweep, tmp_path / "results/fixture/chunk_rules_run1.json")
    generated = _generated(tmp_path)
    for rid in ("fixture/smoke", "fixture/smoke--op-softmax", "fixture/chunk_rules_run1"):
        assert f"evidence/{rid}.md" in generated
    for stem in ("smoke", "smoke--op-softmax"):  # a filtered run has a page of its own
        assert "suite `smoke`" in generated[f"benchmarks/fixture/{stem}.md"]
    assert not any(uri.startswith("benchmarks/fixture/chunk_rules") for uri in generated)
    index = generated["<!-- kp:benchmarks -->"]
    assert "(fixture/smoke--op-softmax.md)" in index
    assert "(fixture/chunk_rules_run1.md)" not in index
    assert "Not tabulated here" in index and "(../evidence/fixture/chunk_rules_run1.md)" in index


def test_skip_reasons_stay_out_of_measured_columns(tmp_path):
    from kernel_portfolio.results import save

    reason = "check: RuntimeError: n = 131072 exceeds the 65536 columns Liger launches"
    data = sw.fixture_result(sw.ROOT, skip={"liger": reason})
    save(data, tmp_path / "results/fixture/smoke.json")
    page = _generated(tmp_path)["benchmarks/fixture/smoke.md"]
    start = page.index("<table>", page.index("## softmax"))  # past the speed targets
    table = page[start : page.index("</table>", start) + 8]
    scan = gate.scan_page("benchmarks/fixture/", table)
    assert scan.figures == [], scan.figures
    assert f"<td>skipped: {reason}</td><td>—</td>" in table
    assert len(scan.claims) > 0


def test_large_results_split_into_detail_pages(tmp_path, monkeypatch):
    from kernel_portfolio.evidence import pages
    from kernel_portfolio.results import save

    monkeypatch.setattr(pages, "PAGE_ROWS", 20)
    data = sw.fixture_result(sw.ROOT, suite="default")
    save(data, tmp_path / "results/fixture/default.json")
    files = {f.src_uri: f.content for f in pages.evidence_page("fixture/default", data, {})}
    main = files.pop("evidence/fixture/default.md")
    details = {u[: -len(".md")]: text for u, text in files.items() if u.endswith(".md")}
    assert "evidence/fixture/default/softmax-2" in details  # an operator over several pages
    for case in data["cases"]:
        anchor = case_anchor(case["id"])
        (page,) = [u for u, text in details.items() if f"{{ #{anchor} }}" in text]
        assert f'<tr id="{anchor}"><td><a href="{page.rsplit("/", 1)[1]}/#{anchor}">' in main
    assert all(text.count("<tr data-kp-base") <= 20 for text in details.values())
    # Their numbers are evidence values of the result, accepted on its pages only.
    scans = [gate.scan_page(f"{u}/", text) for u, text in details.items()]
    assert sum(len(s.values) for s in scans) > 100
    report = gate.judge(scans, tmp_path)
    assert report.ok, report.summary()
    moved = gate.scan_page("methodology/", next(iter(details.values())))
    assert not gate.judge([moved], tmp_path).ok


def test_large_results_put_their_benchmark_tables_on_a_page_per_operator(tmp_path, monkeypatch):
    from kernel_portfolio.evidence import pages
    from kernel_portfolio.results import save

    save(sw.fixture_result(sw.ROOT), tmp_path / "results/fixture/smoke.json")
    monkeypatch.setattr(pages, "BENCH_PAGE_BYTES", 10_000)  # the smoke page weighs more
    generated = _generated(tmp_path)
    page = generated["benchmarks/fixture/smoke.md"]
    assert 'data-name="smoke-cliff"' in page and "kp-claim" not in page  # picture and counts
    for op in ("softmax", "rms_norm", "matmul"):
        op_page = generated[f"benchmarks/fixture/smoke/{op}.md"]
        assert f'<a href="{op}/">{op}</a>' in page
        assert 'id="speed-targets"' not in op_page and "## Speed targets" in op_page
        scan = gate.scan_page(f"benchmarks/fixture/smoke/{op}/", op_page)
        assert scan.claims and all(a["data-case"].startswith(f"{op}/") for a, _ in scan.claims)
        assert f"benchmarks/fixture/smoke/{op}/smoke-{op}.json" in generated
    monkeypatch.setattr(pages, "BENCH_PAGE_BYTES", 100_000)
    one = _generated(tmp_path)
    assert "benchmarks/fixture/smoke/softmax.md" not in one
    assert "benchmarks/fixture/smoke/smoke-softmax.json" in one


def test_archived_results_that_no_page_names_are_not_published(tmp_path):
    from kernel_portfolio.results import save

    sw.link_history(tmp_path)  # archived results are checked against their commit
    for stamp in ("20260101T000000Z", "20260102T000000Z"):
        save(sw.fixture_result(sw.ROOT), tmp_path / f"results/archive/fixture/smoke-{stamp}.json")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs/page.md").write_text(
        "{{ claim archive/fixture/smoke-20260102T000000Z softmax/fwd/1024x4096/float16 ours gbps }}"
    )
    generated = _generated(tmp_path)
    assert "evidence/archive/fixture/smoke-20260102T000000Z.md" in generated
    assert "evidence/archive/fixture/smoke-20260101T000000Z.md" not in generated
    index = generated["<!-- kp:results -->"]
    assert "no page quotes" in index and "`archive/fixture/smoke-20260101T000000Z`" in index
    # A current result computed from the older one (a fit of archived runs) publishes it too.
    fit = sw.fixture_result(sw.ROOT)
    fit["sources"]["results/archive/fixture/smoke-20260101T000000Z.json"] = "0" * 64
    save(fit, tmp_path / "results/fixture/fit.json")
    assert "evidence/archive/fixture/smoke-20260101T000000Z.md" in _generated(tmp_path)


def test_evidence_page_names_each_source_at_the_runs_commit():
    """A link into the repository at the commit when ``repo_url`` is set, else ``git show``."""
    from kernel_portfolio.evidence import pages

    data = sw.fixture_result(sw.ROOT)
    commit, path = data["git"]["commit"], "src/kernel_portfolio/ops/softmax.py"

    def sources(repo_url):
        page = pages.evidence_page("archive/fixture/smoke-x", data, {}, repo_url)[-1].content
        section = page[page.index("## Sources") :]
        return page, section[: section.index("</table>") + len("</table>")]

    page, table = sources(None)
    assert f"<code>git show {commit}:{path}</code>" in table and "href" not in table
    assert "Archived result" in page and "at its commit" in page
    page, table = sources("https://example.org/owner/repo/")
    assert f'href="https://example.org/owner/repo/blob/{commit}/{path}"' in table
    scan = gate.scan_page("evidence/archive/fixture/smoke-x/", table)
    assert scan.figures == [] and scan.external == []
    hashes = [attrs["data-field"] for attrs, _ in scan.values]
    assert hashes == [f"/sources/{p.replace('/', '~1')}" for p in sorted(data["sources"])]


def test_a_shallow_clone_stops_the_build_with_one_line_saying_how_to_fetch(tmp_path):
    """``git clone --depth 1`` lacks the commits archived results measured."""
    listed = sw.git_out(sw.ROOT, "ls-tree", "-r", "--name-only", "HEAD", "results/archive")
    if not listed:
        pytest.skip("no archived result committed at HEAD")
    clone = tmp_path / "clone"
    subprocess.run(
        ["git", "clone", "-q", "--depth", "1", f"file://{sw.ROOT}", str(clone)],
        check=True,
        capture_output=True,
    )
    result = sw.build(clone)
    assert result.returncode != 0
    (line,) = [line for line in result.output.splitlines() if "git fetch --unshallow" in line]
    assert "is not in the git history" in line and "results/archive/" in line
