"""Annotator picks and contest verdicts (DESIGN "Human studies", Pick and verdict).

An annotator's grades act as gains: nDCG@k of list A and of list B share one ideal, the
displayed documents sorted by that annotator's grades. A near-equal pair may be broken by
the annotator's ordering of equally graded documents (Copeland scores, see README.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "PICKS",
    "TIE_MARGIN",
    "Pick",
    "annotator_pick",
    "copeland_scores",
    "displayed_docs",
    "majority_verdict",
    "shared_ideal_ndcg",
]

TIE_MARGIN = 1e-9
PICKS = ("A", "B", "tie")


@dataclass(frozen=True)
class Pick:
    """One annotator's pick: nDCG of both lists under their grades, and the outcome."""

    choice: str  # "A", "B" or "tie"
    ndcg_a: float
    ndcg_b: float
    by_copeland: bool  # True when the Copeland tie-break decided a near-equal pair

    @property
    def margin(self) -> float:
        return self.ndcg_a - self.ndcg_b


def displayed_docs(
    list_a: Sequence[str], list_b: Sequence[str], *, k: int
) -> tuple[str, ...]:
    """Union of the two top-k lists, de-duplicated, in first-seen order (A then B).

    Raises ValueError when a list repeats a document or k < 1.
    """
    if k < 1:
        raise ValueError("k must be >= 1")
    for name, lst in (("A", list_a), ("B", list_b)):
        if len(set(lst[:k])) != len(lst[:k]):
            raise ValueError(f"list {name} repeats a document in its top {k}")
    return tuple(dict.fromkeys([*list_a[:k], *list_b[:k]]))


def _discount(rank: int) -> float:
    return 1.0 / math.log2(rank + 1)


def _dcg(docs: Sequence[str], gains: Mapping[str, float], k: int) -> float:
    return sum(
        float(gains.get(d, 0.0)) * _discount(r) for r, d in enumerate(docs[:k], 1)
    )


def shared_ideal_ndcg(
    list_a: Sequence[str],
    list_b: Sequence[str],
    gains: Mapping[str, float],
    *,
    k: int = 5,
    displayed: Sequence[str] | None = None,
) -> tuple[float, float]:
    """nDCG@k of list A and list B under one ideal: ``displayed`` (default: the union of
    both top-k lists) sorted by gain, cut at k. Missing gains count 0; negative gains
    raise ValueError; an all-zero ideal gives (0.0, 0.0).
    """
    shown = displayed_docs(list_a, list_b, k=k) if displayed is None else displayed
    missing = set(list_a[:k]) | set(list_b[:k])
    if not missing <= set(shown):
        raise ValueError("displayed documents must contain both top-k lists")
    values = [float(gains.get(d, 0.0)) for d in shown]
    if any(v < 0 or math.isnan(v) for v in values):
        raise ValueError("gains must be finite and non-negative")
    ideal = sorted(values, reverse=True)[:k]
    idcg = sum(g * _discount(r) for r, g in enumerate(ideal, 1))
    if idcg <= 0:
        return 0.0, 0.0
    return _dcg(list_a, gains, k) / idcg, _dcg(list_b, gains, k) / idcg


def copeland_scores(
    grades: Mapping[str, int], within_order: Mapping[str, int]
) -> dict[str, int]:
    """Copeland score of each graded document inside its grade class.

    ``within_order`` gives each document's position among documents of its own grade
    (1 = best). Each same-grade pair with two distinct positions is one duel won by the
    smaller position; score = wins - losses. Unordered documents and equal positions
    give no duel.
    """
    docs = list(grades)
    score = dict.fromkeys(docs, 0)
    for i, d in enumerate(docs):
        for e in docs[i + 1 :]:
            if grades[d] != grades[e] or d not in within_order or e not in within_order:
                continue
            if within_order[d] < within_order[e]:
                score[d] += 1
                score[e] -= 1
            elif within_order[e] < within_order[d]:
                score[e] += 1
                score[d] -= 1
    return score


def annotator_pick(
    list_a: Sequence[str],
    list_b: Sequence[str],
    grades: Mapping[str, int],
    *,
    k: int = 5,
    tie_margin: float = TIE_MARGIN,
    within_order: Mapping[str, int] | None = None,
    displayed: Sequence[str] | None = None,
) -> Pick:
    """Pick of one annotator: the list with the higher nDCG@k under their grades.

    |nDCG_A - nDCG_B| < ``tie_margin`` is a tie, then broken by the discounted sum of
    Copeland scores of each list's top k (same margin) when ``within_order`` is given.
    Every displayed document must be graded (ValueError otherwise).
    """
    shown = tuple(
        displayed_docs(list_a, list_b, k=k) if displayed is None else displayed
    )
    ungraded = [d for d in shown if d not in grades]
    if ungraded:
        raise ValueError(f"ungraded displayed documents: {ungraded}")
    shown_grades = {d: grades[d] for d in shown}
    nd_a, nd_b = shared_ideal_ndcg(list_a, list_b, shown_grades, k=k, displayed=shown)
    delta = nd_a - nd_b
    if abs(delta) >= tie_margin:
        return Pick("A" if delta > 0 else "B", nd_a, nd_b, False)
    if within_order:
        cope = copeland_scores(shown_grades, within_order)
        tb = _dcg(list_a, cope, k) - _dcg(list_b, cope, k)
        if abs(tb) >= tie_margin:
            return Pick("A" if tb > 0 else "B", nd_a, nd_b, True)
    return Pick("tie", nd_a, nd_b, False)


def majority_verdict(picks: Sequence[str]) -> str:
    """Contest verdict: "A" or "B" when it holds a strict majority (more than half) of
    all N picks, "tie" otherwise (including N = 0). "tie" picks count in N."""
    for p in picks:
        if p not in PICKS:
            raise ValueError(f"unknown pick {p!r}")
    n = len(picks)
    for side in ("A", "B"):
        if 2 * sum(p == side for p in picks) > n:
            return side
    return "tie"
