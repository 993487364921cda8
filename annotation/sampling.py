"""Contest sampling: design cells, quotas and a seeded draw. No Django import.

A candidate is one (query, system pair) with RCP-nDCG and qrel-nDCG of both systems.
Each metric names a winner (A, B or an exact tie); the pair falls into a design cell:

- ``discordant_decisive``: the winners differ and both margins are >= 0.02;
- ``discordant_marginal``: the winners differ and a margin is < 0.02;
- ``concordant``: both metrics name the same winner (controls).

``draw`` fills per-cell quotas reproducibly from a seed: candidates are sorted by their
key first, so the database order never changes the result. ``Controls`` (issue 14) add
quotas per dataset, balance across system pairs, a cap of contests per query and the
option of no concordant controls; candidate keys are (dataset, query, system 1,
system 2), as ``selectors.contest_candidates`` builds them.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
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
    # With Controls: contests per dataset and the controls themselves (for the record).
    by_dataset: dict[str, int] = field(default_factory=dict)
    controls: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Controls:
    """Design controls of a draw (all off by default, which is the plain ``draw``).

    ``dataset_quotas``: share of the contests per dataset (unnamed datasets split the
    rest equally). ``balance_pairs``: within each cell, system pairs take turns, so
    pair counts differ by at most one where candidates allow. ``max_per_query``: no
    query gets more contests. ``concordant_controls=False``: no concordant contest
    (the reference sampled only the two discordant cells); the other cells' shares
    are rescaled to sum to 1.
    """

    dataset_quotas: Mapping[str, float] | None = None
    balance_pairs: bool = False
    max_per_query: int | None = None
    concordant_controls: bool = True

    @property
    def active(self) -> bool:
        return self != Controls()

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["dataset_quotas"] = (
            dict(self.dataset_quotas) if self.dataset_quotas else None
        )
        return out


def _dataset(c: Candidate) -> str:
    return str(c.key[0])


def _query(c: Candidate) -> tuple:
    return tuple(c.key[:2])


def _pair(c: Candidate) -> tuple:
    return (c.key[0], *c.key[2:4])


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
    controls: Controls | None = None,
) -> Plan:
    """Draw ``n`` contests with per-cell quotas; same inputs and seed, same draws.

    Within a cell candidates are drawn uniformly without replacement; each draw's
    sides are swapped by a fair coin; the result is shuffled so positions reveal
    nothing about cells. Raises ValueError when fewer than ``n`` candidates exist.
    With active ``controls`` the draw goes through ``_draw_controlled``.
    """
    shares = resolve_quotas(quotas)
    if n < 1:
        raise ValueError("the number of contests must be at least 1")
    if controls is not None and controls.active:
        return _draw_controlled(candidates, n=n, shares=shares, seed=seed, ctl=controls)
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


def _split(n: int, shares: Mapping[str, float]) -> dict[str, int]:
    """Largest-remainder rounding of n x share (ties by name)."""
    raw = {k: n * v for k, v in shares.items()}
    out = {k: math.floor(v) for k, v in raw.items()}
    left = n - sum(out.values())
    for k in sorted(raw, key=lambda k: (-(raw[k] - out[k]), k))[:left]:
        out[k] += 1
    return out


def _dataset_shares(
    names: Sequence[str], quotas: Mapping[str, float] | None
) -> dict[str, float]:
    """Shares per dataset: given ones kept, the rest split equally over the others."""
    if not quotas:
        return {d: 1 / len(names) for d in names} if names else {}
    unknown = sorted(set(quotas) - set(names))
    if unknown:
        raise ValueError(
            f"dataset quota for {unknown[0]!r}, which has no candidate contests"
        )
    if any(not math.isfinite(v) or v < 0 for v in quotas.values()):
        raise ValueError("dataset quotas must be shares >= 0")
    given = sum(quotas.values())
    rest = [d for d in names if d not in quotas]
    if given > 1 + 1e-9 or (not rest and abs(given - 1) > 1e-6):
        raise ValueError(f"dataset quotas must sum to 1, got {given:g}")
    out = {d: float(quotas.get(d, 0.0)) for d in names}
    for d in rest:
        out[d] = max(0.0, 1.0 - given) / len(rest)
    return out


def _ordered(
    cands: Sequence[Candidate], rng: np.random.Generator, balance: bool
) -> Iterator[Candidate]:
    """A seeded order of one cell's candidates; with ``balance`` pairs take turns."""
    if not balance:
        for i in rng.permutation(len(cands)).tolist():
            yield cands[i]
        return
    by_pair: dict[tuple, list[Candidate]] = defaultdict(list)
    for c in cands:
        by_pair[_pair(c)].append(c)
    pairs = sorted(by_pair)
    lists = [[by_pair[p][i] for i in rng.permutation(len(by_pair[p]))] for p in pairs]
    order = rng.permutation(len(pairs)).tolist()
    for r in range(max((len(x) for x in lists), default=0)):
        for j in order:
            if r < len(lists[j]):
                yield lists[j][r]


