"""The assignment algorithm: next, draft save, submit (see annotation/ASSIGNMENT.md)."""

from __future__ import annotations

import functools
import math
import random
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from benchmarks.models import Document
from benchmarks.rawsql import scalar_converter
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
    Rubric,
    Study,
    StudyStatus,
)

MAX_COMMENT = 5000
MAX_SECONDS = 24 * 3600.0
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def _opaque_keys(n: int) -> list[str]:
    keys: set[str] = set()
    while len(keys) < n:
        keys.add(secrets.token_hex(6))
    return list(keys)


_A = Assignment._meta.db_table
_CD = ContestDocument._meta.db_table
_D = Document._meta.db_table


def _renew(pk: int, expires_at: Any) -> bool:
    """Extend a lease that is still leased (compare-and-set); True if it was."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {_A} SET expires_at = %s WHERE id = %s AND status = %s",
            [
                connection.ops.adapt_datetimefield_value(expires_at),
                pk,
                AssignmentStatus.LEASED.value,
            ],
        )
        return cursor.rowcount > 0


def _flip_submitted(pk: int, draft: dict[str, Any], now: Any) -> bool:
    """Compare-and-set leased -> submitted, storing the grading as the draft; True
    if this call flipped it."""
    draft_field = Assignment._meta.get_field("draft")
    stamp = connection.ops.adapt_datetimefield_value(now)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {_A} SET status = %s, submitted_at = %s, draft = %s, "
            "draft_saved_at = %s WHERE id = %s AND status = %s",
            [
                AssignmentStatus.SUBMITTED.value,
                stamp,
                draft_field.get_db_prep_save(draft, connection),
                stamp,
                pk,
                AssignmentStatus.LEASED.value,
            ],
        )
        return cursor.rowcount > 0


def _reclaim_and_free_slots(contest: Contest, now: Any) -> list[int]:
    """Free slots of a contest whose row the caller has locked.

    Read in a fresh statement (it sees everything committed by the previous lock
    holder). Lapsed leases give their slot back (status expired); the reclaiming
    UPDATE re-checks ``expires_at`` row by row, so a lease renewed a moment ago keeps
    its slot.
    """
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT id, slot, status, expires_at FROM {_A} "
            "WHERE contest_id = %s AND slot IS NOT NULL",
            [contest.pk],
        )
        holders = cursor.fetchall()
    lapsed = [
        pk
        for pk, _slot, status, expires_at in holders
        if status == AssignmentStatus.LEASED and _expires_at(expires_at) <= now
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


def _expires_at(value: Any) -> Any:
    """A raw ``expires_at`` as a datetime (SQLite returns text)."""
    return _convert_expires_at()(value)


@functools.cache
def _convert_expires_at() -> Any:
    return scalar_converter(Assignment._meta.get_field("expires_at"))


def _lease(
    contest: Contest, annotator: Any, slot: int, now: Any, rubric: Rubric
) -> tuple[Assignment, dict[int, tuple[str, str]]]:
    """Insert the lease; returns it with its documents' (title, text) by id, read in
    the same query as the contest's document list (the payload needs them next)."""
    study = contest.study
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT cd.document_id, d.title, d.text FROM {_CD} cd "
            f"JOIN {_D} d ON d.id = cd.document_id WHERE cd.contest_id = %s "
            "ORDER BY cd.id",
            [contest.pk],
        )
        rows = cursor.fetchall()
    seed = secrets.randbits(62)
    order = sampling.shuffled([d for d, _title, _text in rows], seed)
    entries: list[dict[str, Any]] = [{"document": d} for d in order]
    if study.gold_rate > 0:
        entries = _with_gold(contest, entries, seed)
    assignment = Assignment(
        contest=contest,
        annotator=annotator,
        slot=slot,
        status=AssignmentStatus.LEASED,
        rubric=rubric,
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
    texts = {d: (title, text) for d, title, text in rows}
    gold = [e["document"] for e in entries if e["document"] not in texts]
    if gold:  # a gold document is not among the contest's: one more read
        texts.update(
            (d, (title, text))
            for d, title, text in Document.objects.filter(pk__in=gold).values_list(
                "pk", "title", "text"
            )
        )
    return assignment, texts


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


@dataclass(frozen=True)
class NextLease:
    """``assignment_next_for``'s answer: the lease, the annotator's progress counting
    it, and (for a new lease) its documents' (title, text) by id, so the payload
    needs no further query."""

    assignment: Assignment
    progress: dict[str, int]
    texts: dict[int, tuple[str, str]] | None


@transaction.atomic
def assignment_next_for(*, study_id: int, annotator: Any) -> NextLease | None:
    """Give the annotator a contest of study ``study_id``: theirs in progress, else a
    new one; None when nothing is left for them.

    A new contest has fewer than N live assignments and was never this annotator's.
    Row locks (PostgreSQL): the annotator's membership row serialises their own
    requests; each candidate contest row is taken FOR UPDATE SKIP LOCKED, then its
    slots are recounted under the lock. NotFoundError unless an active member of an
    open or closed study; ConflictError unless open. The membership lock also reads
    the study and its current rubric; the progress rides on the lease's own query
    (see ASSIGNMENT.md, "Queries").
    """
    now = timezone.now()
    locked = selectors.member_lock_for_next(study_id=study_id, annotator=annotator)
    if locked is None:
        raise NotFoundError("study not found")
    study, rubric = locked
    _ensure_open(study)
    # Read after the lock, in a statement of its own: a request that waited for the
    # lock must see the lease its predecessor just committed (values computed inside
    # the locking statement would come from before the wait).
    own = selectors.lease_in_progress(study=study, annotator=annotator)
    if own is not None:
        # A leased row still holds its slot (lapsed or not): renew it in place.
        expires_at = now + study.lease_duration
        if _renew(own.pk, expires_at):
            own.expires_at = expires_at
            progress = selectors.annotator_progress(
                study=study, annotator=annotator, now=now
            )
            return NextLease(own, progress, None)
    if rubric is None:
        raise NotFoundError(f"study {study.pk} has no rubric")
    tried: list[int] = []
    while True:
        open_to = {"study": study, "annotator": annotator, "now": now, "exclude": tried}
        try:
            # One savepoint per attempt: rolling it back releases the row lock of a
            # contest found full, so a request never sits on locks it does not use.
            with transaction.atomic():
                contest = selectors.contest_lock_open_to(**open_to)
                if contest is None:
                    # Every remaining candidate may be locked by a request that will
                    # leave room: wait for the first rather than say "nothing left".
                    contest = selectors.contest_lock_open_to(**open_to, wait=True)
                    if contest is None:
                        return None
                tried.append(contest.pk)
                free = _reclaim_and_free_slots(contest, now)
                if not free:
                    raise _ContestFull
                assignment, texts = _lease(contest, annotator, free[0], now, rubric)
        except _ContestFull:
            continue
        return NextLease(assignment, _progress_of(contest), texts)


def _progress_of(contest: Any) -> dict[str, int]:
    """The progress read with the contest this request leased (it was still counted
    among those left then)."""
    left = max(contest.contests_left - 1, 0)
    return {"contests_done": contest.contests_done, "contests_left": left}


def assignment_next(*, study: Study, annotator: Any) -> Assignment | None:
    """``assignment_next_for`` by study object, returning just the assignment (its
    ``contest.study`` is the caller's object, as callers that change the study
    in memory expect)."""
    lease = assignment_next_for(study_id=study.pk, annotator=annotator)
    if lease is None:
        return None
    lease.assignment.contest.study = study
    return lease.assignment


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
            isinstance(order, bool)
            or not isinstance(order, int)
            or not 1 <= order <= len(doc_keys)
        ):
            # Bounded by the documents (a position among them): a huge integer
            # would overflow the column (OverflowError, DataError) at submit.
            raise ApplicationError(
                f"grades[{key}].order must be an integer from 1 to {len(doc_keys)}"
            )
        comment = entry.get("comment")
        if comment is not None and not isinstance(comment, str):
            raise ApplicationError(f"grades[{key}].comment must be a string")
        if comment and _UNSTORABLE.search(comment):
            # PostgreSQL stores neither (DataError); refused on every database.
            raise ApplicationError(
                f"grades[{key}].comment must not contain NUL characters or "
                "unpaired surrogates"
            )
        out[key] = {
            "answers": {q: answers.get(q) for q in questions if q in answers},
            "order": order,
            "comment": (comment or "")[:MAX_COMMENT] or None,
            "seconds": _seconds(key, entry.get("seconds", 0) or 0),
        }
    if missing:
        raise ApplicationError(
            "answer every question of every document before submitting",
            extra={"missing": missing},
        )
    return out


