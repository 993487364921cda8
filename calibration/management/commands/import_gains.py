"""``import_gains``: published calibrated labels as a fit (no judge needed)."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

from calibration.services import gains_import
from rcp_platform.exceptions import ApplicationError

from ._common import datasets_named


class Command(BaseCommand):
    help = "Import gains TSV (header: query_id doc_id gain [theta]) as a new fit."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--dataset", required=True)
        parser.add_argument("file")

    def handle(self, *args: object, **opts: object) -> None:
        (dataset,) = datasets_named([opts["dataset"]])
        try:
            fit = gains_import(dataset=dataset, path=opts["file"])
        except FileNotFoundError as exc:
            raise CommandError(f"{opts['file']}: file not found") from exc
        except ApplicationError as exc:
            raise CommandError(f"{exc.message}\nNothing was imported.") from exc
        info = fit.diagnostics["imported"]
        self.stdout.write(
            self.style.SUCCESS(
                f"Fit {fit.pk}: imported {info['rows']} gains over {info['queries']} "
                f"queries of {dataset.name!r}"
            )
        )
