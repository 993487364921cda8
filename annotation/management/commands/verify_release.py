"""``verify_release``: check a release folder's manifest hashes and schema."""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from annotation import release_format


class Command(BaseCommand):
    help = "Check a release: SHA-256 of every file, schema of every line, references."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("folder", help="release folder")

    def handle(self, *args: object, **opts: object) -> None:
        folder = Path(str(opts["folder"]))
        if not folder.is_dir():
            raise CommandError(f"{folder} is not a folder")
        manifest, tables, errors = release_format.verify(folder)
        if errors:
            for error in errors[:50]:
                self.stderr.write(error)
            more = " (first 50 shown)" if len(errors) > 50 else ""
            raise CommandError(f"{len(errors)} problem(s) in {folder}{more}")
        rows = ", ".join(f"{len(rows)} {name}" for name, rows in tables.items())
        self.stdout.write(
            f"OK: study {manifest['study']} release {manifest['release']}: {rows}."
        )
