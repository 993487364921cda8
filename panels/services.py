"""Writes of the panels app: panels, runs, asking judges, and the report section.

A run's requests are planned when it is created (one row per judge, contest and
rep, unique), so ``panel_run_execute`` - the Celery task's one service - only ever
asks rows that are not done: a task run twice, a resume after a kill or after a
pause asks nothing already answered. The run itself is claimed with
compare-and-set (a second copy exits at once unless the first one's heartbeat is
stale), and every call holds a slot of the judge's global in-flight limiter.
"""

from __future__ import annotations

import logging
import secrets
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from itertools import zip_longest
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connection, transaction
from django.db.models import F, Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from annotation.analysis.picks import annotator_pick
from annotation.models import Study
from annotation.selectors import rubric_current
from annotation.services.assignment import grade_of
from judging.clients import (
    FatalJudgeError,
    JudgeClient,
    JudgeEndpoint,
    TransientJudgeError,
)
from judging.limits import limiter_for_settings
from judging.models import Decoding, Judge
from judging.parsing import AnswerError
from rcp_platform.exceptions import ApplicationError, ConflictError

from . import analysis, prompts, selectors
from .models import (
    Panel,
    PanelMode,
    PanelRequest,
    PanelRun,
    RequestStatus,
    RunStatus,
)

log = logging.getLogger(__name__)
MAX_ATTEMPTS = 3
HEARTBEAT_S = 2.0
MAX_THREADS = 32


def _stale_after() -> timedelta:
    return timedelta(seconds=getattr(settings, "PANELS_HEARTBEAT_STALE_S", 60))


# ---------------------------------------------------------------------------- panels


@transaction.atomic
def panel_create(*, name: str, judges: Sequence[Judge]) -> Panel:
    """A new panel of ``judges`` (at least one; three for the 2-of-3 rule)."""
    if not judges:
        raise ApplicationError("a panel needs at least one judge")
    if Panel.objects.filter(name=name).exists():
        raise ConflictError(f"panel {name!r} already exists")
    offline = [j.name for j in judges if j.offline]
    if offline:
        raise ApplicationError(f"offline judges cannot be asked: {offline}")
    panel = Panel(name=name)
    panel.full_clean()
    panel.save()
    panel.judges.set(judges)
    return panel


# ---------------------------------------------------------------------------- runs


def _plan_rows(
    run: PanelRun, study: Study, judges: Sequence[Judge]
) -> list[PanelRequest]:
    rows = []
    for view in selectors.contest_views(study=study):
        for judge in judges:
            for rep in (1, 2):
                if run.mode == PanelMode.LISTS:
                    first, second = (
                        (view.list_a, view.list_b)
                        if rep == 1
                        else (view.list_b, view.list_a)
                    )
                    documents: Any = {"list_1": list(first), "list_2": list(second)}
                else:
                    documents = selectors.rubric_order(
                        study=study, view=view, judge_id=judge.pk, rep=rep
                    )
                rows.append(
                    PanelRequest(
                        run=run,
                        judge=judge,
                        contest_id=view.contest_id,
                        rep=rep,
                        first_side="A" if rep == 1 else "B",
                        documents=documents,
                    )
                )
    return rows


@transaction.atomic
def panel_run_create(
    *,
    study: Study,
    panel: Panel,
    mode: str,
    created_by: Any = None,
    queue: bool = True,
) -> PanelRun:
    """The run of (study, panel, mode), created or resumed, with every missing
    request planned. Queues ``panel_run_task`` on commit unless ``queue`` is False
    or the run is done; a failed or paused run becomes pending again."""
    if mode not in PanelMode.values:
        raise ApplicationError(f"mode must be one of {PanelMode.values}")
    if mode == PanelMode.RUBRIC:
        rubric_current(study=study)  # NotFoundError without a rubric
    run, _created = PanelRun.objects.select_for_update().get_or_create(
        study=study, panel=panel, mode=mode, defaults={"created_by": created_by}
    )
    judges = list(panel.judges.order_by("name"))
    PanelRequest.objects.bulk_create(
        _plan_rows(run, study, judges), ignore_conflicts=True
    )
    run.total = PanelRequest.objects.filter(run=run).count()
    fields = ["total"]
    if run.status in (RunStatus.FAILED, RunStatus.PAUSED) or (
        run.status == RunStatus.DONE and run.answered < run.total
    ):
        run.status, run.error = RunStatus.PENDING, ""
        fields += ["status", "error"]
    run.full_clean(validate_unique=False, validate_constraints=False)
    run.save(update_fields=fields)
    if queue and run.status == RunStatus.PENDING:
        from .tasks import panel_run_task

        transaction.on_commit(lambda: panel_run_task.delay(run.pk))
    return run


