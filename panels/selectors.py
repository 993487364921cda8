"""Reads of the panels app: panels, runs, progress, estimates and blind contest views.

``contest_views`` is the one place that decides what a judge may see of a contest,
the counterpart of ``annotation.selectors.assignment_payload``: the query text and
the titles and texts of documents - no system, rank number, external id, qrel,
gain or metric.
"""

from __future__ import annotations

import hashlib
import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from django.db.models import Avg, Count, Q, QuerySet

from annotation import sampling
from annotation.models import Contest, Study
from annotation.selectors import contest_documents
from benchmarks.access import can_read_benchmarks
from judging.models import Judge
from judging.prompts import count_tokens
from rcp_platform.exceptions import NotFoundError

from . import prompts
from .models import Panel, PanelMode, PanelRequest, PanelRun, RequestStatus

# Answer lengths for the estimate (tokens): a short reasoning and the choice, or
# per document a reasoning line and one boolean per question.
LISTS_OUTPUT_TOKENS = 60
RUBRIC_OUTPUT_TOKENS_PER_DOC = 30
RUBRIC_OUTPUT_TOKENS_PER_ANSWER = 6
DEFAULT_LATENCY_S = 5.0


def panel_list(*, user: Any = None) -> QuerySet[Panel]:
    """Panels with their judges; none for users who may not read benchmarks."""
    if user is not None and not can_read_benchmarks(user):
        return Panel.objects.none()
    return Panel.objects.prefetch_related("judges").order_by("name")


def panel_get(*, ref: str, user: Any = None) -> Panel:
    """A panel by id or name; NotFoundError otherwise."""
    qs = panel_list(user=user)
    panel = qs.filter(pk=int(ref)).first() if ref.isdigit() else None
    panel = panel or qs.filter(name=ref).first()
    if panel is None:
        raise NotFoundError(f"panel {ref!r} not found")
    return panel


def judges_by_names(*, names: list[str]) -> list[Judge]:
    """Judges by name, in order; NotFoundError names the first missing one."""
    found = {j.name: j for j in Judge.objects.filter(name__in=names)}
    for name in names:
        if name not in found:
            raise NotFoundError(f"judge {name!r} not found")
    return [found[n] for n in names]


def run_list(*, user: Any = None, study: Study | None = None) -> QuerySet[PanelRun]:
    """Runs (of one study), newest first, with study and panel."""
    if user is not None and not can_read_benchmarks(user):
        return PanelRun.objects.none()
    qs = PanelRun.objects.select_related("study", "panel")
    return qs.filter(study=study) if study is not None else qs


def run_get(*, run_id: int, user: Any = None) -> PanelRun:
    run = run_list(user=user).filter(pk=run_id).first()
    if run is None:
        raise NotFoundError(f"panel run {run_id} not found")
    return run


def run_progress(*, run: PanelRun, per_judge: bool = True) -> dict[str, Any]:
    """Live figures of a run from its counters (one row), plus per-judge counts
    by status (one grouped query) unless ``per_judge`` is False (lists)."""
    judges: dict[str, dict[str, int]] = defaultdict(
        lambda: {"planned": 0, "in_flight": 0, "done": 0, "valid": 0}
    )
    if per_judge:
        rows = (
            PanelRequest.objects.filter(run=run)
            .values("judge__name", "status")
            .annotate(n=Count("pk"), n_valid=Count("pk", filter=Q(valid=True)))
            .order_by()
        )
        for row in rows:
            judges[row["judge__name"]][row["status"]] += row["n"]
            judges[row["judge__name"]]["valid"] += row["n_valid"]
    return {
        "id": run.pk,
        "study": run.study_id,
        "panel": run.panel.name,
        "mode": run.mode,
        "status": run.status,
        "error": run.error,
        "total": run.total,
        "answered": run.answered,
        "valid": run.valid,
        "invalid": run.invalid,
        "calls": run.calls,
        "input_tokens": run.input_tokens,
        "output_tokens": run.output_tokens,
        "progress": round(run.progress, 4),
        "started_at": run.started_at,
        "finished_at": run.finished_at,
        "heartbeat_at": run.heartbeat_at,
        "judges": dict(sorted(judges.items())),
    }


# ---------------------------------------------------------------------------- blind


@dataclass(frozen=True)
class ContestView:
    """A contest as a judge may see it (document pks only to store the order)."""

    contest_id: int
    query: str
    list_a: tuple[int, ...]
    list_b: tuple[int, ...]
    displayed: tuple[int, ...]
    documents: dict[int, prompts.Document]


