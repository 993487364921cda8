"""Server-rendered SVG plots of a study report (no scripts, no CDN).

Each function takes parts of the ``study_report`` dict and returns SVG markup; every
label is escaped, every number formatted here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

W, H, PAD = 520, 220, 40
COLORS = {"rcp": "#2563eb", "qrel": "#d97706", "other": "#6b7280"}


def _svg(title: str, body: list[str], height: int = H) -> str:
    return (
        f'<svg class="plot" viewBox="0 0 {W} {height}" role="img" '
        f'aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg">'
        f"<title>{escape(title)}</title>" + "".join(body) + "</svg>"
    )


def _text(x: float, y: float, text: str, anchor: str = "middle", size: int = 11) -> str:
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" '
        f'text-anchor="{anchor}">{escape(text)}</text>'
    )


def _axes(height: int = H) -> list[str]:
    bottom = height - PAD
    return [
        f'<path d="M{PAD},{PAD / 2} V{bottom} H{W - PAD / 2}" '
        'fill="none" stroke="#333" stroke-width="1"/>',
        _text(PAD - 4, bottom + 4, "0", "end"),
        _text(PAD - 4, PAD / 2 + 4, "1", "end"),
    ]


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{x:.0%}"


def agreement_by_margin(hit_rates: Mapping[str, Mapping[str, Any]]) -> str:
    """Grouped bars: share of verdicts matching each metric's winner, by margin band,
    RCP next to qrel, with 95% CI whiskers."""
    bands = list(hit_rates.get("rcp", {}))
    body = _axes()
    plot_h = H - 1.5 * PAD
    slot = (W - 1.5 * PAD) / max(len(bands), 1)
    for i, band in enumerate(bands):
        x0 = PAD + i * slot
        for j, metric in enumerate(("rcp", "qrel")):
            r = hit_rates[metric][band]
            rate = r.get("rate")
            x = x0 + slot * (0.15 + 0.35 * j)
            if rate is not None:
                h = rate * plot_h
                body.append(
                    f'<rect class="bar-{metric}" x="{x:.1f}" y="{H - PAD - h:.1f}" '
                    f'width="{slot * 0.3:.1f}" height="{h:.1f}" '
                    f'fill="{COLORS[metric]}"><title>{metric} {escape(band)}: '
                    f"{_pct(rate)} of {r.get('n')}</title></rect>"
                )
                ci = r.get("ci")
                if ci:
                    cx = x + slot * 0.15
                    body.append(
                        f'<path d="M{cx:.1f},{H - PAD - ci[0] * plot_h:.1f} '
                        f'V{H - PAD - ci[1] * plot_h:.1f}" stroke="#111"/>'
                    )
                body.append(_text(x + slot * 0.15, H - PAD - h - 4, _pct(rate)))
        label = band.replace("_", " ").replace("ge ", "≥ ").replace("lt ", "< ")
        body.append(_text(x0 + slot / 2, H - PAD + 16, label))
    body.append(_text(W - PAD, PAD / 2 + 10, "RCP", "end"))
    body.append(
        f'<rect x="{W - PAD - 60}" y="{PAD / 2 + 2}" width="10" height="10" '
        f'fill="{COLORS["rcp"]}"/>'
    )
    body.append(_text(W - PAD, PAD / 2 + 26, "qrel", "end"))
    body.append(
        f'<rect x="{W - PAD - 60}" y="{PAD / 2 + 18}" width="10" height="10" '
        f'fill="{COLORS["qrel"]}"/>'
    )
    return _svg("Verdict agreement by metric margin, RCP vs qrel", body)


def reliability_diagram(bins: Sequence[Mapping[str, Any]]) -> str:
    """Observed share of "useful or better" grades against the mean gain per bin;
    the diagonal is perfect calibration, dot area follows the bin count."""
    body = _axes()
    side_w, side_h = W - 1.5 * PAD, H - 1.5 * PAD
    body.append(
        f'<path d="M{PAD},{H - PAD} L{PAD + side_w:.1f},{PAD / 2}" '
        'stroke="#aaa" stroke-dasharray="4 3" fill="none"/>'
    )
    total = sum(b.get("count", 0) for b in bins) or 1
    points = []
    for b in bins:
        if b.get("predicted") is None:
            continue
        x = PAD + b["predicted"] * side_w
        y = H - PAD - b["observed"] * side_h
        points.append(f"{x:.1f},{y:.1f}")
        radius = 2 + 8 * (b["count"] / total) ** 0.5
        body.append(
            f'<circle class="bin" cx="{x:.1f}" cy="{y:.1f}" r="{radius:.1f}" '
            f'fill="{COLORS["rcp"]}"><title>gain {b["lo"]:.1f}–{b["hi"]:.1f}: '
            f"{b['count']} grades, observed {_pct(b['observed'])}</title></circle>"
        )
    if points:
        body.append(
            f'<polyline points="{" ".join(points)}" fill="none" '
            f'stroke="{COLORS["rcp"]}"/>'
        )
    body.append(_text(W / 2, H - 8, "RCP gain (mean per bin)"))
    body.append(_text(PAD + 4, PAD / 2 + 12, "share graded useful or better", "start"))
    return _svg("Reliability diagram: gain vs human grade", body)


def horizontal_bars(
    title: str,
    rows: Sequence[tuple[str, float | None]],
    *,
    maximum: float | None = None,
    fmt: str = "{:.0%}",
) -> str:
    """One labelled horizontal bar per row (verdict classes, per-annotator figures)."""
    height = max(60, 24 * len(rows) + 20)
    values = [v for _l, v in rows if v is not None]
    top = maximum or (max(values) if values else 1.0) or 1.0
    label_w = 150
    span = W - label_w - 70
    body = []
    for i, (label, value) in enumerate(rows):
        y = 10 + 24 * i
        body.append(_text(label_w - 6, y + 13, label, "end"))
        if value is None:
            body.append(_text(label_w + 4, y + 13, "–", "start"))
            continue
        width = span * value / top
        body.append(
            f'<rect class="hbar" x="{label_w}" y="{y}" width="{width:.1f}" '
            f'height="16" fill="{COLORS["other"]}"/>'
        )
        body.append(_text(label_w + width + 4, y + 13, fmt.format(value), "start"))
    return _svg(title, body, height)


def verdict_classes(classes: Mapping[str, int]) -> str:
    labels = {
        "both": "both metrics agree",
        "rcp": "only RCP agrees",
        "qrel": "only qrel agrees",
        "neither": "neither agrees",
        "tie": "verdict tie",
    }
    rows = [(labels.get(k, k), float(v)) for k, v in classes.items()]
    return horizontal_bars("Verdict classes", rows, fmt="{:.0f}")
