"""``add_panel``: a named panel of existing judges (see ``add_judge``)."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

from panels import selectors, services
from rcp_platform.exceptions import ApplicationError


class Command(BaseCommand):
    help = "Create an LLM panel from judges (three for the 2-of-3 rule)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--name", required=True)
        parser.add_argument(
            "--judge", action="append", required=True, help="judge name; repeat"
        )

    def handle(self, *args: object, **opts: object) -> None:
        try:
            judges = selectors.judges_by_names(names=list(opts["judge"]))  # type: ignore[call-overload]
            panel = services.panel_create(name=str(opts["name"]), judges=judges)
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc
        names = ", ".join(j.name for j in judges)
        self.stdout.write(f"Panel {panel.name!r} ({panel.pk}): {names}")
