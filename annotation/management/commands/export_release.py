"""``export_release``: write the next numbered, anonymised release of a study."""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from annotation import selectors, services
from rcp_platform.exceptions import ApplicationError


class Command(BaseCommand):
    help = (
        "Export release n+1 of a study (contests, documents, grades, reviews, "
        "verdicts as CSV and JSONL, datasheet, manifest) into --out. Needs "
        "RELEASE_HASH_KEY."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--study", required=True, help="study id or name")
        parser.add_argument(
            "--out", required=True, help="new or empty folder for the files"
        )
        parser.add_argument(
            "--include-text",
            action="store_true",
            help="include query and document texts",
        )

    def handle(self, *args: object, **opts: object) -> None:
        try:
            study = selectors.study_by_ref(ref=str(opts["study"]))
            release = services.release_export(
                study=study,
                out=Path(str(opts["out"])),
                include_text=bool(opts["include_text"]),
            )
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write(
            f"Release {release.number} of study {study.pk} written to {opts['out']} "
            f"(manifest SHA-256 {release.checksum})."
        )
