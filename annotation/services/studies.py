"""Studies: the sampling plan, creation with rubric v1 and contests, open/close."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from benchmarks.models import Dataset, System
from calibration.models import CalibrationFit, FitStatus
from rcp_platform.exceptions import ApplicationError, ConflictError

from .. import sampling, selectors
from ..analysis.rules import VERDICT_RULES
from ..models import Contest, ContestDocument, Rubric, Study, StudyStatus
from .looks import study_analysis_plan_set, study_plan_register

METRIC_K = 10
MAX_LEASE_MINUTES = 7 * 24 * 60  # a week: longer leases only block contests

DEFAULT_QUESTIONS = [
    {"key": "C1", "text": "Is the document about the topic of the query?"},
    {"key": "C2", "text": "Does it contain information that is useful for the query?"},
    {
        "key": "C3",
        "text": "Does it mention the specific entity or detail the query asks about?",
    },
    {"key": "C4", "text": "Does it directly answer the query?"},
    {
        "key": "C5",
        "text": "Does it answer the query thoroughly, with a complete, detailed treatment?",
    },
]
DEFAULT_INSTRUCTIONS = """\
Read the **query**, then judge every document on its own.

For each document answer each question **yes** or **no**. The questions go from
least to most demanding; a document's grade is the number of the most demanding
question you answered *yes* (0 if none). Documents appear in a random order, and
nothing on this page tells you where a document came from: judge only what you read.

