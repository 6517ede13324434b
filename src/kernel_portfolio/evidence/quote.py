"""Quoting saved results: the one way to put a measured figure on a page.

A claim names a result file, a case in it, a statistic and the implementation
(and, for a ratio, the baseline). The value, its unit and its rounding come from
the saved result, never from the author. A claim renders as a link::

    <a class="kp-claim" href="kp-evidence:h200/default#softmax-fwd-8192x8192-float16"
       data-result="h200/default" data-case="softmax/fwd/8192x8192/float16"
       data-stat="gbps" data-impl="ours" data-value="3900.0">3900 GB/s</a>

The ``kp-evidence:`` href is a placeholder (a notebook cannot know the URL of
the page it ends up on); the site build rewrites it into a relative link to the
case's anchor on the result's evidence page.

Markdown pages use ``{{ claim RESULT CASE IMPL STAT }}``, with ``IMPL`` written
``impl/baseline`` for a ratio; notebooks call :func:`quote`. Both go through
:func:`resolve`, and so does the gate when it checks a rendered claim.

Where a link cannot go, a claim still goes in the same way, and shows its
text; the claims such text shows are listed beside it, as :meth:`Claim.record`
writes them, for the gate to check:

* **in an attribute a browser shows** (``alt``, ``title``, ``aria-label``,
  ``placeholder``): ``{{ claim ... }}`` in a Markdown image's alt text, a link
  title or a raw HTML attribute; in a notebook's HTML, ``html.escape(str(claim))``
  (any text in an attribute is escaped). The site build
  (:func:`render_attribute_claims`) replaces each with its text and lists it in
  the element's ``data-kp-claims`` (:data:`CLAIMS_ATTRIBUTE`);
* **in a chart's text** (a title, an axis title, an annotation, a trace name,
  a hover template): the claim itself, ``f"... {claim} ..."``;
  :func:`kernel_portfolio.charts.figure_json` replaces each with its text and
  lists it in the figure's ``layout.meta["kp-claims"]`` (:data:`FIGURE_CLAIMS`).
"""

from __future__ import annotations

import functools
import html
import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

#: Statistics of one implementation of one case.
IMPL_STATS = ("median_us", "gbps", "pct_copy", "tflops", "peak_mem_bytes")
#: Statistics of one implementation against a baseline in the same run.
RATIO_STATS = ("speedup", "pct_cublas")
#: Every quotable statistic; ``metrics.<name>`` quotes an extra metric too.
STATS = IMPL_STATS + RATIO_STATS

#: href scheme of a claim before the site build rewrites it per page.
PLACEHOLDER = "kp-evidence:"
#: Attribute of an HTML element listing the claims its shown attributes quote (JSON records).
CLAIMS_ATTRIBUTE = "data-kp-claims"
#: Key of a chart figure's ``layout.meta`` listing the claims its text quotes (JSON records).
FIGURE_CLAIMS = "kp-claims"

# Narrow no-break space between a number and its unit: never wraps, and the
# gate's unit patterns accept it like any other space.
_SP = "\u202f"

_MARKDOWN_CLAIM = re.compile(r"\{\{\s*claim\s+(?P<args>[^{}]*?)\s*\}\}")
_FENCE = re.compile(r"^(?P<fence>[ \t]*(?:`{3,}|~{3,})).*?^(?P=fence)[ \t]*$", re.M | re.S)
_CODE_SPAN = re.compile(r"(?P<ticks>`+).+?(?P=ticks)", re.S)
_OPEN_TAG = re.compile(r"<[A-Za-z][\w:.-]*\s")


