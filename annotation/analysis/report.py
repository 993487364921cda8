"""Whole-study report from plain frozen-dataclass inputs (issue 6, DESIGN "Human
studies"). Deterministic: no randomness, inputs re-sorted where order could matter."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from annotation.analysis.agreement import (
    MARGIN_BANDS,
    disagreement_mask,
    disagreement_measure,
    hit_rates,
    loo_range,
    main_measure,
    margin_auc,
)
from annotation.analysis.label_quality import (
    ECE_BINS,
    USEFUL_GRADE,
    ece,
    label_auc,
    matched_flag_recall,
    query_spearman,
)
from annotation.analysis.picks import (
    PICKS,
    TIE_MARGIN,
    annotator_pick,
    displayed_docs,
)
from annotation.analysis.quality import FlagRules, ReviewSummary, annotator_quality
from annotation.analysis.reliability import (
    balanced_units,
    icc1k,
    krippendorff_alpha,
    pick_agreement,
    within_one_share,
)
from annotation.analysis.rules import verdict_by_rule
from annotation.analysis.severity import rasch_severity
from annotation.analysis.slices import inference_section
from annotation.analysis.verdicts import (
    VERDICT_CLASSES,
    ContestMetrics,
    contest_metrics,
    verdict_class,
)

__all__ = ["Annotation", "Contest", "StudyConfig", "json_safe", "study_report"]


@dataclass(frozen=True)
class Contest:
    """One query and two top-k lists, with the labels of its displayed documents.

    ``gains`` (RCP, in [0, 1]) must cover every displayed document; missing ``qrels``
    are unjudged (0). ``displayed`` defaults to the union of both top-k lists.
    ``bt_raw``/``calibrated`` (optional) feed the per-query Spearman.
    """

    contest_id: str
    query_id: str
    list_a: tuple[str, ...]
    list_b: tuple[str, ...]
    gains: Mapping[str, float]
    qrels: Mapping[str, float] = field(default_factory=dict)
    displayed: tuple[str, ...] = ()
    bt_raw: Mapping[str, float] = field(default_factory=dict)
    calibrated: Mapping[str, float] = field(default_factory=dict)
    design_cell: str = ""
    # Optional context for the report's slices (issue 14): dataset and system names.
    dataset: str = ""
    system_a: str = ""
    system_b: str = ""
    # A published study (reference layout) gives the shown metrics instead of lists
    # and gains: (rcp margin, qrel margin, rcp winner, qrel winner). Then no label
    # quality is computed, and reliability uses the grades as given.
    shown_metrics: tuple[float, float, str, str] | None = None


@dataclass(frozen=True)
class Annotation:
    """One annotator's review of one contest: a grade per displayed document, optional
    within-grade order (1 = best), seconds and raw answers per document."""

    contest_id: str
    annotator: str
    grades: Mapping[str, int]
    within_order: Mapping[str, int] = field(default_factory=dict)
    seconds: Mapping[str, float] = field(default_factory=dict)
    answers: Mapping[str, Any] = field(default_factory=dict)  # e.g. {"C1": True, ...}
    valid: bool = True
    pick: str | None = None  # a published pick ("A", "B", "tie"); else from grades


@dataclass(frozen=True)
class StudyConfig:
    """Analysis constants (DESIGN defaults: top-5, tie margin 1e-9, useful = grade 2)."""

    k: int = 5
    tie_margin: float = TIE_MARGIN
    useful_grade: float = USEFUL_GRADE
    bands: tuple[float, ...] = MARGIN_BANDS
    ece_bins: int = ECE_BINS
    flag_rules: FlagRules = FlagRules()
    severity: bool = False  # add the many-facet Rasch section (analysis.severity)
    # Issue 14: how picks become verdicts ("majority" | "plurality", rules.py) and
    # the system whose slices the inference section adds ("" = none).
    verdict_rule: str = "majority"
    focus_system: str = ""


def json_safe(value: Any) -> Any:
    """Plain JSON types: numpy scalars to Python, tuples to lists, NaN/inf to None."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _frozen(answer: Any) -> Hashable:
    """Raw answers as stored (a JSON dict or list) become comparable tuples."""
    if isinstance(answer, Mapping):
        return tuple(sorted((str(k), _frozen(v)) for k, v in answer.items()))
    if isinstance(answer, list | tuple):
        return tuple(_frozen(v) for v in answer)
    return answer


def _consistent(store: dict, key: tuple[str, str], value: float, what: str) -> None:
    if key in store and store[key] != value:
        raise ValueError(f"conflicting {what} for {key}: {store[key]} vs {value}")
    store[key] = value


