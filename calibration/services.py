"""Writes of the calibration app: fits from judgment windows, imported gains, exports.

Rows become arrays here (``values_list``), ``rcp`` does the math, and the
results go back as bulk rows. A fit is written in one transaction: a failed fit leaves
nothing behind but its own ``failed`` status row (Celery path).
See CALIBRATION.md beside this module for the data flow.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import IO, Any

import numpy as np
from django.conf import settings
from django.db import connection, models, transaction
from django.db.models import Count, Q, TextField
from django.db.models.functions import Cast
from django.utils import timezone

from benchmarks.models import Dataset, Document, PoolEntry, Qrel, Query
from judging.models import JudgmentWindow, Phase, Stage, WindowStatus
from rcp.fit import Calibration, CalibrationInputError, Judgments
from rcp.fit import calibrate as rcp_calibrate
from rcp_platform.exceptions import ApplicationError

from .models import (
    CalibrationFit,
    DocumentAbility,
    FitMode,
    FitSource,
    FitStatus,
    QueryCalibration,
    RequestedMode,
)

ProgressFn = Callable[[str, int, int], None]
CRITERIA = ["C1", "C2", "C3", "C4", "C5"]
BATCH_SIZE = 5000
READ_CHUNK = 5000  # windows decoded per json.loads
DEFAULT_MAXITER = 100  # Newton iterations of the 2PL (converges in ~10)
HEARTBEAT_SECONDS = 5.0
EXPORT_COLUMNS = ["query_id", "doc_id", "theta", "gain", "count_gain", "qrel"]


def _noop(stage: str, done: int, total: int) -> None:
    return None


def _mode_value(mode: str) -> str:
    """Accept the CLI spelling ``rubric-only`` for ``rubric_only``."""
    value = mode.replace("-", "_")
    if value not in RequestedMode.values:
        raise ApplicationError(
            f"unknown mode {mode!r}; choose auto, tournament or rubric-only"
        )
    return value


# ---------------------------------------------------------------------------- fits


@dataclass
class _Read:
    """Judgment windows of a suite as ``rcp.fit.Judgments`` plus what the rows need
    to be written back: query pks/labels per query index, document pk/external id
    per document row, window counts per query."""

    family: str
    judgments: Judgments
    query_pks: list[int]
    labels: list[str]
    doc_pks: np.ndarray
    doc_ext: list[str]
    counts: dict[str, np.ndarray]
    malformed: int
    queries_without_windows: int


def _chunks(iterator: Iterable[Any], size: int) -> Iterable[list[Any]]:
    batch: list[Any] = []
    for item in iterator:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def _choose_family(windows: Any, family: str | None, names: list[str]) -> str:
    families = sorted(windows.order_by().values_list("family", flat=True).distinct())
    if not families:
        raise ApplicationError(
            f"no completed judgment windows for {', '.join(names)}; run `judge` or "
            "`import_judgments` first (or `import_gains` for released labels)"
        )
    if family is None:
        if len(families) > 1:
            raise ApplicationError(
                f"windows of several judge families ({', '.join(families)}) never "
                "pool; choose one with --family"
            )
        return families[0]
    if family not in families:
        raise ApplicationError(
            f"no windows of family {family!r}; families present: {', '.join(families)}"
        )
    return family


def _read_judgments(
    datasets: Sequence[Dataset], family: str | None, progress: ProgressFn
) -> _Read:
    """Valid done windows of one family as flat arrays (documents indexed per query
    by external id, queries in label order); invalid ones only counted.

    Runs outside any transaction: each read is its own statement, so imports and
    judging keep writing meanwhile (SQLite runs in WAL mode).
    """
    names = [d.name for d in datasets]
    suite = len(datasets) > 1
    ds_name = {d.pk: d.name for d in datasets}
    done = JudgmentWindow.objects.filter(
        query__dataset__in=datasets, status=WindowStatus.DONE
    )
    family = _choose_family(done, family, names)
    done = done.filter(family=family)
    labels = {
        pk: f"{ds_name[ds]}||{ext}" if suite else ext
        for pk, ds, ext in Query.objects.filter(dataset__in=datasets).values_list(
            "id", "dataset_id", "external_id"
        )
    }
    raw_counts: dict[int, dict[str, int]] = {}
    for qid, stage, valid, phase, n in (
        done.order_by()
        .values_list("query_id", "stage", "valid", "phase")
        .annotate(n=Count("id"))
    ):
        c = raw_counts.setdefault(qid, {})
        key = f"{stage}_{'valid' if valid else 'invalid'}"
        c[key] = c.get(key, 0) + n
        if not valid and stage == Stage.TOURNAMENT and phase == Phase.ADAPTIVE:
            c["adaptive_invalid"] = c.get("adaptive_invalid", 0) + n
    ordered = sorted(raw_counts, key=lambda k: labels[k])
    q_index = {pk: j for j, pk in enumerate(ordered)}
    total = sum(
        c.get("tournament_valid", 0) + c.get("rubric_valid", 0)
        for c in raw_counts.values()
    )

    # Windows are read in chunks as raw JSON text and decoded a chunk at a time
    # (one json.loads per chunk, not three per window): reading is most of a large
    # calibration's time. Documents are coded per query afterwards, vectorised.
    t_query: list[int] = []
    t_size: list[int] = []
    t_docs: list[str] = []
    t_score: list[float] = []
    r_query: list[int] = []
    r_docs: list[str] = []
    r_answer_chunks: list[np.ndarray] = []
    malformed = 0
    n_criteria: int | None = None
    seen = 0
    rows = (
        done.filter(valid=True)
        .order_by("query_id", "stage", "seq")
        .annotate(
            d=Cast("doc_ids", TextField()),
            s=Cast("scores", TextField()),
            a=Cast("answers", TextField()),
        )
        .values_list("query_id", "stage", "d", "s", "a")
        .iterator(chunk_size=READ_CHUNK)
    )
    for chunk in _chunks(rows, READ_CHUNK):
        seen += len(chunk)
        qids, stages, d_text, s_text, a_text = zip(*chunk, strict=True)
        docs = json.loads("[" + ",".join(t or "null" for t in d_text) + "]")
        tour = [i for i, st in enumerate(stages) if st == Stage.TOURNAMENT]
        rub = [i for i, st in enumerate(stages) if st != Stage.TOURNAMENT]
        if tour:
            scores = json.loads("[" + ",".join(s_text[i] or "null" for i in tour) + "]")
            for i, sc in zip(tour, scores, strict=True):
                d = docs[i]
                if not d or not isinstance(sc, list) or len(sc) != len(d):
                    malformed += 1
                    continue
                t_query.append(q_index[qids[i]])
                t_size.append(len(d))
                t_docs.extend(str(x) for x in d)
                t_score.extend(sc)
        if rub:
            answers = json.loads("[" + ",".join(a_text[i] or "null" for i in rub) + "]")
            for i, ans in zip(rub, answers, strict=True):
                d = docs[i]
                if not d or not isinstance(ans, list) or len(ans) != len(d):
                    malformed += 1
                    continue
                try:
                    block = np.asarray(ans, dtype=np.int64)
                except (TypeError, ValueError):
                    malformed += 1
                    continue
                if n_criteria is None and block.ndim == 2:
                    n_criteria = block.shape[1]
                if (
                    block.ndim != 2
                    or block.shape[1] != n_criteria
                    or ((block != 0) & (block != 1)).any()
                ):
                    malformed += 1
                    continue
                r_query.extend([q_index[qids[i]]] * len(d))
                r_docs.extend(str(x) for x in d)
                r_answer_chunks.append(block.astype(np.int8))
        progress("windows read", seen, total)
    progress("windows read", seen, total)

    # Rows: one per distinct (query, document), numbered by query then first sight.
    codes: dict[str, int] = {}
    t_code = np.array([codes.setdefault(d, len(codes)) for d in t_docs], np.int64)
    r_code = np.array([codes.setdefault(d, len(codes)) for d in r_docs], np.int64)
    names = list(codes)
    t_q = np.repeat(np.asarray(t_query, np.int64), np.asarray(t_size, np.int64))
    r_q = np.asarray(r_query, np.int64)
    key = np.concatenate([t_q, r_q]) * max(len(codes), 1) + np.concatenate(
        [t_code, r_code]
    )
    uniq, inverse = np.unique(key, return_inverse=True)
    inverse = inverse.ravel()
    doc_query_arr = uniq // max(len(codes), 1)
    doc_code = uniq % max(len(codes), 1)
    t_doc = inverse[: t_q.size]
    r_doc = inverse[t_q.size :]
    doc_rows = {
        (int(j), names[c]): r
        for r, (j, c) in enumerate(
            zip(doc_query_arr.tolist(), doc_code.tolist(), strict=True)
        )
    }
    doc_query = doc_query_arr.tolist()

    # Document pks: the query's pool first, then the dataset's corpus.
    ds_of = dict(
        Query.objects.filter(dataset__in=datasets).values_list("id", "dataset_id")
    )
    pool: dict[int, dict[str, int]] = {}
    for qid, ext, pk in PoolEntry.objects.filter(
        query__dataset__in=datasets
    ).values_list("query_id", "document__external_id", "document_id"):
        pool.setdefault(qid, {})[ext] = pk
    missing: dict[int, set[str]] = {}
    for (j, ext), _r in doc_rows.items():
        if ext not in pool.get(ordered[j], {}):
            missing.setdefault(ds_of[ordered[j]], set()).add(ext)
    corpus: dict[int, dict[str, int]] = {}
    for ds, ext_ids in missing.items():
        wanted = sorted(ext_ids)
        for i in range(0, len(wanted), 900):  # SQLite's bound-parameter limit
            corpus.setdefault(ds, {}).update(
                Document.objects.filter(
                    dataset_id=ds, external_id__in=wanted[i : i + 900]
                ).values_list("external_id", "id")
            )
    doc_pks = np.zeros(len(doc_query), dtype=np.int64)
    doc_ext = [""] * len(doc_query)
    for (j, ext), r in doc_rows.items():
        qpk = ordered[j]
        pk = pool.get(qpk, {}).get(ext) or corpus.get(ds_of[qpk], {}).get(ext)
        if pk is None:
            raise ApplicationError(
                f"judgment windows of query {labels[qpk]!r} name document {ext!r}, "
                "which is not in its dataset"
            )
        doc_pks[r], doc_ext[r] = pk, ext

    n_q = len(ordered)
    counts = {
        key: np.array([raw_counts[pk].get(key, 0) for pk in ordered], dtype=np.int64)
        for key in (
            "tournament_valid",
            "tournament_invalid",
            "rubric_valid",
            "rubric_invalid",
            "adaptive_invalid",
        )
    }
    n_crit = n_criteria or len(CRITERIA)
    judgments = Judgments(
        n_queries=n_q,
        doc_query=doc_query_arr.astype(np.int64),
        t_size=np.asarray(t_size, dtype=np.int64),
        t_doc=t_doc.astype(np.int64),
        t_score=np.asarray(t_score, dtype=np.float64),
        r_doc=r_doc.astype(np.int64),
        r_answers=(
            np.concatenate(r_answer_chunks)
            if r_answer_chunks
            else np.zeros((0, n_crit), dtype=np.int8)
        ),
        windows=counts,
    )
    all_queries = Query.objects.filter(dataset__in=datasets).count()
    return _Read(
        family=family,
        judgments=judgments,
        query_pks=ordered,
        labels=[labels[pk] for pk in ordered],
        doc_pks=doc_pks,
        doc_ext=doc_ext,
        counts=counts,
        malformed=malformed,
        queries_without_windows=all_queries - n_q,
    )


def _fingerprint(mode: str, items: dict, query_rows: list, thetas: list) -> str:
    payload = {"mode": mode, "items": items, "queries": query_rows, "thetas": thetas}
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _finite(x: float) -> float | None:
    return float(x) if x is not None and math.isfinite(x) else None


def _verdict(cal: Calibration) -> tuple[str, str]:
    """Status and the reason shown beside it: done only when every optimiser
    converged (DESIGN: an unconverged fit is never shown as a result)."""
    if cal.converged:
        return FitStatus.DONE, ""
    opt = cal.optimizer
    reasons = []
    if not opt.get("converged", False):
        what = opt.get("message") or "the optimiser did not converge"
        reasons.append(f"2PL fit: {what}")
    bt = opt.get("bt", {})
    if bt.get("converged", 0) != bt.get("fits", 0):
        reasons.append(
            f"BT fits of {bt['fits'] - bt['converged']} queries did not converge"
        )
    return FitStatus.UNCONVERGED, "; ".join(reasons)


def _write_fit(
    fit: CalibrationFit, read: _Read, cal: Calibration, progress: ProgressFn
) -> CalibrationFit:
    """Store a computed calibration in one short transaction: items, one row per
    query and per document, diagnostics, fingerprint, final status."""
    j = read.judgments
    n_crit = cal.gamma.size
    items = {
        "criteria": CRITERIA[:n_crit]
        if n_crit <= len(CRITERIA)
        else [f"C{i + 1}" for i in range(n_crit)],
        "gamma": cal.gamma.tolist(),
        "beta": cal.beta.tolist(),
    }
    counts = read.counts
    flagged = [read.labels[q] for q in cal.flagged()]
    by_code: dict[str, list[str]] = {}
    for q, flags in enumerate(cal.query_flags):
        for code in flags:
            by_code.setdefault(code, []).append(read.labels[q])
    tot = {k: int(v.sum()) for k, v in counts.items()}
    tot_t = tot["tournament_valid"] + tot["tournament_invalid"]
    tot_r = tot["rubric_valid"] + tot["rubric_invalid"]
    status, reason = _verdict(cal)
    diagnostics = {
        "optimizer": cal.optimizer,
        **cal.diagnostics,
        "coverage": {
            "queries": j.n_queries,
            "queries_without_windows": read.queries_without_windows,
            "documents": int(j.doc_query.size),
            "uncalibrated_documents": int(np.isnan(cal.theta).sum()),
            "uncalibrated_queries": by_code.get("no_rubric", []),
            "flagged_queries": flagged,
            "flags": {code: len(qs) for code, qs in sorted(by_code.items())},
            "windows": {"tournament": tot_t, "rubric": tot_r},
            "invalid_windows": {
                "tournament": tot["tournament_invalid"],
                "rubric": tot["rubric_invalid"],
            },
            "invalid_share": {
                "tournament": tot["tournament_invalid"] / tot_t if tot_t else 0.0,
                "rubric": tot["rubric_invalid"] / tot_r if tot_r else 0.0,
            },
            "malformed_windows": read.malformed,
            "placements": int(cal.placements.sum()),
        },
    }
    per_query_docs = np.bincount(j.doc_query, minlength=j.n_queries)
    query_objs = []
    fp_queries = []
    for q, pk in enumerate(read.query_pks):
        query_objs.append(
            QueryCalibration(
                fit=fit,
                query_id=pk,
                tau=_finite(cal.tau[q]),
                alpha=_finite(cal.alpha[q]),
                has_rubric=bool(cal.query_has_rubric[q]),
                n_documents=int(per_query_docs[q]),
                tournament_windows=int(counts["tournament_valid"][q]),
                rubric_windows=int(counts["rubric_valid"][q]),
                invalid_windows=int(
                    counts["tournament_invalid"][q] + counts["rubric_invalid"][q]
                ),
                flags=list(cal.query_flags[q]),
                flagged=bool(cal.query_flags[q]),
            )
        )
        fp_queries.append([read.labels[q], _finite(cal.tau[q]), _finite(cal.alpha[q])])
    # Rows grouped by query (documents as numbered when read), as plain tuples:
    # at benchmark scale model instances cost more than the whole fit.
    order = np.argsort(j.doc_query, kind="stable")
    q_pks = np.asarray(read.query_pks, dtype=np.int64)[j.doc_query[order]].tolist()

    def column(values: np.ndarray) -> list[float | None]:
        return [v if math.isfinite(v) else None for v in values[order].tolist()]

    ability_rows = list(
        zip(
            [fit.pk] * order.size,
            q_pks,
            read.doc_pks[order].tolist(),
            column(cal.theta_bt),
            column(cal.theta_bt_se),
            column(cal.theta),
            column(cal.theta_se),
            column(cal.gain),
            column(cal.count_gain),
            cal.placements[order].astype(np.int64).tolist(),
            strict=True,
        )
    )
    fp_thetas = [
        [read.labels[j.doc_query[r]], read.doc_ext[r], _finite(cal.theta[r])]
        for r in order.tolist()
    ]
    fit.family = read.family
    fit.mode = cal.mode
    fit.items = items
    fit.diagnostics = _json_safe(diagnostics)
    fit.fingerprint = _fingerprint(cal.mode, items, fp_queries, fp_thetas)
    fit.status = status
    fit.converged = cal.converged
    fit.error = reason
    fit.finished_at = timezone.now()
    fit.full_clean()
    progress("writing rows", 0, len(ability_rows))
    with transaction.atomic():
        QueryCalibration.objects.bulk_create(query_objs, batch_size=BATCH_SIZE)
        _insert_rows(
            DocumentAbility,
            ABILITY_COLUMNS,
            ability_rows,
            lambda done: progress("writing rows", done, len(ability_rows)),
        )
        fit.save(
            update_fields=[
                "family",
                "mode",
                "items",
                "diagnostics",
                "fingerprint",
                "status",
                "converged",
                "error",
                "finished_at",
            ]
        )
    return fit


ABILITY_COLUMNS = [
    "fit",
    "query",
    "document",
    "theta_bt",
    "theta_bt_se",
    "theta",
    "theta_se",
    "gain",
    "count_gain",
    "placements",
]


def _insert_rows(
    model: type[models.Model],
    fields: list[str],
    rows: list[tuple],
    progress: Callable[[int], None],
) -> None:
    """INSERT plain tuples with ``executemany`` in batches (caller holds the
    transaction). Values must be database-ready; constraints still apply."""
    ops = connection.ops
    columns = ", ".join(ops.quote_name(model._meta.get_field(f).column) for f in fields)
    sql = (
        f"INSERT INTO {ops.quote_name(model._meta.db_table)} ({columns}) "
        f"VALUES ({', '.join(['%s'] * len(fields))})"
    )
    with connection.cursor() as cursor:
        for i in range(0, len(rows), BATCH_SIZE):
            cursor.executemany(sql, rows[i : i + BATCH_SIZE])
            progress(min(i + BATCH_SIZE, len(rows)))


def _json_safe(value: Any) -> Any:
    """NaN/inf -> None and numpy scalars -> Python, so JSON columns stay portable."""
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    if isinstance(value, np.ndarray):
        return _json_safe(value.tolist())
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _fit_new(
    *,
    datasets: Sequence[Dataset],
    mode: str,
    family: str | None,
    created_by: Any,
    status: str,
    source: str = FitSource.JUDGMENTS,
) -> CalibrationFit:
    if not datasets:
        raise ApplicationError("name at least one dataset")
    now = timezone.now()
    fit = CalibrationFit(
        source=source,
        requested_mode=_mode_value(mode),
        family=family or "",
        status=status,
        created_by=created_by if getattr(created_by, "pk", None) else None,
        started_at=now if status == FitStatus.RUNNING else None,
        heartbeat_at=now if status == FitStatus.RUNNING else None,
    )
    fit.full_clean()
    with transaction.atomic():
        fit.save()
        fit.datasets.set(datasets)
    return fit


class _Heartbeat:
    """Progress callback that also proves the fit alive: at most every
    HEARTBEAT_SECONDS it stamps ``heartbeat_at`` (its own short write)."""

    def __init__(self, fit_id: int, progress: ProgressFn) -> None:
        self.fit_id, self.progress = fit_id, progress
        self.last = time.monotonic()

    def __call__(self, stage: str, done: int, total: int) -> None:
        self.progress(stage, done, total)
        now = time.monotonic()
        if now - self.last >= HEARTBEAT_SECONDS:
            self.last = now
            CalibrationFit.objects.filter(
                pk=self.fit_id, status=FitStatus.RUNNING
            ).update(heartbeat_at=timezone.now())


def _lease() -> timedelta:
    return timedelta(seconds=float(getattr(settings, "CALIBRATION_FIT_LEASE", 300)))


def _run_fit(
    fit: CalibrationFit, progress: ProgressFn, *, maxiter: int
) -> CalibrationFit:
    """Compute outside any transaction, then write in one short transaction. Any
    exception marks the fit failed with its message (and is re-raised)."""
    beat = _Heartbeat(fit.pk, progress)
    try:
        datasets = list(fit.datasets.order_by("name"))
        read = _read_judgments(datasets, fit.family or None, beat)
        beat("2PL fit", 0, 1)
        try:
            cal = rcp_calibrate(
                read.judgments,
                mode=fit.requested_mode,  # type: ignore[arg-type]
                maxiter=maxiter,
                progress=beat,
            )
        except CalibrationInputError as exc:
            labels = read.labels
            message = str(exc)
            if "queries [" in message:  # name the queries, not their indices
                idx = [
                    int(x)
                    for x in message.split("queries [", 1)[1].split("]")[0].split(",")
                    if x.strip()
                ]
                message = message.split("(without:")[0] + (
                    f"(without: {', '.join(labels[i] for i in idx)}); judge Stage A "
                    "for them or use --mode rubric-only"
                )
            raise ApplicationError(f"calibration failed: {message}") from exc
        beat("2PL fit", 1, 1)
        return _write_fit(fit, read, cal, beat)
    except Exception as exc:
        message = exc.message if isinstance(exc, ApplicationError) else repr(exc)
        CalibrationFit.objects.filter(pk=fit.pk).update(
            status=FitStatus.FAILED,
            error=message[:5000],
            finished_at=timezone.now(),
        )
        raise


def calibration_fit(
    *,
    datasets: Sequence[Dataset],
    mode: str = RequestedMode.AUTO,
    family: str | None = None,
    created_by: Any = None,
    progress: ProgressFn | None = None,
    maxiter: int = DEFAULT_MAXITER,
) -> CalibrationFit:
    """Calibrate ``datasets`` (several = one suite with shared items) in this process.

    Creates a running fit, reads valid done windows of one judge family, fits BT
    per query then the 2PL (``rcp.fit.calibrate``) outside any transaction, then
    stores items, per-query tau/alpha/flags and per-document abilities and gains in
    one short transaction. Ends ``done`` only if every optimiser converged, else
    ``unconverged`` with the reason. On any error the fit ends ``failed`` with the
    message, and the error is raised (ApplicationError for bad input).
    """
    fits_reap_stale()
    fit = _fit_new(
        datasets=datasets,
        mode=mode,
        family=family,
        created_by=created_by,
        status=FitStatus.RUNNING,
    )
    return _run_fit(fit, progress or _noop, maxiter=maxiter)


@transaction.atomic
def calibration_fit_request(
    *,
    datasets: Sequence[Dataset],
    mode: str = RequestedMode.AUTO,
    family: str | None = None,
    created_by: Any = None,
) -> CalibrationFit:
    """Create a pending fit and queue ``calibration.tasks.calibration_fit_run`` on
    commit (long fits never run inside a web request)."""
    from . import tasks

    fit = _fit_new(
        datasets=datasets,
        mode=mode,
        family=family,
        created_by=created_by,
        status=FitStatus.PENDING,
    )
    transaction.on_commit(lambda: tasks.calibration_fit_run.delay(fit.pk))
    return fit


def fits_reap_stale(*, now: datetime | None = None) -> int:
    """Mark running fits whose heartbeat is older than the lease failed (their
    worker died); returns how many. They can be run again (``calibration_fit_retry``)."""
    now = now or timezone.now()
    stale = now - _lease()
    return CalibrationFit.objects.filter(
        Q(status=FitStatus.RUNNING)
        & (
            Q(heartbeat_at__lt=stale)
            | Q(heartbeat_at__isnull=True, started_at__lt=stale)
        )
    ).update(
        status=FitStatus.FAILED,
        error=(
            "the worker running this fit stopped sending heartbeats (lost worker?); "
            "run it again"
        ),
        finished_at=now,
    )


@transaction.atomic
def calibration_fit_retry(*, fit: CalibrationFit) -> CalibrationFit:
    """Queue a failed (or stale running) fit again: its partial rows, if any, are
    removed and it becomes pending; the task runs it on commit."""
    from . import tasks

    fits_reap_stale()
    updated = CalibrationFit.objects.filter(
        pk=fit.pk, status=FitStatus.FAILED, source=FitSource.JUDGMENTS
    ).update(
        status=FitStatus.PENDING,
        error="",
        started_at=None,
        heartbeat_at=None,
        finished_at=None,
    )
    if not updated:
        raise ApplicationError(
            f"fit {fit.pk} is {fit.status}: only a failed fit can be run again"
        )
    QueryCalibration.objects.filter(fit=fit).delete()
    DocumentAbility.objects.filter(fit=fit).delete()
    transaction.on_commit(lambda: tasks.calibration_fit_run.delay(fit.pk))
    fit.refresh_from_db()
    return fit


def calibration_fit_run(
    *, fit_id: int, progress: ProgressFn | None = None, maxiter: int = DEFAULT_MAXITER
) -> CalibrationFit | None:
    """Run a pending fit; safe to call twice.

    Claims the fit by compare-and-set (pending, or running with a heartbeat older
    than the lease after a lost worker) and returns None if someone else has it or
    it is finished. Bad input ends the fit failed (returned, not raised).
    """
    now = timezone.now()
    stale = now - _lease()
    claimed = (
        CalibrationFit.objects.filter(pk=fit_id)
        .filter(
            Q(status=FitStatus.PENDING)
            | Q(status=FitStatus.RUNNING, heartbeat_at__lt=stale)
        )
        .update(status=FitStatus.RUNNING, started_at=now, heartbeat_at=now)
    )
    if not claimed:
        return None
    fit = CalibrationFit.objects.get(pk=fit_id)
    try:
        return _run_fit(fit, progress or _noop, maxiter=maxiter)
    except ApplicationError:
        fit.refresh_from_db()
        return fit


# ---------------------------------------------------------------------------- gains


class GainsImportFailed(ApplicationError):
    """A gains file was refused; nothing was written."""

    def __init__(
        self,
        message: str,
        *,
        path: str,
        line: int | None = None,
        field: str | None = None,
    ) -> None:
        where = path + (f", line {line}" if line is not None else "")
        where += f", field {field!r}" if field else ""
        super().__init__(
            f"{where}: {message}", extra={"path": path, "line": line, "field": field}
        )
        self.line = line
        self.field = field


def _read_gains(
    path: Path | str, stream: IO[str] | None = None
) -> Iterable[tuple[int, dict[str, str]]]:
    """Yield (line, {column: value}) of a gains TSV with a header line."""
    name = str(path)
    handle = stream if stream is not None else open(path, encoding="utf-8")  # noqa: SIM115
    try:
        header: list[str] | None = None
        for lineno, raw in enumerate(handle, 1):
            line = raw.rstrip("\r\n")
            if not line.strip():
                continue
            fields = line.split("\t") if "\t" in line else line.split()
            if header is None:
                header = [f.strip() for f in fields]
                required = {"query_id", "doc_id", "gain"}
                if not required <= set(header):
                    lacking = sorted(required - set(header))
                    raise GainsImportFailed(
                        f"header must name query_id, doc_id and gain (optional "
                        f"theta); missing {', '.join(lacking)}",
                        path=name,
                        line=lineno,
                    )
                continue
            if len(fields) != len(header):
                raise GainsImportFailed(
                    f"expected {len(header)} columns, found {len(fields)}",
                    path=name,
                    line=lineno,
                )
            yield lineno, dict(zip(header, (f.strip() for f in fields), strict=True))
        if header is None:
            raise GainsImportFailed("file is empty", path=name)
    except UnicodeDecodeError as exc:
        raise GainsImportFailed(f"not valid UTF-8 ({exc.reason})", path=name) from exc
    finally:
        if stream is None:
            handle.close()


def _float_field(
    row: dict[str, str], key: str, *, path: str, line: int, unit: bool
) -> float | None:
    text = row.get(key, "")
    if text == "":
        if key == "gain":
            raise GainsImportFailed("is empty", path=path, line=line, field=key)
        return None
    try:
        value = float(text)
    except ValueError:
        raise GainsImportFailed(
            f"{text!r} is not a number", path=path, line=line, field=key
        ) from None
    if not math.isfinite(value):
        raise GainsImportFailed(
            f"{text!r} is not finite", path=path, line=line, field=key
        )
    if unit and not 0.0 <= value <= 1.0:
        raise GainsImportFailed(
            f"{value:g} is outside [0, 1]", path=path, line=line, field=key
        )
    return value


@transaction.atomic
def gains_import(
    *,
    dataset: Dataset,
    path: str | Path,
    stream: IO[str] | None = None,
    created_by: Any = None,
) -> CalibrationFit:
    """Create a done fit (source ``import``) from published labels, atomically.

    TSV with a header naming ``query_id doc_id gain`` and optionally ``theta`` and
    ``count_gain`` (other columns, e.g. ``qrel`` of an export, are ignored). Refuses
    the file with GainsImportFailed naming file, line and field; a file matching no
    query/document of the dataset names example ids of both.
    """
    name = str(path)
    queries = dict(
        Query.objects.filter(dataset=dataset).values_list("external_id", "id")
    )
    rows: list[tuple[int, str, str, float, float | None, float | None]] = []
    seen: dict[tuple[str, str], int] = {}
    for line, row in _read_gains(path, stream):
        qid, did = row["query_id"], row["doc_id"]
        if not qid or not did:
            field_name = "query_id" if not qid else "doc_id"
            raise GainsImportFailed("is empty", path=name, line=line, field=field_name)
        if (qid, did) in seen:
            raise GainsImportFailed(
                f"duplicate query/doc {qid!r}/{did!r} (first on line {seen[qid, did]})",
                path=name,
                line=line,
            )
        seen[qid, did] = line
        gain = _float_field(row, "gain", path=name, line=line, unit=True)
        theta = _float_field(row, "theta", path=name, line=line, unit=False)
        cgain = _float_field(row, "count_gain", path=name, line=line, unit=True)
        rows.append((line, qid, did, gain, theta, cgain))  # type: ignore[arg-type]

    wanted = sorted({r[2] for r in rows})
    docs: dict[str, int] = {}
    for i in range(0, len(wanted), 900):
        docs.update(
            Document.objects.filter(
                dataset=dataset, external_id__in=wanted[i : i + 900]
            ).values_list("external_id", "id")
        )
    if rows and not any(r[1] in queries and r[2] in docs for r in rows):
        ex_q = next(iter(queries), "(none)")
        ex_d = (
            Document.objects.filter(dataset=dataset)
            .values_list("external_id", flat=True)
            .first()
        )
        raise GainsImportFailed(
            f"no line matches dataset {dataset.name!r}: the file has query "
            f"{rows[0][1]!r} / doc {rows[0][2]!r} (line {rows[0][0]}) but the dataset "
            f"has ids like query {ex_q!r} and document {ex_d!r}",
            path=name,
        )
    for line, qid, did, *_ in rows:
        if qid not in queries:
            raise GainsImportFailed(
                f"unknown query {qid!r} (not in dataset {dataset.name!r})",
                path=name,
                line=line,
                field="query_id",
            )
        if did not in docs:
            raise GainsImportFailed(
                f"unknown document {did!r} (not in dataset {dataset.name!r})",
                path=name,
                line=line,
                field="doc_id",
            )
    if not rows:
        raise GainsImportFailed("no gain rows after the header", path=name)

    fit = _fit_new(
        datasets=[dataset],
        mode=RequestedMode.AUTO,
        family=None,
        created_by=created_by,
        status=FitStatus.RUNNING,
        source=FitSource.IMPORT,
    )
    DocumentAbility.objects.bulk_create(
        [
            DocumentAbility(
                fit=fit,
                query_id=queries[qid],
                document_id=docs[did],
                theta=theta,
                gain=gain,
                count_gain=cgain,
            )
            for _line, qid, did, gain, theta, cgain in rows
        ],
        batch_size=BATCH_SIZE,
    )
    by_query = Counter(queries[r[1]] for r in rows)
    QueryCalibration.objects.bulk_create(
        [
            QueryCalibration(fit=fit, query_id=q, n_documents=k, has_rubric=False)
            for q, k in sorted(by_query.items())
        ],
        batch_size=BATCH_SIZE,
    )
    fit.mode = FitMode.RELEASED
    fit.status = FitStatus.DONE
    fit.finished_at = timezone.now()
    fit.diagnostics = {
        "imported": {
            "file": Path(name).name,
            "rows": len(rows),
            "queries": len(by_query),
            "with_theta": sum(r[4] is not None for r in rows),
        }
    }
    fit.fingerprint = _fingerprint(
        FitMode.RELEASED,
        {},
        [],
        sorted([qid, did, gain] for _l, qid, did, gain, _t, _c in rows),
    )
    fit.full_clean()
    fit.save(
        update_fields=["mode", "status", "finished_at", "diagnostics", "fingerprint"]
    )
    return fit


def _fmt(value: float | None) -> str:
    return "" if value is None else repr(float(value))


def gains_export(
    *, dataset: Dataset, out: IO[str], fit: CalibrationFit | None = None
) -> int:
    """Write the dataset's gains of ``fit`` (default: latest done fit) as TSV.

    Header ``query_id doc_id theta gain count_gain qrel``; floats at full precision
    (repr), empty cells for missing values; sorted by query then doc id. Reads only
    (no transaction needed). Returns the number of rows; NotFoundError without a fit.
    """
    from .selectors import fit_latest

    fit = fit or fit_latest(dataset=dataset)
    qrels = {
        (q, d): g
        for q, d, g in Qrel.objects.filter(query__dataset=dataset).values_list(
            "query_id", "document_id", "grade"
        )
    }
    rows = (
        DocumentAbility.objects.filter(fit=fit, query__dataset=dataset)
        .order_by("query__external_id", "document__external_id")
        .values_list(
            "query_id",
            "document_id",
            "query__external_id",
            "document__external_id",
            "theta",
            "gain",
            "count_gain",
        )
    )
    out.write("\t".join(EXPORT_COLUMNS) + "\n")
    count = 0
    for q, d, qext, dext, theta, gain, cgain in rows.iterator(chunk_size=5000):
        grade = qrels.get((q, d))
        out.write(
            f"{qext}\t{dext}\t{_fmt(theta)}\t{_fmt(gain)}\t{_fmt(cgain)}\t"
            f"{'' if grade is None else f'{grade:g}'}\n"
        )
        count += 1
    return count
