"""Every figure of the site, drawn by matplotlib in one style.

A :class:`Figure` is plain data: a name (its URL slug), a title, axis labels with
units, a ``kind`` naming the drawing function, and the table it is drawn from
(``columns`` + ``rows``, which is also its CSV). Pages build figures from their
objects, show :meth:`Figure.inline_svg` and link each figure's SVG, PDF, PNG and
CSV downloads (:func:`figure_response`); the download view builds the same
figures again, so what a researcher downloads is what the page showed.

Rendering is deterministic (fixed SVG hash salt, no dates in metadata) and
cached by the figure's content: a new fit, grade or run changes the table and
so the cache key; an unchanged object renders once.

See portal/FIGURES.md for the style rules (fonts, colours, legends, empty states).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import logging
import math
import re
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import matplotlib

# PDF font subsetting logs every glyph at INFO: noise in web and worker logs.
logging.getLogger("fontTools").setLevel(logging.WARNING)
matplotlib.use("Agg")  # no display, no GUI toolkit: safe in web and worker processes

import numpy as np  # noqa: E402
from django.core.cache import cache  # noqa: E402
from django.http import Http404, HttpResponse  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure as MplFigure  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import FuncFormatter, MaxNLocator  # noqa: E402
from matplotlib.transforms import offset_copy  # noqa: E402

FORMATS = ("svg", "pdf", "png", "csv")
CONTENT_TYPES = {
    "svg": "image/svg+xml",
    "pdf": "application/pdf",
    "png": "image/png",
    "csv": "text/csv; charset=utf-8",
}
CACHE_SECONDS = 24 * 3600

# Okabe-Ito: distinguishable with every common colour-vision deficiency, in print.
BLUE, ORANGE, GREEN, VERMILLION = "#0072B2", "#E69F00", "#009E73", "#D55E00"
PURPLE, SKY, YELLOW, GREY, INK = "#CC79A7", "#56B4E9", "#F0E442", "#7F7F7F", "#1D2330"
PALETTE = (BLUE, ORANGE, GREEN, VERMILLION, PURPLE, SKY, GREY)
SERIES = {"rcp": BLUE, "qrel": ORANGE, "count": GREEN}

FONT_SIZE = 10
WIDTH = 6.4  # inches: one column of a page, one column of a two-column paper x 2
STYLE: dict[str, Any] = {
    "font.family": "DejaVu Sans",  # ships with matplotlib: identical everywhere
    "font.size": FONT_SIZE,
    "axes.titlesize": FONT_SIZE + 1,
    "axes.titleweight": "bold",
    "axes.titlelocation": "left",
    "axes.labelsize": FONT_SIZE,
    "xtick.labelsize": FONT_SIZE - 1,
    "ytick.labelsize": FONT_SIZE - 1,
    "legend.fontsize": FONT_SIZE - 1,
    "legend.frameon": False,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.edgecolor": "#667085",
    "axes.labelcolor": INK,
    "text.color": INK,
    "xtick.color": "#475467",
    "ytick.color": "#475467",
    "axes.grid": True,
    "grid.color": "#EAECF0",
    "grid.linewidth": 0.8,
    "axes.axisbelow": True,
    "lines.linewidth": 1.8,
    "figure.dpi": 100,
    "savefig.dpi": 200,
    "svg.fonttype": "none",  # text stays text: searchable, selectable, small
    "svg.hashsalt": "rcp-platform",  # stable element ids: identical bytes per input
    "pdf.fonttype": 42,  # TrueType in PDFs, as journals ask
}


@dataclass(frozen=True)
class Figure:
    """One figure: what is drawn (``kind``), from which table, with which labels.

    ``rows`` hold plain numbers/strings only; ``params`` are small drawing options
    (markers, maxima) that are not data. ``empty`` is the message drawn when there
    is nothing to show yet, instead of an empty frame that looks like a zero.
    """

    name: str
    title: str
    kind: str
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    xlabel: str = ""
    ylabel: str = ""
    caption: str = ""
    empty: str = "Nothing to show yet."
    params: dict[str, Any] = field(default_factory=dict)

    def csv(self) -> str:
        """The figure's table: a header row then one line per row, floats with
        full precision, missing values as empty cells."""
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(self.columns)
        for row in self.rows:
            writer.writerow(["" if v is None else v for v in row])
        return out.getvalue()

    def key(self, fmt: str) -> str:
        blob = json.dumps(
            [
                self.name,
                self.title,
                self.kind,
                self.columns,
                self.rows,
                self.xlabel,
                self.ylabel,
                self.empty,
                self.params,
                fmt,
            ],
            default=str,
            sort_keys=True,
        )
        return "figure:" + hashlib.sha256(blob.encode()).hexdigest()

    def render(self, fmt: str) -> bytes:
        """The figure in ``fmt`` (svg, pdf, png or csv), cached by content."""
        if fmt not in FORMATS:
            raise ValueError(f"unknown figure format {fmt!r}")
        if fmt == "csv":
            return self.csv().encode()
        key = self.key(fmt)
        data = cache.get(key)
        if data is None:
            data = _draw(self, fmt)
            cache.set(key, data, CACHE_SECONDS)
        return data

    def inline_svg(self) -> str:
        """SVG markup to place inside HTML: no XML prolog, no global stylesheet,
        scalable (class ``plot``), titled for screen readers. Every label was
        escaped by matplotlib's SVG writer, so the result is safe to mark safe."""
        svg = self.render("svg").decode()
        svg = svg[svg.index("<svg") :]
        # matplotlib's <style> sets stroke defaults on "*": inside HTML it would
        # restyle the whole page, and the figure does not need it.
        svg = re.sub(r"<style[^>]*>.*?</style>", "", svg, count=1, flags=re.S)
        svg = re.sub(
            r'<svg([^>]*?) width="[^"]*" height="[^"]*"',
            rf'<svg\1 class="plot" role="img" aria-labelledby="{self.name}-title"',
            svg,
            count=1,
        )
        title = _xml_escape(self.title)
        return re.sub(
            r"(<svg[^>]*>)",
            rf'\1<title id="{self.name}-title">{title}</title>',
            svg,
            count=1,
        )


