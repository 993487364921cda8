"""Pre-registration and interim looks (issue 14).

A study's analysis plan (primary endpoint, verdict rule, slices, alpha, planned
contests, stopping rule) is editable while it is a draft and frozen into
``Study.registered_plan`` when it first opens. Every whole-study report requested
while the study is open, over more complete contests than the last look, is recorded
as a ``StudyLook``. With a group-sequential stopping rule (O'Brien-Fleming or Pocock
alpha spending, ``analysis.sequential``) the report says whether a boundary was
crossed; without one it labels its numbers interim and uncorrected. The report shows
the registered plan and every deviation from it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from django.db import transaction
from django.utils import timezone

from rcp_platform.exceptions import ApplicationError, ConflictError

from ..analysis import json_safe
from ..analysis.sequential import SPENDING, boundaries, spent, wald_z
from ..models import Contest, Study, StudyLook, StudyStatus
from .reports import study_report_build, study_verdict_rule

PLAN_KEYS = (
    "primary_endpoint",
    "verdict_rule",
    "slices",
    "alpha",
    "planned_contests",
    "stopping_rule",
)
STOPPING_RULES = ("fixed", *SPENDING)
ENDPOINTS = ("main", "disagreements")


def study_plan_effective(study: Study) -> dict[str, Any]:
    """The plan that holds: the registered one once the study opened, otherwise the
    draft plan over its defaults (main measure, the study's verdict rule, slices all
    and disagreements, alpha 0.05, every contest, fixed sample)."""
    if study.registered_plan:
        return dict(study.registered_plan)
    plan: dict[str, Any] = {
        "primary_endpoint": "main",
        "verdict_rule": study_verdict_rule(study),
        "slices": ["all", "disagreements"],
        "alpha": 0.05,
        "planned_contests": Contest.objects.filter(study=study).count(),
        "stopping_rule": {"kind": "fixed"},
    }
    plan.update(study.analysis_plan or {})
    return plan


def _validated(plan: Mapping[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(plan) - set(PLAN_KEYS))
    if unknown:
        raise ApplicationError(f"unknown plan entry {unknown[0]!r}")
    if plan.get("primary_endpoint", "main") not in ENDPOINTS:
        raise ApplicationError(
            f"primary endpoint must be one of {', '.join(ENDPOINTS)}"
        )
    alpha = plan.get("alpha", 0.05)
    if not isinstance(alpha, int | float) or not 0 < alpha < 1:
        raise ApplicationError("alpha must lie strictly between 0 and 1")
    planned = plan.get("planned_contests", 1)
    if not isinstance(planned, int) or planned < 1:
        raise ApplicationError("planned contests must be a positive integer")
    rule = dict(plan.get("stopping_rule") or {"kind": "fixed"})
    if rule.get("kind") not in STOPPING_RULES:
        raise ApplicationError(
            f"stopping rule must be one of {', '.join(STOPPING_RULES)}"
        )
    slices = plan.get("slices", [])
    if not isinstance(slices, list) or not all(isinstance(s, str) for s in slices):
        raise ApplicationError("slices must be a list of slice names")
    return {**plan, "stopping_rule": rule}


@transaction.atomic
def study_analysis_plan_set(*, study: Study, plan: Mapping[str, Any]) -> Study:
    """Set (part of) a draft study's analysis plan; ConflictError once it opened
    (the registered plan is frozen: changes are deviations, shown in the report).
    ``verdict_rule`` is the study's setting and cannot be planned separately."""
    study = Study.objects.select_for_update().get(pk=study.pk)
    if study.status != StudyStatus.DRAFT or study.registered_plan:
        raise ConflictError("the analysis plan is frozen once the study has opened")
    if "verdict_rule" in plan:
        raise ApplicationError("the verdict rule is a study setting (create_study)")
    study.analysis_plan = _validated({**(study.analysis_plan or {}), **plan})
    study.full_clean()
    study.save(update_fields=["analysis_plan"])
    return study


