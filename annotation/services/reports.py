"""Study reports: the study's rows as release tables, and the analysis of tables.

One path for both sources: ``study_tables`` turns the database rows of a study into
the release tables (``release_format.SCHEMA``), ``analysis_inputs`` turns tables
(from the database or read back from a release) into the frozen dataclasses of
``annotation.analysis``. So a report from a release equals the report from the
database exactly, floats included (JSON keeps every digit).
"""

from __future__ import annotations

import hashlib
import hmac
from collections import defaultdict
from collections.abc import Collection, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model

from benchmarks.models import Qrel
from calibration.models import DocumentAbility
from rcp_platform.exceptions import ApplicationError
from rcp_platform.keys import weak_key_reason

from .. import release_format, report_sections, selectors
from ..analysis import Annotation, Contest, StudyConfig, annotator_pick, study_report
from ..analysis.picks import TIE_MARGIN
from ..analysis.rules import VERDICT_RULES
from ..models import (
    AnnotatorRandomId,
    Assignment,
    AssignmentStatus,
    ContestDocument,
    Grade,
    Study,
)
from ..models import Contest as ContestRow
from .annotators import annotator_random_id_ensure

Tables = dict[str, list[dict[str, Any]]]


def annotator_hash(*, study_id: int, random_id: str, key: str) -> str:
    """HMAC-SHA256(key, "study:random id"), 16 hex characters: stable within a study,
    unrelated across studies, one-way without the key, and not enumerable with it
    (the random id is 32 random bytes, see ``AnnotatorRandomId``)."""
    message = f"{study_id}:{random_id}".encode()
    return hmac.new(key.encode(), message, hashlib.sha256).hexdigest()[:16]


def release_key() -> str:
    """``RELEASE_HASH_KEY``; ApplicationError when it is missing, shorter than 32
    random bytes, a known placeholder or not random-looking (also with DEBUG)."""
    key = getattr(settings, "RELEASE_HASH_KEY", "") or ""
    problem = weak_key_reason(key)
    if problem:
        raise ApplicationError(
            f"RELEASE_HASH_KEY {problem}: releases need a secret key of at least 32 "
            "random bytes to hash annotator ids. Set it in .env, e.g. to the output of "
            'python -c "import secrets; print(secrets.token_urlsafe(48))" '
            "(`make run` generates one when it is missing)."
        )
    return key


def study_pseudonyms(*, study: Study, key: str | None = None) -> dict[int, str]:
    """Annotator user id -> the name used in reports and releases: the release hash
    with ``key`` (default RELEASE_HASH_KEY, so DB and release reports match), else
    ``user-<id>`` when no usable key is set. Creates a missing random id (accounts
    made before random ids existed get theirs from the migration)."""
    ids = list(
        Assignment.objects.filter(contest__study=study)
        .values_list("annotator_id", flat=True)
        .distinct()
    )
    if key is None:
        key = getattr(settings, "RELEASE_HASH_KEY", "") or ""
        if weak_key_reason(key):
            return {i: f"user-{i}" for i in ids}
    random_ids = dict(
        AnnotatorRandomId.objects.filter(user_id__in=ids).values_list(
            "user_id", "value"
        )
    )
    for i in set(ids) - set(random_ids):
        random_ids[i] = annotator_random_id_ensure(user=get_user_model()(pk=i))
    return {
        i: annotator_hash(study_id=study.pk, random_id=random_ids[i], key=key)
        for i in ids
    }


def _float(value: float | None) -> float | None:
    return None if value is None else float(value)


