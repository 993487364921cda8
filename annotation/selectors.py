"""Reads of the annotation app. Access rules live here, not in views.

Two audiences: staff and reviewers read whole studies (``study_list``/``study_get``);
annotators read only their own studies and assignments (``*_for_annotator``), and
everything they receive is built by ``assignment_payload``, the one place that decides
what a blind annotator may see.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.models import (
    Count,
    QuerySet,
)
from django.utils import timezone

from benchmarks.access import REVIEW_PERMISSION, can_read_benchmarks
from benchmarks.models import (
    Dataset,
    Document,
    PoolEntry,
    Query,
    RankingEntry,
    System,
)
from benchmarks.rawsql import Columns
from calibration.models import CalibrationFit, FitStatus
from calibration.selectors import dataset_query_scores
from rcp.ndcg import PROTOCOLS
from rcp_platform.exceptions import NotFoundError

from .models import (
    Assignment,
    AssignmentStatus,
    Contest,
    ContestDocument,
    Grade,
    Release,
    Rubric,
    Study,
    StudyMember,
    StudyStatus,
)
from .sampling import Candidate

ANNOTATE_PERMISSION = "annotation.annotate"


def is_annotator(user: Any) -> bool:
    """Active users holding ``annotation.annotate`` (the annotators group) who cannot
    read benchmark data.

    Roles are exclusive (``services.annotator_role_check``): staff, superusers and
    reviewers (``benchmarks.view_dataset``) are never annotators, even if granted the
    permission after joining a study. One query for both permissions (it runs on every
    annotator request), remembered on the user.
    """
    if not (user and user.is_authenticated and user.is_active):
        return False
    if user.is_superuser or user.is_staff:
        return False
    cached = getattr(user, "_annotation_is_annotator", None)
    if cached is None:
        app_label, codename = ANNOTATE_PERMISSION.split(".")
        review_app, review_codename = REVIEW_PERMISSION.split(".")
        with connection.cursor() as cursor:
            cursor.execute(
                _held_permissions_sql(),
                {
                    "user": user.pk,
                    "app": app_label,
                    "codename": codename,
                    "review_app": review_app,
                    "review_codename": review_codename,
                },
            )
            held = {name for (name,) in cursor.fetchall()}
        cached = codename in held and review_codename not in held
        user._annotation_is_annotator = cached
    return cached


@functools.cache
def _held_permissions_sql() -> str:
    """Which of the two role permissions the user holds, directly or by a group: the
    same rule as ``user.has_perm`` for active non-superusers, as a fixed statement
    (it runs on every annotator request; built with the ORM it cost more to compile
    than to run)."""
    user_model = get_user_model()
    user_perms = user_model.user_permissions.through._meta.db_table
    user_groups = user_model.groups.through._meta.db_table
    group_perms = Group.permissions.through._meta.db_table
    return (
        f"SELECT p.codename FROM {Permission._meta.db_table} p "
        f"JOIN {ContentType._meta.db_table} ct ON ct.id = p.content_type_id "
        "WHERE ((ct.app_label = %(app)s AND p.codename = %(codename)s) "
        "OR (ct.app_label = %(review_app)s AND p.codename = %(review_codename)s)) "
        f"AND (EXISTS (SELECT 1 FROM {user_perms} up WHERE up.permission_id = p.id "
        "AND up.user_id = %(user)s) "
        f"OR EXISTS (SELECT 1 FROM {group_perms} gp JOIN {user_groups} ug "
        "ON ug.group_id = gp.group_id WHERE gp.permission_id = p.id "
        "AND ug.user_id = %(user)s))"
    )


# ---------------------------------------------------------------------------- sampling


@dataclass(frozen=True)
class ContestSource:
    """Where a candidate contest comes from: ids and both systems' top-k lists."""

    dataset_id: int
    query_id: int
    system_ids: tuple[int, int]
    lists: tuple[tuple[int, ...], tuple[int, ...]]


def fit_latest_for(*, datasets: Sequence[Dataset]) -> CalibrationFit | None:
    """The newest done calibration fit covering every dataset in ``datasets``."""
    qs = CalibrationFit.objects.filter(status=FitStatus.DONE)
    for dataset in datasets:
        qs = qs.filter(datasets=dataset)
    return qs.order_by("-created_at", "-id").first()


