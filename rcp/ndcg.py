"""nDCG@k, tie rules, protocol presets; RCP-, Count-, qrel-nDCG (rcp_facts 5.2-5.3).

The dense core ``ndcg_dense`` scores many queries at once from padded (Q, N) arrays; the
mapping-based helpers build those arrays from per-query dicts of doc id -> score/gain.
``Rankings`` is the bulk path for flat rows (as read with ``values_list``): every
system's ranking of every query sorted once, then scored against any label set.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

__all__ = [
    "PROTOCOLS",
    "Protocol",
    "Rankings",
    "TieRule",
    "candidate_docs",
    "count_ndcg",
    "gain_ndcg",
    "index_of",
    "ndcg_dense",
    "qrel_gain_array",
    "qrel_gains",
    "qrel_ndcg",
    "ranked_label_hits",
    "rcp_ndcg",
    "rows_array",
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
    if k < 1:
        raise ValueError("k must be >= 1")
    scores = np.atleast_2d(np.asarray(scores, dtype=np.float64))
    ideal_gains = np.atleast_2d(np.asarray(ideal_gains, dtype=np.float64))
    if ideal_gains.shape[0] != scores.shape[0]:
        raise ValueError("scores, gains and ideal_gains disagree in shape")
    return _ndcg_rows(scores, gains, _idcg(ideal_gains, k), k, ties, tiebreak)


def _idcg(ideal_gains: np.ndarray, k: int) -> np.ndarray:
    """IDCG@k per row of padded (Q, M) labelled gains (NaN/0 padding)."""
    ideal = np.nan_to_num(ideal_gains, nan=0.0)
    if ideal.shape[1] > k:
        # Only the k largest matter: partition, then sort those k.
        ideal = np.partition(ideal, ideal.shape[1] - k, axis=1)[:, -k:]
    ideal = -np.sort(-ideal, axis=1)
    return np.clip(ideal, 0.0, None) @ _discount(ideal.shape[1])


def _ndcg_rows(
    scores: np.ndarray,
    gains: np.ndarray,
    idcg: np.ndarray,
    k: int,
    ties: TieRule,
    tiebreak: np.ndarray | None,
) -> np.ndarray:
    """nDCG@k of padded (Q, N) rows given each row's IDCG."""
    if ties not in _TIE_RULES:
        raise ValueError(f"unknown tie rule {ties!r}")
    gains = np.atleast_2d(np.asarray(gains, dtype=np.float64))
    if scores.shape != gains.shape or idcg.shape != (scores.shape[0],):
        raise ValueError("scores, gains and ideal_gains disagree in shape")
    n_q, n = scores.shape
    present = ~np.isnan(scores)
    if np.any(np.isinf(scores)):
        raise ValueError("scores must be finite (NaN marks an unranked document)")
    neg = np.where(present, -scores, np.inf)
    # An unstable sort is enough: group_mean is order-free within a tie class, and
    # the other rules re-sort (score, tiebreak) only in rows that have a score tie.
    order = np.argsort(neg, axis=1)
    s_sorted = np.take_along_axis(neg, order, axis=1)
    tied = (s_sorted[:, 1:] == s_sorted[:, :-1]) & np.isfinite(s_sorted[:, 1:])
    if ties != "group_mean" and n > 0:
        if tiebreak is None:
            raise ValueError(f"tie rule {ties!r} needs a tiebreak array")
        rows = np.flatnonzero(tied.any(axis=1))
        if rows.size:
            tb = np.broadcast_to(np.asarray(tiebreak, dtype=np.float64), scores.shape)
            order[rows] = np.lexsort((-tb[rows], neg[rows]), axis=1)
            s_sorted[rows] = np.take_along_axis(neg[rows], order[rows], axis=1)
    p_sorted = np.isfinite(s_sorted)
    g_sorted = np.where(p_sorted, np.take_along_axis(gains, order, axis=1), 0.0)
    if ties == "group_mean" and n > 0:
        rows = np.flatnonzero(tied.any(axis=1))
        if rows.size:
            g_sorted[rows] = _group_means(s_sorted[rows], g_sorted[rows])
    kk = min(k, n)
    dcg = g_sorted[:, :kk] @ _discount(kk)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(idcg > 0, dcg / np.where(idcg > 0, idcg, 1.0), 0.0)
    return out


