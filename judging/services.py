"""Writes of the judging app: judges, jobs and their lifecycle, window records,
judgment import/export.

Window rows move planned -> in_flight -> done through compare-and-set updates, so
two runners (or a task run twice) never ask or store one window twice.
"""

from __future__ import annotations

import functools
import json
import math
import secrets
import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction
from django.db.models import Case, Exists, F, Q, When
from django.utils import timezone

from benchmarks.formats import FormatError, numbered_lines, open_text
from benchmarks.models import Dataset, Document, PoolEntry, Query
from rcp_platform.exceptions import ApplicationError, ConflictError

from . import prompts
from .keyenv import api_key_env_refusal
from .models import (
    Decoding,
    InvalidCategory,
    JobStages,
    JobStatus,
    Judge,
    JudgingJob,
    JudgingUnit,
    JudgmentWindow,
    Phase,
    Stage,
    UnitStatus,
    WindowStatus,
)
from .schedules import RubricSchedule, TournamentSchedule

STAGE_ALIASES = {
    "A": Stage.TOURNAMENT,
    "B": Stage.RUBRIC,
    "tournament": Stage.TOURNAMENT,
    "rubric": Stage.RUBRIC,
}
# Rough answer sizes for estimates: a score per document, or five verdicts plus a
# one-line reason per document (measured on the simulated judge and typical models).
OUTPUT_TOKENS_PER_DOC = {Stage.TOURNAMENT: 14, Stage.RUBRIC: 40}
OUTPUT_TOKENS_BASE = 40
DEFAULT_LATENCY_S = 2.0


def heartbeat_stale_after() -> timedelta:
    return timedelta(seconds=getattr(settings, "JUDGING_HEARTBEAT_STALE_S", 60))


def window_lease_s() -> float:
    """A claimed window's lease. Runners renew it with each heartbeat while its call
    is in progress, so it only needs to outlast a few missed heartbeats, not the call."""
    return float(getattr(settings, "JUDGING_LEASE_S", 30))


def heartbeat_s() -> float:
    return float(getattr(settings, "JUDGING_HEARTBEAT_S", 2.0))


def unit_threads() -> int:
    """Unit loops per lane (each holds one database connection)."""
    return int(getattr(settings, "JUDGING_UNIT_THREADS", 16))


# ----------------------------------------------------------------------------- judges


JUDGE_FIELDS = (
    "base_urls",
    "model",
    "api_key_env",
    "concurrency",
    "max_output_tokens",
    "decoding",
    "temperature",
    "context_tokens",
    "timeout_s",
    "extra_body",
)


def _check_judge_fields(*, base_urls: list[str], api_key_env: str) -> list[str]:
    """Normalized base URLs; ApplicationError for a bad URL or key variable."""
    if not base_urls:
        raise ApplicationError("a judge needs at least one base URL")
    for url in base_urls:
        if not url.startswith(("http://", "https://")):
            raise ApplicationError(
                f"base URL {url!r} must start with http:// or https://"
            )
    refusal = api_key_env_refusal(api_key_env)
    if refusal is not None:
        raise ApplicationError(refusal, extra={"field": "api_key_env"})
    return [u.rstrip("/") for u in base_urls]


def _judge_save(judge: Judge, update_fields: list[str] | None = None) -> Judge:
    try:
        judge.full_clean()
    except ValidationError as exc:
        raise ApplicationError(
            "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())
        ) from exc
    judge.save(update_fields=update_fields)
    return judge


@transaction.atomic
def judge_create(
    *,
    name: str,
    base_urls: list[str],
    model: str,
    api_key_env: str = "",
    concurrency: int = 8,
    max_output_tokens: int = 2048,
    decoding: str = Decoding.JSON_SCHEMA,
    temperature: float | None = None,
    context_tokens: int | None = None,
    timeout_s: float = 120.0,
    extra_body: dict | None = None,
) -> Judge:
    """Create a judge. ``api_key_env`` names an environment variable declared for judge
    keys (``judging.keyenv``); keys are never stored."""
    if Judge.objects.filter(name=name).exists():
        raise ConflictError(f"judge {name!r} already exists")
    judge = Judge(
        name=name,
        base_urls=_check_judge_fields(base_urls=base_urls, api_key_env=api_key_env),
        model=model,
        api_key_env=api_key_env,
        concurrency=concurrency,
        max_output_tokens=max_output_tokens,
        decoding=decoding,
        temperature=temperature,
        context_tokens=context_tokens,
        timeout_s=timeout_s,
        extra_body=extra_body or {},
    )
    return _judge_save(judge)


@transaction.atomic
def judge_update(*, judge: Judge, **fields: Any) -> Judge:
    """Change a judge's endpoint settings (any of ``JUDGE_FIELDS``).

    Jobs already running pick the change up on their next run; windows stored stay
    under their family. An offline label has no endpoint to edit.
    """
    unknown = set(fields) - set(JUDGE_FIELDS)
    if unknown:
        raise ApplicationError(f"unknown judge fields: {', '.join(sorted(unknown))}")
    judge = Judge.objects.select_for_update().get(pk=judge.pk)
    if judge.offline:
        raise ApplicationError(
            f"judge {judge.name!r} is an offline label for imported judgments"
        )
    merged = {f: getattr(judge, f) for f in JUDGE_FIELDS} | fields
    merged["base_urls"] = _check_judge_fields(
        base_urls=list(merged["base_urls"] or []), api_key_env=merged["api_key_env"]
    )
    merged["extra_body"] = merged["extra_body"] or {}
    for key, value in merged.items():
        setattr(judge, key, value)
    return _judge_save(judge, update_fields=list(JUDGE_FIELDS))