def contest_candidates(
    *,
    fit: CalibrationFit,
    systems: Sequence[System],
    depth: int,
    metric_k: int = 10,
) -> list[Candidate]:
    """Every (query, system pair) with RCP-nDCG@k and qrel-nDCG@k of both systems.

    Gains come from ``fit``'s DocumentAbility rows, grades from Qrel; both metrics
    are computed by the leaderboard's nDCG path
    (``calibration.selectors.dataset_query_scores``: the dataset's protocol and
    pool, full rankings, the same tie rules and ideals). Skipped: queries without gains or without a
    positive qrel, pairs where a system did not rank the query, and pairs whose top-k
    lists are identical (nothing for a human to compare). Systems pair only within
    their dataset.
    """
    by_dataset: dict[int, list[System]] = defaultdict(list)
    for system in systems:
        by_dataset[system.dataset_id].append(system)
    out: list[Candidate] = []
    for dataset in Dataset.objects.filter(pk__in=by_dataset).order_by("name"):
        members = sorted(by_dataset[dataset.pk], key=lambda s: s.name)
        if len(members) >= 2:
            out.extend(_dataset_candidates(fit, dataset, members, depth, metric_k))
    return out


def _dataset_candidates(
    fit: CalibrationFit,
    dataset: Dataset,
    systems: list[System],
    depth: int,
    metric_k: int,
) -> Iterable[Candidate]:
    # Both metrics come from the leaderboard's nDCG path (one implementation):
    # the dataset's protocol, full rankings, shared tie rules and ideals.
    protocol = dataset.protocol if dataset.protocol in PROTOCOLS else "plain"
    has_pools = PoolEntry.objects.filter(query__dataset=dataset).exists()
    if not has_pools and (PROTOCOLS[protocol].pool_only or protocol == "trecdl"):
        protocol = "plain"  # pool-only presets need a pool; score every ranked doc
    names, scores = dataset_query_scores(
        dataset=dataset,
        fit=fit,
        k=metric_k,
        protocol=protocol,
        systems=[s.name for s in systems],
    )
    if "rcp_ndcg" not in scores or "qrel_ndcg" not in scores:
        return
    rcp, qrel = scores["rcp_ndcg"], scores["qrel_ndcg"]
    row = {name: i for i, name in enumerate(names)}
    rcp_col = {q: i for i, q in enumerate(rcp.queries)}
    qrel_col = {q: i for i, q in enumerate(qrel.queries)}
    scored = sorted(set(rcp_col) & set(qrel_col))
    q_pk = dict(
        dataset.queries.filter(external_id__in=scored).values_list("external_id", "id")
    )
    tops: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    for s, q, d, rank in RankingEntry.objects.filter(
        system__in=systems, rank__lte=depth
    ).values_list("system_id", "query_id", "document_id", "rank"):
        tops[s, q].append((rank, d))
    for ext in scored:
        q = q_pk[ext]
        for i, s1 in enumerate(systems):
            for s2 in systems[i + 1 :]:
                list1 = tuple(d for _, d in sorted(tops.get((s1.pk, q), [])))
                list2 = tuple(d for _, d in sorted(tops.get((s2.pk, q), [])))
                if not list1 or not list2 or list1 == list2:
                    continue
                values = (
                    float(rcp.values[row[s1.name], rcp_col[ext]]),
                    float(rcp.values[row[s2.name], rcp_col[ext]]),
                    float(qrel.values[row[s1.name], qrel_col[ext]]),
                    float(qrel.values[row[s2.name], qrel_col[ext]]),
                )
                if not all(math.isfinite(v) for v in values):
                    continue
                yield Candidate(
                    key=(dataset.name, ext, s1.name, s2.name),
                    rcp_a=values[0],
                    rcp_b=values[1],
                    qrel_a=values[2],
                    qrel_b=values[3],
                    ref=ContestSource(dataset.pk, q, (s1.pk, s2.pk), (list1, list2)),
                )


# ---------------------------------------------------------------------------- staff


def study_list(*, user: Any) -> QuerySet[Study]:
    """Studies staff and reviewers may read, with contest and member counts."""
    if not can_read_benchmarks(user):
        return Study.objects.none()
    return (
        Study.objects.annotate(
            n_contests=Count("contests", distinct=True),
            n_members=Count("members", distinct=True),
        )
        .select_related("fit")
        .order_by("-created_at", "-id")
    )


def study_get(*, user: Any, study_id: int) -> Study:
    """One study for staff/reviewers; NotFoundError for anyone else or a bad id."""
    study = study_list(user=user).filter(pk=study_id).first()
    if study is None:
        raise NotFoundError(f"study {study_id} not found")
    return study


