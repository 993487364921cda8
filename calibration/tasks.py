"""Celery tasks of the calibration app: thin wrappers that take ids only."""

from __future__ import annotations

from celery import shared_task

from . import services


@shared_task(name="calibration.fit_run", acks_late=True)
def calibration_fit_run(fit_id: int) -> str:
    """Run pending fit ``fit_id``. Safe to deliver twice: the service claims the fit
    by compare-and-set, so a second delivery returns without touching it."""
    fit = services.calibration_fit_run(fit_id=fit_id)
    return "skipped" if fit is None else fit.status
