"""Judging throughput on Celery: jobs run by 2 worker processes (Redis broker and judge
slots, PostgreSQL) against the simulated judge with fixed latency L, at judge
concurrency C = 32 and C = 64, next to the bare openai client loop, in one run.

    .venv/bin/python perf/bench_judging.py [--latency-ms 200] [--concurrency 32 64]
        [--queries 20] [--docs 150] [--workers 2]
        [--postgres postgres://postgres@127.0.0.1:5432/rcp_bench_judging]
        [--redis redis://127.0.0.1:6379/0]

For each C it prints, side by side:
- platform: requests/s of the job (the requests the judge answered, over the job's
  start to end as the database records them) as a ratio of the ceiling C/L, and the
  CPU time of the worker processes (each worker's whole process tree, read from
  /proc) per request;
- peer: the official openai client in C threads in this process, the same number of
  calls to the same server, with no parsing, planning, limiter or database: the best
  any client could do here; its CPU per request is this process's.
Beside them, the checks (the run fails if one does not hold): the most requests ever
in flight at the judge (must be <= C: the cap holds across both workers), every window
asked once and stored once, the job done; and the load average. The simulated judge
runs in its own process; its CPU counts for nobody.
"""

from __future__ import annotations

import argparse
import os
import resource
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
TICKS = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def self_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def group_cpu_s(pgids: set[int]) -> float:
    """CPU seconds (user + system) of every live process in these process groups,
    plus what their reaped children used (cutime/cstime)."""
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) in pgids:  # fields[2] is the pgrp (field 5 of stat)
            total += sum(int(fields[i]) for i in (11, 12, 13, 14))
    return total / TICKS