def study_tables(
    *,
    study: Study,
    pseudonyms: Mapping[int, str],
    include_text: bool = False,
) -> Tables:
    """The release tables of a study, from submitted assignments only (read-only).

    A review is valid unless its annotator was excluded (``Assignment.valid``);
    invalid reviews stay in the tables, marked (``reviews.valid`` and
    ``grades.valid_review``), so readers can redo the analysis either way.

    Contests carry both lists, the displayed union and design metrics; documents
    the fit's gains/abilities and the qrels; grades the raw answers, grade, within-
    grade order and seconds. ``reviews``/``verdicts`` and the shown margins come from
    the analysis (``tables_complete``). No names, comments or times are read.
    """
    contests = list(
        ContestRow.objects.filter(study=study)
        .select_related("query__dataset", "system_a", "system_b")
        .order_by("position")
    )
    entries = selectors.contest_documents(study=study)
    rows: list[dict[str, Any]] = []
    keys: set[tuple[int, int]] = set()
    for c in contests:
        shown = entries[c.pk]
        rows.append(
            {
                "contest_id": c.position,
                "design_cell": c.cell,
                "dataset": c.query.dataset.name,
                "query_id": c.query.external_id,
                "query_text": c.query.text if include_text else None,
                "system_a": c.system_a.name,
                "system_b": c.system_b.name,
                "list_a": [
                    e.document.external_id
                    for e in sorted(
                        (e for e in shown if e.rank_a), key=lambda e: e.rank_a
                    )
                ],
                "list_b": [
                    e.document.external_id
                    for e in sorted(
                        (e for e in shown if e.rank_b), key=lambda e: e.rank_b
                    )
                ],
                "displayed": [e.document.external_id for e in shown],
                "rcp_ndcg_a": c.rcp_a,
                "rcp_ndcg_b": c.rcp_b,
                "qrel_ndcg_a": c.qrel_a,
                "qrel_ndcg_b": c.qrel_b,
            }
        )
        keys |= {(c.query_id, e.document_id) for e in shown}
    documents = _document_rows(study, keys, include_text)
    grades = []
    valid: dict[tuple[int, str], bool] = {}
    position = {c.pk: c.position for c in contests}
    for g in Grade.objects.filter(
        assignment__contest__study=study,
        assignment__status=AssignmentStatus.SUBMITTED,
    ).values_list(
        "assignment__contest_id",
        "document__external_id",
        "assignment__annotator_id",
        "rubric__version",
        "answers",
        "grade",
        "order",
        "seconds",
        "assignment__valid",
    ):
        contest_id, doc, user_id, version, answers, grade, order, seconds, ok = g
        valid[position[contest_id], pseudonyms[user_id]] = ok
        grades.append(
            {
                "contest_id": position[contest_id],
                "doc_id": doc,
                "annotator": pseudonyms[user_id],
                "rubric_version": version,
                "answers": answers,
                "grade": grade,
                "order": order,
                "seconds": float(seconds),
                "valid_review": ok,
            }
        )
    grades.sort(key=lambda r: (r["contest_id"], r["annotator"], r["doc_id"]))
    reviews = sorted(
        {(r["contest_id"], r["annotator"]) for r in grades},
    )
    return {
        "contests": rows,
        "documents": documents,
        "grades": grades,
        "reviews": [
            {"contest_id": c, "annotator": a, "pick": None, "valid": valid[c, a]}
            for c, a in reviews
        ],
        "verdicts": [],
    }


def _document_rows(
    study: Study, keys: set[tuple[int, int]], include_text: bool
) -> list[dict[str, Any]]:
    query_ids = {q for q, _d in keys}
    abilities = {
        (q, d): (gain, bt, theta)
        for q, d, gain, bt, theta in DocumentAbility.objects.filter(
            fit=study.fit, query_id__in=query_ids
        ).values_list("query_id", "document_id", "gain", "theta_bt", "theta")
        if (q, d) in keys
    }
    qrels = {
        (q, d): grade
        for q, d, grade in Qrel.objects.filter(query_id__in=query_ids).values_list(
            "query_id", "document_id", "grade"
        )
        if (q, d) in keys
    }
    docs = {
        (q, d): (dataset, qext, dext, title, text)
        for q, d, dataset, qext, dext, title, text in ContestDocument.objects.filter(
            contest__study=study
        ).values_list(
            "contest__query_id",
            "document_id",
            "contest__query__dataset__name",
            "contest__query__external_id",
            "document__external_id",
            "document__title",
            "document__text",
        )
    }
    rows = []
    for key in keys:
        dataset, qext, dext, title, text = docs[key]
        gain, bt, theta = abilities.get(key, (None, None, None))
        rows.append(
            {
                "dataset": dataset,
                "query_id": qext,
                "doc_id": dext,
                "gain": _float(gain),
                "qrel": _float(qrels.get(key)),
                "theta_bt": _float(bt),
                "theta": _float(theta),
                "title": title if include_text else None,
                "text": text if include_text else None,
            }
        )
    rows.sort(key=lambda r: (r["dataset"], r["query_id"], r["doc_id"]))
    return rows


def tables_subset(tables: Tables, *, exclude_systems: Collection[str] = ()) -> Tables:
    """The tables without contests involving any of ``exclude_systems`` (by name)."""
    if not exclude_systems:
        return tables
    drop = {
        c["contest_id"]
        for c in tables["contests"]
        if c["system_a"] in exclude_systems or c["system_b"] in exclude_systems
    }
    return {
        name: [r for r in rows if r.get("contest_id") not in drop]
        if name != "documents"
        else rows
        for name, rows in tables.items()
    }


