"""Fenced claims (issue 12, item 1): a window's outcome is stored only under the claim
that holds it; a run whose job was taken over can neither claim, store nor close; a
slow but live runner keeps its windows because its heartbeat renews their leases."""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from datetime import timedelta

import pytest
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from benchmarks.models import Query
from benchmarks.services import dataset_import
from judging import services
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
        pools=DEMO_TINY / "pools.tsv",
    )


@pytest.fixture(autouse=True)
def _limiter(settings, tmp_path):
    settings.JUDGE_LIMITER_URL = f"file://{tmp_path / 'slots'}"


def _answer(tag: str) -> dict:
    return dict(
        valid=True,
        category="",
        reason="",
        raw_response=tag,
        scores=[1.0, 2.0],
        ranking=None,
        answers=None,
        attempts=1,
        input_tokens=10,
        output_tokens=5,
        latency_ms=100,
        prompt_sha256=tag,
    )


def _make_stale(job_id: int) -> None:
    JudgingJob.objects.filter(pk=job_id).update(
        heartbeat_at=timezone.now() - timedelta(hours=1)
    )


def test_stale_completion_is_refused_after_a_take_over(tiny):
    """Two tokens, one window: the old run's answer is refused wherever it comes in."""
    judge = services.judge_create(
        name="j", base_urls=["http://127.0.0.1:9/v1"], model="m"
    )
    job = services.job_create(dataset=tiny, judge=judge, queue=False)
    old_run = services.job_claim(job_id=job.pk)
    assert old_run
    window = JudgmentWindow.objects.create(
        family=job.family,
        judge=judge,
        job=job,
        query=Query.objects.get(external_id="q1"),
        stage="tournament",
        phase="random",
        seq=0,
        doc_ids=["d1", "d2"],
    )
    claim = dict(window_ids=[window.pk], job_id=job.pk, lease_s=30, reask=set())
    assert services.windows_claim(token="A" * 32, job_token=old_run, **claim) == [
        window.pk
    ]

    # The old run's worker goes silent; another takes the job over.
    _make_stale(job.pk)
    new_run = services.job_claim(job_id=job.pk)
    assert new_run and new_run != old_run
    assert JudgmentWindow.objects.get(pk=window.pk).status == "planned"
    assert services.windows_claim(token="B" * 32, job_token=new_run, **claim) == [
        window.pk
    ]

    # The old run wakes up: every write is refused.
    assert not services.window_complete(
        window_id=window.pk, token="A" * 32, **_answer("old")
    )
    with pytest.raises(services.JobFenced):
        services.windows_claim(token="A" * 32, job_token=old_run, **claim)
    assert services.job_heartbeat(job_id=job.pk, token=old_run) == services.FENCED
    assert not services.job_finish(job_id=job.pk, status=JobStatus.DONE, token=old_run)
    assert JudgingJob.objects.get(pk=job.pk).status == JobStatus.RUNNING

    assert services.window_complete(
        window_id=window.pk, token="B" * 32, **_answer("new")
    )
    assert not services.window_complete(
        window_id=window.pk, token="A" * 32, **_answer("old")
    )
    stored = JudgmentWindow.objects.get(pk=window.pk)
    assert (stored.status, stored.raw_response, stored.claim) == (
        "done",
        "new",
        "B" * 32,
    )
    assert services.job_heartbeat(job_id=job.pk, token=new_run) == JobStatus.RUNNING


def test_expired_lease_re_claimed_in_the_same_run_refuses_the_first_holder(tiny):
    judge = services.judge_create(
        name="j", base_urls=["http://127.0.0.1:9/v1"], model="m"
    )
    job = services.job_create(dataset=tiny, judge=judge, queue=False)
    run = services.job_claim(job_id=job.pk)
    window = JudgmentWindow.objects.create(
        family=job.family,
        judge=judge,
        job=job,
        query=Query.objects.get(external_id="q1"),
        stage="tournament",
        phase="random",
        seq=0,
        doc_ids=["d1", "d2"],
    )
    claim = dict(window_ids=[window.pk], job_id=job.pk, job_token=run, reask=set())
    assert services.windows_claim(token="A" * 32, lease_s=-1, **claim) == [window.pk]
    # A live lease is never taken; an expired one is.
    assert services.windows_claim(token="B" * 32, lease_s=30, **claim) == [window.pk]
    assert services.windows_claim(token="A" * 32, lease_s=30, **claim) == []
    assert (
        services.windows_renew(window_ids=[window.pk], token="A" * 32, lease_s=30) == 0
    )
    assert not services.window_complete(
        window_id=window.pk, token="A" * 32, **_answer("A")
    )
    assert services.window_complete(window_id=window.pk, token="B" * 32, **_answer("B"))