def wait_port(port: int) -> None:
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"nothing listens on port {port}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--latency-ms", type=int, default=200)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[32, 64])
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--docs", type=int, default=150)
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument(
        "--postgres", default="postgres://postgres@127.0.0.1:5432/rcp_bench_judging"
    )
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    args = parser.parse_args()

    import psycopg
    import redis

    base, dbname = args.postgres.rsplit("/", 1)
    with psycopg.connect(
        f"{base}/postgres".replace("postgres://", "postgresql://"), autocommit=True
    ) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {dbname} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {dbname}")
    redis.Redis.from_url(args.redis).flushdb()
    tmp = Path(tempfile.mkdtemp())
    os.environ.update(
        DATABASE_URL=args.postgres,
        DEBUG="false",
        SECRET_KEY=secrets.token_urlsafe(50),
        RCP_VAR_DIR=str(tmp / "var"),
        CELERY_BROKER_URL=args.redis,
        JUDGE_LIMITER_URL=args.redis,
        JUDGING_LANES=str(args.workers),
        LOG_LEVEL="WARNING",
    )
    port = free_port()
    procs: list[subprocess.Popen] = []
    server = subprocess.Popen(
        [
            sys.executable,
            "manage.py",
            "simulated_judge",
            "--port",
            str(port),
            "--latency-ms",
            str(args.latency_ms),
            "--seed",
            "1",
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    procs.append(server)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        import django

        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "rcp_platform.settings")
        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        from benchmarks.services import dataset_import
        from benchmarks.synthetic import SyntheticSpec, write_benchmark
        from judging import services
        from judging.models import JobStatus, JudgingJob, JudgmentWindow

        workers = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "celery",
                    "-A",
                    "rcp_platform",
                    "worker",
                    "--concurrency=1",
                    "--loglevel=warning",
                    f"--hostname=bench{i}@%h",
                ],
                cwd=ROOT,
                start_new_session=True,  # its own process group: CPU read per tree
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for i in range(args.workers)
        ]
        procs.extend(workers)
        pgids = {w.pid for w in workers}
        paths = write_benchmark(
            tmp / "data",
            SyntheticSpec(
                n_queries=args.queries, docs_per_query=args.docs, pool_depth=args.docs
            ),
        )
        dataset = dataset_import(
            name="bench",
            corpus=paths["corpus"],
            queries=paths["queries"],
            pools=paths["pools"],
        )
        wait_port(port)
        time.sleep(3)  # the workers connect to the broker

        import json
        import urllib.request

        import openai

        def judge_stats(reset: bool = False) -> dict:
            req = urllib.request.Request(
                url.removesuffix("/v1") + ("/stats/reset" if reset else "/stats"),
                method="POST" if reset else "GET",
            )
            with urllib.request.urlopen(req) as resp:
                return json.load(resp)

        rows = []
        for concurrency in args.concurrency:
            ceiling = concurrency / (args.latency_ms / 1000)
            judge = services.judge_create(
                name=f"sim-{concurrency}",
                base_urls=[url],
                model="sim",
                concurrency=concurrency,
            )
            judge_stats(reset=True)
            cpu0 = group_cpu_s(pgids)
            job = services.job_create(dataset=dataset, judge=judge)  # on Celery
            while JudgingJob.objects.get(pk=job.pk).status in (
                JobStatus.PENDING,
                JobStatus.RUNNING,
            ):
                time.sleep(0.2)
            cpu = group_cpu_s(pgids) - cpu0
            job.refresh_from_db()
            stats = judge_stats()
            peak = stats["max_in_flight"]
            wall = (job.finished_at - job.started_at).total_seconds()
            # Requests as the judge counted them (the job's own counter is flushed
            # by each lane's heartbeat and may trail the job's end by a beat).
            requests = stats["chat_requests"]
            windows = JudgmentWindow.objects.filter(job=job)
            stored = windows.filter(status="done").count()
            keys = len(set(windows.values_list("query_id", "stage", "seq")))
            # Asked once: the judge saw each prompt exactly as often as stored windows
            # carry it (an adaptive batch may ask an earlier stretch again, same order).
            asked_once = Counter(stats["prompts"]) == Counter(
                windows.values_list("prompt_sha256", flat=True)
            )
            rate = requests / wall

            # Peer: the bare openai client in C threads, same server, same calls.
            client = openai.OpenAI(base_url=url, api_key="x", max_retries=0)
            messages = [{"role": "user", "content": "hello"}]
            n_peer = requests
            t0, peer_cpu0 = time.perf_counter(), self_cpu_s()
            with ThreadPoolExecutor(concurrency) as pool:
                list(
                    pool.map(
                        lambda _, c=client, m=messages: c.chat.completions.create(
                            model="sim", messages=m
                        ),
                        range(n_peer),
                    )
                )
            peer_wall = time.perf_counter() - t0
            peer_cpu = self_cpu_s() - peer_cpu0
            client.close()
            rows.append(
                dict(
                    C=concurrency,
                    ceiling=ceiling,
                    status=job.status,
                    error=job.error[:1000],
                    requests=requests,
                    windows=stored,
                    once=stored == keys == requests and asked_once,
                    wall=wall,
                    rate=rate,
                    cpu_ms=1000 * cpu / max(requests, 1),
                    peak=peak,
                    peer_rate=n_peer / peer_wall,
                    peer_cpu_ms=1000 * peer_cpu / max(n_peer, 1),
                    load=open("/proc/loadavg").read().split()[0],
                )
            )

        print(
            f"simulated judge latency L = {args.latency_ms} ms; {args.workers} Celery worker "
            f"processes (Redis broker + judge slots, PostgreSQL); job: {args.queries} queries "
            f"x {args.docs} docs, both stages"
        )
        header = (
            f"{'C':>4} {'C/L':>6} | {'platform req/s':>14} {'x C/L':>6} {'CPU ms/req':>10} "
            f"{'requests':>8} {'wall s':>7} | {'peer req/s':>10} {'x C/L':>6} "
            f"{'CPU ms/req':>10} | {'peak':>5} {'windows':>7} {'once':>4} {'job':>5} "
            f"{'load':>5}"
        )
        print(header)
        print("-" * len(header))
        for r in rows:
            print(
                f"{r['C']:>4} {r['ceiling']:>6.0f} | {r['rate']:>14.1f} {r['rate'] / r['ceiling']:>6.2f} "
                f"{r['cpu_ms']:>10.2f} {r['requests']:>8} {r['wall']:>7.1f} | "
                f"{r['peer_rate']:>10.1f} {r['peer_rate'] / r['ceiling']:>6.2f} {r['peer_cpu_ms']:>10.2f} | "
                f"{r['peak']:>5} {r['windows']:>7} {'yes' if r['once'] else 'NO':>4} "
                f"{r['status']:>5} {r['load']:>5}"
            )
        print(
            "peak: most requests in flight at the judge (must be <= C); windows: stored; "
            "once: every window asked once and stored once (one row per window, as many "
            "as requests); job: its status; load: 1-minute load average after the run"
        )
        for r in rows:
            assert r["status"] == "done", r
            assert r["peak"] <= r["C"], (
                f"the judge saw {r['peak']} > C = {r['C']} in flight"
            )
            assert r["once"], f"a window was asked or stored more than once: {r}"
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


if __name__ == "__main__":
    main()