@dataclass(frozen=True)
class Claim:
    """A saved value, formatted, that renders as a link to its evidence.

    Attributes:
        result_id: Result id, the path under ``results/`` without ``.json``.
        case_id: Case id inside that result.
        stat: Statistic name (see :data:`STATS`, or ``metrics.<name>``).
        impl: Implementation the statistic belongs to.
        baseline: Baseline implementation of a ratio, else ``None``.
        value: The saved value, in the unit :func:`resolve` documents.
        text: The value as shown: rounded and with its unit.
    """

    result_id: str
    case_id: str
    stat: str
    impl: str
    baseline: str | None
    value: float
    text: str

    @classmethod
    def from_record(cls, record: object) -> Claim:
        """The claim a record lists (see :meth:`record`).

        Raises:
            ValueError: ``record`` is not a mapping of the record's fields.
        """
        if not isinstance(record, dict) or not all(
            isinstance(record.get(k), str) for k in ("result", "case", "stat", "impl", "text")
        ):
            raise ValueError(
                f"a claim record maps result, case, stat, impl and text to strings: {record!r}"
            )
        try:
            value = float(record.get("value"))
        except (TypeError, ValueError):
            value = math.nan
        baseline = record.get("baseline")
        return cls(
            record["result"],
            record["case"],
            record["stat"],
            record["impl"],
            baseline if isinstance(baseline, str) and baseline else None,
            value,
            record["text"],
        )

    def record(self) -> dict[str, object]:
        """The claim as a JSON record, the form in which a chart or an element lists it.

        ``{"result", "case", "stat", "impl", "baseline", "value", "text"}``:
        what the claim's link carries, and the text it shows.
        """
        return {
            "result": self.result_id,
            "case": self.case_id,
            "stat": self.stat,
            "impl": self.impl,
            "baseline": self.baseline,
            "value": self.value,
            "text": self.text,
        }

    def data_attrs(self) -> dict[str, str]:
        """The ``data-*`` attributes of the claim's link (what the gate checks)."""
        attrs = {
            "data-result": self.result_id,
            "data-case": self.case_id,
            "data-stat": self.stat,
            "data-impl": self.impl,
        }
        if self.baseline is not None:
            attrs["data-baseline"] = self.baseline
        attrs["data-value"] = repr(self.value)
        return attrs

    @classmethod
    def from_element(cls, attrs: dict[str, str], text: str) -> Claim:
        """The claim a rendered ``a.kp-claim`` element shows (its attributes and text)."""
        try:
            value = float(attrs.get("data-value", "nan"))
        except ValueError:
            value = math.nan
        return cls(
            attrs.get("data-result", ""),
            attrs.get("data-case", ""),
            attrs.get("data-stat", ""),
            attrs.get("data-impl", ""),
            attrs.get("data-baseline") or None,
            value,
            text,
        )

    @property
    def archived(self) -> bool:
        """Whether the claim quotes an archived result."""
        return self.result_id.startswith("archive/")

    @property
    def href(self) -> str:
        """Placeholder link to the case on the result's evidence page."""
        return f"{PLACEHOLDER}{self.result_id}#{case_anchor(self.case_id)}"

    def html(self) -> str:
        """The claim as an ``<a class="kp-claim">`` element."""
        attrs = {"class": "kp-claim", "href": self.href, **self.data_attrs()}
        joined = " ".join(f'{k}="{html.escape(v, quote=True)}"' for k, v in attrs.items())
        return f"<a {joined}>{html.escape(self.text)}</a>"

    def __str__(self) -> str:
        return self.html()

    def _repr_html_(self) -> str:
        return self.html()


def case_anchor(case_id: str) -> str:
    """HTML id of a case on its evidence page.

    ``softmax/fwd/8x8/float16`` -> ``softmax-fwd-8x8-float16``.
    """
    return re.sub(r"[^a-z0-9]+", "-", case_id.lower()).strip("-")


def evidence_path(result_id: str) -> str:
    """Site path of a result's evidence page source, e.g. ``evidence/h200/default.md``."""
    return f"evidence/{result_id}.md"


def check_result_id(result_id: object) -> str:
    """Check a result id (``h200/default``, ``archive/h200/default-...``) and return it.

    Raises:
        TypeError: ``result_id`` is not a string.
        ValueError: ``result_id`` is empty, absolute, or leaves ``results/``.
    """
    if not isinstance(result_id, str):
        raise TypeError(f"result_id must be a str, got {type(result_id).__name__}")
    parts = result_id.split("/")
    if not result_id or result_id.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"result_id {result_id!r} is not a path under results/ without .json")
    return result_id


# ---------------------------------------------------------------- formatting


