"""nDCG@k, tie rules, protocol presets; RCP-, Count-, qrel-nDCG (rcp_facts 5.2-5.3).

The dense core ``ndcg_dense`` scores many queries at once from padded (Q, N) arrays; the
mapping-based helpers build those arrays from per-query dicts of doc id -> score/gain.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

__all__ = [
    "PROTOCOLS",
    "Protocol",
    "TieRule",
    "candidate_docs",
    "count_ndcg",
    "gain_ndcg",
    "ndcg_dense",
    "qrel_gains",
    "qrel_ndcg",
    "rcp_ndcg",
]

TieRule = Literal["group_mean", "doc_id_desc", "input_order"]
_TIE_RULES = ("group_mean", "doc_id_desc", "input_order")


@dataclass(frozen=True)
class Protocol:
    """Evaluation preset: tie rule, pool-only ranking or not, qrel rounding."""

    name: str
    ties: TieRule
    pool_only: bool
    qrel_decimals: int | None


PROTOCOLS: dict[str, Protocol] = {
    p.name: p
    for p in (
        Protocol("nanobeir", "doc_id_desc", True, 5),
        Protocol("bright", "doc_id_desc", False, 5),
        Protocol("vidore", "group_mean", True, None),
        Protocol("trecdl", "input_order", True, None),
        Protocol("mteb", "group_mean", True, None),
        Protocol("plain", "group_mean", False, None),
    )
}


def _discount(n: int) -> np.ndarray:
    return 1.0 / np.log2(np.arange(2, n + 2, dtype=np.float64))


def ndcg_dense(
    scores: np.ndarray,
    gains: np.ndarray,
    ideal_gains: np.ndarray,
    k: int,
    *,
    ties: TieRule = "group_mean",
    tiebreak: np.ndarray | None = None,
) -> np.ndarray:
    """nDCG@k per row of padded (Q, N) ``scores``/``gains``; NaN score = not ranked.

    ``ideal_gains`` (Q, M) holds each query's labelled gains (NaN/0 padding). Ties:
    ``group_mean`` credits each equal-score class its mean gain; otherwise ties go to
    the larger ``tiebreak`` first (required). Rows with nothing ranked or IDCG 0 give 0.
    """
    if ties not in _TIE_RULES:
        raise ValueError(f"unknown tie rule {ties!r}")
    if k < 1:
        raise ValueError("k must be >= 1")
    scores = np.atleast_2d(np.asarray(scores, dtype=np.float64))
    gains = np.atleast_2d(np.asarray(gains, dtype=np.float64))
    ideal_gains = np.atleast_2d(np.asarray(ideal_gains, dtype=np.float64))
    if scores.shape != gains.shape or ideal_gains.shape[0] != scores.shape[0]:
        raise ValueError("scores, gains and ideal_gains disagree in shape")
    n_q, n = scores.shape
    present = ~np.isnan(scores)
    if np.any(np.isinf(scores)):
        raise ValueError("scores must be finite (NaN marks an unranked document)")
    neg = np.where(present, -scores, np.inf)
    if ties == "group_mean" or n == 0:
        order = np.argsort(neg, axis=1, kind="stable")
    else:
        if tiebreak is None:
            raise ValueError(f"tie rule {ties!r} needs a tiebreak array")
        tb = np.broadcast_to(np.asarray(tiebreak, dtype=np.float64), scores.shape)
        order = np.lexsort((-tb, neg), axis=1)
    s_sorted = np.take_along_axis(neg, order, axis=1)
    p_sorted = np.take_along_axis(present, order, axis=1)
    g_sorted = np.where(p_sorted, np.take_along_axis(gains, order, axis=1), 0.0)
    if ties == "group_mean" and n > 0:
        new_group = np.ones((n_q, n), dtype=bool)
        new_group[:, 1:] = s_sorted[:, 1:] != s_sorted[:, :-1]
        gid = np.cumsum(new_group.ravel()) - 1
        sums = np.bincount(gid, weights=g_sorted.ravel())
        counts = np.bincount(gid)
        g_sorted = (sums / counts)[gid].reshape(n_q, n)
    kk = min(k, n)
    dcg = g_sorted[:, :kk] @ _discount(kk)
    ideal = -np.sort(-np.nan_to_num(ideal_gains, nan=0.0), axis=1)[:, :k]
    idcg = np.clip(ideal, 0.0, None) @ _discount(ideal.shape[1])
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(idcg > 0, dcg / np.where(idcg > 0, idcg, 1.0), 0.0)
    return out


def _protocol(protocol: str | Protocol) -> Protocol:
    if isinstance(protocol, Protocol):
        return protocol
    try:
        return PROTOCOLS[protocol]
    except KeyError:
        raise ValueError(f"unknown protocol {protocol!r}") from None


def candidate_docs(
    scores: Mapping[str, float],
    *,
    protocol: str | Protocol = "plain",
    pool: Sequence[str] | None = None,
    excluded: Iterable[str] = (),
) -> list[str]:
    """Docs entering one query's ranking, in input order.

    Excluded ids leave. With a pool: pool docs the system scored, in pool order, then
    (unless the protocol is pool-only) scored docs outside the pool. Pool-only and
    ``input_order`` protocols require a pool.
    """
    proto = _protocol(protocol)
    drop = set(excluded)
    if pool is None:
        if proto.pool_only or proto.ties == "input_order":
            raise ValueError(f"protocol {proto.name!r} requires the query's pool")
        return [d for d in scores if d not in drop]
    in_pool = [d for d in pool if d in scores and d not in drop]
    if proto.pool_only:
        return in_pool
    pool_set = set(pool)
    return in_pool + [d for d in scores if d not in pool_set and d not in drop]


def gain_ndcg(
    runs: Mapping[str, Mapping[str, float]],
    gains: Mapping[str, Mapping[str, float]],
    *,
    k: int,
    protocol: str | Protocol = "plain",
    pools: Mapping[str, Sequence[str]] | None = None,
    excluded: Mapping[str, Iterable[str]] | None = None,
    ideals: Mapping[str, Sequence[float]] | None = None,
) -> dict[str, float]:
    """nDCG@k for every labelled query (keys of ``gains``), vectorised across queries.

    Unlabelled ranked docs gain 0. The ideal is ``ideals[q]`` if given, else the
    labelled gains of the query's pool (or all labelled docs without a pool), minus
    excluded ids. A labelled query the system did not rank scores 0.
    """
    proto = _protocol(protocol)
    qids = list(gains)
    rows_s: list[list[float]] = []
    rows_g: list[list[float]] = []
    rows_t: list[list[float]] = []
    rows_i: list[list[float]] = []
    for q in qids:
        run = runs.get(q, {})
        pool = None if pools is None else pools.get(q)
        drop = set(() if excluded is None else excluded.get(q, ()))
        cands = candidate_docs(run, protocol=proto, pool=pool, excluded=drop)
        g_q = gains[q]
        rows_s.append([float(run[d]) for d in cands])
        rows_g.append([float(g_q.get(d, 0.0)) for d in cands])
        if proto.ties == "doc_id_desc":
            rank = {d: i for i, d in enumerate(sorted(cands))}
            rows_t.append([float(rank[d]) for d in cands])
        else:
            rows_t.append([-float(i) for i in range(len(cands))])
        if ideals is not None and q in ideals:
            rows_i.append([float(x) for x in ideals[q]])
        elif pool is not None:
            rows_i.append([float(g_q.get(d, 0.0)) for d in pool if d not in drop])
        else:
            rows_i.append([float(v) for d, v in g_q.items() if d not in drop])
    values = ndcg_dense(
        _pad(rows_s),
        _pad(rows_g, fill=0.0),
        _pad(rows_i, fill=0.0),
        k,
        ties=proto.ties,
        tiebreak=_pad(rows_t, fill=0.0),
    )
    return dict(zip(qids, values.tolist(), strict=True))


def rcp_ndcg(
    runs: Mapping[str, Mapping[str, float]],
    rcp_gains: Mapping[str, Mapping[str, float]],
    *,
    k: int,
    protocol: str | Protocol = "plain",
    pools: Mapping[str, Sequence[str]] | None = None,
    excluded: Mapping[str, Iterable[str]] | None = None,
) -> dict[str, float]:
    """RCP-nDCG@k: gains g(theta~) of the calibrated pool, ideal = that pool by gain."""
    return gain_ndcg(
        runs, rcp_gains, k=k, protocol=protocol, pools=pools, excluded=excluded
    )


def count_ndcg(
    runs: Mapping[str, Mapping[str, float]],
    count_gains: Mapping[str, Mapping[str, float]],
    *,
    k: int,
    protocol: str | Protocol = "plain",
    pools: Mapping[str, Sequence[str]] | None = None,
    excluded: Mapping[str, Iterable[str]] | None = None,
) -> dict[str, float]:
    """Count-nDCG@k: gains = share of passed rubric verdicts, ideal = judged pool."""
    return gain_ndcg(
        runs, count_gains, k=k, protocol=protocol, pools=pools, excluded=excluded
    )


def qrel_gains(
    qrels: Mapping[str, float],
    *,
    exponential: bool = False,
    decimals: int | None = None,
) -> dict[str, float]:
    """Grade -> gain: max(grade, 0) (linear) or 2^grade - 1, optionally rounded."""
    out: dict[str, float] = {}
    for d, grade in qrels.items():
        g = max(float(grade), 0.0)
        g = 2.0**g - 1.0 if exponential else g
        out[d] = round(g, decimals) if decimals is not None else g
    return out


def qrel_ndcg(
    runs: Mapping[str, Mapping[str, float]],
    qrels: Mapping[str, Mapping[str, float]],
    *,
    k: int,
    protocol: str | Protocol = "plain",
    pools: Mapping[str, Sequence[str]] | None = None,
    excluded: Mapping[str, Iterable[str]] | None = None,
    exponential: bool = False,
) -> dict[str, float]:
    """qrel-nDCG@k against human grades; ideal over all positive qrels (trec_eval).

    Queries without a positive grade are NaN (drop them from means).
    """
    proto = _protocol(protocol)
    gains = {
        q: qrel_gains(qr, exponential=exponential, decimals=proto.qrel_decimals)
        for q, qr in qrels.items()
    }
    ideals = {
        q: [
            v
            for d, v in g.items()
            if v > 0 and d not in set(() if excluded is None else excluded.get(q, ()))
        ]
        for q, g in gains.items()
    }
    values = gain_ndcg(
        runs,
        gains,
        k=k,
        protocol=proto,
        pools=pools,
        excluded=excluded,
        ideals=ideals,
    )
    return {q: (v if ideals[q] else math.nan) for q, v in values.items()}


def _pad(rows: list[list[float]], fill: float = math.nan) -> np.ndarray:
    width = max((len(r) for r in rows), default=0)
    out = np.full((len(rows), width), fill)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out
