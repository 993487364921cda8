"""``judge_shard JOB INDEX TOTAL``: a helper process of a running judging job
(started by the job's runner; not meant to be run by hand)."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandParser

from judging.models import JudgingJob
from judging.runner import JobRunner


class Command(BaseCommand):
    help = (
        "Work on one shard of a running judging job's queries (started by the runner)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("job", type=int)
        parser.add_argument("index", type=int)
        parser.add_argument("total", type=int)

    def handle(self, *args: object, **opts: object) -> None:
        job = JudgingJob.objects.select_related("judge", "dataset").get(pk=opts["job"])
        JobRunner(job, shard=(opts["index"], opts["total"])).run()