def _offline_judge(name: str) -> Judge:
    judge, _ = Judge.objects.get_or_create(
        name=name, defaults={"offline": True, "model": "imported"}
    )
    return judge


# ----------------------------------------------------------------------------- schedules


def job_schedules(params: dict[str, Any]) -> tuple[TournamentSchedule, RubricSchedule]:
    """Schedule objects from a job's ``params`` (``{"tournament": {...}, "rubric": {...}}``)."""
    try:
        return (
            TournamentSchedule(**params.get("tournament", {})),
            RubricSchedule(**params.get("rubric", {})),
        )
    except (TypeError, ValueError) as exc:
        raise ApplicationError(f"bad schedule parameters: {exc}") from exc


def job_stage_list(stages: str) -> list[str]:
    return [Stage.TOURNAMENT, Stage.RUBRIC] if stages == JobStages.BOTH else [stages]


def planned_calls(
    *, stage: str, n_docs: int, tournament: TournamentSchedule, rubric: RubricSchedule
) -> dict[str, int]:
    """Upper bound of calls per phase for one query's pool of ``n_docs``."""
    if stage == Stage.TOURNAMENT:
        n_random, n_stratified, per_batch = tournament.windows_for(n_docs)
        mirror = 2 if tournament.mirror else 1
        return {
            Phase.RANDOM: mirror * n_random,
            Phase.STRATIFIED: mirror * n_stratified,
            Phase.ADAPTIVE: tournament.adaptive_batches_for(n_docs) * per_batch,
        }
    n_random, n_stratified = rubric.windows_for(n_docs)
    return {Phase.RANDOM: n_random, Phase.STRATIFIED: n_stratified}


def job_queries(dataset: Dataset, query_ids: list[str] | None) -> list[Query]:
    """A job's queries: the named ones in the given order, else all by id."""
    queries = Query.objects.filter(dataset=dataset).order_by("id")
    if query_ids:
        found = {q.external_id: q for q in queries.filter(external_id__in=query_ids)}
        missing = [q for q in query_ids if q not in found]
        if missing:
            raise ApplicationError(
                f"unknown query ids in dataset {dataset.name!r}: {', '.join(missing[:5])}"
            )
        return [found[q] for q in query_ids]
    return list(queries)


@dataclass(frozen=True)
class Estimate:
    calls: int
    calls_by_stage: dict[str, int]
    input_tokens: int
    output_tokens: int
    wall_s: float
    latency_s: float
    latency_measured: bool
    queries: int

    def as_dict(self) -> dict[str, Any]:
        return self.__dict__ | {
            "wall_s": round(self.wall_s, 1),
            "latency_s": round(self.latency_s, 3),
        }