def _xml_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def figure_response(figures: Sequence[Figure], name: str, fmt: str) -> HttpResponse:
    """The download of figure ``name`` in ``fmt`` as an attachment; 404 if the page
    has no such figure (e.g. a plot that only exists once a fit is done)."""
    found = next((f for f in figures if f.name == name), None)
    if found is None or fmt not in FORMATS:
        raise Http404("no such figure")
    response = HttpResponse(found.render(fmt), content_type=CONTENT_TYPES[fmt])
    response["Content-Disposition"] = f'attachment; filename="{name}.{fmt}"'
    return response


def shown(figures: Sequence[Figure], url: Callable[[str, str], str]) -> list[dict]:
    """Template context for ``portal/_figure.html``: each figure with its inline
    SVG and one download URL per format (``url(name, fmt)``)."""
    from django.utils.safestring import mark_safe

    return [
        {
            "figure": f,
            "svg": mark_safe(f.inline_svg()),  # noqa: S308 - escaped by matplotlib
            "links": [(fmt.upper(), url(f.name, fmt)) for fmt in FORMATS],
        }
        for f in figures
    ]


# ---------------------------------------------------------------------------- drawing


def _draw(fig: Figure, fmt: str) -> bytes:
    with matplotlib.rc_context(STYLE):
        height = fig.params.get("height") or DRAWERS[fig.kind][1](fig)
        mpl = MplFigure(figsize=(fig.params.get("width", WIDTH), height))
        ax = mpl.add_subplot()
        ax.set_title(fig.title)
        if fig.rows:
            DRAWERS[fig.kind][0](fig, ax)
            ax.set_xlabel(fig.xlabel)
            ax.set_ylabel(fig.ylabel)
        else:
            _empty(ax, fig.empty)
        out = io.BytesIO()
        # "tight" grows the canvas to every artist (outside legends, long tick
        # labels), so nothing is clipped and legends can sit outside the data.
        mpl.savefig(
            out,
            format=fmt,
            bbox_inches="tight",
            pad_inches=0.08,
            metadata={"Date": None} if fmt in ("svg", "pdf") else None,
        )
        return out.getvalue()


def _empty(ax: Axes, message: str) -> None:
    ax.set_axis_off()
    ax.text(
        0.5,
        0.5,
        message,
        ha="center",
        va="center",
        color="#475467",
        transform=ax.transAxes,
        gid="empty-state",
    )


def _pct(x: float, _pos: Any = None) -> str:
    return f"{x * 100:.0f}%"


