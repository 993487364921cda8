"""Reads of the calibration app: fits, abilities and the leaderboard.

Access rules live here (``can_read_benchmarks``). The leaderboard reads gains, qrels,
pools and rankings with ``values_list`` and hands arrays to ``calibration.rcp``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from django.db.models import Count, IntegerField, OuterRef, Prefetch, QuerySet, Subquery
from django.db.models.functions import Coalesce

from benchmarks import formats
from benchmarks.models import Dataset, PoolEntry, Qrel, RankingEntry
from calibration.rcp import stats as rcp_stats
from calibration.rcp.ndcg import PROTOCOLS, count_ndcg, qrel_ndcg, rcp_ndcg
from rcp_platform.api import can_read_benchmarks
from rcp_platform.exceptions import ApplicationError, NotFoundError

from .models import CalibrationFit, DocumentAbility, FitStatus, QueryCalibration

METRICS = ("rcp_ndcg", "count_ndcg", "qrel_ndcg")
METRIC_LABELS = {
    "rcp_ndcg": "RCP-nDCG",
    "count_ndcg": "Count-nDCG",
    "qrel_ndcg": "qrel-nDCG",
}
CI_KEYS = {"rcp_ndcg": "rcp_ci", "count_ndcg": "count_ci", "qrel_ndcg": "qrel_ci"}
ALPHA = 0.05
RunMap = Mapping[str, Mapping[str, float]]


def _count(model: Any, path: str) -> Coalesce:
    sub = (
        model.objects.filter(**{path: OuterRef("pk")})
        .order_by()
        .values(path)
        .annotate(n=Count("pk"))
        .values("n")
    )
    return Coalesce(Subquery(sub, output_field=IntegerField()), 0)


def fit_list(*, user: Any, dataset: Dataset | None = None) -> QuerySet[CalibrationFit]:
    """Fits the user may read, newest first, with dataset names prefetched and row
    counts annotated (a constant number of queries for any page size)."""
    if not can_read_benchmarks(user):
        return CalibrationFit.objects.none()
    qs = CalibrationFit.objects.all()
    if dataset is not None:
        qs = qs.filter(datasets=dataset)
    return qs.prefetch_related(
        Prefetch("datasets", queryset=Dataset.objects.only("id", "name"))
    ).annotate(
        n_queries=_count(QueryCalibration, "fit"),
        n_documents=_count(DocumentAbility, "fit"),
    )


def fit_get(*, user: Any, pk: int | str) -> CalibrationFit:
    """One readable fit; NotFoundError otherwise (also for users who may not read)."""
    fit = fit_list(user=user).filter(pk=int(pk)).first() if str(pk).isdigit() else None
    if fit is None:
        raise NotFoundError(f"calibration fit {pk!r} not found")
    return fit


def fit_latest(*, dataset: Dataset) -> CalibrationFit:
    """The newest done fit covering ``dataset`` (a single or suite fit)."""
    fit = (
        CalibrationFit.objects.filter(datasets=dataset, status=FitStatus.DONE)
        .order_by("-created_at", "-id")
        .first()
    )
    if fit is None:
        raise NotFoundError(
            f"dataset {dataset.name!r} has no calibration yet; run `calibrate` or "
            "`import_gains`"
        )
    return fit


def ability_list(*, fit: CalibrationFit, query: str | None = None) -> QuerySet:
    """A fit's per-document rows, by query then gain; ``query`` = external id."""
    qs = DocumentAbility.objects.filter(fit=fit).select_related(
        "query__dataset", "document"
    )
    if query:
        qs = qs.filter(query__external_id=query)
    return qs.order_by("query__dataset__name", "query__external_id", "-gain", "id")


def fit_query_rows(*, fit: CalibrationFit) -> QuerySet[QueryCalibration]:
    return (
        QueryCalibration.objects.filter(fit=fit)
        .select_related("query__dataset")
        .order_by("query__dataset__name", "query__external_id")
    )


# ---------------------------------------------------------------------------- leaderboard