def study_by_ref(*, ref: str) -> Study:
    """A study by id or name (management commands); NotFoundError otherwise."""
    study = Study.objects.filter(pk=int(ref)).first() if ref.isdigit() else None
    study = study or Study.objects.filter(name=ref).first()
    if study is None:
        raise NotFoundError(f"study {ref!r} not found")
    return study


def rubric_current(*, study: Study) -> Rubric:
    rubric = Rubric.objects.filter(study=study).order_by("-version").first()
    if rubric is None:
        raise NotFoundError(f"study {study.pk} has no rubric")
    return rubric


def _member_counts(username: str) -> dict[str, Any]:
    """An annotator's zeroed assignment counts in ``study_progress``."""
    return {
        "username": username,
        "submitted": 0,
        "leased": 0,
        "expired": 0,
        "invalid": 0,
    }


def contest_documents(*, study: Study) -> dict[int, list[ContestDocument]]:
    """A study's contest documents with their documents, per contest id, in the
    contest's stored (displayed) order."""
    entries: dict[int, list[ContestDocument]] = defaultdict(list)
    for e in (
        ContestDocument.objects.filter(contest__study=study)
        .select_related("document")
        .order_by("contest_id", "id")
    ):
        entries[e.contest_id].append(e)
    return entries


def study_progress(*, study: Study, now: datetime | None = None) -> dict[str, Any]:
    """Monitoring figures of one study (a handful of queries, no per-row lookups).

    Contests complete (N submitted) / in progress (some live or submitted work) / not
    started; expired leases (reclaimed, plus lapsed ones not yet reclaimed);
    per-annotator counts and median seconds per document; a cumulative timeline of
    submissions (at most 60 points).
    """
    now = now or timezone.now()
    n = study.per_contest
    contest_ids = list(Contest.objects.filter(study=study).values_list("pk", flat=True))
    submitted: dict[int, int] = defaultdict(int)
    live: dict[int, int] = defaultdict(int)
    per_user: dict[int, dict[str, Any]] = {}
    times: list[datetime] = []
    expired = lapsed = 0
    rows = Assignment.objects.filter(contest__study=study).values_list(
        "contest_id",
        "annotator_id",
        "annotator__username",
        "status",
        "expires_at",
        "submitted_at",
        "valid",
    )
    invalid = 0
    for contest_id, user_id, username, status, expires_at, submitted_at, ok in rows:
        entry = per_user.setdefault(user_id, _member_counts(username))
        if status == AssignmentStatus.SUBMITTED and not ok:
            # An excluded annotator's review: kept, but it fills no slot.
            entry["invalid"] += 1
            invalid += 1
        elif status == AssignmentStatus.SUBMITTED:
            submitted[contest_id] += 1
            live[contest_id] += 1
            entry["submitted"] += 1
            times.append(submitted_at)
        elif status == AssignmentStatus.LEASED and expires_at > now:
            live[contest_id] += 1
            entry["leased"] += 1
        else:
            entry["expired"] += 1
            if status == AssignmentStatus.EXPIRED:
                expired += 1
            else:
                lapsed += 1
    seconds: dict[int, list[float]] = defaultdict(list)
    for user_id, secs in Grade.objects.filter(
        assignment__contest__study=study
    ).values_list("assignment__annotator_id", "seconds"):
        seconds[user_id].append(secs)
    complete = sum(1 for c in contest_ids if submitted[c] >= n)
    started = sum(1 for c in contest_ids if live[c] or submitted[c])
    members = dict(
        StudyMember.objects.filter(study=study).values_list(
            "annotator_id", "annotator__username"
        )
    )
    for user_id, username in members.items():
        per_user.setdefault(user_id, _member_counts(username))
    annotators = []
    for user_id, entry in sorted(per_user.items(), key=lambda kv: kv[1]["username"]):
        secs = seconds.get(user_id, [])
        annotators.append(
            {
                **entry,
                "median_seconds_per_document": round(statistics.median(secs), 1)
                if secs
                else None,
            }
        )
    times.sort()
    step = max(1, math.ceil(len(times) / 60))
    timeline = [
        {"at": t.isoformat(), "submitted": i + 1}
        for i, t in enumerate(times)
        if (i + 1) % step == 0 or i + 1 == len(times)
    ]
    return {
        "contests": len(contest_ids),
        "complete": complete,
        "in_progress": started - complete,
        "not_started": len(contest_ids) - started,
        "gradings_submitted": len(times),
        "gradings_invalid": invalid,
        "gradings_needed": len(contest_ids) * n,
        "expired_leases": expired + lapsed,
        "annotators": annotators,
        "timeline": timeline,
    }


