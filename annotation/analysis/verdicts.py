"""Metric winners and margins per contest, and verdict classes (rcp_facts 6.2-6.3).

RCP-nDCG@k and qrel-nDCG@k are computed over the displayed documents only, with one
shared ideal per metric (the displayed documents sorted by that metric's gains), as in
the released ``d_rcp_shown`` / ``d_ndcg_shown`` columns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from annotation.analysis.picks import TIE_MARGIN, shared_ideal_ndcg

__all__ = [
    "VERDICT_CLASSES",
    "ContestMetrics",
    "contest_metrics",
    "metric_winner",
    "verdict_class",
]

VERDICT_CLASSES = ("both", "rcp", "qrel", "neither", "tie")


@dataclass(frozen=True)
class ContestMetrics:
    """Signed margins (nDCG_A - nDCG_B) and winners ("A", "B", "tie") of both metrics."""

    rcp_margin: float
    qrel_margin: float
    rcp_winner: str
    qrel_winner: str


def metric_winner(margin: float, *, tie_margin: float = TIE_MARGIN) -> str:
    """ "A" if margin >= tie_margin, "B" if margin <= -tie_margin, else "tie"."""
    if abs(margin) < tie_margin:
        return "tie"
    return "A" if margin > 0 else "B"


def contest_metrics(
    list_a: Sequence[str],
    list_b: Sequence[str],
    gains: Mapping[str, float],
    qrels: Mapping[str, float],
    *,
    k: int = 5,
    displayed: Sequence[str] | None = None,
    tie_margin: float = TIE_MARGIN,
) -> ContestMetrics:
    """RCP and qrel margins and winners of one contest over its displayed documents.

    Unjudged documents have qrel 0; negative qrels count 0 (trec_eval).
    """
    rcp_a, rcp_b = shared_ideal_ndcg(list_a, list_b, gains, k=k, displayed=displayed)
    q_gains = {d: max(float(v), 0.0) for d, v in qrels.items()}
    q_a, q_b = shared_ideal_ndcg(list_a, list_b, q_gains, k=k, displayed=displayed)
    d_rcp, d_qrel = rcp_a - rcp_b, q_a - q_b
    return ContestMetrics(
        rcp_margin=d_rcp,
        qrel_margin=d_qrel,
        rcp_winner=metric_winner(d_rcp, tie_margin=tie_margin),
        qrel_winner=metric_winner(d_qrel, tie_margin=tie_margin),
    )


def verdict_class(verdict: str, rcp_winner: str, qrel_winner: str) -> str:
    """ "tie" unless the verdict is A or B; else which metrics' winner equals it:
    "both", "rcp", "qrel" or "neither" (a tied metric never matches)."""
    if verdict not in ("A", "B"):
        return "tie"
    rcp_hit, qrel_hit = rcp_winner == verdict, qrel_winner == verdict
    if rcp_hit and qrel_hit:
        return "both"
    if rcp_hit:
        return "rcp"
    if qrel_hit:
        return "qrel"
    return "neither"
