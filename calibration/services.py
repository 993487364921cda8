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
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import IO, Any

import numpy as np
from django.conf import settings
from django.db import transaction
from django.db.models import Count, Q
from django.utils import timezone
from threadpoolctl import threadpool_limits

from benchmarks.models import Dataset, Document, PoolEntry, Qrel, Query
from judging.models import JudgmentWindow, Phase, Stage, WindowStatus
from rcp import diagnostics as rcp_diagnostics
from rcp.bt import fit_bt, ragged_window_pairs
from rcp.gain import count_gain, pass_probabilities, rcp_gain
from rcp.irt import aggregate_rubric, fit_calibration
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
INVALID_FLAG_SHARE = 0.05
BATCH_SIZE = 5000
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
class _QueryData:
    """One query's windows, with documents indexed locally by external id."""

    pk: int
    label: str
    docs: dict[str, int] = field(default_factory=dict)
    # Stage A windows, flat: window i holds the next sizes[i] documents and scores.
    window_sizes: list[int] = field(default_factory=list)
    window_docs: list[int] = field(default_factory=list)
    window_scores: list[float] = field(default_factory=list)
    placements: list[int] = field(default_factory=list)
    answers: list[list[int]] = field(default_factory=list)
    tournament_windows: int = 0
    rubric_windows: int = 0

    def local(self, doc_ids: Iterable[str]) -> list[int]:
        return [self.docs.setdefault(d, len(self.docs)) for d in doc_ids]


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


def _load_windows(
    datasets: Sequence[Dataset], family: str | None, progress: ProgressFn
) -> tuple[str, list[_QueryData], dict[str, Any]]:
    """Read valid done windows of one family into per-query arrays; count the rest."""
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
    counts: dict[int, dict[str, int]] = {}
    for qid, stage, valid, phase, n in (
        done.order_by()
        .values_list("query_id", "stage", "valid", "phase")
        .annotate(n=Count("id"))
    ):
        c = counts.setdefault(qid, {})
        key = f"{stage}_{'valid' if valid else 'invalid'}"
        c[key] = c.get(key, 0) + n
        if not valid and stage == Stage.TOURNAMENT and phase == Phase.ADAPTIVE:
            c["adaptive_invalid"] = c.get("adaptive_invalid", 0) + n

    queries: dict[int, _QueryData] = {}
    malformed = 0
    n_criteria: int | None = None
    total = sum(
        c.get("tournament_valid", 0) + c.get("rubric_valid", 0) for c in counts.values()
    )
    seen = 0
    rows = (
        done.filter(valid=True)
        .order_by("query_id", "stage", "seq")
        .values_list("query_id", "stage", "doc_ids", "scores", "answers")
        .iterator(chunk_size=2000)
    )
    for qid, stage, doc_ids, scores, answers in rows:
        seen += 1
        if seen % 5000 == 0:
            progress("windows read", seen, total)
        q = queries.get(qid)
        if q is None:
            q = queries[qid] = _QueryData(pk=qid, label=labels[qid])
        doc_ids = [str(d) for d in doc_ids or []]
        if stage == Stage.TOURNAMENT:
            if (
                not doc_ids
                or not isinstance(scores, list)
                or len(scores) != len(doc_ids)
            ):
                malformed += 1
                continue
            q.window_docs.extend(q.local(doc_ids))
            q.window_scores.extend(scores)
            q.window_sizes.append(len(doc_ids))
            q.tournament_windows += 1
        else:
            if not isinstance(answers, list) or len(answers) != len(doc_ids):
                malformed += 1
                continue
            verdicts = [[int(v) for v in a] for a in answers]
            if n_criteria is None and verdicts:
                n_criteria = len(verdicts[0])
            if any(len(v) != n_criteria or set(v) - {0, 1} for v in verdicts):
                malformed += 1
                continue
            q.placements.extend(q.local(doc_ids))
            q.answers.extend(verdicts)
            q.rubric_windows += 1
    progress("windows read", seen, total)
    ordered = [queries[k] for k in sorted(queries, key=lambda k: labels[k])]
    meta = {
        "family": family,
        "counts": counts,
        "malformed": malformed,
        "n_criteria": n_criteria or len(CRITERIA),
        "labels": labels,
    }
    return family, ordered, meta


