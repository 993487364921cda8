"""The figures of the study report page, as data (drawn by portal/figures.py).

The page and the download view call :func:`report_figures` with the same report,
so a downloaded CSV holds exactly the numbers the page plots.
"""

from __future__ import annotations

from portal.figures import Figure

CLASS_LABELS = {
    "both": "both metrics agree",
    "rcp": "only RCP agrees",
    "qrel": "only qrel agrees",
    "neither": "neither agrees",
    "tie": "verdict tie",
}
SERIES = {"rcp": "RCP-nDCG winner", "qrel": "qrel-nDCG winner"}
NO_GRADES = "No graded contests yet."
NO_DECIDED = "No decided contest yet: every graded contest is a tie."


def band_label(band: str) -> str:
    """``all``, ``lt_0.02``, ``ge_0.05`` -> ``all``, ``< 0.02``, ``≥ 0.05``."""
    if band == "all":
        return "all decided"
    kind, _sep, edge = band.partition("_")
    return {"lt": "< ", "ge": "≥ "}.get(kind, kind + " ") + edge


def report_figures(*, report: dict, annotators: list[dict]) -> list[Figure]:
    """Agreement by margin band, reliability of gains, verdict classes and the
    per-annotator figures. Before any grading every figure shows its empty state
    rather than zeros."""
    graded = report.get("contests_graded", report.get("contests", 0)) > 0
    rows = []
    if graded:
        for metric in ("rcp", "qrel"):
            for band, r in report["hit_rates"].get(metric, {}).items():
                ci = r.get("ci") or (None, None)
                rows.append((band, metric, r.get("rate"), r.get("n"), *ci))
    bins = tuple(
        (b["lo"], b["hi"], b["count"], b.get("predicted"), b.get("observed"))
        for b in report.get("reliability_bins", [])
    )
    classes = tuple(
        (CLASS_LABELS.get(k, k), int(v)) for k, v in report["verdict_classes"].items()
    )
    return [
        Figure(
            name="margin",
            title="Verdict agreement by metric margin",
            kind="grouped_bars",
            columns=("band", "metric", "rate", "contests", "ci_lo", "ci_hi"),
            rows=tuple(rows) if any(r[2] is not None for r in rows) else (),
            xlabel="|margin| band (difference in nDCG@k between the two lists)",
            ylabel="verdicts matching the metric's winner (%)",
            empty=NO_DECIDED if graded else NO_GRADES,
            params={
                "series_labels": SERIES,
                "group_labels": {r[0]: band_label(r[0]) for r in rows},
            },
        ),
        Figure(
            name="reliability",
            title="Reliability: gain against human grade",
            kind="reliability",
            columns=("gain_lo", "gain_hi", "grades", "mean_gain", "share_useful"),
            rows=bins if any(b[2] for b in bins) else (),
            xlabel="RCP gain (mean per bin, 0–1)",
            ylabel="grades useful or better (%)",
            empty=NO_GRADES,
        ),
        Figure(
            name="classes",
            title="Verdict classes",
            kind="hbars",
            columns=("class", "contests"),
            rows=classes if graded and any(v for _c, v in classes) else (),
            xlabel="contests (count)",
            empty=NO_GRADES,
            params={"unit": "count", "color": "#7F7F7F"},
        ),
        Figure(
            name="agreement",
            title="Per-annotator agreement with the panel verdict",
            kind="hbars",
            columns=("annotator", "panel_agreement"),
            rows=tuple((a["username"], a["panel_agreement"]) for a in annotators),
            xlabel="contests where the annotator's pick equals the panel verdict (%)",
            empty="No annotator has graded yet.",
            params={"unit": "%", "maximum": 1.0},
        ),
        Figure(
            name="seconds",
            title="Median time per document",
            kind="hbars",
            columns=("annotator", "median_seconds"),
            rows=tuple((a["username"], a["median_seconds"]) for a in annotators),
            xlabel="median seconds per document (s)",
            empty="No annotator has graded yet.",
            params={"unit": "s"},
        ),
    ]
