"""What the mkdocs build does with results: the logic behind ``evidence/hook.py``.

* ``on_config``: find the repository root (the folder of ``mkdocs.yml``), load
  every result (an archived one checked against git at its commit: a clone
  that lacks the commit fails the build with one line saying how to fetch it),
  and expand glob entries of ``nav`` (``course/[0-9][0-9]-*``,
  ``case-studies/*.py``, ``benchmarks/*.md``, ``evidence/**``) over the docs
  and the generated pages, so new lessons, case studies and results appear
  without editing ``mkdocs.yml``.
* ``on_files``: add the generated pages (evidence pages, benchmarks pages, their
  chart JSON), the raw JSON and log of every published result, the case-study
  notebooks from ``case_studies/``, and the notebook styles.
* ``on_page_markdown``: expand ``{{ claim ... }}`` and the ``<!-- kp:... -->``
  markers of the benchmarks and evidence indexes. On a generated page, set
  each raw HTML block (its tables: hundreds of thousands of tags across the
  evidence pages) aside behind a comment, so that Markdown does not parse it.
* ``on_page_content``: put those blocks back, unchanged; show each claim
  inside an attribute (an image's alt text, a title) as its text, listed in
  the element's ``data-kp-claims``; drop the CDN scripts (MathJax, Mermaid)
  that nbconvert puts into every notebook page (the site loads nothing from
  other hosts), and replace the JupyterLab styles that mkdocs-jupyter inlines
  into each of them (about 580 KB a page) by a link to one copy
  (:data:`NOTEBOOK_CSS`).
* ``on_post_page``: rewrite each claim's placeholder href into a relative link
  to its evidence.
* ``on_post_build``: drop the theme's files that no page loads
  (:func:`drop_unloaded_theme_files`), write the list of every claim into the
  evidence index, then run the gate over the built site; a failing gate fails
  the build.
"""

from __future__ import annotations

import fnmatch
import html
import logging
import os
import posixpath
import re
import shutil
from pathlib import Path

from kernel_portfolio.evidence import gate, pages
from kernel_portfolio.evidence.quote import (
    PLACEHOLDER,
    expand_markdown,
    render_attribute_claims,
)

log = logging.getLogger("mkdocs.plugins.kernel_portfolio")

_GLOB = re.compile(r"[*?\[]")
_PAGE_EXT = (".md", ".py", ".ipynb")
_HREF = re.compile(
    r'href="' + re.escape(PLACEHOLDER) + r'(?P<result>[^"#]*)(?:#(?P<anchor>[^"]*))?"'
)
_NB_MATHJAX = re.compile(r"<!-- Load mathjax -->.*?<!-- End of mathjax configuration -->", re.S)
_NB_MERMAID = re.compile(
    r'<script type="module">(?:(?!</script>).)*?mermaid(?:(?!</script>).)*</script>', re.S
)
_CLAIMS_MARKER = '<div class="kp-claims-index"></div>'
#: Where a raw HTML block of a generated page waits while Markdown renders the rest.
_ASIDE = "<!-- kp:aside {} -->"
_ASIDE_RE = re.compile(r"<!-- kp:aside (\d+) -->")
#: Site URL of the evidence index, where the list of every claim goes.
EVIDENCE_INDEX = "evidence/"


def relative_href(page_url: str, result_id: str, anchor: str | None) -> str:
    """Link from the page at ``page_url`` to a case on a result's evidence page."""
    base = page_url if page_url.endswith("/") or not page_url else posixpath.dirname(page_url)
    href = posixpath.relpath(f"evidence/{result_id}", base or ".") + "/"
    return href + (f"#{anchor}" if anchor else "")


def rewrite_claim_links(output: str, page_url: str) -> str:
    """Replace every claim's placeholder href in a page's HTML with a relative link."""
    return _HREF.sub(
        lambda m: f'href="{relative_href(page_url, m["result"], m["anchor"])}"', output
    )


#: Site path of the notebook styles, served once for every notebook page.
NOTEBOOK_CSS = "assets/kp/jupyter.css"
_STYLE = re.compile(r'<style type="text/css">(.*?)</style>', re.S)


