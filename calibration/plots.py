"""Server-rendered SVG plots for the calibration pages. No Django, no JavaScript.

Every function returns a complete ``<svg>`` string; labels are escaped here, so
callers may mark the result safe. Colours and sizes are plain constants so the
plots read well printed and on screen.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

import numpy as np
from scipy.special import expit

PALETTE = ["#2f5bd3", "#12a150", "#e08a00", "#c2334d", "#7a4cc2", "#667085"]
FONT = 'font-family="system-ui, sans-serif" font-size="11"'


def _svg(width: int, height: int, body: list[str], label: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" role="img" aria-label="{escape(label)}" '
        f'class="plot" {FONT}>' + "".join(body) + "</svg>"
    )


class _Axes:
    """Linear data -> pixel mapping inside a plot area with margins."""

    def __init__(
        self,
        width: int,
        height: int,
        x: tuple[float, float],
        y: tuple[float, float],
        margin: tuple[int, int, int, int] = (16, 16, 34, 44),  # top right bottom left
    ) -> None:
        self.w, self.h = width, height
        self.top, self.right, self.bottom, self.left = margin
        self.x0, self.x1 = x
        self.y0, self.y1 = y

    def px(self, x: float) -> float:
        span = (self.x1 - self.x0) or 1.0
        return self.left + (x - self.x0) / span * (self.w - self.left - self.right)

    def py(self, y: float) -> float:
        span = (self.y1 - self.y0) or 1.0
        return (
            self.h
            - self.bottom
            - (y - self.y0) / span * (self.h - self.top - self.bottom)
        )

    def frame(
        self, xlabel: str, ylabel: str, xticks: Sequence[float], yticks: Sequence[float]
    ) -> list[str]:
        out = [
            f'<rect x="{self.left}" y="{self.top}" width="{self.w - self.left - self.right}" '
            f'height="{self.h - self.top - self.bottom}" fill="#fff" stroke="#d0d5dd"/>'
        ]
        for t in xticks:
            x = self.px(t)
            out.append(
                f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{self.top}" y2="{self.h - self.bottom}" stroke="#f0f2f5"/>'
                f'<text x="{x:.1f}" y="{self.h - self.bottom + 14}" text-anchor="middle" fill="#667085">{t:g}</text>'
            )
        for t in yticks:
            y = self.py(t)
            out.append(
                f'<line x1="{self.left}" x2="{self.w - self.right}" y1="{y:.1f}" y2="{y:.1f}" stroke="#f0f2f5"/>'
                f'<text x="{self.left - 6}" y="{y + 4:.1f}" text-anchor="end" fill="#667085">{t:g}</text>'
            )
        out.append(
            f'<text x="{(self.left + self.w - self.right) / 2:.1f}" y="{self.h - 4}" '
            f'text-anchor="middle" fill="#344054">{escape(xlabel)}</text>'
            f'<text x="12" y="{(self.top + self.h - self.bottom) / 2:.1f}" text-anchor="middle" '
            f'fill="#344054" transform="rotate(-90 12 {(self.top + self.h - self.bottom) / 2:.1f})">'
            f"{escape(ylabel)}</text>"
        )
        return out

    def polyline(
        self, xs: np.ndarray, ys: np.ndarray, colour: str, extra: str = ""
    ) -> str:
        pts = " ".join(
            f"{self.px(x):.1f},{self.py(y):.1f}" for x, y in zip(xs, ys, strict=True)
        )
        return f'<polyline points="{pts}" fill="none" stroke="{colour}" stroke-width="2" {extra}/>'


def _ticks(lo: float, hi: float, n: int = 6) -> list[float]:
    step = (hi - lo) / max(n - 1, 1)
    mag = 10 ** np.floor(np.log10(step)) if step > 0 else 1.0
    step = min((m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= step), default=step)
    start = np.ceil(lo / step) * step
    return [round(float(t), 6) for t in np.arange(start, hi + step / 2, step)]


def item_curves_svg(
    gamma: Sequence[float],
    beta: Sequence[float],
    labels: Sequence[str],
    *,
    width: int = 560,
    height: int = 300,
) -> str:
    """Item characteristic curves P_c(theta) = sigmoid(gamma_c (theta - beta_c)) of
    every criterion, plus the RCP gain curve g(theta) (thick, dashed)."""
    g, b = np.asarray(gamma, float), np.asarray(beta, float)
    lo, hi = float(min(b.min() - 3, -4)), float(max(b.max() + 3, 4))
    theta = np.linspace(lo, hi, 121)
    probs = expit(g * (theta[:, None] - b))
    gain = probs @ g / g.sum()
    ax = _Axes(width, height, (lo, hi), (0.0, 1.0), margin=(16, 110, 34, 44))
    body = ax.frame(
        "calibrated ability θ̃", "P(pass)", _ticks(lo, hi), [0, 0.25, 0.5, 0.75, 1]
    )
    for c, label in enumerate(labels):
        colour = PALETTE[c % len(PALETTE)]
        body.append(ax.polyline(theta, probs[:, c], colour))
        y = ax.top + 14 + 16 * c
        body.append(
            f'<line x1="{width - 100}" x2="{width - 80}" y1="{y - 4}" y2="{y - 4}" stroke="{colour}" stroke-width="2"/>'
            f'<text x="{width - 76}" y="{y}">{escape(label)} β={b[c]:.2f}</text>'
        )
    body.append(
        ax.polyline(
            theta,
            gain,
            "#1d2330",
            'stroke-width="3" stroke-dasharray="6 4" class="gain-curve"',
        )
    )
    y = ax.top + 14 + 16 * len(labels)
    body.append(
        f'<line x1="{width - 100}" x2="{width - 80}" y1="{y - 4}" y2="{y - 4}" stroke="#1d2330" stroke-width="3" stroke-dasharray="6 4"/>'
        f'<text x="{width - 76}" y="{y}">gain g(θ̃)</text>'
    )
    return _svg(width, height, body, "item characteristic curves and gain curve")


def histogram_svg(
    values: Sequence[float],
    *,
    bins: int = 20,
    markers: dict[str, float] | None = None,
    xlabel: str = "",
    width: int = 420,
    height: int = 220,
) -> str:
    """Histogram of ``values`` with labelled vertical markers (e.g. p5 / p95)."""
    v = np.asarray([x for x in values if x is not None and np.isfinite(x)], float)
    if v.size == 0:
        return _svg(
            width, height, ['<text x="20" y="30">no values</text>'], "empty histogram"
        )
    lo, hi = float(v.min()), float(v.max())
    if hi - lo < 1e-9:
        lo, hi = lo - 0.5, hi + 0.5
    counts, edges = np.histogram(v, bins=bins, range=(lo, hi))
    ax = _Axes(width, height, (lo, hi), (0, float(counts.max()) * 1.1))
    body = ax.frame(xlabel, "count", _ticks(lo, hi, 5), _ticks(0, counts.max(), 4))
    for c, a, b in zip(counts, edges[:-1], edges[1:], strict=True):
        if c:
            body.append(
                f'<rect class="bar" x="{ax.px(a):.1f}" y="{ax.py(c):.1f}" width="{max(ax.px(b) - ax.px(a) - 1, 1):.1f}" '
                f'height="{ax.py(0) - ax.py(c):.1f}" fill="#9bb1ec"><title>{a:.3g}–{b:.3g}: {c}</title></rect>'
            )
    for name, x in (markers or {}).items():
        if x is None:
            continue
        px = ax.px(x)
        body.append(
            f'<line x1="{px:.1f}" x2="{px:.1f}" y1="{ax.top}" y2="{ax.py(0):.1f}" stroke="#c2334d" stroke-dasharray="4 3"/>'
            f'<text x="{px + 3:.1f}" y="{ax.top + 12}" fill="#c2334d">{escape(name)} {x:.2f}</text>'
        )
    return _svg(width, height, body, f"histogram of {xlabel}")


def reliability_svg(
    bins: Sequence[dict], *, width: int = 360, height: int = 320
) -> str:
    """Reliability diagram: observed pass rate vs mean predicted probability per bin
    (circle area ~ count), with the diagonal of perfect calibration."""
    ax = _Axes(width, height, (0.0, 1.0), (0.0, 1.0))
    ticks = [0, 0.2, 0.4, 0.6, 0.8, 1]
    body = ax.frame("predicted P(pass)", "observed pass rate", ticks, ticks)
    body.append(
        f'<line x1="{ax.px(0)}" y1="{ax.py(0)}" x2="{ax.px(1)}" y2="{ax.py(1)}" stroke="#98a2b3" stroke-dasharray="4 3"/>'
    )
    total = sum(b["count"] for b in bins) or 1
    pts = [b for b in bins if b.get("count")]
    if pts:
        body.append(
            ax.polyline(
                np.array([b["predicted"] for b in pts]),
                np.array([b["observed"] for b in pts]),
                "#2f5bd3",
            )
        )
    for b in pts:
        r = 3 + 9 * np.sqrt(b["count"] / total)
        body.append(
            f'<circle class="bin" cx="{ax.px(b["predicted"]):.1f}" cy="{ax.py(b["observed"]):.1f}" r="{r:.1f}" '
            f'fill="#2f5bd3" fill-opacity="0.55"><title>{b["lo"]:.1f}–{b["hi"]:.1f}: n={b["count"]}, '
            f"predicted {b['predicted']:.3f}, observed {b['observed']:.3f}</title></circle>"
        )
    return _svg(width, height, body, "reliability diagram")


def ci_bars_svg(
    rows: Sequence[dict],
    *,
    title: str,
    width: int = 300,
    row_height: int = 26,
) -> str:
    """Forest plot of one metric: per row ``name``, ``value``, ``ci`` [lo, hi] and an
    optional ``changed`` flag (rank differs from RCP) drawn in a warning colour."""
    vals = [r["value"] for r in rows if r.get("value") is not None]
    cis = [c for r in rows if r.get("ci") for c in r["ci"]]
    lo = min(vals + cis, default=0.0)
    hi = max(vals + cis, default=1.0)
    pad = max((hi - lo) * 0.1, 0.02)
    lo, hi = max(0.0, lo - pad), min(1.0, hi + pad)
    height = 30 + row_height * len(rows) + 24
    ax = _Axes(width, height, (lo, hi), (0, 1), margin=(26, 14, 24, 14))
    body = [
        f'<text x="{width / 2}" y="14" text-anchor="middle" font-weight="600">{escape(title)}</text>'
    ]
    for t in _ticks(lo, hi, 4):
        x = ax.px(t)
        body.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="22" y2="{height - 22}" stroke="#f0f2f5"/>'
            f'<text x="{x:.1f}" y="{height - 8}" text-anchor="middle" fill="#667085">{t:g}</text>'
        )
    for i, r in enumerate(rows):
        y = 30 + row_height * i + row_height / 2
        colour = "#e08a00" if r.get("changed") else "#2f5bd3"
        cls = "ci changed" if r.get("changed") else "ci"
        if r.get("ci"):
            a, b = r["ci"]
            body.append(
                f'<line class="{cls}" x1="{ax.px(a):.1f}" x2="{ax.px(b):.1f}" y1="{y:.1f}" y2="{y:.1f}" '
                f'stroke="{colour}" stroke-width="3" stroke-linecap="round"/>'
            )
        if r.get("value") is not None:
            body.append(
                f'<circle cx="{ax.px(r["value"]):.1f}" cy="{y:.1f}" r="5" fill="{colour}">'
                f"<title>{escape(r['name'])}: {r['value']:.4f}</title></circle>"
            )
    return _svg(width, height, body, f"{title} with 95% intervals")


def pair_matrix_svg(
    names: Sequence[str],
    cells: dict[tuple[str, str], dict],
    *,
    title: str,
    cell: int = 34,
) -> str:
    """System x system matrix for one metric. Cell (row a, column b) shows b - a:
    separated pairs (p < 0.05) in strong colour (green if b is better), the 0.02 tie
    zone hatched grey, other pairs pale; the delta is printed in the cell."""
    label_w = max([len(n) for n in names] + [4]) * 7 + 10
    width = label_w + cell * len(names) + 10
    height = label_w + cell * len(names) + 30
    body = [
        '<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">'
        '<rect width="6" height="6" fill="#f2f4f7"/><line x1="0" y1="0" x2="0" y2="6" stroke="#d0d5dd" stroke-width="2"/></pattern></defs>',
        f'<text x="{width / 2}" y="14" text-anchor="middle" font-weight="600">{escape(title)}</text>',
    ]
    top = label_w + 20
    for i, n in enumerate(names):
        x = label_w + cell * i + cell / 2
        body.append(
            f'<text x="{x:.1f}" y="{top - 6}" transform="rotate(-60 {x:.1f} {top - 6})">{escape(n)}</text>'
            f'<text x="{label_w - 6}" y="{top + cell * i + cell / 2 + 4:.1f}" text-anchor="end">{escape(n)}</text>'
        )
    for i, a in enumerate(names):
        for j, b in enumerate(names):
            x, y = label_w + cell * j, top + cell * i
            if i == j:
                body.append(
                    f'<rect x="{x}" y="{y}" width="{cell - 2}" height="{cell - 2}" fill="#fff" stroke="#eaecf0"/>'
                )
                continue
            c = cells.get((a, b))
            if c is None:
                continue
            delta = c["delta"]
            if c["tie_zone"]:
                fill, cls = "url(#hatch)", "tie"
            elif c["separated"]:
                fill, cls = ("#12a150" if delta > 0 else "#c2334d"), "separated"
            else:
                fill, cls = ("#b7e4c7" if delta > 0 else "#f4c7cf"), "open"
            text_fill = "#fff" if cls == "separated" else "#1d2330"
            p = "n/a" if c["p"] is None else f"{c['p']:.3g}"
            body.append(
                f'<rect class="cell {cls}" x="{x}" y="{y}" width="{cell - 2}" height="{cell - 2}" fill="{fill}">'
                f"<title>{escape(b)} − {escape(a)}: Δ {delta:+.4f}, p {p}</title></rect>"
                f'<text x="{x + cell / 2 - 1:.1f}" y="{y + cell / 2 + 3:.1f}" text-anchor="middle" '
                f'font-size="9" fill="{text_fill}">{delta * 100:+.1f}</text>'
            )
    return _svg(width, height, body, f"pair separation matrix, {title}")


def coverage_bars_svg(parts: Sequence[tuple[str, float]], *, width: int = 420) -> str:
    """Horizontal share bars (0..1), e.g. invalid-window share per stage."""
    height = 20 + 24 * len(parts)
    body = []
    for i, (label, share) in enumerate(parts):
        y = 10 + 24 * i
        w = (width - 190) * max(0.0, min(1.0, share))
        colour = "#c2334d" if share > 0.05 else "#12a150"
        body.append(
            f'<text x="0" y="{y + 13}">{escape(label)}</text>'
            f'<rect x="150" y="{y}" width="{width - 190}" height="16" fill="#f2f4f7"/>'
            f'<rect class="share" x="150" y="{y}" width="{w:.1f}" height="16" fill="{colour}"/>'
            f'<text x="{width - 34}" y="{y + 13}">{share * 100:.1f}%</text>'
        )
    return _svg(width, height, body, "coverage")
