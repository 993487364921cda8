"""Reads of the judging app: judges, jobs and their progress. Access rules live here."""

from __future__ import annotations

from typing import Any

from django.db.models import Count, Q, QuerySet
from django.utils import timezone

from benchmarks.access import can_read_benchmarks
from rcp_platform.exceptions import NotFoundError

from .models import InvalidCategory, Judge, JudgingJob, JudgmentWindow, WindowStatus
from .services import document_text, job_schedules, job_stage_list, planned_calls


def judge_list(*, user: Any) -> QuerySet[Judge]:
    if not can_read_benchmarks(user):
        return Judge.objects.none()
    return Judge.objects.annotate(n_jobs=Count("jobs")).order_by("name")


def job_list(*, user: Any) -> QuerySet[JudgingJob]:
    if not can_read_benchmarks(user):
        return JudgingJob.objects.none()
    return JudgingJob.objects.select_related("dataset", "judge").order_by("-created_at")


def job_get(*, user: Any, job_id: int) -> JudgingJob:
    job = job_list(user=user).filter(pk=job_id).first()
    if job is None:
        raise NotFoundError(f"judging job {job_id} not found")
    return job


def job_progress(*, job: JudgingJob) -> dict[str, Any]:
    """Windows planned / done / invalid per stage and phase, requests, tokens, ETA.

    Planned counts are the schedule's upper bound for the job's pools; done and
    invalid come from the stored windows of the job's family (one aggregate query).
    """
    from benchmarks.models import PoolEntry

    tournament, rubric = job_schedules(job.params)
    pools = PoolEntry.objects.filter(query__dataset=job.dataset_id)
    if job.query_ids:
        pools = pools.filter(query__external_id__in=job.query_ids)
    sizes = (
        pools.values("query_id").annotate(n=Count("id")).values_list("query_id", "n")
    )
    query_pks = []
    stages: dict[str, dict[str, dict[str, int]]] = {}
    for query_pk, n in sizes:
        query_pks.append(query_pk)
        for stage in job_stage_list(job.stages):
            for phase, calls in planned_calls(
                stage=stage, n_docs=n, tournament=tournament, rubric=rubric
            ).items():
                cell = stages.setdefault(stage, {}).setdefault(
                    phase, {"planned": 0, "done": 0, "invalid": 0, "in_flight": 0}
                )
                cell["planned"] += calls
    rows = (
        JudgmentWindow.objects.filter(
            family=job.family, query_id__in=query_pks, stage__in=list(stages)
        )
        .values("stage", "phase")
        .annotate(
            done=Count("id", filter=Q(status=WindowStatus.DONE)),
            invalid=Count("id", filter=Q(status=WindowStatus.DONE, valid=False)),
            in_flight=Count("id", filter=Q(status=WindowStatus.IN_FLIGHT)),
        )
    )
    for row in rows:
        cell = stages.setdefault(row["stage"], {}).setdefault(
            row["phase"], {"planned": 0, "done": 0, "invalid": 0, "in_flight": 0}
        )
        cell.update(
            done=row["done"], invalid=row["invalid"], in_flight=row["in_flight"]
        )
        cell["planned"] = max(cell["planned"], cell["done"] + cell["in_flight"])
    planned = sum(c["planned"] for s in stages.values() for c in s.values())
    done = sum(c["done"] for s in stages.values() for c in s.values())
    elapsed = None
    eta = None
    if job.started_at:
        end = job.finished_at or timezone.now()
        elapsed = (end - job.started_at).total_seconds()
        job_done = JudgmentWindow.objects.filter(
            job=job, status=WindowStatus.DONE
        ).count()
        if job.status == "running" and job_done and planned > done:
            eta = elapsed / job_done * (planned - done)
    return {
        "status": job.status,
        "error": job.error,
        "stages": stages,
        "windows": {"planned": planned, "done": done},
        "percent": round(100.0 * done / planned, 1) if planned else 100.0,
        "requests": job.requests,
        "retries": job.retries,
        "wasted": job.wasted,
        "input_tokens": job.input_tokens,
        "output_tokens": job.output_tokens,
        "elapsed_s": round(elapsed, 1) if elapsed is not None else None,
        "eta_s": round(eta, 1) if eta is not None else None,
    }


def invalid_windows(*, job: JudgingJob) -> dict[str, int]:
    """Invalid windows of the job's family by category."""
    rows = (
        JudgmentWindow.objects.filter(
            family=job.family,
            query__dataset=job.dataset_id,
            status=WindowStatus.DONE,
            valid=False,
        )
        .values_list("invalid_category")
        .annotate(n=Count("id"))
    )
    labels = dict(InvalidCategory.choices)
    return {labels.get(cat, cat): n for cat, n in rows}


def window_sample(
    *, job: JudgingJob, invalid: bool = False, limit: int = 10
) -> QuerySet[JudgmentWindow]:
    qs = JudgmentWindow.objects.filter(
        family=job.family, query__dataset=job.dataset_id, status=WindowStatus.DONE
    )
    if invalid:
        qs = qs.filter(valid=False)
    return qs.select_related("query").order_by("-completed_at")[:limit]


def window_get(*, user: Any, window_id: int) -> JudgmentWindow:
    if not can_read_benchmarks(user):
        raise NotFoundError("window not found")
    window = (
        JudgmentWindow.objects.select_related("query", "judge")
        .filter(pk=window_id)
        .first()
    )
    if window is None:
        raise NotFoundError("window not found")
    return window


def family_windows(
    *, dataset_id: int, family: str | None = None
) -> QuerySet[JudgmentWindow]:
    """Completed windows of a dataset (optionally one family) in a stable export order."""
    qs = JudgmentWindow.objects.filter(
        query__dataset=dataset_id, status=WindowStatus.DONE
    )
    if family:
        qs = qs.filter(family=family)
    return qs.select_related("query").order_by("family", "query_id", "stage", "seq")


def window_prompt(*, window: JudgmentWindow) -> dict[str, str]:
    """The prompt a window was asked with, rendered again from its documents, and
    whether it still hashes to the stored ``prompt_sha256`` (False: texts changed)."""
    from benchmarks.models import Document

    from . import prompts

    rows = Document.objects.filter(
        dataset_id=window.query.dataset_id, external_id__in=window.doc_ids
    ).values_list("external_id", "title", "text")
    by_id = {d: document_text(title, text) for d, title, text in rows}
    texts = [by_id.get(d, "") for d in window.doc_ids]
    budget = (
        prompts.TextBudget(window.judge.context_tokens, window.judge.max_output_tokens)
        if window.judge.context_tokens
        else None
    )
    messages, sha = prompts.render_prompt(
        window.stage, window.query.text, texts, budget=budget
    )
    return {
        "text": messages[0]["content"],
        "matches": not window.prompt_sha256 or sha == window.prompt_sha256,
    }
