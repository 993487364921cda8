"""One call from rankings and labels to a whole leaderboard (rcp_facts 5.2-5.4).

``dataset_scores`` scores every system of one dataset on every query against the
label sets it has (RCP gains, Count gains, qrel grades): rankings are sorted once
under the protocol (``ndcg.Rankings``) and scored per label set. ``leaderboard``
turns per-dataset score tables into the suite result: means (over queries, then
datasets), bootstrap intervals, paired tests of every system pair, sensitivity and
failure modes. Callers read rows into ``DatasetRuns``. No Django.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rcp import stats
from rcp.ndcg import PROTOCOLS, Rankings, qrel_gain_array, ranked_label_hits

__all__ = [
    "METRICS",
    "DatasetRuns",
    "QueryScores",
    "dataset_scores",
    "leaderboard",
    "unmatched_systems",
]

METRICS = ("rcp_ndcg", "count_ndcg", "qrel_ndcg")
CI_KEYS = {"rcp_ndcg": "rcp_ci", "count_ndcg": "count_ci", "qrel_ndcg": "qrel_ci"}
ALPHA = 0.05


@dataclass(frozen=True)
class DatasetRuns:
    """One dataset: systems' rankings as flat rows and its label sets.

    Rankings: row i says system ``sys_idx[i]`` ranks document key ``doc_key[i]`` for
    query ``q_idx[i]`` with ``score[i]``. Document keys are integers whose order is
    the documents' id order (trec_eval's tie rule sorts by it). ``labels`` maps a
    metric of METRICS to (query index, document key, gain) rows: RCP and Count gains
    in [0, 1], qrel grades as given (gains derived by the protocol). A metric whose
    labels are absent is not scored. ``pool_*`` give each query's candidate pool in
    pool order (needed by pool-only protocols).
    """

    name: str
    systems: list[str]
    queries: list[str]
    protocol: str
    sys_idx: np.ndarray
    q_idx: np.ndarray
    doc_key: np.ndarray
    score: np.ndarray
    labels: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = field(
        default_factory=dict
    )
    pool_query: np.ndarray | None = None
    pool_doc: np.ndarray | None = None


@dataclass(frozen=True)
class QueryScores:
    """One metric on one dataset: ``values[s, i]`` is system s on ``queries[i]``
    (the labelled queries, in label order; qrel: queries with a positive grade)."""

    queries: list[str]
    values: np.ndarray


def unmatched_systems(d: DatasetRuns) -> list[int]:
    """Systems that rank no labelled document (RCP gains if present, else the
    first label set present): a run from another dataset or id scheme."""
    for metric in METRICS:
        if metric in d.labels and d.labels[metric][0].size:
            lq, ld, _g = d.labels[metric]
            hits = ranked_label_hits(
                d.sys_idx, d.q_idx, d.doc_key, lq, ld, len(d.systems)
            )
            return np.flatnonzero(~hits).tolist()
    return []


def dataset_scores(
    d: DatasetRuns, *, k: int, exponential_qrels: bool = False
) -> dict[str, QueryScores]:
    """nDCG@k of every system on every labelled query, per label set present.

    RCP/Count: ideal = the query's labelled documents (its judged pool). qrel:
    gains from grades (linear, or 2^g - 1), rounded as the protocol says, ideal over
    all positive qrels (trec_eval); queries without a positive qrel are dropped. A
    labelled query a system did not rank scores 0.
    """
    if k < 1:
        raise ValueError("k must be at least 1")
    preset = PROTOCOLS[d.protocol]
    has_pools = d.pool_query is not None and d.pool_query.size > 0
    rankings = Rankings.from_rows(
        d.sys_idx,
        d.q_idx,
        d.doc_key,
        d.score,
        n_systems=len(d.systems),
        n_queries=len(d.queries),
        protocol=d.protocol,
        pool_query=d.pool_query if has_pools else None,
        pool_doc=d.pool_doc if has_pools else None,
    )
    out: dict[str, QueryScores] = {}
    for metric in METRICS:
        if metric not in d.labels:
            continue
        lq, ld, lg = d.labels[metric]
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
            keep = np.zeros(len(d.queries), dtype=bool)
            keep[lq[positive]] = True
        else:
            table = rankings.ndcg(lq, ld, lg, k=k)
            keep = np.zeros(len(d.queries), dtype=bool)
            keep[lq] = True
        order = sorted(np.flatnonzero(keep).tolist(), key=lambda j: d.queries[j])
        out[metric] = QueryScores(
            queries=[d.queries[j] for j in order], values=table[:, order]
        )
    return out


def _ranks(values: dict[str, float | None]) -> dict[str, int | None]:
    """1-based ranks by value descending, ties by name; missing values unranked."""
    present = sorted(
        (n for n, v in values.items() if v is not None), key=lambda n: (-values[n], n)
    )
    out: dict[str, int | None] = {n: None for n in values}
    out.update({n: i + 1 for i, n in enumerate(present)})
    return out


def leaderboard(
    tables: list[tuple[str, list[str], dict[str, QueryScores]]],
    *,
    k: int,
    suite_labels: bool = False,
    include_queries: bool = False,
    n_boot: int = 1000,
    seed: int = 0,
    alpha: float = ALPHA,
) -> dict[str, Any]:
    """The suite leaderboard from per-dataset tables (name, systems, scores).

    Per system and metric: mean over queries per dataset, then over datasets;
    bootstrap percentile CI (queries resampled within datasets, same draws for every
    system); ranks. Pairs (A before B by name, delta = B - A): paired t over the
    per-query values pooled across datasets, ``separated`` at ``alpha``, ``tie_zone``
    when |delta| < 0.02. Sensitivity: per-dataset share of separated pairs, mean over
    datasets. Failure modes: shares of queries saturated / floored / compressed
    (exact ties) / in the tie zone. ``suite_labels`` prefixes query labels with the
    dataset name. Returns plain Python values (NaN as None).
    """
    per_metric: dict[str, list[tuple[str, list[str], dict[str, np.ndarray]]]] = {
        m: [] for m in METRICS
    }
    all_systems: set[str] = set()
    for ds_name, systems, scores in tables:
        all_systems.update(systems)
        for metric, qs in scores.items():
            labels = [f"{ds_name}||{q}" if suite_labels else q for q in qs.queries]
            per_metric[metric].append(
                (ds_name, labels, {n: qs.values[i] for i, n in enumerate(systems)})
            )
    names = sorted(all_systems)
    rows: dict[str, dict[str, Any]] = {
        n: {"system": n, "datasets": {}, "n_queries": {}} for n in names
    }
    for metric in METRICS:
        for n in names:
            ds_means, ds_arrays = [], []
            for ds_name, _labels, per_system in per_metric[metric]:
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
                ci = stats.bootstrap_ci(ds_arrays, rng=seed, n_boot=n_boot, alpha=alpha)
                rows[n][CI_KEYS[metric]] = [float(ci[0]), float(ci[1])]
            else:
                rows[n][CI_KEYS[metric]] = None
            if include_queries:
                rows[n].setdefault("per_query", {})[metric] = {
                    q: float(x)
                    for _d, labels, per_system in per_metric[metric]
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
        blocks = per_metric[metric]
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
        tests = stats.pair_tests(matrix)
        sep = tests.separated(alpha)
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
                    "tie_zone": bool(abs(delta) < stats.DECISIVE_MARGIN)
                    if math.isfinite(delta)
                    else True,
                }
            )
        per_ds = [
            np.stack([per_system[n] for n in names if n in per_system])
            for _d, _l, per_system in blocks
            if sum(n in per_system for n in names) >= 2
        ]
        sensitivity[metric] = stats.sensitivity(per_ds, alpha) if per_ds else None
        flags = {"saturation": 0, "floor": 0, "compression": 0, "tie_zone": 0}
        n_cols = 0
        for x in per_ds:
            x = x[:, ~np.any(np.isnan(x), axis=0)]
            if x.shape[1] == 0:
                continue
            fm = stats.failure_modes(x)
            for key in flags:
                flags[key] += int(getattr(fm, key).sum())
            n_cols += x.shape[1]
        failure[metric] = (
            {key: v / n_cols for key, v in flags.items()} if n_cols else None
        )

    ordered = sorted(
        rows.values(),
        key=lambda r: (
            r["rcp_ndcg"] is None and r["qrel_ndcg"] is None,
            -(r["rcp_ndcg"] if r["rcp_ndcg"] is not None else (r["qrel_ndcg"] or 0.0)),
            r["system"],
        ),
    )
    return _clean(
        {
            "k": k,
            "systems": ordered,
            "pairs": pairs,
            "sensitivity": sensitivity,
            "failure_modes": failure,
            "metrics": [m for m in METRICS if per_metric[m]],
        }
    )


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