def study_plan_register(*, study: Study) -> Study:
    """Freeze the effective plan into ``registered_plan`` (first opening only)."""
    if study.registered_plan:
        return study
    study.registered_plan = _validated(study_plan_effective(study))
    study.registered_at = timezone.now()
    study.full_clean()
    study.save(update_fields=["registered_plan", "registered_at"])
    return study


def _complete(report: dict[str, Any], per_contest: int) -> int:
    return sum(sum(r["picks"].values()) >= per_contest for r in report["per_contest"])


def _endpoint(report: dict[str, Any], endpoint: str) -> tuple[list[bool], list[str]]:
    """Hits and clusters of the primary endpoint from the per-contest rows."""
    rows = report["per_contest"]
    if endpoint == "disagreements":
        rows = [
            r
            for r in rows
            if r["rcp_winner"] in ("A", "B")
            and r["qrel_winner"] in ("A", "B")
            and r["rcp_winner"] != r["qrel_winner"]
        ]
    counted = [r for r in rows if r["class"] in ("rcp", "qrel")]
    return [r["class"] == "rcp" for r in counted], [r["query_id"] for r in counted]


def _fingerprint(report: dict[str, Any]) -> str:
    rows = [(r["contest_id"], r["picks"], r["verdict"]) for r in report["per_contest"]]
    return hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()


@transaction.atomic
def study_look_record(
    *, study: Study, report: dict[str, Any], plan: Mapping[str, Any]
) -> StudyLook | None:
    """Record an interim look when the open study has more complete contests than at
    its last look (None otherwise). Looks are numbered 1, 2, ... per study."""
    Study.objects.select_for_update().filter(pk=study.pk).first()
    complete = _complete(report, study.per_contest)
    last = StudyLook.objects.filter(study=study).order_by("-number").first()
    if complete == 0 or (last and complete <= last.complete_contests):
        return None
    hits, clusters = _endpoint(report, plan["primary_endpoint"])
    key = "main" if plan["primary_endpoint"] == "main" else "disagreements"
    chance = report[key]["chance"]
    look = StudyLook(
        study=study,
        number=(last.number + 1) if last else 1,
        fingerprint=_fingerprint(report),
        complete_contests=complete,
        information=min(1.0, complete / plan["planned_contests"]),
        k=sum(hits),
        n=len(hits),
        rate=sum(hits) / len(hits) if hits else None,
        chance=chance,
        z=wald_z(hits, clusters, chance),
    )
    look.full_clean()
    look.save()
    return look


def sequential_section(
    *,
    plan: Mapping[str, Any],
    looks: Sequence[StudyLook],
    final: dict[str, Any] | None,
) -> dict[str, Any]:
    """Looks with their information fraction, z, boundary and crossing; ``final``
    (z and information of a closed study's report) is the last analysis, at t = 1,
    spending the rest of alpha. Without a spending rule: labels only."""
    kind = plan["stopping_rule"]["kind"]
    alpha = float(plan["alpha"])
    rows = [
        {
            "look": x.number,
            "at": x.created_at.isoformat(),
            "complete_contests": x.complete_contests,
            "information": x.information,
            "k": x.k,
            "n": x.n,
            "rate": x.rate,
            "chance": x.chance,
            "z": x.z,
        }
        for x in looks
    ]
    interim = [r for r in rows if r["information"] < 1.0]
    if final is None:  # a look at full information while open is the last analysis
        final = next((r for r in rows if r["information"] >= 1.0), None)
    else:
        final = {"look": "final", **final}
    analyses = interim + ([final] if final else [])
    if kind == "fixed":
        for r in analyses:
            r.update(boundary=None, alpha_spent=None, crossed=None)
        return {
            "kind": kind,
            "corrected": False,
            "label": "final, fixed sample" if final else "interim, uncorrected",
            "looks": analyses,
            "crossed": None,
        }
    fractions = [r["information"] for r in interim] + ([1.0] if final else [])
    bounds = boundaries(fractions, alpha=alpha, kind=kind) if fractions else []
    crossed_at = None
    for r, c, t in zip(analyses, bounds, fractions, strict=True):
        r["boundary"] = c
        r["alpha_spent"] = spent(t, alpha, kind)
        r["crossed"] = r["z"] is not None and abs(r["z"]) >= c
        if r["crossed"] and crossed_at is None:
            crossed_at = r["look"]
    return {
        "kind": kind,
        "corrected": True,
        "label": "group-sequential",
        "looks": analyses,
        "crossed": crossed_at is not None,
        "crossed_at": crossed_at,
    }


