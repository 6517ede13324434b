"""The built site in headless Chromium: charts draw, claims lead to the same value, offline.

The site is served on 127.0.0.1; every request to another host is aborted and
fails the test. Each page with a chart or a claim is checked after a hard load
and again after reaching it by clicking an in-site link (Material's instant
navigation, which swaps the page without reloading it).
"""

from __future__ import annotations

import functools
import http.server
import threading
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import site_workspace as sw

from kernel_portfolio.evidence import gate

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
]  # fmt: skip
#: How long a chart may take to draw.
DRAW_TIMEOUT_MS = 20_000


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    result = sw.fixture_site(tmp_path_factory)
    assert result.returncode == 0, result.output[-4000:]
    return result


@pytest.fixture(scope="module")
def server(built):
    handler = functools.partial(_Quiet, directory=str(built.site))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", built.port), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()
    thread.join()


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: `make chromium` installs Debian's chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield browser
        browser.close()


class Tab:
    """A page that records console errors, page errors and off-site requests."""

    def __init__(self, browser, base: str) -> None:
        self.base = base
        self.host = urlsplit(base).netloc
        self.errors: list[str] = []
        self.offsite: list[str] = []
        self.page = browser.new_page()
        self.page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.route("**/*", self._route)

    def _route(self, route):
        url = route.request.url
        if url.startswith(("data:", "blob:")) or urlsplit(url).netloc == self.host:
            route.continue_()
        else:
            self.offsite.append(url)
            route.abort()

    def check_clean(self) -> None:
        assert self.offsite == [], f"requests to other hosts: {self.offsite}"
        assert self.errors == [], f"console errors: {self.errors}"

    def charts_drawn(self) -> list[str]:
        """Wait until the page's charts (at least one) settled; return what failed."""
        self.page.wait_for_function(
            "(() => { const charts = [...document.querySelectorAll('div.kp-chart')];"
            " return charts.length > 0 && charts.every("
            "  d => d.dataset.kpState === 'drawn' || d.dataset.kpState === 'error'); })()",
            timeout=DRAW_TIMEOUT_MS,
        )
        return self.page.evaluate(
            "[...document.querySelectorAll('div.kp-chart')].filter(d => {"
            " const plot = d.querySelector('.kp-chart-plot');"
            " const svg = d.querySelector('svg.main-svg');"
            " return d.dataset.kpState !== 'drawn' || !svg"
            "  || !plot || !plot._fullData || plot._fullData.length === 0"
            # plotly.js's own CSS stacks its layers: without it a chart is a jumble
            "  || getComputedStyle(svg).position !== 'absolute'; })"
            ".map(d => d.dataset.name + ': ' + d.textContent.slice(0, 200))"
        )

    def claims(self) -> list[dict]:
        return self.page.evaluate(
            "[...document.querySelectorAll('article a.kp-claim')].map(a => ({"
            "href: a.href, text: a.textContent, stat: a.dataset.stat}))"
        )


def _pages_with(site: Path, marker: str) -> list[str]:
    return [
        gate.page_url(site, p)
        for p in sorted(site.rglob("*.html"))
        if marker in p.read_text(encoding="utf-8")
    ]


def _evidence_shows(tab: Tab, claim: dict, index: int | None = None) -> None:
    """Follow a claim's link; its case on the evidence page must show the same text.

    With ``index``, the link is clicked (the ``index``-th claim of the page, an
    instant navigation); without, the browser loads its URL.
    """
    anchor = urlsplit(claim["href"]).fragment
    if index is None:
        tab.page.goto(claim["href"])
    else:
        tab.page.locator("article a.kp-claim").nth(index).click()
        # (the theme may then rewrite the #fragment as the reader scrolls)
        page_url = claim["href"].split("#")[0]
        tab.page.wait_for_url(lambda url: url.split("#")[0] == page_url)
        tab.page.wait_for_selector(f'[id="{anchor}"]')
    shown = tab.page.evaluate(
        """(anchor) => {
            const head = document.getElementById(anchor);
            if (!head) return null;
            const texts = [];
            for (let el = head.nextElementSibling; el && !/^H[1-3]$/.test(el.tagName);
                 el = el.nextElementSibling) {
                el.querySelectorAll('.kp-value').forEach(v => texts.push(v.textContent));
            }
            return texts;
        }""",
        anchor,
    )
    assert shown is not None, f"{claim['href']}: no element with id {anchor}"
    assert claim["text"] in shown, f"{claim['text']!r} not shown at {claim['href']}: {shown}"
    assert tab.page.locator("article a", has_text="Raw log").count() == 1  # the second click