def _legend_outside(ax: Axes, handles: list | None = None, below: bool = False) -> None:
    """Legends never sit on data: to the right of the axes, or below them."""
    kwargs: dict[str, Any] = {"handles": handles} if handles else {}
    if below:
        # Anchored a fixed distance under the axes (below tick labels and the
        # x label), whatever the figure's height.
        under = offset_copy(ax.transAxes, fig=ax.figure, y=-44, units="points")
        ax.legend(
            loc="upper left",
            bbox_to_anchor=(0.0, 0.0),
            bbox_transform=under,
            borderaxespad=0,
            **kwargs,
        )
    else:
        ax.legend(
            loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0, **kwargs
        )


def _fmt(value: float, unit: str) -> str:
    if unit == "%":
        return f"{value * 100:.0f}%"
    if unit == "s":
        return f"{value:.1f} s"
    if unit == "count":
        return f"{value:.0f}"
    return f"{value:.3g}"


def _height_rows(fig: Figure) -> float:
    return 1.0 + 0.32 * max(len(fig.rows), 1)


def _draw_hbars(fig: Figure, ax: Axes) -> None:
    """Rows (label, value): one labelled horizontal bar each, value printed at its
    end; ``params`` unit ('%', 's', 'count'), maximum, threshold (dashed line)."""
    unit = fig.params.get("unit", "")
    labels = [str(r[0]) for r in fig.rows]
    values = [r[1] for r in fig.rows]
    y = np.arange(len(labels))
    shown = [v if v is not None else 0.0 for v in values]
    ax.barh(
        y,
        shown,
        color=fig.params.get("color", BLUE),
        height=0.6,
        gid=f"{fig.name}-bars",
    )
    top = (
        fig.params.get("maximum")
        or max([v for v in values if v is not None] + [0])
        or 1.0
    )
    for yi, v in zip(y, values, strict=True):
        text = "no data" if v is None else _fmt(v, unit)
        ax.text((v or 0) + top * 0.01, yi, text, va="center", fontsize=FONT_SIZE - 1)
    ax.set_yticks(y, labels)
    ax.invert_yaxis()
    ax.set_xlim(0, top * 1.15)
    ax.grid(axis="y", visible=False)
    if unit == "%":
        ax.xaxis.set_major_formatter(FuncFormatter(_pct))
    if unit == "count":
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if fig.params.get("threshold") is not None:
        t = fig.params["threshold"]
        ax.axvline(
            t,
            color=VERMILLION,
            linestyle="--",
            linewidth=1,
            label=f"flag above {_fmt(t, unit)}",
        )
        _legend_outside(ax)


def _draw_grouped_bars(fig: Figure, ax: Axes) -> None:
    """Rows (group, series, rate, n, ci_lo, ci_hi): bars per group, one per
    series, 95% CI whiskers, rate and n printed above each bar."""
    groups = list(dict.fromkeys(r[0] for r in fig.rows))
    series = list(dict.fromkeys(r[1] for r in fig.rows))
    width = 0.8 / len(series)
    for j, s in enumerate(series):
        rows = {r[0]: r for r in fig.rows if r[1] == s}
        xs, hs, lo, hi, ns = [], [], [], [], []
        for i, g in enumerate(groups):
            r = rows.get(g)
            if r is None or r[2] is None:
                # Say so where the bar would be: a missing bar must not read as 0%.
                ax.text(
                    i - 0.4 + width * (j + 0.5),
                    0.02,
                    "no data",
                    rotation=90,
                    ha="center",
                    va="bottom",
                    fontsize=FONT_SIZE - 2,
                    color=GREY,
                )
                continue
            xs.append(i - 0.4 + width * (j + 0.5))
            hs.append(r[2])
            ns.append(r[3])
            lo.append(r[2] - (r[4] if r[4] is not None else r[2]))
            hi.append((r[5] if r[5] is not None else r[2]) - r[2])
        label = fig.params.get("series_labels", {}).get(s, s)
        ax.bar(
            xs,
            hs,
            width=width * 0.92,
            color=SERIES.get(s, PALETTE[j]),
            label=label,
            gid=f"{fig.name}-{s}",
        )
        ax.errorbar(
            xs, hs, yerr=[lo, hi], fmt="none", ecolor=INK, elinewidth=1, capsize=3
        )
        for x, h, n, up in zip(xs, hs, ns, hi, strict=True):
            ax.text(
                x,
                h + up + 0.02,
                f"{h * 100:.0f}%\nn={n}",
                ha="center",
                va="bottom",
                fontsize=FONT_SIZE - 2,
            )
    ax.set_xticks(
        range(len(groups)),
        [fig.params.get("group_labels", {}).get(g, g) for g in groups],
    )
    ax.set_ylim(0, 1.25)
    ax.set_yticks([0, 0.25, 0.5, 0.75, 1.0])
    ax.yaxis.set_major_formatter(FuncFormatter(_pct))
    ax.grid(axis="x", visible=False)
    _legend_outside(ax)