def notebook_styles() -> list[str]:
    """The styles mkdocs-jupyter inlines into every notebook page, from the installed package.

    JupyterLab's stylesheet and its light theme: every rule is scoped to
    ``.jupyter-wrapper``, so one copy can serve every notebook page.
    """
    import mkdocs_jupyter

    assets = Path(mkdocs_jupyter.__file__).parent / "templates" / "mkdocs_html" / "assets"
    names = ("index.css", "theme-light.css")
    return [(assets / name).read_text(encoding="utf-8") for name in names]


def share_notebook_styles(content: str, page_url: str, styles: list[str]) -> str:
    """Replace a notebook page's inlined copies of ``styles`` by one link to :data:`NOTEBOOK_CSS`.

    Other ``<style>`` blocks (the code highlighting's, which is not scoped)
    stay where they are.
    """
    shared = {style.strip() for style in styles}
    href = posixpath.relpath(NOTEBOOK_CSS, page_url or ".")
    linked = False

    def swap(m: re.Match) -> str:
        nonlocal linked
        if m[1].strip() not in shared:
            return m[0]
        first, linked = not linked, True
        return f'<link rel="stylesheet" href="{href}">' if first else ""

    return _STYLE.sub(swap, content)


def strip_notebook_cdn(content: str) -> str:
    """Remove nbconvert's MathJax and Mermaid loaders (both fetch from a CDN)."""
    return _NB_MERMAID.sub("", _NB_MATHJAX.sub("", content))


_DOC_LINK = re.compile(r'href="(?P<path>[^":#?]+\.(?:md|py|ipynb))(?P<anchor>#[^"]*)?"')


def rewrite_notebook_links(content: str, page, files) -> str:
    """Point a notebook's links to other pages (``../methodology.md``) at their URLs.

    mkdocs resolves such links in Markdown pages; mkdocs-jupyter leaves them as
    written. A link to a page that does not exist is logged as a warning, which
    fails the strict build.
    """
    here = posixpath.dirname(page.file.src_uri)

    def resolve(m: re.Match) -> str:
        target = files.get_file_from_path(posixpath.normpath(posixpath.join(here, m["path"])))
        if target is None or target.page is None:
            log.warning(
                "Doc file '%s' links to '%s', which is not a page", page.file.src_uri, m["path"]
            )
            return m[0]
        return f'href="{target.url_relative_to(page.file)}{m["anchor"] or ""}"'

    return _DOC_LINK.sub(resolve, content)


_HEADING = re.compile(r'<h[1-6][^>]* id="(?P<id>[^"]+)"[^>]*>(?P<body>.*?)</h[1-6]>', re.S)


def _plain(fragment: str) -> str:
    text = html.unescape(re.sub(r"<[^>]+>", "", fragment)).replace("¶", "")
    return re.sub(r"\s+", " ", text).strip().lower()


def align_notebook_toc(content: str, toc) -> None:
    """Point a notebook's table of contents at the ids its headings really have.

    mkdocs-jupyter computes the TOC from the notebook's Markdown and the
    heading ids from the HTML; they disagree for a heading with inline code
    (the TOC entry of "What `plans.py` says" is "What says", ``#what-says``,
    while the heading is ``id="what-planspy-says"``), which leaves TOC links
    dead. TOC entries and headings are walked in document order; an entry
    takes the id of the next heading whose text contains the entry's
    characters in order (the TOC only ever drops the code).
    """
    headings = [(m["id"], _plain(m["body"]).replace(" ", "")) for m in _HEADING.finditer(content)]
    items, stack = [], list(reversed(list(toc)))
    while stack:
        item = stack.pop()
        items.append(item)
        stack.extend(reversed(item.children))
    at = 0
    for item in items:
        title = _plain(item.title).replace(" ", "")
        for j in range(at, len(headings)):
            hid, text = headings[j]
            remaining = iter(text)
            if hid == item.id or all(c in remaining for c in title):
                item.id, at = hid, j + 1
                break


