"""Judging throughput: a job against the simulated judge with fixed latency L and judge
concurrency C, every window persisted in PostgreSQL.

    .venv/bin/python perf/bench_judging.py [--latency-ms 200] [--concurrency 32]
        [--queries 20] [--docs 60] [--postgres postgres://postgres@127.0.0.1:5432/rcp_bench_judging]

Prints achieved requests/s against the ceiling C/L (target >= 0.85 x C/L on 2 cores),
and the platform's CPU time per request (this process only: the simulated judge runs
in its own process). Peer, measured in the same run: a bare loop of the official openai
client in C threads against the same server, with no parsing, planning or database -
the best any client could do here.
"""

from __future__ import annotations

import argparse
import os
import resource
import secrets
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--latency-ms", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--docs", type=int, default=150)
    parser.add_argument(
        "--processes", type=int, default=3, help="runner processes (JUDGING_PROCESSES)"
    )
    parser.add_argument(
        "--no-peer", action="store_true", help="skip the bare-client peer"
    )
    parser.add_argument(
        "--postgres", default="postgres://postgres@127.0.0.1:5432/rcp_bench_judging"
    )
    args = parser.parse_args()

    import psycopg

    base, dbname = args.postgres.rsplit("/", 1)
    with psycopg.connect(
        f"{base}/postgres".replace("postgres://", "postgresql://"), autocommit=True
    ) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {dbname} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {dbname}")
    tmp = Path(tempfile.mkdtemp())
    os.environ.update(
        DATABASE_URL=args.postgres,
        DEBUG="false",
        SECRET_KEY=secrets.token_urlsafe(50),
        RCP_VAR_DIR=str(tmp / "var"),
        JUDGE_LIMITER_URL=f"file://{tmp / 'slots'}",
    )
    port = free_port()
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
    )
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
        from judging.models import JudgmentWindow
        from judging.runner import job_run

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
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        judge = services.judge_create(
            name="sim", base_urls=[url], model="sim", concurrency=args.concurrency
        )
        ceiling = args.concurrency / (args.latency_ms / 1000)
        est = services.job_estimate(dataset=dataset, judge=judge)

        # Peer: the bare openai client in C threads, same server, same number of calls.
        import openai

        client = openai.OpenAI(base_url=url, api_key="x", max_retries=0)
        messages = [{"role": "user", "content": "hello"}]
        n_peer = 0 if args.no_peer else min(est.calls, 1500)
        t0, peer_cpu0 = time.perf_counter(), cpu_s()
        with ThreadPoolExecutor(args.concurrency) as pool:
            list(
                pool.map(
                    lambda _: client.chat.completions.create(
                        model="sim", messages=messages
                    ),
                    range(n_peer),
                )
            )
        peer_rate = n_peer / (time.perf_counter() - t0) or float("nan")
        peer_cpu_ms = 1000 * (cpu_s() - peer_cpu0) / max(n_peer, 1)

        job = services.job_create(dataset=dataset, judge=judge, queue=False)
        import json
        import urllib.request

        samples: list[int] = []
        sampling = threading.Event()

        def sample() -> None:
            stats_url = url.removesuffix("/v1") + "/stats"
            while not sampling.wait(0.1):
                with urllib.request.urlopen(stats_url) as resp:
                    samples.append(json.load(resp)["in_flight"])

        reset = urllib.request.Request(
            url.removesuffix("/v1") + "/stats/reset", method="POST"
        )
        urllib.request.urlopen(reset).close()  # the peer's peak must not count
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        child_cpu0 = before.ru_utime + before.ru_stime
        cpu0, t0 = cpu_s(), time.perf_counter()
        status = job_run(job_id=job.pk)
        wall, cpu = time.perf_counter() - t0, cpu_s() - cpu0
        sampling.set()
        sampler.join()
        job.refresh_from_db()
        stored = JudgmentWindow.objects.filter(job=job, status="done").count()
        rate = job.requests / wall
        print(
            f"simulated judge: latency {args.latency_ms} ms, judge concurrency {args.concurrency} "
            f"-> ceiling C/L = {ceiling:.0f} requests/s"
        )
        print(
            f"job: {args.queries} queries x {args.docs} docs, both stages, status {status}; "
            f"estimate {est.calls} calls, made {job.requests} requests, {stored} windows stored in PostgreSQL"
        )
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu += children.ru_utime + children.ru_stime - child_cpu0
        print(
            f"platform ({args.processes} process(es)): {rate:7.1f} requests/s = {rate / ceiling:.2f} x C/L   "
            f"(CPU {1000 * cpu / max(job.requests, 1):.1f} ms per request, wall {wall:.1f} s)"
        )
        deciles = (
            [samples[int(i * (len(samples) - 1) / 9)] for i in range(10)]
            if samples
            else []
        )
        print(
            f"requests in flight at the judge, sampled every 0.1 s: mean {sum(samples) / max(len(samples), 1):.1f} "
            f"of {args.concurrency}; over time: {deciles}"
        )
        print(
            f"bare openai loop (peer): {peer_rate:7.1f} requests/s = {peer_rate / ceiling:.2f} x C/L; "
            f"platform at {rate / peer_rate:.0%} of it (peer CPU {peer_cpu_ms:.1f} ms per request)"
        )
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
