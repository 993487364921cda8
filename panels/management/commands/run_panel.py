"""``run_panel``: ask a panel a study's contests (blind), or estimate the cost first."""

from __future__ import annotations

import time

from django.core.management.base import BaseCommand, CommandError, CommandParser

from annotation.selectors import rubric_current, study_by_ref
from panels import selectors, services
from panels.models import PanelMode, PanelRun, RunStatus
from rcp_platform.exceptions import ApplicationError

FINISHED = (RunStatus.DONE, RunStatus.FAILED, RunStatus.PAUSED)


class Command(BaseCommand):
    help = (
        "Run an LLM panel on a study's contests: every judge sees each contest twice "
        "with the sides swapped. Resumes an earlier run of the same panel and mode, "
        "asking only what is missing."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--study", required=True, help="study id or name")
        parser.add_argument("--panel", required=True, help="panel name or id")
        parser.add_argument("--mode", choices=PanelMode.values, default=PanelMode.LISTS)
        parser.add_argument(
            "--estimate",
            action="store_true",
            help="print calls, tokens and time, and ask nothing",
        )
        how = parser.add_mutually_exclusive_group()
        how.add_argument(
            "--wait", action="store_true", help="queue, then follow progress to the end"
        )
        how.add_argument(
            "--inline", action="store_true", help="run in this process (no worker)"
        )

    def handle(self, *args: object, **opts: object) -> None:
        mode = str(opts["mode"])
        try:
            study = study_by_ref(ref=str(opts["study"]))
            panel = selectors.panel_get(ref=str(opts["panel"]))
            questions = (
                list(rubric_current(study=study).questions)
                if mode == PanelMode.RUBRIC
                else []
            )
            if opts["estimate"]:
                self._estimate(study, panel, mode, questions)
                return
            run = services.panel_run_create(
                study=study, panel=panel, mode=mode, queue=not opts["inline"]
            )
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write(
            f"Run {run.pk}: panel {panel.name!r} on study {study.pk}, {mode} mode, "
            f"{run.total} requests ({run.answered} answered already)."
        )
        if opts["inline"]:
            services.panel_run_execute(run_id=run.pk)
        elif opts["wait"]:
            self._follow(run)
        else:
            self.stdout.write("Queued; follow it with --wait or on the study page.")
            return
        run.refresh_from_db()
        self._summary(run)
        if run.status == RunStatus.FAILED:
            raise CommandError(f"run {run.pk} failed: {run.error}")

    def _estimate(self, study, panel, mode: str, questions: list) -> None:  # type: ignore[no-untyped-def]
        est = selectors.run_estimate(
            study=study, panel=panel, mode=mode, questions=questions
        )
        for name, row in est["judges"].items():
            self.stdout.write(
                f"  {name}: {row['calls']} calls, {row['input_tokens']} input + "
                f"{row['output_tokens']} output tokens, ~{row['seconds']:g} s"
            )
        self.stdout.write(
            f"total: {est['calls']} calls over {est['contests']} contests, "
            f"{est['input_tokens']} input + {est['output_tokens']} output tokens, "
            f"~{est['seconds']:g} s"
        )

    def _follow(self, run: PanelRun) -> None:
        last = None
        while True:
            run.refresh_from_db()
            line = f"  {run.status}: {run.answered}/{run.total} answered"
            if line != last:
                self.stdout.write(line)
                last = line
            if run.status in FINISHED:
                return
            time.sleep(1.0)

    def _summary(self, run: PanelRun) -> None:
        self.stdout.write(
            f"{run.status}: {run.answered}/{run.total} answered ({run.valid} valid, "
            f"{run.invalid} invalid), {run.calls} calls, "
            f"{run.input_tokens} input + {run.output_tokens} output tokens"
        )
