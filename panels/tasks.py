"""Celery tasks of the panels app: thin, id-only, safe to run twice."""

from __future__ import annotations

from celery import shared_task

# A run over a large study may take hours; its requests are durable, so a hard
# kill loses only the requests in flight (asked again on resume).
RUN_TIME_LIMIT_S = 7 * 24 * 3600


@shared_task(
    acks_late=True, soft_time_limit=RUN_TIME_LIMIT_S, time_limit=RUN_TIME_LIMIT_S + 60
)
def panel_run_task(run_id: int) -> str:
    """Run panel run ``run_id``; a second copy exits at once (compare-and-set claim)."""
    from .services import panel_run_execute

    return panel_run_execute(run_id=run_id)
