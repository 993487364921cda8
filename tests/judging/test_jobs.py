"""Judging jobs end to end in this process (`judge --inline`): real HTTP through the
openai client to the simulated judge; schedule-exact request counts; faults retried
and recorded; estimate equal to the calls made; pause/resume asks only what is missing."""

from __future__ import annotations

import os
from collections import Counter

import pytest
from django.core.management import call_command

from benchmarks.models import PoolEntry
from benchmarks.services import dataset_import
from judging import selectors, services
from judging.models import JobStatus, JudgingJob, JudgmentWindow
from judging.runner import job_run
from judging.simulated import start_simulated_judge
from tests.conftest import DEMO_TINY

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def tiny():
    return dataset_import(
        name="tiny",
        corpus=DEMO_TINY / "corpus.jsonl",
        queries=DEMO_TINY / "queries.jsonl",
        qrels=DEMO_TINY / "qrels.tsv",
        pools=DEMO_TINY / "pools.tsv",
    )


@pytest.fixture
def server():
    srv, _thread, url = start_simulated_judge(seed=3, latency_ms=5)
    yield srv, url
    srv.stop()


@pytest.fixture(autouse=True)
def _limiter(settings, tmp_path):
    settings.JUDGE_LIMITER_URL = f"file://{tmp_path / 'slots'}"


def judge_for(url: str, **kw):
    return services.judge_create(
        name=kw.pop("name", "sim"), base_urls=[url], model="sim-1", **kw
    )


def expected_calls(job: JudgingJob) -> dict[str, int]:
    tournament, rubric = services.job_schedules(job.params)
    sizes = Counter(
        PoolEntry.objects.filter(query__dataset=job.dataset).values_list(
            "query__text", flat=True
        )
    )
    return {
        text: sum(
            sum(
                services.planned_calls(
                    stage=s, n_docs=n, tournament=tournament, rubric=rubric
                ).values()
            )
            for s in services.job_stage_list(job.stages)
        )
        for text, n in sizes.items()
    }


def test_inline_job_stores_every_window_with_schedule_exact_requests(tiny, server):
    srv, url = server
    judge = judge_for(url, concurrency=4)
    estimate = services.job_estimate(dataset=tiny, judge=judge)
    job = services.job_create(dataset=tiny, judge=judge, queue=False)
    assert job_run(job_id=job.pk) == JobStatus.DONE, JudgingJob.objects.get(
        pk=job.pk
    ).error
    stats = srv.stats()
    per_query = expected_calls(job)
    # Each query's requests equal its schedule; the estimate equals the calls made.
    assert stats["queries"] == per_query
    assert sum(per_query.values()) == estimate.calls == stats["chat_requests"] == 60
    windows = JudgmentWindow.objects.filter(job=job)
    assert windows.count() == 60 and not windows.exclude(status="done").exists()
    assert windows.filter(valid=True).count() == 60
    # No window was asked twice, and each stored prompt hash is one the server answered.
    assert max(stats["prompts"].values()) == 1
    assert set(windows.values_list("prompt_sha256", flat=True)) == set(stats["prompts"])
    job.refresh_from_db()
    assert job.requests == 60 and job.retries == 0 and job.input_tokens > 0
    progress = selectors.job_progress(job=job)
    assert progress["percent"] == 100.0
    assert progress["stages"]["tournament"]["random"] == {
        "planned": 24,
        "done": 24,
        "invalid": 0,
        "in_flight": 0,
    }
    t = JudgmentWindow.objects.filter(job=job, stage="tournament", seq=1).first()
    first = JudgmentWindow.objects.get(
        job=job, stage="tournament", seq=0, query=t.query
    )
    assert (
        t.mirrored and t.doc_ids == first.doc_ids[::-1]
    )  # mirrored copies are consecutive


def test_faults_are_retried_and_invalid_answers_recorded_not_imputed(
    tiny, server, monkeypatch
):
    srv, url = server
    srv.configure(
        fault_rate=0.2, faults=("429", "500", "malformed", "missing_doc", "truncated")
    )
    monkeypatch.setattr(
        "judging.clients.JudgeClient.backoff_s", lambda self, retry: 0.01
    )
    judge = judge_for(url, concurrency=4)
    job = services.job_create(dataset=tiny, judge=judge, queue=False)
    assert job_run(job_id=job.pk) == JobStatus.DONE
    job.refresh_from_db()
    stats = srv.stats()
    windows = JudgmentWindow.objects.filter(job=job)
    assert windows.filter(status="done").count() == windows.count() >= 55
    assert job.retries > 0 and job.requests == stats["chat_requests"]
    assert sum(stats["faults"].values()) > 5
    # Malformed answers were re-asked (3 attempts); any still invalid keep their raw answer.
    for w in windows.filter(valid=False):
        assert w.attempts == 3 and w.invalid_category in {
            "invalid_json",
            "incomplete",
            "truncated",
        }
        assert w.raw_response and w.scores is None and w.answers is None
    assert windows.filter(attempts__gt=1).exists()


