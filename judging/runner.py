"""Runs a judging job: queries in parallel, the windows of one phase concurrently.

The runner is stateless between runs: each query's phases are replayed from the
stored windows (``judging.schedules`` planners), so a resumed or duplicated run asks
only what is missing. Window rows are claimed with compare-and-set and completed
once; a global limiter caps requests in flight per judge across all workers.
"""

from __future__ import annotations

import logging
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, as_completed, wait
from dataclasses import dataclass
from pathlib import Path

from django.db import connection
from threadpoolctl import threadpool_limits

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

    Refused windows (no answer) at the frontier count as unjudged unless this run
    already asked them (``held``), so a resume re-asks them once. A refused window
    that later answered windows were planned after stays as it is: asking it again
    would change the plan those answers belong to.
    """
    rows = list(
        JudgmentWindow.objects.filter(
            family=family, query_id=query.pk, stage=stage, status=WindowStatus.DONE
        ).values_list(
            "pk", "seq", "doc_ids", "valid", "scores", "answers", "invalid_category"
        )
    )
    answered = [
        seq for _, seq, _, _, _, _, cat in rows if cat != InvalidCategory.REFUSED
    ]
    frontier = max(answered, default=-1)
    out: dict[int, object] = {}
    for pk, seq, doc_ids, valid, scores, answers, category in rows:
        if category == InvalidCategory.REFUSED and pk not in held and seq > frontier:
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
        processes: int = 1,
        shard: tuple[int, int] | None = None,
    ) -> None:
        self.job = job
        # ``processes`` > 1: this runner owns the job and starts helper processes
        # (``judge_shard``) for the other shards; ``shard`` marks such a helper.
        self.processes = max(1, processes)
        self.shard = shard
        self.helpers: list[subprocess.Popen] = []
        self.judge = job.judge
        self.tournament, self.rubric = services.job_schedules(job.params)
        self.poll_s = poll_s
        self.progress = progress
        self.stop = threading.Event()
        self.stop_reason = ""
        self.held: set[int] = set()
        # ``token`` claims windows for this process; ``job_token`` is the job's run
        # (shared with helper processes) that a take-over replaces.
        self.token = secrets.token_hex(16)
        self.job_token = ""
        # Windows whose calls are in progress: the heartbeat renews their leases.
        self.active: set[int] = set()
        self.active_lock = threading.Lock()
        # Request counters are summed here and flushed with each heartbeat: one
        # UPDATE per window would cost more than the window's own bookkeeping.
        self.counts = {
            "requests": 0,
            "retries": 0,
            "input_tokens": 0,
            "output_tokens": 0,
            "wasted": 0,
        }
        self.counts_lock = threading.Lock()
        self.budget = (
            prompts.TextBudget(self.judge.context_tokens, self.judge.max_output_tokens)
            if self.judge.context_tokens
            else None
        )
        self.client_factory = client_factory
        self.limiter = limiter
        self.client = None  # made after the claim (a refused key fails the job)
        # A window's lease is renewed by the heartbeat while its call is in progress
        # (however many retries it takes), so only a dead or frozen runner's windows
        # are ever re-claimed by another; a frozen one's answer is then refused.
        self.lease_s = services.window_lease_s()
        self.heartbeat_s = services.heartbeat_s()

    # ------------------------------------------------------------------ entry point
    def run(self) -> str:
        """Run the job if it can be claimed; returns the job's final status."""
        # Window fits are small matrices solved by many threads at once: BLAS's own
        # threads would only spin against ours (measured: 10-50x CPU per fit).
        with threadpool_limits(limits=1):
            return self._run()

    def _run(self) -> str:
        """Body of :meth:`run`.

        A helper (``shard`` set) never claims or closes the job: it works on its
        share of the queries while the owner's job is running.
        """

        def status_of() -> str:
            return JudgingJob.objects.values_list("status", flat=True).get(
                pk=self.job.pk
            )

        if self.shard is None:
            token = services.job_claim(job_id=self.job.pk)
            if token is None:
                return status_of()
            self.job_token = token
        else:
            if status_of() != JobStatus.RUNNING:
                return status_of()
            self.job_token = JudgingJob.objects.values_list("run_token", flat=True).get(
                pk=self.job.pk
            )
        refusal = self._make_client()
        if refusal:
            if self.shard is None:
                services.job_finish(
                    job_id=self.job.pk,
                    status=JobStatus.FAILED,
                    error=refusal,
                    token=self.job_token,
                )
            return status_of()
        index, total = self.shard or (0, self.processes)
        helpers = self.helpers = (
            [self._start_helper(i, total) for i in range(1, total)]
            if self.shard is None
            else []
        )
        queries = services.job_queries(self.job.dataset, self.job.query_ids)[
            index::total
        ]
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
        # The two stages of a query are independent (Stage B never reads Stage A), so
        # each (query, stage) is its own loop: twice the windows ready at any moment.
        tasks = [(q, stage) for q in work for stage in stages]
        query_threads = max(1, min(len(tasks), self.judge.concurrency))
        error = ""
        try:
            with ThreadPoolExecutor(
                max_workers=query_threads, thread_name_prefix="judge-query"
            ) as pool:
                futures = [
                    pool.submit(self._run_query, q, [stage], calls)
                    for q, stage in tasks
                ]
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
            self._flush_counts()
            for helper in helpers:
                if helper.wait() != 0 and not error:
                    error = f"helper process for shard {helper.args[-2]} failed (exit code {helper.returncode})"
        if self.shard is not None:
            if error:
                raise RuntimeError(
                    error
                )  # the owner sees the exit code and fails the job
            return status_of()
        if error:
            services.job_finish(
                job_id=self.job.pk,
                status=JobStatus.FAILED,
                error=error,
                token=self.job_token,
            )
        elif not self.stop_reason:
            services.job_finish(
                job_id=self.job.pk, status=JobStatus.DONE, token=self.job_token
            )
        self.job.refresh_from_db()
        return self.job.status

    def _make_client(self) -> str:
        """Build the judge client; returns why not (the key variable is refused).

        Checked here, in the worker, right before any call: a judge row written
        before the rule existed (or edited behind the services) sends nothing.
        """
        from .clients import FatalJudgeError, JudgeClient, JudgeEndpoint
        from .keyenv import api_key_env_refusal
        from .limits import limiter_for_settings

        refusal = api_key_env_refusal(self.judge.api_key_env)
        if refusal is not None:
            return f"judge {self.judge.name!r}: refusing to send its key: {refusal}"
        try:
            if self.client_factory is not None:
                self.client = self.client_factory(self.judge)
            else:
                endpoint = JudgeEndpoint.from_judge(self.judge)
                self.client = JudgeClient(
                    endpoint, self.limiter or limiter_for_settings()
                )
        except FatalJudgeError as exc:
            return str(exc)
        return ""

    def _start_helper(self, index: int, total: int) -> subprocess.Popen:
        manage = Path(__file__).resolve().parent.parent / "manage.py"
        return subprocess.Popen(
            [
                sys.executable,
                str(manage),
                "judge_shard",
                str(self.job.pk),
                str(index),
                str(total),
            ]
        )

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
        db_query = Query(pk=query.pk, external_id=query.external_id)
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
            if self.stop.is_set():
                raise StopRun(self.stop_reason)
            try:
                got = set(
                    services.windows_claim(
                        window_ids=[row.pk for row in rows],
                        job_id=self.job.pk,
                        token=self.token,
                        job_token=self.job_token,
                        lease_s=self.lease_s,
                        reask={row.pk for row in rows} - self.held,
                    )
                )
            except services.JobFenced as exc:
                self.stop_reason = self.stop_reason or services.FENCED
                self.stop.set()
                raise StopRun(str(exc)) from exc
            mine = [row for row in rows if row.pk in got]
            self.held.update(got)
            with self.active_lock:
                self.active.update(got)
            # Call threads only talk to the judge; this query's thread stores each
            # answer as it arrives, so database connections stay one per query loop.
            futures = {calls.submit(self._ask_window, query, row): row for row in mine}
            fatal = None
            for future in as_completed(futures):
                row = futures[future]
                try:
                    stored = services.window_complete(
                        window_id=row.pk, token=self.token, **future.result()
                    )
                    if not stored:  # our claim was taken over: drop, count as waste
                        with self.counts_lock:
                            self.counts["wasted"] += 1
                except BaseException as exc:  # the judge refused us for good
                    services.window_release(window_id=row.pk, token=self.token)
                    fatal = fatal or exc
                finally:
                    with self.active_lock:
                        self.active.discard(row.pk)
            if fatal is not None:
                raise fatal
            if len(mine) < len(rows):
                time.sleep(self.poll_s)  # others hold some windows; wait for them

    # ------------------------------------------------------------------ one window
    def _ask_window(self, query: _Query, row: JudgmentWindow) -> dict:
        """Ask one window (up to 3 attempts); returns the fields to store. No DB access."""
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
            if self.stop.is_set():  # paused, cancelled or fenced: ask nothing more
                raise StopRun(self.stop_reason)
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
        with self.counts_lock:
            self.counts["requests"] += attempts + retries
            self.counts["retries"] += retries + attempts - 1
            self.counts["input_tokens"] += tokens_in
            self.counts["output_tokens"] += tokens_out
        ranking = (
            [row.doc_ids[i] for i in result.ranking]
            if result.valid and result.ranking
            else None
        )
        return dict(
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
    def _flush_counts(self) -> None:
        with self.counts_lock:
            counts, self.counts = self.counts, dict.fromkeys(self.counts, 0)
        if any(counts.values()):
            services.job_count(job_id=self.job.pk, **counts)

    def _heartbeat(self) -> None:
        try:
            while not self.stop.wait(self.heartbeat_s):
                self._flush_counts()
                with self.active_lock:
                    active = list(self.active)
                services.windows_renew(
                    window_ids=active, token=self.token, lease_s=self.lease_s
                )
                failed = [h for h in self.helpers if h.poll() not in (None, 0)]
                if failed:
                    self.stop_reason = ""
                    self.stop.set()
                    break
                if self.shard is None:
                    status = services.job_heartbeat(
                        job_id=self.job.pk, token=self.job_token
                    )
                else:
                    status, current = JudgingJob.objects.values_list(
                        "status", "run_token"
                    ).get(pk=self.job.pk)
                    if current != self.job_token:
                        status = services.FENCED
                if status != JobStatus.RUNNING:
                    self.stop_reason = status
                    self.stop.set()
                elif self.progress is not None:
                    self.progress(self.job)
        finally:
            connection.close()


def job_run(*, job_id: int, processes: int | None = None, **kwargs) -> str:
    """Run job ``job_id`` here (Celery task body and ``judge --inline``).

    ``processes`` (default: the JUDGING_PROCESSES setting) > 1 shares the queries
    with helper processes, so request handling is not bound to one core.
    """
    from django.conf import settings

    job = JudgingJob.objects.select_related("judge", "dataset").get(pk=job_id)
    if processes is None:
        processes = getattr(settings, "JUDGING_PROCESSES", 1)
    return JobRunner(job, processes=processes, **kwargs).run()