def expand_nav(nav: list, uris: list[str]) -> list:
    """Replace each glob entry of ``nav`` with the matching pages, in name order.

    A page named explicitly anywhere in ``nav`` is not repeated by a glob.
    """
    explicit = set()

    def collect(items):
        for item in items:
            value = next(iter(item.values())) if isinstance(item, dict) else item
            if isinstance(value, list):
                collect(value)
            elif isinstance(value, str) and not _GLOB.search(value):
                explicit.add(value)

    collect(nav)
    pages_ = sorted(u for u in uris if u.endswith(_PAGE_EXT))

    def expand(items):
        out = []
        for item in items:
            if isinstance(item, dict):
                ((title, value),) = item.items()
                if isinstance(value, list):
                    out.append({title: expand(value)})
                elif isinstance(value, str) and _GLOB.search(value):
                    out.append({title: [u for u in pages_ if fnmatch.fnmatch(u, value)]})
                else:
                    out.append(item)
            elif isinstance(item, str) and _GLOB.search(item):
                out.extend(u for u in pages_ if fnmatch.fnmatch(u, item) and u not in explicit)
            else:
                out.append(item)
        return out

    return expand(nav)


def drop_unloaded_theme_files(site: Path, search_languages: list[str]) -> list[Path]:
    """Delete the theme's files that no page of this site loads.

    Material ships source maps beside its minified bundles (for a debugger,
    about a megabyte), and lunr's support for every search language; its search
    worker loads that support only for a language other than English (and the
    multi-language file for several), so a site searched in English alone
    never loads any of it.

    Args:
        site: The built site.
        search_languages: The search plugin's ``lang``.

    Returns:
        The files deleted.
    """
    assets, lunr = site / "assets", site / "assets" / "javascripts" / "lunr"
    drop = sorted(assets.rglob("*.map"))
    for path in drop:
        path.unlink()
    if list(search_languages) == ["en"] and lunr.is_dir():
        drop += sorted(p for p in lunr.rglob("*") if p.is_file())
        shutil.rmtree(lunr)
    return drop


#: The written pages (folder under the repository root, file patterns): an archived
#: result is published when one of them names it.
WRITTEN_PAGES = (("docs", ("*.md", "*.py", "*.ipynb")), ("case_studies", ("*.py",)))


def named_results(root: Path, result_ids: list[str]) -> set[str]:
    """The ids among ``result_ids`` that some written page names (:data:`WRITTEN_PAGES`).

    An archived result is kept as a record that a page quotes; one that no
    written page names gets no evidence page on the site (the repository keeps
    it under ``results/archive/``), which keeps the site's weight to what a
    reader can reach from a claim.
    """
    texts = [
        path.read_text(encoding="utf-8", errors="replace")
        for folder, patterns in WRITTEN_PAGES
        for pattern in patterns
        for path in sorted((root / folder).rglob(pattern))
    ]
    return {
        rid
        for rid in result_ids
        if any(re.search(re.escape(rid) + r"(?![\w-])", text) for text in texts)
    }


