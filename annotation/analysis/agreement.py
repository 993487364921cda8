"""Agreement of verdicts with RCP- and qrel-nDCG (rcp_facts 6.3; README.md).

Inputs are parallel per-contest sequences: verdicts and metric winners ("A", "B",
"tie"), signed margins (nDCG_A - nDCG_B) and cluster keys (the query). Rates come with
query-clustered normal 95% intervals; nothing here is random.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import rankdata

from annotation.analysis.picks import majority_verdict
from annotation.analysis.verdicts import verdict_class

__all__ = [
    "MARGIN_BANDS",
    "Rate",
    "auc",
    "chance_rate",
    "clustered_rate",
    "disagreement_mask",
    "disagreement_measure",
    "hit_rates",
    "loo_range",
    "main_measure",
    "margin_auc",
]

MARGIN_BANDS = (0.02, 0.20)
Z95 = 1.96


@dataclass(frozen=True)
class Rate:
    """A share k/n with its clustered 95% interval; None where undefined (n = 0)."""

    rate: float | None
    k: int
    n: int
    ci: tuple[float, float] | None
    chance: float | None = None

    def as_dict(self) -> dict:
        return {
            "rate": self.rate,
            "k": self.k,
            "n": self.n,
            "ci": None if self.ci is None else list(self.ci),
            "chance": self.chance,
        }


def clustered_rate(
    hits: Sequence[bool] | np.ndarray,
    clusters: Sequence[str],
    *,
    chance: float | None = None,
) -> Rate:
    """Share of hits with a query-clustered normal 95% CI (rcp_facts 6.3).

    p = mean(h); r_g = sum over cluster g of (h - p); half-width =
    1.96 sqrt(G/(G-1) * sum r_g^2 / n^2), 0 when G = 1; CI clipped to [0, 1].
    """
    h = np.asarray(hits, dtype=np.float64)
    if len(h) != len(clusters):
        raise ValueError("hits and clusters differ in length")
    n = len(h)
    if n == 0:
        return Rate(None, 0, 0, None, chance)
    p = float(h.mean())
    _, g = np.unique(
        np.asarray(clusters, dtype=object).astype(str), return_inverse=True
    )
    r = np.bincount(g, weights=h - p)
    n_g = len(r)
    half = 0.0 if n_g < 2 else Z95 * math.sqrt(n_g / (n_g - 1) * (r @ r) / n**2)
    ci = (max(0.0, p - half), min(1.0, p + half))
    return Rate(p, int(round(h.sum())), n, ci, chance)


def chance_rate(
    rcp_winners: Sequence[str], qrel_winners: Sequence[str]
) -> float | None:
    """Expected main measure if every verdict were a fair coin between A and B.

    Differing winners: the contest counts with probability 1, for RCP with 1/2. One
    winner and one tie: counts with probability 1/2, always for the metric that named
    the winner. Same winner or both tied: never counts. Returns E[k] / E[n].
    """
    e_k = e_n = 0.0
    for r, q in zip(rcp_winners, qrel_winners, strict=True):
        r_dec, q_dec = r in ("A", "B"), q in ("A", "B")
        if r_dec and q_dec and r != q:
            e_n += 1.0
            e_k += 0.5
        elif r_dec and not q_dec:
            e_n += 0.5
            e_k += 0.5
        elif q_dec and not r_dec:
            e_n += 0.5
    return e_k / e_n if e_n > 0 else None


def main_measure(
    verdicts: Sequence[str],
    rcp_winners: Sequence[str],
    qrel_winners: Sequence[str],
    clusters: Sequence[str],
) -> Rate:
    """Among contests where exactly one metric names the verdict (class "rcp" or
    "qrel"), the share that is RCP; chance from every contest given (chance_rate)."""
    classes = [
        verdict_class(v, r, q)
        for v, r, q in zip(verdicts, rcp_winners, qrel_winners, strict=True)
    ]
    keep = [i for i, c in enumerate(classes) if c in ("rcp", "qrel")]
    return clustered_rate(
        [classes[i] == "rcp" for i in keep],
        [clusters[i] for i in keep],
        chance=chance_rate(rcp_winners, qrel_winners),
    )


def disagreement_mask(
    rcp_winners: Sequence[str], qrel_winners: Sequence[str]
) -> list[bool]:
    """Contests where both metrics name a winner and the winners differ."""
    return [
        r in ("A", "B") and q in ("A", "B") and r != q
        for r, q in zip(rcp_winners, qrel_winners, strict=True)
    ]


def disagreement_measure(
    verdicts: Sequence[str],
    rcp_winners: Sequence[str],
    qrel_winners: Sequence[str],
    clusters: Sequence[str],
) -> Rate:
    """main_measure restricted to disagreements (chance is then exactly 1/2)."""
    idx = [i for i, m in enumerate(disagreement_mask(rcp_winners, qrel_winners)) if m]
    return main_measure(
        [verdicts[i] for i in idx],
        [rcp_winners[i] for i in idx],
        [qrel_winners[i] for i in idx],
        [clusters[i] for i in idx],
    )


def _band_key(op: str, edge: float) -> str:
    return f"{op}_{edge:.2f}"


def hit_rates(
    verdicts: Sequence[str],
    winners: Sequence[str],
    margins: Sequence[float],
    clusters: Sequence[str],
    *,
    bands: Sequence[float] = MARGIN_BANDS,
) -> dict[str, Rate]:
    """Share of decided contests (verdict A/B) where the metric's named winner equals
    the verdict: "all", then by |margin| "lt_<b0>" and "ge_<b>" for each band edge."""
    idx = [
        i
        for i, (v, w) in enumerate(zip(verdicts, winners, strict=True))
        if v in ("A", "B") and w in ("A", "B")
    ]

    def rate(sel: list[int]) -> Rate:
        return clustered_rate(
            [verdicts[i] == winners[i] for i in sel], [clusters[i] for i in sel]
        )

    out = {"all": rate(idx)}
    if bands:
        out[_band_key("lt", bands[0])] = rate(
            [i for i in idx if abs(margins[i]) < bands[0]]
        )
    for b in bands:
        out[_band_key("ge", b)] = rate([i for i in idx if abs(margins[i]) >= b])
    return out


def auc(scores: Sequence[float] | np.ndarray, labels: Sequence[bool]) -> float | None:
    """Mann-Whitney AUC with tie-averaged ranks: P(score_pos > score_neg) + 1/2 P(=).

    None when either class is empty.
    """
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels, dtype=bool)
    if s.shape != y.shape:
        raise ValueError("scores and labels differ in shape")
    n1, n0 = int(y.sum()), int((~y).sum())
    if n1 == 0 or n0 == 0:
        return None
    ranks = rankdata(s, method="average")
    return float((ranks[y].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def margin_auc(margins: Sequence[float], picks: Sequence[str]) -> float | None:
    """AUC of the contest's signed margin against "picked A", over individual picks
    of A or B (tie picks are left out); one entry per pick, not per contest."""
    keep = [i for i, p in enumerate(picks) if p in ("A", "B")]
    return auc([margins[i] for i in keep], [picks[i] == "A" for i in keep])


def loo_range(
    picks: Sequence[Sequence[tuple[str, str]]],
    rcp_winners: Sequence[str],
    qrel_winners: Sequence[str],
    clusters: Sequence[str],
) -> tuple[float, float] | None:
    """Range of the main rate when each annotator in turn is left out.

    ``picks[i]`` lists (annotator, pick) of contest i; verdicts are recomputed as the
    strict majority of the remaining picks. Undefined rates are skipped; None if all are.
    """
    annotators = sorted({a for contest in picks for a, _ in contest})
    rates = []
    for left_out in annotators:
        verdicts = [
            majority_verdict([p for a, p in contest if a != left_out])
            for contest in picks
        ]
        r = main_measure(verdicts, rcp_winners, qrel_winners, clusters).rate
        if r is not None:
            rates.append(r)
    return (min(rates), max(rates)) if rates else None
