"""``import_judgments``: judgment windows from JSONL (atomic)."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

from benchmarks.models import Dataset
from judging.services import judgments_import
from rcp_platform.exceptions import ApplicationError


class Command(BaseCommand):
    help = "Import judgment windows (JSONL, one window per line) under a judge name."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--dataset", required=True)
        parser.add_argument(
            "--judge",
            required=True,
            help="judge name (an offline label is created if new)",
        )
        parser.add_argument("file")

    def handle(self, *args: object, **opts: object) -> None:
        dataset = Dataset.objects.filter(name=opts["dataset"]).first()
        if dataset is None:
            raise CommandError(f"dataset {opts['dataset']!r} does not exist")
        try:
            n = judgments_import(
                dataset=dataset, judge_name=opts["judge"], path=opts["file"]
            )
        except ApplicationError as exc:
            raise CommandError(f"{exc.message}\nNothing was imported.") from exc
        self.stdout.write(
            self.style.SUCCESS(
                f"Imported {n:,} windows for judge {opts['judge']!r} into {dataset.name!r}."
            )
        )