Keyboard: `1`-`5` toggle a question of the current document, `0` answers the
remaining questions *no*, `j`/`k` move to the next/previous document, `?` shows
all shortcuts. Your answers are saved as you go.
"""


@dataclass(frozen=True)
class StudyPlan:
    """What ``study_create`` would draw: the fit, cell counts and the draws."""

    fit: CalibrationFit
    plan: sampling.Plan
    candidates: int
    metric_k: int = METRIC_K

    def summary(self) -> dict[str, Any]:
        return {
            "fit": self.fit.pk,
            "candidates": self.candidates,
            "metric_k": self.metric_k,
            "quotas": self.plan.quotas,
            "available": self.plan.available,
            "requested": self.plan.requested,
            "drawn": self.plan.drawn,
            "by_dataset": self.plan.by_dataset
            or dict(Counter(d.candidate.key[0] for d in self.plan.draws)),
            "controls": self.plan.controls or sampling.Controls().as_dict(),
        }


def study_plan(
    *,
    datasets: Sequence[Dataset],
    systems: Sequence[System],
    n_contests: int,
    depth: int = 5,
    quotas: Mapping[str, float] | None = None,
    seed: int = 0,
    fit: CalibrationFit | None = None,
    metric_k: int = METRIC_K,
    controls: sampling.Controls | None = None,
) -> StudyPlan:
    """Sample contests without writing anything (the preview of ``study_create``).

    Needs a done calibration fit covering every dataset (default: the newest) and at
    least two systems per dataset. Raises ApplicationError with a readable message.
    """
    if not datasets:
        raise ApplicationError("choose at least one dataset")
    if not 1 <= depth <= 50:
        raise ApplicationError("depth must be between 1 and 50")
    wrong = [s.name for s in systems if s.dataset_id not in {d.pk for d in datasets}]
    if wrong:
        raise ApplicationError(f"system {wrong[0]!r} is not in the chosen datasets")
    for dataset in datasets:
        if sum(s.dataset_id == dataset.pk for s in systems) < 2:
            raise ApplicationError(
                f"dataset {dataset.name!r}: choose at least two systems to compare"
            )
    if fit is None:
        fit = selectors.fit_latest_for(datasets=datasets)
        if fit is None:
            names = ", ".join(repr(d.name) for d in datasets)
            raise ApplicationError(
                f"no calibration covers {names}: run `calibrate` or `import_gains` first"
            )
    elif fit.status != FitStatus.DONE:
        raise ApplicationError(f"calibration fit {fit.pk} is not done")
    candidates = selectors.contest_candidates(
        fit=fit, systems=systems, depth=depth, metric_k=metric_k
    )
    try:
        plan = sampling.draw(
            candidates, n=n_contests, quotas=quotas, seed=seed, controls=controls
        )
    except ValueError as exc:
        raise ApplicationError(str(exc)) from exc
    return StudyPlan(fit=fit, plan=plan, candidates=len(candidates), metric_k=metric_k)


@transaction.atomic
def rubric_create(*, study: Study, questions: Sequence[Mapping[str, str]]) -> Rubric:
    """Add the next rubric version of a study. Assignments already made keep theirs."""
    last = Rubric.objects.filter(study=study).order_by("-version").first()
    rubric = Rubric(
        study=study,
        version=(last.version + 1) if last else 1,
        questions=[{"key": q["key"], "text": q["text"]} for q in questions],
    )
    rubric.full_clean()
    rubric.save()
    return rubric


@transaction.atomic
def study_create(
    *,
    name: str,
    datasets: Sequence[Dataset],
    systems: Sequence[System],
    n_contests: int,
    depth: int = 5,
    per_contest: int = 3,
    quotas: Mapping[str, float] | None = None,
    seed: int = 0,
    fit: CalibrationFit | None = None,
    questions: Sequence[Mapping[str, str]] | None = None,
    instructions: str | None = None,
    lease_duration: timedelta = timedelta(minutes=30),
    collect_order: bool = False,
    collect_comments: bool = True,
    created_by: Any = None,
    open_now: bool = False,
    metric_k: int = METRIC_K,
    verdict_rule: str = "majority",
    controls: sampling.Controls | None = None,
    analysis_plan: Mapping[str, Any] | None = None,
) -> Study:
    """Create a study with its rubric v1 and sampled contests (status draft, or open).

    Contests are drawn by ``study_plan`` (seeded, quotas per design cell) with the
    design cells taken at depth ``metric_k`` (the draw depth); each stores both
    top-k lists and their de-duplicated union. ``verdict_rule`` ("majority" or
    "plurality", ``analysis.rules``) is recorded in ``design`` and used by every
    report and release of the study. ``analysis_plan`` (``looks.PLAN_KEYS`` but the
    verdict rule) is registered when the study opens. All or nothing. A lease lasts
    at most ``MAX_LEASE_MINUTES`` (``now + lease`` must stay a representable date).
    """
    if not timedelta(0) < lease_duration <= timedelta(minutes=MAX_LEASE_MINUTES):
        raise ApplicationError(
            f"the lease must last more than 0 and at most {MAX_LEASE_MINUTES} minutes "
            "(7 days)"
        )
    if Study.objects.filter(name=name).exists():
        raise ConflictError(f"study {name!r} exists already")
    if verdict_rule not in VERDICT_RULES:
        raise ApplicationError(
            f"unknown verdict rule {verdict_rule!r}; use one of {', '.join(VERDICT_RULES)}"
        )
    if not 1 <= metric_k <= 1000:
        raise ApplicationError("the draw depth (metric_k) must be between 1 and 1000")
    planned = study_plan(
        datasets=datasets,
        systems=systems,
        n_contests=n_contests,
        depth=depth,
        quotas=quotas,
        seed=seed,
        fit=fit,
        metric_k=metric_k,
        controls=controls,
    )
    study = Study(
        name=name,
        fit=planned.fit,
        depth=depth,
        per_contest=per_contest,
        collect_order=collect_order,
        collect_comments=collect_comments,
        lease_duration=lease_duration,
        instructions=DEFAULT_INSTRUCTIONS if instructions is None else instructions,
        seed=seed,
        design={"verdict_rule": verdict_rule, **planned.summary()},
        created_by=created_by,
    )
    study.full_clean()
    study.save()
    study.datasets.set(datasets)
    study.systems.set(systems)
    rubric_create(study=study, questions=questions or DEFAULT_QUESTIONS)
    if analysis_plan:
        study = study_analysis_plan_set(study=study, plan=analysis_plan)
    contests: list[Contest] = []
    lists: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
    for position, drawn in enumerate(planned.plan.draws, start=1):
        cand = drawn.candidate
        source: selectors.ContestSource = cand.ref
        a, b = (1, 0) if drawn.swap else (0, 1)
        rcp, qrel = (cand.rcp_a, cand.rcp_b), (cand.qrel_a, cand.qrel_b)
        contest = Contest(
            study=study,
            position=position,
            query_id=source.query_id,
            system_a_id=source.system_ids[a],
            system_b_id=source.system_ids[b],
            cell=cand.cell,
            rcp_a=rcp[a],
            rcp_b=rcp[b],
            qrel_a=qrel[a],
            qrel_b=qrel[b],
        )
        # Row-by-row FK and uniqueness checks would cost queries per contest; the
        # ids come from rows just read and the database constraints guard the rest.
        contest.full_clean(
            exclude=["study", "query", "system_a", "system_b"],
            validate_unique=False,
            validate_constraints=False,
        )
        contests.append(contest)
        lists.append((source.lists[a], source.lists[b]))
    Contest.objects.bulk_create(contests)
    entries = []
    for contest, (list_a, list_b) in zip(contests, lists, strict=True):
        rank_a = {d: r for r, d in enumerate(list_a, 1)}
        rank_b = {d: r for r, d in enumerate(list_b, 1)}
        for doc in sampling.union(list_a, list_b):
            entries.append(
                ContestDocument(
                    contest=contest,
                    document_id=doc,
                    rank_a=rank_a.get(doc),
                    rank_b=rank_b.get(doc),
                )
            )
    ContestDocument.objects.bulk_create(entries, batch_size=2000)
    if open_now:
        study_open(study=study)
    return study


@transaction.atomic
def study_open(*, study: Study) -> Study:
    """Open (or reopen) a study: annotators of it may now receive contests."""
    if not Contest.objects.filter(study=study).exists():
        raise ApplicationError("a study without contests cannot be opened")
    study.status = StudyStatus.OPEN
    study.opened_at = study.opened_at or timezone.now()
    study.closed_at = None
    study.full_clean()
    study.save(update_fields=["status", "opened_at", "closed_at"])
    # Pre-registration: the first opening freezes the analysis plan (issue 14).
    return study_plan_register(study=study)


@transaction.atomic
def study_close(*, study: Study) -> Study:
    """Close a study: no new contests, drafts and submissions refused until reopened."""
    study.status = StudyStatus.CLOSED
    study.closed_at = timezone.now()
    study.full_clean()
    study.save(update_fields=["status", "closed_at"])
    return study
