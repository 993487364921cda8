"""The figures of the calibration pages, as data (drawn by portal/figures.py).

Each builder takes what the page already loaded and returns ``Figure`` objects
whose tables are exactly the numbers plotted; the page and the download view
call the same builder, so a downloaded CSV equals what the page shows.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from judging.prompts import CRITERIA
from portal.figures import Figure, matrix_class

from . import selectors
from .models import CalibrationFit

QUESTIONS = {c.label: c.question for c in CRITERIA}
TAU_BINS = 20


def fit_figures(*, fit: CalibrationFit, taus: Sequence[float]) -> list[Figure]:
    """Item curves, tau histogram, reliability diagram and coverage shares of one
    fit; a figure is left out while its data does not exist (pending fit, imported
    gains without items)."""
    figures = []
    items = fit.items or {}
    diag = fit.diagnostics or {}
    if items.get("gamma"):
        figures.append(
            Figure(
                name="item-curves",
                title="Item characteristic curves and the gain curve",
                kind="item_curves",
                columns=("criterion", "question", "gamma", "beta"),
                rows=tuple(
                    (c, QUESTIONS.get(c, ""), float(g), float(b))
                    for c, g, b in zip(
                        items["criteria"], items["gamma"], items["beta"], strict=True
                    )
                ),
                xlabel="calibrated ability θ̃ (logit scale)",
                ylabel="P(criterion passed) (%)",
            )
        )
    values = np.asarray([t for t in taus if t is not None and np.isfinite(t)], float)
    if values.size:
        lo, hi = float(values.min()), float(values.max())
        if hi - lo < 1e-9:
            lo, hi = lo - 0.5, hi + 0.5
        counts, edges = np.histogram(values, bins=TAU_BINS, range=(lo, hi))
        tau = diag.get("tau") or {}
        figures.append(
            Figure(
                name="tau",
                title="Per-query scale τ",
                kind="histogram",
                columns=("bin_lo", "bin_hi", "queries"),
                rows=tuple(
                    (float(a), float(b), int(c))
                    for a, b, c in zip(edges[:-1], edges[1:], counts, strict=True)
                ),
                xlabel="per-query scale τ (unitless multiplier)",
                ylabel="queries (count)",
                params={"markers": {"p5": tau.get("p5"), "p95": tau.get("p95")}},
            )
        )
    rel = diag.get("reliability") or {}
    if rel.get("bins"):
        figures.append(
            Figure(
                name="reliability",
                title="Reliability of predicted pass probabilities",
                kind="reliability",
                columns=("bin_lo", "bin_hi", "verdicts", "predicted", "observed"),
                rows=tuple(
                    (
                        b["lo"],
                        b["hi"],
                        b["count"],
                        b.get("predicted"),
                        b.get("observed"),
                    )
                    for b in rel["bins"]
                ),
                xlabel="predicted P(pass) (mean per bin, %)",
                ylabel="observed pass rate (%)",
                params={"x_percent": True},
            )
        )
    cov = diag.get("coverage")
    if cov:
        rows = (
            ("invalid Stage A windows", cov["invalid_share"]["tournament"]),
            ("invalid Stage B windows", cov["invalid_share"]["rubric"]),
            (
                "uncalibrated documents",
                cov["uncalibrated_documents"] / max(cov["documents"], 1),
            ),
        )
        figures.append(
            Figure(
                name="coverage",
                title="Coverage",
                kind="hbars",
                columns=("part", "share"),
                rows=tuple((label, float(v)) for label, v in rows),
                xlabel="share (%)",
                params={
                    "unit": "%",
                    "maximum": max(0.1, *(v for _l, v in rows)),
                    "threshold": 0.05,
                },
            )
        )
    return figures


def leaderboard_figures(*, board: dict, rows: list[dict]) -> list[Figure]:
    """Per metric: a forest plot of systems with 95% bootstrap intervals (system
    names on the axis, rank changes in orange) and the pair-separation matrix."""
    k = board["k"]
    figures = []
    for i, m in enumerate(selectors.METRICS):
        label = selectors.METRIC_LABELS[m]
        plot_rows = tuple(
            (
                r["system"],
                r["cells"][i]["value"],
                *(r["cells"][i]["ci"] or (None, None)),
                r["cells"][i]["change"] != 0,
            )
            for r in rows
        )
        if any(p[1] is not None for p in plot_rows):
            figures.append(
                Figure(
                    name=f"ci-{m.replace('_', '-')}",
                    title=f"{label}@{k} with 95% bootstrap intervals",
                    kind="forest",
                    columns=("system", "value", "ci_lo", "ci_hi", "rank_changed"),
                    rows=plot_rows,
                    xlabel=f"{label}@{k} (0–1, higher is better)",
                )
            )
    names = [s["system"] for s in board["systems"]]
    for m in selectors.METRICS:
        cells = []
        for p in board["pairs"]:
            if p["metric"] != m:
                continue
            delta = p["delta"] if p["delta"] is not None else 0.0
            for a, b, d in ((p["a"], p["b"], delta), (p["b"], p["a"], -delta)):
                cells.append(
                    (
                        a,
                        b,
                        d,
                        p["p"],
                        bool(p["separated"]),
                        bool(p["tie_zone"]),
                        matrix_class(d, p["separated"], p["tie_zone"]),
                    )
                )
        if cells:
            cells.sort(key=lambda c: (names.index(c[0]), names.index(c[1])))
            figures.append(
                Figure(
                    name=f"pairs-{m.replace('_', '-')}",
                    title=f"{selectors.METRIC_LABELS[m]}@{k}: column − row",
                    kind="matrix",
                    columns=(
                        "row_system",
                        "column_system",
                        "delta",
                        "p",
                        "separated",
                        "tie_zone",
                        "class",
                    ),
                    rows=tuple(cells),
                    xlabel="system B (column)",
                    ylabel="system A (row); cells: B − A in nDCG points",
                    params={"systems": names},
                )
            )
    return figures
