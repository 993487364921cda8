"""The assignment algorithm: next, draft save, submit (see annotation/ASSIGNMENT.md)."""

from __future__ import annotations

import random
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

from django.db import transaction
from django.utils import timezone

from rcp_platform.exceptions import ApplicationError, ConflictError, NotFoundError

from .. import sampling, selectors
from ..models import (
    Assignment,
    AssignmentStatus,
    Contest,
    ContestDocument,
    GoldAnswer,
    GoldItem,
    Grade,
    Study,
    StudyMember,
    StudyStatus,
)

MAX_COMMENT = 5000
MAX_SECONDS = 24 * 3600.0


def _opaque_keys(n: int) -> list[str]:
    keys: set[str] = set()
    while len(keys) < n:
        keys.add(secrets.token_hex(6))
    return list(keys)


def _reclaim_and_free_slots(contest: Contest, now: Any) -> list[int]:
    """Free slots of a contest whose row the caller has locked.

    Read in a fresh statement (it sees everything committed by the previous lock
    holder). Lapsed leases give their slot back (status expired); the reclaiming
    UPDATE re-checks ``expires_at`` row by row, so a lease renewed a moment ago keeps
    its slot.
    """
    holders = list(
        Assignment.objects.filter(contest=contest, slot__isnull=False).values_list(
            "pk", "slot", "status", "expires_at"
        )
    )
    lapsed = [
        pk
        for pk, _slot, status, expires_at in holders
        if status == AssignmentStatus.LEASED and expires_at <= now
    ]
    if not lapsed:
        held = {slot for _pk, slot, _status, _expires_at in holders}
    else:
        Assignment.objects.filter(
            pk__in=lapsed, status=AssignmentStatus.LEASED, expires_at__lte=now
        ).update(status=AssignmentStatus.EXPIRED, slot=None)
        held = set(
            Assignment.objects.filter(contest=contest, slot__isnull=False).values_list(
                "slot", flat=True
            )
        )
    return [s for s in range(1, contest.study.per_contest + 1) if s not in held]


def _lease(contest: Contest, annotator: Any, slot: int, now: Any) -> Assignment:
    study = contest.study
    docs = list(
        ContestDocument.objects.filter(contest=contest)
        .order_by("id")
        .values_list("document_id", flat=True)
    )
    seed = secrets.randbits(62)
    order = sampling.shuffled(docs, seed)
    entries: list[dict[str, Any]] = [{"document": d} for d in order]
    if study.gold_rate > 0:
        entries = _with_gold(contest, entries, seed)
    assignment = Assignment(
        contest=contest,
        annotator=annotator,
        slot=slot,
        status=AssignmentStatus.LEASED,
        rubric=selectors.rubric_current(study=study),
        seed=seed,
        documents=[
            {"key": k, **entry}
            for k, entry in zip(_opaque_keys(len(entries)), entries, strict=True)
        ],
        leased_at=now,
        expires_at=now + study.lease_duration,
    )
    # The related rows were just read under lock, and uniqueness is the database's
    # job here (the constraints are the guarantee): skip those lookups.
    assignment.full_clean(
        exclude=["contest", "annotator", "rubric"],
        validate_unique=False,
        validate_constraints=False,
    )
    assignment.save()
    return assignment


def _with_gold(
    contest: Contest, entries: list[dict[str, Any]], seed: int
) -> list[dict[str, Any]]:
    """With probability ``gold_rate``, one gold document of the contest's query at
    a random place among the contest's documents. The entry carries its GoldItem id
    (``"gold"``), which never leaves the server (``assignment_payload`` sends keys,
    titles and texts only): the annotator cannot tell it apart."""
    rng = random.Random(seed)  # noqa: S311 - a display choice, not a secret
    if rng.random() >= contest.study.gold_rate:
        return entries
    shown = {e["document"] for e in entries}
    items = [
        (pk, doc)
        for pk, doc in GoldItem.objects.filter(
            study_id=contest.study_id, query_id=contest.query_id
        )
        .order_by("pk")
        .values_list("pk", "document_id")
        if doc not in shown
    ]
    if not items:
        return entries
    pk, doc = rng.choice(items)
    out = list(entries)
    out.insert(rng.randrange(len(out) + 1), {"document": doc, "gold": pk})
    return out


def _ensure_open(study: Study) -> None:
    if study.status != StudyStatus.OPEN:
        raise ConflictError(f"study is {study.status}", extra={"status": study.status})


