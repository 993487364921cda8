"""``add_annotator``: create an annotator account, invite it to a study, or (only
when asked explicitly) reset its password."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from annotation import selectors, services
from rcp_platform.exceptions import ApplicationError


class Command(BaseCommand):
    help = (
        "Create an annotator (group 'annotators', only the annotate permission), "
        "optionally inviting it to a study. An existing annotator is only invited: "
        "its password never changes unless --reset-password is given. Without "
        "--password a new one is generated and printed once; --link prints a "
        "one-time set-password link instead."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", required=True)
        parser.add_argument("--password")
        parser.add_argument("--email", default="")
        parser.add_argument("--study", help="study id or name to invite the user to")
        parser.add_argument(
            "--reset-password",
            action="store_true",
            help="replace the password of an existing annotator (given or generated)",
        )
        parser.add_argument(
            "--link",
            action="store_true",
            help="print a one-time set-password link (path) instead of a password",
        )

    def handle(self, *args: object, **opts: object) -> None:
        username = str(opts["username"]).strip()
        existed = get_user_model().objects.filter(username=username).exists()
        try:
            study = (
                selectors.study_by_ref(ref=str(opts["study"]))
                if opts["study"]
                else None
            )
            user, generated = services.annotator_create(
                username=username,
                password=opts["password"],
                email=opts["email"],
                study=study,
                update=True,
                reset_password=bool(opts["reset_password"]),
                unusable_password=bool(opts["link"]) and not existed,
            )
            link = services.annotator_password_link(user=user) if opts["link"] else ""
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc
        where = f" and invited to study {study.pk} {study.name!r}" if study else ""
        self.stdout.write(
            self.style.SUCCESS(f"Annotator {user.username!r} ready{where}.")
        )
        if existed and not opts["reset_password"]:
            self.stdout.write("Existing account: password unchanged.")
        if generated:
            self.stdout.write(f"Generated password (shown once): {generated}")
        if link:
            self.stdout.write(f"One-time set-password link (path): {link}")
