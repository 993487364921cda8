"""Benchmark: concurrent annotators over HTTP against gunicorn + PostgreSQL.

    .venv/bin/python perf/bench_annotation.py [--annotators 50] [--contests 2000]
        [--workers 4] [--rate 150] [--duration 30] [--db-prefix rcp_bench_]
        [--pg postgres://postgres@127.0.0.1:5432]

Creates a throw-away database on the PostgreSQL server, migrates it, seeds a study
(seeded world, N=3 per contest) with token-authenticated annotators, starts gunicorn
(``--workers`` sync workers, persistent database connections) on it, then runs the
annotators as asyncio tasks. Each loops `next` -> grade -> `submit` (random complete
grades). Two phases, each ``--duration`` seconds:

- paced: the annotators together offer ``--rate`` requests/s (each waits an
  exponentially distributed pause, mean annotators / rate, before each request; a
  late answer is not made up for). The latency targets are for this phase: p95 <
  100 ms for `next` and < 150 ms for `submit` while serving 150 requests/s.
- zero think time: every annotator sends its next request as soon as the previous
  one is answered: the saturation throughput (target >= 150 requests/s). Here each
  of the 50 clients always has one request outstanding, so the mean latency is
  50 / throughput (Little's law) whatever the server does; it is printed, not
  judged against the latency targets.

``--rate 0`` skips the paced phase. Prints requests/s and p50/p95/max latency of `next`
and `submit`, CPU per request, then checks from the database that the run kept the
promises: exactly N (no contest with more than N live or submitted assignments, no
annotator twice on a contest) and no lost grade (every submit acknowledged as new is
submitted with one grade per document, and no grade exists without an acknowledged
submit). Exit status 1 if any check fails or any request failed. The client is a
minimal HTTP/1.1 client on asyncio streams (httpx cost more CPU than the server's
work), but it still shares the machine with gunicorn and PostgreSQL, so the figures
include its CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import json
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


async def _request(
    host: str, port: int, method: str, path: str, token: str, body: bytes = b""
) -> tuple[int, bytes]:
    """One HTTP/1.1 request on a fresh connection (gunicorn's sync workers close
    each connection after its response); returns (status, body)."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: {host}\r\n"
            f"Authorization: Token {token}\r\nAccept: application/json\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n"
        )
        writer.write(head.encode() + body)
        raw = await reader.read(-1)
    finally:
        writer.close()
    header, _, payload = raw.partition(b"\r\n\r\n")
    status = int(header.split(b" ", 2)[1])
    if b"transfer-encoding: chunked" in header.lower():
        payload = _unchunk(payload)
    return status, payload


def _unchunk(data: bytes) -> bytes:
    out, rest = [], data
    while rest:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out.append(rest[:size])
        rest = rest[size + 2 :]
    return b"".join(out)


async def _annotator(addr, token, study_id, deadline, pause, stats, rng) -> None:
    """One annotator until the deadline. With ``pause`` (mean seconds; 0 for none)
    its requests are due at the times of a Poisson process of that mean gap, so a
    slow answer does not lower the offered rate (a request overdue goes at once)."""
    host, port = addr
    due = time.monotonic()

    async def paced() -> bool:
        nonlocal due
        if pause:
            due += rng.expovariate(1 / pause)
            if due >= deadline:
                return False
            await asyncio.sleep(max(0.0, due - time.monotonic()))
        return time.monotonic() < deadline

    while True:
        if not await paced():
            return
        t = time.perf_counter()
        code, raw = await _request(
            host, port, "POST", f"/api/v1/studies/{study_id}/assignments/next", token
        )
        stats["next"].append(time.perf_counter() - t)
        if code == 204:
            stats["done_annotators"] += 1
            return
        if code != 201:
            stats["errors"].append(f"next {code}: {raw[:120]!r}")
            return
        body = json.loads(raw)
        await paced()  # past the deadline: submit at once, leave no lease behind
        t = time.perf_counter()
        code, raw = await _request(
            host,
            port,
            "POST",
            f"/api/v1/assignments/{body['assignment']}/submit",
            token,
            json.dumps({"grades": _grades(body, rng)}).encode(),
        )
        stats["submit"].append(time.perf_counter() - t)
        if code != 200:
            stats["errors"].append(f"submit {code}: {raw[:120]!r}")
        elif not json.loads(raw)["already_submitted"]:
            stats["submitted"] += 1
            stats["acknowledged"].append(body["assignment"])


async def _warm_up(addr: tuple[str, int], token: str, n: int) -> None:
    for _ in range(2):
        await asyncio.gather(
            # A 404 after token authentication: opens each worker's connection.
            *(_request(*addr, "GET", "/api/v1/assignments/0", token) for _ in range(n))
        )


