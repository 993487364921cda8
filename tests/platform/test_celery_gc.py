"""A Celery pool process freezes the objects it starts with (``rcp_platform.celery``)."""

from __future__ import annotations

import gc

from celery.signals import worker_process_init

import rcp_platform.celery  # noqa: F401 - connects the signal handler


def test_a_pool_process_freezes_its_startup_objects():
    """Sent when a pool process starts: its objects leave the cyclic collector's
    generations, so full collections during jobs no longer scan them."""
    gc.unfreeze()
    try:
        assert gc.get_freeze_count() == 0
        worker_process_init.send(sender=None)
        assert gc.get_freeze_count() > 10_000
    finally:
        gc.unfreeze()