@transaction.atomic
def assignment_next(*, study: Study, annotator: Any) -> Assignment | None:
    """Give the annotator a contest of ``study``: theirs in progress, else a new one.

    A new contest has fewer than N live assignments and was never this annotator's.
    Row locks (PostgreSQL): the annotator's membership row serialises their own
    requests; each candidate contest row is taken FOR UPDATE SKIP LOCKED, then its
    slots are recounted under the lock. None when nothing is left for them.
    """
    member = (
        StudyMember.objects.select_for_update()
        .filter(study=study, annotator=annotator, active=True)
        .first()
    )
    if member is None:
        raise NotFoundError("study not found")
    _ensure_open(study)
    now = timezone.now()
    own = (
        Assignment.objects.filter(
            contest__study=study, annotator=annotator, status=AssignmentStatus.LEASED
        )
        .select_related("contest__query", "rubric")
        .order_by("-leased_at")
        .first()
    )
    if own is not None:
        # A leased row still holds its slot (lapsed or not): renew it in place.
        expires_at = now + study.lease_duration
        renewed = Assignment.objects.filter(
            pk=own.pk, status=AssignmentStatus.LEASED
        ).update(expires_at=expires_at)
        if renewed:
            own.expires_at = expires_at
            own.contest.study = study
            own.annotator = annotator
            return own
    tried: list[int] = []
    while True:
        candidates = selectors.contests_open_to(
            study=study, annotator=annotator, now=now
        ).exclude(pk__in=tried)
        try:
            # One savepoint per attempt: rolling it back releases the row lock of a
            # contest found full, so a request never sits on locks it does not use.
            with transaction.atomic():
                contest = (
                    candidates.select_for_update(skip_locked=True, of=("self",))
                    .select_related("query")
                    .first()
                )
                if contest is None:
                    # Every remaining candidate may be locked by a request that will
                    # leave room: wait for the first rather than say "nothing left".
                    contest = (
                        candidates.select_for_update(of=("self",))
                        .select_related("query")
                        .first()
                    )
                    if contest is None:
                        return None
                tried.append(contest.pk)
                contest.study = study
                free = _reclaim_and_free_slots(contest, now)
                if not free:
                    raise _ContestFull
                return _lease(contest, annotator, free[0], now)
        except _ContestFull:
            continue


class _ContestFull(Exception):
    """Internal: the locked contest had no free slot; try the next one."""


def _validated_grades(
    assignment: Assignment, grades: Any, *, complete: bool
) -> dict[str, dict[str, Any]]:
    """Normalise a grades mapping; refuse unknown keys, and with ``complete`` gaps.

    {OPAQUE: {"answers": {Q: bool|None}, "order": int|None, "comment": str|None,
    "seconds": number}}; ``seconds`` is optional (time spent on the document).
    """
    if not isinstance(grades, dict):
        raise ApplicationError("grades must be an object keyed by document key")
    doc_keys = set(assignment.keys)
    questions = assignment.rubric.keys
    unknown = sorted(set(grades) - doc_keys)
    if unknown:
        raise ApplicationError(
            "unknown document key", extra={"documents": unknown[:10]}
        )
    out: dict[str, dict[str, Any]] = {}
    missing: dict[str, list[str]] = {}
    for key in assignment.keys:
        entry = grades.get(key)
        if entry is None:
            if complete:
                missing[key] = list(questions)
            continue
        if not isinstance(entry, dict):
            raise ApplicationError(f"grades[{key}] must be an object")
        answers = entry.get("answers") or {}
        if not isinstance(answers, dict) or set(answers) - set(questions):
            raise ApplicationError(
                f"grades[{key}].answers must map question keys {questions} to booleans"
            )
        if any(v is not None and not isinstance(v, bool) for v in answers.values()):
            raise ApplicationError(f"grades[{key}].answers must be true, false or null")
        gaps = [q for q in questions if answers.get(q) is None]
        if gaps and complete:
            missing[key] = gaps
        order = entry.get("order")
        if order is not None and (
            isinstance(order, bool) or not isinstance(order, int) or order < 1
        ):
            raise ApplicationError(f"grades[{key}].order must be a positive integer")
        comment = entry.get("comment")
        if comment is not None and not isinstance(comment, str):
            raise ApplicationError(f"grades[{key}].comment must be a string")
        seconds = entry.get("seconds", 0) or 0
        if isinstance(seconds, bool) or not isinstance(seconds, int | float):
            raise ApplicationError(f"grades[{key}].seconds must be a number")
        out[key] = {
            "answers": {q: answers.get(q) for q in questions if q in answers},
            "order": order,
            "comment": (comment or "")[:MAX_COMMENT] or None,
            "seconds": round(min(max(float(seconds), 0.0), MAX_SECONDS), 2),
        }
    if missing:
        raise ApplicationError(
            "answer every question of every document before submitting",
            extra={"missing": missing},
        )
    return out


def grade_of(answers: Mapping[str, bool | None], questions: Sequence[str]) -> int:
    """1-based index of the most stringent question answered yes; 0 if none."""
    return max((i for i, q in enumerate(questions, 1) if answers.get(q)), default=0)


