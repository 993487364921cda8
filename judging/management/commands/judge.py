"""``judge``: estimate or run a judging job (inline, or on a Celery worker with --wait)."""

from __future__ import annotations

import sys
import time

from django.core.management.base import BaseCommand, CommandError, CommandParser

from benchmarks.models import Dataset
from judging import selectors, services
from judging.models import JobStages, JobStatus, Judge, JudgingJob
from rcp_platform.exceptions import ApplicationError


def _bar(progress: dict) -> str:
    width = 30
    filled = int(width * progress["percent"] / 100)
    eta = f" ETA {progress['eta_s']:.0f}s" if progress.get("eta_s") else ""
    return (
        f"\r[{'#' * filled}{'.' * (width - filled)}] {progress['percent']:5.1f}% "
        f"{progress['windows']['done']}/{progress['windows']['planned']} windows, "
        f"{progress['requests']} requests, {progress['retries']} retries{eta}   "
    )


class Command(BaseCommand):
    help = "Judge a dataset's pools: --estimate (no calls), --inline (this process) or --wait (Celery)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--dataset")
        parser.add_argument("--judge")
        parser.add_argument(
            "--resume",
            type=int,
            metavar="JOB_ID",
            help="resume a paused, failed or dead job",
        )
        parser.add_argument("--stage", choices=JobStages.values, default=JobStages.BOTH)
        parser.add_argument(
            "--queries", nargs="+", help="external query ids (default: all)"
        )
        parser.add_argument(
            "--family", help="window family (default: the judge's name)"
        )
        parser.add_argument("--seed", type=int, help="schedule seed (default 42)")
        mode = parser.add_mutually_exclusive_group()
        mode.add_argument(
            "--estimate",
            action="store_true",
            help="print calls, tokens and time; call nothing",
        )
        mode.add_argument(
            "--inline", action="store_true", help="run the whole job in this process"
        )
        mode.add_argument(
            "--wait",
            action="store_true",
            help="queue on Celery and show progress until done",
        )

    def handle(self, *args: object, **opts: object) -> None:
        if opts["resume"] is not None:
            return self._resume(opts)
        if not opts["dataset"] or not opts["judge"]:
            raise CommandError(
                "--dataset and --judge are required (or --resume JOB_ID)"
            )
        dataset = Dataset.objects.filter(name=opts["dataset"]).first()
        if dataset is None:
            raise CommandError(f"dataset {opts['dataset']!r} does not exist")
        judge = Judge.objects.filter(name=opts["judge"]).first()
        if judge is None:
            raise CommandError(
                f"judge {opts['judge']!r} does not exist; add it with add_judge"
            )
        params = {}
        if opts["seed"] is not None:
            params = {
                "tournament": {"seed": opts["seed"]},
                "rubric": {"seed": opts["seed"]},
            }
        try:
            if opts["estimate"]:
                est = services.job_estimate(
                    dataset=dataset,
                    judge=judge,
                    stages=opts["stage"],
                    query_ids=opts["queries"],
                    params=params,
                )
                self._print_estimate(est, judge)
                return
            job = services.job_create(
                dataset=dataset,
                judge=judge,
                stages=opts["stage"],
                query_ids=opts["queries"],
                params=params,
                family=opts["family"],
                queue=not opts["inline"],
            )
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write(
            f"Created judging job {job.pk} ({job.stages}) for {dataset.name!r} with {judge.name!r}."
        )
        self._follow(job, opts)

    def _resume(self, opts: dict) -> None:
        job = JudgingJob.objects.filter(pk=opts["resume"]).first()
        if job is None:
            raise CommandError(f"judging job {opts['resume']} does not exist")
        try:
            job = services.job_resume(job=job, queue=not opts["inline"])
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc
        self.stdout.write(
            f"Resumed judging job {job.pk}: only missing windows will be asked."
        )
        self._follow(job, opts)

    def _follow(self, job: JudgingJob, opts: dict) -> None:
        if opts["inline"]:
            from judging.runner import job_run

            status = job_run(job_id=job.pk, progress=lambda j: self._show(j))
            self._finish(job.pk, status)
        elif opts["wait"]:
            while True:
                job.refresh_from_db()
                self._show(job)
                if job.status in (
                    JobStatus.DONE,
                    JobStatus.FAILED,
                    JobStatus.CANCELLED,
                    JobStatus.PAUSED,
                ):
                    break
                time.sleep(1.0)
            self._finish(job.pk, job.status)
        else:
            self.stdout.write("Queued; follow it on the jobs page or with --wait.")

    def _show(self, job: JudgingJob) -> None:
        job = JudgingJob.objects.get(pk=job.pk)
        sys.stderr.write(_bar(selectors.job_progress(job=job)))
        sys.stderr.flush()

    def _finish(self, job_id: int, status: str) -> None:
        job = JudgingJob.objects.get(pk=job_id)
        progress = selectors.job_progress(job=job)
        sys.stderr.write(_bar(progress) + "\n")
        invalid = selectors.invalid_windows(job=job)
        summary = (
            f"Job {job.pk} {status}: {progress['windows']['done']} windows, {job.requests} requests, "
            f"{job.retries} retries, {job.input_tokens:,} input / {job.output_tokens:,} output tokens"
        )
        if invalid:
            summary += "; invalid: " + ", ".join(f"{k} {v}" for k, v in invalid.items())
        if status == JobStatus.FAILED:
            raise CommandError(f"{summary}\n{job.error}")
        self.stdout.write(
            self.style.SUCCESS(summary) if status == JobStatus.DONE else summary
        )

    def _print_estimate(self, est: services.Estimate, judge: Judge) -> None:
        self.stdout.write(
            f"Estimate for {est.queries} queries with judge {judge.name!r} (no calls made):"
        )
        for stage, calls in est.calls_by_stage.items():
            self.stdout.write(f"  {stage:<11} {calls:>10,} calls")
        self.stdout.write(
            f"  {'total':<11} {est.calls:>10,} calls (upper bound; adaptive batches may stop early)"
        )
        self.stdout.write(f"  input tokens  {est.input_tokens:>12,}")
        self.stdout.write(f"  output tokens {est.output_tokens:>12,}")
        basis = "measured median" if est.latency_measured else "assumed"
        self.stdout.write(
            f"  wall time     {est.wall_s:>12,.0f} s at concurrency {judge.concurrency} "
            f"({basis} latency {est.latency_s:.2f} s/call)"
        )