def _resolve_documents(
    datasets: Sequence[Dataset], queries: list[_QueryData]
) -> dict[int, dict[str, int]]:
    """External doc id -> pk per query: pool first, then the dataset's corpus."""
    pool: dict[int, dict[str, int]] = {}
    for qid, ext, pk in PoolEntry.objects.filter(
        query__dataset__in=datasets
    ).values_list("query_id", "document__external_id", "document_id"):
        pool.setdefault(qid, {})[ext] = pk
    ds_of = dict(
        Query.objects.filter(dataset__in=datasets).values_list("id", "dataset_id")
    )
    missing: dict[int, set[str]] = {}
    for q in queries:
        known = pool.get(q.pk, {})
        missing.setdefault(ds_of[q.pk], set()).update(
            d for d in q.docs if d not in known
        )
    corpus: dict[int, dict[str, int]] = {}
    for ds, ext_ids in missing.items():
        wanted = sorted(ext_ids)
        for i in range(0, len(wanted), 900):
            corpus.setdefault(ds, {}).update(
                Document.objects.filter(
                    dataset_id=ds, external_id__in=wanted[i : i + 900]
                ).values_list("external_id", "id")
            )
    out: dict[int, dict[str, int]] = {}
    for q in queries:
        known = {**corpus.get(ds_of[q.pk], {}), **pool.get(q.pk, {})}
        unknown = [d for d in q.docs if d not in known]
        if unknown:
            raise ApplicationError(
                f"judgment windows of query {q.label!r} name document {unknown[0]!r}, "
                f"which is not in its dataset ({len(unknown)} unknown ids)"
            )
        out[q.pk] = {d: known[d] for d in q.docs}
    return out


def _fingerprint(mode: str, items: dict, query_rows: list, thetas: list) -> str:
    payload = {"mode": mode, "items": items, "queries": query_rows, "thetas": thetas}
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _finite(x: float) -> float | None:
    return float(x) if x is not None and math.isfinite(x) else None


