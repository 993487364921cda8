"""Import benchmark: a synthetic benchmark imported into SQLite and PostgreSQL.

    .venv/bin/python perf/bench_import.py [--queries 1000] [--docs-per-query 100]
        [--pool 150] [--systems 5] [--postgres postgres://postgres@127.0.0.1:5432/rcp_bench]

Prints documents/s, rows/s and peak RSS per backend, for the full corpus and a
quarter-size corpus (peak memory must not grow with corpus size: streaming), and
ratios against two peers measured in the same run on the same files:
- naive: one ORM ``create()`` per document (how hand-written Django importers and
  admin import plug-ins commonly load rows);
- raw driver: ``executemany`` (SQLite) / ``COPY`` (PostgreSQL) straight from the
  parsed file, no ORM and no validation (a ceiling, not a competitor).
Each measurement runs in a fresh child process so peak RSS is its own.
Targets (issue 2): >= 20,000 documents/s; peak RSS flat in corpus size.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(mode: str, data: Path, n_naive: int) -> dict:
    """Runs inside a fresh process with DATABASE_URL set; prints one JSON line."""
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "rcp_platform.settings")
    django.setup()
    from django.core.management import call_command
    from django.db import connection, transaction

    call_command("migrate", verbosity=0)
    from benchmarks import formats
    from benchmarks.models import Dataset, Document
    from benchmarks.services import dataset_delete, dataset_import, run_import  # noqa: F401

    base_rss = _rss_mb()
    out: dict = {"mode": mode, "base_rss_mb": round(base_rss, 1)}
    if mode == "platform":
        stage_rss: dict[str, float] = {}

        def progress(stage: str, count: int) -> None:
            stage_rss[stage] = _rss_mb()

        t0 = time.perf_counter()
        ds = dataset_import(
            name="bench",
            corpus=data / "corpus.jsonl",
            queries=data / "queries.jsonl",
            qrels=data / "qrels.tsv",
            pools=data / "pools.tsv",
            progress=progress,
        )
        t1 = time.perf_counter()
        n_runs = 0
        for run in sorted(data.glob("*.trec")):
            n_runs += run_import(
                dataset=ds, system_name=run.stem, path=run
            ).rankings.count()
        t2 = time.perf_counter()
        n_docs = ds.documents.count()
        n_rows = n_docs + ds.queries.count()
        from benchmarks.models import PoolEntry, Qrel

        n_rows += PoolEntry.objects.filter(query__dataset=ds).count()
        n_rows += Qrel.objects.filter(query__dataset=ds).count()
        out.update(
            docs=n_docs,
            dataset_rows=n_rows,
            dataset_s=round(t1 - t0, 2),
            run_rows=n_runs,
            runs_s=round(t2 - t1, 2),
            rss_after_documents_mb=round(stage_rss.get("documents", 0), 1),
            peak_rss_mb=round(_rss_mb(), 1),
        )
        # Documents alone: time the corpus stage by re-importing only documents.
        dataset_delete(dataset=ds)
        t0 = time.perf_counter()
        dataset_import(
            name="docs-only",
            corpus=data / "corpus.jsonl",
            queries=data / "queries.jsonl",
        )
        out["docs_only_s"] = round(time.perf_counter() - t0, 2)
    elif mode == "naive":
        ds = Dataset.objects.create(name="naive")
        records = formats.iter_corpus(data / "corpus.jsonl")
        t0 = time.perf_counter()
        with transaction.atomic():
            for i, r in enumerate(records):
                if i >= n_naive:
                    break
                Document.objects.create(
                    dataset=ds, external_id=r.doc_id, title=r.title, text=r.text
                )
        out.update(docs=n_naive, docs_only_s=round(time.perf_counter() - t0, 3))
    elif mode == "raw":
        ds = Dataset.objects.create(name="raw")
        table = Document._meta.db_table
        t0 = time.perf_counter()
        n = 0
        with transaction.atomic(), connection.cursor() as cur:
            if connection.vendor == "postgresql":
                with cur.cursor.copy(
                    f"COPY {table} (dataset_id, external_id, title, text) FROM STDIN"
                ) as copy:
                    for r in formats.iter_corpus(data / "corpus.jsonl"):
                        copy.write_row((ds.pk, r.doc_id, r.title, r.text))
                        n += 1
            else:
                rows = (
                    (ds.pk, r.doc_id, r.title, r.text)
                    for r in formats.iter_corpus(data / "corpus.jsonl")
                )
                cur.executemany(
                    f"INSERT INTO {table} (dataset_id, external_id, title, text) VALUES (%s, %s, %s, %s)",
                    list(rows),
                )
                n = cur.rowcount
        out.update(docs=n, docs_only_s=round(time.perf_counter() - t0, 3))
    out["peak_rss_mb"] = round(_rss_mb(), 1)
    return out


def fresh_database(db_url: str) -> None:
    """Each measurement starts from an empty database."""
    if db_url.startswith("sqlite:///"):
        Path(db_url.removeprefix("sqlite:///")).unlink(missing_ok=True)
        return
    import psycopg

    base, dbname = db_url.rsplit("/", 1)
    with psycopg.connect(
        f"{base}/postgres".replace("postgres://", "postgresql://"), autocommit=True
    ) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {dbname}")
        conn.execute(f"CREATE DATABASE {dbname}")


def run_child(mode: str, db_url: str, data: Path, n_naive: int) -> dict:
    fresh_database(db_url)
    env = dict(
        os.environ,
        DATABASE_URL=db_url,
        DEBUG="false",
        SECRET_KEY=secrets.token_urlsafe(50),
    )
    proc = subprocess.run(
        [
            sys.executable,
            __file__,
            "--child",
            mode,
            "--data",
            str(data),
            "--naive",
            str(n_naive),
        ],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise SystemExit(f"{mode} on {db_url} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def generate(out: Path, queries: int, per_query: int, pool: int, systems: int) -> None:
    from benchmarks.synthetic import SyntheticSpec, write_benchmark

    spec = SyntheticSpec(
        n_queries=queries,
        docs_per_query=per_query,
        pool_depth=pool,
        systems=tuple((f"system{i}", 2.0 / (i + 1)) for i in range(systems)),
        seed=11,
    )
    write_benchmark(out, spec)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--child")
    parser.add_argument("--data")
    parser.add_argument("--naive", type=int, default=5000)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--docs-per-query", type=int, default=100)
    parser.add_argument("--pool", type=int, default=150)
    parser.add_argument("--systems", type=int, default=5)
    parser.add_argument(
        "--postgres", default="postgres://postgres@127.0.0.1:5432/rcp_bench"
    )
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, Path(args.data), args.naive)))
        return

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        sizes = {"full": args.queries, "quarter": max(1, args.queries // 4)}
        for label, n_queries in sizes.items():
            t0 = time.perf_counter()
            generate(
                tmp / label, n_queries, args.docs_per_query, args.pool, args.systems
            )
            print(
                f"generated {label}: {n_queries * args.docs_per_query:,} docs, {n_queries:,} queries, "
                f"{args.pool}-doc pools, {args.systems} runs in {time.perf_counter() - t0:.1f}s"
            )
        backends = {"sqlite": lambda: f"sqlite:///{tmp}/bench.sqlite3"}
        try:
            fresh_database(args.postgres)
            backends["postgresql"] = lambda: args.postgres
        except Exception as exc:  # noqa: BLE001 - the benchmark still runs on SQLite
            print(f"PostgreSQL not available ({exc}); SQLite only")

        print()
        header = f"{'backend':<11}{'corpus':>9}{'docs/s':>10}{'rows/s (dataset)':>18}{'rows/s (runs)':>15}{'RSS after docs':>16}{'peak RSS':>10}"
        print(header)
        results = {}
        for backend, url in backends.items():
            for label in sizes:
                r = run_child("platform", url(), tmp / label, args.naive)
                results[(backend, label)] = r
                print(
                    f"{backend:<11}{r['docs']:>9,}{r['docs'] / r['docs_only_s']:>10,.0f}"
                    f"{r['dataset_rows'] / r['dataset_s']:>18,.0f}{r['run_rows'] / r['runs_s']:>15,.0f}"
                    f"{r['rss_after_documents_mb']:>13.0f} MB{r['peak_rss_mb']:>7.0f} MB"
                )
        print("\nPeers on the same corpus file (documents only):")
        for backend, url in backends.items():
            ours = results[(backend, "full")]
            ours_rate = ours["docs"] / ours["docs_only_s"]
            naive = run_child("naive", url(), tmp / "full", args.naive)
            raw = run_child("raw", url(), tmp / "full", args.naive)
            naive_rate = naive["docs"] / naive["docs_only_s"]
            raw_rate = raw["docs"] / raw["docs_only_s"]
            print(
                f"  {backend:<11} platform {ours_rate:>9,.0f} docs/s | naive ORM create() {naive_rate:>8,.0f} docs/s "
                f"(platform x{ours_rate / naive_rate:.1f}) | raw driver {raw_rate:>9,.0f} docs/s "
                f"(platform at {ours_rate / raw_rate:.0%} of it)"
            )
        print(
            "\nMemory: peak RSS full vs quarter corpus: "
            + ", ".join(
                f"{b} {results[(b, 'full')]['rss_after_documents_mb']:.0f} vs "
                f"{results[(b, 'quarter')]['rss_after_documents_mb']:.0f} MB after documents"
                for b in backends
            )
        )


if __name__ == "__main__":
    main()