def analysis_inputs(
    tables: Tables,
    *,
    k: int,
    verdict_rule: str = "majority",
    focus_system: str = "",
    severity: bool = False,
) -> tuple[list[Contest], list[Annotation], StudyConfig]:
    """Release tables -> (contests, annotations, config) for ``study_report``.

    Cluster key = ``dataset|query_id``; an unjudged document has no qrel, a document
    without a gain counts as gain 0 (as in the metrics). Reviews marked invalid are
    passed as invalid annotations.
    """
    docs = {(d["dataset"], d["query_id"], d["doc_id"]): d for d in tables["documents"]}
    contests = []
    for c in tables["contests"]:
        shown = [docs[c["dataset"], c["query_id"], d] for d in c["displayed"]]
        contests.append(
            Contest(
                contest_id=str(c["contest_id"]),
                query_id=f"{c['dataset']}|{c['query_id']}",
                list_a=tuple(c["list_a"]),
                list_b=tuple(c["list_b"]),
                displayed=tuple(c["displayed"]),
                gains={d["doc_id"]: d["gain"] or 0.0 for d in shown},
                qrels={d["doc_id"]: d["qrel"] for d in shown if d["qrel"] is not None},
                bt_raw={
                    d["doc_id"]: d["theta_bt"]
                    for d in shown
                    if d["theta_bt"] is not None
                },
                calibrated={
                    d["doc_id"]: d["theta"] for d in shown if d["theta"] is not None
                },
                design_cell=c["design_cell"],
                dataset=c["dataset"],
                system_a=c["system_a"],
                system_b=c["system_b"],
            )
        )
    by_review: dict[tuple[int, str], list[dict[str, Any]]] = defaultdict(list)
    for g in tables["grades"]:
        by_review[g["contest_id"], g["annotator"]].append(g)
    valid = {(r["contest_id"], r["annotator"]): r["valid"] for r in tables["reviews"]}
    annotations = [
        Annotation(
            contest_id=str(contest_id),
            annotator=annotator,
            grades={g["doc_id"]: g["grade"] for g in rows},
            within_order={g["doc_id"]: g["order"] for g in rows if g["order"]},
            seconds={g["doc_id"]: g["seconds"] for g in rows},
            answers={g["doc_id"]: g["answers"] for g in rows},
            valid=valid.get((contest_id, annotator), True),
        )
        for (contest_id, annotator), rows in sorted(by_review.items())
    ]
    config = StudyConfig(
        k=k, verdict_rule=verdict_rule, focus_system=focus_system, severity=severity
    )
    return contests, annotations, config


def tables_report(
    tables: Tables,
    *,
    k: int,
    exclude_systems: Collection[str] = (),
    verdict_rule: str = "majority",
    focus_system: str = "",
    draw_depth: int | None = None,
    severity: bool = False,
) -> dict[str, Any]:
    """``study_report`` of (a subset of) release tables, with the subset recorded.

    When some reviews are invalid (excluded annotators) the report is over the valid
    ones, and ``with_excluded`` holds the main results counting every review, so
    the effect of the exclusion is shown beside (``excluded_annotators`` names them).
    ``verdict_rule`` is the study's setting (``rules.VERDICT_RULES``); ``focus_system``
    names the system whose slices the inference section adds (ApplicationError when
    no contest involves it); ``draw_depth`` (the study's ``metric_k``) labels
    ``inference.cells_by_depth``.
    """
    if verdict_rule not in VERDICT_RULES:
        raise ApplicationError(
            f"unknown verdict rule {verdict_rule!r}; use one of {', '.join(VERDICT_RULES)}"
        )
    subset = tables_subset(tables, exclude_systems=exclude_systems)
    if focus_system and not any(
        focus_system in (c["system_a"], c["system_b"]) for c in subset["contests"]
    ):
        raise ApplicationError(f"no contest of this report involves {focus_system!r}")
    contests, annotations, config = analysis_inputs(
        subset,
        k=k,
        verdict_rule=verdict_rule,
        focus_system=focus_system,
        severity=severity,
    )
    try:
        report = study_report(contests, annotations, config=config)
        invalid = [a for a in annotations if not a.valid]
        if invalid:
            everyone = [replace(a, valid=True) for a in annotations]
            report["with_excluded"] = _main_results(
                study_report(contests, everyone, config=replace(config, severity=False))
            )
            report["excluded_annotators"] = sorted({a.annotator for a in invalid})
    except ValueError as exc:
        raise ApplicationError(f"cannot analyse this study: {exc}") from exc
    report["subset"] = {"exclude_systems": sorted(exclude_systems)}
    report["inference"]["cells_by_depth"]["draw_depth"] = draw_depth
    return report