def _fit_into(fit: CalibrationFit, progress: ProgressFn) -> CalibrationFit:
    """Fit ``fit.datasets`` from judgment windows and store items, rows, diagnostics.

    Caller holds the transaction. Raises ApplicationError on missing or unusable data.
    """
    datasets = list(fit.datasets.order_by("name"))
    family, queries, meta = _load_windows(datasets, fit.family or None, progress)
    doc_pk = _resolve_documents(datasets, queries)
    n_crit = meta["n_criteria"]

    # Stage A: one cold BT fit per query over its valid windows. All pairs of a
    # query come from one vectorised call; BLAS stays on one thread, since a small
    # dense solve costs many times more CPU when handed between threads.
    q_index, th_bt, se_bt = [], [], []
    unit_rows: list[np.ndarray] = []
    unit_answers: list[np.ndarray] = []
    row_offset = 0
    with threadpool_limits(limits=1):
        for j, q in enumerate(queries):
            n_docs = len(q.docs)
            theta = np.full(n_docs, np.nan)
            se = np.full(n_docs, np.nan)
            if q.window_sizes:
                docs = np.asarray(q.window_docs, dtype=np.int64)
                parts = ragged_window_pairs(
                    np.asarray(q.window_sizes),
                    docs,
                    np.asarray(q.window_scores, dtype=np.float64),
                )
                res = fit_bt(*parts, n_docs)
                seen = np.unique(docs)
                theta[seen], se[seen] = res.theta[seen], res.se[seen]
            q_index.extend([j] * n_docs)
            th_bt.append(theta)
            se_bt.append(se)
            if q.placements:
                unit_rows.append(np.asarray(q.placements) + row_offset)
                unit_answers.append(np.asarray(q.answers, dtype=np.int64))
            row_offset += n_docs
            progress("BT fits", j + 1, len(queries))
    n_rows = row_offset
    query_idx = np.asarray(q_index, dtype=np.int64)
    theta_bt = np.concatenate(th_bt) if th_bt else np.zeros(0)
    theta_bt_se = np.concatenate(se_bt) if se_bt else np.zeros(0)
    unit = np.concatenate(unit_rows) if unit_rows else np.zeros(0, dtype=np.int64)
    answers = (
        np.concatenate(unit_answers) if unit_answers else np.zeros((0, n_crit), int)
    )
    n = np.zeros(n_rows)
    passes = np.zeros((n_rows, n_crit))
    if unit.size:
        units, n_u, passes_u = aggregate_rubric(unit, answers)
        n[units], passes[units] = n_u, passes_u

    # Mode: auto = tournament if every query has BT abilities, rubric-only if none.
    n_q = len(queries)
    has_bt = np.array([bool(q.window_sizes) for q in queries], dtype=bool)
    mode = fit.requested_mode
    if mode == RequestedMode.AUTO:
        if has_bt.all():
            mode = RequestedMode.TOURNAMENT
        elif not has_bt.any():
            mode = RequestedMode.RUBRIC_ONLY
        else:
            missing = [q.label for q, b in zip(queries, has_bt, strict=True) if not b]
            raise ApplicationError(
                f"mixed coverage: {int(has_bt.sum())} of {n_q} queries have "
                f"tournament windows (without: {', '.join(missing[:5])}"
                f"{' …' if len(missing) > 5 else ''}); judge Stage A for them or "
                "use --mode rubric-only"
            )
    if not (n > 0).any():
        raise ApplicationError("no valid rubric (Stage B) windows to calibrate")
    progress("2PL fit", 0, 1)
    try:
        if mode == RequestedMode.TOURNAMENT:
            if not has_bt.any():
                raise ApplicationError("tournament mode needs Stage A windows")
            res = fit_calibration(
                query_idx,
                n,
                passes,
                theta_bt=theta_bt,
                theta_bt_se=theta_bt_se,
                n_queries=n_q,
                mode="tournament",
            )
            theta, theta_se = res.theta, res.theta_se
            tau, alpha = res.tau, res.alpha
            has_rubric = res.query_has_rubric
            extra = {"skipped_rows": res.n_skipped}
        else:
            rows = np.flatnonzero(n > 0)
            res = fit_calibration(
                query_idx[rows], n[rows], passes[rows], mode="rubric_only"
            )
            theta = np.full(n_rows, np.nan)
            theta_se = np.full(n_rows, np.nan)
            theta[rows], theta_se[rows] = res.theta, res.theta_se
            tau = alpha = np.full(n_q, np.nan)
            has_rubric = np.bincount(query_idx[rows], minlength=n_q) > 0
            extra = {
                "prior_mean": res.prior_mean,
                "prior_sd": res.prior_sd,
                "ordinal_only": res.ordinal_only,
            }
    except ValueError as exc:
        raise ApplicationError(f"calibration failed: {exc}") from exc
    progress("2PL fit", 1, 1)

    gamma, beta = np.asarray(res.gamma), np.asarray(res.beta)
    gains = np.where(np.isnan(theta), np.nan, rcp_gain(theta, gamma, beta))
    counts_g = np.where(n > 0, count_gain(passes, n), np.nan)
    items = {
        "criteria": CRITERIA[:n_crit]
        if n_crit <= len(CRITERIA)
        else [f"C{i + 1}" for i in range(n_crit)],
        "gamma": gamma.tolist(),
        "beta": beta.tolist(),
    }

    # Diagnostics: reliability of predicted pass probabilities, local dependence.
    calibrated = ~np.isnan(theta) & (n > 0)
    pred = pass_probabilities(np.where(np.isnan(theta), 0.0, theta), gamma, beta)
    rel = rcp_diagnostics.reliability(
        pred[calibrated], n[calibrated], passes[calibrated]
    )
    keep = ~np.isnan(theta[unit]) if unit.size else np.zeros(0, bool)
    corr = rcp_diagnostics.criterion_correlation(
        answers[keep], pred[unit[keep]] if unit.size else np.zeros((0, n_crit))
    )
    counts = meta["counts"]
    flagged, uncal_queries = [], []
    inv_t = inv_r = tot_t = tot_r = 0
    for j, q in enumerate(queries):
        c = counts.get(q.pk, {})
        tv, ti = c.get("tournament_valid", 0), c.get("tournament_invalid", 0)
        rv, ri = c.get("rubric_valid", 0), c.get("rubric_invalid", 0)
        tot_t, inv_t, tot_r, inv_r = (
            tot_t + tv + ti,
            inv_t + ti,
            tot_r + rv + ri,
            inv_r + ri,
        )
        if (
            (tv + ti and ti / (tv + ti) > INVALID_FLAG_SHARE)
            or (rv + ri and ri / (rv + ri) > INVALID_FLAG_SHARE)
            or c.get("adaptive_invalid", 0)
        ):
            flagged.append(q.label)
        if not has_rubric[j]:
            uncal_queries.append(q.label)
    all_queries = Query.objects.filter(dataset__in=datasets).count()
    diagnostics = {
        "optimizer": {
            "loss": res.loss,
            "converged": res.converged,
            "iterations": res.n_iter,
            **extra,
        },
        "reliability": rel,
        "criterion_correlation": corr,
        "tau": rcp_diagnostics.spread(tau),
        "coverage": {
            "queries": n_q,
            "queries_without_windows": all_queries - n_q,
            "documents": n_rows,
            "uncalibrated_documents": int(np.isnan(theta).sum()),
            "uncalibrated_queries": uncal_queries,
            "flagged_queries": flagged,
            "windows": {"tournament": tot_t, "rubric": tot_r},
            "invalid_windows": {"tournament": inv_t, "rubric": inv_r},
            "invalid_share": {
                "tournament": inv_t / tot_t if tot_t else 0.0,
                "rubric": inv_r / tot_r if tot_r else 0.0,
            },
            "malformed_windows": meta["malformed"],
            "placements": int(n.sum()),
        },
    }

    # Rows.
    progress("writing rows", 0, n_rows)
    query_objs = []
    fp_queries = []
    for j, q in enumerate(queries):
        c = counts.get(q.pk, {})
        query_objs.append(
            QueryCalibration(
                fit=fit,
                query_id=q.pk,
                tau=_finite(tau[j]),
                alpha=_finite(alpha[j]),
                has_rubric=bool(has_rubric[j]),
                n_documents=len(q.docs),
                tournament_windows=q.tournament_windows,
                rubric_windows=q.rubric_windows,
                invalid_windows=c.get("tournament_invalid", 0)
                + c.get("rubric_invalid", 0),
                flagged=q.label in flagged,
            )
        )
        fp_queries.append([q.label, _finite(tau[j]), _finite(alpha[j])])
    QueryCalibration.objects.bulk_create(query_objs, batch_size=BATCH_SIZE)
    ability_objs = []
    fp_thetas = []
    r = 0
    for q in queries:
        pks = doc_pk[q.pk]
        for ext in q.docs:
            ability_objs.append(
                DocumentAbility(
                    fit=fit,
                    query_id=q.pk,
                    document_id=pks[ext],
                    theta_bt=_finite(theta_bt[r]),
                    theta_bt_se=_finite(theta_bt_se[r]),
                    theta=_finite(theta[r]),
                    theta_se=_finite(theta_se[r]),
                    gain=_finite(gains[r]),
                    count_gain=_finite(counts_g[r]),
                    placements=int(n[r]),
                )
            )
            fp_thetas.append([q.label, ext, _finite(theta[r])])
            r += 1
        if len(ability_objs) >= BATCH_SIZE:
            DocumentAbility.objects.bulk_create(ability_objs, batch_size=BATCH_SIZE)
            ability_objs = []
            progress("writing rows", r, n_rows)
    DocumentAbility.objects.bulk_create(ability_objs, batch_size=BATCH_SIZE)
    progress("writing rows", n_rows, n_rows)

    fit.family = family
    fit.mode = mode
    fit.items = items
    fit.diagnostics = _json_safe(diagnostics)
    fit.fingerprint = _fingerprint(mode, items, fp_queries, fp_thetas)
    fit.status = FitStatus.DONE
    fit.error = ""
    fit.finished_at = timezone.now()
    fit.full_clean()
    fit.save(
        update_fields=[
            "family",
            "mode",
            "items",
            "diagnostics",
            "fingerprint",
            "status",
            "error",
            "finished_at",
        ]
    )
    return fit


