"""Celery tasks of the annotation app: thin wrappers that take ids only.

Leases need no task: they expire lazily when a request reclaims them (ASSIGNMENT.md).
"""

from __future__ import annotations

from celery import shared_task

from rcp_platform.exceptions import ApplicationError

from .services import releases


@shared_task(
    name="annotation.release_build",
    acks_late=True,
    soft_time_limit=1800,
    time_limit=1900,
)
def release_build_task(release_id: int) -> str:
    """Build pending release ``release_id``. Safe to deliver twice: the service claims
    the release by compare-and-set, so a second delivery returns at once."""
    try:
        release = releases.release_build(release_id=release_id)
    except ApplicationError:
        return "failed"  # recorded on the release; retrying would fail the same way
    return "skipped" if release is None else release.status
