"""Quality control of a study: gold items and the exclusion of annotators.

Gold items are documents with a known grade, mixed unannounced into some
assignments (``Study.gold_rate``; the mixing happens in ``assignment._lease``) and
answered into ``GoldAnswer`` rows, never ``Grade`` rows. Excluding an annotator
invalidates their reviews and gives their slots back, so their contests re-open and
end again with exactly N valid reviews by distinct annotators (ASSIGNMENT.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db import transaction
from django.utils import timezone

from benchmarks.models import Document, Qrel, Query
from rcp_platform.exceptions import ApplicationError, ConflictError, NotFoundError

from .. import selectors
from ..models import (
    Assignment,
    AssignmentStatus,
    Contest,
    ContestDocument,
    GoldItem,
    GoldSource,
    Study,
    StudyMember,
)


@transaction.atomic
def study_gold_rate_set(*, study: Study, rate: float) -> Study:
    """Set the share of new assignments that get one gold document (0 disables)."""
    if not 0.0 <= rate <= 1.0:
        raise ApplicationError("the gold rate is a share between 0 and 1")
    study.gold_rate = float(rate)
    study.full_clean(validate_unique=False)
    study.save(update_fields=["gold_rate"])
    return study


def _levels(study: Study) -> int:
    return len(selectors.rubric_current(study=study).questions)


@transaction.atomic
def gold_item_add(
    *,
    study: Study,
    query: Query,
    document: Document,
    expected_grade: int,
    created_by: Any = None,
    source: str = GoldSource.STAFF,
) -> GoldItem:
    """Add (or re-grade) a gold document for one of the study's contest queries.

    Refused for a document displayed in a contest of that query (it would be a
    graded document and a gold one at once) and for a grade beyond the rubric.
    """
    if not Contest.objects.filter(study=study, query=query).exists():
        raise ApplicationError(f"query {query.external_id!r} is in no contest")
    if document.dataset_id != query.dataset_id:
        raise ApplicationError("the document is not of the query's dataset")
    if ContestDocument.objects.filter(
        contest__study=study, contest__query=query, document=document
    ).exists():
        raise ApplicationError(
            f"document {document.external_id!r} is shown in a contest of this query"
        )
    levels = _levels(study)
    if not 0 <= int(expected_grade) <= levels:
        raise ApplicationError(f"the expected grade must be 0 to {levels}")
    item, _ = GoldItem.objects.update_or_create(
        study=study,
        query=query,
        document=document,
        defaults={
            "expected_grade": int(expected_grade),
            "source": source,
            "created_by": created_by,
        },
    )
    return item


def qrel_to_grade(qrel: float, *, top: float, levels: int) -> int:
    """A qrel grade on the rubric's scale: 0 stays 0, ``top`` maps to ``levels``,
    linear (rounded) between."""
    if qrel <= 0 or top <= 0:
        return 0
    return max(0, min(levels, round(qrel / top * levels)))


@transaction.atomic
def gold_items_from_qrels(
    *,
    study: Study,
    per_query: int = 2,
    mapping: Mapping[float, int] | None = None,
    created_by: Any = None,
) -> list[GoldItem]:
    """Gold items from the benchmark's qrels: for each contest query, up to
    ``per_query`` judged documents not shown in any contest of that query, the
    highest and lowest qrel first (a gold set needs both ends). ``mapping`` maps
    qrel grades to rubric grades; default ``qrel_to_grade``. Idempotent."""
    levels = _levels(study)
    query_ids = set(
        Contest.objects.filter(study=study).values_list("query_id", flat=True)
    )
    shown = set(
        ContestDocument.objects.filter(contest__study=study).values_list(
            "contest__query_id", "document_id"
        )
    )
    by_query: dict[int, list[tuple[float, int]]] = {}
    for q, d, g in Qrel.objects.filter(query_id__in=query_ids).values_list(
        "query_id", "document_id", "grade"
    ):
        if (q, d) not in shown:
            by_query.setdefault(q, []).append((g, d))
    top = max((g for rows in by_query.values() for g, _ in rows), default=0.0)
    made = []
    for q in sorted(by_query):
        rows = sorted(by_query[q], key=lambda r: (-r[0], r[1]))
        picked: list[tuple[float, int]] = []
        while rows and len(picked) < per_query:
            picked.append(rows.pop(0) if len(picked) % 2 == 0 else rows.pop())
        for grade, doc in picked:
            expected = (
                mapping[grade]
                if mapping is not None and grade in mapping
                else qrel_to_grade(grade, top=top, levels=levels)
            )
            item, _ = GoldItem.objects.update_or_create(
                study=study,
                query_id=q,
                document_id=doc,
                defaults={
                    "expected_grade": expected,
                    "source": GoldSource.QREL,
                    "created_by": created_by,
                },
            )
            made.append(item)
    return made


@transaction.atomic
def annotator_exclude(
    *, study: Study, annotator: Any, reason: str, excluded_by: Any = None
) -> dict[str, int]:
    """Exclude an annotator from a study, with a recorded reason.

    Their membership is deactivated (no new contests) and stamped; every assignment
    of theirs in the study becomes invalid and gives its slot back — an open lease
    also expires — so each affected contest counts fewer than N valid reviews and is
    offered again (to annotators who never had it: the unique (contest, annotator)
    constraint keeps them apart). Grades are kept; reports leave them out and show
    the results with them beside. Irreversible: the freed slots may be refilled.

    Locks: the member row, then the affected contests in id order (the order of
    ``assignment_next``), then their assignment rows. Returns counts of
    invalidated reviews, expired leases and re-opened contests.
    """
    reason = (reason or "").strip()
    if not reason:
        raise ApplicationError("give a reason for the exclusion (it is recorded)")
    member = (
        StudyMember.objects.select_for_update()
        .filter(study=study, annotator=annotator)
        .first()
    )
    if member is None:
        raise NotFoundError(f"{annotator.username!r} is not a member of this study")
    if member.excluded_at is not None:
        raise ConflictError(f"{annotator.username!r} is excluded already")
    member.active = False
    member.excluded_at = timezone.now()
    member.excluded_reason = reason[:2000]
    member.excluded_by = excluded_by
    member.full_clean(exclude=["study", "annotator", "excluded_by"])
    member.save(
        update_fields=["active", "excluded_at", "excluded_reason", "excluded_by"]
    )
    mine = Assignment.objects.filter(contest__study=study, annotator=annotator)
    contest_ids = sorted(set(mine.values_list("contest_id", flat=True)))
    list(
        Contest.objects.select_for_update()
        .filter(pk__in=contest_ids)
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    reviews = mine.filter(status=AssignmentStatus.SUBMITTED, valid=True).update(
        valid=False, slot=None
    )
    leases = mine.filter(status=AssignmentStatus.LEASED).update(
        status=AssignmentStatus.EXPIRED, slot=None, valid=False
    )
    mine.filter(status=AssignmentStatus.EXPIRED).update(valid=False)
    return {"reviews": reviews, "leases": leases, "contests": len(contest_ids)}
