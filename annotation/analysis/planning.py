"""Power planner for a human study (issue 14): how many contests to sample so that the
main measure is told apart from its chance rate, and the power of a given size.

The primary analysis it plans for is the report's headline one: the main measure
(share of counted contests that side with RCP) with its query-clustered 95% interval,
the study "succeeding" when that interval excludes the design's chance rate. Under the
normal approximation with a design effect for clustering, with p1 the expected true
rate, p0 the chance rate, Δ = |p1 − p0|, s the share of sampled contests that count
(exactly one metric names the verdict) and D the design effect:

    counted contests  n = D (z_{1−α/2} + z_{power})² p1 (1 − p1) / Δ²
    contests to draw  N = ceil(n / s)
    power at N        Φ(Δ √(N s / D) / √(p1 (1 − p1)) − z_{1−α/2}) (+ the far tail)

(the Wald form: the interval's width comes from the observed rate, i.e. p1 under the
alternative). ``one_sided`` uses z_{1−α}. The design effect of clusters of m counted
contests with intra-query correlation ρ is 1 + (m − 1) ρ (``design_effect``). The tests
check the formulas by simulating whole studies under the plan and counting rejections.
Pure numerics, no Django.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from scipy.stats import norm

__all__ = [
    "PowerPlan",
    "design_effect",
    "expected_counted_share",
    "plan_contests",
    "power_at",
]


@dataclass(frozen=True)
class PowerPlan:
    """Inputs and the answer: contests to draw (``contests``), of which ``counted``
    are expected to count, and the power actually reached at that size."""

    power_target: float
    alpha: float
    true_rate: float
    chance_rate: float
    counted_share: float
    design_effect: float
    one_sided: bool
    counted: float
    contests: int
    power: float

    def as_dict(self) -> dict:
        return asdict(self)


def _check(alpha: float, p1: float, p0: float, share: float, deff: float) -> None:
    if not 0 < alpha < 1:
        raise ValueError("alpha must lie strictly between 0 and 1")
    if not (0 < p1 < 1 and 0 < p0 < 1):
        raise ValueError("the true and chance rates must lie strictly between 0 and 1")
    if p1 == p0:
        raise ValueError("the true rate equals the chance rate: no size gives power")
    if not 0 < share <= 1:
        raise ValueError("the counted share must lie in (0, 1]")
    if deff < 1:
        raise ValueError("the design effect must be at least 1")


def design_effect(cluster_size: float, icc: float) -> float:
    """1 + (m − 1) ρ for clusters of m counted contests with intra-cluster
    correlation ρ (Kish); m ≥ 1, 0 ≤ ρ ≤ 1."""
    if cluster_size < 1 or not 0 <= icc <= 1:
        raise ValueError("cluster size must be >= 1 and the ICC within [0, 1]")
    return 1.0 + (cluster_size - 1.0) * icc


def power_at(
    contests: int,
    *,
    true_rate: float,
    chance_rate: float,
    alpha: float = 0.05,
    counted_share: float = 1.0,
    design_effect: float = 1.0,
    one_sided: bool = False,
) -> float:
    """Power of the clustered Wald test of main measure = chance with ``contests``
    sampled (normal approximation, both tails when two-sided)."""
    _check(alpha, true_rate, chance_rate, counted_share, design_effect)
    if contests <= 0:
        return 0.0
    n = contests * counted_share / design_effect
    se = math.sqrt(true_rate * (1 - true_rate) / n)
    delta = abs(true_rate - chance_rate)
    if one_sided:
        return float(norm.cdf(delta / se - norm.ppf(1 - alpha)))
    z = norm.ppf(1 - alpha / 2)
    return float(norm.cdf(delta / se - z) + norm.cdf(-delta / se - z))


def plan_contests(
    *,
    power: float = 0.8,
    alpha: float = 0.05,
    true_rate: float,
    chance_rate: float,
    counted_share: float = 1.0,
    design_effect: float = 1.0,
    one_sided: bool = False,
) -> PowerPlan:
    """The smallest number of contests whose power reaches ``power``.

    Starts from the closed form above and steps up while the exact power function
    (with its far tail) is still short, so ``power_at(contests) >= power`` holds.
    """
    _check(alpha, true_rate, chance_rate, counted_share, design_effect)
    if not 0 < power < 1:
        raise ValueError("power must lie strictly between 0 and 1")
    z_a = norm.ppf(1 - alpha) if one_sided else norm.ppf(1 - alpha / 2)
    delta = abs(true_rate - chance_rate)
    n = design_effect * (z_a + norm.ppf(power)) ** 2 * true_rate * (1 - true_rate)
    n /= delta**2
    contests = max(1, math.ceil(n / counted_share - 1e-9))

    def reach(m: int) -> float:
        return power_at(
            m,
            true_rate=true_rate,
            chance_rate=chance_rate,
            alpha=alpha,
            counted_share=counted_share,
            design_effect=design_effect,
            one_sided=one_sided,
        )

    while contests > 1 and reach(contests - 1) >= power:
        contests -= 1
    while reach(contests) < power:
        contests += 1
    return PowerPlan(
        power_target=power,
        alpha=alpha,
        true_rate=true_rate,
        chance_rate=chance_rate,
        counted_share=counted_share,
        design_effect=design_effect,
        one_sided=one_sided,
        counted=contests * counted_share,
        contests=contests,
        power=reach(contests),
    )


def expected_counted_share(
    rcp_winners: list[str] | tuple[str, ...], qrel_winners: list[str] | tuple[str, ...]
) -> float | None:
    """Share of contests expected to count (exactly one metric names the verdict)
    when every verdict is a fair coin: disagreements always count, a contest where
    one metric names a winner and the other ties counts with probability 1/2, the
    rest never (the denominator of ``agreement.chance_rate``). None without contests.
    """
    if not rcp_winners:
        return None
    e_n = 0.0
    for r, q in zip(rcp_winners, qrel_winners, strict=True):
        r_dec, q_dec = r in ("A", "B"), q in ("A", "B")
        if r_dec and q_dec and r != q:
            e_n += 1.0
        elif r_dec != q_dec:
            e_n += 0.5
    return e_n / len(rcp_winners)
