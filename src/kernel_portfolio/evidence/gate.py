"""The evidence gate: no measured-looking figure on the site without a saved result.

:func:`check_site` reads every built HTML page (Markdown pages, executed
notebooks, API pages, generated pages): its text, the attributes a browser
shows (:data:`SHOWN_ATTRIBUTES`: ``alt``, ``title``, ``aria-label``,
``placeholder``) and the text each of its charts draws (from the figure JSON
inline in the page or in the file beside it: titles, annotations, trace names,
the words of hover and text templates; see :func:`scan_figure`). It fails on:

* a **measured-looking figure outside a claim**: a number with a time unit
  (ns, us, µs, ms, s), a bandwidth or throughput unit (GB/s, TB/s, TFLOP/s,
  FLOP/s), a speed-up (``1.8x``, ``1.8×``, "1.8 times faster", "a speed-up of
  1.8"), a speed-up in words ("twice as fast", "three times slower", "halves
  the time", "a third of the time", "a threefold speed-up"; only time, speed,
  throughput, bandwidth, latency and duration count, so "twice the bytes" is
  arithmetic), a percentage next to a bandwidth or baseline word ("91% of copy
  bandwidth", "80% of cuBLAS"), or any number in a table column whose header
  carries such a unit or names a measured cost ("host cost", "peak memory").
  Code blocks are scanned too: a hand-typed timing in a
  code block is still a hand-typed timing. Navigation menus are skipped
  because they repeat titles that are scanned on their own pages. A chart's
  data (coordinates, per-point text, custom data, tick values) is data, not
  prose, and is not read;
* a **claim** (``a.kp-claim``) that names a missing result, case or
  implementation, whose shown text or ``data-value`` differs from the saved
  value (tampered), whose link does not lead to its evidence, or that quotes a
  **stale** case (a source it depends on changed since it was measured). An
  archived result (``archive/...``) is quoted as a record of the past: it is
  judged against the files at its recorded commit in git, not against today's
  files (a clone whose history lacks that commit fails with how to fetch it).
  Where no link can go (an attribute, a chart's text) a claim shows its text,
  and the element (``data-kp-claims``) or the figure (``layout.meta["kp-claims"]``)
  lists it (see :mod:`kernel_portfolio.evidence.quote`): it is judged the
  same way, but for the link, and one that the element or figure does not
  show, or a list that does not parse, fails too. Only the listing element or
  figure may show it: the same figure typed elsewhere is hand-typed;
* an **evidence value** (``span.kp-value``) anywhere but the generated
  evidence pages of its own result (``evidence/<id>/`` and its per-operator
  detail pages), or whose text differs from the value the JSON pointer names
  in that result. The pointer is the nearest enclosing ``data-kp-base`` (if
  any) followed by the value's ``data-field``; ``data-result`` too may sit on
  an enclosing element (a table). A ``kp-text`` value shows saved text (the
  command, the timing notes, a skip reason) and must equal that string. This
  is the only way a page shows a raw number without a claim, and only
  evidence pages can;
* a **target** (``span.kp-target``: a bar such as "≥ 90.0% of copy", which
  is a goal, not a measurement) whose text is not one of the bars of
  :mod:`kernel_portfolio.bench.targets` (:func:`~kernel_portfolio.bench.targets.target_texts`),
  or a **shortfall** (``a.kp-shortfall``: how far a quoted value falls short of
  a bar, "2.7 points", or how far a cost exceeds one, "43.2 µs") that does not
  name a bar and its baseline, or whose text differs from the shortfall
  recomputed from the saved values it names like a claim (checked, linked and
  judged stale like one);
* a chart whose text cannot be read (its figure JSON does not parse, or its
  file is missing);
* a results file that does not validate (edited values or hashes);
* a resource loaded from another host (script, stylesheet, image, frame,
  ``import()`` or ``url()``): the site must work offline;
* an allow-list entry without a reason (the entry then allows nothing).

Numbers that look measured but are not (a datasheet figure, a byte count)
belong in the allow-list (``docs/evidence/allowlist.yml``), each with a reason;
the evidence index publishes it.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import fnmatch
import functools
import html
import json
import math
import multiprocessing
import os
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from kernel_portfolio.bench import targets
from kernel_portfolio.evidence import htmltree
from kernel_portfolio.evidence.quote import (
    CLAIMS_ATTRIBUTE,
    FIGURE_CLAIMS,
    Claim,
    case_anchor,
    format_value,
    load_result,
    make_claim,
    quotables,
)

#: Path of the allow-list under the repository root.
ALLOWLIST = Path("docs/evidence/allowlist.yml")

_MASK = "\ufffc"  # stands in for a claim's text: no pattern can match across it
_NUM = r"(?<![\w.,])(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][+-]?\d+)?"
_SP = r"[\s-]?"
_TIME_UNITS = r"ns|us|µs|μs|ms|s|secs?|seconds?|milliseconds?|microseconds?|nanoseconds?"
# A speed-up or slow-down in words: a factor in words before a comparison, a
# verb that halves or doubles a measured quantity (or that quantity doing so), a
# fraction of one, an n-fold speed-up, orders of magnitude faster, a speed-up
# or a factor "of about" a number. Only time, speed, throughput, bandwidth,
# latency, run time and duration count: "twice the bytes" or "the row is read
# twice" is arithmetic, not a measurement.
_NUMBER_WORD = (
    r"(?:(?:one|two)\s+and\s+a\s+half|two|three|four|five|six|seven|eight|nine|ten|eleven"
    r"|twelve|fifteen|twenty|thirty|forty|fifty|(?:a\s+)?hundred|(?:a\s+)?thousand)"
)
_MEASURED = r"(?:speed|throughput|bandwidth|time|latency|run\s?time|duration)s?"
_OWNER = r"(?:the|its|their|our)\s+"
_QUALIFIER = r"(?:(?:about|around|roughly|nearly|almost|over|under|at\s+least|up\s+to)\s+)?"
_FACTOR = rf"(?:twice|thrice|{_NUMBER_WORD}\s+times|{_NUM}\s+times)"
_WORDS = re.compile(
    rf"\b{_FACTOR}\s+(?:as\s+(?:fast|quick|slow)|faster|slower|quicker|{_OWNER}{_MEASURED})\b"
    rf"|\b(?:halv|doubl|tripl|quadrupl)(?:es|ed|ing|e)\s+(?:{_OWNER})?{_MEASURED}\b"
    rf"|\b{_MEASURED}\s+(?:halv|doubl|tripl|quadrupl)(?:es|ed)\b"
    r"|\b(?:half|(?:a|one)\s+(?:third|quarter|fifth|tenth)|two\s+thirds|three\s+quarters)"
    rf"\s+(?:of\s+)?{_OWNER}{_MEASURED}\b"
    rf"|\b(?:(?:two|three|four|five|six|seven|eight|nine|ten|hundred|thousand)-?fold|{_NUM}-fold)"
    r"\s+(?:speed-?ups?|slow-?downs?|faster|slower|quicker)\b"
    r"|\borders?\s+of\s+magnitude\s+(?:faster|slower|quicker)\b"
    rf"|\b(?:speed-?ups?|slow-?downs?)\s+(?:of|is|was)\s+{_QUALIFIER}(?:{_NUMBER_WORD}|twice|{_NUM})\b"
    rf"|\b(?:faster|slower|speeds?\s+up|sped\s+up|slows?\s+down)\s+by\s+(?:a\s+factor\s+of\s+)?"
    rf"{_QUALIFIER}(?:{_NUMBER_WORD}|{_NUM})(?![\w%.])"
    rf"|\ba\s+factor\s+of\s+{_QUALIFIER}(?:{_NUMBER_WORD}|{_NUM})\s+(?:faster|slower|quicker)\b",
    re.I,
)
#: Every match of ``_WORDS`` holds one of these (lower-cased) and is at least
#: 10 characters long; a block without any skips that pattern, the slowest by
#: far, and most blocks (a table cell, a line of code) hold none.
_WORD_HINTS = ("twice", "thrice", "times", "halv", "doubl", "tripl", "quadrupl", "half", "third",
               "quarter", "fifth", "tenth", "fold", "magnitude", "speed", "sped", "slow", "factor",
               "faster")  # fmt: skip
#: (kind, pattern) of each measured-looking figure; a figure is reported under
#: the first that finds it.
_PATTERNS = (
    ("time", re.compile(rf"(?P<num>{_NUM}){_SP}(?P<unit>{_TIME_UNITS})(?![\w/])")),
    (
        "bandwidth",
        re.compile(rf"(?P<num>{_NUM}){_SP}(?P<unit>[kKMGTP]i?B/s(?:ec)?|[kKMGTP]?i?Bps)(?!\w)"),
    ),
    (
        "throughput",
        re.compile(rf"(?P<num>{_NUM}){_SP}(?P<unit>(?i:[kmgtp]?flop/?s|[kmgtp]?flops))(?!\w)"),
    ),
    (
        "speedup",
        re.compile(
            rf"(?P<num>{_NUM})(?:[x×](?![\w])(?!\s*\d)|\s?×(?!\s*[\w(])"
            r"|\s?[x×]\s+(?=(?:faster|slower|quicker|better|worse|speed|the\b))"
            r"|\s+times\s+(?=(?:faster|slower|quicker|better|worse|as\s+fast|the\s+speed)))"
            rf"|(?i:speed-?ups?)\s*(?:of|is|was|=|:)?\s*(?P<num2>{_NUM})"
        ),
    ),
    ("speedup", _WORDS),
    ("percent", re.compile(rf"(?P<num>{_NUM})\s?(?:%|percent\b)")),
)
_PERCENT_CONTEXT = re.compile(
    r"copy|bandwidth|peak|roofline|hbm|dram|cublas|torch|liger|compile|baseline"
    r"|speed[- ]of[- ]light|throughput|faster|slower|speed-?up|gb/s|tflop",
    re.I,
)
_UNIT_HEADER = re.compile(
    r"µs|μs|\b(?:us|ms|ns|s)\b|seconds|\btime\b|B/s|FLOP|%|speed-?up|×|\btimes\b"
    r"|\bhost cost\b|\bpeak memory\b",
    re.I,
)
INLINE = frozenset((
    "a", "abbr", "b", "bdi", "bdo", "cite", "code", "data", "dfn", "em", "i", "kbd", "mark",
    "q", "s", "samp", "small", "span", "strong", "sub", "sup", "time", "u", "var", "wbr",
    "del", "ins", "label", "font",
))  # fmt: skip
_SKIP = frozenset(["script", "style", "template", "head", "noscript", "svg"])
_EXTERNAL = re.compile(r"^(?:[a-z][a-z0-9+.-]*:)?//", re.I)
_INLINE_FETCH = re.compile(r"""(?:import\s*\(|url\(|@import\s|\.src\s*=)\s*["']?(?:https?:)?//""")
_PASSIVE_LINK_RELS = {"canonical", "alternate", "prev", "next", "author", "license", "help"}


@dataclass(frozen=True)
class Failure:
    """One reason the gate refuses the site."""

    page: str
    message: str

    def __str__(self) -> str:
        return f"{self.page}: {self.message}"


@dataclass(frozen=True)
class ClaimRecord:
    """A claim found on a page (the evidence index lists these)."""

    page: str
    text: str
    result_id: str
    case_id: str
    stat: str
    impl: str
    baseline: str | None
    status: str  # "current", "archived", "stale" or "invalid"


@dataclass(frozen=True)
class AllowEntry:
    """A number that looks measured but is not, and why it may stand."""

    text: str
    reason: str
    pages: tuple[str, ...] = ()

    def allows(self, figure: str, page: str) -> bool:
        """Whether this entry allows ``figure`` on the page with URL ``page``."""
        if not self.reason.strip() or _norm(figure) != _norm(self.text):
            return False
        return not self.pages or any(fnmatch.fnmatch(page, p) for p in self.pages)


@dataclass
class Report:
    """What the gate found: failures (empty when the site may publish) and every claim."""

    failures: list[Failure] = field(default_factory=list)
    claims: list[ClaimRecord] = field(default_factory=list)
    pages: int = 0

    @property
    def ok(self) -> bool:
        """Whether the site may be published."""
        return not self.failures

    def summary(self) -> str:
        """A human-readable report, one failure per paragraph."""
        head = (
            f"evidence gate: {len(self.failures)} problem(s) in {self.pages} page(s), "
            f"{len(self.claims)} claim(s) checked"
        )
        return "\n".join([head, *(f"  - {f}" for f in self.failures)])


def _show(text: str) -> str:
    """Quote page text for a message, spaces as spaces."""
    return "'" + re.sub(r"[\u00a0\u2009\u202f]", " ", text) + "'"


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text.replace("μ", "µ")).strip()


# ---------------------------------------------------------------- allow-list


def load_allowlist(path: Path) -> tuple[list[AllowEntry], list[Failure]]:
    """Read the allow-list; entries without a reason come back as failures.

    The file is a YAML list of mappings with ``text`` (the figure exactly as
    shown), ``reason`` and optionally ``pages`` (URL globs, e.g.
    ``methodology/``). A missing file is an empty allow-list.

    Raises:
        ValueError: the file is not a list of mappings with ``text``.
    """
    path = Path(path)
    if not path.exists():
        return [], []
    raw = yaml.safe_load(path.read_text(encoding="utf-8")) or []
    if not isinstance(raw, list):
        raise ValueError(f"{path}: the allow-list must be a YAML list of entries")
    entries, failures = [], []
    for i, item in enumerate(raw, 1):
        if not isinstance(item, dict) or not isinstance(item.get("text"), str):
            raise ValueError(f"{path}: entry {i} needs a 'text' string")
        reason = item.get("reason")
        pages = item.get("pages") or []
        if isinstance(pages, str):
            pages = [pages]
        entry = AllowEntry(item["text"], reason if isinstance(reason, str) else "", tuple(pages))
        if not entry.reason.strip():
            failures.append(
                Failure(str(path), f"entry {i} ({entry.text!r}) has no reason; it allows nothing")
            )
        entries.append(entry)
    return entries, failures


# -------------------------------------------------------------- page reading


@dataclass(frozen=True)
class Figure:
    """A measured-looking figure found outside any claim."""

    kind: str
    text: str
    context: str


@dataclass
class PageScan:
    """What one page shows: figures outside claims, claims, targets, evidence values, resources.

    ``targets`` holds the target bars and the shortfalls (told apart by class).
    """

    url: str
    figures: list[Figure] = field(default_factory=list)
    claims: list[tuple[dict[str, str], str]] = field(default_factory=list)
    targets: list[tuple[dict[str, str], str]] = field(default_factory=list)
    values: list[tuple[dict[str, str], str]] = field(default_factory=list)
    external: list[str] = field(default_factory=list)
    #: What the gate could not read or that is wrong in itself (a list of claims
    #: that does not parse, a chart file that is missing).
    errors: list[str] = field(default_factory=list)
    #: Chart figure files the page draws, ``(site path, "chart 'name'")``, not yet read
    #: (:func:`read_charts` reads them).
    charts: list[tuple[str, str]] = field(default_factory=list)


def find_figures(text: str) -> list[Figure]:
    """Measured-looking figures in one block of text (claims already masked).

    Args:
        text: Text of one block element, whitespace as rendered.

    Returns:
        Each figure with its kind and some surrounding context.
    """
    text = re.sub(r"\s+", " ", text)
    lowered = text.lower() if len(text) >= 10 else ""
    found: list[tuple[int, int, str]] = []
    for kind, pattern in _PATTERNS:
        if pattern is _WORDS and not any(hint in lowered for hint in _WORD_HINTS):
            continue
        for m in pattern.finditer(text):
            if kind == "percent":
                window = text[max(0, m.start() - 40) : m.end() + 60]
                if not _PERCENT_CONTEXT.search(window):
                    continue
            if any(s < m.end() and m.start() < e for s, e, _ in found):
                continue
            found.append((m.start(), m.end(), kind))
    return [
        Figure(
            kind,
            text[s:e].strip(),
            text[max(0, s - 50) : e + 50].replace(_MASK, "[claim]").strip(),
        )
        for s, e, kind in sorted(found)
    ]


def _is_claim(node: htmltree.Node) -> bool:
    return node.tag == "a" and "kp-claim" in node.classes


def _is_value(node: htmltree.Node) -> bool:
    return "kp-value" in node.classes


def _is_target(node: htmltree.Node) -> bool:
    return not {"kp-target", "kp-shortfall"}.isdisjoint(node.classes)


#: Attributes an evidence value takes from its nearest enclosing element that has them.
_INHERITED = ("data-result", "data-kp-base")


def scan_page(url: str, source: str) -> PageScan:
    """Read one built page.

    Args:
        url: The page's URL relative to the site root (``course/01-add/``).
        source: Its HTML.
    """
    root = htmltree.parse(source)
    scan = PageScan(url)
    _scan_resources(root, scan)
    body = next(root.iter("body"), root)
    buffer: list[str] = []

    def flush() -> None:
        if buffer:
            scan.figures.extend(find_figures("".join(buffer)))
            buffer.clear()

    def walk(node: htmltree.Node | str, context: dict[str, str]) -> None:
        if isinstance(node, str):
            buffer.append(node)
            return
        if node.tag in _SKIP or node.tag == "nav":
            return
        if not _READ_ATTRIBUTES.isdisjoint(node.attrs):
            _scan_attributes(node, scan)
        if "kp-chart" in node.attrs.get("class", "") and "kp-chart" in node.classes:
            _scan_chart(node, scan)
        if _is_claim(node):  # a link (LISTED_IN marks only the claims a chart or element lists)
            attrs = {k: v for k, v in node.attrs.items() if k != LISTED_IN}
            scan.claims.append((attrs, node.text()))
            buffer.append(_MASK)
            return
        if _is_target(node):
            scan.targets.append((node.attrs, node.text()))
            buffer.append(_MASK)
            return
        inherited = {k: node.attrs[k] for k in _INHERITED if k in node.attrs}
        if inherited:
            context = {**context, **inherited}
        if _is_value(node):
            attrs = {**context, **node.attrs}
            attrs["data-field"] = context.get("data-kp-base", "") + node.attrs.get("data-field", "")
            scan.values.append((attrs, node.text()))
            buffer.append(_MASK)
            return
        block = node.tag not in INLINE
        if block:
            flush()
        if node.tag == "table":
            _scan_table(node, scan)
        for child in node.children:
            walk(child, context)
        if block:
            flush()

    walk(body, {})
    flush()
    return scan


# ------------------------------------------- text shown outside the page's text

#: Attributes whose text a browser shows: an image's alt text (when it does not
#: load, and to a screen reader), a tooltip, a label read aloud, an input's hint.
SHOWN_ATTRIBUTES = ("alt", "title", "aria-label", "placeholder")
_READ_ATTRIBUTES = frozenset((*SHOWN_ATTRIBUTES, CLAIMS_ATTRIBUTE))
#: Key of a scanned claim's attributes naming the chart or element that lists it
#: (absent for a link, :func:`scan_page` drops it from one).
LISTED_IN = "data-kp-in"
#: Keys of a plotly figure whose string a chart draws: titles (of the figure, an
#: axis, a colour bar, a legend), annotation, shape-label and trace text set for
#: all points, trace names, menu and slider labels, the slider's prefix and suffix.
_FIGURE_TEXT = frozenset(("title", "text", "name", "label", "prefix", "suffix", "hovertext"))
#: Keys of a plotly figure holding templates: literal text around ``%{...}``
#: placeholders (a string, or one per point).
_FIGURE_TEMPLATES = frozenset(("hovertemplate", "texttemplate"))
_PLACEHOLDER = re.compile(r"%\{[^{}]*\}")
_BREAK = re.compile(r"<br\s*/?>", re.I)
_PSEUDO_TAG = re.compile(r"</?[A-Za-z][^<>]*>")


def _listed_claims(listed: object, where: str, scan: PageScan) -> list[Claim]:
    """The claims a list of records names (an attribute's JSON or a figure's meta)."""
    if isinstance(listed, str):
        try:
            listed = json.loads(listed)
        except ValueError:
            listed = None
    if not isinstance(listed, list):
        scan.errors.append(f"{where}: its list of claims is not a JSON list of claim records")
        return []
    claims = []
    for record in listed:
        try:
            claims.append(Claim.from_record(record))
        except ValueError as err:
            scan.errors.append(f"{where}: {err}")
    return claims


def _mask_claims(text: str, claims: list[Claim]) -> tuple[str, set[int]]:
    """``text`` with each listed claim's text masked where it stands whole; which were found."""
    found = set()
    for i, claim in enumerate(claims):
        if not claim.text:
            continue
        shown = r"\s+".join(map(re.escape, claim.text.split()))
        text, n = re.subn(rf"(?<![\d.,]){shown}(?!\d)", _MASK, text)
        if n:
            found.add(i)
    return text, found


def _add_listed(claims: list[Claim], found: set[int], where: str, scan: PageScan) -> None:
    """Record the claims a chart or an element lists; one it does not show is an error."""
    for i, claim in enumerate(claims):
        scan.claims.append(({**claim.data_attrs(), LISTED_IN: where}, claim.text))
        if i not in found:
            scan.errors.append(
                f"{where} lists the claim {_show(claim.text)} ({claim.result_id} "
                f"{claim.case_id} {claim.stat}) but does not show it"
            )


def _scan_attributes(node: htmltree.Node, scan: PageScan) -> None:
    """Figures in the attributes a browser shows; claims there are listed in data-kp-claims."""
    shown = [(name, node.attrs[name]) for name in SHOWN_ATTRIBUTES if node.attrs.get(name)]
    listed = node.attrs.get(CLAIMS_ATTRIBUTE)
    where = f"<{node.tag}>"
    claims = (
        [] if listed is None else _listed_claims(listed, f"{CLAIMS_ATTRIBUTE} of {where}", scan)
    )
    found: set[int] = set()
    for name, value in shown:
        masked, hits = _mask_claims(value, claims)
        found |= hits
        scan.figures.extend(
            Figure(f.kind, f.text, f"{name} of {where}: {f.context}") for f in find_figures(masked)
        )
    _add_listed(claims, found, f"an attribute of {where}", scan)


def _scan_chart(node: htmltree.Node, scan: PageScan) -> None:
    """A chart's figure: read now when inline, set aside for :func:`read_charts` when a file."""
    where = f"chart {node.attrs.get('data-name', '')!r}"
    inline = [c for c in node.children if isinstance(c, htmltree.Node) and c.tag == "template"]
    if inline:
        scan_figure(inline[0].text(), where, scan)
        return
    src = node.attrs.get("data-src", "")
    if not src or _EXTERNAL.match(src) or src.startswith("/"):
        scan.errors.append(f"{where} draws {src!r}, not a figure file of this site")
        return
    base = scan.url if scan.url.endswith("/") else posixpath.dirname(scan.url)
    scan.charts.append((posixpath.normpath(posixpath.join(base, src)), where))


def _drawn_text(node: object, path: str = ""):
    """``(key path, text)`` of each string a plotly figure draws as text.

    Lists are followed only into their mappings (traces, annotations, buttons):
    a list of values is data (coordinates, per-point text and hover text,
    custom data, tick values and labels). Strings of ``meta`` count, as text
    templates show them; the claims listed there do not.
    """
    if isinstance(node, list):
        for i, item in enumerate(node):
            if isinstance(item, dict):
                yield from _drawn_text(item, f"{path}[{i}]")
        return
    if not isinstance(node, dict):
        return
    for key, value in node.items():
        at = f"{path}.{key}" if path else key
        if key == "meta":
            yield from _strings(value, at)
        elif key in _FIGURE_TEMPLATES:
            for text in value if isinstance(value, list) else [value]:
                if isinstance(text, str):
                    yield at, text
        elif key in _FIGURE_TEXT and isinstance(value, str):
            yield at, value
        elif isinstance(value, (dict, list)):
            yield from _drawn_text(value, at)


def _strings(node: object, path: str):
    """``(key path, string)`` of every string in ``node``, but the claims a figure lists."""
    if isinstance(node, str):
        yield path, node
    elif isinstance(node, list):
        for i, item in enumerate(node):
            yield from _strings(item, f"{path}[{i}]")
    elif isinstance(node, dict):
        for key, value in node.items():
            if key != FIGURE_CLAIMS:
                yield from _strings(value, f"{path}.{key}")


def _plotly_text(text: str) -> str:
    """What plotly draws of a string: placeholders masked (data), tags dropped, entities read."""
    return html.unescape(_PSEUDO_TAG.sub("", _BREAK.sub(" ", _PLACEHOLDER.sub(_MASK, text))))


def scan_figure(source: str, where: str, scan: PageScan) -> None:
    """Read the text a chart draws from its plotly figure JSON into ``scan``.

    The figure lists the claims its text shows in ``layout.meta["kp-claims"]``
    (:func:`kernel_portfolio.charts.figure_json` writes them); those are checked
    like any claim, and any other measured-looking figure in its text is a
    hand-typed one.

    Args:
        source: The figure JSON.
        where: How messages name the chart (``chart 'softmax'``).
        scan: The scan of the page that draws it.
    """
    try:
        figure = json.loads(source)
    except ValueError as err:
        scan.errors.append(f"{where}: its figure JSON does not parse ({err}); its text is unread")
        return
    if not isinstance(figure, dict):
        scan.errors.append(f"{where}: its figure JSON is not an object; its text is unread")
        return
    layout = figure.get("layout")
    meta = layout.get("meta") if isinstance(layout, dict) else None
    claims = []
    if isinstance(meta, dict) and FIGURE_CLAIMS in meta:
        claims = _listed_claims(meta[FIGURE_CLAIMS], f"{where} layout.meta", scan)
    found: set[int] = set()
    for path, text in _drawn_text(figure):
        masked, hits = _mask_claims(_plotly_text(text), claims)
        found |= hits
        scan.figures.extend(
            Figure(f.kind, f.text, f"{where} {path}: {f.context}") for f in find_figures(masked)
        )
    if len(found) < len(claims):  # shown in the data (a bar's text), which is not read as prose
        for _, text in _strings(figure.get("data"), "data"):
            found |= _mask_claims(text, claims)[1]
    _add_listed(claims, found, where, scan)


def read_charts(site: Path, scan: PageScan) -> PageScan:
    """The page's scan with the text of the chart files it draws (read from ``site``)."""
    if not scan.charts:
        return scan
    charts = PageScan(scan.url)
    for src, where in scan.charts:
        try:
            source = (Path(site) / src).read_text(encoding="utf-8")
        except OSError as err:
            charts.errors.append(f"{where}: its figure file {src} cannot be read ({err.strerror})")
            continue
        read = _figure_scan(source, f"{where} ({src})")
        charts.figures += read.figures
        charts.claims += read.claims
        charts.errors += read.errors
    return dataclasses.replace(
        scan,
        figures=scan.figures + charts.figures,
        claims=scan.claims + charts.claims,
        errors=scan.errors + charts.errors,
        charts=[],
    )


@functools.lru_cache(maxsize=256)
def _figure_scan(source: str, where: str) -> PageScan:
    """A chart file's scan (a function of the two; cached like the pages' scans)."""
    scan = PageScan("")
    scan_figure(source, where, scan)
    return scan


def _masked_text(node: htmltree.Node | str) -> str:
    if isinstance(node, str):
        return node
    if node.tag in _SKIP:
        return ""
    if _is_claim(node) or _is_value(node) or _is_target(node):
        return _MASK
    return "".join(_masked_text(c) for c in node.children)


def _scan_table(table: htmltree.Node, scan: PageScan) -> None:
    """Numbers in a column whose header names a measured unit are figures too."""
    rows = list(table.iter("tr"))
    header: list[str] = []
    for tr in rows:
        cells = [c for c in tr.children if isinstance(c, htmltree.Node) and c.tag in ("td", "th")]
        if not header:
            if cells and all(c.tag == "th" for c in cells):
                for c in cells:
                    header += [_norm(_masked_text(c))] * int(c.attrs.get("colspan", "1") or 1)
            continue
        col = 0
        for c in cells:
            span = int(c.attrs.get("colspan", "1") or 1)
            title = header[col] if col < len(header) else ""
            col += span
            if not _UNIT_HEADER.search(title):
                continue
            text = _norm(_masked_text(c))
            if re.search(r"\d", text.replace(_MASK, "")) and not find_figures(text):
                scan.figures.append(Figure("table", text, f"column '{title}': {text}"))


def _scan_resources(root: htmltree.Node, scan: PageScan) -> None:
    attrs_by_tag = {
        "script": ("src",),
        "img": ("src", "srcset"),
        "iframe": ("src",),
        "source": ("src", "srcset"),
        "video": ("src", "poster"),
        "audio": ("src",),
        "embed": ("src",),
        "object": ("data",),
        "input": ("src",),
        "link": ("href",),
    }
    for node in root.iter():
        names = attrs_by_tag.get(node.tag, ())
        if node.tag == "link":
            rels = set(node.attrs.get("rel", "").lower().split())
            if rels and rels <= _PASSIVE_LINK_RELS:
                names = ()
        for name in names:
            for value in node.attrs.get(name, "").split(","):
                value = value.strip().split(" ")[0]
                if value and _EXTERNAL.match(value):
                    scan.external.append(f"<{node.tag} {name}={value}>")
        if node.tag in ("script", "style"):
            text = node.text()
            for m in _INLINE_FETCH.finditer(text):
                scan.external.append(f"inline <{node.tag}>: {text[m.start() : m.end() + 60]!r}")
        if "style" in node.attrs and _INLINE_FETCH.search(node.attrs["style"]):
            scan.external.append(f"style attribute of <{node.tag}>")


def page_url(site: Path, path: Path) -> str:
    """Site-relative URL of a built HTML file (``a/b/index.html`` -> ``a/b/``)."""
    rel = path.relative_to(site).as_posix()
    return rel[: -len("index.html")] if rel.endswith("index.html") else rel


def scan_site(site: Path) -> list[PageScan]:
    """Scan every ``*.html`` file of a built site, in path order.

    Pages are parsed in parallel, one forked process per CPU where the platform
    forks (the parse is pure Python and the evidence pages are large). A page
    whose URL and HTML were scanned before in this process is not parsed again
    (the scan is a function of the two; :func:`judge` only reads it), which
    keeps repeated checks of one large site, as in the tests, cheap. The chart
    files each page draws are read into its scan (:func:`read_charts`).
    """
    site = Path(site)
    pages = [
        (page_url(site, p), p.read_text(encoding="utf-8")) for p in sorted(site.rglob("*.html"))
    ]
    todo = list(dict.fromkeys(page for page in pages if page not in _SCANS))
    workers = min(os.cpu_count() or 1, len(todo))
    if workers > 1 and "fork" in multiprocessing.get_all_start_methods():
        fork = multiprocessing.get_context("fork")
        with concurrent.futures.ProcessPoolExecutor(workers, mp_context=fork) as pool:
            _SCANS.update(zip(todo, pool.map(_scan, todo, chunksize=4), strict=True))
    else:
        _SCANS.update((page, _scan(page)) for page in todo)
    scans = [read_charts(site, _SCANS[page]) for page in pages]
    for page in pages:  # most recently used last; the oldest go beyond the bound
        _SCANS[page] = _SCANS.pop(page)
    while len(_SCANS) > _SCANS_KEPT:
        del _SCANS[next(iter(_SCANS))]
    return scans


#: Scans by (URL, HTML), least recently used first, at most :data:`_SCANS_KEPT`.
_SCANS: dict[tuple[str, str], PageScan] = {}
_SCANS_KEPT = 256


def _scan(page: tuple[str, str]) -> PageScan:
    return scan_page(*page)


# ------------------------------------------------------------------- judging


class ResultSet:
    """The results under ``root``: loaded lazily, with their load errors and staleness."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._loaded: dict[str, object] = {}
        self._errors: dict[str, str] = {}
        self._stale: dict[tuple[str, str], list[str]] = {}
        self._digests: dict = {}  # source hashes (and inputs' staleness): fixed during a build
        self._ids: list[str] | None = None
        self._others: list[Path] = []

    def ids(self) -> list[str]:
        """Ids of every benchmark results file (archive included), sorted."""
        return self._split()[0]

    def other_records(self) -> list[Path]:
        """JSON files under ``results/`` that are another kind of record.

        Such a file has a top-level ``kind`` (the Triton release matrix of the
        sm_120a case study, say): it is committed evidence, copied into the
        site, but not a benchmark result, so it cannot be quoted.
        """
        return self._split()[1]

    def _split(self) -> tuple[list[str], list[Path]]:
        from kernel_portfolio.results import result_id, result_paths

        if self._ids is None:
            paths = result_paths(self.root)
            base = self.root / "results"
            self._ids = [result_id(p) for p in paths]
            self._others = sorted(
                p for p in (base.rglob("*.json") if base.is_dir() else []) if p not in paths
            )
        return self._ids, self._others

    def get(self, result_id: str):
        """The loaded result, or ``None`` with :meth:`error` saying why."""
        if result_id in self._loaded or result_id in self._errors:
            return self._loaded.get(result_id)
        from kernel_portfolio.results import ResultError

        try:
            self._loaded[result_id] = load_result(self.root, result_id)
        except (ValueError, TypeError, ResultError) as err:
            self._errors[result_id] = str(err)
            return None
        return self._loaded[result_id]

    def error(self, result_id: str) -> str:
        """Why :meth:`get` returned ``None`` for ``result_id``."""
        return self._errors.get(result_id, "")

    def changed(self, result_id: str, case_id: str) -> list[str]:
        """Sources of a case that changed since it was measured ([] when current).

        An archived result's are read at its commit, once per result.

        Raises:
            kernel_portfolio.results.CommitMissing: the git history lacks an
                archived result's commit.
        """
        key = (result_id, case_id)
        if key not in self._stale:
            staleness = self.get(result_id).case_staleness(case_id, self.root, self._digests)
            self._stale[key] = [] if staleness.current else list(staleness.changed)
        return self._stale[key]


def _nearest(figure: Figure, saved: list[Claim], limit: int = 3) -> str:
    """The saved values closest to a figure of the same kind, as quotable claims."""
    value = _figure_value(figure)
    kind = None if figure.kind == "table" else figure.kind
    pool = [c for c in saved if kind is None or _claim_kind(c) == kind]
    if not pool:
        return "no saved value of that kind"
    if value is not None and value > 0:
        # Closest on a log scale; a saved value of 0 (a count) is never "close".
        pool = sorted(
            pool, key=lambda c: abs(math.log(c.value / value)) if c.value > 0 else math.inf
        )
    shown = [
        f"{c.text} = {{{{ claim {c.result_id} {c.case_id} "
        f"{c.impl}{'/' + c.baseline if c.baseline and c.stat == 'speedup' else ''} {c.stat} }}}}"
        for c in pool[:limit]
    ]
    return "; ".join(shown)


def _claim_kind(claim: Claim) -> str:
    if claim.text.endswith("×"):
        return "speedup"
    if claim.text.endswith("%"):
        return "percent"
    if claim.text.endswith("B/s"):
        return "bandwidth"
    if claim.text.endswith("FLOP/s"):
        return "throughput"
    if re.search(r"\d\s?(?:ns|µs|ms|s)$", claim.text):
        return "time"
    return "other"


_TIME_US = {"n": 1e-3, "u": 1.0, "µ": 1.0, "m": 1e3, "s": 1e6}
_PREFIX = {"k": 1e-6, "m": 1e-3, "g": 1.0, "t": 1e3, "p": 1e6}


def _figure_value(figure: Figure) -> float | None:
    """A figure in the unit saved values use (µs, GB/s, TFLOP/s, ratio, %)."""
    m = re.search(r"\d[\d,]*(?:\.\d+)?(?:[eE][+-]?\d+)?", figure.text)
    if not m:
        return None
    value = float(m[0].replace(",", ""))
    unit = figure.text[m.end() :].strip(" -\u00a0\u202f\u2009").lower().replace("μ", "µ")
    if figure.kind == "time":
        if unit.startswith(("milli", "micro", "nano")):
            return value * {"mi": 1e3, "mc": 1.0, "na": 1e-3}[unit[0] + unit[2]]
        return value * _TIME_US.get(unit[:1], 1.0)
    if figure.kind == "bandwidth":
        return value * _PREFIX.get(unit[:1], 1.0)
    if figure.kind == "throughput":
        return value * _PREFIX.get(unit[:1], 1.0) / 1e3
    return value


def _json_pointer(data: object, pointer: str) -> object:
    if not pointer.startswith("/"):
        raise KeyError(pointer)
    for token in pointer[1:].split("/"):
        token = token.replace("~1", "/").replace("~0", "~")
        data = data[int(token)] if isinstance(data, list) else data[token]
    return data


def _check_href(page: str, href: str, result_id: str, case_id: str) -> str | None:
    """Why a claim's href does not lead to its case's evidence (None when it does)."""
    path, _, anchor = href.partition("#")
    if _EXTERNAL.match(path) or path.startswith("/"):
        return f"link {href!r} is not a relative link into this site"
    base = page if page.endswith("/") else posixpath.dirname(page) + "/"
    target = posixpath.normpath(posixpath.join(base, path)) + "/"
    expected = f"evidence/{result_id}/"
    if target.replace("/index.html/", "/") != expected or anchor != case_anchor(case_id):
        return f"links to {href!r}, not to {expected}#{case_anchor(case_id)}"
    return None


def check_site(
    site: Path,
    root: Path,
    *,
    allowlist: Path | None = None,
    sources: Mapping[str, str] | None = None,
) -> Report:
    """Judge a built site against the saved results.

    Args:
        site: The built site folder (``site/``).
        root: Repository root holding ``results/`` and the measured sources.
        allowlist: Allow-list file; ``<root>/docs/evidence/allowlist.yml`` by default.
        sources: Optional map from page URL to its source file, used to name pages.

    Returns:
        The :class:`Report`; ``report.ok`` is whether the site may publish.

    Raises:
        ValueError: ``site`` is not a folder with HTML pages.
    """
    site = Path(site)
    if not site.is_dir() or not any(site.rglob("*.html")):
        raise ValueError(f"site {site} is not a built site (no HTML pages)")
    return judge(scan_site(site), root, allowlist=allowlist, sources=sources)


def judge(
    scans: list[PageScan],
    root: Path,
    *,
    allowlist: Path | None = None,
    sources: Mapping[str, str] | None = None,
) -> Report:
    """Judge scanned pages (see :func:`check_site`, which scans and judges)."""
    root = Path(root)
    allow, failures = load_allowlist(allowlist or root / ALLOWLIST)
    report = Report(failures=list(failures), pages=len(scans))
    results = ResultSet(root)
    for result_id in results.ids():
        if results.get(result_id) is None:
            report.failures.append(
                Failure(
                    f"results/{result_id}.json", f"does not validate: {results.error(result_id)}"
                )
            )

    @functools.cache
    def saved() -> list[Claim]:
        """Every quotable value, for the hints of hand-typed figures (built on the first)."""
        return [
            claim
            for result_id in results.ids()
            if results.get(result_id) is not None
            for claim in quotables(result_id, results.get(result_id).data)
        ]

    for scan in scans:
        name = scan.url or "home"
        if sources and scan.url in sources:
            name += f" ({sources[scan.url]})"

        def fail(message: str, name: str = name) -> None:
            report.failures.append(Failure(name, message))

        for resource in scan.external:
            fail(f"loads a resource from another host: {resource}")
        for error in scan.errors:
            fail(error)
        seen: set[tuple[str, str]] = set()
        for figure in scan.figures:
            if (figure.text, figure.context) in seen:
                continue
            seen.add((figure.text, figure.context))
            if any(entry.allows(figure.text, scan.url) for entry in allow):
                continue
            fail(
                f"hand-typed {figure.kind} figure {_show(figure.text)} in “{figure.context}” "
                f"is not a claim; nearest saved values: {_nearest(figure, saved())}"
            )
        stale: dict[tuple[str, str], list[str]] = {}
        for attrs, text in scan.claims:
            record = _judge_claim(scan.url, attrs, text, results, fail)
            report.claims.append(record)
            if record.status == "stale":
                stale.setdefault((record.result_id, record.case_id), []).append(record.text)
        for (result_id, case_id), texts in stale.items():
            what = (
                "the files at its commit differ from the hashes it recorded"
                if result_id.startswith("archive/")
                else "files it measured changed since the run"
            )
            fail(
                f"{len(texts)} claim(s) on {result_id} {case_id} ({', '.join(map(_show, texts))})"
                f" are stale: {what} ({', '.join(results.changed(result_id, case_id))}); "
                "measure again with `kp bench`, or quote an archived result (results/archive/, "
                "judged against the sources at its commit)"
            )
        for attrs, text in scan.targets:
            _judge_target(scan.url, attrs, text, results, fail)
        for attrs, text in scan.values:
            _judge_value(scan.url, attrs, text, results, fail)
    return report


def _judge_target(url, attrs, text, results: ResultSet, fail) -> None:
    """Check a target bar (its words) or a shortfall (recomputed like a claim)."""
    if "kp-shortfall" not in attrs.get("class", "").split():
        if _norm(text) not in {_norm(t) for t in targets.target_texts()}:
            fail(
                f"target {_show(text)} is not a bar of kernel_portfolio.bench.targets: "
                "a target shows a goal from there, never a measured figure"
            )
        return
    result_id, case_id, stat, impl, baseline, named = _quoted(attrs)
    label = f"shortfall {_show(text)} ({named} against {attrs.get('data-threshold')})"
    try:
        threshold = float(attrs.get("data-threshold", "nan"))
    except ValueError:
        threshold = math.nan
    if not targets.is_bar(stat, threshold, baseline):
        fail(f"{label} is not measured against a bar of kernel_portfolio.bench.targets")
        return
    result = results.get(result_id) if result_id else None
    if result is None:
        fail(f"{label} names a result that cannot be used: {results.error(result_id)}")
        return
    try:
        value = targets.target_value(result.data, case_id, stat, baseline, impl)
        expected = targets.shortfall_text(stat, value, threshold)
    except (ValueError, TypeError, KeyError) as err:
        fail(f"{label} cannot be backed: {err}")
        return
    if text != expected:
        fail(f"{label} differs from the shortfall of the saved value {_show(expected)}: tampered")
    why = _check_href(url, attrs.get("href", ""), result_id, case_id)
    if why:
        fail(f"{label} {why}")
    if results.changed(result_id, case_id):
        fail(f"{label} is stale: {', '.join(results.changed(result_id, case_id))} changed")


def _quoted(attrs: dict[str, str]) -> tuple[str, str, str, str, str | None, str]:
    """What a claim or a shortfall names: result, case, stat, impl, baseline, and those in words."""
    result_id, case_id = attrs.get("data-result", ""), attrs.get("data-case", "")
    stat, impl = attrs.get("data-stat", ""), attrs.get("data-impl", "")
    baseline = attrs.get("data-baseline") or None
    named = f"{result_id} {case_id} {impl}{'/' + baseline if baseline else ''} {stat}"
    return result_id, case_id, stat, impl, baseline, named


def _judge_claim(url, attrs, text, results: ResultSet, fail) -> ClaimRecord:
    """Check a claim: a link, or one listed by the chart or element whose text shows it.

    A listed claim (:data:`LISTED_IN` names where) is not a link: it is
    checked like one, but for the link.
    """
    result_id, case_id, stat, impl, baseline, named = _quoted(attrs)
    where = attrs.get(LISTED_IN)
    label = f"claim {text!r} ({named})" + (f" in {where}" if where else "")
    record = dict(
        page=url,
        text=text,
        result_id=result_id,
        case_id=case_id,
        stat=stat,
        impl=impl,
        baseline=baseline,
    )
    result = results.get(result_id) if result_id else None
    if result is None:
        why = results.error(result_id) if result_id else "no data-result"
        fail(f"{label} names a result that cannot be used: {why}")
        return ClaimRecord(**record, status="invalid")
    try:
        claim = make_claim(result_id, result.data, case_id, stat, impl, baseline)
    except (ValueError, TypeError, KeyError) as err:
        fail(f"{label} cannot be backed: {err}")
        return ClaimRecord(**record, status="invalid")
    status = "archived" if claim.archived else "current"
    try:
        shown_value = float(attrs.get("data-value", "nan"))
    except ValueError:
        shown_value = math.nan
    # (the same figure whatever its spaces: Markdown turns the no-break one of a title into one)
    if _norm(text) != _norm(claim.text) or not math.isclose(
        shown_value, claim.value, rel_tol=1e-12
    ):
        fail(
            f"{label} differs from the saved value {_show(claim.text)} ({claim.value!r}): tampered"
        )
        status = "invalid"
    why = None if where else _check_href(url, attrs.get("href", ""), result_id, case_id)
    if why:
        fail(f"{label} {why}")
        status = "invalid"
    if results.changed(result_id, case_id):
        status = "stale"  # reported once per page and case by judge()
    return ClaimRecord(**record, status=status)


def _judge_value(url, attrs, text, results: ResultSet, fail) -> None:
    result_id = attrs.get("data-result", "")
    where = f"evidence value {_show(text)} ({result_id} {attrs.get('data-field', '')})"
    if not result_id or not url.startswith(f"evidence/{result_id}/"):
        fail(f"{where} may only appear on its own generated evidence page evidence/{result_id}/")
        return
    result = results.get(result_id)
    if result is None:
        fail(f"{where} names a result that cannot be used: {results.error(result_id)}")
        return
    try:
        saved = _json_pointer(result.data, attrs.get("data-field", ""))
        if "kp-text" in attrs.get("class", "").split():
            if not isinstance(saved, str):
                raise TypeError(f"a text value points at a {type(saved).__name__}")
            expected, text = _norm(saved), _norm(text)
        else:
            expected = format_value(
                float(saved) * float(attrs.get("data-scale", "1")), attrs.get("data-unit", "")
            )
    except (KeyError, IndexError, TypeError, ValueError) as err:
        fail(f"{where} points at nothing in the result ({type(err).__name__}: {err})")
        return
    if text != expected:
        fail(f"{where} differs from the saved value {_show(expected)}: tampered")