def _draw_reliability(fig: Figure, ax: Axes) -> None:
    """Rows (bin_lo, bin_hi, count, predicted, observed): one point per non-empty
    bin (area ~ count) joined by a line, against the diagonal of perfect
    calibration."""
    pts = [r for r in fig.rows if r[2] and r[3] is not None and r[4] is not None]
    ax.plot(
        [0, 1],
        [0, 1],
        color=GREY,
        linestyle="--",
        linewidth=1,
        label="perfect calibration",
    )
    if pts:
        total = sum(r[2] for r in pts)
        x = [r[3] for r in pts]
        y = [r[4] for r in pts]
        ax.plot(x, y, color=BLUE, linewidth=1.2)
        ax.scatter(
            x,
            y,
            s=[20 + 280 * r[2] / total for r in pts],
            color=BLUE,
            alpha=0.7,
            label="bin (area ∝ count)",
            gid=f"{fig.name}-points",
            zorder=3,
        )
    lim = fig.params.get("limits", (0.0, 1.0))
    ax.set_xlim(*lim)
    ax.set_ylim(0, 1)
    ax.set_aspect("equal" if lim == (0.0, 1.0) else "auto")
    ax.xaxis.set_major_formatter(
        FuncFormatter(_pct if fig.params.get("x_percent") else lambda v, _p: f"{v:g}")
    )
    ax.yaxis.set_major_formatter(FuncFormatter(_pct))
    _legend_outside(ax)


def _height_square(fig: Figure) -> float:
    return 3.6


def _draw_histogram(fig: Figure, ax: Axes) -> None:
    """Rows (bin_lo, bin_hi, count): adjacent bars from the axis up; ``params``
    markers {name: value} as labelled dashed lines."""
    lo = [r[0] for r in fig.rows]
    widths = [r[1] - r[0] for r in fig.rows]
    counts = [r[2] for r in fig.rows]
    ax.bar(
        lo,
        counts,
        width=widths,
        align="edge",
        color=SKY,
        edgecolor="white",
        linewidth=0.6,
        gid=f"{fig.name}-bars",
    )
    colours = iter((VERMILLION, PURPLE, GREEN))
    for name, value in fig.params.get("markers", {}).items():
        if value is not None and math.isfinite(value):
            ax.axvline(
                value,
                color=next(colours),
                linestyle="--",
                linewidth=1.2,
                label=f"{name} = {value:.3g}",
            )
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(axis="x", visible=False)
    if fig.params.get("markers"):
        _legend_outside(ax)


def _height_plain(fig: Figure) -> float:
    return 3.0


def _draw_item_curves(fig: Figure, ax: Axes) -> None:
    """Rows (criterion, question, gamma, beta): P(pass) = sigmoid(gamma (theta -
    beta)) per criterion and the gain curve (gamma-weighted mean, thick dashed).
    The legend, below the plot, names each criterion by its question."""
    g = np.array([r[2] for r in fig.rows], float)
    b = np.array([r[3] for r in fig.rows], float)
    lo, hi = float(min(b.min() - 3, -4)), float(max(b.max() + 3, 4))
    theta = np.linspace(lo, hi, 241)
    probs = 1.0 / (1.0 + np.exp(-g * (theta[:, None] - b)))
    for c, r in enumerate(fig.rows):
        label = "\n".join(textwrap.wrap(f"{r[0]} (β = {r[3]:.2f}): {r[1]}", 90))
        ax.plot(
            theta,
            probs[:, c],
            color=PALETTE[c % len(PALETTE)],
            label=label,
            gid=f"{fig.name}-{r[0]}",
        )
    gain = probs @ g / g.sum()
    ax.plot(
        theta,
        gain,
        color=INK,
        linewidth=2.6,
        linestyle="--",
        label="gain g(θ̃): γ-weighted mean",
        gid=f"{fig.name}-gain",
    )
    ax.set_xlim(lo, hi)
    ax.set_ylim(0, 1)
    ax.yaxis.set_major_formatter(FuncFormatter(_pct))
    _legend_outside(ax, below=True)