def _json_safe(value: Any) -> Any:
    """NaN/inf -> None and numpy scalars -> Python, so JSON columns stay portable."""
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
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
    fit = CalibrationFit(
        source=source,
        requested_mode=_mode_value(mode),
        family=family or "",
        status=status,
        created_by=created_by if getattr(created_by, "pk", None) else None,
        started_at=timezone.now() if status == FitStatus.RUNNING else None,
    )
    fit.full_clean()
    fit.save()
    fit.datasets.set(datasets)
    return fit


@transaction.atomic
def calibration_fit(
    *,
    datasets: Sequence[Dataset],
    mode: str = RequestedMode.AUTO,
    family: str | None = None,
    created_by: Any = None,
    progress: ProgressFn | None = None,
) -> CalibrationFit:
    """Calibrate ``datasets`` (several = one suite with shared items) synchronously.

    Reads valid done windows of one judge family, fits BT per query then the 2PL,
    stores items, per-query tau/alpha, per-document abilities and gains. Atomic:
    raises ApplicationError (no data, mixed coverage, several families) and writes
    nothing.
    """
    fit = _fit_new(
        datasets=datasets,
        mode=mode,
        family=family,
        created_by=created_by,
        status=FitStatus.RUNNING,
    )
    return _fit_into(fit, progress or _noop)


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


def calibration_fit_run(
    *, fit_id: int, progress: ProgressFn | None = None
) -> CalibrationFit | None:
    """Run a pending fit; safe to call twice.

    Claims the fit by compare-and-set (pending, or running past the task time limit
    after a lost worker) and returns None if someone else has it or it is finished.
    The fit itself is one transaction; an ApplicationError marks the fit failed.
    """
    now = timezone.now()
    stale = now - timedelta(seconds=settings.CELERY_TASK_TIME_LIMIT)
    claimed = (
        CalibrationFit.objects.filter(pk=fit_id)
        .filter(
            Q(status=FitStatus.PENDING)
            | Q(status=FitStatus.RUNNING, started_at__lt=stale)
        )
        .update(status=FitStatus.RUNNING, started_at=now)
    )
    if not claimed:
        return None
    fit = CalibrationFit.objects.get(pk=fit_id)
    try:
        with transaction.atomic():
            return _fit_into(fit, progress or _noop)
    except ApplicationError as exc:
        CalibrationFit.objects.filter(pk=fit_id).update(
            status=FitStatus.FAILED, error=exc.message, finished_at=timezone.now()
        )
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
