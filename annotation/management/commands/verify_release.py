"""``verify_release``: check a release folder's manifest hashes and schema."""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from annotation import release_format


class Command(BaseCommand):
    help = (
        "Check a release: SHA-256 of every file, schema of every line, references; "
        "with --digest, that the manifest is the one published at export."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("folder", help="release folder")
        parser.add_argument(
            "--digest",
            help="the manifest SHA-256 published at export: without it only the "
            "files' agreement with their (rewritable) manifest is checked",
        )

    def handle(self, *args: object, **opts: object) -> None:
        folder = Path(str(opts["folder"]))
        if not folder.is_dir():
            raise CommandError(f"{folder} is not a folder")
        digest = opts.get("digest")
        manifest, tables, errors = release_format.verify(
            folder, digest=str(digest) if digest else None
        )
        if errors:
            for error in errors[:50]:
                self.stderr.write(error)
            more = " (first 50 shown)" if len(errors) > 50 else ""
            raise CommandError(f"{len(errors)} problem(s) in {folder}{more}")
        rows = ", ".join(f"{len(rows)} {name}" for name, rows in tables.items())
        self.stdout.write(
            f"OK: study {manifest['study']} release {manifest['release']}: {rows}."
        )
        actual = release_format.sha256_file(folder / release_format.MANIFEST)
        if digest:
            self.stdout.write(f"Manifest SHA-256 {actual} is the published digest.")
        else:
            self.stdout.write(
                f"Manifest SHA-256 {actual}: compare it with the digest published at "
                "export (--digest checks it); files and manifest changed together "
                "are caught only that way."
            )
