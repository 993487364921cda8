"""A small, safe Markdown renderer for study instructions. No Django import.

Everything is HTML-escaped first, so raw HTML in the source is shown as text and no
attribute or script can be injected; only a fixed set of constructs becomes markup:
headings (#, ##, ###), paragraphs, bullet and numbered lists, **bold**, *italic*,
`code` and [links](https://...) to http(s) or mailto targets.
"""

from __future__ import annotations

import html
import re

_LINK = re.compile(r"\[([^\]]+)\]\(((?:https?://|mailto:)[^\s)]+)\)")
_CODE = re.compile(r"`([^`]+)`")
_BOLD = re.compile(r"\*\*(.+?)\*\*")
_ITALIC = re.compile(r"(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?![\w*])")
_BULLET = re.compile(r"^\s*[-*+]\s+(.*)$")
_NUMBERED = re.compile(r"^\s*\d+[.)]\s+(.*)$")
_HEADING = re.compile(r"^(#{1,3})\s+(.*)$")


def _inline(text: str) -> str:
    out = html.escape(text, quote=True)
    codes: list[str] = []

    def keep_code(m: re.Match[str]) -> str:
        codes.append(f"<code>{m.group(1)}</code>")
        return f"\x00{len(codes) - 1}\x00"

    out = _CODE.sub(keep_code, out)
    out = _LINK.sub(
        lambda m: f'<a href="{m.group(2)}" rel="noopener noreferrer">{m.group(1)}</a>',
        out,
    )
    out = _BOLD.sub(r"<strong>\1</strong>", out)
    out = _ITALIC.sub(r"<em>\1</em>", out)
    return re.sub("\x00(\\d+)\x00", lambda m: codes[int(m.group(1))], out)


def render(source: str) -> str:
    """HTML for ``source``; safe to mark safe (see the module docstring)."""
    blocks: list[str] = []
    para: list[str] = []
    items: list[str] = []
    list_tag = ""

    def flush() -> None:
        nonlocal list_tag
        if para:
            blocks.append(f"<p>{_inline(' '.join(para))}</p>")
            para.clear()
        if items:
            body = "".join(f"<li>{_inline(i)}</li>" for i in items)
            blocks.append(f"<{list_tag}>{body}</{list_tag}>")
            items.clear()
            list_tag = ""

    for line in source.replace("\r\n", "\n").split("\n"):
        if not line.strip():
            flush()
            continue
        heading = _HEADING.match(line)
        bullet = _BULLET.match(line)
        numbered = _NUMBERED.match(line)
        if heading:
            flush()
            level = len(heading.group(1)) + 1  # the page owns <h1>
            blocks.append(f"<h{level}>{_inline(heading.group(2))}</h{level}>")
        elif bullet or numbered:
            tag = "ul" if bullet else "ol"
            if para or (items and list_tag != tag):
                flush()
            list_tag = tag
            items.append((bullet or numbered).group(1))  # type: ignore[union-attr]
        elif items and line.startswith((" ", "\t")):
            items[-1] += " " + line.strip()
        else:
            if items:
                flush()
            para.append(line.strip())
    flush()
    return "\n".join(blocks)