def test_charts_draw_after_a_hard_load(built, server, browser):
    pages = _pages_with(built.site, 'class="kp-chart"')
    wanted = {"fixture-notebook/", "benchmarks/", "benchmarks/fixture/smoke/"}
    assert wanted | {"evidence/fixture/smoke/"} <= set(pages)
    tab = Tab(browser, server)
    for url in pages:
        tab.page.goto(server + url)
        assert tab.charts_drawn() == [], url
        tab.check_clean()


def test_every_claim_leads_to_the_same_value(built, server, browser):
    tab = Tab(browser, server)
    pages = _pages_with(built.site, 'class="kp-claim"')
    assert {"fixture-claims/", "fixture-notebook/"} <= set(pages)
    followed = 0
    for url in pages:
        tab.page.goto(server + url)
        claims = tab.claims()
        assert claims, url
        # Generated tables hold many claims of one kind; a sample of each stat is enough there.
        if url.startswith(("benchmarks/", "evidence/")):
            claims = list({c["stat"]: c for c in claims}.values())
        for claim in claims:
            _evidence_shows(tab, claim)
            followed += 1
    assert followed >= 10
    tab.check_clean()


# (start page, link to click in its content, page it leads to)
INSTANT = [
    ("fixture-claims/", 'article a[href$="fixture-notebook/"]', "fixture-notebook/"),
    ("benchmarks/", 'article a[href$="/benchmarks/fixture/smoke/"]', "benchmarks/fixture/smoke/"),
]


@pytest.mark.parametrize(("start", "link", "target"), INSTANT, ids=[t for *_, t in INSTANT])
def test_instant_navigation_draws_charts_and_keeps_claims(server, browser, start, link, target):
    tab = Tab(browser, server)
    tab.page.goto(server + start)
    # Material intercepts only links its sitemap lists, and fetches sitemap.xml
    # after the page loads: a click before that is a plain (reloading) navigation.
    tab.page.wait_for_load_state("networkidle")
    tab.page.evaluate("window.kpNoReload = true")
    tab.page.evaluate("document.querySelector('article').dataset.kpOld = '1'")
    tab.page.locator(link).first.click()
    # (the theme may carry a #fragment over from the section the link was in)
    tab.page.wait_for_url(lambda url: url.split("#")[0] == server + target)
    # The theme sets the URL before it swaps the content in: wait for the new article.
    tab.page.wait_for_function(
        "!document.querySelector('article[data-kp-old]')", timeout=DRAW_TIMEOUT_MS
    )
    assert tab.page.evaluate("window.kpNoReload === true"), "the click reloaded the page"
    assert tab.charts_drawn() == [], target
    claims = tab.claims()
    assert claims, target
    _evidence_shows(tab, claims[0], index=0)
    assert tab.page.evaluate("window.kpNoReload === true"), "the claim link reloaded the page"
    tab.check_clean()


def test_offsite_request_is_caught(built, server, browser):
    """The guard itself: a page that asks another host must be noticed."""
    tab = Tab(browser, server)
    tab.page.goto(server)
    tab.page.evaluate("fetch('https://cdn.example.org/x.js').catch(() => {})")
    tab.page.wait_for_timeout(200)
    assert tab.offsite == ["https://cdn.example.org/x.js"]


def test_search_finds_a_page(server, browser):
    """Search runs in the theme's worker, from the site's own files only."""
    tab = Tab(browser, server)
    tab.page.goto(server)
    tab.page.locator("label.md-search__icon, input.md-search__input").first.click()
    tab.page.locator("input.md-search__input").fill("softmax")
    tab.page.wait_for_selector("li.md-search-result__item", timeout=DRAW_TIMEOUT_MS)
    tab.check_clean()
