"""Runs a judging job: queries in parallel, the windows of one phase concurrently.

The runner is stateless between runs: each query's phases are replayed from the
stored windows (``judging.schedules`` planners), so a resumed or duplicated run asks
only what is missing. Window rows are claimed with compare-and-set and completed
once; a global limiter caps requests in flight per judge across all workers.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable
from concurrent.futures import (
    FIRST_COMPLETED,
    FIRST_EXCEPTION,
    ThreadPoolExecutor,
    wait,
)
from dataclasses import dataclass

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


def _answer(stage: str, doc_ids: list[str], outcome: dict) -> object:
    """The planner's answer for a window this lane just stored (as ``_answers`` would
    read it back)."""
    if stage == Stage.TOURNAMENT:
        scores = outcome["scores"]
        return TournamentAnswer(
            tuple(doc_ids),
            tuple(scores) if outcome["valid"] and scores is not None else None,
        )
    answers = outcome["answers"]
    return RubricAnswer(
        tuple(doc_ids),
        tuple(tuple(a) for a in answers)
        if outcome["valid"] and answers is not None
        else None,
    )


class JobRunner:
    """One lane of a job: claims (query, stage) units of the job's current run and
    works on them until none is left, the job stops, or the run is fenced.

    Any number of lanes, in any processes on any machines, share one job: each is a
    Celery task (``judging.tasks.judging_lane_task``) or, for ``judge --inline``, this
    process. Units, windows and the job are only written under compare-and-set with
    this lane's token and the run's token, so a lane that died, froze or lost the job
    to a take-over changes nothing, and its units and windows are taken over by the
    live lanes when their leases run out.
    """

    def __init__(
        self,
        job: JudgingJob,
        *,
        job_token: str,
        prefer: list[int] | tuple[int, ...] = (),
        client_factory: Callable | None = None,
        limiter=None,
        poll_s: float = 0.5,
        progress: Callable[[JudgingJob], None] | None = None,
    ) -> None:
        self.job = job
        self.job_token = job_token  # the run this lane belongs to
        self.prefer = tuple(prefer)  # this lane's share of the units, asked first
        self.judge = job.judge
        self.tournament, self.rubric = services.job_schedules(job.params)
        self.poll_s = poll_s
        self.progress = progress
        self.stop = threading.Event()
        self.stop_reason = ""
        self.held: set[int] = set()
        # Claims windows and units for this lane only: two lanes of one run never
        # store each other's windows.
        self.token = secrets.token_hex(16)
        # Windows whose calls are in progress and units being worked on: the
        # heartbeat renews their leases.
        self.active: set[int] = set()
        self.units: set[int] = set()
        self.active_lock = threading.Lock()
        # Idle unit loops sleep on ``idle`` while one of them polls for a unit.
        self.idle = threading.Condition()
        self.polling = False
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
        # (however many retries it takes), so only a dead or frozen lane's windows
        # are ever re-claimed by another; a frozen one's answer is then refused.
        self.lease_s = services.window_lease_s()
        self.heartbeat_s = services.heartbeat_s()

    # ------------------------------------------------------------------ entry point
    def run(self) -> str:
        """Work on the run's units until none is left; returns the job's status."""
        # Window fits are small matrices solved by many threads at once: BLAS's own
        # threads would only spin against ours (measured: 10-50x CPU per fit).
        with threadpool_limits(limits=1):
            return self._run()

    def _status(self) -> str:
        return JudgingJob.objects.values_list("status", flat=True).get(pk=self.job.pk)

    def _run(self) -> str:
        current = JudgingJob.objects.values_list("status", "run_token").get(
            pk=self.job.pk
        )
        if current != (JobStatus.RUNNING, self.job_token):
            return current[0]  # a stale message: the run is over or was fenced
        refusal = self._make_client()
        if refusal:
            services.job_finish(
                job_id=self.job.pk,
                status=JobStatus.FAILED,
                error=refusal,
                token=self.job_token,
            )
            return self._status()
        beat = threading.Thread(target=self._heartbeat, daemon=True)
        beat.start()
        calls = ThreadPoolExecutor(
            max_workers=self.judge.concurrency, thread_name_prefix="judge-call"
        )
        # Enough unit loops to keep every call slot busy while some wait on refits.
        # The two stages of a query are independent (Stage B never reads Stage A),
        # so each (query, stage) is its own unit: twice the windows ready at once.
        # Each loop holds a database connection: capped by JUDGING_UNIT_THREADS (a
        # unit has many windows ready at once, so a few loops fill many call slots).
        loops = max(1, min(self.judge.concurrency, services.unit_threads()))
        error = ""
        try:
            with ThreadPoolExecutor(
                max_workers=loops, thread_name_prefix="judge-unit"
            ) as pool:
                futures = [pool.submit(self._unit_loop, calls) for _ in range(loops)]
                done, _ = wait(futures, return_when=FIRST_EXCEPTION)
                for future in done:
                    exc = future.exception()
                    if exc is not None and not isinstance(exc, StopRun):
                        error = f"{type(exc).__name__}: {exc}"
                        self.stop.set()
                        self._wake_idle()
                        break
                wait(futures)
        finally:
            calls.shutdown(wait=True)
            self.stop.set()
            beat.join(timeout=5)
            self._flush_counts()
        if error:
            services.job_finish(
                job_id=self.job.pk,
                status=JobStatus.FAILED,
                error=error,
                token=self.job_token,
            )
        return self._status()

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

    # ------------------------------------------------------------------ per unit
    def _unit_loop(self, calls: ThreadPoolExecutor) -> None:
        """Claim units and run them until none is left; the loop that sees the last
        unit done closes the job."""
        try:
            while (unit := self._next_unit()) is not None:
                with self.active_lock:
                    self.units.add(unit.pk)
                try:
                    self._run_unit(unit, calls)
                except BaseException:
                    services.unit_release(unit_id=unit.pk, token=self.token)
                    raise
                finally:
                    with self.active_lock:
                        self.units.discard(unit.pk)
                services.unit_done(unit_id=unit.pk, token=self.token)
        finally:
            connection.close()

    def _next_unit(self):
        """The next unit this loop works on, or None when the job has none left.

        While other lanes hold every unit left, one loop of this lane polls (a dead
        lane's units become claimable when their leases run out) and the others sleep
        until it finds one: idle loops cost the database nothing.
        """
        while True:
            if self.stop.is_set():
                raise StopRun(self.stop_reason)
            try:
                unit = services.unit_claim(
                    job_id=self.job.pk,
                    job_token=self.job_token,
                    token=self.token,
                    lease_s=self.lease_s,
                    prefer=self.prefer,
                )
            except services.JobFenced as exc:
                self._fenced()
                raise StopRun(str(exc)) from exc
            if unit is not None:
                with self.idle:
                    self.idle.notify_all()  # there may be more: idle loops try too
                return unit
            if services.units_left(job_id=self.job.pk) == 0:
                services.job_finish(
                    job_id=self.job.pk, status=JobStatus.DONE, token=self.job_token
                )
                self._wake_idle()
                return None
            with self.idle:
                if self.polling:
                    self.idle.wait(timeout=10 * self.poll_s)
                    continue
                self.polling = True
            try:
                self.stop.wait(self.poll_s)
            finally:
                with self.idle:
                    self.polling = False

    def _wake_idle(self) -> None:
        with self.idle:
            self.idle.notify_all()

    def _fenced(self) -> None:
        self.stop_reason = self.stop_reason or services.FENCED
        self.stop.set()
        self._wake_idle()

    def _run_unit(self, unit, calls: ThreadPoolExecutor) -> None:
        query = unit.query
        pools = services.query_pools([query])
        doc_ids, texts = pools[query.pk]
        work = _Query(query.pk, query.external_id, query.text, doc_ids, texts)
        self._run_stage(work, unit.stage, calls)

    def _plan(self, query: _Query, stage: str, judged: dict, memo: dict) -> list:
        if stage == Stage.TOURNAMENT:
            return next_tournament_windows(
                query.doc_ids,
                judged,
                schedule=self.tournament,
                dataset=self.job.dataset.name,
                query_id=query.external_id,
                fit=bt_abilities,
                memo=memo,
            )
        return next_rubric_windows(
            query.doc_ids,
            judged,
            schedule=self.rubric,
            dataset=self.job.dataset.name,
            query_id=query.external_id,
            fit=rasch_scores,
            memo=memo,
        )

    def _run_stage(self, query: _Query, stage: str, calls: ThreadPoolExecutor) -> None:
        # The planner's memo keeps the phases replayed so far: each round fits only
        # the batch it plans. ``judged`` is read from the database at the start and
        # whenever another runner may have written this unit's windows (a window we
        # could not claim or whose answer was refused to us); otherwise each round
        # adds the answers this lane stored itself.
        memo: dict = {}
        judged: dict | None = None
        db_query = Query(pk=query.pk, external_id=query.external_id)
        while True:
            if self.stop.is_set():
                raise StopRun(self.stop_reason)
            if judged is None:
                judged = _answers(db_query, self.job.family, stage, self.held)
            planned = self._plan(query, stage, judged, memo)
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
                self._fenced()
                raise StopRun(str(exc)) from exc
            mine = [row for row in rows if row.pk in got]
            self.held.update(got)
            with self.active_lock:
                self.active.update(got)
            # Call threads only talk to the judge; this query's thread stores the
            # answers as they arrive, all those that came in while it stored the
            # last ones in one statement, so database connections stay one per loop.
            futures = {calls.submit(self._ask_window, query, row): row for row in mine}
            fatal = None
            complete = len(mine) == len(rows)
            pending = set(futures)
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                answered = []
                for future in done:
                    row = futures[future]
                    try:
                        answered.append((row, future.result()))
                    except BaseException as exc:  # the judge refused us for good
                        services.window_release(window_id=row.pk, token=self.token)
                        fatal = fatal or exc
                try:
                    stored = services.windows_complete(
                        token=self.token,
                        outcomes=[(row.pk, outcome) for row, outcome in answered],
                    )
                finally:
                    with self.active_lock:
                        self.active.difference_update(futures[f].pk for f in done)
                for row, outcome in answered:
                    if row.pk in stored:
                        judged[row.seq] = _answer(stage, row.doc_ids, outcome)
                    else:  # our claim was taken over: drop, count as waste
                        complete = False
                        with self.counts_lock:
                            self.counts["wasted"] += 1
            if fatal is not None:
                raise fatal
            if not complete:
                judged = None  # read again: others hold or stored some windows
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
        """Every ``heartbeat_s``: flush counters, renew the leases of this lane's
        units and in-progress windows, refresh the job's heartbeat and stop on
        anything but running (pause, cancel, failure, done, or a take-over)."""
        try:
            while not self.stop.wait(self.heartbeat_s):
                self._flush_counts()
                with self.active_lock:
                    active, units = list(self.active), list(self.units)
                services.windows_renew(
                    window_ids=active, token=self.token, lease_s=self.lease_s
                )
                services.units_renew(
                    unit_ids=units, token=self.token, lease_s=self.lease_s
                )
                status = services.job_heartbeat(
                    job_id=self.job.pk, token=self.job_token
                )
                if status != JobStatus.RUNNING:
                    self.stop_reason = status
                    self.stop.set()
                    self._wake_idle()
                elif self.progress is not None:
                    self.progress(self.job)
        finally:
            connection.close()


def job_start(*, job_id: int) -> tuple[str, list[int]] | None:
    """Claim job ``job_id`` for a new run and plan its units; returns (run token,
    unit ids not done) or None if another live run holds it."""
    token = services.job_claim(job_id=job_id)
    if token is None:
        return None
    job = JudgingJob.objects.select_related("dataset").get(pk=job_id)
    return token, services.job_units_plan(job=job)


def lane_run(*, job_id: int, job_token: str, prefer=(), **kwargs) -> str:
    """Run one lane of run ``job_token`` here (the Celery lane task's body)."""
    job = JudgingJob.objects.select_related("judge", "dataset").get(pk=job_id)
    return JobRunner(job, job_token=job_token, prefer=prefer, **kwargs).run()


def job_run(*, job_id: int, **kwargs) -> str:
    """Run job ``job_id`` in this process as a single lane (``judge --inline``,
    scripts, tests). Lanes on Celery workers may join the same run."""
    started = job_start(job_id=job_id)
    if started is None:
        return JudgingJob.objects.values_list("status", flat=True).get(pk=job_id)
    token, units = started
    return lane_run(job_id=job_id, job_token=token, prefer=units, **kwargs)
