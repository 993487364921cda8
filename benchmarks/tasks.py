"""Celery tasks of the benchmarks app: thin wrappers that take ids only."""

from __future__ import annotations

from celery import shared_task


@shared_task(
    name="benchmarks.upload_import",
    acks_late=True,
    soft_time_limit=3600,
    time_limit=3700,
)
def upload_import_task(upload_id: int) -> str:
    """Import pending upload ``upload_id``. Safe to deliver twice: the service claims
    the upload by compare-and-set, so a second delivery returns "skipped"."""
    from .services import upload_import  # services import this module for .delay

    upload = upload_import(upload_id=upload_id)
    return "skipped" if upload is None else upload.status
