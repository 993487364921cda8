"""Runs a judging job: queries in parallel, the windows of one phase concurrently.

The runner is stateless between runs: each query's phases are replayed from the
stored windows (``judging.schedules`` planners), so a resumed or duplicated run asks
only what is missing. Window rows are claimed with compare-and-set and completed
once; a global limiter caps requests in flight per judge across all workers.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass

from django.db import close_old_connections, connection

from benchmarks.models import Query

from . import parsing, prompts, services
from .models import (
    InvalidCategory,
    JobStatus,
    JudgingJob,
    JudgmentWindow,
    Stage,
    WindowStatus,
)
from .schedules import (
    RubricAnswer,
    TournamentAnswer,
    bt_abilities,
    next_rubric_windows,
    next_tournament_windows,
    rasch_scores,
)

log = logging.getLogger(__name__)
MAX_ATTEMPTS = 3
HEARTBEAT_S = 2.0


class StopRun(Exception):
    """The job was paused or cancelled: stop claiming new windows."""


@dataclass
class _Query:
    pk: int
    external_id: str
    text: str
    doc_ids: list[str]
    texts: dict[str, str]


def _answers(
    query: Query, family: str, stage: str, held: set[int]
) -> dict[int, object]:
    """Judged windows of one query and stage as planner answers (seq -> answer).

    Refused windows (no answer) count as unjudged unless this run already asked
    them (``held``), so a resume re-asks them exactly once.
    """
    rows = JudgmentWindow.objects.filter(
        family=family, query_id=query.pk, stage=stage, status=WindowStatus.DONE
    ).values_list(
        "pk", "seq", "doc_ids", "valid", "scores", "answers", "invalid_category"
    )
    out: dict[int, object] = {}
    for pk, seq, doc_ids, valid, scores, answers, category in rows:
        if category == InvalidCategory.REFUSED and pk not in held:
            continue
        if stage == Stage.TOURNAMENT:
            out[seq] = TournamentAnswer(
                tuple(doc_ids), tuple(scores) if valid else None
            )
        else:
            out[seq] = RubricAnswer(
                tuple(doc_ids), tuple(tuple(a) for a in answers) if valid else None
            )
    return out


class JobRunner:
    """Runs one job to completion, pause, cancellation or failure in this process."""

    def __init__(
        self,
        job: JudgingJob,
        *,
        client_factory: Callable | None = None,
        limiter=None,
        poll_s: float = 0.5,
        progress: Callable[[JudgingJob], None] | None = None,
    ) -> None:
        self.job = job
        self.judge = job.judge
        self.tournament, self.rubric = services.job_schedules(job.params)
        self.poll_s = poll_s
        self.progress = progress
        self.stop = threading.Event()
        self.stop_reason = ""
        self.held: set[int] = set()
        self.budget = (
            prompts.TextBudget(self.judge.context_tokens, self.judge.max_output_tokens)
            if self.judge.context_tokens
            else None
        )
        if client_factory is None:
            from .clients import JudgeClient, JudgeEndpoint
            from .limits import limiter_for_settings

            endpoint = JudgeEndpoint.from_judge(self.judge)
            self.client = JudgeClient(endpoint, limiter or limiter_for_settings())
        else:
            self.client = client_factory(self.judge)
        # A window's lease outlives every retry of its call, so only a dead runner's
        # windows are ever reclaimed by another.
        self.lease_s = self.judge.timeout_s * (MAX_ATTEMPTS + 4) + 60

    # ------------------------------------------------------------------ entry point
    def run(self) -> str:
        """Run the job if it can be claimed; returns the job's final status."""
        if not services.job_claim(job_id=self.job.pk):
            return JudgingJob.objects.values_list("status", flat=True).get(
                pk=self.job.pk
            )
        queries = services._job_queries(self.job.dataset, self.job.query_ids)
        pools = services.query_pools(queries)
        work = [
            _Query(q.pk, q.external_id, q.text, pools[q.pk][0], pools[q.pk][1])
            for q in queries
            if pools[q.pk][0]
        ]
        stages = services.job_stage_list(self.job.stages)
        beat = threading.Thread(target=self._heartbeat, daemon=True)
        beat.start()
        calls = ThreadPoolExecutor(
            max_workers=self.judge.concurrency, thread_name_prefix="judge-call"
        )
        # Enough query loops to keep every call slot busy while some wait on refits.
        query_threads = max(1, min(len(work), self.judge.concurrency))
        error = ""
        try:
            with ThreadPoolExecutor(
                max_workers=query_threads, thread_name_prefix="judge-query"
            ) as pool:
                futures = [pool.submit(self._run_query, q, stages, calls) for q in work]
                done, _ = wait(futures, return_when=FIRST_EXCEPTION)
                for future in done:
                    exc = future.exception()
                    if exc is not None and not isinstance(exc, StopRun):
                        error = f"{type(exc).__name__}: {exc}"
                        self.stop.set()
                        break
                wait(futures)
        finally:
            calls.shutdown(wait=True)
            self.stop.set()
            beat.join(timeout=5)
        if error:
            services.job_finish(
                job_id=self.job.pk, status=JobStatus.FAILED, error=error
            )
        elif not self.stop_reason:
            services.job_finish(job_id=self.job.pk, status=JobStatus.DONE)
        self.job.refresh_from_db()
        return self.job.status

    # ------------------------------------------------------------------ per query
    def _run_query(
        self, query: _Query, stages: list[str], calls: ThreadPoolExecutor
    ) -> None:
        try:
            for stage in stages:
                self._run_stage(query, stage, calls)
        finally:
            connection.close()

    def _plan(self, query: _Query, stage: str, judged: dict, cache: dict) -> list:
        def cached(fit):
            def run(ids, answers):
                key = tuple(answers)
                if key not in cache:
                    cache[key] = fit(ids, answers)
                return cache[key]

            return run

        if stage == Stage.TOURNAMENT:
            return next_tournament_windows(
                query.doc_ids,
                judged,
                schedule=self.tournament,
                dataset=self.job.dataset.name,
                query_id=query.external_id,
                fit=cached(bt_abilities),
            )
        return next_rubric_windows(
            query.doc_ids,
            judged,
            schedule=self.rubric,
            dataset=self.job.dataset.name,
            query_id=query.external_id,
            fit=cached(rasch_scores),
        )

    def _run_stage(self, query: _Query, stage: str, calls: ThreadPoolExecutor) -> None:
        cache: dict = {}
        db_query = Query(pk=query.pk)
        while True:
            if self.stop.is_set():
                raise StopRun(self.stop_reason)
            judged = _answers(db_query, self.job.family, stage, self.held)
            planned = self._plan(query, stage, judged, cache)
            if not planned:
                return
            rows = services.windows_plan(
                job=self.job, query=db_query, stage=stage, planned=planned
            )
            mine = [
                row
                for row in rows
                if not self.stop.is_set()
                and services.window_claim(
                    window_id=row.pk,
                    job_id=self.job.pk,
                    lease_s=self.lease_s,
                    reask_refused=row.pk not in self.held,
                )
            ]
            self.held.update(row.pk for row in mine)
            futures = [calls.submit(self._ask, query, row) for row in mine]
            for future in futures:
                future.result()  # a fatal judge error stops the job
            if len(mine) < len(rows):
                time.sleep(self.poll_s)  # others hold some windows; wait for them

    # ------------------------------------------------------------------ one window
    def _ask(self, query: _Query, row: JudgmentWindow) -> None:
        try:
            self._ask_window(query, row)
        except BaseException:
            services.window_release(window_id=row.pk)
            raise
        finally:
            close_old_connections()

    def _ask_window(self, query: _Query, row: JudgmentWindow) -> None:
        from .clients import FatalJudgeError, TransientJudgeError

        texts = [query.texts[d] for d in row.doc_ids]
        messages, sha = prompts.render_prompt(
            row.stage, query.text, texts, budget=self.budget
        )
        fmt = (
            prompts.response_format(row.stage, len(texts))
            if self.judge.decoding == "json_schema"
            else None
        )
        parse = (
            parsing.parse_tournament
            if row.stage == Stage.TOURNAMENT
            else parsing.parse_rubric
        )
        tokens_in = tokens_out = latency = retries = attempts = 0
        raw = ""
        result = None
        while attempts < MAX_ATTEMPTS:
            attempts += 1
            try:
                call = self.client.complete(messages, response_format=fmt)
            except FatalJudgeError:
                raise
            except TransientJudgeError as exc:
                retries += getattr(exc, "retries", 0)
                result = parsing.refused(str(exc))
                raw = ""
                continue
            retries += call.retries
            tokens_in += call.input_tokens
            tokens_out += call.output_tokens
            latency += call.latency_ms
            raw = call.text or ""
            result = parse(raw, len(texts), finish_reason=call.finish_reason)
            if result.valid:
                break
        services.job_count(
            job_id=self.job.pk,
            requests=attempts + retries,
            retries=retries + attempts - 1,
            input_tokens=tokens_in,
            output_tokens=tokens_out,
        )
        ranking = (
            [row.doc_ids[i] for i in result.ranking]
            if result.valid and result.ranking
            else None
        )
        services.window_complete(
            window_id=row.pk,
            valid=result.valid,
            category=""
            if result.valid
            else (result.category or InvalidCategory.SCHEMA),
            reason=result.reason,
            raw_response=raw,
            scores=list(result.scores) if result.scores is not None else None,
            ranking=ranking,
            answers=[list(a) for a in result.answers]
            if result.answers is not None
            else None,
            attempts=attempts,
            input_tokens=tokens_in,
            output_tokens=tokens_out,
            latency_ms=latency,
            prompt_sha256=sha,
        )

    # ------------------------------------------------------------------ heartbeat
    def _heartbeat(self) -> None:
        try:
            while not self.stop.wait(HEARTBEAT_S):
                status = services.job_heartbeat(job_id=self.job.pk)
                if status != JobStatus.RUNNING:
                    self.stop_reason = status
                    self.stop.set()
                elif self.progress is not None:
                    self.progress(self.job)
        finally:
            connection.close()


def job_run(*, job_id: int, **kwargs) -> str:
    """Run job ``job_id`` here (Celery task body and ``judge --inline``)."""
    job = JudgingJob.objects.select_related("judge", "dataset").get(pk=job_id)
    return JobRunner(job, **kwargs).run()