@dataclass
class _Collected:
    """Everything the sections need, gathered in one pass over the contests."""

    rows: list[dict] = field(default_factory=list)  # one per contest
    panel: list[list[tuple[str, str]]] = field(
        default_factory=list
    )  # (annotator, pick)
    picks: list[str] = field(default_factory=list)  # every individual pick ...
    pick_rcp_margin: list[float] = field(default_factory=list)  # ... its contest's
    pick_qrel_margin: list[float] = field(default_factory=list)  # margins
    units: list[list[int]] = field(default_factory=list)  # grades per (contest, doc)
    summaries: list[ReviewSummary] = field(default_factory=list)
    doc_grades: dict[tuple[str, str], list[int]] = field(
        default_factory=lambda: defaultdict(list)
    )  # keyed (query, doc) across contests
    doc_gain: dict[tuple[str, str], float] = field(default_factory=dict)
    doc_qrel: dict[tuple[str, str], float] = field(default_factory=dict)
    doc_bt: dict[tuple[str, str], float] = field(default_factory=dict)
    doc_cal: dict[tuple[str, str], float] = field(default_factory=dict)


def _valid_reviews(
    contests: Sequence[Contest], annotations: Sequence[Annotation]
) -> dict[str, list[Annotation]]:
    ids = {c.contest_id for c in contests}
    if len(ids) != len(contests):
        raise ValueError("duplicate contest ids")
    reviews: dict[str, list[Annotation]] = defaultdict(list)
    seen: set[tuple[str, str]] = set()
    for a in annotations:
        if a.contest_id not in ids:
            raise ValueError(f"annotation for unknown contest {a.contest_id!r}")
        if (a.contest_id, a.annotator) in seen:
            raise ValueError(f"{a.annotator!r} reviewed {a.contest_id!r} twice")
        seen.add((a.contest_id, a.annotator))
        if a.valid:
            reviews[a.contest_id].append(a)
    for revs in reviews.values():
        revs.sort(key=lambda a: a.annotator)  # input order never matters
    return reviews


def _published(c: Contest, revs: list[Annotation], out: _Collected) -> ContestMetrics:
    """Metrics of a published contest as given, and its grades as reliability units
    (one per graded document, the grades of the reviews that graded it)."""
    rcp_margin, qrel_margin, rcp_winner, qrel_winner = c.shown_metrics  # type: ignore[misc]
    for w in (rcp_winner, qrel_winner):
        if w not in PICKS:
            raise ValueError(f"contest {c.contest_id!r}: unknown winner {w!r}")
    for a in revs:
        if a.pick not in PICKS:
            raise ValueError(f"contest {c.contest_id!r}: review without a valid pick")
    for d in sorted({d for a in revs for d in a.grades}):
        out.units.append([a.grades[d] for a in revs if d in a.grades])
    return ContestMetrics(
        float(rcp_margin), float(qrel_margin), str(rcp_winner), str(qrel_winner)
    )


def _collect(
    contests: Sequence[Contest],
    reviews: Mapping[str, list[Annotation]],
    cfg: StudyConfig,
) -> _Collected:
    out = _Collected()
    for c in contests:
        revs = reviews.get(c.contest_id, [])
        if c.shown_metrics is not None:
            m = _published(c, revs, out)
            shown: tuple[str, ...] = ()
        else:
            shown = c.displayed or displayed_docs(c.list_a, c.list_b, k=cfg.k)
            missing = [d for d in shown if d not in c.gains]
            if missing:
                raise ValueError(f"contest {c.contest_id!r} lacks gains for {missing}")
            m = contest_metrics(
                c.list_a,
                c.list_b,
                c.gains,
                c.qrels,
                k=cfg.k,
                displayed=shown,
                tie_margin=cfg.tie_margin,
            )
        picks = [
            a.pick
            if a.pick is not None
            else annotator_pick(
                c.list_a,
                c.list_b,
                a.grades,
                k=cfg.k,
                tie_margin=cfg.tie_margin,
                within_order=a.within_order,
                displayed=shown,
            ).choice
            for a in revs
        ]
        out.panel.append([(a.annotator, p) for a, p in zip(revs, picks, strict=True)])
        out.picks.extend(picks)
        out.pick_rcp_margin.extend([m.rcp_margin] * len(picks))
        out.pick_qrel_margin.extend([m.qrel_margin] * len(picks))
        out.summaries.extend(
            ReviewSummary(
                contest_id=c.contest_id,
                annotator=a.annotator,
                pick=p,
                seconds=tuple(float(a.seconds[d]) for d in shown if d in a.seconds),
                answers=tuple(_frozen(a.answers.get(d, a.grades[d])) for d in shown),
            )
            for a, p in zip(revs, picks, strict=True)
        )
        for d in shown:
            key = (c.query_id, d)
            grades = [a.grades[d] for a in revs]
            out.units.append(grades)
            out.doc_grades[key].extend(grades)
            _consistent(out.doc_gain, key, float(c.gains[d]), "gains")
            _consistent(out.doc_qrel, key, float(c.qrels.get(d, 0.0)), "qrels")
            if d in c.bt_raw:
                _consistent(out.doc_bt, key, float(c.bt_raw[d]), "raw BT scores")
            if d in c.calibrated:
                _consistent(out.doc_cal, key, float(c.calibrated[d]), "calibrated")
        # A contest nobody has graded yet has no verdict (None, class "ungraded"):
        # counting it as a tie would invent human judgments.
        verdict = verdict_by_rule(picks, cfg.verdict_rule) if picks else None
        out.rows.append(
            {
                "contest_id": c.contest_id,
                "query_id": c.query_id,
                "dataset": c.dataset,
                "system_a": c.system_a,
                "system_b": c.system_b,
                "design_cell": c.design_cell,
                "picks": {p: picks.count(p) for p in ("A", "B", "tie")},
                "verdict": verdict,
                "rcp_margin": m.rcp_margin,
                "qrel_margin": m.qrel_margin,
                "rcp_winner": m.rcp_winner,
                "qrel_winner": m.qrel_winner,
                "class": (
                    verdict_class(verdict, m.rcp_winner, m.qrel_winner)
                    if verdict is not None
                    else "ungraded"
                ),
            }
        )
    return out


