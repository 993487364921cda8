"""Statistical inference for the study report (issue 14): exact tests, intervals and
multiplicity. Pure numpy/scipy, no Django, nothing random (README.md, "Inference").

Every function takes plain sequences and returns plain values or frozen dataclasses;
the report section that applies them to a study lives in ``slices.py``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import binom

from annotation.analysis.agreement import Z95 as AGREEMENT_Z95

__all__ = [
    "Z95",
    "ExactTest",
    "Jackknife",
    "design_exact_test",
    "holm",
    "jackknife",
    "poisson_binomial_pmf",
    "poisson_binomial_test",
    "twoway_clustered_ci",
    "wilson",
]

Z95 = AGREEMENT_Z95  # 1.96, the same quantile as the headline clustered intervals
_REL = 1e-9  # relative slack when comparing probabilities of discrete outcomes


def wilson(k: int, n: int, *, z: float = Z95) -> tuple[float, float] | None:
    """Wilson score interval of k/n (no continuity correction); None when n = 0.

    Good for small slices: it never leaves [0, 1] and is not degenerate at k = 0 or n.
    """
    if n <= 0:
        return None
    p = k / n
    z2 = z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def poisson_binomial_pmf(probs: Sequence[float] | np.ndarray) -> np.ndarray:
    """P(K = j), j = 0..m, for K the sum of independent Bernoulli(probs[i]).

    Direct convolution, O(m^2): exact up to float rounding for any m used here.
    """
    p = np.asarray(probs, dtype=np.float64)
    if np.any((p < 0) | (p > 1)):
        raise ValueError("probabilities must lie in [0, 1]")
    pmf = np.zeros(len(p) + 1)
    pmf[0] = 1.0
    for i, pi in enumerate(p, start=1):
        pmf[1 : i + 1] = pmf[1 : i + 1] * (1 - pi) + pmf[:i] * pi
        pmf[0] *= 1 - pi
    return pmf


@dataclass(frozen=True)
class ExactTest:
    """An exact test of an observed rate against its chance model.

    ``expected`` is the rate the null predicts (see each test); ``p_greater`` is
    P(statistic >= observed), ``p_less`` P(<= observed), ``p_two_sided`` the
    minimum-likelihood two-sided p-value (as scipy ``binomtest``), all under the null.
    """

    observed: float | None
    expected: float | None
    p_greater: float | None
    p_less: float | None
    p_two_sided: float | None

    def as_dict(self) -> dict:
        return {
            "observed": self.observed,
            "expected": self.expected,
            "p_greater": self.p_greater,
            "p_less": self.p_less,
            "p_two_sided": self.p_two_sided,
        }


_UNDEFINED = ExactTest(None, None, None, None, None)


def poisson_binomial_test(k: int, probs: Sequence[float]) -> ExactTest:
    """Exact test of K = k, K a sum of independent Bernoulli(probs) (m = len(probs)).

    Rates are k/m and mean(probs). Two-sided: sum of P(K = j) over outcomes no more
    likely than the observed one (relative slack 1e-9, as scipy's binomtest).
    """
    m = len(probs)
    if m == 0:
        return _UNDEFINED
    if not 0 <= k <= m:
        raise ValueError("k must lie in 0..len(probs)")
    pmf = poisson_binomial_pmf(probs)
    obs = pmf[k]
    two = float(pmf[pmf <= obs * (1 + _REL)].sum())
    return ExactTest(
        observed=k / m,
        expected=float(np.mean(probs)),
        p_greater=min(1.0, float(pmf[k:].sum())),
        p_less=min(1.0, float(pmf[: k + 1].sum())),
        p_two_sided=min(1.0, two),
    )


def design_exact_test(
    rcp_winners: Sequence[str],
    qrel_winners: Sequence[str],
    k_obs: int,
    n_obs: int,
) -> ExactTest:
    """Exact test of the main measure k/n under the design's chance model.

    The contests given are the population (the report passes those with a decided
    verdict); under the null each verdict is an independent fair coin between A and
    B. Then, with d contests where both metrics name different winners, r where only
    RCP names one and q where only qrels do, K = Bin(d) + K_r and N = d + K_r + K_q
    (K_r, K_q ~ Bin(r), Bin(q), all with p = 1/2), enumerated exactly. Outcomes with
    N = 0 have no rate and count as neither extreme. ``expected`` = E[K]/E[N] (the
    README's chance rate over these contests). Two-sided p = min(1, 2 min(one-sided)).
    """
    d = r = q = 0
    for rw, qw in zip(rcp_winners, qrel_winners, strict=True):
        r_dec, q_dec = rw in ("A", "B"), qw in ("A", "B")
        if r_dec and q_dec and rw != qw:
            d += 1
        elif r_dec and not q_dec:
            r += 1
        elif q_dec and not r_dec:
            q += 1
    if n_obs <= 0 or d + r + q == 0:
        return _UNDEFINED
    kr = np.arange(r + 1)[:, None]
    kq = np.arange(q + 1)[None, :]
    weight = binom.pmf(kr, r, 0.5) * binom.pmf(kq, q, 0.5)
    n = d + kr + kq
    # K_d >= ceil(k_obs n / n_obs) - K_r  <=>  (K_d + K_r) n_obs >= k_obs n (integers)
    need_ge = -((-k_obs * n) // n_obs) - kr
    need_le = (k_obs * n) // n_obs - kr
    p_ge = binom.sf(need_ge - 1, d, 0.5)
    p_le = binom.cdf(need_le, d, 0.5)
    alive = n > 0
    p_greater = float((weight * np.where(alive, p_ge, 0.0)).sum())
    p_less = float((weight * np.where(alive, p_le, 0.0)).sum())
    expected = (0.5 * d + 0.5 * r) / (d + 0.5 * r + 0.5 * q)
    return ExactTest(
        observed=k_obs / n_obs,
        expected=expected,
        p_greater=min(1.0, p_greater),
        p_less=min(1.0, p_less),
        p_two_sided=min(1.0, 2 * min(p_greater, p_less)),
    )


def twoway_clustered_ci(
    hits: Sequence[bool] | np.ndarray,
    queries: Sequence[Hashable],
    panels: Sequence[Sequence[Hashable]],
    *,
    z: float = Z95,
) -> tuple[float, float] | None:
    """95% CI of mean(hits) clustered two ways, by query and by annotator.

    Cameron-Gelbach-Miller: meat = M_query + M_annotator - M_(query, annotator), each
    M_c = G_c/(G_c - 1) sum_g (sum_{i in g} (h_i - p))^2. A contest belongs to the
    cluster of every annotator on its panel (``panels[i]``), so a contest shared by
    three annotators links all three; the intersection term removes the double count
    of its own residual. A negative meat (possible in small samples) falls back to the
    query-only meat. Half-width z sqrt(meat) / n; clipped to [0, 1]; None when n = 0.
    """
    h = np.asarray(hits, dtype=np.float64)
    n = len(h)
    if not (n == len(queries) == len(panels)):
        raise ValueError("hits, queries and panels differ in length")
    if n == 0:
        return None
    p = float(h.mean())
    e = h - p

    def meat(memberships: list[list[Hashable]]) -> float:
        sums: dict[Hashable, float] = {}
        for i, keys in enumerate(memberships):
            for key in keys:
                sums[key] = sums.get(key, 0.0) + e[i]
        g = len(sums)
        if g < 2:
            return 0.0
        return g / (g - 1) * float(sum(v * v for v in sums.values()))

    m_q = meat([[q] for q in queries])
    m_a = meat([list(dict.fromkeys(panel)) for panel in panels])
    m_qa = meat(
        [
            [(q, a) for a in dict.fromkeys(panel)]
            for q, panel in zip(queries, panels, strict=True)
        ]
    )
    total = m_q + m_a - m_qa
    if total < 0:
        total = m_q
    half = z * math.sqrt(total) / n
    return max(0.0, p - half), min(1.0, p + half)


@dataclass(frozen=True)
class Jackknife:
    """Delete-one-cluster jackknife: estimate, standard error, normal 95% CI."""

    estimate: float | None
    se: float | None
    ci: tuple[float, float] | None
    clusters: int

    def as_dict(self) -> dict:
        return {
            "estimate": self.estimate,
            "se": self.se,
            "ci": None if self.ci is None else list(self.ci),
            "clusters": self.clusters,
        }


def jackknife(
    statistic: Callable[[Hashable | None], float | None],
    clusters: Sequence[Hashable],
    *,
    bounds: tuple[float, float] | None = None,
    z: float = Z95,
) -> Jackknife:
    """Delete-one-cluster jackknife of ``statistic(left_out)`` (None = all data).

    SE = sqrt((G-1)/G sum_g (t_(g) - mean t)^2) over the G clusters whose deletion
    leaves the statistic defined; CI = t +- z SE, clipped to ``bounds``. With the full
    statistic undefined or fewer than 2 defined deletions, SE and CI are None.
    """
    full = statistic(None)
    keys = sorted(set(clusters), key=str)
    if full is None:
        return Jackknife(None, None, None, len(keys))
    leave = [statistic(g) for g in keys]
    t = np.array([v for v in leave if v is not None], dtype=np.float64)
    if len(t) < 2:
        return Jackknife(full, None, None, len(keys))
    g = len(t)
    se = math.sqrt((g - 1) / g * float(((t - t.mean()) ** 2).sum()))
    lo, hi = full - z * se, full + z * se
    if bounds is not None:
        lo, hi = max(bounds[0], lo), min(bounds[1], hi)
    return Jackknife(full, se, (lo, hi), len(keys))


def holm(pvalues: Sequence[float | None]) -> list[float | None]:
    """Holm step-down adjusted p-values (family-wise error), in input order.

    Undefined p-values (None) stay None and do not enlarge the family.
    """
    idx = [i for i, p in enumerate(pvalues) if p is not None]
    order = sorted(idx, key=lambda i: pvalues[i])  # type: ignore[arg-type, return-value]
    m = len(order)
    out: list[float | None] = [None] * len(pvalues)
    running = 0.0
    for rank, i in enumerate(order):
        adj = min(1.0, (m - rank) * float(pvalues[i]))  # type: ignore[arg-type]
        running = max(running, adj)
        out[i] = running
    return out