# The headline figures shown side by side with and without excluded annotators.
MAIN_RESULT_KEYS = (
    "reviews",
    "annotators",
    "verdicts",
    "verdict_classes",
    "main",
    "disagreements",
    "label_auc",
    "krippendorff_alpha",
    "pick_agreement",
)


def _main_results(report: dict[str, Any]) -> dict[str, Any]:
    return {key: report[key] for key in MAIN_RESULT_KEYS if key in report}


def tables_complete(
    tables: Tables, *, k: int, verdict_rule: str = "majority"
) -> Tables:
    """Fill the analysis columns of the tables: shown margins and winners of each
    contest, every annotator's pick, and the verdicts (from the whole study, under
    the study's verdict rule)."""
    contests, annotations, config = analysis_inputs(
        tables, k=k, verdict_rule=verdict_rule
    )
    report = study_report(contests, annotations, config=config)
    rows = {int(r["contest_id"]): r for r in report["per_contest"]}
    for c in tables["contests"]:
        r = rows[c["contest_id"]]
        c["rcp_margin_shown"] = r["rcp_margin"]
        c["qrel_margin_shown"] = r["qrel_margin"]
        c["rcp_winner_shown"] = r["rcp_winner"]
        c["qrel_winner_shown"] = r["qrel_winner"]
    by_id = {c.contest_id: c for c in contests}
    picks = {
        (int(a.contest_id), a.annotator): annotator_pick(
            by_id[a.contest_id].list_a,
            by_id[a.contest_id].list_b,
            a.grades,
            k=config.k,
            tie_margin=TIE_MARGIN,
            within_order=a.within_order,
            displayed=by_id[a.contest_id].displayed,
        ).choice
        for a in annotations
    }
    for review in tables["reviews"]:
        review["pick"] = picks[review["contest_id"], review["annotator"]]
    tables["verdicts"] = [
        {
            "contest_id": int(r["contest_id"]),
            "picks_a": r["picks"]["A"],
            "picks_b": r["picks"]["B"],
            "picks_tie": r["picks"]["tie"],
            "verdict": r["verdict"],
            "rcp_winner_shown": r["rcp_winner"],
            "qrel_winner_shown": r["qrel_winner"],
            "class": r["class"],
        }
        for r in report["per_contest"]
    ]
    return tables


def study_verdict_rule(study: Study) -> str:
    """The study's verdict rule setting (``design["verdict_rule"]``, default
    "majority", the reference's strict majority)."""
    return str((study.design or {}).get("verdict_rule") or "majority")


def study_report_build(
    *,
    study: Study,
    exclude_systems: Collection[str] = (),
    focus_system: str = "",
    severity: bool = False,
) -> tuple[dict[str, Any], dict[str, str]]:
    """The report of a study (optionally without contests of some systems, with the
    slices of a focus system) and the pseudonym -> username map for staff pages.
    Annotator flags are keyed by pseudonym, never by username: only staff views
    translate them."""
    pseudonyms = study_pseudonyms(study=study)
    tables = study_tables(study=study, pseudonyms=pseudonyms)
    report = tables_report(
        tables,
        k=study.depth,
        exclude_systems=exclude_systems,
        verdict_rule=study_verdict_rule(study),
        focus_system=focus_system,
        draw_depth=(study.design or {}).get("metric_k"),
        severity=severity,
    )
    report.update(report_sections.sections_build(study=study, report=report))
    users = dict(
        get_user_model()
        .objects.filter(pk__in=list(pseudonyms))
        .values_list("pk", "username")
    )
    names = {pseudonyms[i]: users.get(i, str(i)) for i in pseudonyms}
    return report, names


def release_report(
    *,
    folder: Path,
    exclude_systems: Collection[str] = (),
    focus_system: str = "",
    severity: bool = False,
) -> dict[str, Any]:
    """The report of a release folder alone (verified first; ApplicationError
    listing the problems otherwise), under the verdict rule its design records."""
    try:
        manifest, tables = release_format.read(Path(folder))
    except release_format.ReleaseError as exc:
        raise ApplicationError(
            "invalid release: " + "; ".join(exc.errors[:10])
        ) from exc
    k = int(manifest["analysis"]["k"])
    design = manifest.get("design") or {}
    return tables_report(
        tables,
        k=k,
        exclude_systems=exclude_systems,
        verdict_rule=str(design.get("verdict_rule") or "majority"),
        focus_system=focus_system,
        draw_depth=design.get("metric_k"),
        severity=severity,
    )
