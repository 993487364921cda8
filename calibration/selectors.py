"""Reads of the calibration app: fits, abilities and the leaderboard.

Access rules live here (``can_read_benchmarks``). The leaderboard reads gains, qrels,
pools and rankings with ``values_list`` and hands arrays to ``rcp``.
"""

from __future__ import annotations

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
from rcp.leaderboard import (
    CI_KEYS,
    METRICS,
    DatasetRuns,
    QueryScores,
    unmatched_systems,
)
from rcp.leaderboard import dataset_scores as rcp_dataset_scores
from rcp.leaderboard import leaderboard as rcp_leaderboard
from rcp.ndcg import PROTOCOLS, index_of, rows_array
from rcp_platform.exceptions import ApplicationError, NotFoundError

from .models import CalibrationFit, DocumentAbility, FitStatus, QueryCalibration

__all__ = ["CI_KEYS", "METRICS", "METRIC_LABELS"]  # re-exported for views and commands
METRIC_LABELS = {
    "rcp_ndcg": "RCP-nDCG",
    "count_ndcg": "Count-nDCG",
    "qrel_ndcg": "qrel-nDCG",
}
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


def fit_for_scoring(
    *, dataset: Dataset, allow_unconverged: bool = False
) -> CalibrationFit | None:
    """The fit whose gains score ``dataset``: its newest finished fit (done or
    unconverged), None if it has none. An unconverged newest fit is refused with
    ApplicationError unless ``allow_unconverged`` (then the caller must say so)."""
    fit = (
        CalibrationFit.objects.filter(
            datasets=dataset, status__in=[FitStatus.DONE, FitStatus.UNCONVERGED]
        )
        .order_by("-created_at", "-id")
        .first()
    )
    if (
        fit is not None
        and fit.status == FitStatus.UNCONVERGED
        and not allow_unconverged
    ):
        older = (
            CalibrationFit.objects.filter(datasets=dataset, status=FitStatus.DONE)
            .exclude(pk=fit.pk)
            .order_by("-created_at", "-id")
            .values_list("id", flat=True)
            .first()
        )
        hint = f" (fit {older} is an older converged fit)" if older else ""
        raise ApplicationError(
            f"the latest calibration of {dataset.name!r}, fit {fit.pk}, did not "
            f"converge ({fit.error or 'see its page'}); its gains are not "
            f"trustworthy. Re-run `calibrate`{hint}, or pass --allow-unconverged / "
            "allow_unconverged=1 to score with it anyway.",
            extra={"fit": fit.pk, "status": fit.status},
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


def fit_query_rows(
    *, fit: CalibrationFit, flagged_only: bool = False
) -> QuerySet[QueryCalibration]:
    """A fit's per-query rows by dataset and query id (flagged ones only if asked)."""
    qs = QueryCalibration.objects.filter(fit=fit)
    if flagged_only:
        qs = qs.filter(flagged=True)
    return qs.select_related("query__dataset").order_by(
        "query__dataset__name", "query__external_id"
    )


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


def _dataset_runs(
    ds: Dataset,
    fit: CalibrationFit | None,
    proto: str,
    *,
    extra_runs: Mapping[str, RunMap] | None,
    systems: Sequence[str] | None,
) -> DatasetRuns:
    """Read one dataset's rankings, label sets and pools as ``rcp.leaderboard``
    input (integer pks straight into arrays, no joins to external ids). Without a
    fit only qrel grades label the queries."""
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
    labels: dict[str, np.ndarray] = {}
    if fit is not None:
        labels["rcp_ndcg"] = _ids(
            DocumentAbility.objects.filter(
                fit=fit, query__dataset=ds, gain__isnull=False
            ).values_list("query_id", "document_id", "gain"),
            3,
        )
        labels["count_ndcg"] = _ids(
            DocumentAbility.objects.filter(
                fit=fit, query__dataset=ds, count_gain__isnull=False
            ).values_list("query_id", "document_id", "count_gain"),
            3,
        )
    labels["qrel_ndcg"] = _ids(
        Qrel.objects.filter(query__dataset=ds).values_list(
            "query_id", "document_id", "grade"
        ),
        3,
    )
    pools = _ids(
        PoolEntry.objects.filter(query__dataset=ds)
        .order_by("query_id", "rank")
        .values_list("query_id", "document_id"),
        2,
    )
    if preset.pool_only or preset.ties == "input_order":
        has_pool = np.zeros(len(q_ext), dtype=bool)
        has_pool[index_of(q_pks, pools[:, 0])] = True
        first = "rcp_ndcg" if "rcp_ndcg" in labels else "qrel_ndcg"
        labelled = np.unique(index_of(q_pks, labels[first][:, 0]))
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
    has_pools = pools.shape[0] > 0
    return DatasetRuns(
        name=ds.name,
        systems=names,
        queries=q_ext,
        protocol=proto,
        sys_idx=sys_idx,
        q_idx=q_idx,
        doc_key=doc_key,
        score=score,
        labels={
            m: (index_of(q_pks, rows[:, 0]), codes.of_pks(rows[:, 1]), rows[:, 2])
            for m, rows in labels.items()
        },
        pool_query=index_of(q_pks, pools[:, 0]) if has_pools else None,
        pool_doc=codes.of_pks(pools[:, 1]) if has_pools else None,
    )


def dataset_query_scores(
    *,
    dataset: Dataset,
    fit: CalibrationFit | None,
    k: int,
    protocol: str | None = None,
    systems: Sequence[str] | None = None,
    extra_runs: Mapping[str, RunMap] | None = None,
    exponential_qrels: bool = False,
) -> tuple[list[str], dict[str, QueryScores]]:
    """Per-query RCP-, Count- and qrel-nDCG@k of the dataset's systems (all, or the
    named ones): the one nDCG path of the platform (leaderboard and contest
    sampling). ``fit`` None scores qrel-nDCG only. Refuses a run that ranks no
    labelled document, naming an example of each side."""
    proto = protocol or dataset.protocol
    runs = _dataset_runs(dataset, fit, proto, extra_runs=extra_runs, systems=systems)
    for i in unmatched_systems(runs):
        name = runs.systems[i]
        _refuse_unmatched(dataset, name, (extra_runs or {}).get(name), fit)
    try:
        scores = rcp_dataset_scores(runs, k=k, exponential_qrels=exponential_qrels)
    except ValueError as exc:
        raise ApplicationError(str(exc)) from exc
    return runs.systems, scores


def _refuse_unmatched(
    dataset: Dataset, system: str, run: RunMap | None, fit: CalibrationFit | None
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
    if fit is not None:
        judged = (
            DocumentAbility.objects.filter(
                fit=fit, query__dataset=dataset, gain__isnull=False
            )
            .order_by("query_id", "-gain", "document_id")  # the best judged document
            .values_list("query__external_id", "document__external_id")
            .first()
        )
    else:
        judged = (
            Qrel.objects.filter(query__dataset=dataset, grade__gt=0)
            .order_by("query_id", "-grade", "document_id")
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


def leaderboard_compute(
    *,
    datasets: Sequence[Dataset],
    k: int = 10,
    protocol: str | None = None,
    extra_runs: Mapping[str, RunMap] | None = None,
    systems: Sequence[str] | None = None,
    include_queries: bool = False,
    exponential_qrels: bool = False,
    allow_unconverged: bool = False,
    n_boot: int = 1000,
    seed: int = 0,
) -> dict[str, Any]:
    """RCP-, Count- and qrel-nDCG@k of every system, per dataset and as the suite
    mean, with bootstrap CIs, paired t-tests of every pair, sensitivity and failure
    modes (``rcp.leaderboard``).

    Gains come from each dataset's newest finished fit (``fit_for_scoring``: an
    unconverged one is refused unless ``allow_unconverged``, and then named in
    ``warnings``). A dataset without any fit is scored by qrel-nDCG alone (as
    trec_eval would); ``notices`` say that RCP columns need `calibrate` or
    `import_gains`. ``extra_runs`` ({name: {query: {doc: score}}}) scores unsaved
    runs (single dataset only). ``protocol`` None = each dataset's own. Returns
    JSON-safe dicts.
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

    tables = []
    fits: dict[str, int | None] = {}
    fit_status: dict[str, str | None] = {}
    protocols: dict[str, str] = {}
    warnings: list[str] = []
    notices: list[str] = []
    for ds in datasets:
        fit = fit_for_scoring(dataset=ds, allow_unconverged=allow_unconverged)
        fits[ds.name] = fit.pk if fit else None
        fit_status[ds.name] = fit.status if fit else None
        if fit is not None and fit.status == FitStatus.UNCONVERGED:
            warnings.append(
                f"{ds.name}: scored with fit {fit.pk}, which did NOT converge "
                f"({fit.error}); RCP and Count columns are not trustworthy"
            )
        if fit is None:
            notices.append(
                f"{ds.name}: no calibration yet, so only qrel-nDCG is shown (as "
                "trec_eval computes it); RCP- and Count-nDCG need `calibrate` (after "
                "judging) or `import_gains` (released labels)"
            )
        proto = protocol or ds.protocol
        protocols[ds.name] = proto
        names, scores = dataset_query_scores(
            dataset=ds,
            fit=fit,
            k=k,
            protocol=proto,
            systems=systems,
            extra_runs=extra_runs,
            exponential_qrels=exponential_qrels,
        )
        if not scores:
            raise ApplicationError(
                f"dataset {ds.name!r} has neither a calibration nor positive qrels: "
                "nothing to score"
            )
        tables.append((ds.name, names, scores))
    board = rcp_leaderboard(
        tables,
        k=k,
        suite_labels=len(datasets) > 1,
        include_queries=include_queries,
        n_boot=n_boot,
        seed=seed,
    )
    distinct = set(protocols.values())
    return {
        **board,
        "protocol": protocol or (distinct.pop() if len(distinct) == 1 else None),
        "protocols": protocols,
        "datasets": [d.name for d in datasets],
        "fits": fits,
        "fit_status": fit_status,
        "warnings": warnings,
        "notices": notices,
        "qrel_only": all(f is None for f in fits.values()),
    }


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