def significant(value: float, digits: int = 3) -> str:
    """``value`` rounded to ``digits`` significant digits, written without an exponent."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    decimals = digits - 1 - math.floor(math.log10(abs(value)))
    rounded = round(value, decimals)
    # Rounding can add a digit (999.6 -> 1000): recount on the rounded value.
    decimals = digits - 1 - math.floor(math.log10(abs(rounded)))
    return f"{rounded:.{max(decimals, 0)}f}"


def format_time_us(us: float) -> str:
    """A duration given in microseconds, in ns, µs, ms or s with 3 significant digits."""
    if us == 0:
        return f"0{_SP}µs"
    for scale, unit in ((1e-3, "ns"), (1.0, "µs"), (1e3, "ms")):
        shown = significant(us / scale)
        if abs(float(shown)) < 1000:
            return f"{shown}{_SP}{unit}"
    return f"{significant(us / 1e6)}{_SP}s"


def format_bytes(nbytes: float) -> str:
    """A size in bytes: in full under 1 KiB, else in KiB, MiB or GiB with 3 significant digits."""
    if abs(nbytes) < 1024:
        return f"{nbytes:.0f}{_SP}B"
    for scale, unit in ((1 << 10, "KiB"), (1 << 20, "MiB")):
        if abs(nbytes) < 1024 * scale:
            return f"{significant(nbytes / scale)}{_SP}{unit}"
    return f"{significant(nbytes / (1 << 30))}{_SP}GiB"


def format_value(value: float, unit: str) -> str:
    """Format a saved value for display according to its unit.

    Args:
        value: The saved number.
        unit: ``"us"`` (any duration is converted to microseconds first),
            ``"GB/s"`` (integer), ``"%"`` (one decimal), ``"x"`` (a ratio, two
            decimals and ``×``), ``"TFLOP/s"`` (3 significant digits),
            ``"bytes"`` (a size, see :func:`format_bytes`), or any
            other unit, a count's (``compiles``, ``requests``,
            ``registers/thread``): a whole value in full (``150 compiles``),
            any other with 3 significant digits; then the unit.

    Returns:
        The text a page shows.
    """
    if unit in _TIME_SCALE_US:
        return format_time_us(value * _TIME_SCALE_US[unit])
    if unit == "bytes":
        return format_bytes(value)
    if unit == "GB/s":
        return f"{round(value):d}{_SP}GB/s"
    if unit == "%":
        return f"{value:.1f}%"
    if unit in ("x", "×"):
        return f"{value:.2f}×"
    shown = f"{value:.0f}" if float(value).is_integer() else significant(value)
    return f"{shown}{_SP}{unit}" if unit else shown


_TIME_SCALE_US = {"ns": 1e-3, "us": 1.0, "µs": 1.0, "ms": 1e3, "s": 1e6}

#: Unit of each statistic, as :func:`format_value` takes it.
STAT_UNITS = {
    "median_us": "us",
    "gbps": "GB/s",
    "pct_copy": "%",
    "tflops": "TFLOP/s",
    "speedup": "x",
    "pct_cublas": "%",
    "peak_mem_bytes": "bytes",
}


# ------------------------------------------------------------------ resolving


def find_case(data: dict, case_id: str) -> dict:
    """The case record ``case_id`` of a result's data.

    Raises:
        ValueError: no such case (the message lists a few that exist).
    """
    for case in data.get("cases", []):
        if case.get("id") == case_id:
            return case
    known = [c.get("id") for c in data.get("cases", [])]
    close = [k for k in known if k and k.split("/")[0] == case_id.split("/")[0]][:5]
    hint = f"; cases of that op: {', '.join(close)}" if close else ""
    raise ValueError(f"case {case_id!r} is not in the result{hint}")


def _ok_impl(case: dict, impl: str, role: str) -> dict:
    record = case.get("impls", {}).get(impl)
    if record is None:
        known = ", ".join(sorted(case.get("impls", {})))
        raise ValueError(f"{role} {impl!r} is not measured in case {case['id']!r} (has: {known})")
    if record.get("status") != "ok":
        raise ValueError(
            f"{role} {impl!r} in case {case['id']!r} has status {record.get('status')!r}"
            f" ({record.get('reason')}); only measured values can be quoted"
        )
    return record


def resolve(
    data: dict, case_id: str, stat: str, impl: str = "ours", baseline: str | None = None
) -> tuple[float, str]:
    """The saved value of one statistic and the unit it is formatted with.

    ``median_us`` is the implementation's ``median_ms`` times 1000;
    ``peak_mem_bytes`` is the peak device memory of one call, in bytes; ``speedup``
    is the saved ratio ``baseline time / impl time``; ``pct_cublas`` is 100 times
    the saved ratio against ``cublas``; ``metrics.<name>`` is an extra metric.

    Args:
        data: A loaded result's data.
        case_id: Case id.
        stat: Statistic name.
        impl: Implementation.
        baseline: Baseline of ``speedup`` (required there, refused elsewhere).

    Returns:
        ``(value, unit)``.

    Raises:
        ValueError: unknown statistic, case or implementation, a skipped
            implementation, a missing value, or a baseline where none belongs.
    """
    if not isinstance(stat, str):
        raise TypeError(f"stat must be a str, got {type(stat).__name__}")
    if not isinstance(impl, str):
        raise TypeError(f"impl must be a str, got {type(impl).__name__}")
    case = find_case(data, case_id)
    record = _ok_impl(case, impl, "impl")
    if stat == "speedup" and baseline is None:
        raise ValueError("stat 'speedup' needs baseline= (the implementation it is compared with)")
    if stat == "pct_cublas":
        if baseline not in (None, "cublas"):
            raise ValueError(f"stat 'pct_cublas' compares with 'cublas', not baseline={baseline!r}")
        baseline = "cublas"
    elif stat != "speedup" and baseline is not None:
        raise ValueError(f"baseline= is only for ratio stats {RATIO_STATS}, not {stat!r}")
    if stat in RATIO_STATS:
        _ok_impl(case, baseline, "baseline")
        for ratio in case.get("ratios", []):
            if ratio.get("impl") == impl and ratio.get("baseline") == baseline:
                value = ratio.get("median")
                break
        else:
            raise ValueError(f"case {case_id!r} saves no ratio {impl}/{baseline}")
        if value is None:
            raise ValueError(f"ratio {impl}/{baseline} of case {case_id!r} has no median")
        return (float(value) * 100.0, "%") if stat == "pct_cublas" else (float(value), "x")
    if stat.startswith("metrics."):
        name = stat.removeprefix("metrics.")
        metric = (record.get("metrics") or {}).get(name)
        if metric is None:
            raise ValueError(f"{impl!r} in case {case_id!r} has no metric {name!r}")
        return float(metric["value"]), str(metric.get("unit") or "")
    if stat not in IMPL_STATS:
        raise ValueError(f"stat {stat!r} is not one of {STATS} or 'metrics.<name>'")
    value = record.get("median_ms") if stat == "median_us" else record.get(stat)
    if value is None:
        raise ValueError(f"{impl!r} in case {case_id!r} has no value for {stat!r}")
    return (float(value) * 1000.0 if stat == "median_us" else float(value)), STAT_UNITS[stat]


def make_claim(
    result_id: str,
    data: dict,
    case_id: str,
    stat: str,
    impl: str = "ours",
    baseline: str | None = None,
) -> Claim:
    """A :class:`Claim` from a result's data (see :func:`resolve` for the rules)."""
    value, unit = resolve(data, case_id, stat, impl, baseline)
    if stat == "pct_cublas":
        baseline = "cublas"
    return Claim(result_id, case_id, stat, impl, baseline, value, format_value(value, unit))