def test_pause_then_resume_asks_only_missing_windows(tiny, server):
    srv, url = server
    judge = judge_for(url, concurrency=2)
    job = services.job_create(
        dataset=tiny, judge=judge, stages="tournament", queue=False
    )
    # Store part of the job, as if it had been paused midway: run one query only.
    partial = services.job_create(
        dataset=tiny, judge=judge, stages="tournament", query_ids=["q1"], queue=False
    )
    assert job_run(job_id=partial.pk) == JobStatus.DONE
    asked_before = srv.stats()["chat_requests"]
    assert asked_before == 13
    assert job_run(job_id=job.pk) == JobStatus.DONE
    stats = srv.stats()
    assert stats["chat_requests"] == 39  # q2 and q3 only: q1's windows were reused
    assert max(stats["prompts"].values()) == 1
    assert JudgmentWindow.objects.filter(family="sim").count() == 39


def test_fatal_errors_stop_the_job_with_a_clear_message(tiny, server):
    srv, url = server
    srv.configure(api_key="right-key")
    judge = judge_for(url, concurrency=2)
    job = services.job_create(dataset=tiny, judge=judge, queue=False)
    assert job_run(job_id=job.pk) == JobStatus.FAILED
    job.refresh_from_db()
    assert "401" in job.error and url in job.error
    assert not JudgmentWindow.objects.filter(status="in_flight").exists()
    assert not JudgmentWindow.objects.filter(status="done").exists()


def test_judge_command_estimate_and_inline(tiny, server, capsys):
    _srv, url = server
    call_command(
        "add_judge",
        "--name",
        "cli",
        "--base-url",
        url,
        "--model",
        "sim-1",
        "--concurrency",
        "3",
    )
    call_command("judge", "--dataset", "tiny", "--judge", "cli", "--estimate")
    out = capsys.readouterr().out
    assert "total" in out and " 60 calls" in out
    assert not JudgmentWindow.objects.exists()
    call_command(
        "judge", "--dataset", "tiny", "--judge", "cli", "--stage", "rubric", "--inline"
    )
    out = capsys.readouterr().out
    assert "done: 21 windows, 21 requests" in out
    assert JudgmentWindow.objects.filter(stage="rubric", valid=True).count() == 21


def test_refused_window_does_not_break_later_runs_of_the_family(
    tiny, server, monkeypatch
):
    """A window refused after all retries is stored as 'refused' (no answer, nothing
    imputed); later phases are planned without it, and a later job of the same family
    keeps that plan instead of re-asking the window and contradicting it."""
    srv, url = server
    monkeypatch.setattr(
        "judging.clients.JudgeClient.backoff_s", lambda self, retry: 0.0
    )
    srv.configure(
        fault_sequence=("500",) * 21
    )  # 3 attempts x (1 + 6 transport retries)
    judge = judge_for(url, concurrency=1)
    first = services.job_create(
        dataset=tiny, judge=judge, stages="tournament", query_ids=["q1"], queue=False
    )
    assert job_run(job_id=first.pk) == JobStatus.DONE
    refused = JudgmentWindow.objects.get(job=first, valid=False)
    assert (
        refused.invalid_category == "refused"
        and refused.seq == 0
        and refused.attempts == 3
    )
    assert JudgmentWindow.objects.filter(job=first).count() == 13
    asked = srv.stats()["chat_requests"]
    again = services.job_create(
        dataset=tiny, judge=judge, stages="tournament", query_ids=["q1"], queue=False
    )
    assert job_run(job_id=again.pk) == JobStatus.DONE
    assert srv.stats()["chat_requests"] == asked  # nothing asked twice, plan unchanged


def test_unasked_planned_rows_are_replanned_but_answered_rows_are_not(tiny):
    from judging.schedules import PlannedWindow
    from rcp_platform.exceptions import ApplicationError

    judge = services.judge_create(
        name="j", base_urls=["http://127.0.0.1:9/v1"], model="m"
    )
    job = services.job_create(dataset=tiny, judge=judge, queue=False)
    query = tiny.queries.get(external_id="q1")
    old = [
        PlannedWindow(0, "random", ("q1-d0", "q1-d1")),
        PlannedWindow(1, "random", ("q1-d2", "q1-d3")),
    ]
    rows = services.windows_plan(job=job, query=query, stage="tournament", planned=old)
    new = [
        PlannedWindow(0, "random", ("q1-d1", "q1-d0")),
        PlannedWindow(1, "random", ("q1-d3", "q1-d2")),
    ]
    assert [
        r.doc_ids
        for r in services.windows_plan(
            job=job, query=query, stage="tournament", planned=new
        )
    ] == [["q1-d1", "q1-d0"], ["q1-d3", "q1-d2"]]
    JudgmentWindow.objects.filter(pk=rows[0].pk).update(
        status="done", valid=True, scores=[1, 0]
    )
    with pytest.raises(ApplicationError, match="was stored with other documents"):
        services.windows_plan(job=job, query=query, stage="tournament", planned=old)
