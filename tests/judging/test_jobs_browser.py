"""A judging job started from the browser: estimate first, launch, then live progress
(no reload) while a real Celery worker (embedded filesystem broker) runs it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from django.core.management import call_command
from django.db import connection
from kombu import pools as kombu_pools

from judging.models import JudgingJob, JudgmentWindow
from judging.simulated import start_simulated_judge
from rcp_platform import celery_app
from tests.browser import chromium
from tests.conftest import REPO

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


def _drop_broker_connections() -> None:
    """Forget the app's pooled broker connections: a connection opened by an earlier
    test keeps the transport options it was made with, so this test's tasks would
    land in the default broker folder, where no worker listens. The app's pool is
    kombu's process-wide pool for that connection: reset the registry (closing its
    pools) so later tests get fresh pools, never a closed one."""
    kombu_pools.reset()
    celery_app._pool = None
    celery_app.amqp._producer_pool = None


@pytest.fixture
def worker(tmp_path, settings):
    """A Celery worker process sharing this test's database and a private broker."""
    db = connection.settings_dict
    if connection.vendor == "sqlite":
        database_url = f"sqlite:///{db['NAME']}"
    else:
        database_url = f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    var = tmp_path / "var"
    folders = {
        "data_folder_in": str(var / "celery" / "broker"),
        "data_folder_out": str(var / "celery" / "broker"),
        "processed_folder": str(var / "celery" / "processed"),
        "control_folder": str(var / "celery" / "control"),
        "store_processed": False,
    }
    for key in ("data_folder_in", "processed_folder", "control_folder"):
        os.makedirs(folders[key], exist_ok=True)
    old = celery_app.conf.broker_transport_options
    celery_app.conf.broker_transport_options = folders
    _drop_broker_connections()
    settings.JUDGE_LIMITER_URL = f"file://{tmp_path / 'slots'}"
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "CELERY_BROKER_URL": "filesystem://",
        "RCP_VAR_DIR": str(var),
        "JUDGE_LIMITER_URL": f"file://{tmp_path / 'slots'}",
    }
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "rcp_platform",
            "worker",
            "--concurrency=1",
            "--loglevel=warning",
        ],
        cwd=REPO,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    yield proc
    # Warm shutdown of the main process (it stops its pool child); the group is
    # killed if it has not exited in time: a worker left behind would hold the broker.
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    celery_app.conf.broker_transport_options = old
    _drop_broker_connections()


@pytest.mark.chromium
@pytest.mark.django_db(transaction=True)
def test_admin_estimates_launches_and_watches_a_job(live_server, worker):
    call_command("demo", verbosity=0)
    server, _thread, url = start_simulated_judge(seed=2, latency_ms=150)
    try:
        call_command(
            "add_judge",
            "--name",
            "sim",
            "--base-url",
            url,
            "--model",
            "sim-1",
            "--concurrency",
            "2",
        )
        with chromium() as browser:
            page = browser.new_page()
            page.goto(f"{live_server.url}/login/?next=/judging/")
            page.fill("#id_username", "admin")
            page.fill("#id_password", "admin-demo-password")
            page.click("button[type=submit]")
            page.wait_for_selector("#job-form")
            page.select_option("#id_dataset", label="tiny")
            page.select_option("#id_judge", label="sim")
            page.click("button[name=estimate]")
            page.wait_for_selector("#estimate")
            assert "60" in page.inner_text(
                "#estimate"
            )  # calls shown before anything runs
            assert not JudgingJob.objects.exists()
            page.click("button[name=launch]")
            page.wait_for_selector("#progress")
            first = page.inner_text("#progress")
            # The block refreshes itself while the worker answers windows.
            # The job takes ~7 s here; the deadline only guards against a hang (CI
            # machines are shared: a worker may take long to start under load).
            page.wait_for_function(
                "document.querySelector('#progress').dataset.status === 'done'",
                timeout=300_000,
            )
            final = page.inner_text("#progress")
            assert first != final and "60 / 60 windows (100.0%)" in final
            # The controls came with the block: none left once the job is done,
            # without a reload.
            assert "Cancel job" in first
            assert page.query_selector("#cancel") is None
            assert page.query_selector("#pause") is None
            assert page.url.endswith(f"/judging/jobs/{JudgingJob.objects.get().pk}/")
        assert JudgmentWindow.objects.filter(status="done", valid=True).count() == 60
        assert server.stats()["chat_requests"] == 60
    finally:
        server.stop()
