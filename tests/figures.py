"""Reading the site's figures back in tests: the inline SVG of a figure on a page,
its text labels, how many marks a data group holds, and its CSV download."""

from __future__ import annotations

import csv
import io
import re
import xml.etree.ElementTree as ET

SVG = "{http://www.w3.org/2000/svg}"


def figure_block(page: str, name: str) -> str:
    """The ``<figure id="figure-NAME">`` element of a page (HTML text)."""
    match = re.search(
        rf'<figure class="card figure" id="figure-{re.escape(name)}">(.*?)</figure>',
        page,
        re.S,
    )
    assert match, f"no figure {name!r} on the page"
    return match.group(1)


def figure_svg(page: str, name: str) -> ET.Element:
    """The parsed inline SVG of figure ``name`` (it must be well-formed XML)."""
    block = figure_block(page, name)
    svg = block[block.index("<svg") : block.index("</svg>") + 6]
    return ET.fromstring(svg)


def texts(svg: ET.Element) -> list[str]:
    """Every text drawn in the figure (ticks, labels, titles, legend, values)."""
    return [el.text or "" for el in svg.iter(f"{SVG}text")]


def marks(svg: ET.Element, group: str) -> int:
    """How many marks (paths, uses, rects) the group with id ``group`` draws."""
    for el in svg.iter(f"{SVG}g"):
        if el.get("id") == group:
            return sum(
                1 for child in el.iter() if child.tag in (f"{SVG}path", f"{SVG}use")
            )
    return 0


def links(page: str, name: str) -> dict[str, str]:
    """Format -> download URL of figure ``name``."""
    block = figure_block(page, name)
    return {
        label.lower(): url.replace("&amp;", "&")
        for url, label in re.findall(r'<a href="([^"]+)" download>(\w+)</a>', block)
    }


def csv_rows(client, page: str, name: str) -> list[dict]:
    """The figure's data, downloaded through its CSV link."""
    response = client.get(links(page, name)["csv"])
    assert response.status_code == 200, response.status_code
    assert response["Content-Type"].startswith("text/csv")
    return list(csv.DictReader(io.StringIO(response.content.decode())))


MAGIC = {"svg": b"<?xml", "pdf": b"%PDF", "png": b"\x89PNG"}


def assert_downloads(client, page: str, name: str) -> None:
    """Every binary format of the figure downloads as an attachment of its type."""
    for fmt, url in links(page, name).items():
        response = client.get(url)
        assert response.status_code == 200, (fmt, url)
        assert f'filename="{name}.{fmt}"' in response["Content-Disposition"]
        if fmt in MAGIC:
            assert response.content.startswith(MAGIC[fmt]), fmt