def _group_means(s_sorted: np.ndarray, g_sorted: np.ndarray) -> np.ndarray:
    """Replace each run of equal sorted scores by its mean gain."""
    n_q, n = s_sorted.shape
    new_group = np.ones((n_q, n), dtype=bool)
    new_group[:, 1:] = s_sorted[:, 1:] != s_sorted[:, :-1]
    gid = np.cumsum(new_group.ravel()) - 1
    sums = np.bincount(gid, weights=g_sorted.ravel())
    counts = np.bincount(gid)
    return (sums / counts)[gid].reshape(n_q, n)


@dataclass(frozen=True)
class Rankings:
    """Every system's ranking of every query, sorted best-first under a protocol.

    Row ``s * n_queries + q`` of ``keys`` lists the (query, document) keys ranked by
    system s for query q, best first, after the protocol's pool filter and tie rule
    (padding -1). ``tied_rows`` are rows holding an equal-score class under
    ``group_mean``, with their classes in ``groups``. Build with ``from_rows``; score
    with ``ndcg``. Sorting happens once, whatever the number of label sets.
    """

    n_systems: int
    n_queries: int
    span: int
    keys: np.ndarray
    ranked: np.ndarray
    tied_rows: np.ndarray
    groups: np.ndarray
    pool_keys: np.ndarray | None
    pool_query: np.ndarray | None
    has_pool: np.ndarray

    @classmethod
    def from_rows(
        cls,
        system: np.ndarray,
        query: np.ndarray,
        doc: np.ndarray,
        score: np.ndarray,
        *,
        n_systems: int,
        n_queries: int,
        protocol: str | Protocol = "plain",
        pool_query: np.ndarray | None = None,
        pool_doc: np.ndarray | None = None,
    ) -> Rankings:
        """Rankings from flat rows: system ``system[r]`` scored document ``doc[r]``
        for query ``query[r]`` with ``score[r]`` (one row per system, query and
        document; a (system, query)'s rows in input order).

        Documents are non-negative integer keys; under ``doc_id_desc`` their order
        must be the documents' id order (ties go to the larger key). Pools are rows
        (``pool_query``, ``pool_doc``) in pool order; a query without pool rows has
        none. Same candidates and tie rules as ``gain_ndcg``; pool-only and
        ``input_order`` protocols need ``pool_*``.
        """
        proto = _protocol(protocol)
        system = np.asarray(system, dtype=np.int64).ravel()
        query = np.asarray(query, dtype=np.int64).ravel()
        doc = np.asarray(doc, dtype=np.int64).ravel()
        score = np.asarray(score, dtype=np.float64).ravel()
        if not (system.size == query.size == doc.size == score.size):
            raise ValueError("system, query, doc and score must have equal length")
        if system.size and (
            system.min() < 0
            or system.max() >= n_systems
            or query.min() < 0
            or query.max() >= n_queries
            or doc.min() < 0
        ):
            raise ValueError("system, query or document index out of range")
        if not np.isfinite(score).all():
            raise ValueError("scores must be finite")
        has_pools = pool_query is not None and pool_doc is not None
        if not has_pools and (proto.pool_only or proto.ties == "input_order"):
            raise ValueError(f"protocol {proto.name!r} requires the query's pool")
        p_query = np.asarray(pool_query if has_pools else [], np.int64).ravel()
        p_doc = np.asarray(pool_doc if has_pools else [], np.int64).ravel()
        if p_query.shape != p_doc.shape:
            raise ValueError("pool_query and pool_doc must have equal length")
        if p_query.size and (
            p_query.min() < 0 or p_query.max() >= n_queries or p_doc.min() < 0
        ):
            raise ValueError("pool query or document index out of range")
        span = int(max(doc.max(initial=-1), p_doc.max(initial=-1))) + 1
        if n_queries * span >= 2**62:
            raise ValueError("too many (query, document) keys for int64")
        key = query * span + doc
        has_pool = np.bincount(p_query, minlength=n_queries) > 0

        # Pool rank of every row (-1 outside the query's pool); only pool-only and
        # input-order protocols rank by it.
        rank = np.full(key.size, -1, dtype=np.int64)
        if (
            has_pools
            and p_query.size
            and (proto.pool_only or proto.ties == "input_order")
        ):
            p_key = p_query * span + p_doc
            p_order = np.argsort(p_key, kind="stable")
            pool_sorted = p_key[p_order]
            at = np.minimum(np.searchsorted(pool_sorted, key), pool_sorted.size - 1)
            hit = pool_sorted[at] == key
            rank[hit] = _rank_in_query(p_query)[p_order[at[hit]]]
        seq = np.arange(key.size)  # input position, the last input_order tiebreak
        if proto.pool_only:
            # A document outside its query's pool (or of a query without a pool)
            # never enters the ranking.
            inside = np.flatnonzero(rank >= 0)
            system, query, key, doc, score, rank, seq = (
                a[inside] for a in (system, query, key, doc, score, rank, seq)
            )
        cell = system * n_queries + query
        if cell.size > 1 and np.any(cell[1:] < cell[:-1]):
            by_cell = np.argsort(cell, kind="stable")
            cell, key, doc, score, rank, seq = (
                a[by_cell] for a in (cell, key, doc, score, rank, seq)
            )
        n_cells = n_systems * n_queries
        counts = np.bincount(cell, minlength=n_cells)
        width = int(counts.max(initial=0))
        uniform = bool(np.all(counts == width))  # every ranking equally deep
        pos = (
            None if uniform else np.arange(cell.size) - (counts.cumsum() - counts)[cell]
        )

        def dense(values: np.ndarray, fill: float) -> np.ndarray:
            """Per-row values as the (cells, width) matrix of input positions."""
            if pos is None:
                return values.reshape(n_cells, width)
            out = np.full((n_cells, width), fill, dtype=values.dtype)
            out[cell, pos] = values
            return out

        neg = dense(-score, np.inf)
        keys = dense(key, -1)
        order = np.argsort(neg, axis=1)
        s_sorted = np.take_along_axis(neg, order, axis=1)
        tied = s_sorted[:, 1:] == s_sorted[:, :-1]
        if not uniform:
            tied &= np.isfinite(s_sorted[:, 1:])
        tied_rows = np.flatnonzero(tied.any(axis=1))
        groups = np.zeros((0, width), dtype=np.int64)
        if tied_rows.size and proto.ties != "group_mean":
            if proto.ties == "doc_id_desc":
                tb = dense(doc.astype(np.float64), 0.0)
            else:  # input_order: pool order first, then input order outside it
                tb = dense(
                    -np.where(rank >= 0, rank, p_query.size + seq).astype(float), 0.0
                )
            order[tied_rows] = np.lexsort((-tb[tied_rows], neg[tied_rows]), axis=1)
            tied_rows = np.zeros(0, dtype=np.int64)
        elif tied_rows.size:
            s_tied = s_sorted[tied_rows]
            new_group = np.ones(s_tied.shape, dtype=bool)
            new_group[:, 1:] = s_tied[:, 1:] != s_tied[:, :-1]
            groups = (np.cumsum(new_group.ravel()) - 1).reshape(s_tied.shape)
        keys = np.take_along_axis(keys, order, axis=1)
        return cls(
            n_systems=n_systems,
            n_queries=n_queries,
            span=span,
            keys=keys,
            ranked=keys >= 0,
            tied_rows=tied_rows,
            groups=groups,
            pool_keys=p_query * span + p_doc if has_pools else None,
            pool_query=p_query if has_pools else None,
            has_pool=has_pool,
        )

    def ndcg(
        self,
        label_query: np.ndarray,
        label_doc: np.ndarray,
        label_gain: np.ndarray,
        *,
        k: int,
        ideal_query: np.ndarray | None = None,
        ideal_gain: np.ndarray | None = None,
    ) -> np.ndarray:
        """(n_systems, n_queries) nDCG@k with gains ``label_gain`` of (query, doc)
        (one row per pair; unlabelled ranked documents gain 0).

        The ideal is ``ideal_gain`` per ``ideal_query`` if given (qrel-nDCG: the
        positive grades), else each query's pool with its labelled gains, or all its
        labelled documents when it has no pool. IDCG 0 gives 0.
        """
        if k < 1:
            raise ValueError("k must be >= 1")
        l_query = np.asarray(label_query, dtype=np.int64).ravel()
        l_doc = np.asarray(label_doc, dtype=np.int64).ravel()
        l_gain = np.asarray(label_gain, dtype=np.float64).ravel()
        if not (l_query.size == l_doc.size == l_gain.size):
            raise ValueError("label_query, label_doc and label_gain must match")
        # Labels of documents no ranking or pool names can only enter the ideal.
        inside = (l_doc < self.span) & (l_doc >= 0)
        l_key = np.where(inside, l_query * self.span + l_doc, -1)
        if np.any(l_key[1:] < l_key[:-1]):
            order = np.argsort(l_key, kind="stable")
            sorted_keys, sorted_gain = l_key[order], l_gain[order]
        else:  # rows read in (query, document) order
            sorted_keys, sorted_gain = l_key, l_gain
        dup = (sorted_keys[1:] == sorted_keys[:-1]) & (sorted_keys[1:] >= 0)
        if np.any(dup):
            raise ValueError("one label per (query, document), please")

        def lookup(keys: np.ndarray) -> np.ndarray:
            if sorted_keys.size == 0:
                return np.zeros(keys.shape)
            at = np.minimum(np.searchsorted(sorted_keys, keys), sorted_keys.size - 1)
            return np.where(
                (sorted_keys[at] == keys) & (keys >= 0), sorted_gain[at], 0.0
            )

        kk = min(k, self.keys.shape[1])
        gains = lookup(self.keys[:, :kk])
        if self.tied_rows.size:
            full = lookup(self.keys[self.tied_rows])
            means = np.bincount(self.groups.ravel(), weights=full.ravel())
            sizes = np.bincount(self.groups.ravel())
            gains[self.tied_rows] = (means / sizes)[self.groups][:, :kk]
        dcg = gains @ _discount(kk)

        if ideal_query is not None and ideal_gain is not None:
            i_query = np.asarray(ideal_query, dtype=np.int64).ravel()
            i_gain = np.asarray(ideal_gain, dtype=np.float64).ravel()
        else:
            no_pool = ~self.has_pool[l_query]
            i_query, i_gain = l_query[no_pool], l_gain[no_pool]
            if self.pool_keys is not None and self.pool_query is not None:
                i_query = np.concatenate([i_query, self.pool_query])
                i_gain = np.concatenate([i_gain, lookup(self.pool_keys)])
        idcg = _idcg_grouped(i_query, i_gain, self.n_queries, k)
        idcg = np.tile(idcg, self.n_systems)
        with np.errstate(invalid="ignore", divide="ignore"):
            out = np.where(idcg > 0, dcg / np.where(idcg > 0, idcg, 1.0), 0.0)
        return out.reshape(self.n_systems, self.n_queries)