def test_runner_taken_over_mid_call_drops_its_answers_as_waste(tiny, settings):
    """A lane whose heartbeat goes silent past the stale limit (it never beats here)
    loses the job to a take-over while its calls are in flight: their answers are
    refused and counted as waste, it asks and claims nothing more, and it does not
    close the job."""
    settings.JUDGING_HEARTBEAT_S = 60  # this runner never beats during the test
    settings.JUDGING_HEARTBEAT_STALE_S = 1
    server, _thread, url = start_simulated_judge(seed=4, latency_ms=3000)
    try:
        judge = services.judge_create(
            name="slow", base_urls=[url], model="m", concurrency=2
        )
        job = services.job_create(
            dataset=tiny,
            judge=judge,
            query_ids=["q1"],
            stages="tournament",
            queue=False,
        )
        result: dict = {}

        def run_old() -> None:
            try:
                result["status"] = job_run(job_id=job.pk)
            finally:
                connection.close()

        old = threading.Thread(target=run_old)
        old.start()
        deadline = time.monotonic() + 30
        while not JudgmentWindow.objects.filter(job=job, status="in_flight").exists():
            assert time.monotonic() < deadline
            time.sleep(0.02)
        in_flight = JudgmentWindow.objects.filter(job=job, status="in_flight").count()
        time.sleep(1.1)  # the old run's heartbeat is now stale
        new_run = services.job_claim(job_id=job.pk)
        assert new_run is not None
        old.join(timeout=60)
        assert not old.is_alive()
        job.refresh_from_db()
        assert job.status == JobStatus.RUNNING and job.run_token == new_run
        assert result["status"] == JobStatus.RUNNING  # it did not close the job
        # The 2 calls in progress at the take-over were answered and refused; the
        # lane noticed the fence (its next unit claim) before asking the windows it
        # had claimed but not yet sent, and gave them back.
        assert job.wasted == server.stats()["chat_requests"] == 2
        assert in_flight > 2
        assert not JudgmentWindow.objects.filter(status="done").exists()
        assert not JudgmentWindow.objects.filter(status="in_flight").exists()
    finally:
        server.stop()


def test_slow_judge_near_its_timeout_with_retries_keeps_its_windows(tiny, settings):
    """Calls take longer than the window lease (latency near the judge's timeout, with
    timeouts and 500s retried): the heartbeat renews the leases, so a second runner
    polling the same windows the whole time never gets one, and nothing is wasted."""
    settings.JUDGING_LEASE_S = 0.6
    settings.JUDGING_HEARTBEAT_S = 0.15
    server, _thread, url = start_simulated_judge(
        seed=6,
        latency_ms=700,
        fault_rate=0.3,
        faults=("500", "timeout"),
        hang_s=1.3,
    )
    try:
        judge = services.judge_create(
            name="slow", base_urls=[url], model="m", concurrency=4, timeout_s=1.0
        )
        job = services.job_create(
            dataset=tiny,
            judge=judge,
            query_ids=["q1"],
            stages="tournament",
            queue=False,
        )
        stolen: list[int] = []
        done = threading.Event()

        def second_runner() -> None:
            try:
                while not done.is_set():
                    run = JudgingJob.objects.values_list("run_token", flat=True).get(
                        pk=job.pk
                    )
                    ids = list(
                        JudgmentWindow.objects.filter(job=job).values_list(
                            "pk", flat=True
                        )
                    )
                    if run and ids:
                        try:
                            stolen.extend(
                                services.windows_claim(
                                    window_ids=ids,
                                    job_id=job.pk,
                                    token="B" * 32,
                                    job_token=run,
                                    lease_s=30,
                                    reask=set(),
                                )
                            )
                        except services.JobFenced:
                            pass  # the job is done
                    time.sleep(0.05)
            finally:
                connection.close()

        thief = threading.Thread(target=second_runner)
        thief.start()
        try:
            status = job_run(job_id=job.pk)
        finally:
            done.set()
            thief.join(timeout=30)
        job.refresh_from_db()
        assert status == JobStatus.DONE, job.error
        assert stolen == []
        assert job.wasted == 0
        windows = JudgmentWindow.objects.filter(job=job)
        assert windows.count() > 10 and all(w.status == "done" for w in windows)
        assert all(w.claim != "B" * 32 for w in windows)
        stats = server.stats()
        assert sum(stats["faults"].values()) > 0  # the retries really happened
        # Each window answered once: no prompt was answered twice.
        assert max(Counter(stats["answered"]).values()) == 1
    finally:
        server.stop()


