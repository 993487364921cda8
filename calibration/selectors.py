"""Reads of the calibration app: fits, abilities and the leaderboard.

Access rules live here (``can_read_benchmarks``). The leaderboard reads gains, qrels,
pools and rankings with ``values_list`` and hands arrays to ``rcp``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from django.db.models import (
    Count,
    IntegerField,
    OuterRef,
    Prefetch,
    Q,
    QuerySet,
    Subquery,
)
from django.db.models.functions import Coalesce

from benchmarks import formats
from benchmarks.access import can_read_benchmarks
from benchmarks.models import (
    Dataset,
    Document,
    PoolEntry,
    Qrel,
    Query,
    RankingEntry,
    System,
)
from rcp import stats as rcp_stats
from rcp.ndcg import (
    PROTOCOLS,
    Rankings,
    index_of,
    qrel_gain_array,
    ranked_label_hits,
    rows_array,
)
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


def _ids(rows: Sequence[Sequence[Any]], width: int) -> np.ndarray:
    return rows_array(rows, width) if rows else np.zeros((0, width))


class _DocCodes:
    """Document pk (or an uploaded run's external id) -> integer key for ``Rankings``.

    Under ``doc_id_desc`` keys follow the external ids' string order (trec_eval's
    tie order), read once for the documents ranked or pooled in the dataset;
    otherwise the pk itself. Ids only an uploaded run names get keys of their own;
    labelled documents nobody ranks or pools map past every key.
    """

    def __init__(
        self, dataset: Dataset, *, by_name: bool, pks: np.ndarray, extra: set[str]
    ) -> None:
        self.by_name = by_name
        self.extra_pk = _document_pks(dataset, extra)
        unknown = sorted(extra - set(self.extra_pk))
        if not by_name:
            top = int(max(pks.max(initial=0), *self.extra_pk.values(), 0)) + 1
            self.unknown = {n: top + i for i, n in enumerate(unknown)}
            return
        in_use = Q(
            id__in=RankingEntry.objects.filter(system__dataset=dataset).values(
                "document_id"
            )
        ) | Q(
            id__in=PoolEntry.objects.filter(query__dataset=dataset).values(
                "document_id"
            )
        )
        names: dict[int | None, str] = dict(
            Document.objects.filter(in_use, dataset=dataset).values_list(
                "id", "external_id"
            )
        )
        names.update({pk: name for name, pk in self.extra_pk.items()})
        ordered = sorted(
            [*names.items(), *((None, n) for n in unknown)], key=lambda t: t[1]
        )
        self.unknown = {n: i for i, (pk, n) in enumerate(ordered) if pk is None}
        coded = sorted((pk, i) for i, (pk, _n) in enumerate(ordered) if pk is not None)
        self.pks = np.array([pk for pk, _ in coded], dtype=np.int64)
        self.codes = np.array([c for _, c in coded], dtype=np.int64)
        self.outside = len(ordered)

    def of_pks(self, pks: np.ndarray) -> np.ndarray:
        pks = pks.astype(np.int64)
        if not self.by_name:
            return pks
        if self.pks.size == 0:
            return np.full(pks.shape, self.outside, dtype=np.int64)
        at = np.minimum(np.searchsorted(self.pks, pks), self.pks.size - 1)
        return np.where(self.pks[at] == pks, self.codes[at], self.outside)

    def of_name(self, name: str) -> int:
        if name in self.extra_pk:
            return int(self.of_pks(np.array([self.extra_pk[name]]))[0])
        return self.unknown[name]


def _document_pks(dataset: Dataset, external_ids: set[str]) -> dict[str, int]:
    wanted = sorted(external_ids)
    out: dict[str, int] = {}
    for i in range(0, len(wanted), 900):  # SQLite's bound-parameter limit
        out.update(
            Document.objects.filter(
                dataset=dataset, external_id__in=wanted[i : i + 900]
            ).values_list("external_id", "id")
        )
    return out


def _ranking_rows(system_pks: np.ndarray) -> np.ndarray:
    """(rows, 4) array of (system pk, query pk, document pk, score) in (system,
    query, rank) order.

    Read as two narrow results, the (document, score) entries and the size of each
    (system, query) ranking, then expanded: converting the rows Python hands back
    costs per value, so half the columns is half the cost. A ranking changed
    between the two reads shows as a size mismatch; then one wide read is used.
    """
    entries = RankingEntry.objects.filter(system_id__in=system_pks.tolist())
    cells = _ids(
        entries.order_by("system_id", "query_id")
        .values_list("system_id", "query_id")
        .annotate(n=Count("id")),
        3,
    )
    docs = _ids(
        entries.order_by("system_id", "query_id", "rank").values_list(
            "document_id", "score"
        ),
        2,
    )
    sizes = cells[:, 2].astype(np.int64)
    if sizes.sum() != docs.shape[0]:  # pragma: no cover - concurrent run import
        return _ids(
            entries.order_by("system_id", "query_id", "rank").values_list(
                "system_id", "query_id", "document_id", "score"
            ),
            4,
        )
    return np.column_stack(
        [np.repeat(cells[:, 0], sizes), np.repeat(cells[:, 1], sizes), docs]
    )


def _dataset_scores(
    ds: Dataset,
    fit: CalibrationFit,
    proto: str,
    *,
    k: int,
    extra_runs: Mapping[str, RunMap] | None,
    systems: Sequence[str] | None,
    exponential_qrels: bool,
) -> tuple[list[str], dict[str, tuple[list[str], dict[str, np.ndarray]]]]:
    """System names and, per metric, (query external ids, {system: per-query nDCG})
    over the queries the metric labels. Rows are read with ``values_list`` into
    arrays; every system's rankings are sorted once and scored against the three
    label sets (RCP gains, Count gains, qrel grades)."""
    preset = PROTOCOLS[proto]
    q_rows = sorted(Query.objects.filter(dataset=ds).values_list("id", "external_id"))
    q_pks = np.array([pk for pk, _ in q_rows], dtype=np.int64)
    q_ext = [ext for _, ext in q_rows]
    q_of_ext = {ext: i for i, ext in enumerate(q_ext)}
    uploaded = dict(extra_runs or {})
    sys_rows = sorted(
        (pk, name)
        for pk, name in System.objects.filter(dataset=ds).values_list("id", "name")
        if name not in uploaded and (systems is None or name in systems)
    )
    extra = {n: r for n, r in uploaded.items() if systems is None or n in systems}
    s_pks = np.array([pk for pk, _ in sys_rows], dtype=np.int64)
    names = [name for _, name in sys_rows] + list(extra)
    runs = _ranking_rows(s_pks)
    labels = {
        "rcp_ndcg": _ids(
            DocumentAbility.objects.filter(
                fit=fit, query__dataset=ds, gain__isnull=False
            ).values_list("query_id", "document_id", "gain"),
            3,
        ),
        "count_ndcg": _ids(
            DocumentAbility.objects.filter(
                fit=fit, query__dataset=ds, count_gain__isnull=False
            ).values_list("query_id", "document_id", "count_gain"),
            3,
        ),
        "qrel_ndcg": _ids(
            Qrel.objects.filter(query__dataset=ds).values_list(
                "query_id", "document_id", "grade"
            ),
            3,
        ),
    }
    pools = _ids(
        PoolEntry.objects.filter(query__dataset=ds)
        .order_by("query_id", "rank")
        .values_list("query_id", "document_id"),
        2,
    )
    if preset.pool_only or preset.ties == "input_order":
        has_pool = np.zeros(len(q_ext), dtype=bool)
        has_pool[index_of(q_pks, pools[:, 0])] = True
        labelled = np.unique(index_of(q_pks, labels["rcp_ndcg"][:, 0]))
        lacking = sorted(q_ext[j] for j in labelled if not has_pool[j])
        if lacking:
            raise ApplicationError(
                f"protocol {proto!r} ranks pool documents only, but query "
                f"{lacking[0]!r} of {ds.name!r} has no pool"
            )

    extra_docs = {d for run in extra.values() for docs in run.values() for d in docs}
    every_pk = np.concatenate(
        [runs[:, 2], pools[:, 1], *(rows[:, 1] for rows in labels.values())]
    )
    codes = _DocCodes(
        ds, by_name=preset.ties == "doc_id_desc", pks=every_pk, extra=extra_docs
    )
    sys_idx = index_of(s_pks, runs[:, 0])
    q_idx = index_of(q_pks, runs[:, 1])
    doc_key = codes.of_pks(runs[:, 2])
    score = runs[:, 3]
    if extra:
        rows = [
            (len(sys_rows) + i, q_of_ext[q], codes.of_name(d), float(x))
            for i, run in enumerate(extra.values())
            for q, docs in run.items()
            if q in q_of_ext
            for d, x in docs.items()
        ]
        more = _ids(rows, 4)
        sys_idx = np.concatenate([sys_idx, more[:, 0].astype(np.int64)])
        q_idx = np.concatenate([q_idx, more[:, 1].astype(np.int64)])
        doc_key = np.concatenate([doc_key, more[:, 2].astype(np.int64)])
        score = np.concatenate([score, more[:, 3]])

    label_idx = {
        m: (index_of(q_pks, rows[:, 0]), codes.of_pks(rows[:, 1]), rows[:, 2])
        for m, rows in labels.items()
    }
    g_q, g_d, _g = label_idx["rcp_ndcg"]
    hits = ranked_label_hits(sys_idx, q_idx, doc_key, g_q, g_d, len(names))
    for i in np.flatnonzero(~hits):
        _refuse_unmatched(ds, names[i], extra.get(names[i]), fit)

    has_pools = pools.shape[0] > 0
    rankings = Rankings.from_rows(
        sys_idx,
        q_idx,
        doc_key,
        score,
        n_systems=len(names),
        n_queries=len(q_ext),
        protocol=proto,
        pool_query=index_of(q_pks, pools[:, 0]) if has_pools else None,
        pool_doc=codes.of_pks(pools[:, 1]) if has_pools else None,
    )
    out: dict[str, tuple[list[str], dict[str, np.ndarray]]] = {}
    for metric, (lq, ld, lg) in label_idx.items():
        if lq.size == 0:
            continue
        if metric == "qrel_ndcg":
            gains = qrel_gain_array(
                lg, exponential=exponential_qrels, decimals=preset.qrel_decimals
            )
            positive = gains > 0
            table = rankings.ndcg(
                lq, ld, gains, k=k, ideal_query=lq[positive], ideal_gain=gains[positive]
            )
            # Queries without a positive qrel are undefined for every system: dropped.
            keep = np.zeros(len(q_ext), dtype=bool)
            keep[lq[positive]] = True
        else:
            table = rankings.ndcg(lq, ld, lg, k=k)
            keep = np.zeros(len(q_ext), dtype=bool)
            keep[lq] = True
        order = sorted(np.flatnonzero(keep).tolist(), key=lambda j: q_ext[j])
        out[metric] = (
            [q_ext[j] for j in order],
            {n: table[i, order] for i, n in enumerate(names)},
        )
    return names, out


def _refuse_unmatched(
    dataset: Dataset, system: str, run: RunMap | None, fit: CalibrationFit
) -> None:
    """Refuse a run that ranks no judged document, naming an example of each side."""
    if run is not None:
        ex_q, ex_docs = next(iter(run.items()), ("(none)", {}))
        ex_d = next(iter(ex_docs), "(none)")
    else:
        first = (
            RankingEntry.objects.filter(system__dataset=dataset, system__name=system)
            .order_by("system_id", "query_id", "rank")
            .values_list("query__external_id", "document__external_id")
            .first()
        )
        ex_q, ex_d = first or ("(none)", "(none)")
    judged = (
        DocumentAbility.objects.filter(
            fit=fit, query__dataset=dataset, gain__isnull=False
        )
        .order_by("query_id", "-gain", "document_id")  # the best judged document
        .values_list("query__external_id", "document__external_id")
        .first()
    )
    j_q, j_d = judged or ("(none)", "(none)")
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
        ds_systems, per_metric = _dataset_scores(
            ds,
            fit,
            proto,
            k=k,
            extra_runs=extra_runs,
            systems=systems,
            exponential_qrels=exponential_qrels,
        )
        for metric, (qids, per_system) in per_metric.items():
            labels_q = [f"{ds.name}||{q}" if suite else q for q in qids]
            tables[metric].append((ds.name, labels_q, per_system))
        all_systems.update(ds_systems)

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
