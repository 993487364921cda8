"""Judging jobs on real Celery workers with Redis and PostgreSQL.

- Two worker processes share one job (its lane tasks); one is SIGKILLed mid-job and
  the other finishes it alone, without a resume: nothing is lost, nothing is stored
  twice, the judge is asked again only for windows in flight at the kill, and the
  judge's concurrency holds across both workers.
- The only worker is SIGKILLed mid-job and the job is resumed on a new one.

Self-contained: the test makes its own PostgreSQL database and Redis db number and
drives the platform through ``manage.py`` and ``celery`` subprocesses, as a user would.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter

import psycopg
import pytest
import redis

from judging.simulated import start_simulated_judge
from tests import tiers
from tests.conftest import DEMO_TINY, REPO

PG = tiers.pg_server_url()
REDIS_DB = int(os.environ.get("RCP_TEST_REDIS_DB", "13"))


@pytest.fixture
def stack(tmp_path):
    name = f"{os.environ.get('RCP_TEST_DB_PREFIX', 'rcp_e2e')}_{os.getpid()}"
    with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    redis.Redis.from_url(tiers.redis_url(REDIS_DB)).flushdb()
    env = {
        **os.environ,
        "DATABASE_URL": f"{PG}/{name}",
        "CELERY_BROKER_URL": tiers.redis_url(REDIS_DB),
        "JUDGE_LIMITER_URL": tiers.redis_url(REDIS_DB),
        "JUDGING_HEARTBEAT_STALE_S": "3",
        # A dead worker's units and windows are taken over after this lease.
        "JUDGING_LEASE_S": "3",
        "JUDGING_HEARTBEAT_S": "0.5",
        "JUDGING_LANES": "2",  # the job fans out to two lane tasks
        "RCP_VAR_DIR": str(tmp_path / "var"),
        "DEBUG": "true",
    }
    server, _thread, url = start_simulated_judge(seed=5, latency_ms=300)
    workers: list[subprocess.Popen] = []

    def manage(*args: str, timeout: float = 120) -> str:
        out = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert out.returncode == 0, out.stderr[-3000:]
        return out.stdout

    def worker() -> subprocess.Popen:
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
                f"--hostname=e2e{len(workers)}@%h",
            ],
            cwd=REPO,
            env=env,
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        workers.append(proc)
        return proc

    def sql(query: str) -> list[tuple]:
        with psycopg.connect(f"{PG}/{name}") as conn:
            return conn.execute(query).fetchall()

    manage("migrate", "--noinput")
    yield {"manage": manage, "worker": worker, "sql": sql, "server": server, "url": url}
    for proc in workers:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    server.stop()
    with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.mark.postgres
@pytest.mark.redis
def test_worker_killed_mid_job_then_resumed_loses_and_duplicates_nothing(stack):
    manage, sql, server = stack["manage"], stack["sql"], stack["server"]
    manage(
        "import_dataset",
        "--name",
        "tiny",
        "--corpus",
        str(DEMO_TINY / "corpus.jsonl"),
        "--queries",
        str(DEMO_TINY / "queries.jsonl"),
        "--pools",
        str(DEMO_TINY / "pools.tsv"),
    )
    manage(
        "add_judge",
        "--name",
        "sim",
        "--base-url",
        stack["url"],
        "--model",
        "sim-1",
        "--concurrency",
        "2",
    )
    first = stack["worker"]()
    manage("judge", "--dataset", "tiny", "--judge", "sim")  # queued on Celery (Redis)
    job_id = sql("SELECT max(id) FROM judging_judgingjob")[0][0]

    deadline = time.monotonic() + 60
    while (
        sql("SELECT count(*) FROM judging_judgmentwindow WHERE status='done'")[0][0]
        < 20
    ):
        assert time.monotonic() < deadline, "the worker did not start the job"
        time.sleep(0.1)
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    in_flight = {
        r[0]
        for r in sql(
            "SELECT prompt_sha256 FROM judging_judgmentwindow WHERE status='in_flight'"
        )
    }
    n_in_flight = sql(
        "SELECT count(*) FROM judging_judgmentwindow WHERE status='in_flight'"
    )[0][0]
    done_at_kill = sql(
        "SELECT count(*) FROM judging_judgmentwindow WHERE status='done'"
    )[0][0]
    assert (
        sql(f"SELECT status FROM judging_judgingjob WHERE id={job_id}")[0][0]
        == "running"
    )
    assert n_in_flight >= 1 and done_at_kill < 60

    time.sleep(3.5)  # heartbeat goes stale: the job is resumable
    stack["worker"]()
    out = manage("judge", "--resume", str(job_id), "--wait", timeout=180)
    assert "done" in out

    rows = sql("SELECT query_id, stage, seq, status, valid FROM judging_judgmentwindow")
    assert len(rows) == 60 == len({(q, s, n) for q, s, n, _, _ in rows})
    assert all(status == "done" and valid for _, _, _, status, valid in rows)
    stats = server.stats()
    asked = Counter(stats["prompts"])
    repeated = {h for h, n in asked.items() if n > 1}
    # Only windows in flight at the kill were asked again, and at most once more.
    assert len(repeated) <= n_in_flight and all(asked[h] == 2 for h in repeated)
    assert stats["chat_requests"] == 60 + len(repeated)
    stored = {r[0] for r in sql("SELECT prompt_sha256 FROM judging_judgmentwindow")}
    assert stored == set(asked)
    assert in_flight <= {"", *asked}
    assert (
        sql(f"SELECT status, requests FROM judging_judgingjob WHERE id={job_id}")[0][0]
        == "done"
    )
    assert (
        stats["max_in_flight"] <= 2
    )  # the judge's concurrency held across both workers


def _tiny_and_judge(stack, concurrency: int) -> None:
    stack["manage"](
        "import_dataset",
        "--name",
        "tiny",
        "--corpus",
        str(DEMO_TINY / "corpus.jsonl"),
        "--queries",
        str(DEMO_TINY / "queries.jsonl"),
        "--pools",
        str(DEMO_TINY / "pools.tsv"),
    )
    stack["manage"](
        "add_judge",
        "--name",
        "sim",
        "--base-url",
        stack["url"],
        "--model",
        "sim-1",
        "--concurrency",
        str(concurrency),
    )


@pytest.mark.postgres
@pytest.mark.redis
def test_two_workers_share_a_job_and_the_survivor_finishes_it(stack):
    sql, server = stack["sql"], stack["server"]
    _tiny_and_judge(stack, concurrency=3)
    victim = stack["worker"]()
    stack["worker"]()
    stack["manage"]("judge", "--dataset", "tiny", "--judge", "sim")  # queued
    job_id = sql("SELECT max(id) FROM judging_judgingjob")[0][0]

    # Both workers are on the job: windows stored by two lanes.
    deadline = time.monotonic() + 90
    while True:
        # Lanes that have stored answers (not only claimed windows): the kill must
        # come after both workers stored something, or "both stored" below is luck.
        lanes = sql(
            "SELECT count(DISTINCT claim) FROM judging_judgmentwindow "
            "WHERE claim <> '' AND status = 'done'"
        )[0][0]
        done = sql("SELECT count(*) FROM judging_judgmentwindow WHERE status='done'")[
            0
        ][0]
        if lanes >= 2 and done >= 12:
            break
        assert time.monotonic() < deadline, f"lanes {lanes}, done {done}"
        time.sleep(0.05)
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait()
    in_flight_ids = {
        r[0]
        for r in sql("SELECT id FROM judging_judgmentwindow WHERE status='in_flight'")
    }
    assert (
        sql(f"SELECT status FROM judging_judgingjob WHERE id={job_id}")[0][0]
        == "running"
    )

    # No resume: the survivor takes over the dead lane's units when their leases end.
    deadline = time.monotonic() + 180
    while (
        status := sql(f"SELECT status FROM judging_judgingjob WHERE id={job_id}")[0][0]
    ) == "running":
        assert time.monotonic() < deadline, "the surviving worker did not finish"
        time.sleep(0.2)
    assert status == "done"

    rows = sql(
        "SELECT id, query_id, stage, seq, status, valid, prompt_sha256, claim "
        "FROM judging_judgmentwindow"
    )
    assert len(rows) == 60 == len({(q, s, n) for _, q, s, n, *_ in rows})
    assert all(r[4] == "done" and r[5] for r in rows)
    assert len({r[7] for r in rows}) >= 2  # both workers stored windows
    stats = server.stats()
    asked = Counter(stats["prompts"])
    repeated = {h for h, n in asked.items() if n > 1}
    in_flight_prompts = {r[6] for r in rows if r[0] in in_flight_ids}
    # Only windows in flight at the kill were asked again, and at most once more.
    assert repeated <= in_flight_prompts
    assert all(asked[h] == 2 for h in repeated)
    assert stats["chat_requests"] == 60 + len(repeated)
    assert {r[6] for r in rows} == set(asked)  # each stored once, from its own prompt
    assert stats["max_in_flight"] <= 3  # the judge's concurrency across both workers
    units = sql(
        f"SELECT status, count(*) FROM judging_judgingunit WHERE job_id={job_id} GROUP BY status"
    )
    assert dict(units) == {"done": 6}  # 3 queries x 2 stages
