"""32 annotator processes against PostgreSQL: exactly N per contest, under load.

The test always runs on PostgreSQL: it creates a database of its own on the server of
``DATABASE_URL`` when the suite runs on PostgreSQL, else on
``postgres://postgres@127.0.0.1:5432`` (override with ``RCP_CONCURRENCY_PG``), runs
this file as a harness in a subprocess (migrate, seed a study, fork the annotator
processes), checks the promises of ``annotation/ASSIGNMENT.md`` from the database,
and drops the database. A missing server is a failure, not a skip.

Each annotator process talks to the API through Django's test client (the full
request path: authentication, permissions, serializers, services) with its own
database connection. Behaviours mixed in: abandoned leases (short lease, so they
expire during the run), double submits, two parallel ``next`` calls, and annotators
coming back after a 204 while abandoned contests return to the pool.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

REPO = Path(__file__).resolve().parents[2]
N_WORKERS = 32
N_CONTESTS = 24
PER_CONTEST = 3
LEASE_SECONDS = 3.0
DEADLINE_SECONDS = 90.0


# ---------------------------------------------------------------------------- pytest side


def _server_url() -> str:
    """A PostgreSQL server URL without database name (tests/tiers.py)."""
    from tests import tiers

    return tiers.pg_server_url()


def _admin(server: str, sql: str) -> None:
    import psycopg

    parts = urlsplit(server)
    with psycopg.connect(
        host=parts.hostname or "127.0.0.1",
        port=parts.port or 5432,
        user=parts.username or "postgres",
        password=parts.password,
        dbname="postgres",
        autocommit=True,
        connect_timeout=5,
    ) as conn:
        conn.execute(sql)


@pytest.fixture
def postgres_database():
    server = _server_url()
    name = f"rcp_assign_{os.getpid()}_{secrets.token_hex(3)}"
    _admin(server, f'CREATE DATABASE "{name}"')
    try:
        yield f"{server.rstrip('/')}/{name}"
    finally:
        _admin(server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.postgres
def test_thirty_two_concurrent_annotators_never_over_assign(postgres_database):
    """No contest over-assigned, no annotator twice on a contest, no lost submission;
    at the end every contest has exactly N submitted gradings."""
    env = {
        **os.environ,
        "DATABASE_URL": postgres_database,
        "DJANGO_SETTINGS_MODULE": "rcp_platform.settings",
        "PYTHONPATH": str(REPO),
        # Production-like request path (no debug query log) on a 2-core machine.
        "DEBUG": "false",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "ALLOWED_HOSTS": "testserver",
        "SECURE_SSL_REDIRECT": "false",  # the test client speaks plain HTTP
    }
    started = time.monotonic()
    run = subprocess.run(
        [sys.executable, "-m", "tests.annotation.test_concurrency"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=DEADLINE_SECONDS + 60,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["vendor"] == "postgresql"
    assert report["workers"] >= 30
    assert report["errors"] == [], report["errors"][:5]
    assert report["contests"] == N_CONTESTS
    assert report["submitted_per_contest"] == {str(PER_CONTEST): N_CONTESTS}
    assert report["max_live_seen"] <= PER_CONTEST
    assert report["duplicate_pairs"] == 0
    assert report["lost_submissions"] == 0
    assert report["acknowledged_submissions"] == N_CONTESTS * PER_CONTEST
    assert report["double_submits_acknowledged_once"] is True
    assert report["parallel_next_same_assignment"] is True
    assert report["abandoned_leases_reclaimed"] >= 1
    assert report["timed_out"] is False
    assert time.monotonic() - started < DEADLINE_SECONDS


# ---------------------------------------------------------------------------- harness


def _worker(index: int, token: str, study_id: int, done, results) -> None:
    """One annotator: next, grade, submit, until the harness says the study is done."""
    import threading

    import numpy as np
    from rest_framework.test import APIClient

    from tests.annotation.factories import full_grades

    rng = np.random.default_rng(index)
    role = ("abandoner", "double", "parallel", "normal", "normal", "normal")[index % 6]
    out: dict = {
        "index": index,
        "role": role,
        "submitted": [],
        "errors": [],
        "double_ok": [],
        "parallel_same": None,
    }

    def client() -> APIClient:
        c = APIClient(raise_request_exception=False)
        c.credentials(HTTP_AUTHORIZATION=f"Token {token}")
        return c

    api = client()
    next_url = f"/api/v1/studies/{study_id}/assignments/next"
    deadline = time.monotonic() + DEADLINE_SECONDS
    try:
        if role == "parallel":
            ids: list = []

            def call() -> None:
                r = client().post(next_url)
                ids.append(
                    r.json()["assignment"] if r.status_code == 201 else r.status_code
                )

            threads = [threading.Thread(target=call) for _ in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            out["parallel_same"] = len(set(ids)) == 1 and isinstance(ids[0], int)
        while time.monotonic() < deadline:
            r = api.post(next_url)
            if r.status_code == 204:
                if done.is_set():
                    break
                time.sleep(0.8 + 0.4 * rng.random())  # abandoned leases may come back
                continue
            if r.status_code != 201:
                out["errors"].append(f"next {r.status_code} {r.content[:200]!r}")
                time.sleep(0.1)
                continue
            body = r.json()
            if role == "abandoner":
                # Walk away from this lease. The first abandoner never returns (the
                # study can only finish if its lease is reclaimed); the others come
                # back after it lapsed: next renews it if nobody reclaimed it yet,
                # else hands out another contest, never this one again.
                out["abandoned"] = body["assignment"]
                if index == 0:
                    break
                role = "normal"
                time.sleep(LEASE_SECONDS + 0.5)
                continue
            grades = full_grades(body, rng)
            url = f"/api/v1/assignments/{body['assignment']}/submit"
            r = api.post(url, {"grades": grades}, format="json")
            if r.status_code == 409:
                continue  # lease expired and taken: legitimate, move on
            if r.status_code != 200:
                out["errors"].append(f"submit {r.status_code} {r.content[:200]!r}")
                continue
            if not r.json()["already_submitted"]:
                out["submitted"].append(
                    {"assignment": body["assignment"], "grades": grades}
                )
            if role == "double":
                again = api.post(url, {"grades": grades}, format="json")
                out["double_ok"].append(
                    again.status_code == 200 and again.json()["already_submitted"]
                )
    except Exception as exc:  # reported, never swallowed
        out["errors"].append(f"{type(exc).__name__}: {exc}")
    results.put(out)


def _harness() -> dict:
    import multiprocessing as mp
    from datetime import timedelta

    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection, connections
    from django.db.models import Count, Q
    from django.test.utils import setup_test_environment
    from django.utils import timezone
    from rest_framework.authtoken.models import Token

    from annotation.models import Assignment, AssignmentStatus, Contest, Grade
    from annotation.services import study_create, study_member_add
    from tests.annotation.factories import build_world
    from tests.factories import AnnotatorFactory

    t0 = time.monotonic()
    setup_test_environment()
    # Test-only tweak: hashing 32 passwords with PBKDF2 would take seconds.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    call_command("migrate", verbosity=0)
    timings = {"migrate": time.monotonic() - t0}
    world = build_world(n_queries=12, pool=12, n_systems=3, seed=5, name="concurrency")
    study = study_create(
        name="concurrency",
        datasets=[world.dataset],
        systems=world.systems,
        n_contests=N_CONTESTS,
        per_contest=PER_CONTEST,
        lease_duration=timedelta(seconds=LEASE_SECONDS),
        seed=3,
        open_now=True,
    )
    tokens = []
    for _ in range(N_WORKERS):
        user = AnnotatorFactory()
        study_member_add(study=study, annotator=user)
        tokens.append(Token.objects.create(user=user).key)
    # Warm up before forking: the first request imports the URLconf, DRF and the
    # views; 32 children doing that at once on two cores would stall for seconds.
    from rest_framework.test import APIClient

    warm = APIClient(raise_request_exception=False)
    warm.credentials(HTTP_AUTHORIZATION=f"Token {tokens[0]}")
    warm.get("/api/v1/assignments/0")
    vendor = connection.vendor
    timings["seed"] = time.monotonic() - t0 - timings["migrate"]
    connections.close_all()  # children open their own connections

    ctx = mp.get_context("fork")
    done = ctx.Event()
    results = ctx.Queue()
    procs = [
        ctx.Process(target=_worker, args=(i, t, study.pk, done, results))
        for i, t in enumerate(tokens)
    ]
    for p in procs:
        p.start()
    needed = N_CONTESTS * PER_CONTEST
    max_live = 0
    deadline = time.monotonic() + DEADLINE_SECONDS
    timed_out = True
    while time.monotonic() < deadline:
        now = timezone.now()
        live = (
            Assignment.objects.filter(contest__study=study)
            .filter(
                Q(status=AssignmentStatus.SUBMITTED)
                | Q(status=AssignmentStatus.LEASED, expires_at__gt=now)
            )
            .values("contest")
            .annotate(n=Count("pk"))
        )
        max_live = max([max_live, *(row["n"] for row in live)])
        submitted = Assignment.objects.filter(
            contest__study=study, status=AssignmentStatus.SUBMITTED
        ).count()
        if submitted >= needed:
            timed_out = False
            break
        time.sleep(0.1)
    done.set()
    timings["run"] = time.monotonic() - t0 - timings["migrate"] - timings["seed"]
    outs = [results.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=30)

    per_contest = (
        Contest.objects.filter(study=study)
        .annotate(
            n=Count(
                "assignments", filter=Q(assignments__status=AssignmentStatus.SUBMITTED)
            )
        )
        .values_list("n", flat=True)
    )
    histogram: dict[str, int] = {}
    for n in per_contest:
        histogram[str(n)] = histogram.get(str(n), 0) + 1
    pairs = (
        Assignment.objects.filter(contest__study=study)
        .values("contest", "annotator")
        .annotate(n=Count("pk"))
        .filter(n__gt=1)
        .count()
    )
    acknowledged = [s for o in outs for s in o["submitted"]]
    lost = 0
    for item in acknowledged:
        a = Assignment.objects.get(pk=item["assignment"])
        keys = {d["document"]: d["key"] for d in a.documents}
        stored = {
            keys[g.document_id]: g.answers for g in Grade.objects.filter(assignment=a)
        }
        sent = {k: v["answers"] for k, v in item["grades"].items()}
        if a.status != AssignmentStatus.SUBMITTED or stored != sent:
            lost += 1
    doubles = [ok for o in outs for ok in o["double_ok"]]
    parallel = [o["parallel_same"] for o in outs if o["role"] == "parallel"]
    reclaimed = Assignment.objects.filter(
        contest__study=study, status=AssignmentStatus.EXPIRED
    ).count()
    return {
        "vendor": vendor,
        "workers": len(procs),
        "contests": len(per_contest),
        "submitted_per_contest": histogram,
        "max_live_seen": max_live,
        "duplicate_pairs": pairs,
        "acknowledged_submissions": len(acknowledged),
        "lost_submissions": lost,
        "double_submits_acknowledged_once": bool(doubles) and all(doubles),
        "parallel_next_same_assignment": bool(parallel) and all(parallel),
        "abandoned_leases_reclaimed": reclaimed,
        "errors": [e for o in outs for e in o["errors"]],
        "timed_out": timed_out,
        "seconds": {k: round(v, 2) for k, v in timings.items()},
    }


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "rcp_platform.settings")
    print(json.dumps(_harness()))
