"""Celery tasks of the judging app: thin, id-only, safe to run twice.

A job runs as a fan-out: ``judging_job_run_task`` claims the job for a new run
(compare-and-set, a fresh run token), plans one unit per (query, stage) and sends
``JUDGING_LANES`` lane tasks, each carrying its share of the units. A lane works on
its share first, then on any unit still pending, then on units whose holder's lease
ran out (a worker that died), so N workers on M machines share one job and the loss
of any of them costs only the windows it had in flight. Both tasks are acknowledged
late and idempotent: a redelivered coordinator finds the job claimed (or takes over a
dead run), a redelivered lane of a finished or fenced run exits at once.
"""

from __future__ import annotations

from celery import shared_task
from django.conf import settings

# A lane can run for hours; its windows are durable, so a hard kill loses only
# in-flight windows (asked again by the other lanes or on resume).
JOB_TIME_LIMIT_S = 7 * 24 * 3600


@shared_task(acks_late=True)
def judging_job_run_task(job_id: int) -> str:
    """Claim job ``job_id`` for a new run and fan it out to lane tasks."""
    from .models import JudgingJob
    from .runner import job_start

    started = job_start(job_id=job_id)
    if started is None:
        return JudgingJob.objects.values_list("status", flat=True).get(pk=job_id)
    token, units = started
    lanes = max(1, min(int(getattr(settings, "JUDGING_LANES", 2)), len(units) or 1))
    for i in range(lanes):
        judging_lane_task.delay(job_id, token, units[i::lanes])
    return "running"


# reject_on_worker_lost: a lane whose pool process died goes back to the queue and
# picks its run up again on any worker (it is idempotent; a finished run exits).
@shared_task(
    acks_late=True,
    reject_on_worker_lost=True,
    soft_time_limit=JOB_TIME_LIMIT_S,
    time_limit=JOB_TIME_LIMIT_S + 60,
)
def judging_lane_task(job_id: int, job_token: str, unit_ids: list[int]) -> str:
    """Work on run ``job_token`` of job ``job_id`` (``unit_ids`` first) until no unit
    is left; exits at once if that run is over or was taken over."""
    from .runner import lane_run

    return lane_run(job_id=job_id, job_token=job_token, prefer=unit_ids)