# ---------------------------------------------------------------------------- annotators


def annotator_study_list(*, user: Any) -> QuerySet[Study]:
    """Studies the annotator is an active member of and that are open or closed."""
    if not is_annotator(user):
        return Study.objects.none()
    return Study.objects.filter(
        members__annotator=user,
        members__active=True,
        status__in=[StudyStatus.OPEN, StudyStatus.CLOSED],
    ).order_by("-created_at", "-id")


def study_get_for_annotator(*, user: Any, study_id: int) -> Study:
    """A study the annotator may work on (member, not a draft); 404 otherwise."""
    study = annotator_study_list(user=user).filter(pk=study_id).first()
    if study is None:
        raise NotFoundError("study not found")
    return study


def assignment_get_for_annotator(*, user: Any, assignment_id: int) -> Assignment:
    """The annotator's own assignment; anything else (others', unknown) is a 404.

    Comes with its contest, the contest's study and query, and its rubric, read in
    one fixed statement (the submit and draft hot path; see ``_hot``)."""
    if not is_annotator(user):
        raise NotFoundError("assignment not found")
    hot = _hot()
    sql = (
        f"SELECT {hot.assignment.sql}, {hot.contest.sql}, {hot.study.sql}, "
        f"{hot.query.sql}, {hot.rubric.sql} FROM {_A} a "
        f"JOIN {_C} c ON c.id = a.contest_id JOIN {_S} s ON s.id = c.study_id "
        f"JOIN {_Q} q ON q.id = c.query_id JOIN {_R} r ON r.id = a.rubric_id "
        "WHERE a.id = %(assignment)s AND a.annotator_id = %(annotator)s "
        "AND s.status IN (%(open)s, %(closed)s) "
        f"AND EXISTS (SELECT 1 FROM {_M} m WHERE m.study_id = s.id "
        "AND m.annotator_id = %(annotator)s AND m.active = %(true)s)"
    )
    params = {
        "assignment": assignment_id,
        "annotator": user.pk,
        "open": StudyStatus.OPEN.value,
        "closed": StudyStatus.CLOSED.value,
        "true": True,
    }
    row = _one(sql, params)
    if row is None:
        raise NotFoundError("assignment not found")
    assignment, contest, study, query, rubric = hot.build(
        row, ("assignment", "contest", "study", "query", "rubric")
    )
    contest.study, contest.query = study, query
    assignment.contest, assignment.rubric, assignment.annotator = contest, rubric, user
    return assignment


def _one(sql: str, params: dict[str, Any]) -> tuple[Any, ...] | None:
    """The first row of a fixed statement, or None."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone()


@dataclass(frozen=True)
class _HotColumns:
    """The column lists of the annotator API's fixed statements (built once)."""

    assignment: Columns
    contest: Columns
    study: Columns
    query: Columns
    rubric: Columns

    def build(self, row: Sequence[Any], names: Sequence[str]) -> list[Any]:
        """Instances of the named column groups, in the order they appear in row."""
        out, start = [], 0
        for name in names:
            columns = getattr(self, name)
            out.append(columns.build(row, start, using=connection.alias))
            start += len(columns)
        return out


@functools.cache
def _hot() -> _HotColumns:
    return _HotColumns(
        assignment=Columns(Assignment, "a"),
        contest=Columns(Contest, "c"),
        study=Columns(Study, "s"),
        query=Columns(Query, "q"),
        rubric=Columns(Rubric, "r"),
    )


