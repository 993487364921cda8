"""Celery tasks of the judging app: thin, id-only, safe to run twice."""

from __future__ import annotations

from celery import shared_task

# A judging job can run for hours; its windows are durable, so a hard kill loses
# only in-flight windows (asked again on resume).
JOB_TIME_LIMIT_S = 7 * 24 * 3600


@shared_task(
    acks_late=True, soft_time_limit=JOB_TIME_LIMIT_S, time_limit=JOB_TIME_LIMIT_S + 60
)
def judging_job_run_task(job_id: int) -> str:
    """Run judging job ``job_id``; a second copy exits at once (compare-and-set claim)."""
    from .runner import job_run

    return job_run(job_id=job_id)