@pytest.mark.parametrize("old_sqlite", [False, True])
def test_answers_stored_together_are_each_fenced_by_their_own_claim(
    tiny, monkeypatch, old_sqlite
):
    """``windows_complete`` stores several answers in one statement: each only where
    the window is still claimed by the token; the ids stored are returned and the
    rest are left to their holder, with every field stored as given. (On SQLite
    before 3.35, one statement per window: same result.)"""
    if old_sqlite:
        monkeypatch.setattr(services.sqlite3, "sqlite_version_info", (3, 31, 0))
    judge = services.judge_create(
        name="j", base_urls=["http://127.0.0.1:9/v1"], model="m"
    )
    job = services.job_create(dataset=tiny, judge=judge, queue=False)
    run = services.job_claim(job_id=job.pk)
    windows = _windows(job, judge, 4)
    ids = [w.pk for w in windows]
    claim = dict(job_id=job.pk, job_token=run, reask=set())
    assert (
        services.windows_claim(window_ids=ids[:3], token="A" * 32, lease_s=-1, **claim)
        == ids[:3]
    )
    # Window 1's lease ran out and B took it; window 3 was never A's.
    assert services.windows_claim(
        window_ids=[ids[1], ids[3]], token="B" * 32, lease_s=30, **claim
    ) == [ids[1], ids[3]]
    invalid = _answer("a2") | dict(
        valid=False, category="no_json", reason="x" * 3000, scores=None
    )
    stored = services.windows_complete(
        token="A" * 32,
        outcomes=[
            (ids[0], _answer("a0")),
            (ids[1], _answer("a1")),
            (ids[2], invalid),
            (ids[3], _answer("a3")),
        ],
    )
    assert stored == {ids[0], ids[2]}
    rows = {w.pk: w for w in JudgmentWindow.objects.filter(pk__in=ids)}
    assert [rows[i].status for i in ids] == ["done", "in_flight", "done", "in_flight"]
    first, refused = rows[ids[0]], rows[ids[2]]
    assert (first.raw_response, first.scores, first.valid, first.lease_until) == (
        "a0",
        [1.0, 2.0],
        True,
        None,
    )
    assert (first.attempts, first.input_tokens, first.latency_ms) == (1, 10, 100)
    assert first.prompt_sha256 == "a0" and first.completed_at is not None
    assert (refused.valid, refused.invalid_category, refused.scores) == (
        False,
        "no_json",
        None,
    )
    assert len(refused.invalid_reason) == 2000
    assert services.windows_complete(
        token="B" * 32, outcomes=[(ids[1], _answer("b1")), (ids[3], _answer("b3"))]
    ) == {ids[1], ids[3]}
    assert services.windows_complete(token="B" * 32, outcomes=[]) == set()