def _seconds(key: str, value: Any) -> float:
    """Time spent on a document, clamped to [0, MAX_SECONDS]; ApplicationError for
    non-numbers and for numbers no float holds (a 400-digit integer, 1e400)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ApplicationError(f"grades[{key}].seconds must be a number")
    try:
        seconds = float(value)
    except OverflowError:
        seconds = math.inf
    if not math.isfinite(seconds):
        raise ApplicationError(
            f"grades[{key}].seconds must be a finite number of seconds "
            f"(0 to {MAX_SECONDS:g})"
        )
    return round(min(max(seconds, 0.0), MAX_SECONDS), 2)


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
    retaken = {
        "status": AssignmentStatus.LEASED,
        "slot": free[0],
        "leased_at": now,
        "expires_at": now + contest.study.lease_duration,
    }
    Assignment.objects.filter(pk=assignment.pk, status=AssignmentStatus.EXPIRED).update(
        **retaken
    )
    for field, value in retaken.items():
        setattr(assignment, field, value)


_MAX_ATTEMPTS = 4


def _leased_again(assignment: Assignment, now: Any) -> bool:
    """After a compare-and-set on LEASED missed: True if the assignment is submitted;
    else make it leased again (``_retake``: ConflictError when its contest is full)
    so the caller's next compare-and-set can succeed."""
    assignment.refresh_from_db(fields=["status", "slot", "expires_at"])
    if assignment.status == AssignmentStatus.SUBMITTED:
        return True
    if assignment.status == AssignmentStatus.EXPIRED:
        _retake(assignment, now)
    return False


def _busy() -> ConflictError:
    # Reached only if other requests reclaim the lease between every one of our
    # attempts (leases of a few seconds under heavy load): a 409 to retry, not a 500.
    return ConflictError(
        "the assignment changed while saving; please try again",
        extra={"reason": "busy"},
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
    for _attempt in range(_MAX_ATTEMPTS):
        saved = Assignment.objects.filter(
            pk=assignment.pk, status=AssignmentStatus.LEASED
        ).update(draft=draft, draft_saved_at=now, expires_at=now + study.lease_duration)
        if saved:
            break
        if _leased_again(assignment, now):
            raise ConflictError(
                "this assignment is submitted already", extra={"reason": "submitted"}
            )
    else:
        raise _busy()
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
    for _attempt in range(_MAX_ATTEMPTS):
        if _flip_submitted(assignment.pk, {"grades": clean}, now):
            break
        if _leased_again(assignment, now):
            return assignment, True
    else:
        # Never write grades without having flipped the status ourselves: only the
        # one request that flips may insert them (else a second flipper would hit
        # the (assignment, document) unique constraint, an IntegrityError).
        raise _busy()
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
