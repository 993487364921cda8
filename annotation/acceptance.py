"""Acceptance of annotators: thresholds, per-annotator figures and flags (reads only).

Split from ``selectors.py`` (past 500 lines) and read by the monitoring page and the
exclusion service. The figures are the report's (``annotation.analysis.quality``)
computed straight from the database, over every submitted review of the study
(an excluded annotator keeps the figures that got them excluded), plus gold
accuracy (``GoldAnswer``) and the count of contradictory answers. A flag never acts
by itself: staff decide and exclude (``services.annotator_exclude``).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from django.contrib.auth import get_user_model

from .analysis import FlagRules, ReviewSummary, annotator_pick, annotator_quality
from .analysis.picks import TIE_MARGIN
from .analysis.quality import contradictory
from .models import (
    AssignmentStatus,
    ContestDocument,
    GoldAnswer,
    Grade,
    Study,
    StudyMember,
)

# Defaults; a study overrides any of them in ``Study.acceptance``.
THRESHOLDS: dict[str, float] = {
    "min_gold_accuracy": 0.7,  # flag "gold" below this share of gold answers right
    "gold_tolerance": 1,  # a gold answer is right within this many grades
    "min_gold_answers": 3,  # ... once the annotator answered this many gold items
    "min_agreement": 0.5,  # flag "low_agreement" (with the other annotators) below
    "min_median_seconds": 3.0,  # flag "fast" below this median per document
    "max_straight_share": 0.5,  # flag "straight_lining" at or above this share
    "min_contests": 3,  # the report's flags need this many contests
}


def study_thresholds(*, study: Study) -> dict[str, float]:
    """The study's acceptance thresholds: defaults overridden by ``study.acceptance``
    (unknown keys ignored)."""
    own = study.acceptance if isinstance(study.acceptance, dict) else {}
    return {k: float(own.get(k, v)) for k, v in THRESHOLDS.items()}


def _contest_lists(study: Study) -> dict[int, tuple[tuple, tuple, tuple]]:
    rows: dict[int, list[tuple[int | None, int | None, int]]] = defaultdict(list)
    for contest_id, doc, ra, rb in (
        ContestDocument.objects.filter(contest__study=study)
        .order_by("contest_id", "id")
        .values_list("contest_id", "document_id", "rank_a", "rank_b")
    ):
        rows[contest_id].append((ra, rb, doc))
    out = {}
    for contest_id, docs in rows.items():
        list_a = tuple(d for ra, _rb, d in sorted(x for x in docs if x[0] is not None))
        list_b = tuple(
            d
            for _ra, _rb, d in sorted(
                (x for x in docs if x[1] is not None), key=lambda x: x[1]
            )
        )
        out[contest_id] = (list_a, list_b, tuple(d for _a, _b, d in docs))
    return out


def study_acceptance(*, study: Study) -> list[dict[str, Any]]:
    """One row per study member (and anyone who graded), by username: contests,
    gold accuracy, agreement, median seconds, straight-lining, contradictions,
    flags, and the exclusion record. A handful of queries."""
    limits = study_thresholds(study=study)
    lists = _contest_lists(study)
    by_review: dict[tuple[int, int], dict[str, Any]] = {}
    contradictions: dict[int, int] = defaultdict(int)
    for (
        contest_id,
        user_id,
        doc,
        grade,
        order,
        seconds,
        answers,
        questions,
    ) in (
        Grade.objects.filter(
            assignment__contest__study=study,
            assignment__status=AssignmentStatus.SUBMITTED,
        )
        .order_by("assignment_id", "id")
        .values_list(
            "assignment__contest_id",
            "assignment__annotator_id",
            "document_id",
            "grade",
            "order",
            "seconds",
            "answers",
            "rubric__questions",
        )
    ):
        review = by_review.setdefault(
            (contest_id, user_id),
            {"grades": {}, "order": {}, "seconds": {}, "answers": {}},
        )
        review["grades"][doc] = grade
        if order:
            review["order"][doc] = order
        review["seconds"][doc] = seconds
        review["answers"][doc] = tuple(sorted((answers or {}).items()))
        if contradictory(answers or {}, [q["key"] for q in questions]):
            contradictions[user_id] += 1
    gold = _gold_answers(study, contradictions)
    summaries = []
    for (contest_id, user_id), r in sorted(by_review.items()):
        list_a, list_b, shown = lists[contest_id]
        pick = annotator_pick(
            list_a,
            list_b,
            r["grades"],
            k=study.depth,
            tie_margin=TIE_MARGIN,
            within_order=r["order"],
            displayed=shown,
        ).choice
        summaries.append(
            ReviewSummary(
                contest_id=str(contest_id),
                annotator=str(user_id),
                pick=pick,
                seconds=tuple(float(r["seconds"][d]) for d in shown),
                answers=tuple(r["answers"][d] for d in shown),
            )
        )
    rules = FlagRules(
        min_agreement=limits["min_agreement"],
        min_median_seconds=limits["min_median_seconds"],
        straight_share=limits["max_straight_share"],
        min_contests=int(limits["min_contests"]),
    )
    quality = annotator_quality(summaries, rules=rules)
    members = {
        m.annotator_id: m
        for m in StudyMember.objects.filter(study=study).select_related(
            "annotator", "excluded_by"
        )
    }
    users = set(members) | {int(a) for a in quality} | set(gold)
    names = dict(
        get_user_model().objects.filter(pk__in=users).values_list("pk", "username")
    )
    rows = []
    for user_id in sorted(users, key=lambda u: names.get(u, "")):
        q = quality.get(str(user_id))
        figures = q.as_dict() if q else {"contests": 0, "flags": []}
        right, answered = gold.get(user_id, (0, 0))
        accuracy = right / answered if answered else None
        flags = list(figures.get("flags", []))
        if (
            accuracy is not None
            and answered >= limits["min_gold_answers"]
            and accuracy < limits["min_gold_accuracy"]
        ):
            flags.insert(0, "gold")
        member = members.get(user_id)
        rows.append(
            {
                **figures,
                "user_id": user_id,
                "username": names.get(user_id, str(user_id)),
                "gold_answered": answered,
                "gold_accuracy": accuracy,
                "contradictions": contradictions.get(user_id, 0),
                "flags": flags,
                "excluded": bool(member and member.excluded_at),
                "excluded_at": member.excluded_at if member else None,
                "excluded_reason": member.excluded_reason if member else "",
                "excluded_by": (
                    member.excluded_by.username
                    if member and member.excluded_by
                    else None
                ),
            }
        )
    return rows


def _gold_answers(
    study: Study, contradictions: dict[int, int]
) -> dict[int, tuple[int, int]]:
    """user id -> (gold answers within tolerance, gold answers); adds contradictory
    gold answers to ``contradictions``. Empty while the study has no gold items."""
    tolerance = study_thresholds(study=study)["gold_tolerance"]
    out: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for user_id, grade, expected, answers, questions in GoldAnswer.objects.filter(
        assignment__contest__study=study,
        assignment__status=AssignmentStatus.SUBMITTED,
    ).values_list(
        "assignment__annotator_id",
        "grade",
        "item__expected_grade",
        "answers",
        "assignment__rubric__questions",
    ):
        out[user_id][1] += 1
        out[user_id][0] += abs(grade - expected) <= tolerance
        if contradictory(answers or {}, [q["key"] for q in questions]):
            contradictions[user_id] += 1
    return {u: (r, n) for u, (r, n) in out.items()}
