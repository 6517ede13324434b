"""A small HTML tree for reading built pages (standard library only).

The gate and the site tests need the text of a page with its structure (which
text sits inside a claim, a table column or a code block); this builds just
enough of a tree for that from :mod:`html.parser`, tolerating the unclosed
``<p>``/``<li>`` that HTML allows.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser

VOID = frozenset((
    "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param",
    "source", "track", "wbr",
))  # fmt: skip
# Elements that end an open <p> when they start (a subset of the HTML rules,
# enough for generated pages).
_CLOSES_P = frozenset((
    "address", "article", "aside", "blockquote", "details", "div", "dl", "fieldset",
    "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header",
    "hr", "main", "nav", "ol", "p", "pre", "section", "table", "ul",
))  # fmt: skip


@dataclass(eq=False)
class Node:
    """An element: tag, attributes and children (nodes or text)."""

    tag: str
    attrs: dict[str, str] = field(default_factory=dict)
    children: list[Node | str] = field(default_factory=list)
    parent: Node | None = field(default=None, repr=False)

    @property
    def classes(self) -> set[str]:
        """The element's classes."""
        return set(self.attrs.get("class", "").split())

    def iter(self, tag: str | None = None) -> Iterator[Node]:
        """This element and every descendant element (optionally of one tag), in order."""
        if tag is None or self.tag == tag:
            yield self
        for child in self.children:
            if isinstance(child, Node):
                yield from child.iter(tag)

    def text(self) -> str:
        """All text inside, concatenated."""
        return "".join(
            c if isinstance(c, str) else c.text()
            for c in self.children
            if isinstance(c, str) or c.tag not in ("script", "style")
        )

    def ancestors(self) -> Iterator[Node]:
        """The parent, its parent, and so on."""
        node = self.parent
        while node is not None:
            yield node
            node = node.parent


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document")
        self.stack = [self.root]

    def handle_starttag(self, tag, attrs):
        if tag in _CLOSES_P and any(n.tag == "p" for n in self.stack):
            self._close("p")
        if tag == "li":
            self._close_up_to("li", stop=("ul", "ol"))
        if tag in ("td", "th"):
            self._close_up_to("td", stop=("tr", "table"))
            self._close_up_to("th", stop=("tr", "table"))
        if tag == "tr":
            self._close_up_to("tr", stop=("table", "thead", "tbody", "tfoot"))
        node = Node(tag, {k: v or "" for k, v in attrs}, parent=self.stack[-1])
        self.stack[-1].children.append(node)
        if tag not in VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag, attrs):
        node = Node(tag, {k: v or "" for k, v in attrs}, parent=self.stack[-1])
        self.stack[-1].children.append(node)

    def handle_endtag(self, tag):
        self._close(tag)

    def handle_data(self, data):
        self.stack[-1].children.append(data)

    def _close(self, tag: str) -> None:
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i].tag == tag:
                del self.stack[i:]
                return

    def _close_up_to(self, tag: str, stop: tuple[str, ...]) -> None:
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i].tag in stop:
                return
            if self.stack[i].tag == tag:
                del self.stack[i:]
                return


def parse(source: str) -> Node:
    """Parse an HTML document into a :class:`Node` tree rooted at ``#document``."""
    builder = _Builder()
    builder.feed(source)
    builder.close()
    return builder.root
