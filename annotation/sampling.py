"""Contest sampling: design cells, quotas and a seeded draw. No Django import.

A candidate is one (query, system pair) with RCP-nDCG and qrel-nDCG of both systems.
Each metric names a winner (A, B or an exact tie); the pair falls into a design cell:

- ``discordant_decisive``: the winners differ and both margins are >= 0.02;
- ``discordant_marginal``: the winners differ and a margin is < 0.02;
- ``concordant``: both metrics name the same winner (controls).

``draw`` fills per-cell quotas reproducibly from a seed: candidates are sorted by their
key first, so the database order never changes the result.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

DECISIVE = "discordant_decisive"
MARGINAL = "discordant_marginal"
CONCORDANT = "concordant"
CELLS = (DECISIVE, MARGINAL, CONCORDANT)
DEFAULT_QUOTAS = {DECISIVE: 0.5, MARGINAL: 0.25, CONCORDANT: 0.25}
DECISION_MARGIN = 0.02  # differences below this are ties for decisions
_EXACT = 1e-12


@dataclass(frozen=True)
class Candidate:
    """One (query, system pair); ``key`` sorts candidates reproducibly."""

    key: tuple
    rcp_a: float
    rcp_b: float
    qrel_a: float
    qrel_b: float
    ref: Any = field(default=None, compare=False)

    @property
    def cell(self) -> str:
        return classify(self.rcp_a - self.rcp_b, self.qrel_a - self.qrel_b)


@dataclass(frozen=True)
class Draw:
    """A drawn candidate: ``swap`` puts its second system on side A."""

    candidate: Candidate
    swap: bool


@dataclass(frozen=True)
class Plan:
    quotas: dict[str, float]
    available: dict[str, int]
    requested: dict[str, int]
    drawn: dict[str, int]
    draws: list[Draw]


def winner(margin: float) -> str:
    """ "A" if the first system scores higher, "B" if lower, "tie" if exactly equal."""
    if abs(margin) <= _EXACT:
        return "tie"
    return "A" if margin > 0 else "B"


def classify(rcp_margin: float, qrel_margin: float) -> str:
    """Design cell of one pair from the two metric margins (A minus B)."""
    if winner(rcp_margin) == winner(qrel_margin):
        return CONCORDANT
    if min(abs(rcp_margin), abs(qrel_margin)) >= DECISION_MARGIN:
        return DECISIVE
    return MARGINAL


def resolve_quotas(overrides: Mapping[str, float] | None = None) -> dict[str, float]:
    """Shares per cell summing to 1. Without overrides: the defaults.

    Given shares are kept; the rest (1 - their sum) is split equally over the cells not
    named. Raises ValueError on unknown cells, negative shares or a sum above 1.
    """
    if not overrides:
        return dict(DEFAULT_QUOTAS)
    unknown = sorted(set(overrides) - set(CELLS))
    if unknown:
        raise ValueError(
            f"unknown design cell {unknown[0]!r}; use one of {', '.join(CELLS)}"
        )
    for cell, share in overrides.items():
        if not math.isfinite(share) or share < 0:
            raise ValueError(f"quota of {cell} must be a share >= 0, got {share}")
    given = sum(overrides.values())
    rest = [c for c in CELLS if c not in overrides]
    if given > 1 + 1e-9 or (not rest and abs(given - 1) > 1e-6):
        raise ValueError(f"quotas must sum to 1, got {given:g}")
    out = {c: float(overrides.get(c, 0.0)) for c in CELLS}
    for c in rest:
        out[c] = max(0.0, 1.0 - given) / len(rest)
    return out


def allocate(
    n: int, quotas: Mapping[str, float], available: Mapping[str, int]
) -> tuple[dict[str, int], dict[str, int]]:
    """(requested, drawn) contests per cell for ``n`` contests.

    Requested = largest-remainder rounding of n x share. A cell short of candidates
    gives its shortfall to the other cells in proportion to their shares (then in
    cell order), so ``n`` contests are drawn whenever ``n`` candidates exist.
    """
    raw = {c: n * quotas.get(c, 0.0) for c in CELLS}
    requested = {c: math.floor(raw[c]) for c in CELLS}
    left = n - sum(requested.values())
    for c in sorted(CELLS, key=lambda c: (-(raw[c] - requested[c]), CELLS.index(c))):
        if left <= 0:
            break
        requested[c] += 1
        left -= 1
    drawn = {c: min(requested[c], available.get(c, 0)) for c in CELLS}
    short = n - sum(drawn.values())
    while short > 0:
        spare = [c for c in CELLS if available.get(c, 0) > drawn[c]]
        if not spare:
            break
        weights = [quotas.get(c, 0.0) for c in spare]
        total = sum(weights)
        shares = [w / total if total > 0 else 1 / len(spare) for w in weights]
        given = 0
        for c, share in zip(spare, shares, strict=True):
            room = available.get(c, 0) - drawn[c]
            take = min(room, max(1, math.floor(short * share)), short - given)
            drawn[c] += take
            given += take
            if given >= short:
                break
        short -= given
    return requested, drawn


def draw(
    candidates: Sequence[Candidate],
    *,
    n: int,
    quotas: Mapping[str, float] | None = None,
    seed: int = 0,
) -> Plan:
    """Draw ``n`` contests with per-cell quotas; same inputs and seed, same draws.

    Within a cell candidates are drawn uniformly without replacement; each draw's
    sides are swapped by a fair coin; the result is shuffled so positions reveal
    nothing about cells. Raises ValueError when fewer than ``n`` candidates exist.
    """
    shares = resolve_quotas(quotas)
    if n < 1:
        raise ValueError("the number of contests must be at least 1")
    by_cell: dict[str, list[Candidate]] = {c: [] for c in CELLS}
    for cand in sorted(candidates, key=lambda c: c.key):
        by_cell[cand.cell].append(cand)
    available = {c: len(v) for c, v in by_cell.items()}
    if sum(available.values()) < n:
        raise ValueError(
            f"only {sum(available.values())} candidate contests exist "
            f"({', '.join(f'{c}={available[c]}' for c in CELLS)}); asked for {n}"
        )
    requested, drawn = allocate(n, shares, available)
    rng = np.random.default_rng(seed)
    chosen: list[Candidate] = []
    for c in CELLS:
        order = rng.permutation(len(by_cell[c]))[: drawn[c]]
        chosen.extend(by_cell[c][i] for i in sorted(order.tolist()))
    swaps = rng.random(len(chosen)) < 0.5
    shuffle = rng.permutation(len(chosen))
    draws = [Draw(chosen[i], bool(swaps[i])) for i in shuffle.tolist()]
    return Plan(shares, available, requested, drawn, draws)


def union(list_a: Sequence[Any], list_b: Sequence[Any]) -> list[Any]:
    """The de-duplicated union of two ranked lists: A's order, then B's new items."""
    seen = dict.fromkeys(list_a)
    for item in list_b:
        seen.setdefault(item, None)
    return list(seen)


def shuffled(items: Sequence[Any], seed: int) -> list[Any]:
    """``items`` in the order of a seeded permutation (an annotator's display order)."""
    order = np.random.default_rng(seed).permutation(len(items))
    return [items[i] for i in order.tolist()]