async def _load(addr, tokens, study_id, duration, pause) -> dict:
    import random

    stats = {
        "next": [],
        "submit": [],
        "errors": [],
        "submitted": 0,
        "acknowledged": [],
        "done_annotators": 0,
    }
    deadline = time.monotonic() + duration
    started = time.perf_counter()
    await asyncio.gather(
        *(
            _annotator(addr, tok, study_id, deadline, pause, stats, random.Random(i))
            for i, tok in enumerate(tokens)
        )
    )
    stats["elapsed"] = time.perf_counter() - started
    return stats


def _cpu_seconds(pids: list[int]) -> dict[int, float]:
    """User + system CPU seconds by process (Linux /proc; vanished ones left out)."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[pid] = (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return out


def _cpu_used(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds used between two readings (processes new since count whole)."""
    return sum(t - before.get(pid, 0.0) for pid, t in after.items())


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if ppid == pid:
                out.append(int(entry))
    return out


def _pg_backends(server: str, name: str) -> list[int]:
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
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s", (name,)
        ).fetchall()
    return [pid for (pid,) in rows]


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))] * 1000


def _check(study_id: int, per_contest: int, acknowledged: list[int]) -> dict:
    """The promises, from the database: exactly N and no lost grade."""
    from django.db import connections
    from django.db.models import Count, Q
    from django.utils import timezone

    from annotation.models import Assignment, AssignmentStatus, Contest, Grade

    connections.close_all()
    now = timezone.now()
    live = Q(assignments__status=AssignmentStatus.SUBMITTED) | Q(
        assignments__status=AssignmentStatus.LEASED, assignments__expires_at__gt=now
    )
    rows = list(
        Contest.objects.filter(study_id=study_id)
        .annotate(
            submitted=Count(
                "assignments", filter=Q(assignments__status=AssignmentStatus.SUBMITTED)
            ),
            live=Count("assignments", filter=live),
        )
        .values_list("submitted", "live")
    )
    dup = (
        Assignment.objects.filter(contest__study_id=study_id)
        .values("contest", "annotator")
        .annotate(n=Count("pk"))
        .filter(n__gt=1)
        .count()
    )
    submitted = {
        pk: len(docs)
        for pk, docs in Assignment.objects.filter(
            contest__study_id=study_id, status=AssignmentStatus.SUBMITTED
        ).values_list("pk", "documents")
    }
    grades = dict(
        Grade.objects.filter(assignment__contest__study_id=study_id)
        .values("assignment")
        .annotate(n=Count("pk"))
        .values_list("assignment", "n")
    )
    acked = set(acknowledged)
    return {
        "contests": len(rows),
        "complete": sum(s == per_contest for s, _live in rows),
        "over_assigned": sum(s > per_contest or live > per_contest for s, live in rows),
        "duplicate_pairs": dup,
        "acknowledged": len(acked),
        # an acknowledged submit that is not submitted with all its grades
        "lost": sum(
            1 for pk in acked if pk not in submitted or grades.get(pk) != submitted[pk]
        ),
        # grades or submissions no client was told about (nor its retry)
        "unacknowledged": len(set(submitted) - acked) + len(set(grades) - acked),
    }


