"""``import_dataset``: a benchmark from BEIR-style files, atomically."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

from benchmarks.models import Protocol
from benchmarks.services import dataset_import
from rcp_platform.exceptions import ApplicationError

from ._progress import Progress


class Command(BaseCommand):
    help = (
        "Import a dataset: BEIR corpus/queries JSONL, qrels (BEIR TSV or TREC), "
        "pools (qid<TAB>docid<TAB>rank) or a pool from a run. .gz accepted."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--name", required=True)
        parser.add_argument("--corpus", required=True, help="corpus.jsonl[.gz]")
        parser.add_argument("--queries", required=True, help="queries.jsonl[.gz]")
        parser.add_argument(
            "--qrels", help="qrels TSV (BEIR, with header) or TREC qrels"
        )
        parser.add_argument("--pools", help="pools TSV: qid<TAB>docid<TAB>rank")
        parser.add_argument(
            "--pool-from-run", help="TREC run whose top --depth is the pool"
        )
        parser.add_argument("--depth", type=int, help="pool depth with --pool-from-run")
        parser.add_argument(
            "--protocol", default=Protocol.PLAIN, choices=Protocol.values
        )
        parser.add_argument("--description", default="")
        parser.add_argument(
            "--replace", action="store_true", help="replace an existing dataset"
        )

    def handle(self, *args: object, **opts: object) -> None:
        progress = Progress(self.stderr._out)
        try:
            dataset = dataset_import(
                name=opts["name"],
                corpus=opts["corpus"],
                queries=opts["queries"],
                qrels=opts["qrels"],
                pools=opts["pools"],
                pool_from_run=opts["pool_from_run"],
                depth=opts["depth"],
                protocol=opts["protocol"],
                description=opts["description"],
                replace=opts["replace"],
                progress=progress,
            )
        except ApplicationError as exc:
            raise CommandError(f"{exc.message}\nNothing was imported.") from exc
        self.stdout.write(
            self.style.SUCCESS(
                f"Imported dataset {dataset.name!r}: {progress.summary()}"
            )
        )