@pytest.mark.parametrize("statement", ["complete", "renew"])
def test_multi_row_window_writes_lock_rows_in_id_order(tiny, statement):
    """The heartbeat's lease renewal and a unit loop's batch of answers both write
    several rows of one lane: each locks its rows in id order, so neither can hold a
    later row while waiting for an earlier one (the two deadlocked in a benchmark
    job). Here the lowest row is locked elsewhere: the statement waits on it before
    locking any other. (PostgreSQL: SQLite writes one transaction at a time.)"""
    if connection.vendor != "postgresql":
        pytest.skip("row locks: PostgreSQL only (CI runs this suite on it too)")
    judge = services.judge_create(
        name="j", base_urls=["http://127.0.0.1:9/v1"], model="m"
    )
    job = services.job_create(dataset=tiny, judge=judge, queue=False)
    run = services.job_claim(job_id=job.pk)
    low, high = (w.pk for w in _windows(job, judge, 2))
    services.windows_claim(
        window_ids=[low, high],
        job_id=job.pk,
        job_token=run,
        token="A" * 32,
        lease_s=30,
        reask=set(),
    )
    # The low row's new version now lies after the high one's: a scan in the
    # table's physical order meets the high row first.
    JudgmentWindow.objects.filter(pk=low).update(attempts=0)
    holding, release, outcome = threading.Event(), threading.Event(), {}

    def hold_low():
        with transaction.atomic():
            JudgmentWindow.objects.select_for_update().filter(pk=low).exists()
            holding.set()
            release.wait(10)
        connection.close()

    def write():  # high first in the statement's own order
        if statement == "complete":
            outcome["stored"] = services.windows_complete(
                token="A" * 32,
                outcomes=[(high, _answer("h")), (low, _answer("l"))],
            )
        else:
            outcome["renewed"] = services.windows_renew(
                window_ids=[high, low], token="A" * 32, lease_s=60
            )
        connection.close()

    def high_is_free() -> bool:
        try:
            with transaction.atomic():
                JudgmentWindow.objects.select_for_update(nowait=True).filter(
                    pk=high
                ).exists()
            return True
        except DatabaseError:
            return False
        finally:
            connection.close()

    holder = threading.Thread(target=hold_low)
    holder.start()
    assert holding.wait(10)
    writer = threading.Thread(target=write)
    writer.start()
    time.sleep(0.5)  # the writer is now waiting for the low row
    checks = []
    checker = threading.Thread(target=lambda: checks.append(high_is_free()))
    checker.start()
    checker.join(10)
    release.set()
    holder.join(10)
    writer.join(10)
    assert checks == [True]
    assert outcome in ({"stored": {low, high}}, {"renewed": 2})


def test_stage_a_units_are_planned_and_claimed_first_in_every_lanes_share(tiny):
    """Stage A's ten dependent rounds start before Stage B's two, so the slots stay
    busy to the job's end; every lane's share (every LANES-th id) holds both."""
    from judging.models import JudgingUnit

    judge = services.judge_create(
        name="j", base_urls=["http://127.0.0.1:9/v1"], model="m"
    )
    job = services.job_create(dataset=tiny, judge=judge, queue=False)
    run = services.job_claim(job_id=job.pk)
    units = services.job_units_plan(job=JudgingJob.objects.get(pk=job.pk))
    stage = dict(JudgingUnit.objects.values_list("pk", "stage"))
    assert [stage[u] for u in units] == ["tournament"] * 3 + ["rubric"] * 3
    for share in (units[0::2], units[1::2]):
        assert {stage[u] for u in share} == {"tournament", "rubric"}
    claimed = [
        services.unit_claim(job_id=job.pk, job_token=run, token="A" * 32, lease_s=30)
        for _ in range(6)
    ]
    assert [u.stage for u in claimed] == ["tournament"] * 3 + ["rubric"] * 3


def _windows(job, judge, n: int) -> list:
    """``n`` tournament windows of query q1 in the job's family, seq 0..n-1."""
    query = Query.objects.get(external_id="q1")
    return [
        JudgmentWindow.objects.create(
            family=job.family,
            judge=judge,
            job=job,
            query=query,
            stage="tournament",
            phase="random",
            seq=seq,
            doc_ids=["d1", "d2"],
        )
        for seq in range(n)
    ]
