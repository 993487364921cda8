"""``export_judgments``: completed judgment windows as JSONL."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

from benchmarks.models import Dataset
from judging.selectors import family_windows
from judging.services import judgments_export_lines


class Command(BaseCommand):
    help = "Export a dataset's completed judgment windows (JSONL, DESIGN.md format)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--dataset", required=True)
        parser.add_argument("--judge", help="only this judge family")
        parser.add_argument("--out", required=True)

    def handle(self, *args: object, **opts: object) -> None:
        dataset = Dataset.objects.filter(name=opts["dataset"]).first()
        if dataset is None:
            raise CommandError(f"dataset {opts['dataset']!r} does not exist")
        n = 0
        with open(opts["out"], "w", encoding="utf-8") as out:
            for line in judgments_export_lines(
                family_windows(dataset_id=dataset.pk, family=opts["judge"]).iterator(
                    chunk_size=2000
                )
            ):
                out.write(line)
                n += 1
        self.stdout.write(self.style.SUCCESS(f"Wrote {n:,} windows to {opts['out']}."))
