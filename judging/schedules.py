"""Window schedules of both judging stages (rcp_facts §1.3-1.4, §2.2). No Django.

Schedules are stated in placements per document, so window counts follow any pool
size. The window algorithms are pinned bit-for-bit by a digest test; read
``SCHEDULES.md`` beside this module before changing a draw or a float operation.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, TypeVar

import numpy as np

Modality = Literal["text", "image", "video"]
Phase = Literal["random", "stratified", "adaptive"]
A = TypeVar("A")

PAPER_POOL = 150
OVERLAP_DISCOUNT = 0.3
STRATIFIED_TIE_SWITCH = 0.3
RASCH_L2 = 1e-4

__all__ = [
    "OVERLAP_DISCOUNT",
    "PAPER_POOL",
    "Boundary",
    "PlannedWindow",
    "RubricAnswer",
    "RubricSchedule",
    "TournamentAnswer",
    "TournamentSchedule",
    "balanced_random_windows",
    "boundary_values",
    "bt_abilities",
    "greedy_adaptive_windows",
    "next_rubric_windows",
    "next_tournament_windows",
    "pair_counts",
    "pair_key",
    "query_rng",
    "rank_by_ability",
    "rasch_scores",
    "run_rubric",
    "run_tournament",
    "stratified_windows",
]


def query_rng(seed: int, dataset: str, query_id: str) -> random.Random:
    """The window-draw stream of one query; independent of other queries and of order."""
    return random.Random(f"{seed}/{dataset}/{query_id}")


def _count(placements: float, n_docs: int, window: int) -> int:
    # Operation order (placements * n) / window is the reference's; at n = 150 the
    # float placements must land exactly on the paper's integer window counts.
    return round(placements * n_docs / window)


# ---------------------------------------------------------------------------
# Schedule parameters
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class TournamentSchedule:
    """Stage A schedule in placements per document; defaults are the paper's (216 calls at 150)."""

    window: int = 10
    random_placements: float = 53 * 10 / PAPER_POOL
    stratified_placements: float = 27 * 10 / PAPER_POOL
    mirror: bool = True
    adaptive_window: int = 10
    adaptive_depth: int = 150
    adaptive_batches: int = 7
    adaptive_placements: float = 7 * 8 * 10 / PAPER_POOL
    overlap_discount: float = OVERLAP_DISCOUNT
    seed: int = 42

    def __post_init__(self) -> None:
        if self.window < 2 or self.adaptive_window < 2 or self.adaptive_depth < 2:
            raise ValueError("windows and adaptive_depth must be at least 2")
        if min(self.random_placements, self.stratified_placements) < 0:
            raise ValueError("placements must be non-negative")
        if self.adaptive_placements < 0 or self.adaptive_batches < 0:
            raise ValueError("adaptive placements and batches must be non-negative")
        if not 0 <= self.overlap_discount <= 1:
            raise ValueError("overlap_discount must lie in [0, 1]")

    def windows_for(self, n_docs: int) -> tuple[int, int, int]:
        """(random, stratified, adaptive per batch) windows for a pool of ``n_docs``.

        Effective windows are min(window, n); a pool no larger than the adaptive
        window gets at most one adaptive window per batch; n < 2 gets none.
        """
        if n_docs < 2:
            return (0, 0, 0)
        per_batch = 0
        if self.adaptive_batches:
            w_a = min(self.adaptive_window, n_docs)
            per_batch = _count(
                self.adaptive_placements, n_docs, w_a * self.adaptive_batches
            )
            if n_docs <= self.adaptive_window:
                per_batch = min(per_batch, 1)
        w = min(self.window, n_docs)
        return (
            _count(self.random_placements, n_docs, w),
            _count(self.stratified_placements, n_docs, w),
            per_batch,
        )

    def adaptive_batches_for(self, n_docs: int) -> int:
        """Adaptive batches run for ``n_docs``: one when the pool fits an adaptive window."""
        if not self.adaptive_batches or n_docs < 2:
            return 0
        # Every adaptive window of such a pool is the whole pool in its current
        # order, so a second batch would only repeat the first.
        return 1 if n_docs <= self.adaptive_window else self.adaptive_batches

    def phase_calls(self, n_docs: int) -> tuple[int, int]:
        """(random + stratified calls incl. mirrors, adaptive calls at most) for ``n_docs``."""
        n_random, n_stratified, per_batch = self.windows_for(n_docs)
        copies = 2 if self.mirror else 1
        return (
            (n_random + n_stratified) * copies,
            self.adaptive_batches_for(n_docs) * per_batch,
        )

    def calls_per_query(self, n_docs: int) -> int:
        """Upper bound on judge calls for one query (adaptive may stop early)."""
        return sum(self.phase_calls(n_docs))

    @classmethod
    def for_modality(cls, modality: Modality) -> TournamentSchedule:
        """Shipped schedule: windows of 10 for text, 5 for page images and video."""
        if modality == "text":
            return cls()
        return cls(window=5, adaptive_window=5)