def _agreement_section(col: _Collected, cfg: StudyConfig) -> dict:
    rows = [r for r in col.rows if r["verdict"] is not None]  # graded contests only
    verdicts = [r["verdict"] for r in rows]
    clusters = [r["query_id"] for r in rows]
    rcp_w = [r["rcp_winner"] for r in rows]
    qrel_w = [r["qrel_winner"] for r in rows]
    rcp_m = [r["rcp_margin"] for r in rows]
    qrel_m = [r["qrel_margin"] for r in rows]

    def main_of(sel: list[int]) -> dict:
        return main_measure(
            [verdicts[i] for i in sel],
            [rcp_w[i] for i in sel],
            [qrel_w[i] for i in sel],
            [clusters[i] for i in sel],
        ).as_dict()

    dis_idx = [i for i, x in enumerate(disagreement_mask(rcp_w, qrel_w)) if x]
    edge = cfg.bands[0] if cfg.bands else 0.0
    smaller = {i: min(abs(rcp_m[i]), abs(qrel_m[i])) for i in dis_idx}
    cells = sorted({r["design_cell"] for r in rows if r["design_cell"]})
    return {
        "verdicts": {v: verdicts.count(v) for v in ("A", "B", "tie")},
        "verdict_classes": {
            v: sum(r["class"] == v for r in rows) for v in VERDICT_CLASSES
        },
        "main": main_of(list(range(len(rows)))),
        "disagreements": disagreement_measure(
            verdicts, rcp_w, qrel_w, clusters
        ).as_dict(),
        "disagreements_by_margin": {
            f"both_ge_{edge:.2f}": main_of([i for i in dis_idx if smaller[i] >= edge]),
            f"any_lt_{edge:.2f}": main_of([i for i in dis_idx if smaller[i] < edge]),
        },
        "main_by_design_cell": {
            cell: main_of([i for i, r in enumerate(rows) if r["design_cell"] == cell])
            for cell in cells
        },
        "hit_rates": {
            name: {
                band: r.as_dict()
                for band, r in hit_rates(
                    verdicts, w, mg, clusters, bands=cfg.bands
                ).items()
            }
            for name, w, mg in (("rcp", rcp_w, rcp_m), ("qrel", qrel_w, qrel_m))
        },
        "margin_auc": {
            "rcp": margin_auc(col.pick_rcp_margin, col.picks),
            "qrel": margin_auc(col.pick_qrel_margin, col.picks),
            "picks": sum(p in ("A", "B") for p in col.picks),
        },
        # Panels of the graded contests, aligned with rows (an open study has
        # ungraded contests, whose empty panels would misalign the winners).
        "loo_range": loo_range(
            [p for p, r in zip(col.panel, col.rows, strict=True) if r["verdict"]],
            rcp_w,
            qrel_w,
            clusters,
        ),
    }