def contest_views(*, study: Study) -> list[ContestView]:
    """Every contest of the study, blind: query text, both top-k lists in rank
    order, the displayed union in the contest's order, titles and texts."""
    contests = list(
        Contest.objects.filter(study=study).select_related("query").order_by("position")
    )
    entries = contest_documents(study=study)
    out = []
    for c in contests:
        shown = entries[c.pk]
        out.append(
            ContestView(
                contest_id=c.pk,
                query=c.query.text,
                list_a=tuple(
                    e.document_id
                    for e in sorted(
                        (e for e in shown if e.rank_a), key=lambda e: e.rank_a
                    )
                ),
                list_b=tuple(
                    e.document_id
                    for e in sorted(
                        (e for e in shown if e.rank_b), key=lambda e: e.rank_b
                    )
                ),
                displayed=tuple(e.document_id for e in shown),
                documents={
                    e.document_id: prompts.Document(e.document.title, e.document.text)
                    for e in shown
                },
            )
        )
    return out


def display_seed(*, study: Study, contest_id: int, judge_id: int) -> int:
    """Seed of a judge's shuffled document order for a contest (stable, 62 bits)."""
    key = f"panel|{study.seed}|{contest_id}|{judge_id}".encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "big") >> 2


def rubric_order(
    *, study: Study, view: ContestView, judge_id: int, rep: int
) -> list[int]:
    """Displayed documents in a seeded shuffle (``annotation.sampling.shuffled``,
    the annotator page's own), reversed for rep 2 so every position is swapped."""
    order = sampling.shuffled(
        list(view.displayed),
        display_seed(study=study, contest_id=view.contest_id, judge_id=judge_id),
    )
    return order if rep == 1 else order[::-1]


# ---------------------------------------------------------------------------- estimate


def run_estimate(
    *, study: Study, panel: Panel, mode: str, questions: list[dict[str, str]]
) -> dict[str, Any]:
    """Calls, tokens and time a run would need, before launch.

    Calls: 2 per (judge, contest) minus requests already answered by an earlier run
    of the same (study, panel, mode). Input tokens: the rendered prompts, counted
    like judging's estimates (2 characters a token). Time: judges run side by side,
    each at its concurrency, at its mean observed latency on panel requests (5 s
    when it has none).
    """
    views = contest_views(study=study)
    judges = list(panel.judges.order_by("name"))
    done = set(
        PanelRequest.objects.filter(
            run__study=study,
            run__panel=panel,
            run__mode=mode,
            status=RequestStatus.DONE,
        ).values_list("judge_id", "contest_id", "rep")
    )
    per_judge = {}
    totals = {"calls": 0, "input_tokens": 0, "output_tokens": 0}
    seconds = 0.0
    for judge in judges:
        calls = tokens_in = tokens_out = 0
        for view in views:
            for rep in (1, 2):
                if (judge.pk, view.contest_id, rep) in done:
                    continue
                messages, _sha = request_prompt(
                    study=study,
                    view=view,
                    mode=mode,
                    judge_id=judge.pk,
                    rep=rep,
                    questions=questions,
                )
                calls += 1
                tokens_in += count_tokens(messages[0]["content"])
                tokens_out += (
                    LISTS_OUTPUT_TOKENS
                    if mode == PanelMode.LISTS
                    else len(view.displayed)
                    * (
                        RUBRIC_OUTPUT_TOKENS_PER_DOC
                        + RUBRIC_OUTPUT_TOKENS_PER_ANSWER * len(questions)
                    )
                )
        latency = PanelRequest.objects.filter(
            judge=judge, status=RequestStatus.DONE, latency_ms__gt=0
        ).aggregate(v=Avg("latency_ms"))["v"]
        latency_s = latency / 1000 if latency else DEFAULT_LATENCY_S
        judge_s = math.ceil(calls / judge.concurrency) * latency_s
        seconds = max(seconds, judge_s)
        per_judge[judge.name] = {
            "calls": calls,
            "input_tokens": tokens_in,
            "output_tokens": tokens_out,
            "seconds": round(judge_s, 1),
        }
        totals["calls"] += calls
        totals["input_tokens"] += tokens_in
        totals["output_tokens"] += tokens_out
    return {
        "contests": len(views),
        "judges": per_judge,
        **totals,
        "seconds": round(seconds, 1),
    }


def request_prompt(
    *,
    study: Study,
    view: ContestView,
    mode: str,
    judge_id: int,
    rep: int,
    questions: list[dict[str, str]],
) -> tuple[list[dict[str, str]], str]:
    """The chat messages and prompt hash of one request (rep 2 swaps the sides)."""
    if mode == PanelMode.LISTS:
        first, second = (
            (view.list_a, view.list_b) if rep == 1 else (view.list_b, view.list_a)
        )
        return prompts.lists_prompt(
            view.query,
            [view.documents[d] for d in first],
            [view.documents[d] for d in second],
        )
    order = rubric_order(study=study, view=view, judge_id=judge_id, rep=rep)
    return prompts.rubric_prompt(
        view.query, questions, [view.documents[d] for d in order]
    )