def _deviations(
    study: Study,
    plan: Mapping[str, Any],
    report: dict[str, Any],
    exclude_systems: Collection[str],
    complete: int,
    crossed: bool | None,
) -> list[str]:
    out = []
    if not study.registered_plan:
        out.append("no registered plan: the study has not been opened")
    rule = report["inference"]["verdict_rule"]
    if rule != plan["verdict_rule"]:
        out.append(
            f"verdict rule {rule} instead of the registered {plan['verdict_rule']}"
        )
    if report["contests"] != plan["planned_contests"] and not exclude_systems:
        out.append(
            f"{report['contests']} contests instead of the planned "
            f"{plan['planned_contests']}"
        )
    if study.status == StudyStatus.CLOSED and complete < plan["planned_contests"]:
        stop = " after crossing a boundary" if crossed else ""
        out.append(
            f"closed with {complete} of {plan['planned_contests']} planned contests "
            f"complete{stop}"
        )
    looks = StudyLook.objects.filter(study=study, information__lt=1.0).count()
    if looks and plan["stopping_rule"]["kind"] == "fixed":
        out.append(
            f"{looks} interim look(s) under a fixed-sample plan (numbers uncorrected)"
        )
    if exclude_systems:
        out.append(
            "subset not in the plan: without " + ", ".join(sorted(exclude_systems))
        )
    extra = [s for s in report["inference"]["slices"] if s not in set(plan["slices"])]
    if extra:
        out.append(f"{len(extra)} slices beyond the registered ones are exploratory")
    return out


def study_report_requested(
    *,
    study: Study,
    exclude_systems: Collection[str] = (),
    focus_system: str = "",
    severity: bool = False,
) -> tuple[dict[str, Any], dict[str, str]]:
    """``study_report_build`` plus ``plan`` (registered plan, deviations) and
    ``sequential`` (looks, boundaries, interim labels). A whole-study report of an
    open study records an interim look (``study_look_record``)."""
    report, names = study_report_build(
        study=study,
        exclude_systems=exclude_systems,
        focus_system=focus_system,
        severity=severity,
    )
    plan = study_plan_effective(study)
    whole = not exclude_systems
    if study.status == StudyStatus.OPEN and whole:
        study_look_record(study=study, report=report, plan=plan)
    complete = _complete(report, study.per_contest)
    final = None
    if study.status == StudyStatus.CLOSED and whole and complete:
        hits, clusters = _endpoint(report, plan["primary_endpoint"])
        key = "main" if plan["primary_endpoint"] == "main" else "disagreements"
        final = {
            "complete_contests": complete,
            "information": min(1.0, complete / plan["planned_contests"]),
            "k": sum(hits),
            "n": len(hits),
            "rate": sum(hits) / len(hits) if hits else None,
            "chance": report[key]["chance"],
            "z": wald_z(hits, clusters, report[key]["chance"]),
        }
    looks = list(StudyLook.objects.filter(study=study).order_by("number"))
    seq = sequential_section(plan=plan, looks=looks, final=final)
    seq["status"] = str(study.status)
    seq["interim"] = study.status == StudyStatus.OPEN
    report["sequential"] = json_safe(seq)
    report["plan"] = json_safe(
        {
            "registered": study.registered_plan,
            "registered_at": study.registered_at.isoformat()
            if study.registered_at
            else None,
            "effective": plan,
            "deviations": _deviations(
                study, plan, report, exclude_systems, complete, seq.get("crossed")
            ),
        }
    )
    return report, names