def _label_section(col: _Collected, cfg: StudyConfig) -> dict:
    graded = [k for k in sorted(col.doc_grades) if col.doc_grades[k]]
    mean_grade = np.array([np.mean(col.doc_grades[k]) for k in graded])
    exact_grade = [
        Fraction(int(sum(col.doc_grades[k])), len(col.doc_grades[k])) for k in graded
    ]
    useful = mean_grade >= cfg.useful_grade
    gains = np.array([col.doc_gain[k] for k in graded])
    qrels = np.array([col.doc_qrel[k] for k in graded])
    # One prediction per individual grade: P(this annotator says useful or better).
    obs_gain = [col.doc_gain[k] for k in graded for _ in col.doc_grades[k]]
    obs_useful = [g >= cfg.useful_grade for k in graded for g in col.doc_grades[k]]
    calib = ece(obs_gain, obs_useful, bins=cfg.ece_bins)

    def spearman(scores: dict[tuple[str, str], float]) -> float | None:
        idx = [i for i, k in enumerate(graded) if k in scores]
        return query_spearman(
            [graded[i][0] for i in idx],
            [scores[graded[i]] for i in idx],
            [exact_grade[i] for i in idx],
        )

    return {
        "label_auc": {
            "rcp": label_auc(gains, useful),
            "qrel": label_auc(qrels, useful),
            "documents": len(graded),
            "useful": int(useful.sum()),
        },
        "flag_recall": matched_flag_recall(gains, qrels, useful),
        "ece_gain_useful": calib.ece,
        "reliability_bins": list(calib.bins),
        "grades": len(obs_gain),
        "spearman_query": {
            "raw_bt": spearman(col.doc_bt),
            "calibrated": spearman(col.doc_cal or col.doc_gain),
            "calibrated_source": "calibrated" if col.doc_cal else "gains",
        },
    }


def _reliability_section(col: _Collected, cfg: StudyConfig) -> dict:
    quality = annotator_quality(col.summaries, rules=cfg.flag_rules)
    return {
        "icc1k": icc1k(balanced_units(col.units)),
        "krippendorff_alpha": {
            "ordinal": krippendorff_alpha(col.units, level="ordinal"),
            "interval": krippendorff_alpha(col.units, level="interval"),
        },
        "pick_agreement": pick_agreement([[p for _, p in row] for row in col.panel]),
        "within_one_grade": within_one_share(col.units),
        "annotator_flags": {a: q.as_dict() for a, q in quality.items()},
    }


def study_report(
    contests: Sequence[Contest],
    annotations: Sequence[Annotation],
    *,
    config: StudyConfig | None = None,
) -> dict:
    """The study's JSON report (issue 6 keys plus verdict classes, per-contest rows,
    label detail, reliability bins and annotator flags). Invalid annotations are left
    out everywhere. Raises ValueError on unknown contests, duplicate (contest,
    annotator), ungraded displayed documents or missing/conflicting gains."""
    cfg = config or StudyConfig()
    reviews = _valid_reviews(contests, annotations)
    col = _collect(contests, reviews, cfg)
    report = {
        "contests": len(contests),
        "contests_graded": sum(r["verdict"] is not None for r in col.rows),
        "reviews": {
            "valid": sum(map(len, reviews.values())),
            "invalid": sum(not a.valid for a in annotations),
        },
        "annotators": len({a.annotator for rs in reviews.values() for a in rs}),
        **_agreement_section(col, cfg),
        **_label_section(col, cfg),
        **_reliability_section(col, cfg),
        "inference": inference_section(col, cfg),
        "per_contest": col.rows,
    }
    if cfg.severity:
        report["severity"] = _severity_section(contests, reviews)
    return json_safe(report)


def _severity_section(
    contests: Sequence[Contest], reviews: Mapping[str, list[Annotation]]
) -> dict:
    """Annotator severities and fair grades beside the raw mean grades (valid
    reviews only). Nothing else in the report reads it: picks and verdicts stay on
    the raw grades."""
    query_of = {c.contest_id: c.query_id for c in contests}
    triples = [
        (a.annotator, (query_of[cid], doc), grade)
        for cid, revs in sorted(reviews.items())
        for a in revs
        for doc, grade in sorted(a.grades.items())
    ]
    try:
        fit = rasch_severity(triples)
    except ValueError as exc:
        return {"error": str(exc)}
    items = sorted(fit.raw_mean)
    raw = np.array([fit.raw_mean[i] for i in items])
    fair = np.array([fit.fair_mean[i] for i in items])
    return {
        **fit.as_dict(),
        "documents": [
            {
                "query_id": q,
                "doc_id": d,
                "raw_mean": fit.raw_mean[q, d],
                "fair_mean": fit.fair_mean[q, d],
            }
            for q, d in items
        ],
        "largest_shift": float(np.max(np.abs(fair - raw))) if items else None,
    }
