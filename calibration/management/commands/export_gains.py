"""``export_gains``: the latest fit's gains of a dataset as TSV."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

from calibration.services import gains_export
from rcp_platform.exceptions import ApplicationError

from ._common import datasets_named


class Command(BaseCommand):
    help = "Write query_id doc_id theta gain count_gain qrel (TSV) for the latest fit."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--dataset", required=True)
        parser.add_argument("--out", required=True, help="output file ('-' = stdout)")

    def handle(self, *args: object, **opts: object) -> None:
        (dataset,) = datasets_named([opts["dataset"]])
        try:
            if opts["out"] == "-":
                n = gains_export(dataset=dataset, out=self.stdout._out)
            else:
                with open(opts["out"], "w", encoding="utf-8", newline="\n") as out:
                    n = gains_export(dataset=dataset, out=out)
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc
        except OSError as exc:
            raise CommandError(f"{opts['out']}: {exc.strerror}") from exc
        if opts["out"] != "-":
            self.stdout.write(self.style.SUCCESS(f"Wrote {n} rows to {opts['out']}"))