def _retake(assignment: Assignment, now: Any) -> None:
    """Give a reclaimed (expired) assignment its contest back if a slot is free.

    Locks the contest first (same order as ``assignment_next``). ConflictError when
    the contest went to someone else meanwhile, or when the assignment was
    invalidated (its annotator was excluded): that never takes a slot again.
    """
    if not assignment.valid:
        raise ConflictError(
            "you no longer take part in this study", extra={"reason": "excluded"}
        )
    contest = Contest.objects.select_for_update(of=("self",)).get(
        pk=assignment.contest_id
    )
    contest.study = assignment.contest.study
    free = _reclaim_and_free_slots(contest, now)
    assignment.refresh_from_db()
    if assignment.status != AssignmentStatus.EXPIRED:
        return
    if not free:
        raise ConflictError(
            "your lease expired and the contest went to another annotator",
            extra={"reason": "lease_expired"},
        )
    Assignment.objects.filter(pk=assignment.pk, status=AssignmentStatus.EXPIRED).update(
        status=AssignmentStatus.LEASED,
        slot=free[0],
        leased_at=now,
        expires_at=now + contest.study.lease_duration,
    )


@transaction.atomic
def assignment_draft_save(*, assignment: Assignment, grades: Any) -> Assignment:
    """Store a partial grading as the assignment's draft and renew its lease.

    Compare-and-set on the leased row (no read-then-write race with a reclaim); a
    reclaimed lease is retaken when its contest still has room, else ConflictError.
    Refused after submission and while the study is not open.
    """
    study = assignment.contest.study
    _ensure_open(study)
    draft = {"grades": _validated_grades(assignment, grades, complete=False)}
    now = timezone.now()
    for _attempt in range(2):
        saved = Assignment.objects.filter(
            pk=assignment.pk, status=AssignmentStatus.LEASED
        ).update(draft=draft, draft_saved_at=now, expires_at=now + study.lease_duration)
        if saved:
            break
        assignment.refresh_from_db()
        if assignment.status == AssignmentStatus.SUBMITTED:
            raise ConflictError(
                "this assignment is submitted already", extra={"reason": "submitted"}
            )
        _retake(assignment, now)
        assignment.refresh_from_db()
    assignment.draft = draft
    assignment.draft_saved_at = now
    assignment.expires_at = now + study.lease_duration
    return assignment


@transaction.atomic
def assignment_submit(
    *, assignment: Assignment, grades: Any
) -> tuple[Assignment, bool]:
    """Submit a complete grading; returns (assignment, already_submitted).

    Idempotent: a repeated submit changes nothing and returns True. The status flips by
    compare-and-set, so two concurrent submits write the grades once. After the lease
    expired the submit is accepted only if the contest still has a free slot.
    """
    if assignment.status == AssignmentStatus.SUBMITTED:
        return assignment, True
    study = assignment.contest.study
    _ensure_open(study)
    clean = _validated_grades(assignment, grades, complete=True)
    now = timezone.now()
    for _attempt in range(2):
        flipped = Assignment.objects.filter(
            pk=assignment.pk, status=AssignmentStatus.LEASED
        ).update(
            status=AssignmentStatus.SUBMITTED,
            submitted_at=now,
            draft={"grades": clean},
            draft_saved_at=now,
        )
        if flipped:
            break
        assignment.refresh_from_db()
        if assignment.status == AssignmentStatus.SUBMITTED:
            return assignment, True
        _retake(assignment, now)
    questions = assignment.rubric.keys
    rows = []
    gold = []
    for item in assignment.documents:
        entry = clean[item["key"]]
        if item.get("gold"):
            # A gold document: checked against its expected grade, never a Grade.
            gold.append(
                GoldAnswer(
                    assignment=assignment,
                    item_id=item["gold"],
                    answers=entry["answers"],
                    grade=grade_of(entry["answers"], questions),
                    seconds=entry["seconds"],
                )
            )
            continue
        grade = Grade(
            assignment=assignment,
            document_id=item["document"],
            rubric=assignment.rubric,
            answers=entry["answers"],
            grade=grade_of(entry["answers"], questions),
            order=entry["order"],
            comment=entry["comment"] or "",
            seconds=entry["seconds"],
        )
        grade.full_clean(
            exclude=["assignment", "document", "rubric"],
            validate_unique=False,
            validate_constraints=False,
        )
        rows.append(grade)
    Grade.objects.bulk_create(rows)
    if gold:
        GoldAnswer.objects.bulk_create(gold)
    assignment.status = AssignmentStatus.SUBMITTED
    assignment.submitted_at = now
    assignment.draft = {"grades": clean}
    assignment.draft_saved_at = now
    return assignment, False
