"""A judging job on a real Celery worker with Redis and PostgreSQL, killed with
SIGKILL mid-job and resumed: nothing is lost, nothing is stored twice, and the judge
is asked again only for the windows that were in flight.

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
    name = f"rcp_e2e_{os.getpid()}"
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
        "JUDGING_PROCESSES": "2",  # the job shares its queries with a helper process
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
