"""A fit that did not converge is never shown as a result: command, pages, API and
leaderboard all say so; stale running fits are detected and can be run again."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from calibration import services
from calibration.models import CalibrationFit, DocumentAbility, FitStatus
from calibration.selectors import leaderboard_compute
from rcp_platform import celery_app
from rcp_platform.exceptions import ApplicationError
from tests.calibration.factories import simulated_suite

pytestmark = pytest.mark.django_db


@pytest.fixture
def unconverged():
    """A suite calibrated with maxiter=1: the 2PL cannot converge in one step."""
    suite = simulated_suite(name="halt", n_queries=4, seed=2)
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(CommandError) as exc:
        call_command(
            "calibrate", "--dataset", "halt", "--maxiter", "1", stdout=out, stderr=err
        )
    return suite, CalibrationFit.objects.get(), out.getvalue(), str(exc.value)


def test_calibrate_exits_nonzero_and_stores_the_fit_as_unconverged(unconverged):
    """The command prints the fit, then fails naming the reason; the fit is
    'unconverged' (never 'done') with its rows kept for inspection."""
    _suite, fit, out, message = unconverged
    assert fit.status == FitStatus.UNCONVERGED and fit.converged is False
    assert "stopped after 1 Newton iterations" in fit.error
    assert f"fit {fit.pk} did NOT converge" in message
    assert "--allow-unconverged" in message
    assert f"Fit {fit.pk} unconverged" in out and "converged False" in out
    assert DocumentAbility.objects.filter(fit=fit).exists()


def test_a_done_fit_that_did_not_converge_is_refused_by_the_database(unconverged):
    """The invariant lives in a constraint: status done implies converged."""
    from django.db import IntegrityError, transaction

    _suite, fit, _out, _msg = unconverged
    with pytest.raises(IntegrityError), transaction.atomic():
        CalibrationFit.objects.filter(pk=fit.pk).update(status=FitStatus.DONE)


def test_leaderboard_refuses_an_unconverged_fit_unless_allowed(unconverged):
    """By default the leaderboard refuses; --allow-unconverged scores with it and
    prints a warning, and the JSON carries the warning and the fit's status."""
    suite, fit, _out, _msg = unconverged
    with pytest.raises(CommandError, match=f"fit {fit.pk}, did not converge"):
        call_command("leaderboard", "--dataset", "halt")
    with pytest.raises(ApplicationError, match="did not converge"):
        leaderboard_compute(datasets=[suite.dataset])
    out, err = io.StringIO(), io.StringIO()
    call_command(
        "leaderboard",
        "--dataset",
        "halt",
        "--allow-unconverged",
        stdout=out,
        stderr=err,
    )
    assert "WARNING" in err.getvalue() and "did NOT converge" in err.getvalue()
    board = leaderboard_compute(datasets=[suite.dataset], allow_unconverged=True)
    assert board["fit_status"] == {"halt": "unconverged"}
    assert board["systems"][0]["rcp_ndcg"] is not None


def test_fit_and_leaderboard_pages_carry_a_banner(unconverged, client, admin_user):
    """The fit page shows the danger banner with the reason; the leaderboard page
    shows the refusal with a link to override, and a banner when overridden."""
    _suite, fit, _out, _msg = unconverged
    client.force_login(admin_user)
    page = client.get(f"/calibration/fits/{fit.pk}/").content.decode()
    assert 'id="unconverged"' in page and "did not converge" in page
    assert "stopped after 1 Newton iterations" in page
    board = client.get("/calibration/leaderboard/?dataset=halt").content.decode()
    assert "did not converge" in board and 'id="allow-unconverged"' in board
    assert 'id="leaderboard"' not in board
    board = client.get(
        "/calibration/leaderboard/?dataset=halt&allow_unconverged=1"
    ).content.decode()
    assert "unconverged-warning" in board and 'id="leaderboard"' in board