@dataclass(frozen=True)
class RubricSchedule:
    """Stage B schedule in placements per document; defaults give 100 windows at 150."""

    window: int = 10
    placements_per_doc: float = 100 * 10 / PAPER_POOL
    random_share: float = 0.5
    seed: int = 42

    def __post_init__(self) -> None:
        if self.window < 1:
            raise ValueError("window must be at least 1")
        if self.placements_per_doc <= 0:
            raise ValueError("placements_per_doc must be positive")
        if not 0 < self.random_share <= 1:
            raise ValueError("random_share must lie in (0, 1]")

    def windows_for(
        self, n_docs: int, *, n_units: int | None = None
    ) -> tuple[int, int]:
        """(random, stratified) windows; every unit (doc or chunk) is shown at least once.

        ``n_units`` defaults to ``n_docs``; at least one window is random.
        """
        units = n_docs if n_units is None else n_units
        if n_docs < 1 or units < 1:
            return (0, 0)
        w = min(self.window, units)
        total = max(math.ceil(units / w), _count(self.placements_per_doc, n_docs, w))
        n_random = min(total, max(1, round(self.random_share * total)))
        return (n_random, total - n_random)

    def calls_per_query(self, n_docs: int, *, n_units: int | None = None) -> int:
        """Judge calls for one query: all rubric windows (never mirrored)."""
        return sum(self.windows_for(n_docs, n_units=n_units))

    def check_coverage(self, n_docs: int, *, n_units: int | None = None) -> None:
        """Raise ValueError unless the random windows alone can show every unit once."""
        units = n_docs if n_units is None else n_units
        n_random, _ = self.windows_for(n_docs, n_units=n_units)
        if units and n_random * min(self.window, units) < units:
            raise ValueError(
                f"{n_random} random windows of {min(self.window, units)} cannot show "
                f"{units} units; raise placements_per_doc or random_share, or lower window"
            )

    @classmethod
    def for_modality(cls, modality: Modality) -> RubricSchedule:
        """Shipped schedule: windows of 10 (text), 8 (image), 5 (video), same placements."""
        if modality == "text":
            return cls()
        return cls(window=8 if modality == "image" else 5)


# ---------------------------------------------------------------------------
# Window algorithms (pinned by the §10.2 digest)
# ---------------------------------------------------------------------------


def balanced_random_windows(
    n: int, window: int, n_windows: int, rng: random.Random
) -> list[list[int]]:
    """``n_windows`` windows of indices 0..n-1, least-shown documents first, ties random.

    Each window is shuffled (presentation order); a window >= n is the whole pool.
    Draws: n ``rng.random()`` then one ``rng.shuffle`` per window.
    """
    w = min(window, n)
    shown = np.zeros(n, dtype=np.int64)
    windows: list[list[int]] = []
    for _ in range(n_windows):
        noise = np.array([rng.random() for _ in range(n)])
        group = np.lexsort((noise, shown))[:w].tolist()
        rng.shuffle(group)
        shown[group] += 1
        windows.append(group)
    return windows