def _clean(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_clean(v) for v in x]
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def _dataset_inputs(dataset: Dataset, fit: CalibrationFit) -> dict[str, Any]:
    gains: dict[str, dict[str, float]] = {}
    counts: dict[str, dict[str, float]] = {}
    for q, d, g, c in DocumentAbility.objects.filter(
        fit=fit, query__dataset=dataset
    ).values_list("query__external_id", "document__external_id", "gain", "count_gain"):
        if g is not None:
            gains.setdefault(q, {})[d] = g
        if c is not None:
            counts.setdefault(q, {})[d] = c
    qrels: dict[str, dict[str, float]] = {}
    for q, d, g in Qrel.objects.filter(query__dataset=dataset).values_list(
        "query__external_id", "document__external_id", "grade"
    ):
        qrels.setdefault(q, {})[d] = g
    pools: dict[str, list[str]] = {}
    for q, d in (
        PoolEntry.objects.filter(query__dataset=dataset)
        .order_by("query_id", "rank")
        .values_list("query__external_id", "document__external_id")
    ):
        pools.setdefault(q, []).append(d)
    runs: dict[str, dict[str, dict[str, float]]] = {}
    for s, q, d, score in RankingEntry.objects.filter(
        system__dataset=dataset
    ).values_list(
        "system__name", "query__external_id", "document__external_id", "score"
    ):
        runs.setdefault(s, {}).setdefault(q, {})[d] = score
    return {
        "gains": gains,
        "counts": counts,
        "qrels": qrels,
        "pools": pools,
        "runs": runs,
    }


def _check_matches(dataset: Dataset, system: str, run: RunMap, gains: RunMap) -> None:
    """Refuse a run that ranks no judged document, naming an example of each side."""
    for q, docs in run.items():
        judged = gains.get(q, {})
        if any(d in judged for d in docs):
            return
    ex_q, ex_docs = next(iter(run.items()), ("(none)", {}))
    ex_d = next(iter(ex_docs), "(none)")
    j_q, j_docs = next(iter(gains.items()), ("(none)", {}))
    j_d = next(iter(j_docs), "(none)")
    raise ApplicationError(
        f"system {system!r} matches no judged document of dataset {dataset.name!r}: "
        f"it ranks e.g. {ex_d!r} for query {ex_q!r}, while judged documents look "
        f"like {j_d!r} for query {j_q!r}",
        extra={"system": system, "example_query": ex_q, "example_doc": ex_d},
    )


def _ranks(values: dict[str, float | None]) -> dict[str, int | None]:
    """1-based ranks by value descending, ties by name; missing values unranked."""
    present = sorted(
        (n for n, v in values.items() if v is not None), key=lambda n: (-values[n], n)
    )
    out: dict[str, int | None] = {n: None for n in values}
    out.update({n: i + 1 for i, n in enumerate(present)})
    return out


