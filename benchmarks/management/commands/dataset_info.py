"""``dataset_info NAME``: row counts of a dataset."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError, CommandParser

from benchmarks.models import Dataset
from benchmarks.selectors import dataset_counts


class Command(BaseCommand):
    help = "Print the counts of a dataset (queries, documents, pool, qrels, systems, rankings)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: object, **opts: object) -> None:
        dataset = Dataset.objects.filter(name=opts["name"]).first()
        if dataset is None:
            known = (
                ", ".join(Dataset.objects.values_list("name", flat=True)[:20]) or "none"
            )
            raise CommandError(
                f"dataset {opts['name']!r} does not exist (known: {known})"
            )
        counts = dataset_counts(dataset=dataset)
        systems = list(dataset.systems.values_list("name", flat=True))
        if opts["json"]:
            payload = {
                "name": dataset.name,
                "protocol": dataset.protocol,
                **counts,
                "system_names": systems,
            }
            self.stdout.write(json.dumps(payload, indent=2))
            return
        self.stdout.write(f"{dataset.name} (protocol {dataset.protocol})")
        for key, value in counts.items():
            self.stdout.write(f"  {key:<16} {value:>10,}")
        if systems:
            self.stdout.write(f"  system names     {', '.join(systems)}")