def member_lock_for_next(
    *, study_id: int, annotator: Any
) -> tuple[Study, Rubric | None] | None:
    """Lock the annotator's active membership of an open or closed study and return
    (study, its current rubric or None); None if there is no such membership.

    One fixed statement (``assignment_next_for``'s first): FOR UPDATE OF the member
    row on PostgreSQL, which serialises one annotator's own requests.
    """
    hot = _hot()
    lock = " FOR UPDATE OF m" if connection.features.has_select_for_update_of else ""
    sql = (
        f"SELECT {hot.study.sql}, {hot.rubric.sql} FROM {_M} m "
        f"JOIN {_S} s ON s.id = m.study_id LEFT JOIN {_R} r ON r.id = "
        f"(SELECT r2.id FROM {_R} r2 WHERE r2.study_id = s.id "
        "ORDER BY r2.version DESC LIMIT 1) "
        "WHERE m.study_id = %(study)s AND m.annotator_id = %(annotator)s "
        "AND m.active = %(true)s AND s.status IN (%(open)s, %(closed)s)"
        f"{lock}"
    )
    params = {
        "study": study_id,
        "annotator": annotator.pk,
        "true": True,
        "open": StudyStatus.OPEN.value,
        "closed": StudyStatus.CLOSED.value,
    }
    row = _one(sql, params)
    if row is None:
        return None
    study = hot.study.build(row, 0, using=connection.alias)
    if row[len(hot.study)] is None:
        return study, None
    rubric = hot.rubric.build(row, len(hot.study), using=connection.alias)
    rubric.study = study
    return study, rubric


def lease_in_progress(*, study: Study, annotator: Any) -> Assignment | None:
    """The annotator's newest leased assignment of the study (lapsed or not), with
    its contest (study set to ``study``), query and rubric; one fixed statement."""
    hot = _hot()
    sql = (
        f"SELECT {hot.assignment.sql}, {hot.contest.sql}, {hot.query.sql}, "
        f"{hot.rubric.sql} FROM {_A} a JOIN {_C} c ON c.id = a.contest_id "
        f"JOIN {_Q} q ON q.id = c.query_id JOIN {_R} r ON r.id = a.rubric_id "
        "WHERE c.study_id = %(study)s AND a.annotator_id = %(annotator)s "
        "AND a.status = %(leased)s ORDER BY a.leased_at DESC LIMIT 1"
    )
    params = {
        "study": study.pk,
        "annotator": annotator.pk,
        "leased": AssignmentStatus.LEASED.value,
    }
    row = _one(sql, params)
    if row is None:
        return None
    assignment, contest, query, rubric = hot.build(
        row, ("assignment", "contest", "query", "rubric")
    )
    contest.study, contest.query = study, query
    assignment.contest, assignment.rubric, assignment.annotator = (
        contest,
        rubric,
        annotator,
    )
    return assignment


# The annotator API's hot path in SQL. Built with the ORM, these nested correlated
# subqueries cost ~4 ms of query compilation per request (more than PostgreSQL took
# to run them) and capped the API's throughput; as fixed statements they cost
# nothing to build. Portable SQL (SQLite and PostgreSQL); the row lock clause comes
# from the backend's features. The rules are ASSIGNMENT.md's: a contest's live
# assignments are the submitted ones and the leased, unexpired ones.
_A = Assignment._meta.db_table
_C = Contest._meta.db_table
_Q = Query._meta.db_table
_S = Study._meta.db_table
_R = Rubric._meta.db_table
_M = StudyMember._meta.db_table
# One pass over the study's assignments, grouped by contest: live assignments (the
# same rule as _live: valid submitted ones and unexpired leases), whether the
# annotator ever had the contest, and whether they submitted it. Read once per
# statement (a CTE) for the pick, the "left" count and the "done" count: about a
# quarter of the cost of correlated subqueries per contest.
_STATE_SQL = (
    "SELECT l.contest_id AS id, SUM(CASE WHEN (l.status = %(submitted)s AND "
    "l.valid = %(valid)s) OR (l.status = %(leased)s AND l.expires_at > %(now)s) "
    "THEN 1 ELSE 0 END) AS n_live, "
    "MAX(CASE WHEN l.annotator_id = %(annotator)s THEN 1 ELSE 0 END) AS had, "
    "MAX(CASE WHEN l.annotator_id = %(annotator)s AND l.status = %(submitted)s "
    "THEN 1 ELSE 0 END) AS done "
    f"FROM {_A} l JOIN {_C} s ON s.id = l.contest_id "
    "WHERE s.study_id = %(study)s GROUP BY l.contest_id"
)
# Contests open to the annotator: fewer than N live assignments, never theirs.
_OPEN_CTES = (
    f"WITH st AS ({_STATE_SQL}), open_to AS (SELECT c.id, "
    f"COALESCE(st.n_live, 0) AS n_live FROM {_C} c LEFT JOIN st ON st.id = c.id "
    "WHERE c.study_id = %(study)s AND COALESCE(st.had, 0) = 0 "
    "AND COALESCE(st.n_live, 0) < %(per_contest)s) "
)
_PROGRESS_SQL = (
    "(SELECT COALESCE(SUM(done), 0) FROM st) AS contests_done, "
    "(SELECT COUNT(*) FROM open_to) AS contests_left"
)