def leaderboard_compute(
    *,
    datasets: Sequence[Dataset],
    k: int = 10,
    protocol: str | None = None,
    extra_runs: Mapping[str, RunMap] | None = None,
    systems: Sequence[str] | None = None,
    include_queries: bool = False,
    exponential_qrels: bool = False,
    n_boot: int = 1000,
    seed: int = 0,
) -> dict[str, Any]:
    """RCP-, Count- and qrel-nDCG@k of every system, per dataset and as the suite
    mean (mean over queries, then over datasets), with bootstrap CIs, paired t-tests
    of every system pair (B minus A, A first by name), sensitivity and failure modes.

    Gains come from each dataset's latest done fit. ``extra_runs`` ({name: {query:
    {doc: score}}}) scores unsaved runs (single dataset only). ``protocol`` None =
    each dataset's own. Raises ApplicationError for a run matching no judged
    document, NotFoundError for a dataset without a fit. Returns JSON-safe dicts.
    """
    if k < 1:
        raise ApplicationError("k must be at least 1")
    if protocol is not None and protocol not in PROTOCOLS:
        raise ApplicationError(
            f"unknown protocol {protocol!r}; choose one of {', '.join(PROTOCOLS)}"
        )
    if not datasets:
        raise ApplicationError("name at least one dataset")
    if extra_runs and len(datasets) > 1:
        raise ApplicationError("score an uploaded run against one dataset at a time")

    # per metric: list of (dataset name, query labels, {system: per-query array})
    tables: dict[str, list[tuple[str, list[str], dict[str, np.ndarray]]]] = {
        m: [] for m in METRICS
    }
    fits: dict[str, int] = {}
    protocols: dict[str, str] = {}
    all_systems: set[str] = set()
    suite = len(datasets) > 1
    for ds in datasets:
        fit = fit_latest(dataset=ds)
        fits[ds.name] = fit.pk
        proto = protocol or ds.protocol
        protocols[ds.name] = proto
        data = _dataset_inputs(ds, fit)
        runs = data["runs"]
        if extra_runs:
            runs = {**runs, **{n: dict(r) for n, r in extra_runs.items()}}
        if systems is not None:
            runs = {n: r for n, r in runs.items() if n in systems}
        if PROTOCOLS[proto].pool_only or PROTOCOLS[proto].ties == "input_order":
            lacking = [q for q in data["gains"] if q not in data["pools"]]
            if lacking:
                raise ApplicationError(
                    f"protocol {proto!r} ranks pool documents only, but query "
                    f"{lacking[0]!r} of {ds.name!r} has no pool"
                )
        pools = data["pools"] or None
        metric_inputs = {
            "rcp_ndcg": (rcp_ndcg, data["gains"]),
            "count_ndcg": (count_ndcg, data["counts"]),
            "qrel_ndcg": (qrel_ndcg, data["qrels"]),
        }
        for name, run in sorted(runs.items()):
            _check_matches(ds, name, run, data["gains"])
        for metric, (fn, labels) in metric_inputs.items():
            if not labels:
                continue
            qids = sorted(labels)
            per_system: dict[str, np.ndarray] = {}
            for name, run in sorted(runs.items()):
                kwargs: dict[str, Any] = {"k": k, "protocol": proto, "pools": pools}
                if metric == "qrel_ndcg":
                    kwargs["exponential"] = exponential_qrels
                values = fn(run, labels, **kwargs)
                per_system[name] = np.array([values[q] for q in qids], dtype=float)
            # Queries without a positive qrel are NaN for every system: drop them.
            if per_system:
                keep = ~np.all(np.isnan(np.stack(list(per_system.values()))), axis=0)
                qids = [q for q, kp in zip(qids, keep, strict=True) if kp]
                per_system = {n: v[keep] for n, v in per_system.items()}
            labels_q = [f"{ds.name}||{q}" if suite else q for q in qids]
            tables[metric].append((ds.name, labels_q, per_system))
        all_systems.update(runs)

    names = sorted(all_systems)
    rows: dict[str, dict[str, Any]] = {
        n: {"system": n, "datasets": {}, "n_queries": {}} for n in names
    }
    rng_seed = seed
    for metric in METRICS:
        for n in names:
            ds_means, ds_arrays = [], []
            for ds_name, _labels, per_system in tables[metric]:
                if n not in per_system:
                    continue
                v = per_system[n]
                mean = float(np.nanmean(v)) if v.size else math.nan
                rows[n]["datasets"].setdefault(ds_name, {})[metric] = mean
                ds_means.append(mean)
                ds_arrays.append(v[~np.isnan(v)])
            rows[n][metric] = float(np.mean(ds_means)) if ds_means else None
            rows[n]["n_queries"][metric] = int(sum(a.size for a in ds_arrays))
            if ds_arrays and all(a.size for a in ds_arrays):
                ci = rcp_stats.bootstrap_ci(
                    ds_arrays, rng=rng_seed, n_boot=n_boot, alpha=ALPHA
                )
                rows[n][CI_KEYS[metric]] = [float(ci[0]), float(ci[1])]
            else:
                rows[n][CI_KEYS[metric]] = None
            if include_queries:
                rows[n].setdefault("per_query", {})[metric] = {
                    q: float(x)
                    for _d, labels, per_system in tables[metric]
                    if n in per_system
                    for q, x in zip(labels, per_system[n], strict=True)
                }
    ranks = {m: _ranks({n: rows[n][m] for n in names}) for m in METRICS}
    for n in names:
        rows[n]["rank"] = {m: ranks[m][n] for m in METRICS}

    pairs: list[dict[str, Any]] = []
    sensitivity: dict[str, float | None] = {}
    failure: dict[str, dict[str, float] | None] = {}
    for metric in METRICS:
        blocks = tables[metric]
        if not blocks or len(names) < 2:
            sensitivity[metric] = None
            failure[metric] = None
            continue
        width = sum(len(labels) for _d, labels, _p in blocks)
        matrix = np.full((len(names), width), np.nan)
        col = 0
        for _d, labels, per_system in blocks:
            for i, n in enumerate(names):
                if n in per_system:
                    matrix[i, col : col + len(labels)] = per_system[n]
            col += len(labels)
        tests = rcp_stats.pair_tests(matrix)
        sep = tests.separated(ALPHA)
        for a, b, delta, p, s in zip(
            tests.i, tests.j, tests.delta, tests.p, sep, strict=True
        ):
            pairs.append(
                {
                    "a": names[a],
                    "b": names[b],
                    "metric": metric,
                    "delta": float(delta),
                    "p": float(p),
                    "separated": bool(s),
                    "tie_zone": bool(abs(delta) < rcp_stats.DECISIVE_MARGIN)
                    if math.isfinite(delta)
                    else True,
                }
            )
        per_ds = [
            np.stack([per_system[n] for n in names if n in per_system])
            for _d, _l, per_system in blocks
            if sum(n in per_system for n in names) >= 2
        ]
        sensitivity[metric] = rcp_stats.sensitivity(per_ds, ALPHA) if per_ds else None
        flags = {"saturation": 0, "floor": 0, "compression": 0}
        n_cols = 0
        for x in per_ds:
            x = x[:, ~np.any(np.isnan(x), axis=0)]
            if x.shape[1] == 0:
                continue
            fm = rcp_stats.failure_modes(x)
            for key in flags:
                flags[key] += int(getattr(fm, key).sum())
            n_cols += x.shape[1]
        failure[metric] = (
            {key: v / n_cols for key, v in flags.items()} if n_cols else None
        )

    ordered = sorted(
        rows.values(),
        key=lambda r: (r["rcp_ndcg"] is None, -(r["rcp_ndcg"] or 0.0), r["system"]),
    )
    distinct = set(protocols.values())
    return _clean(
        {
            "k": k,
            "protocol": protocol or (distinct.pop() if len(distinct) == 1 else None),
            "protocols": protocols,
            "datasets": [d.name for d in datasets],
            "fits": fits,
            "systems": ordered,
            "pairs": pairs,
            "sensitivity": sensitivity,
            "failure_modes": failure,
        }
    )


def run_read(*, path: str | Path) -> dict[str, dict[str, float]]:
    """A TREC run file as {query: {doc: score}}; FormatError becomes ApplicationError
    naming file and line."""
    try:
        ranked = formats.rank_run(formats.iter_run(path), path)
    except formats.FormatError as exc:
        where = f"{exc.path}, line {exc.line}" if exc.line else str(exc.path)
        raise ApplicationError(f"{where}: {exc.message}") from exc
    return {q: {d: s for d, s, _line in entries} for q, entries in ranked.items()}


def run_score(
    *,
    dataset: Dataset,
    run: RunMap,
    name: str = "uploaded run",
    k: int = 10,
    protocol: str | None = None,
) -> dict[str, Any]:
    """Score an unsaved run against the dataset's latest gains, no judge involved:
    the leaderboard entry of that run alone, with per-query values."""
    board = leaderboard_compute(
        datasets=[dataset],
        k=k,
        protocol=protocol,
        extra_runs={name: run},
        systems=[name],
        include_queries=True,
    )
    return {"k": board["k"], "protocol": board["protocol"], **board["systems"][0]}