def _report(label: str, rate: float, stats: dict, n_clients: int) -> bool:
    """Print one phase; True if its targets were met."""
    elapsed = stats["elapsed"]
    requests = len(stats["next"]) + len(stats["submit"])
    served = requests / elapsed
    met = True
    if rate:
        print(
            f"\n[{label}] {n_clients} clients offering {rate:g} requests/s "
            "(exponential pauses)"
        )
    else:
        print(f"\n[{label}] {n_clients} clients, no pause between requests")
    print(
        f"{'endpoint':<8} {'n':>6} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8}  target p95"
    )
    for key, target in (("next", 100), ("submit", 150)):
        values = stats[key]
        p95 = _pct(values, 0.95)
        if rate:
            verdict = f"< {target} ms " + ("OK" if p95 < target else "MISSED")
            met = met and p95 < target
        else:
            verdict = "(not judged: Little's law, below)"
        print(
            f"{key:<8} {len(values):>6} {_pct(values, 0.5):>8.1f} {p95:>8.1f} "
            f"{_pct(values, 1.0):>8.1f}  {verdict}"
        )
    line = (
        f"throughput: {stats['submitted'] / elapsed:.1f} submitted gradings/s, "
        f"{served:.1f} requests/s over {elapsed:.1f} s"
    )
    if rate:
        ok = served >= 0.95 * rate
        met = met and ok
        line += f" (offered {rate:g}: {'served' if ok else 'NOT SERVED'})"
    else:
        ok = served >= 150
        met = met and ok
        line += f" (target >= 150: {'OK' if ok else 'MISSED'})"
    if stats["errors"]:
        line += f"; {len(stats['errors'])} errors"
    print(line)
    if not rate and served:
        print(
            f"Little's law: {n_clients} requests always outstanding / {served:.0f} "
            f"requests/s = {n_clients / served * 1000:.0f} ms mean latency; p95 < 100 "
            f"ms with no pause would need > {n_clients / 0.1:.0f} requests/s"
        )
    cpu = stats.get("cpu")
    if cpu and requests:
        per = {k: v / requests * 1000 for k, v in cpu.items()}
        total = sum(per.values())
        print(
            f"CPU per request: {total:.1f} ms (gunicorn {per['gunicorn']:.1f}, "
            f"PostgreSQL {per['postgres']:.1f}, client {per['client']:.1f}); "
            f"{os.cpu_count()} idle CPUs would serve about "
            f"{os.cpu_count() * 1000 / total:.0f} requests/s "
            f"({os.cpu_count() * 1000 / (total - per['client']):.0f} without the client)"
        )
    for error in stats["errors"][:5]:
        print("  error:", error)
    return met


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--annotators", type=int, default=50)
    parser.add_argument("--contests", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=4, help="gunicorn workers")
    parser.add_argument(
        "--rate",
        type=float,
        default=150.0,
        help="requests/s the paced phase offers (0: no paced phase)",
    )
    parser.add_argument("--duration", type=float, default=30.0, help="per phase, s")
    parser.add_argument(
        "--pg",
        default=os.environ.get("RCP_BENCH_PG", "postgres://postgres@127.0.0.1:5432"),
        help="PostgreSQL server URL (a database is created and dropped)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the database")
    parser.add_argument(
        "--db-prefix",
        default="rcp_bench_",
        help="name prefix of the throw-away database",
    )
    args = parser.parse_args()

    name = f"{args.db_prefix}{secrets.token_hex(4)}"
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
        # Workers keep their connection for the whole run, so the CPU of the
        # PostgreSQL backends is read from the same processes before and after.
        "DB_CONN_MAX_AGE": "3600",
    }
    os.environ.update(env)
    gunicorn = None
    phases = [("zero think time", 0.0, args.duration)]
    if args.rate > 0:
        phases.insert(0, ("paced", args.rate, args.duration))
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
                "--backlog",
                "2048",
                "--log-level",
                "warning",
            ],
            cwd=ROOT,
            env=env,
        )
        addr = ("127.0.0.1", port)
        for _ in range(100):
            try:
                with socket.create_connection(addr, timeout=0.2):
                    break
            except OSError:
                time.sleep(0.1)
        # Warm every worker up (URLconf, DRF, first database connection) so the
        # figures measure steady state, not the workers' first requests.
        asyncio.run(_warm_up(addr, tokens[0], args.workers * 4))
        for label, rate, duration in phases:
            # CPU time per request is what the machine's load does not change much:
            # measured for gunicorn (master and workers), the PostgreSQL backends of
            # the benchmark database (persistent connections) and this client.
            server_pids = [gunicorn.pid, *_children(gunicorn.pid)]
            before = (
                _cpu_seconds(server_pids),
                _cpu_seconds(_pg_backends(server, name)),
                time.process_time(),
            )
            pause = len(tokens) / rate if rate else 0.0
            stats = asyncio.run(_load(addr, tokens, study_id, duration, pause))
            stats["cpu"] = {
                "gunicorn": _cpu_used(before[0], _cpu_seconds(server_pids)),
                "postgres": _cpu_used(
                    before[1], _cpu_seconds(_pg_backends(server, name))
                ),
                "client": time.process_time() - before[2],
            }
            results.append((label, rate, stats))
    finally:
        if gunicorn is not None:
            gunicorn.terminate()
            gunicorn.wait(timeout=20)
    acknowledged = [pk for _l, _t, stats in results for pk in stats["acknowledged"]]
    check = _check(study_id, per_contest, acknowledged)
    load = os.getloadavg()
    print(
        f"\n{args.annotators} concurrent annotators, gunicorn {args.workers} sync "
        f"workers, PostgreSQL, {os.cpu_count()} CPUs shared with the client "
        f"(load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} at the end)"
    )
    targets_met = all(
        [_report(label, rate, stats, len(tokens)) for label, rate, stats in results]
    )
    print(
        f"\nexactly N: {check['complete']}/{check['contests']} contests complete, "
        f"{check['over_assigned']} over-assigned, {check['duplicate_pairs']} "
        "duplicate (contest, annotator) pairs"
    )
    print(
        f"no lost grade: {check['acknowledged']} acknowledged submits, "
        f"{check['lost']} lost, {check['unacknowledged']} unacknowledged"
    )
    if not args.keep:
        from django.db import connections

        connections.close_all()
        _admin_sql(server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    errors = sum(len(stats["errors"]) for _l, _t, stats in results)
    ok = (
        not errors
        and check["over_assigned"] == 0
        and not check["duplicate_pairs"]
        and not check["lost"]
        and not check["unacknowledged"]
    )
    print("checks:", "OK" if ok else "FAILED")
    print("targets:", "MET" if targets_met else "MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