def _open_to_params(*, study: Study, annotator: Any, now: datetime) -> dict[str, Any]:
    return {
        "study": study.pk,
        "annotator": annotator.pk,
        "per_contest": study.per_contest,
        "submitted": AssignmentStatus.SUBMITTED.value,
        "leased": AssignmentStatus.LEASED.value,
        "valid": True,
        "now": connection.ops.adapt_datetimefield_value(now),
    }


def contest_lock_open_to(
    *,
    study: Study,
    annotator: Any,
    now: datetime,
    exclude: Sequence[int] = (),
    wait: bool = False,
) -> Contest | None:
    """Lock and return the first contest open to ``annotator``: fewer than N live
    assignments and never theirs; fullest first (started contests are completed
    before new ones are opened), then by position. None if there is none.

    PostgreSQL: FOR UPDATE OF the contest row, SKIP LOCKED unless ``wait``; the
    caller must recount the slots under the lock (ASSIGNMENT.md). The contest comes
    with its query's text and the annotator's progress read in the same statement
    (``contests_done``/``contests_left``, counting this contest as left).
    """
    params = _open_to_params(study=study, annotator=annotator, now=now)
    skip = ""
    if exclude:
        names = [f"x{i}" for i in range(len(exclude))]
        params.update(zip(names, exclude, strict=True))
        skip = " AND c.id NOT IN (" + ", ".join(f"%({n})s" for n in names) + ")"
    lock = ""
    if connection.features.has_select_for_update:
        lock = " FOR UPDATE"
        if connection.features.has_select_for_update_of:
            lock += " OF c"
        if not wait and connection.features.has_select_for_update_skip_locked:
            lock += " SKIP LOCKED"
    sql = (
        f"{_OPEN_CTES}SELECT c.id, c.position, c.query_id, q.text, o.n_live, "
        f"{_PROGRESS_SQL} FROM open_to o JOIN {_C} c ON c.id = o.id "
        f"JOIN {_Q} q ON q.id = c.query_id"
        f"{skip.replace(' AND', ' WHERE', 1)} ORDER BY o.n_live DESC, c.position ASC "
        f"LIMIT 1{lock}"
    )
    row = _one(sql, params)
    if row is None:
        return None
    pk, position, query_id, text, _n_live, done, left = row
    db = connection.alias
    contest = Contest.from_db(
        db,
        ["id", "study_id", "position", "query_id"],
        [pk, study.pk, position, query_id],
    )
    contest.study = study
    contest.query = Query.from_db(db, ["id", "text"], [query_id, text])
    contest.contests_done, contest.contests_left = done, left
    return contest


def annotator_progress(
    *, study: Study, annotator: Any, now: datetime | None = None
) -> dict[str, int]:
    """The annotator's own progress, in one query: contests they submitted, and
    contests still open to them (fewer than N live assignments, never theirs)."""
    params = _open_to_params(
        study=study, annotator=annotator, now=now or timezone.now()
    )
    with connection.cursor() as cursor:
        cursor.execute(f"{_OPEN_CTES}SELECT {_PROGRESS_SQL}", params)
        done, left = cursor.fetchone()
    return {"contests_done": done, "contests_left": left}


def annotator_has_lease(*, study: Study, annotator: Any) -> bool:
    """Whether the annotator holds a lease in the study (a contest to come back to,
    even when no new contest is left for them)."""
    return Assignment.objects.filter(
        contest__study=study, annotator=annotator, status=AssignmentStatus.LEASED
    ).exists()