def rank_by_ability(doc_ids: Sequence[str], ability: Mapping[str, float]) -> list[str]:
    """``doc_ids`` best first; missing abilities count 0, ties keep input order."""
    values = np.array([ability.get(d, 0.0) for d in doc_ids], dtype=np.float64)
    return [doc_ids[i] for i in np.argsort(-values, kind="stable")]


def stratified_windows(
    doc_ids: Sequence[str],
    ability: Mapping[str, float],
    window: int,
    n_windows: int,
    rng: random.Random,
) -> list[list[str]]:
    """Contiguous blocks of the ability order, least-covered block first, each shuffled.

    A tie with the best block so far switches to the later start with probability
    0.3 (one ``rng.random()`` per tie); a window >= n is the whole pool.
    """
    ranked = rank_by_ability(doc_ids, ability)
    n = len(ranked)
    w = min(window, n)
    coverage = np.zeros(n, dtype=np.int64)
    windows: list[list[str]] = []
    for _ in range(n_windows):
        sums = np.convolve(coverage, np.ones(w, dtype=np.int64), mode="valid")
        # The scan draws exactly where a start ties the running minimum of the
        # starts before it; the first start never draws.
        running = np.minimum.accumulate(sums)
        ties = np.flatnonzero(sums[1:] == running[:-1]) + 1
        switch = {int(s) for s in ties if rng.random() < STRATIFIED_TIE_SWITCH}
        best = int(np.argmin(sums))
        later = [s for s in ties if sums[s] == sums[best] and int(s) in switch]
        start = int(later[-1]) if later else best
        group = ranked[start : start + w]
        rng.shuffle(group)
        coverage[start : start + w] += 1
        windows.append(group)
    return windows


def pair_key(a: str, b: str) -> tuple[str, str]:
    """An unordered document pair in canonical (string-sorted) order."""
    return (a, b) if a <= b else (b, a)