class SiteBuild:
    """State of one mkdocs build (the hook keeps one and resets it per build)."""

    def __init__(self) -> None:
        self.root = Path(".")
        self.results = None
        self.repo_url: str | None = None
        self.generated: list[pages.GeneratedFile] = []
        self.copies: list[tuple[str, Path]] = []
        self.sources: dict[str, str] = {}
        self.markers: dict[str, str] = {}
        self.generated_uris: set[str] = set()
        self.aside: dict[str, list[str]] = {}
        self.notebook_styles: list[str] = []
        self.published: set[str] = set()

    # ---------------------------------------------------------------- config
    def on_config(self, config) -> None:
        from mkdocs.exceptions import PluginError

        from kernel_portfolio.results import CommitMissing

        self.root = Path(config.config_file_path).resolve().parent
        # Notebooks run in kernels started by this process: their quote()
        # must read this tree's results, whatever directory mkdocs runs in.
        os.environ["KP_ROOT"] = str(self.root)
        self.results = gate.ResultSet(self.root)
        self.repo_url = config.repo_url
        try:
            self._generate()
        except CommitMissing as err:  # a shallow clone: one line that says how to fetch
            raise PluginError(str(err)) from None
        docs = Path(config.docs_dir)
        uris = [p.relative_to(docs).as_posix() for p in docs.rglob("*") if p.is_file()]
        uris += [f.src_uri for f in self.generated] + [uri for uri, _ in self.copies]
        if config.nav:
            config.nav = expand_nav(config.nav, uris)

    def _generate(self) -> None:
        results = self.results
        self.generated, self.copies = [], []
        by_gpu: dict[str, list] = {}
        index_entries, invalid, others = [], [], []
        archived = [rid for rid in results.ids() if rid.startswith("archive/")]
        kept = set(results.ids()) - set(archived) | named_results(self.root, archived)
        # An archived result that a kept one was computed from (a fit's runs) is kept too.
        read = {src for rid in kept if results.get(rid) for src in results.get(rid).data["sources"]}
        kept |= {rid for rid in archived if f"results/{rid}.json" in read}
        unpublished = sorted(set(archived) - kept)
        self.published = set(results.ids()) - set(unpublished)
        for result_id in sorted(self.published):
            result = results.get(result_id)
            if result is None:
                invalid.append(result_id)
                continue
            data = result.data
            stale = {
                c["id"]: results.changed(result_id, c["id"])
                for c in data.get("cases", [])
                if results.changed(result_id, c["id"])
            }
            self.generated += pages.evidence_page(result_id, data, stale, self.repo_url)
            raw_json, raw_log = pages.raw_names(result_id, data)
            self.copies.append((raw_json, Path(result.path)))
            log_path = Path(result.path).with_name(data["log"]) if raw_log else None
            if log_path is not None and log_path.is_file():
                # (a log named but missing leaves the page's link broken: strict fails on it)
                self.copies.append((raw_log, log_path))
            index_entries.append((result_id, data, len(stale)))
            if not result_id.startswith("archive/") and pages.on_benchmarks_page(data):
                by_gpu.setdefault(result_id.split("/")[0], []).append(
                    (result_id, data, result.frame())
                )
            else:
                others.append(result_id)
        for gpu, entries in sorted(by_gpu.items()):
            self.generated += pages.benchmarks_pages(gpu, entries)
        self.generated_uris = {f.src_uri for f in self.generated}
        allow, _ = gate.load_allowlist(self.root / gate.ALLOWLIST)
        self.markers = {
            "<!-- kp:benchmarks -->": pages.benchmarks_index(
                {g: [e[:2] for e in entries] for g, entries in by_gpu.items()}, invalid, others
            ),
            "<!-- kp:results -->": pages.results_index(index_entries, unpublished),
            "<!-- kp:allowlist -->": pages.allowlist_index(allow),
        }
        for notebook in sorted((self.root / "case_studies").glob("*.py")):
            self.copies.append((f"case-studies/{notebook.name}", notebook))
        # Other committed records (with their logs) are copied as raw evidence,
        # e.g. results/triton-releases/matrix.json -> evidence/triton-releases/matrix.json.
        base = self.root / "results"
        for record in results.other_records():
            for path in (record, record.with_suffix(".log")):
                if path.is_file():
                    self.copies.append((f"evidence/{path.relative_to(base).as_posix()}", path))
        self.notebook_styles = notebook_styles()
        self.generated.append(pages.GeneratedFile(NOTEBOOK_CSS, "\n".join(self.notebook_styles)))

    # ----------------------------------------------------------------- files
    def on_files(self, files, config):
        from mkdocs.structure.files import File

        for item in self.generated:
            files.append(File.generated(config, item.src_uri, content=item.content))
        for uri, path in self.copies:
            files.append(File.generated(config, uri, abs_src_path=str(path)))
        return files

    def fix_notebook_files(self, files):
        """Restore the source path of generated files that mkdocs-jupyter wrapped.

        Its wrapper computes ``abs_src_path`` from ``src_dir``, which a
        generated file (a case study from ``case_studies/``) does not have.
        """
        for file in files:
            inner = getattr(file, "file", None)
            if inner is not None and inner.abs_src_path and not file.abs_src_path:
                file.abs_src_path = inner.abs_src_path
        return files

    # ----------------------------------------------------------------- pages
    def on_page_markdown(self, markdown: str, page) -> str:
        src = page.file.src_uri
        if page.file.abs_src_path and Path(page.file.abs_src_path).is_relative_to(self.root):
            src = Path(page.file.abs_src_path).relative_to(self.root).as_posix()
        self.sources[page.url] = src
        try:
            markdown = expand_markdown(markdown, self.root)
        except ValueError as err:
            from mkdocs.exceptions import PluginError

            raise PluginError(f"{src}: a claim cannot be resolved:\n{err}") from err
        for marker, text in self.markers.items():
            markdown = markdown.replace(marker, text)
        if page.file.src_uri in self.generated_uris:
            markdown = self._set_aside(markdown, page.url)
        return markdown

    def _set_aside(self, markdown: str, url: str) -> str:
        """Replace each block of ``markdown`` that opens with a tag by a numbered comment.

        Generated pages write every raw HTML block as a paragraph of its own
        (no blank line inside, no Markdown inside), so a block opening with
        ``<`` is raw HTML whole; Markdown would pass it through unchanged, after
        parsing every tag.
        """
        blocks = markdown.split("\n\n")
        kept = self.aside[url] = []
        for i, block in enumerate(blocks):
            if block.startswith("<"):
                blocks[i] = _ASIDE.format(len(kept))
                kept.append(block)
        return "\n\n".join(blocks)

    def on_page_content(self, content: str, page, files) -> str:
        kept = self.aside.pop(page.url, None)
        if kept is not None:
            return _ASIDE_RE.sub(lambda m: kept[int(m[1])], content)
        content = render_attribute_claims(content)
        if not str(page.file.abs_src_path or "").endswith((".py", ".ipynb")):
            return content
        align_notebook_toc(content, page.toc)
        content = share_notebook_styles(content, page.url, self.notebook_styles)
        return rewrite_notebook_links(strip_notebook_cdn(content), page, files)

    def on_post_page(self, output: str, page) -> str:
        self.sources.setdefault(page.url, page.file.src_uri)
        return rewrite_claim_links(output, page.url)

    # ----------------------------------------------------------------- build
    def on_post_build(self, config) -> None:
        from mkdocs.exceptions import PluginError

        site = Path(config.site_dir)
        search = next((p for n, p in config.plugins.items() if n.endswith("search")), None)
        drop_unloaded_theme_files(site, (search.config.lang or ["en"]) if search else [])
        scans = gate.scan_site(site)
        index = site / EVIDENCE_INDEX / "index.html"
        if index.is_file():
            listed = [
                (scan.url, attrs, text)
                for scan in scans
                if scan.url != EVIDENCE_INDEX
                for attrs, text in scan.claims
            ]
            table = pages.claims_index(listed, lambda h: rewrite_claim_links(h, EVIDENCE_INDEX))
            (index.parent / "claims.json").write_text(pages.claims_json(listed), encoding="utf-8")
            source = index.read_text(encoding="utf-8")
            index.write_text(
                source.replace(_CLAIMS_MARKER, f'<div class="kp-claims-index">{table}</div>'),
                encoding="utf-8",
            )
            scans = [
                gate.read_charts(site, gate.scan_page(s.url, index.read_text(encoding="utf-8")))
                if s.url == EVIDENCE_INDEX
                else s
                for s in scans
            ]
        unbacked = sorted(
            f"{scan.url or 'home'}: {attrs.get('data-result')}"
            for scan in scans
            for attrs, _ in scan.claims
            if attrs.get("data-result") not in self.published
        )
        if unbacked:
            raise PluginError(
                "claims quote results that have no evidence page on this site (an archived "
                "result is published only when a written page names its id literally):\n  "
                + "\n  ".join(dict.fromkeys(unbacked))
            )
        report = gate.judge(scans, self.root, sources=self.sources)
        if not report.ok:
            raise PluginError(report.summary())
        log.info(
            "evidence gate: %d pages, %d claims, no unbacked figure",
            report.pages,
            len(report.claims),
        )