def job_estimate(
    *,
    dataset: Dataset,
    judge: Judge,
    stages: str = JobStages.BOTH,
    query_ids: list[str] | None = None,
    params: dict | None = None,
) -> Estimate:
    """Calls, tokens and wall time a job would need, without calling anything.

    Calls are the schedule's upper bound (adaptive batches may stop early). Input
    tokens render each query's template and add its mean pooled document length;
    wall time uses the judge's measured median latency when it has answered before.
    """
    tournament, rubric = job_schedules(params or {})
    queries = job_queries(dataset, query_ids)
    pools = query_pools(queries)
    calls_by_stage = {s: 0 for s in job_stage_list(stages)}
    input_tokens = output_tokens = 0
    for query in queries:
        doc_ids, texts = pools[query.pk]
        n = len(doc_ids)
        if not n:
            continue
        mean_doc_tokens = sum(prompts.count_tokens(t) for t in texts.values()) / n
        for stage in calls_by_stage:
            calls = sum(
                planned_calls(
                    stage=stage, n_docs=n, tournament=tournament, rubric=rubric
                ).values()
            )
            window = min(
                tournament.window if stage == Stage.TOURNAMENT else rubric.window, n
            )
            overhead = prompts.count_tokens(
                prompts.render_text(stage, query.text, [""] * window)
            )
            input_tokens += round(calls * (overhead + window * mean_doc_tokens))
            output_tokens += calls * (
                OUTPUT_TOKENS_BASE + window * OUTPUT_TOKENS_PER_DOC[stage]
            )
            calls_by_stage[stage] += calls
    latencies = list(
        JudgmentWindow.objects.filter(
            judge=judge, status=WindowStatus.DONE, latency_ms__gt=0
        )
        .order_by("-completed_at")
        .values_list("latency_ms", flat=True)[:500]
    )
    latency = (
        sorted(latencies)[len(latencies) // 2] / 1000
        if latencies
        else DEFAULT_LATENCY_S
    )
    total = sum(calls_by_stage.values())
    return Estimate(
        calls=total,
        calls_by_stage=calls_by_stage,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        wall_s=total * latency / max(judge.concurrency, 1),
        latency_s=latency,
        latency_measured=bool(latencies),
        queries=len(queries),
    )


def document_text(title: str, text: str) -> str:
    """What a judge reads of a document: its title on a line of its own, then the text."""
    return f"{title}\n{text}".strip() if title else text


def query_pools(queries: list[Query]) -> dict[int, tuple[list[str], dict[str, str]]]:
    """Each query's pool in pool-rank order: (external doc ids, id -> title + text)."""
    out: dict[int, tuple[list[str], dict[str, str]]] = {q.pk: ([], {}) for q in queries}
    rows = (
        PoolEntry.objects.filter(query__in=[q.pk for q in queries])
        .order_by("query_id", "rank", "document_id")
        .values_list(
            "query_id", "document__external_id", "document__title", "document__text"
        )
    )
    for query_id, doc, title, text in rows.iterator(chunk_size=5000):
        ids, texts = out[query_id]
        ids.append(doc)
        texts[doc] = document_text(title, text)
    return out


# ----------------------------------------------------------------------------- jobs


@transaction.atomic
def job_create(
    *,
    dataset: Dataset,
    judge: Judge,
    stages: str = JobStages.BOTH,
    query_ids: list[str] | None = None,
    params: dict | None = None,
    family: str | None = None,
    user: Any = None,
    queue: bool = True,
) -> JudgingJob:
    """Create a pending job; with ``queue`` its run task is sent on commit."""
    if judge.offline:
        raise ApplicationError(
            f"judge {judge.name!r} is an offline label for imported judgments; it has no endpoint"
        )
    if stages not in JobStages.values:
        raise ApplicationError(f"stages must be one of {', '.join(JobStages.values)}")
    job_schedules(params or {})
    queries = job_queries(dataset, query_ids)
    if not PoolEntry.objects.filter(query__in=queries).exists():
        raise ApplicationError(
            f"dataset {dataset.name!r} has no pools to judge; import pools first"
        )
    job = JudgingJob(
        dataset=dataset,
        judge=judge,
        family=family or judge.name,
        stages=stages,
        query_ids=query_ids or None,
        params=params or {},
        created_by=user if getattr(user, "is_authenticated", False) else None,
    )
    job.full_clean()
    job.save()
    if queue:
        _queue(job)
    return job


def _queue(job: JudgingJob) -> None:
    from .tasks import judging_job_run_task

    transaction.on_commit(lambda: judging_job_run_task.delay(job.pk))


def job_claim(*, job_id: int) -> str | None:
    """Take a job for running (compare-and-set); returns the new run token, or None
    if someone else runs it.

    A running job whose heartbeat is stale (its runner died) can be taken over: the
    run token changes first, then the old run's in-flight windows go back to planned.
    From then on the old run can neither claim windows (``windows_claim`` checks the
    job's token in the same statement), nor store an answer (``window_complete``
    checks the window's claim), nor close the job (``job_finish`` checks the token):
    it is fenced, even if it was only frozen and wakes up later.
    """
    now = timezone.now()
    token = secrets.token_hex(16)
    taken = JudgingJob.objects.filter(pk=job_id, status=JobStatus.PENDING).update(
        status=JobStatus.RUNNING,
        heartbeat_at=now,
        started_at=now,
        error="",
        run_token=token,
    )
    if taken:
        return token
    stale = now - heartbeat_stale_after()
    taken = JudgingJob.objects.filter(
        Q(heartbeat_at__lt=stale) | Q(heartbeat_at__isnull=True),
        pk=job_id,
        status=JobStatus.RUNNING,
    ).update(heartbeat_at=now, run_token=token)
    if taken:
        _release_in_flight(job_id)
        return token
    return None


def job_heartbeat(*, job_id: int, token: str) -> str:
    """Refresh the job's heartbeat for run ``token``; returns the job's status as this
    run should see it: ``FENCED`` if another run took the job over (the runner stops
    on anything but running)."""
    JudgingJob.objects.filter(
        pk=job_id, status=JobStatus.RUNNING, run_token=token
    ).update(heartbeat_at=timezone.now())
    status, current = JudgingJob.objects.values_list("status", "run_token").get(
        pk=job_id
    )
    return status if current == token else FENCED


FENCED = "fenced"


def job_finish(*, job_id: int, status: str, error: str = "", token: str) -> bool:
    """Close run ``token`` of a running job as done or failed (a pause or cancel already
    set its status). False if the job is no longer running under that token."""
    closed = JudgingJob.objects.filter(
        pk=job_id, status=JobStatus.RUNNING, run_token=token
    ).update(status=status, error=error[:4000], finished_at=timezone.now())
    if closed and status == JobStatus.FAILED:
        _release_in_flight(job_id)
    return bool(closed)


def _release_in_flight(job_id: int) -> int:
    """Windows a dead, fenced or failed run held go back to planned (asked again
    later); their claims are cleared, so the old holder can no longer store them."""
    return JudgmentWindow.objects.filter(
        job_id=job_id, status=WindowStatus.IN_FLIGHT
    ).update(status=WindowStatus.PLANNED, lease_until=None, claim="")


def job_pause(*, job: JudgingJob) -> JudgingJob:
    """Ask a running or pending job to pause; its runner stops claiming new windows."""
    changed = JudgingJob.objects.filter(
        pk=job.pk, status__in=[JobStatus.RUNNING, JobStatus.PENDING]
    ).update(status=JobStatus.PAUSED)
    if not changed:
        raise ConflictError(
            f"job {job.pk} is {job.status}; only a pending or running job can pause"
        )
    job.refresh_from_db()
    return job


def job_cancel(*, job: JudgingJob) -> JudgingJob:
    """Cancel a job that has not finished. Windows already answered stay stored."""
    changed = JudgingJob.objects.filter(
        pk=job.pk, status__in=[JobStatus.RUNNING, JobStatus.PENDING, JobStatus.PAUSED]
    ).update(status=JobStatus.CANCELLED, finished_at=timezone.now())
    if not changed:
        raise ConflictError(f"job {job.pk} is {job.status}; it cannot be cancelled")
    job.refresh_from_db()
    return job


@transaction.atomic
def job_resume(*, job: JudgingJob, queue: bool = True) -> JudgingJob:
    """Resume a paused, failed or cancelled job, or one whose worker died.

    Only missing windows are asked: everything stored is kept.
    """
    job = JudgingJob.objects.select_for_update().get(pk=job.pk)
    stale = (
        job.heartbeat_at is None
        or job.heartbeat_at < timezone.now() - heartbeat_stale_after()
    )
    if job.status == JobStatus.RUNNING and not stale:
        raise ConflictError(f"job {job.pk} is running")
    if job.status == JobStatus.DONE:
        raise ConflictError(f"job {job.pk} is done; nothing to resume")
    _release_in_flight(job.pk)
    job.status = JobStatus.PENDING
    job.error = ""
    job.finished_at = None
    job.run_token = ""  # fences whatever is left of the previous run
    job.save(update_fields=["status", "error", "finished_at", "run_token"])
    if queue:
        _queue(job)
    return job


def job_count(
    *,
    job_id: int,
    requests: int = 0,
    retries: int = 0,
    input_tokens: int = 0,
    output_tokens: int = 0,
    wasted: int = 0,
) -> None:
    """Add to a job's request counters atomically (many threads report at once)."""
    JudgingJob.objects.filter(pk=job_id).update(
        requests=F("requests") + requests,
        retries=F("retries") + retries,
        wasted=F("wasted") + wasted,
        input_tokens=F("input_tokens") + input_tokens,
        output_tokens=F("output_tokens") + output_tokens,
    )


# ----------------------------------------------------------------------------- units


def job_units_plan(*, job: JudgingJob) -> list[int]:
    """Ensure one unit per (query with a pool, stage) of the job; returns the ids of
    those not done: Stage A units in query order, then Stage B's.

    Called by the run that just claimed the job: units still marked running belong to
    a run that was fenced (take-over, resume), so they go back to pending.
    """
    queries = job_queries(job.dataset, job.query_ids)
    with_pool = set(
        PoolEntry.objects.filter(query__in=queries).values_list("query_id", flat=True)
    )
    stages = job_stage_list(job.stages)
    JudgingUnit.objects.bulk_create(
        [
            JudgingUnit(job=job, query=q, stage=stage)
            for q in queries
            if q.pk in with_pool
            for stage in stages
        ],
        ignore_conflicts=True,
    )
    JudgingUnit.objects.filter(job=job, status=UnitStatus.RUNNING).update(
        status=UnitStatus.PENDING, claim="", lease_until=None
    )
    order = {q.pk: i for i, q in enumerate(queries)}
    rows = JudgingUnit.objects.filter(job=job).exclude(status=UnitStatus.DONE)
    # Stage A units first: ten rounds that wait on each other, against two in Stage
    # B, so started last they would leave the judge's slots idle at the job's end.
    # Lanes take every LANES-th id of this list: each gets both stages.
    return [
        pk
        for pk, _, _ in sorted(
            rows.values_list("pk", "query_id", "stage"),
            key=lambda r: (r[2] != Stage.TOURNAMENT, order.get(r[1], 0)),
        )
    ]


def unit_claim(
    *,
    job_id: int,
    job_token: str,
    token: str,
    lease_s: float,
    prefer: list[int] | tuple[int, ...] = (),
) -> JudgingUnit | None:
    """Claim one unit of run ``job_token`` (compare-and-set): a pending one, preferably
    from ``prefer`` (the lane's own share), else any pending one, else one whose
    holder's lease ran out (a dead lane); Stage A before Stage B (see
    ``job_units_plan``). None if nothing is claimable now.

    Raises JobFenced once the job is no longer running under ``job_token``.
    """
    now = timezone.now()
    ours = Exists(
        JudgingJob.objects.filter(
            pk=job_id, run_token=job_token, status=JobStatus.RUNNING
        )
    )
    claimable = Q(status=UnitStatus.PENDING) | Q(
        status=UnitStatus.RUNNING, lease_until__lt=now
    )
    base = JudgingUnit.objects.filter(claimable, job_id=job_id)
    stage_a_first = Case(When(stage=Stage.TOURNAMENT, then=0), default=1)
    for candidates in (base.filter(pk__in=list(prefer)), base):
        for pk in candidates.order_by("status", stage_a_first, "pk").values_list(
            "pk", flat=True
        )[:8]:
            if (
                JudgingUnit.objects.filter(claimable, ours, pk=pk).update(
                    status=UnitStatus.RUNNING,
                    claim=token,
                    lease_until=now + timedelta(seconds=lease_s),
                )
                == 1
            ):
                return JudgingUnit.objects.select_related("query").get(pk=pk)
    if not JudgingJob.objects.filter(
        pk=job_id, run_token=job_token, status=JobStatus.RUNNING
    ).exists():
        raise JobFenced(f"job {job_id} is no longer running under this run")
    return None


def unit_done(*, unit_id: int, token: str) -> bool:
    """Mark a unit done, only while ``token`` still holds it."""
    return bool(
        JudgingUnit.objects.filter(
            pk=unit_id, status=UnitStatus.RUNNING, claim=token
        ).update(status=UnitStatus.DONE, lease_until=None)
    )


def unit_release(*, unit_id: int, token: str) -> None:
    """Give a unit back (the lane stops before finishing it)."""
    JudgingUnit.objects.filter(
        pk=unit_id, status=UnitStatus.RUNNING, claim=token
    ).update(status=UnitStatus.PENDING, claim="", lease_until=None)


def units_renew(*, unit_ids: list[int], token: str, lease_s: float) -> int:
    """Extend the leases of units ``token`` still holds (the lane's heartbeat)."""
    if not unit_ids:
        return 0
    return JudgingUnit.objects.filter(
        pk__in=unit_ids, status=UnitStatus.RUNNING, claim=token
    ).update(lease_until=timezone.now() + timedelta(seconds=lease_s))


def units_left(*, job_id: int) -> int:
    """Units of the job not done yet."""
    return (
        JudgingUnit.objects.filter(job_id=job_id)
        .exclude(status=UnitStatus.DONE)
        .count()
    )


# ----------------------------------------------------------------------------- windows


def windows_plan(
    *, job: JudgingJob, query: Query, stage: str, planned: list
) -> list[JudgmentWindow]:
    """Ensure a row exists for each planned window; return the rows in seq order.

    Rows from earlier runs are kept; a row whose documents differ from the plan
    means the schedule changed under a family and is refused.
    """
    rows = [
        JudgmentWindow(
            family=job.family,
            judge=job.judge,
            job=job,
            query=query,
            stage=stage,
            phase=p.phase,
            seq=p.seq,
            batch=p.batch if p.phase == Phase.ADAPTIVE else None,
            mirrored=p.reversed,
            doc_ids=list(p.doc_ids),
        )
        for p in planned
    ]
    JudgmentWindow.objects.bulk_create(rows, ignore_conflicts=True)
    stored = {
        w.seq: w
        for w in JudgmentWindow.objects.filter(
            family=job.family,
            query=query,
            stage=stage,
            seq__in=[p.seq for p in planned],
        )
    }
    for p in planned:
        row = stored[p.seq]
        if row.doc_ids == list(p.doc_ids):
            continue
        if row.status == WindowStatus.PLANNED:
            # Never asked: an earlier run planned it from answers that have since
            # changed (a refused window answered on resume). Re-plan it in place.
            JudgmentWindow.objects.filter(
                pk=row.pk, status=WindowStatus.PLANNED
            ).update(
                doc_ids=list(p.doc_ids),
                phase=p.phase,
                batch=p.batch if p.phase == Phase.ADAPTIVE else None,
                mirrored=p.reversed,
            )
            row.doc_ids = list(p.doc_ids)
            continue
        raise ApplicationError(
            f"window {p.seq} of query {query.external_id!r} ({stage}) was stored with other "
            f"documents: the schedule of family {job.family!r} changed; use a new family"
        )
    return [stored[p.seq] for p in planned]


def windows_claim(
    *,
    window_ids: list[int],
    job_id: int,
    token: str,
    lease_s: float,
    reask: set[int],
    job_token: str | None = None,
) -> list[int]:
    """Compare-and-set windows to in-flight under this runner's ``token`` in one
    statement; returns the ids it got. Windows held by a live lease are skipped.

    ``reask`` are ids of refused windows (no answer) this run may ask again.
    ``job_token`` (default: ``token``) is the job's run token: the statement claims
    nothing once the job was taken over or stopped running, and ``JobFenced`` tells
    the runner so.
    """
    job_token = token if job_token is None else job_token
    now = timezone.now()
    claimable = Q(status=WindowStatus.PLANNED) | Q(
        status=WindowStatus.IN_FLIGHT, lease_until__lt=now
    )
    if reask:
        claimable |= Q(
            pk__in=reask,
            status=WindowStatus.DONE,
            invalid_category=InvalidCategory.REFUSED,
        )
    ours = Exists(
        JudgingJob.objects.filter(
            pk=job_id, run_token=job_token, status=JobStatus.RUNNING
        )
    )
    claimed = JudgmentWindow.objects.filter(claimable, ours, pk__in=window_ids).update(
        status=WindowStatus.IN_FLIGHT,
        job_id=job_id,
        claim=token,
        lease_until=now + timedelta(seconds=lease_s),
    )
    if (
        not claimed
        and not JudgingJob.objects.filter(
            pk=job_id, run_token=job_token, status=JobStatus.RUNNING
        ).exists()
    ):
        raise JobFenced(f"job {job_id} is no longer running under this run")
    return list(
        JudgmentWindow.objects.filter(
            pk__in=window_ids, status=WindowStatus.IN_FLIGHT, claim=token
        ).values_list("pk", flat=True)
    )


class JobFenced(Exception):
    """The job was taken over by another run, paused, cancelled or closed."""


def windows_renew(*, window_ids: list[int], token: str, lease_s: float) -> int:
    """Extend the leases of windows still held under ``token`` (the runner's heartbeat,
    while their calls are in progress); returns how many are still ours."""
    if not window_ids:
        return 0
    until = timezone.now() + timedelta(seconds=lease_s)
    if connection.vendor != "postgresql":
        return JudgmentWindow.objects.filter(
            pk__in=window_ids, status=WindowStatus.IN_FLIGHT, claim=token
        ).update(lease_until=until)
    # Rows locked in id order, as ``windows_complete`` locks them (no deadlock).
    meta = JudgmentWindow._meta
    qn = connection.ops.quote_name
    table, pk = qn(meta.db_table), qn(meta.pk.column)
    with connection.cursor() as cursor:
        cursor.execute(
            f"WITH locked AS MATERIALIZED (SELECT {pk} FROM {table} "
            f"WHERE {pk} = ANY(%s) AND {qn(meta.get_field('status').column)} = %s "
            f"AND {qn(meta.get_field('claim').column)} = %s ORDER BY {pk} FOR UPDATE) "
            f"UPDATE {table} SET {qn(meta.get_field('lease_until').column)} = %s "
            f"WHERE {pk} IN (SELECT {pk} FROM locked)",
            [
                list(window_ids),
                WindowStatus.IN_FLIGHT.value,
                token,
                meta.get_field("lease_until").get_db_prep_save(until, connection),
            ],
        )
        return cursor.rowcount


def window_release(*, window_id: int, token: str) -> None:
    """Give a claimed window back (its call could not be made)."""
    JudgmentWindow.objects.filter(
        pk=window_id, status=WindowStatus.IN_FLIGHT, claim=token
    ).update(status=WindowStatus.PLANNED, lease_until=None, claim="")


_COMPLETE_FIELDS = (
    "valid",
    "invalid_category",
    "invalid_reason",
    "raw_response",
    "scores",
    "ranking",
    "answers",
    "attempts",
    "input_tokens",
    "output_tokens",
    "latency_ms",
    "prompt_sha256",
    "prompt_version",
    "completed_at",
)


# Rows per statement of ``windows_complete`` (PostgreSQL takes 65535 parameters,
# SQLite 32766; a row has 16).
COMPLETE_CHUNK = 500


@functools.cache
def _complete_sql(vendor: str, rows: int) -> str:
    """UPDATE ... FROM (VALUES one row per window) ... RETURNING the ids stored.

    Parameters in the order of the text (``_windows_complete_chunk``). On PostgreSQL the
    rows are first locked in id order (``ORDER BY id FOR UPDATE``), as the heartbeat's
    ``windows_renew`` locks them: two statements that lock several rows each in
    their own scan order can deadlock (seen once in a dozen benchmark jobs)."""
    meta = JudgmentWindow._meta
    qn = connection.ops.quote_name
    table = qn(meta.db_table)
    fields = [meta.get_field(f) for f in _COMPLETE_FIELDS]
    status = f"{table}.{qn(meta.get_field('status').column)}"
    claim = f"{table}.{qn(meta.get_field('claim').column)}"
    pk = f"{table}.{qn(meta.pk.column)}"
    sets = ", ".join(
        [
            f"{qn(meta.get_field('status').column)} = %s",
            f"{qn(meta.get_field('lease_until').column)} = NULL",
        ]
        + [f"{qn(f.column)} = v.column{i + 2}" for i, f in enumerate(fields)]
    )
    if vendor == "postgresql":
        # PostgreSQL types a VALUES list from its first row: every cell is cast.
        types = [meta.pk.db_type(connection)] + [f.db_type(connection) for f in fields]
        cells = ", ".join(f"CAST(%s AS {t})" for t in types)
        values = ", ".join([f"({cells})"] * rows)
        return (
            f"WITH v AS (VALUES {values}), locked AS MATERIALIZED ("
            f"SELECT {pk} AS id FROM {table} JOIN v ON {pk} = v.column1 "
            f"WHERE {status} = %s AND {claim} = %s ORDER BY {pk} FOR UPDATE OF {table}) "
            f"UPDATE {table} SET {sets} FROM v WHERE {pk} = v.column1 "
            f"AND {pk} IN (SELECT id FROM locked) RETURNING {pk}"
        )
    cells = ", ".join(["%s"] * (1 + len(fields)))
    values = ", ".join([f"({cells})"] * rows)
    return (  # SQLite writes one transaction at a time: no row locks to order
        f"WITH v AS (VALUES {values}) UPDATE {table} SET {sets} FROM v "
        f"WHERE {pk} = v.column1 AND {status} = %s AND {claim} = %s RETURNING {pk}"
    )


def window_complete(*, window_id: int, token: str, **outcome: Any) -> bool:
    """Store one window's outcome (``windows_complete`` of one); True if stored."""
    return window_id in windows_complete(token=token, outcomes=[(window_id, outcome)])


def windows_complete(
    *, token: str, outcomes: list[tuple[int, dict[str, Any]]]
) -> set[int]:
    """Store windows' outcomes once (in-flight -> done), each only while the window is
    still claimed by ``token``; returns the ids stored. The raw answer is kept even
    when invalid; nothing is imputed. An id missing from the result was no longer
    ours (its lease ran out and another runner re-claimed it, or the job was taken
    over): the caller drops that answer.

    Each outcome has ``valid, category, reason, raw_response, scores, ranking,
    answers, attempts, input_tokens, output_tokens, latency_ms, prompt_sha256``.
    One statement for all of them (the answers a lane received while it stored the
    previous ones), built once per size with values prepared by the model's own
    fields: this runs for every request, and compiling an ORM update per window cost
    a sixth of a lane's CPU.
    """
    if not outcomes:
        return set()
    if connection.vendor == "sqlite" and sqlite3.sqlite_version_info < (3, 35):
        # No UPDATE ... FROM / RETURNING: one statement per window.
        return {
            pk
            for pk, outcome in outcomes
            if _windows_complete_chunk(token, [(pk, outcome)], returning=False)
        }
    stored: set[int] = set()
    for i in range(0, len(outcomes), COMPLETE_CHUNK):
        stored |= _windows_complete_chunk(token, outcomes[i : i + COMPLETE_CHUNK])
    return stored


def _windows_complete_chunk(
    token: str, outcomes: list[tuple[int, dict[str, Any]]], *, returning: bool = True
) -> set[int]:
    meta = JudgmentWindow._meta
    fields = [meta.get_field(f) for f in _COMPLETE_FIELDS]
    now = timezone.now()
    version = str(prompts.PROMPT_VERSION)
    cells: list[Any] = []
    for pk, o in outcomes:
        values = {
            "valid": o["valid"],
            "invalid_category": o["category"] or "",
            "invalid_reason": o["reason"][:2000],
            "raw_response": o["raw_response"],
            "scores": o["scores"],
            "ranking": o["ranking"],
            "answers": o["answers"],
            "attempts": o["attempts"],
            "input_tokens": o["input_tokens"],
            "output_tokens": o["output_tokens"],
            "latency_ms": o["latency_ms"],
            "prompt_sha256": o["prompt_sha256"],
            "prompt_version": version,
            "completed_at": now,
        }
        cells.append(pk)
        cells += [f.get_db_prep_save(values[f.name], connection) for f in fields]
    done, in_flight = WindowStatus.DONE.value, WindowStatus.IN_FLIGHT.value
    with connection.cursor() as cursor:
        if not returning:  # one window: WHERE id = %s, no FROM, no RETURNING
            params = [done, *cells[1:], in_flight, token, cells[0]]
            cursor.execute(_complete_one_sql(), params)
            return {outcomes[0][0]} if cursor.rowcount == 1 else set()
        if connection.vendor == "postgresql":
            params = [*cells, in_flight, token, done]
        else:
            params = [*cells, done, in_flight, token]
        cursor.execute(_complete_sql(connection.vendor, len(outcomes)), params)
        return {row[0] for row in cursor.fetchall()}


@functools.cache
def _complete_one_sql() -> str:
    """One window's UPDATE for SQLite before 3.35 (no UPDATE ... FROM/RETURNING);
    parameters: status, the outcome's fields, in-flight, token, then the id."""
    meta = JudgmentWindow._meta
    qn = connection.ops.quote_name
    sets = ", ".join(
        [
            f"{qn(meta.get_field('status').column)} = %s",
            f"{qn(meta.get_field('lease_until').column)} = NULL",
        ]
        + [f"{qn(meta.get_field(f).column)} = %s" for f in _COMPLETE_FIELDS]
    )
    return (
        f"UPDATE {qn(meta.db_table)} SET {sets} "
        f"WHERE {qn(meta.get_field('status').column)} = %s "
        f"AND {qn(meta.get_field('claim').column)} = %s "
        f"AND {qn(meta.pk.column)} = %s"
    )


# ----------------------------------------------------------------------------- import / export


class JudgmentImportError(ApplicationError):
    def __init__(self, path: str | Path, line: int | None, message: str) -> None:
        where = f"{path}, line {line}" if line is not None else str(path)
        super().__init__(f"{where}: {message}", extra={"path": str(path), "line": line})
        self.line = line


def _records(path: str | Path) -> Iterator[tuple[int, dict]]:
    try:
        handle = open_text(path)
    except FormatError as exc:
        raise JudgmentImportError(path, None, exc.message) from exc
    with handle:
        seen = False
        lines = numbered_lines(handle, path)  # the import caps (benchmarks/formats.py)
        while True:
            try:
                lineno, raw = next(lines)
            except StopIteration:
                break
            except FormatError as exc:
                raise JudgmentImportError(path, exc.line, exc.message) from exc
            if not raw.strip():
                continue
            seen = True
            try:
                obj = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise JudgmentImportError(path, lineno, f"bad JSON: {exc.msg}") from exc
            if not isinstance(obj, dict):
                raise JudgmentImportError(path, lineno, "expected a JSON object")
            yield lineno, obj
        if not seen:
            raise JudgmentImportError(path, None, "file is empty")


def _validated_window(
    obj: dict, lineno: int, path: str | Path, queries: dict[str, int], docs: set[str]
) -> dict:
    def fail(message: str) -> JudgmentImportError:
        return JudgmentImportError(path, lineno, message)

    for key in ("query_id", "stage", "window", "doc_ids"):
        if key not in obj:
            raise fail(f"missing field {key!r}")
    qid = str(obj["query_id"])
    if qid not in queries:
        raise fail(f"field 'query_id': unknown query {qid!r}")
    stage = STAGE_ALIASES.get(str(obj["stage"]))
    if stage is None:
        raise fail(f"field 'stage': {obj['stage']!r} is not tournament/rubric/A/B")
    seq = obj["window"]
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
        raise fail("field 'window' must be a non-negative integer")
    doc_ids = obj["doc_ids"]
    if not isinstance(doc_ids, list) or not doc_ids:
        raise fail("field 'doc_ids' must be a non-empty list")
    doc_ids = [str(d) for d in doc_ids]
    unknown = [d for d in doc_ids if d not in docs]
    if unknown:
        raise fail(f"field 'doc_ids': unknown document {unknown[0]!r}")
    phase = obj.get("phase", Phase.RANDOM)
    if phase not in Phase.values:
        raise fail(f"field 'phase': {phase!r} is not one of {', '.join(Phase.values)}")
    valid = obj.get("valid", True)
    if not isinstance(valid, bool):
        raise fail("field 'valid' must be true or false")
    category = obj.get("invalid_category") or ""
    if category not in InvalidCategory.values:
        raise fail(f"field 'invalid_category': {category!r} is not a known category")
    scores = answers = None
    if valid and stage == Stage.TOURNAMENT:
        scores = obj.get("scores")
        if not isinstance(scores, list) or len(scores) != len(doc_ids):
            raise fail("field 'scores' must list one number per document")
        if not all(
            isinstance(s, int | float) and not isinstance(s, bool) and math.isfinite(s)
            for s in scores
        ):
            raise fail("field 'scores' must hold finite numbers")
        scores = [float(s) for s in scores]
    if valid and stage == Stage.RUBRIC:
        answers = obj.get("answers")
        if not isinstance(answers, list) or len(answers) != len(doc_ids):
            raise fail("field 'answers' must list one answer row per document")
        rows = []
        for row in answers:
            if (
                not isinstance(row, list)
                or not row
                or not all(v in (0, 1) or isinstance(v, bool) for v in row)
            ):
                raise fail(
                    "field 'answers': each row must be a list of 0/1 or booleans"
                )
            rows.append([int(v) for v in row])
        if len({len(r) for r in rows}) != 1:
            raise fail("field 'answers': rows have different numbers of criteria")
        answers = rows
    return {
        "query_id": queries[qid],
        "stage": stage,
        "seq": seq,
        "phase": phase,
        "doc_ids": doc_ids,
        "valid": valid,
        "invalid_category": "" if valid else (category or InvalidCategory.SCHEMA),
        "scores": scores,
        "answers": answers,
        "ranking": obj.get("ranking") if isinstance(obj.get("ranking"), list) else None,
        "batch": obj.get("batch") if isinstance(obj.get("batch"), int) else None,
        "mirrored": bool(obj.get("mirrored", False)),
        "raw_response": str(obj.get("raw_response", "")),
    }


@transaction.atomic
def judgments_import(
    *, dataset: Dataset, judge_name: str, path: str | Path, batch_size: int = 2000
) -> int:
    """Import judgment windows from JSONL (DESIGN.md format), atomically.

    Creates an offline judge label if ``judge_name`` is new; the family is the judge
    name. Any bad line (file, line, field named) or a window already stored for this
    family leaves the database unchanged. Returns the number of windows imported.
    """
    judge = Judge.objects.filter(name=judge_name).first() or _offline_judge(judge_name)
    queries = dict(
        Query.objects.filter(dataset=dataset).values_list("external_id", "id")
    )
    docs = set(
        Document.objects.filter(dataset=dataset).values_list("external_id", flat=True)
    )
    count = 0
    batch: list[tuple[int, JudgmentWindow]] = []

    def flush() -> None:
        try:
            with transaction.atomic():
                JudgmentWindow.objects.bulk_create([w for _, w in batch])
        except IntegrityError:
            keys: dict[tuple, int] = {}
            for lineno, w in batch:
                key = (w.query_id, w.stage, w.seq)
                if (
                    key in keys
                    or JudgmentWindow.objects.filter(
                        family=judge.name, query_id=w.query_id, stage=w.stage, seq=w.seq
                    ).exists()
                ):
                    raise JudgmentImportError(
                        path,
                        lineno,
                        f"window {w.seq} ({w.stage}) of this query is already stored for {judge.name!r}",
                    ) from None
                keys[key] = lineno
            raise
        batch.clear()

    now = timezone.now()
    for lineno, obj in _records(path):
        fields = _validated_window(obj, lineno, path, queries, docs)
        batch.append(
            (
                lineno,
                JudgmentWindow(
                    family=judge.name,
                    judge=judge,
                    status=WindowStatus.DONE,
                    completed_at=now,
                    **fields,
                ),
            )
        )
        count += 1
        if len(batch) >= batch_size:
            flush()
    if batch:
        flush()
    return count


def judgments_export_lines(windows: Iterable[JudgmentWindow]) -> Iterator[str]:
    """JSONL lines (DESIGN.md format) for stored windows, one per line, stable key order."""
    for w in windows:
        record: dict[str, Any] = {
            "query_id": w.query.external_id,
            "stage": w.stage,
            "window": w.seq,
            "phase": w.phase,
            "doc_ids": w.doc_ids,
        }
        if w.stage == Stage.TOURNAMENT:
            record["scores"] = w.scores
        else:
            record["answers"] = w.answers
        record["judge"] = w.family
        record["valid"] = bool(w.valid)
        if w.invalid_category:
            record["invalid_category"] = w.invalid_category
        if w.batch is not None:
            record["batch"] = w.batch
        if w.mirrored:
            record["mirrored"] = True
        yield json.dumps(record, separators=(", ", ": ")) + "\n"