def panel_run_pause(*, run: PanelRun) -> PanelRun:
    """Stop a pending or running run: its runner stops claiming requests (those in
    flight are still stored). ConflictError for a finished run."""
    changed = PanelRun.objects.filter(
        pk=run.pk, status__in=[RunStatus.PENDING, RunStatus.RUNNING]
    ).update(status=RunStatus.PAUSED)
    run.refresh_from_db()
    if not changed:
        raise ConflictError(f"run is {run.status}", extra={"status": run.status})
    return run


# ---------------------------------------------------------------------------- execution


class _Runner:
    """One claimed execution of a run: threads ask rows, a heartbeat watches."""

    def __init__(self, run: PanelRun, token: str) -> None:
        self.run = run
        self.token = token
        self.study = run.study
        self.stop = threading.Event()
        self.fatal: str = ""
        limiter = limiter_for_settings()
        self.judges = {j.pk: j for j in run.panel.judges.all()}
        self.clients = {
            pk: JudgeClient(JudgeEndpoint.from_judge(j), limiter)
            for pk, j in self.judges.items()
        }
        self.views = {v.contest_id: v for v in selectors.contest_views(study=run.study)}
        self.questions: list[dict[str, str]] = []
        if run.mode == PanelMode.RUBRIC:
            rubric = rubric_current(study=run.study)
            self.questions = [
                {"key": q["key"], "text": q["text"]} for q in rubric.questions
            ]

    # -- heartbeat ---------------------------------------------------------------
    def beat(self) -> None:
        try:
            while not self.stop.wait(HEARTBEAT_S):
                alive = PanelRun.objects.filter(
                    pk=self.run.pk, status=RunStatus.RUNNING, claim=self.token
                ).update(heartbeat_at=timezone.now())
                if not alive:  # paused, or taken over by another runner
                    self.stop.set()
        finally:
            connection.close()

    # -- one request -------------------------------------------------------------
    def ask(self, row_id: int) -> None:
        try:
            if not self.stop.is_set():
                self._ask(row_id)
        except FatalJudgeError as exc:
            self.fatal = str(exc)
            self.stop.set()
            # Nothing was answered: the row waits for the resume, unclaimed.
            PanelRequest.objects.filter(
                pk=row_id, claim=self.token, status=RequestStatus.IN_FLIGHT
            ).update(status=RequestStatus.PLANNED, claim="")
        finally:
            close_old_connections()
            connection.close()

    def _ask(self, row_id: int) -> None:
        claimed = PanelRequest.objects.filter(
            pk=row_id, status=RequestStatus.PLANNED
        ).update(status=RequestStatus.IN_FLIGHT, claim=self.token)
        if not claimed:
            return
        row = PanelRequest.objects.get(pk=row_id)
        view = self.views[row.contest_id]
        judge = self.judges[row.judge_id]
        messages, sha = selectors.request_prompt(
            study=self.study,
            view=view,
            mode=self.run.mode,
            judge_id=row.judge_id,
            rep=row.rep,
            questions=self.questions,
        )
        fmt = (
            prompts.lists_response_format()
            if self.run.mode == PanelMode.LISTS
            else prompts.rubric_response_format(
                [q["key"] for q in self.questions], len(row.documents)
            )
        )
        if judge.decoding != Decoding.JSON_SCHEMA:
            fmt = None
        attempts, calls, tokens_in, tokens_out = row.attempts, 0, 0, 0
        outcome: dict[str, Any] = {}
        while attempts < MAX_ATTEMPTS:
            attempts += 1
            try:
                result = self.clients[row.judge_id].complete(
                    messages, response_format=fmt
                )
            except TransientJudgeError as exc:  # includes refused requests
                calls += 1 + exc.retries
                outcome = {"valid": False, "error": str(exc)[:2000], "raw_response": ""}
                continue
            calls += 1 + result.retries
            tokens_in += result.input_tokens
            tokens_out += result.output_tokens
            # The raw answer is stored before it is parsed.
            PanelRequest.objects.filter(pk=row_id, claim=self.token).update(
                raw_response=result.text,
                prompt_sha256=sha,
                attempts=attempts,
                latency_ms=round(result.latency_ms),
            )
            outcome = self._parse(row, result.text, result.finish_reason)
            if outcome["valid"]:
                break
        self._store(row_id, sha, attempts, calls, tokens_in, tokens_out, outcome)

    def _parse(
        self, row: PanelRequest, text: str, finish: str | None
    ) -> dict[str, Any]:
        base = {"raw_response": text, "error": ""}
        try:
            if finish == "length":
                raise AnswerError("truncated", "the answer was cut at the output limit")
            if self.run.mode == PanelMode.LISTS:
                position = prompts.parse_lists(text).position
                first = row.first_side
                other = "B" if first == "A" else "A"
                return {
                    **base,
                    "valid": True,
                    "choice": str(position),
                    "side": first if position == 1 else other,
                }
            keys = [q["key"] for q in self.questions]
            parsed = prompts.parse_rubric(text, keys, len(row.documents))
            answers = {
                str(doc): ans
                for doc, ans in zip(row.documents, parsed.answers, strict=True)
            }
            view = self.views[row.contest_id]
            grades = {int(d): grade_of(a, keys) for d, a in answers.items()}
            pick = annotator_pick(
                view.list_a,  # type: ignore[arg-type]
                view.list_b,  # type: ignore[arg-type]
                grades,  # type: ignore[arg-type]
                k=self.study.depth,
                displayed=view.displayed,  # type: ignore[arg-type]
            )
            return {**base, "valid": True, "answers": answers, "side": pick.choice}
        except AnswerError as exc:
            return {
                **base,
                "valid": False,
                "error": f"{exc.category}: {exc.reason}"[:2000],
            }

    @transaction.atomic
    def _store(
        self,
        row_id: int,
        sha: str,
        attempts: int,
        calls: int,
        tokens_in: int,
        tokens_out: int,
        outcome: dict[str, Any],
    ) -> None:
        stored = PanelRequest.objects.filter(
            pk=row_id, claim=self.token, status=RequestStatus.IN_FLIGHT
        ).update(
            status=RequestStatus.DONE,
            prompt_sha256=sha,
            attempts=attempts,
            valid=outcome["valid"],
            raw_response=outcome.get("raw_response", ""),
            choice=outcome.get("choice", ""),
            side=outcome.get("side", ""),
            answers=outcome.get("answers"),
            error=outcome.get("error", ""),
            input_tokens=tokens_in,
            output_tokens=tokens_out,
            completed_at=timezone.now(),
        )
        PanelRun.objects.filter(pk=self.run.pk).update(
            answered=F("answered") + stored,
            valid=F("valid") + (stored if outcome["valid"] else 0),
            invalid=F("invalid") + (0 if outcome["valid"] else stored),
            calls=F("calls") + calls,
            input_tokens=F("input_tokens") + tokens_in,
            output_tokens=F("output_tokens") + tokens_out,
        )