def _height_curves(fig: Figure) -> float:
    return 3.2 + 0.3 * len(fig.rows)


def _draw_forest(fig: Figure, ax: Axes) -> None:
    """Rows (system, value, ci_lo, ci_hi, rank_changed): one row per system, named
    on the axis, point estimate with its 95% interval; systems whose rank differs
    from their RCP-nDCG rank in orange."""
    names = [str(r[0]) for r in fig.rows]
    y = np.arange(len(names))
    for yi, r in zip(y, fig.rows, strict=True):
        colour = ORANGE if r[4] else BLUE
        if r[2] is not None and r[3] is not None:
            ax.plot(
                [r[2], r[3]],
                [yi, yi],
                color=colour,
                linewidth=3,
                solid_capstyle="round",
            )
        if r[1] is not None:
            ax.plot(
                [r[1]],
                [yi],
                "o",
                color=colour,
                markersize=6,
                markeredgecolor="white",
                gid=f"{fig.name}-point-{yi}",
            )
            ax.annotate(
                f"{r[1]:.3f}",
                (r[1], yi),
                xytext=(0, 6),
                textcoords="offset points",
                ha="center",
                fontsize=FONT_SIZE - 2,
            )
    ax.set_yticks(y, names)
    ax.set_ylim(len(names) - 0.4, -0.7)
    ax.grid(axis="y", visible=False)
    handles = [
        Patch(color=BLUE, label="same rank as RCP-nDCG"),
        Patch(color=ORANGE, label="rank differs from RCP-nDCG"),
    ]
    _legend_outside(ax, handles=handles, below=True)


def _height_forest(fig: Figure) -> float:
    return 1.4 + 0.4 * len(fig.rows)


MATRIX_CLASSES = {
    "better": (GREEN, "column better, p < 0.05"),
    "worse": (VERMILLION, "column worse, p < 0.05"),
    "open": ("#F2F4F7", "not separated"),
    "tie": ("#D0D5DD", "tie zone |Δ| < 0.02"),
}


def matrix_class(delta: float, separated: bool, tie_zone: bool) -> str:
    if tie_zone:
        return "tie"
    if separated:
        return "better" if delta > 0 else "worse"
    return "open"


def _draw_matrix(fig: Figure, ax: Axes) -> None:
    """Rows (row_system, column_system, delta, p, separated, tie_zone, class):
    cell (row A, column B) shows B − A in nDCG points, coloured by class."""
    names = list(fig.params["systems"])
    idx = {n: i for i, n in enumerate(names)}
    n = len(names)
    for r in fig.rows:
        i, j = idx[r[0]], idx[r[1]]
        colour, _label = MATRIX_CLASSES[r[6]]
        ax.add_patch(
            matplotlib.patches.Rectangle(
                (j - 0.48, i - 0.48),
                0.96,
                0.96,
                color=colour,
                gid=f"{fig.name}-cell-{r[6]}",
            )
        )
        ink = "white" if r[6] in ("better", "worse") else INK
        ax.text(
            j,
            i,
            f"{r[2] * 100:+.1f}",
            ha="center",
            va="center",
            color=ink,
            fontsize=FONT_SIZE - 1,
        )
    ax.set_xlim(-0.5, n - 0.5)
    ax.set_ylim(n - 0.5, -0.5)
    ax.set_xticks(range(n), names, rotation=35, ha="right")
    ax.set_yticks(range(n), names)
    ax.grid(visible=False)
    ax.set_aspect("equal")
    handles = [Patch(color=c, label=label) for c, label in MATRIX_CLASSES.values()]
    _legend_outside(ax, handles=handles)


def _height_matrix(fig: Figure) -> float:
    return 1.6 + 0.45 * len(fig.params.get("systems", ()))


DRAWERS: dict[str, tuple[Callable[[Figure, Axes], None], Callable[[Figure], float]]] = {
    "hbars": (_draw_hbars, _height_rows),
    "grouped_bars": (_draw_grouped_bars, _height_plain),
    "reliability": (_draw_reliability, _height_square),
    "histogram": (_draw_histogram, _height_plain),
    "item_curves": (_draw_item_curves, _height_curves),
    "forest": (_draw_forest, _height_forest),
    "matrix": (_draw_matrix, _height_matrix),
}