_FIELD = {"median_us": "median_ms"}


def quotables(result_id: str, data: dict) -> Iterator[Claim]:
    """Every claim a result can back: each statistic of each measured implementation and ratio."""
    for case in data.get("cases", []):
        for impl, record in case.get("impls", {}).items():
            if record.get("status") != "ok":
                continue
            stats = [s for s in IMPL_STATS if record.get(_FIELD.get(s, s)) is not None]
            stats += [f"metrics.{name}" for name in record.get("metrics") or {}]
            for stat in stats:
                yield make_claim(result_id, data, case["id"], stat, impl)
        for ratio in case.get("ratios", []):
            if ratio.get("median") is None:
                continue
            try:
                yield make_claim(
                    result_id, data, case["id"], "speedup", ratio["impl"], ratio["baseline"]
                )
            except ValueError:
                continue  # a ratio against a skipped implementation is not quotable


# ------------------------------------------------------------------- loading


def result_path(root: Path, result_id: str) -> Path:
    """Path of the JSON file behind a result id."""
    return Path(root) / "results" / f"{check_result_id(result_id)}.json"


@functools.lru_cache(maxsize=64)
def _load_cached(path: str, mtime_ns: int, size: int):
    from kernel_portfolio.results import load

    return load(path)


def load_result(root: Path, result_id: str):
    """Load (validated) the result a claim names; cached while the file is unchanged.

    Raises:
        ValueError: no such results file.
        kernel_portfolio.results.ResultError: the file does not validate (a ValueError).
    """
    path = result_path(root, result_id)
    if not path.is_file():
        raise ValueError(f"result {result_id!r} does not exist (no {path})")
    stat = path.stat()
    return _load_cached(str(path), stat.st_mtime_ns, stat.st_size)