def test_api_exposes_convergence_and_per_query_flags(unconverged, api_client_for):
    """The API reports status/converged/error and lists per-query flags; the
    leaderboard API refuses (400) unless allow_unconverged=true."""
    from django.contrib.auth import get_user_model

    _suite, fit, _out, _msg = unconverged
    staff = get_user_model().objects.create_user("staffer", is_staff=True)
    client = api_client_for(staff)
    body = client.get(f"/api/v1/calibration/fits/{fit.pk}").json()
    assert body["status"] == "unconverged" and body["converged"] is False
    assert "stopped after 1" in body["error"]
    rows = client.get(f"/api/v1/calibration/fits/{fit.pk}/queries").json()
    assert rows["count"] == 4
    assert {"query_id", "tau", "alpha", "flags", "flagged"} <= set(rows["results"][0])
    refused = client.get("/api/v1/calibration/leaderboard?dataset=halt")
    assert (
        refused.status_code == 400 and "did not converge" in refused.json()["message"]
    )
    allowed = client.get(
        "/api/v1/calibration/leaderboard?dataset=halt&allow_unconverged=true"
    )
    assert allowed.status_code == 200 and allowed.json()["warnings"]


def test_flagged_queries_are_listed_with_reasons(client, admin_user):
    """A query whose documents pass every criterion is flagged (alpha far out,
    pinned by the prior) in the command output, on the fit page and in the API."""
    from judging.models import JudgmentWindow, Stage

    suite = simulated_suite(name="flags", n_queries=4, seed=3)
    q = suite.dataset.queries.get(external_id="q0")
    for window in JudgmentWindow.objects.filter(query=q, stage=Stage.RUBRIC):
        window.answers = [[1, 1, 1, 1, 1] for _ in window.doc_ids]
        window.save(update_fields=["answers"])
    out = io.StringIO()
    call_command("calibrate", "--dataset", "flags", stdout=out, stderr=io.StringIO())
    fit = CalibrationFit.objects.get()
    assert fit.status == FitStatus.DONE
    row = fit.query_rows.get(query=q)
    assert row.flagged and "alpha_extreme" in row.flags and row.alpha > 6
    assert not fit.query_rows.exclude(query=q).filter(flagged=True).exists()
    assert "1 flagged queries" in out.getvalue() and "q0: tau" in out.getvalue()
    client.force_login(admin_user)
    page = client.get(f"/calibration/fits/{fit.pk}/").content.decode()
    assert 'id="flagged"' in page and "alpha_extreme" in page


def test_a_fit_left_running_by_a_dead_worker_is_detected_and_can_run_again(
    django_capture_on_commit_callbacks,
):
    """A running fit without heartbeat past the lease is marked failed with a
    message; retry queues it and the worker path finishes it as done."""
    suite = simulated_suite(name="stale", n_queries=3, seed=4)
    fit = services.calibration_fit_request(datasets=[suite.dataset])
    long_ago = timezone.now() - timedelta(hours=1)
    CalibrationFit.objects.filter(pk=fit.pk).update(
        status=FitStatus.RUNNING, started_at=long_ago, heartbeat_at=long_ago
    )
    assert services.fits_reap_stale() == 1
    fit.refresh_from_db()
    assert fit.status == FitStatus.FAILED and "heartbeats" in fit.error
    # On the app's conf, not on settings: Celery caches the settings it read, so an
    # overridden setting would leak eager mode into later tests' real workers.
    eager = celery_app.conf.task_always_eager
    celery_app.conf.task_always_eager = True
    try:
        with django_capture_on_commit_callbacks(execute=True):
            services.calibration_fit_retry(fit=fit)
    finally:
        celery_app.conf.task_always_eager = eager
    fit.refresh_from_db()
    assert fit.status == FitStatus.DONE and fit.converged
    with pytest.raises(ApplicationError, match="only a failed fit"):
        services.calibration_fit_retry(fit=fit)


def test_a_live_fit_heartbeat_keeps_it_from_being_reaped():
    """A running fit with a recent heartbeat is left alone."""
    suite = simulated_suite(name="live", n_queries=2, seed=5)
    fit = services.calibration_fit_request(datasets=[suite.dataset])
    CalibrationFit.objects.filter(pk=fit.pk).update(
        status=FitStatus.RUNNING, heartbeat_at=timezone.now()
    )
    assert services.fits_reap_stale() == 0
