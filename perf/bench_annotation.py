"""Benchmark: concurrent simulated annotators over HTTP against gunicorn + PostgreSQL.

    .venv/bin/python perf/bench_annotation.py [--annotators 50] [--contests 300]
        [--workers 3] [--think-ms 10000] [--duration 40] [--stress-duration 15]
        [--pg postgres://postgres@127.0.0.1:5432]

Creates a throw-away database on the PostgreSQL server, migrates it, seeds a study
(seeded world, N=3 per contest) with token-authenticated annotators, starts gunicorn on
it, then runs the annotators as asyncio tasks (httpx). Each loops `next` -> grade ->
`submit` (random complete grades). Two phases on the same study:

- paced: each annotator spends 0.5-1.5 x ``--think-ms`` grading a contest (default
  10 s, several times faster than a person reading 5-10 documents), starting at random
  moments, so the 50 are not in lockstep;
- stress: no think time at all, to find the saturation throughput.

Prints p50/p95/max latency of `next` and `submit` per phase, throughput, and checks the
assignment invariants (never more than N per contest, no annotator twice on a contest)
from the database. Targets on this machine: p95 < 100 ms for next, < 150 ms for submit.
The client shares the machine with gunicorn and PostgreSQL, so the figures include its
CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _admin_sql(server: str, sql: str) -> None:
    import psycopg

    parts = urlsplit(server)
    with psycopg.connect(
        host=parts.hostname or "127.0.0.1",
        port=parts.port or 5432,
        user=parts.username or "postgres",
        password=parts.password,
        dbname="postgres",
        autocommit=True,
    ) as conn:
        conn.execute(sql)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _seed(n_annotators: int, n_contests: int) -> tuple[int, list[str], int]:
    """Migrate, build a world and an open study; return (study id, tokens, N)."""
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connections
    from rest_framework.authtoken.models import Token

    from annotation.services import (
        annotator_group_ensure,
        study_create,
        study_member_add,
    )
    from tests.annotation.factories import build_world

    call_command("migrate", verbosity=0)
    n_queries = max(10, n_contests // 5 + 10)
    world = build_world(n_queries=n_queries, pool=20, n_systems=4, seed=1, name="bench")
    study = study_create(
        name="bench",
        datasets=[world.dataset],
        systems=world.systems,
        n_contests=n_contests,
        seed=1,
        open_now=True,
    )
    group = annotator_group_ensure()
    User = get_user_model()
    tokens = []
    for i in range(n_annotators):
        user = User.objects.create(username=f"bench-annotator-{i:03d}")  # no password
        user.groups.add(group)
        study_member_add(study=study, annotator=user)
        tokens.append(Token.objects.create(user=user).key)
    connections.close_all()
    return study.pk, tokens, study.per_contest


def _grades(body: dict, rng) -> dict:
    return {
        d["key"]: {
            "answers": {q["key"]: rng.random() < 0.5 for q in body["questions"]},
            "order": None,
            "comment": None,
            "seconds": round(rng.uniform(3, 40), 1),
        }
        for d in body["documents"]
    }


async def _annotator(base, token, study_id, deadline, think, stats, rng) -> None:
    import httpx

    headers = {"Authorization": f"Token {token}"}
    # Annotators are not in lockstep: each starts at a random moment of the first
    # think period and takes 0.5-1.5x the mean think time per contest.
    await asyncio.sleep(rng.uniform(0, think))
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=30) as http:
        while time.monotonic() < deadline:
            t = time.perf_counter()
            r = await http.post(f"/api/v1/studies/{study_id}/assignments/next")
            stats["next"].append(time.perf_counter() - t)
            if r.status_code == 204:
                stats["done_annotators"] += 1
                return
            if r.status_code != 201:
                stats["errors"].append(f"next {r.status_code}: {r.text[:120]}")
                return
            body = r.json()
            if think:
                await asyncio.sleep(think * rng.uniform(0.5, 1.5))
            t = time.perf_counter()
            r = await http.post(
                f"/api/v1/assignments/{body['assignment']}/submit",
                json={"grades": _grades(body, rng)},
            )
            stats["submit"].append(time.perf_counter() - t)
            if r.status_code != 200:
                stats["errors"].append(f"submit {r.status_code}: {r.text[:120]}")
            else:
                stats["submitted"] += 1


async def _warm_up(base: str, token: str, n: int) -> None:
    import httpx

    headers = {"Authorization": f"Token {token}"}
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=60) as http:
        for _ in range(2):
            await asyncio.gather(*(http.get("/login/") for _ in range(n)))


async def _load(base, tokens, study_id, duration, think) -> dict:
    import random

    stats = {
        "next": [],
        "submit": [],
        "errors": [],
        "submitted": 0,
        "done_annotators": 0,
    }
    deadline = time.monotonic() + duration
    started = time.perf_counter()
    await asyncio.gather(
        *(
            _annotator(base, tok, study_id, deadline, think, stats, random.Random(i))
            for i, tok in enumerate(tokens)
        )
    )
    stats["elapsed"] = time.perf_counter() - started
    return stats


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))] * 1000


def _check(study_id: int, per_contest: int) -> dict:
    from django.db import connections
    from django.db.models import Count, Q

    from annotation.models import Assignment, AssignmentStatus, Contest

    connections.close_all()
    counts = list(
        Contest.objects.filter(study_id=study_id)
        .annotate(
            n=Count(
                "assignments", filter=Q(assignments__status=AssignmentStatus.SUBMITTED)
            )
        )
        .values_list("n", flat=True)
    )
    dup = (
        Assignment.objects.filter(contest__study_id=study_id)
        .values("contest", "annotator")
        .annotate(n=Count("pk"))
        .filter(n__gt=1)
        .count()
    )
    return {
        "contests": len(counts),
        "complete": sum(n == per_contest for n in counts),
        "over_assigned": sum(n > per_contest for n in counts),
        "duplicate_pairs": dup,
    }


def _report(label: str, think_ms: float, stats: dict) -> None:
    elapsed = stats["elapsed"]
    requests = len(stats["next"]) + len(stats["submit"])
    pace = f"{think_ms:g} ms (0.5-1.5x, random start)" if think_ms else "none"
    print(f"\n[{label}] think time {pace}")
    print(
        f"{'endpoint':<8} {'n':>6} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8}  target p95"
    )
    for key, target in (("next", 100), ("submit", 150)):
        values = stats[key]
        p95 = _pct(values, 0.95)
        verdict = "OK" if p95 < target else "MISSED"
        print(
            f"{key:<8} {len(values):>6} {_pct(values, 0.5):>8.1f} {p95:>8.1f} "
            f"{_pct(values, 1.0):>8.1f}  < {target} ms {verdict}"
        )
    print(
        f"throughput: {stats['submitted'] / elapsed:.1f} submitted gradings/s, "
        f"{requests / elapsed:.1f} requests/s over {elapsed:.1f} s"
        + (f"; {len(stats['errors'])} errors" if stats["errors"] else "")
    )
    for error in stats["errors"][:5]:
        print("  error:", error)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--annotators", type=int, default=50)
    parser.add_argument("--contests", type=int, default=300)
    parser.add_argument("--workers", type=int, default=3, help="gunicorn workers")
    parser.add_argument("--think-ms", type=float, default=10_000.0)
    parser.add_argument("--duration", type=float, default=40.0, help="paced phase, s")
    parser.add_argument(
        "--stress-duration", type=float, default=15.0, help="0 skips the stress phase"
    )
    parser.add_argument(
        "--pg",
        default=os.environ.get("RCP_BENCH_PG", "postgres://postgres@127.0.0.1:5432"),
        help="PostgreSQL server URL (a database is created and dropped)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the database")
    args = parser.parse_args()

    name = f"rcp_bench_{secrets.token_hex(4)}"
    server = args.pg.rstrip("/")
    _admin_sql(server, f'CREATE DATABASE "{name}"')
    env = {
        **os.environ,
        "DATABASE_URL": f"{server}/{name}",
        "DEBUG": "false",
        "SECRET_KEY": secrets.token_urlsafe(40),
        "ALLOWED_HOSTS": "127.0.0.1,localhost",
        "SECURE_SSL_REDIRECT": "false",  # plain HTTP to gunicorn on loopback
        "DJANGO_SETTINGS_MODULE": "rcp_platform.settings",
        "LOG_LEVEL": "ERROR",
        "PYTHONWARNINGS": "ignore::UserWarning",  # whitenoise: no collected static
    }
    os.environ.update(env)
    gunicorn = None
    phases = [("paced", args.think_ms, args.duration)]
    if args.stress_duration > 0:
        phases.append(("stress", 0.0, args.stress_duration))
    results = []
    try:
        t0 = time.perf_counter()
        study_id, tokens, per_contest = _seed(args.annotators, args.contests)
        print(
            f"seeded study {study_id}: {args.contests} contests x {per_contest} "
            f"annotators, {len(tokens)} annotator accounts "
            f"({time.perf_counter() - t0:.1f} s)"
        )
        port = _free_port()
        gunicorn = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "gunicorn"),
                "rcp_platform.wsgi:application",
                "--workers",
                str(args.workers),
                "--bind",
                f"127.0.0.1:{port}",
                "--log-level",
                "warning",
            ],
            cwd=ROOT,
            env=env,
        )
        base = f"http://127.0.0.1:{port}"
        for _ in range(100):
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    break
            except OSError:
                time.sleep(0.1)
        # Warm every worker up (URLconf, DRF, first database connection) so the
        # figures measure steady state, not the workers' first requests.
        asyncio.run(_warm_up(base, tokens[0], args.workers * 4))
        for label, think_ms, duration in phases:
            stats = asyncio.run(
                _load(base, tokens, study_id, duration, think_ms / 1000)
            )
            results.append((label, think_ms, stats))
    finally:
        if gunicorn is not None:
            gunicorn.terminate()
            gunicorn.wait(timeout=20)
    check = _check(study_id, per_contest)
    print(
        f"\n{args.annotators} concurrent annotators, gunicorn {args.workers} sync "
        f"workers, PostgreSQL, {os.cpu_count()} CPUs (shared with the client)"
    )
    for label, think_ms, stats in results:
        _report(label, think_ms, stats)
    print(
        f"\nstudy: {check['complete']}/{check['contests']} contests complete, "
        f"{check['over_assigned']} over-assigned, {check['duplicate_pairs']} "
        "duplicate (contest, annotator) pairs"
    )
    if not args.keep:
        from django.db import connections

        connections.close_all()
        _admin_sql(server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    errors = sum(len(stats["errors"]) for _l, _t, stats in results)
    ok = not errors and check["over_assigned"] == 0 and not check["duplicate_pairs"]
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
