"""``import_run``: a TREC run as a system of a dataset, atomically."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

from benchmarks.models import Dataset
from benchmarks.services import run_import
from rcp_platform.exceptions import ApplicationError

from ._progress import Progress


class Command(BaseCommand):
    help = "Import a TREC run (qid Q0 docid rank score tag); ranks follow the scores."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--dataset", required=True)
        parser.add_argument("--system", required=True)
        parser.add_argument("--description", default="")
        parser.add_argument(
            "--replace", action="store_true", help="replace an existing system"
        )
        parser.add_argument("file", help="run file (.gz accepted)")

    def handle(self, *args: object, **opts: object) -> None:
        dataset = Dataset.objects.filter(name=opts["dataset"]).first()
        if dataset is None:
            raise CommandError(f"dataset {opts['dataset']!r} does not exist")
        progress = Progress(self.stderr._out)
        try:
            system = run_import(
                dataset=dataset,
                system_name=opts["system"],
                path=opts["file"],
                description=opts["description"],
                replace=opts["replace"],
                progress=progress,
            )
        except ApplicationError as exc:
            raise CommandError(f"{exc.message}\nNothing was imported.") from exc
        self.stdout.write(
            self.style.SUCCESS(
                f"Imported system {system.name!r} into {dataset.name!r}: {progress.summary()}"
            )
        )