def rows_array(rows: Sequence[Sequence[float]], width: int) -> np.ndarray:
    """(len(rows), width) float64 array from row tuples of numbers (what
    ``values_list`` returns); integer ids below 2^53 stay exact."""
    flat = np.fromiter(
        itertools.chain.from_iterable(rows), dtype=np.float64, count=len(rows) * width
    )
    return flat.reshape(len(rows), width)


def index_of(sorted_ids: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Position of each of ``ids`` in the sorted, distinct ``sorted_ids`` (every id
    must be present): database pks -> 0-based indices. A lookup table when the ids
    are dense enough, a binary search otherwise."""
    sorted_ids = np.asarray(sorted_ids, dtype=np.int64)
    ids = np.asarray(ids).astype(np.int64)
    if sorted_ids.size == 0:
        return np.zeros(ids.shape, dtype=np.int64)
    lo, hi = int(sorted_ids[0]), int(sorted_ids[-1])
    if hi - lo <= 8 * sorted_ids.size + 4096:
        table = np.zeros(hi - lo + 1, dtype=np.int64)
        table[sorted_ids - lo] = np.arange(sorted_ids.size)
        return table[ids - lo]
    return np.searchsorted(sorted_ids, ids).astype(np.int64)


def ranked_label_hits(
    system: np.ndarray,
    query: np.ndarray,
    doc: np.ndarray,
    label_query: np.ndarray,
    label_doc: np.ndarray,
    n_systems: int,
) -> np.ndarray:
    """(n_systems,) bool: does system s rank some labelled (query, document)?

    A sample of the rows settles most systems; only the rest are checked in full.
    """
    system = np.asarray(system, dtype=np.int64).ravel()
    query = np.asarray(query, dtype=np.int64).ravel()
    doc = np.asarray(doc, dtype=np.int64).ravel()
    l_query = np.asarray(label_query, dtype=np.int64).ravel()
    l_doc = np.asarray(label_doc, dtype=np.int64).ravel()
    hits = np.zeros(n_systems, dtype=bool)
    if system.size == 0 or l_query.size == 0:
        return hits
    span = int(max(doc.max(), l_doc.max())) + 1
    labelled = l_query * span + l_doc
    if np.any(labelled[1:] < labelled[:-1]):
        labelled = np.sort(labelled)

    def found(rows: np.ndarray | slice) -> np.ndarray:
        key = query[rows] * span + doc[rows]
        at = np.minimum(np.searchsorted(labelled, key), labelled.size - 1)
        return labelled[at] == key

    sample = slice(None, None, 16)
    hits[system[sample][found(sample)]] = True
    if hits.all():
        return hits
    rest = np.flatnonzero(~hits[system])
    if rest.size:
        hits[system[rest][found(rest)]] = True
    return hits


def _rank_in_query(query: np.ndarray) -> np.ndarray:
    """0-based position of each row among the rows of its query, in input order."""
    order = np.argsort(query, kind="stable")
    counts = np.bincount(query)
    starts = np.cumsum(counts) - counts
    rank = np.empty(query.size, dtype=np.int64)
    rank[order] = np.arange(query.size) - starts[query[order]]
    return rank


def _idcg_grouped(
    query: np.ndarray, gains: np.ndarray, n_queries: int, k: int
) -> np.ndarray:
    """IDCG@k per query from flat (query, gain) rows: each query's k largest gains
    (negatives count 0), discounted."""
    if query.size == 0:
        return np.zeros(n_queries)
    if query.min() < 0 or query.max() >= n_queries:
        raise ValueError("query index out of range")
    if np.any(query[1:] < query[:-1]):
        by_query = np.argsort(query, kind="stable")
        query, gains = query[by_query], gains[by_query]
    counts = np.bincount(query, minlength=n_queries)
    pos = np.arange(query.size) - (counts.cumsum() - counts)[query]
    padded = np.zeros((n_queries, int(counts.max())))
    padded[query, pos] = gains
    return _idcg(padded, k)


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


def qrel_gain_array(
    grades: np.ndarray, *, exponential: bool = False, decimals: int | None = None
) -> np.ndarray:
    """``qrel_gains`` for an array of grades, value for value identical (Python's
    ``round`` on each distinct grade, not numpy's)."""
    grades = np.asarray(grades, dtype=np.float64)
    values, inverse = np.unique(grades, return_inverse=True)
    mapped = qrel_gains(
        dict(enumerate(values.tolist())), exponential=exponential, decimals=decimals
    )
    return np.array([mapped[i] for i in range(values.size)])[inverse.ravel()]


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
