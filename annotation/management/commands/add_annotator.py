"""``add_annotator``: create an annotator account (or change its password)."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

from annotation import selectors, services
from rcp_platform.exceptions import ApplicationError


class Command(BaseCommand):
    help = (
        "Create an annotator (group 'annotators', only the annotate permission), "
        "optionally inviting it to a study. An existing annotator gets the new "
        "password. Without --password one is generated and printed once."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", required=True)
        parser.add_argument("--password")
        parser.add_argument("--email", default="")
        parser.add_argument("--study", help="study id or name to invite the user to")

    def handle(self, *args: object, **opts: object) -> None:
        try:
            study = (
                selectors.study_by_ref(ref=str(opts["study"]))
                if opts["study"]
                else None
            )
            user, generated = services.annotator_create(
                username=opts["username"],
                password=opts["password"],
                email=opts["email"],
                study=study,
                update=True,
            )
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc
        where = f" and invited to study {study.pk} {study.name!r}" if study else ""
        self.stdout.write(
            self.style.SUCCESS(f"Annotator {user.username!r} ready{where}.")
        )
        if generated:
            self.stdout.write(f"Generated password (shown once): {generated}")