def pair_counts(windows: Iterable[Sequence[str]]) -> Counter[tuple[str, str]]:
    """How many windows held each unordered pair (once per window)."""
    windows = [tuple(w) for w in windows]
    if not windows:
        return Counter()
    # Vectorised: the planner recounts every judged window at each adaptive batch,
    # and a Python double loop over 45 pairs x hundreds of windows dominated it.
    ids = sorted({d for w in windows for d in w})
    index = {d: i for i, d in enumerate(ids)}
    n = len(ids)
    codes: list[np.ndarray] = []
    for size in {len(w) for w in windows}:
        if size < 2:
            continue
        rows = np.array([[index[d] for d in w] for w in windows if len(w) == size])
        i, j = np.triu_indices(size, k=1)
        a, b = rows[:, i].ravel(), rows[:, j].ravel()
        # ids are sorted, so the smaller index is the smaller id: pair_key order.
        codes.append(np.minimum(a, b) * n + np.maximum(a, b))
    if not codes:
        return Counter()
    pairs, counts = np.unique(np.concatenate(codes), return_counts=True)
    return Counter(
        {
            (ids[c // n], ids[c % n]): int(k)
            for c, k in zip(pairs.tolist(), counts.tolist(), strict=True)
        }
    )


class Boundary(NamedTuple):
    """Value of the boundary between adjacent ranks ``above`` (r) and ``below`` (r+1)."""

    value: float
    above: str
    below: str


def _sigmoid(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


def boundary_values(
    ability: Mapping[str, float],
    counts: Mapping[tuple[str, str], int],
    *,
    depth: int = 150,
) -> list[Boundary]:
    """v_r = p(1-p) / log2(r+1) / (1 + n_r) for adjacent ranks of the top ``depth``.

    Ranks follow ``ability`` (best first; ties keep mapping order); ``counts`` are
    comparisons per canonical pair. Returned in rank order.
    """
    ranked = rank_by_ability(list(ability), ability)[:depth]
    out: list[Boundary] = []
    # Scalar libm math on purpose: numpy's exp/log2 may differ in the last ulp,
    # and the greedy selection compares these sums exactly.
    for r, (above, below) in enumerate(zip(ranked, ranked[1:], strict=False), start=1):
        p = _sigmoid(ability[above] - ability[below])
        novelty = 1.0 / (1.0 + counts.get(pair_key(above, below), 0))
        out.append(
            Boundary(p * (1.0 - p) * (1.0 / math.log2(r + 1)) * novelty, above, below)
        )
    return out


def greedy_adaptive_windows(
    ability: Mapping[str, float],
    boundaries: Sequence[Boundary],
    window: int,
    n_windows: int,
    *,
    overlap_discount: float = OVERLAP_DISCOUNT,
) -> list[list[str]]:
    """Up to ``n_windows`` contiguous stretches of the ability order with most boundary value.

    Strictly best start wins (first on ties); stops when the best sum is <= 0; a
    picked stretch's inner boundaries are multiplied by ``overlap_discount``.
    A window >= n is the whole pool in current order, once.
    """
    ranked = rank_by_ability(list(ability), ability)
    n = len(ranked)
    if window >= n:
        return [list(ranked)] if n_windows > 0 else []
    position = {d: i for i, d in enumerate(ranked)}
    values = [0.0] * (n - 1)
    for b in boundaries:
        i = position.get(b.above)
        if i is not None and i < n - 1:
            values[i] = b.value
    windows: list[list[str]] = []
    for _ in range(n_windows):
        # Built-in sum over each stretch, not a cumulative sum: near-equal stretches
        # must compare exactly as the reference scheduler compared them.
        sums = [sum(values[s : s + window - 1]) for s in range(n - window + 1)]
        best_sum = max(sums)
        if best_sum <= 0:
            break
        start = sums.index(best_sum)
        windows.append(ranked[start : start + window])
        for i in range(start, start + window - 1):
            values[i] *= overlap_discount
    return windows


# ---------------------------------------------------------------------------
# Per-query planners: replay the phases from the answers judged so far
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class PlannedWindow:
    """One window to ask: ``seq`` runs 0,1,2,... over all phases in asking order."""

    seq: int
    phase: Phase
    doc_ids: tuple[str, ...]
    reversed: bool = False
    batch: int = 0


@dataclass(frozen=True)
class TournamentAnswer:
    """A judged Stage A window: scores in prompt order, or None when invalid."""

    doc_ids: tuple[str, ...]
    scores: tuple[float, ...] | None


@dataclass(frozen=True)
class RubricAnswer:
    """A judged Stage B window: 0/1 verdicts per unit (C1..CK), or None when invalid."""

    doc_ids: tuple[str, ...]
    answers: tuple[tuple[int, ...], ...] | None


AbilityFit = Callable[[Sequence[str], Sequence[TournamentAnswer]], Mapping[str, float]]
RubricFit = Callable[[Sequence[str], Sequence[RubricAnswer]], Mapping[str, float]]


def bt_abilities(
    doc_ids: Sequence[str], judged: Sequence[TournamentAnswer]
) -> dict[str, float]:
    """Cold-start BT abilities (mean zero) over the valid windows of ``judged``."""
    from rcp.bt import fit_bt, ragged_window_pairs

    index = {d: i for i, d in enumerate(doc_ids)}
    valid = [a for a in judged if a.scores is not None]
    if not valid:
        return {d: 0.0 for d in doc_ids}
    if any(len(a.scores) != len(a.doc_ids) for a in valid):
        raise ValueError("a window's scores must match its documents")
    # All windows' pairs in one vectorised call: the same rows as window_pairs per
    # window, which cost more than the fit itself at hundreds of windows.
    winners, losers, labels, weights = ragged_window_pairs(
        np.array([len(a.doc_ids) for a in valid]),
        np.array([index[d] for a in valid for d in a.doc_ids], dtype=np.int64),
        np.array([x for a in valid for x in a.scores], dtype=np.float64),
    )
    # The reference's live-fit tolerances: scheduling needs an order, not 1e-11.
    theta = fit_bt(
        winners, losers, labels, weights, len(doc_ids), gtol=1e-7, ftol=1e-9
    ).theta
    return {d: float(theta[i]) for d, i in index.items()}


def rasch_scores(
    doc_ids: Sequence[str], judged: Sequence[RubricAnswer]
) -> dict[str, float]:
    """Preliminary Rasch test-characteristic scores (100/K) * sum_c sigmoid(theta - beta_c).

    Fit: mean BCE + 0.5 * 1e-4 * (|theta|^2 + |beta_raw|^2), beta reported mean-zero.
    Units never validly judged score the TCC at theta 0.
    """
    from scipy.optimize import minimize
    from scipy.special import expit

    index = {d: i for i, d in enumerate(doc_ids)}
    rows = [
        (index[d], verdicts)
        for a in judged
        if a.answers is not None
        for d, verdicts in zip(a.doc_ids, a.answers, strict=True)
    ]
    n = len(doc_ids)
    k = len(rows[0][1]) if rows else 5
    unit = np.array([u for u, _ in rows], dtype=np.int64)
    y = np.array([v for _, v in rows], dtype=np.float64).reshape(-1, k)

    def objective(x: np.ndarray) -> tuple[float, np.ndarray]:
        theta, beta_raw = x[:n], x[n:]
        beta = beta_raw - beta_raw.mean()
        logit = theta[unit][:, None] - beta[None, :]
        loss = np.mean(np.logaddexp(0.0, logit) - y * logit)
        r = (expit(logit) - y) / y.size
        g_theta = np.bincount(unit, r.sum(axis=1), n) + RASCH_L2 * theta
        g_beta = -r.sum(axis=0)
        g_beta_raw = g_beta - g_beta.mean() + RASCH_L2 * beta_raw
        penalty = 0.5 * RASCH_L2 * (theta @ theta + beta_raw @ beta_raw)
        return float(loss + penalty), np.concatenate([g_theta, g_beta_raw])

    x = np.zeros(n + k)
    if rows:
        x = minimize(objective, x, jac=True, method="L-BFGS-B").x
    theta, beta = x[:n], x[n:] - x[n:].mean()
    tcc = 100.0 / k * expit(theta[:, None] - beta[None, :]).sum(axis=1)
    return {d: float(tcc[i]) for d, i in index.items()}


def _missing(
    windows: list[PlannedWindow], judged: Mapping[int, object]
) -> list[PlannedWindow]:
    return [w for w in windows if w.seq not in judged]


def _mirrored(
    groups: Sequence[Sequence[str]], phase: Phase, start: int, mirror: bool
) -> list[PlannedWindow]:
    out: list[PlannedWindow] = []
    for group in groups:
        out.append(PlannedWindow(start + len(out), phase, tuple(group)))
        if mirror:
            out.append(
                PlannedWindow(start + len(out), phase, tuple(reversed(group)), True)
            )
    return out


def _memo_for(memo: dict | None, key: tuple) -> dict:
    """The caller's memo for this query's replay (emptied if it served another)."""
    if memo is None:
        return {}
    if memo.get("key") != key:
        memo.clear()
        memo["key"] = key
    return memo


def _valid_pair_counts(
    asked: list[TournamentAnswer], memo: dict
) -> Counter[tuple[str, str]]:
    """``pair_counts`` of the valid windows in ``asked``, counting only the windows
    added since the memo's last count when the earlier ones are unchanged."""
    prefix, counts = memo.get("counts", ([], Counter()))
    if asked[: len(prefix)] != prefix:
        prefix, counts = [], Counter()
    counts = counts + pair_counts(
        a.doc_ids for a in asked[len(prefix) :] if a.scores is not None
    )
    memo["counts"] = (list(asked), counts)
    return counts


def next_tournament_windows(
    doc_ids: Sequence[str],
    judged: Mapping[int, TournamentAnswer],
    *,
    schedule: TournamentSchedule,
    dataset: str,
    query_id: str,
    fit: AbilityFit = bt_abilities,
    memo: dict | None = None,
) -> list[PlannedWindow]:
    """Windows of the first phase or batch with unjudged seqs; [] when the query is done.

    ``judged`` maps seq -> answer (invalid answers count as asked). Phases are
    replayed from the seed, so resume after a crash plans the same windows.
    ``memo``, a dict the caller keeps between calls for one query, holds each phase
    replayed so far with the answers it was planned from: a phase is replayed again
    only when those answers changed, so a call fits at most the batch it plans. The
    result is the same with or without it.
    """
    memo = _memo_for(memo, ("A", tuple(doc_ids), schedule, dataset, query_id))
    n = len(doc_ids)
    n_random, n_stratified, per_batch = schedule.windows_for(n)
    if "random" not in memo:
        rng = query_rng(schedule.seed, dataset, query_id)
        groups = balanced_random_windows(n, schedule.window, n_random, rng)
        memo["random"] = (
            _mirrored(
                [[doc_ids[i] for i in g] for g in groups], "random", 0, schedule.mirror
            ),
            rng.getstate(),
        )
    planned, rng_state = memo["random"]
    planned = list(planned)
    if missing := _missing(planned, judged):
        return missing
    asked = [judged[w.seq] for w in planned]
    planned += _stratified_memo(
        memo,
        asked,
        rng_state,
        doc_ids,
        fit,
        schedule.window,
        n_stratified,
        len(planned),
        schedule.mirror,
    )
    if missing := _missing(planned, judged):
        return missing
    for batch in range(schedule.adaptive_batches_for(n)):
        asked = [judged[w.seq] for w in planned]
        cached = memo.get(("adaptive", batch))
        if cached is None or cached[0] != asked:
            ability = fit(doc_ids, asked)
            ranked = rank_by_ability(doc_ids, ability)
            ordered = {d: ability.get(d, 0.0) for d in ranked}
            counts = _valid_pair_counts(asked, memo)
            picks = greedy_adaptive_windows(
                ordered,
                boundary_values(ordered, counts, depth=schedule.adaptive_depth),
                min(schedule.adaptive_window, n),
                per_batch,
                overlap_discount=schedule.overlap_discount,
            )
            cached = memo[("adaptive", batch)] = (
                asked,
                [
                    PlannedWindow(len(planned) + i, "adaptive", tuple(p), batch=batch)
                    for i, p in enumerate(picks)
                ],
            )
        windows = cached[1]
        if not windows:
            return []
        planned += windows
        if missing := _missing(windows, judged):
            return missing
    return []


def next_rubric_windows(
    unit_ids: Sequence[str],
    judged: Mapping[int, RubricAnswer],
    *,
    schedule: RubricSchedule,
    dataset: str,
    query_id: str,
    n_docs: int | None = None,
    fit: RubricFit = rasch_scores,
    memo: dict | None = None,
) -> list[PlannedWindow]:
    """Rubric windows still to ask: balanced random, then stratified by ``fit``; [] when done.

    The stratified phase is dropped (returns []) when no random window was valid.
    Raises ValueError when the random windows cannot cover every unit. ``memo`` as
    in ``next_tournament_windows``.
    """
    n_units = len(unit_ids)
    docs = n_units if n_docs is None else n_docs
    schedule.check_coverage(docs, n_units=n_units)
    memo = _memo_for(memo, ("B", tuple(unit_ids), schedule, dataset, query_id, docs))
    n_random, n_stratified = schedule.windows_for(docs, n_units=n_units)
    if "random" not in memo:
        rng = query_rng(schedule.seed, dataset, query_id)
        groups = balanced_random_windows(n_units, schedule.window, n_random, rng)
        memo["random"] = (
            _mirrored([[unit_ids[i] for i in g] for g in groups], "random", 0, False),
            rng.getstate(),
        )
    planned, rng_state = memo["random"]
    if missing := _missing(planned, judged):
        return missing
    asked = [judged[w.seq] for w in planned]
    if not n_stratified or all(a.answers is None for a in asked):
        return []
    return _missing(
        _stratified_memo(
            memo,
            asked,
            rng_state,
            unit_ids,
            fit,
            schedule.window,
            n_stratified,
            len(planned),
            False,
        ),
        judged,
    )


def _stratified_memo(
    memo: dict,
    asked: list,
    rng_state: Any,
    ids: list,
    fit: Any,
    window: int,
    n_stratified: int,
    start: int,
    mirror: bool,
) -> list:
    """The stratified phase's windows, fitted from the random phase's answers once
    and kept in the unit's memo until those answers change."""
    stratified = memo.get("stratified")
    if stratified is None or stratified[0] != asked:
        rng = random.Random()
        rng.setstate(rng_state)
        strata = stratified_windows(ids, fit(ids, asked), window, n_stratified, rng)
        stratified = memo["stratified"] = (
            asked,
            _mirrored(strata, "stratified", start, mirror),
        )
    return stratified[1]


def _run(
    next_windows: Callable[[Mapping[int, A]], list[PlannedWindow]],
    judge: Callable[[list[PlannedWindow]], Sequence[A]],
) -> dict[int, A]:
    judged: dict[int, A] = {}
    while windows := next_windows(judged):
        for window, answer in zip(windows, judge(windows), strict=True):
            judged[window.seq] = answer
    return judged


def run_tournament(
    doc_ids: Sequence[str],
    judge: Callable[[list[PlannedWindow]], Sequence[TournamentAnswer]],
    *,
    schedule: TournamentSchedule,
    dataset: str,
    query_id: str,
    fit: AbilityFit = bt_abilities,
) -> dict[int, TournamentAnswer]:
    """Walk every Stage A phase synchronously; ``judge`` answers each phase or batch."""
    fits: dict[int, Mapping[str, float]] = {}

    def cached_fit(
        ids: Sequence[str], answers: Sequence[TournamentAnswer]
    ) -> Mapping[str, float]:
        # Each replay refits the same answer prefixes; within one walk the prefix
        # length identifies them, so every fit runs once instead of once per phase.
        if len(answers) not in fits:
            fits[len(answers)] = fit(ids, answers)
        return fits[len(answers)]

    def plan(judged: Mapping[int, TournamentAnswer]) -> list[PlannedWindow]:
        return next_tournament_windows(
            doc_ids,
            judged,
            schedule=schedule,
            dataset=dataset,
            query_id=query_id,
            fit=cached_fit,
        )

    return _run(plan, judge)


def run_rubric(
    unit_ids: Sequence[str],
    judge: Callable[[list[PlannedWindow]], Sequence[RubricAnswer]],
    *,
    schedule: RubricSchedule,
    dataset: str,
    query_id: str,
    fit: RubricFit = rasch_scores,
) -> dict[int, RubricAnswer]:
    """Walk both Stage B phases synchronously; ``judge`` answers each phase."""

    def plan(judged: Mapping[int, RubricAnswer]) -> list[PlannedWindow]:
        return next_rubric_windows(
            unit_ids,
            judged,
            schedule=schedule,
            dataset=dataset,
            query_id=query_id,
            fit=fit,
        )

    return _run(plan, judge)