def quote(
    result_id: str,
    case_id: str,
    stat: str,
    impl: str = "ours",
    baseline: str | None = None,
    *,
    root: str | Path | None = None,
) -> Claim:
    """Quote a saved value: the notebook half of the quoting mechanism.

    Example::

        from IPython.display import Markdown, display
        from kernel_portfolio.evidence import quote

        case = "softmax/fwd/8192x8192/float16"
        display(Markdown(f"Ours reaches {quote('h200/default', case, 'gbps')}, "
                         f"{quote('h200/default', case, 'speedup', baseline='torch')} "
                         "the speed of torch."))

    Args:
        result_id: Result id, e.g. ``"h200/default"``.
        case_id: Case id, e.g. ``"softmax/fwd/8192x8192/float16"``.
        stat: ``"median_us"``, ``"gbps"``, ``"pct_copy"``, ``"tflops"``,
            ``"peak_mem_bytes"``, ``"pct_cublas"``, ``"speedup"`` (needs ``baseline``) or
            ``"metrics.<name>"``.
        impl: Implementation, ``"ours"`` by default.
        baseline: Baseline implementation of ``"speedup"``.
        root: Repository root; found from the working directory by default.

    Returns:
        The :class:`Claim`; ``str()`` of it, and its HTML representation,
        is the link.

    Raises:
        ValueError: the result, case, implementation or statistic does not
            exist, or the value was not measured.
    """
    if root is None:
        from kernel_portfolio.results import repo_root

        root = repo_root()
    result = load_result(Path(root), result_id)
    return make_claim(result_id, result.data, case_id, stat, impl, baseline)


# ------------------------------------------------------------------ Markdown


def parse_markdown_claim(args: str) -> tuple[str, str, str, str, str | None]:
    """Split the arguments of ``{{ claim RESULT CASE IMPL[/BASELINE] STAT }}``.

    Returns:
        ``(result_id, case_id, stat, impl, baseline)``.

    Raises:
        ValueError: not exactly four arguments.
    """
    parts = args.split()
    if len(parts) != 4:
        raise ValueError(
            "a claim takes 4 arguments: {{ claim RESULT CASE IMPL[/BASELINE] STAT }}, "
            f"got {len(parts)}"
        )
    result_id, case_id, impls, stat = parts
    impl, _, baseline = impls.partition("/")
    return result_id, case_id, stat, impl, baseline or None


def expand_markdown(markdown: str, root: Path) -> str:
    """Replace every ``{{ claim ... }}`` outside code with its claim HTML.

    Claims inside fenced code blocks and inline code spans stay as written, so
    a page can show the syntax itself. A claim inside a raw HTML tag (an
    attribute value) is written escaped, as Markdown itself writes one in an
    image's alt text or a link's title, for :func:`render_attribute_claims`.

    Raises:
        ValueError: one line per claim that cannot be resolved.
    """
    errors: list[str] = []

    def substitute(match: re.Match) -> str:
        try:
            result_id, case_id, stat, impl, baseline = parse_markdown_claim(match["args"])
            link = quote(result_id, case_id, stat, impl, baseline, root=root).html()
        except (ValueError, TypeError) as err:  # ResultError is a ValueError
            errors.append(f"{match[0]}: {err}")
            return match[0]
        return html.escape(link) if _in_tag(match.string, match.start()) else link

    out = _outside_code(markdown, lambda text: _MARKDOWN_CLAIM.sub(substitute, text))
    if errors:
        raise ValueError("\n".join(errors))
    return out