def _claim_run(run_id: int, token: str) -> bool:
    now = timezone.now()
    stale = Q(status=RunStatus.RUNNING) & (
        Q(heartbeat_at__isnull=True) | Q(heartbeat_at__lt=now - _stale_after())
    )
    return bool(
        PanelRun.objects.filter(pk=run_id)
        .filter(Q(status=RunStatus.PENDING) | stale)
        .update(
            status=RunStatus.RUNNING,
            claim=token,
            heartbeat_at=now,
            started_at=Coalesce(F("started_at"), now),
            error="",
        )
    )


def _interleaved(rows: Sequence[tuple[int, int]]) -> list[int]:
    """Row ids alternating between judges, so every judge progresses at once."""
    by_judge: dict[int, list[int]] = {}
    for pk, judge_id in rows:
        by_judge.setdefault(judge_id, []).append(pk)
    return [pk for group in zip_longest(*by_judge.values()) for pk in group if pk]


def panel_run_execute(*, run_id: int) -> str:
    """Ask every request of the run that is not done; return the final status.

    Exits at once (returning the status) unless it claims the run: pending, or
    running with a stale heartbeat (its runner died). In-flight rows of a claimed
    run belong to a dead runner and are asked again; done rows never are.
    A fatal judge error (401/403/404) fails the run with its message.
    """
    token = secrets.token_hex(8)
    if not _claim_run(run_id, token):
        return PanelRun.objects.get(pk=run_id).status
    run = PanelRun.objects.select_related("study", "panel").get(pk=run_id)
    PanelRequest.objects.filter(run=run, status=RequestStatus.IN_FLIGHT).update(
        status=RequestStatus.PLANNED, claim=""
    )
    try:
        runner = _Runner(run, token)
    except ApplicationError as exc:
        PanelRun.objects.filter(pk=run.pk, claim=token).update(
            status=RunStatus.FAILED, error=exc.message, finished_at=timezone.now()
        )
        return RunStatus.FAILED
    todo = _interleaved(
        list(
            PanelRequest.objects.filter(run=run, status=RequestStatus.PLANNED)
            .order_by("contest_id", "rep", "judge_id")
            .values_list("pk", "judge_id")
        )
    )
    heart = threading.Thread(
        target=runner.beat, name=f"panel-run-{run.pk}", daemon=True
    )
    heart.start()
    threads = min(
        MAX_THREADS, max(1, sum(j.concurrency for j in runner.judges.values()))
    )
    try:
        with ThreadPoolExecutor(max_workers=threads) as pool:
            list(pool.map(runner.ask, todo))
    finally:
        runner.stop.set()
        heart.join()
    left = PanelRequest.objects.filter(run=run).exclude(status=RequestStatus.DONE)
    ours = PanelRun.objects.filter(pk=run.pk, status=RunStatus.RUNNING, claim=token)
    if runner.fatal:
        ours.update(status=RunStatus.FAILED, error=runner.fatal[:2000])
    elif not left.exists():
        ours.update(status=RunStatus.DONE, finished_at=timezone.now())
    else:  # stopped by a pause: the rest waits for a resume
        ours.update(status=RunStatus.PAUSED)
    return PanelRun.objects.get(pk=run.pk).status


