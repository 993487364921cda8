"""``study_status``: progress of a study (contests, annotators, expired leases)."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError, CommandParser

from annotation import selectors
from rcp_platform.exceptions import ApplicationError


class Command(BaseCommand):
    help = "Show a study's progress: contests complete / in progress / not started."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--study", required=True, help="study id or name")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: object, **opts: object) -> None:
        try:
            study = selectors.study_by_ref(ref=str(opts["study"]))
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc
        progress = selectors.study_progress(study=study)
        if opts["json"]:
            self.stdout.write(
                json.dumps(
                    {"study": study.pk, "name": study.name, "status": study.status}
                    | progress,
                    indent=2,
                )
            )
            return
        out = self.stdout.write
        out(f"Study {study.pk} {study.name!r}: {study.status}")
        out(
            f"  contests: {progress['contests']} (complete {progress['complete']}, "
            f"in progress {progress['in_progress']}, "
            f"not started {progress['not_started']})"
        )
        out(
            f"  gradings: {progress['gradings_submitted']} of "
            f"{progress['gradings_needed']}; expired leases: {progress['expired_leases']}"
        )
        for a in progress["annotators"]:
            median = a["median_seconds_per_document"]
            out(
                f"  {a['username']:<20} submitted {a['submitted']:>4}  "
                f"in progress {a['leased']:>2}  expired {a['expired']:>3}  "
                f"median s/doc {'-' if median is None else median}"
            )