def _in_tag(text: str, at: int) -> bool:
    """Whether position ``at`` of ``text`` lies inside an HTML start tag (``<img alt="...``)."""
    start = text.rfind("<", 0, at)
    return start > text.rfind(">", 0, at) and _OPEN_TAG.match(text, start) is not None


def _outside_code(markdown: str, transform) -> str:
    """Apply ``transform`` to the parts of ``markdown`` outside fences and code spans."""
    pieces: list[str] = []
    last = 0
    for fence in _FENCE.finditer(markdown):
        pieces.append(_outside_spans(markdown[last : fence.start()], transform))
        pieces.append(fence[0])
        last = fence.end()
    pieces.append(_outside_spans(markdown[last:], transform))
    return "".join(pieces)


def _outside_spans(text: str, transform) -> str:
    pieces: list[str] = []
    last = 0
    for span in _CODE_SPAN.finditer(text):
        pieces.append(transform(text[last : span.start()]))
        pieces.append(span[0])
        last = span.end()
    pieces.append(transform(text[last:]))
    return "".join(pieces)


# ------------------------------------------------------ where no link can go

_LINK = re.compile(r'<a class="kp-claim"(?P<attrs>[^<>]*)>(?P<text>[^<>]*)</a>')
_LINK_ATTR = re.compile(r'\s([\w-]+)="([^"]*)"')
# (nbconvert writes a notebook's HTML output again: single-quoted, with only < and > escaped)
_ESCAPED_LINK = re.compile(r"&lt;a class=(?:&quot;|&#34;|&#x22;|\")kp-claim\b", re.I)
_START_TAG = re.compile(r"<[A-Za-z][\w:.-]*\s[^<>]*>")
_TAG_ATTR = re.compile(r"""(?P<name>[^\s"'=<>/]+)\s*=\s*(?:"(?P<dq>[^"]*)"|'(?P<sq>[^']*)')""")


def claims_to_text(fragment: str) -> tuple[str, list[Claim]]:
    """Replace each claim link of an HTML fragment by the text it shows.

    For text that cannot hold a link: an attribute value, a chart's title.

    Args:
        fragment: HTML that may hold ``<a class="kp-claim">`` elements, as
            :meth:`Claim.html` writes them.

    Returns:
        The fragment with each claim replaced by its text (unescaped), and the
        claims, in order.
    """
    claims: list[Claim] = []

    def text(match: re.Match) -> str:
        attrs = {k: html.unescape(v) for k, v in _LINK_ATTR.findall(match["attrs"])}
        claim = Claim.from_element(attrs, html.unescape(match["text"]))
        claims.append(claim)
        return claim.text

    return _LINK.sub(text, fragment), claims


def render_attribute_claims(page: str) -> str:
    """Show each claim inside an attribute value as its text, listed in ``data-kp-claims``.

    A claim in an attribute is its link escaped (Markdown escapes one in an
    image's alt text or a link's title; :func:`expand_markdown` escapes one in a
    raw HTML tag; a notebook escapes it as any attribute text). Each such
    attribute gets the claim's text instead, and the element the records of
    the claims its attributes show (:data:`CLAIMS_ATTRIBUTE`), which the gate
    checks like any claim.

    Args:
        page: A page's HTML.

    Returns:
        The HTML with no claim left inside an attribute.
    """
    if not _ESCAPED_LINK.search(page):
        return page

    def tag(match: re.Match) -> str:
        if not _ESCAPED_LINK.search(match[0]):
            return match[0]
        claims: list[Claim] = []

        def attribute(a: re.Match) -> str:
            value = a["dq"] if a["dq"] is not None else a["sq"]
            shown, found = claims_to_text(html.unescape(value))
            claims.extend(found)
            return f'{a["name"]}="{html.escape(shown)}"' if found else a[0]

        out = _TAG_ATTR.sub(attribute, match[0])
        records = html.escape(json.dumps([c.record() for c in claims], ensure_ascii=False))
        end = len(out) - (2 if out.endswith("/>") else 1)
        return f'{out[:end].rstrip()} {CLAIMS_ATTRIBUTE}="{records}"{out[end:]}'

    return _START_TAG.sub(tag, page)