# ---------------------------------------------------------------------------- report


def _refs(report: dict[str, Any]) -> list[analysis.ContestRef]:
    return [
        analysis.ContestRef(
            contest_id=str(r["contest_id"]),
            query_id=r["query_id"],
            human_verdict=r["verdict"],
            human_picks=sum(r["picks"].values()),
            rcp_winner=r["rcp_winner"],
            qrel_winner=r["qrel_winner"],
            rcp_margin=r["rcp_margin"],
            qrel_margin=r["qrel_margin"],
        )
        for r in report.get("per_contest", [])
    ]


def panel_report_section(*, study: Study, report: dict[str, Any]) -> dict[str, Any]:
    """The panel section of a study report ({} when the study has no run): one
    entry per run of the study, over
    the contests of ``report`` (so a subset report gets a subset panel section),
    from valid stored answers only; the numbers come from ``panels.analysis``."""
    refs = _refs(report)
    out = []
    for run in selectors.run_list(study=study).order_by("panel__name", "mode"):
        judges = list(run.panel.judges.order_by("name").values_list("name", flat=True))
        answers = [
            analysis.Answer(
                contest_id=str(position),
                judge=judge,
                rep=rep,
                side=side,
                first_side=first,
            )
            for position, judge, rep, side, first in PanelRequest.objects.filter(
                run=run, status=RequestStatus.DONE, valid=True
            ).values_list(
                "contest__position", "judge__name", "rep", "side", "first_side"
            )
        ]
        section = analysis.panel_section(refs, answers, judges, mode=run.mode)
        out.append(
            {
                "run": run.pk,
                "panel": run.panel.name,
                "status": run.status,
                "answered": run.answered,
                "total": run.total,
                **section,
            }
        )
    return {"runs": out} if out else {}