def assignment_payload(
    *,
    assignment: Assignment,
    with_draft: bool = False,
    progress: dict[str, int] | None = None,
    texts: dict[int, tuple[str, str]] | None = None,
) -> dict[str, Any]:
    """What a blind annotator sees of one assignment, and nothing more.

    Documents in the assignment's shuffled order under opaque keys; no system, rank,
    list membership, external id, qrel, gain or metric ever enters this dict.
    ``progress`` and ``texts`` (document id -> (title, text)), when the caller read
    them already (``services.assignment_next_for``), save their queries.
    """
    contest = assignment.contest
    study = contest.study
    if texts is None:
        texts = {
            pk: (title, text)
            for pk, title, text in Document.objects.filter(
                pk__in=[d["document"] for d in assignment.documents]
            ).values_list("pk", "title", "text")
        }
    payload: dict[str, Any] = {
        "assignment": assignment.pk,
        "status": assignment.status,
        "query": contest.query.text,
        "instructions": study.instructions,
        "questions": [
            {"key": q["key"], "text": q["text"]} for q in assignment.rubric.questions
        ],
        "documents": [
            {
                "key": d["key"],
                "title": texts[d["document"]][0],
                "text": texts[d["document"]][1],
            }
            for d in assignment.documents
        ],
        "options": {
            "order": study.collect_order,
            "comment": study.collect_comments,
        },
        "expires_at": assignment.expires_at,
        "progress": {
            "documents": len(assignment.documents),
            **(
                progress
                or annotator_progress(study=study, annotator=assignment.annotator)
            ),
        },
    }
    if with_draft:
        payload["draft"] = assignment.draft
        payload["draft_saved_at"] = assignment.draft_saved_at
    return payload


def systems_by_names(
    *, datasets: Sequence[Dataset], names: Sequence[str]
) -> list[System]:
    """Systems named ``names`` in every dataset; NotFoundError names the first gap."""
    out: list[System] = []
    for dataset in datasets:
        found = {
            s.name: s for s in System.objects.filter(dataset=dataset, name__in=names)
        }
        for name in names:
            if name not in found:
                raise NotFoundError(
                    f"system {name!r} not found in dataset {dataset.name!r}",
                    extra={"dataset": dataset.name, "system": name},
                )
            out.append(found[name])
    return out


def annotators_by_usernames(*, usernames: Sequence[str]) -> list[Any]:
    """Annotator accounts by username, in the given order; NotFoundError on a gap."""
    from .models import Annotator

    found = {u.username: u for u in Annotator.objects.filter(username__in=usernames)}
    missing = [u for u in usernames if u not in found]
    if missing:
        raise NotFoundError(
            f"no annotator named {missing[0]!r}", extra={"missing": missing[:20]}
        )
    return [found[u] for u in usernames]


# ---------------------------------------------------------------------------- accounts


def annotator_accounts() -> QuerySet[Any]:
    """Annotator accounts (the annotators group, never staff), by username."""
    from .models import Annotator

    return Annotator.objects.filter(is_staff=False, is_superuser=False).order_by(
        "username"
    )


def query_document_for_gold(
    *, study: Study, query_id: str, doc_id: str
) -> tuple[Any, Document]:
    """A contest query of the study and a document of its dataset, by external ids
    (the staff gold form); NotFoundError names what is missing."""
    contest = (
        Contest.objects.filter(study=study, query__external_id=query_id.strip())
        .select_related("query")
        .first()
    )
    if contest is None:
        raise NotFoundError(f"no contest of this study has query {query_id!r}")
    document = Document.objects.filter(
        dataset_id=contest.query.dataset_id, external_id=doc_id.strip()
    ).first()
    if document is None:
        raise NotFoundError(f"document {doc_id!r} not found in the query's dataset")
    return contest.query, document


def annotator_accounts_with_studies() -> list[tuple[Any, list[StudyMember]]]:
    """Staff page rows: each annotator account with its study memberships."""
    users = list(annotator_accounts())
    memberships: dict[int, list[StudyMember]] = defaultdict(list)
    for m in StudyMember.objects.filter(annotator__in=users).order_by("study_id"):
        memberships[m.annotator_id].append(m)
    return [(u, memberships[u.pk]) for u in users]


# ---------------------------------------------------------------------------- releases


def release_list(*, study: Study) -> QuerySet[Release]:
    """A study's releases, newest first (staff pages only)."""
    return Release.objects.filter(study=study).order_by("-number")


def release_list_all(*, user: Any) -> QuerySet[Release]:
    """Every release of every study, newest first, with its study (staff only:
    releases are the published data; empty for anyone else)."""
    if not getattr(user, "is_staff", False):
        return Release.objects.none()
    return Release.objects.select_related("study").order_by("-created_at", "-id")


def release_get(*, study: Study, number: int) -> Release:
    """One release of a study by number; NotFoundError otherwise."""
    release = Release.objects.filter(study=study, number=number).first()
    if release is None:
        raise NotFoundError(f"study {study.pk} has no release {number}")
    return release