def _take(
    order: Iterator[Candidate],
    k: int,
    used: Counter,
    chosen: list[Candidate],
    ctl: Controls,
) -> int:
    """Move up to ``k`` candidates from ``order`` to ``chosen``, skipping queries at
    the cap (a skipped candidate stays skipped: its query only fills up). Returns
    how many were taken; ``order`` is left just after the last one taken."""
    taken = 0
    while taken < k:
        cand = next(order, None)
        if cand is None:
            break
        if ctl.max_per_query is not None and used[_query(cand)] >= ctl.max_per_query:
            continue
        used[_query(cand)] += 1
        chosen.append(cand)
        taken += 1
    return taken


def _draw_controlled(
    candidates: Sequence[Candidate],
    *,
    n: int,
    shares: dict[str, float],
    seed: int,
    ctl: Controls,
) -> Plan:
    """``draw`` under design controls (see ``Controls``): datasets first (their
    quotas), then cells within each dataset (``allocate``), each cell's candidates in
    a seeded order (pair turns with ``balance_pairs``) skipping queries at the cap. A
    cell left short by the cap is topped up from the dataset's other cells; a dataset
    that still falls short raises ValueError."""
    if ctl.max_per_query is not None and ctl.max_per_query < 1:
        raise ValueError("the cap per query must be at least 1")
    pool = sorted(candidates, key=lambda c: c.key)
    if not ctl.concordant_controls:
        pool = [c for c in pool if c.cell != CONCORDANT]
        rest = 1.0 - shares[CONCORDANT]
        if rest <= 0:
            raise ValueError("without concordant controls the other cells need a share")
        shares = {c: (0.0 if c == CONCORDANT else shares[c] / rest) for c in CELLS}
    if len(pool) < n:
        raise ValueError(f"only {len(pool)} candidate contests exist; asked for {n}")
    names = sorted({_dataset(c) for c in pool})
    per_dataset = _split(n, _dataset_shares(names, ctl.dataset_quotas))
    rng = np.random.default_rng(seed)
    used: Counter = Counter()
    chosen: list[Candidate] = []
    available = dict.fromkeys(CELLS, 0)
    requested = dict.fromkeys(CELLS, 0)
    drawn = dict.fromkeys(CELLS, 0)
    for name in names:
        want = per_dataset[name]
        by_cell = {
            c: [x for x in pool if _dataset(x) == name and x.cell == c] for c in CELLS
        }
        avail = {c: len(v) for c, v in by_cell.items()}
        if sum(avail.values()) < want:
            raise ValueError(
                f"dataset {name!r} has {sum(avail.values())} candidate contests; its "
                f"quota asks for {want}"
            )
        req, target = allocate(want, shares, avail)
        orders = {c: _ordered(by_cell[c], rng, ctl.balance_pairs) for c in CELLS}
        got = dict.fromkeys(CELLS, 0)

        for cell in CELLS:
            got[cell] = _take(orders[cell], target[cell], used, chosen, ctl)
        short = want - sum(got.values())
        for cell in sorted(CELLS, key=lambda c: -shares[c]):
            if short <= 0 or shares[cell] <= 0:
                continue
            extra = _take(orders[cell], short, used, chosen, ctl)
            got[cell] += extra
            short -= extra
        if short > 0:
            raise ValueError(
                f"dataset {name!r}: the cap of {ctl.max_per_query} contests per query "
                f"leaves {short} of its {want} contests undrawn"
            )
        for c in CELLS:
            available[c] += avail[c]
            requested[c] += req[c]
            drawn[c] += got[c]
    swaps = rng.random(len(chosen)) < 0.5
    shuffle = rng.permutation(len(chosen))
    draws = [Draw(chosen[i], bool(swaps[i])) for i in shuffle.tolist()]
    return Plan(
        shares,
        available,
        requested,
        drawn,
        draws,
        by_dataset=dict(Counter(_dataset(c) for c in chosen)),
        controls=ctl.as_dict(),
    )


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
