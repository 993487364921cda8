"""Study instructions as safe HTML: markdown-it-py parses, nh3 sanitizes. No Django.

Only a fixed set of constructs becomes markup: headings (``#``, ``##``, ``###``;
deeper ones count as ``###``), paragraphs, bullet and numbered lists, ``**bold**``,
``*italic*``, ``code`` and ``[links](https://...)`` to http(s) or mailto targets
(``rel="noopener noreferrer"``). Raw HTML in the source is shown as text. The parser
is CommonMark's ("zero" preset plus those rules), so input it does not know stays
text; nh3 (the ammonia sanitizer) then keeps only those tags and the ``href`` of
links, as a second line of defence.
"""

from __future__ import annotations

from typing import Any

import nh3
from markdown_it import MarkdownIt

ALLOWED_TAGS = {"h2", "h3", "h4", "p", "ul", "ol", "li", "strong", "em", "code", "a"}
LINK_SCHEMES = ("http://", "https://", "mailto:")


def _heading_open(
    renderer: Any, tokens: list[Any], idx: int, options: Any, env: Any
) -> str:
    # The page owns <h1>: "#" renders as <h2>, and nothing deeper than <h4>.
    level = min(int(tokens[idx].tag[1]), 3) + 1
    return f"<h{level}>"


def _heading_close(
    renderer: Any, tokens: list[Any], idx: int, options: Any, env: Any
) -> str:
    opener = next(t for t in reversed(tokens[:idx]) if t.type == "heading_open")
    return f"</h{min(int(opener.tag[1]), 3) + 1}>\n"


def _parser() -> MarkdownIt:
    md = MarkdownIt("zero").enable(
        ["heading", "list", "emphasis", "backticks", "link", "escape", "newline"]
    )
    # Anything but an absolute http(s) or mailto target stays text.
    md.validateLink = lambda url: url.strip().lower().startswith(LINK_SCHEMES)
    md.add_render_rule("heading_open", _heading_open)
    md.add_render_rule("heading_close", _heading_close)
    return md


_MD = _parser()


def render(source: str) -> str:
    """HTML for ``source``; safe to mark safe (see the module docstring)."""
    html = _MD.render(source)
    return nh3.clean(
        html,
        tags=ALLOWED_TAGS,
        attributes={"a": {"href"}},
        url_schemes={"http", "https", "mailto"},
        link_rel="noopener noreferrer",
        strip_comments=True,
    ).strip()
