"""The Celery app. Tasks are discovered in each app's ``tasks.py``."""

from __future__ import annotations

import os
from pathlib import Path

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "rcp_platform.settings")

app = Celery("rcp_platform")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@app.on_after_configure.connect
def _ensure_broker_folders(sender: Celery, **_: object) -> None:
    """The filesystem transport needs its folders to exist before the first message."""
    options = sender.conf.broker_transport_options or {}
    for key in ("data_folder_in", "data_folder_out", "processed_folder"):
        if options.get(key):
            Path(options[key]).mkdir(parents=True, exist_ok=True)
