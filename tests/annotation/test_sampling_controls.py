"""Design controls of the contest draw (issue 14): quotas per dataset, balance across
system pairs, a cap per query, no concordant controls; plain draws unchanged."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from annotation import sampling

D, M, C = sampling.DECISIVE, sampling.MARGINAL, sampling.CONCORDANT
PAIRS = [("a", "b"), ("a", "c"), ("b", "c")]


def _cands(seed=0, queries=20, datasets=("d1", "d2")):
    rng = np.random.default_rng(seed)
    out = []
    for ds in datasets:
        for q in range(queries):
            for s1, s2 in PAIRS:
                r = rng.normal(0, 0.1)
                out.append(
                    sampling.Candidate(
                        key=(ds, f"q{q:02d}", s1, s2),
                        rcp_a=0.5 + r,
                        rcp_b=0.5,
                        qrel_a=0.5 + rng.normal(0, 0.1) - 0.5 * r,
                        qrel_b=0.5,
                    )
                )
    return out


def test_default_controls_are_the_plain_draw():
    cands = _cands()
    plain = sampling.draw(cands, n=30, seed=3)
    same = sampling.draw(cands, n=30, seed=3, controls=sampling.Controls())
    assert [(d.candidate.key, d.swap) for d in plain.draws] == [
        (d.candidate.key, d.swap) for d in same.draws
    ]


def test_dataset_quotas_and_reproducibility():
    cands = _cands()
    ctl = sampling.Controls(dataset_quotas={"d1": 0.75})
    plan = sampling.draw(cands, n=40, seed=1, controls=ctl)
    by_ds = Counter(d.candidate.key[0] for d in plan.draws)
    assert by_ds == {"d1": 30, "d2": 10} == plan.by_dataset
    assert plan.controls["dataset_quotas"] == {"d1": 0.75}
    again = sampling.draw(list(reversed(cands)), n=40, seed=1, controls=ctl)
    assert [d.candidate.key for d in plan.draws] == [
        d.candidate.key for d in again.draws
    ]
    assert sum(plan.drawn.values()) == 40
    with pytest.raises(ValueError, match="no candidate"):
        sampling.draw(cands, n=10, controls=sampling.Controls(dataset_quotas={"x": 1}))
    with pytest.raises(ValueError, match="quota asks for"):
        sampling.draw(
            cands, n=100, controls=sampling.Controls(dataset_quotas={"d1": 1.0})
        )


def test_balance_across_system_pairs():
    """Within each (dataset, cell), pair counts differ by at most one when every pair
    has candidates to spare."""
    cands = _cands(queries=40)
    ctl = sampling.Controls(balance_pairs=True)
    plan = sampling.draw(cands, n=90, seed=2, controls=ctl)
    spare = Counter((c.key[0], c.cell, c.key[2:4]) for c in cands)
    cells = Counter((d.candidate.key[0], d.candidate.cell) for d in plan.draws)
    for (ds, cell), k in cells.items():
        counts = [
            sum(
                1
                for d in plan.draws
                if d.candidate.key[0] == ds
                and d.candidate.cell == cell
                and d.candidate.key[2:4] == p
            )
            for p in PAIRS
        ]
        if all(spare[ds, cell, p] >= k for p in PAIRS):
            assert max(counts) - min(counts) <= 1, (ds, cell, counts)


def test_cap_per_query_and_no_concordant_controls():
    cands = _cands()
    ctl = sampling.Controls(max_per_query=1, concordant_controls=False)
    plan = sampling.draw(cands, n=30, seed=5, controls=ctl)
    per_query = Counter(d.candidate.key[:2] for d in plan.draws)
    assert max(per_query.values()) == 1 and len(plan.draws) == 30
    assert all(d.candidate.cell != C for d in plan.draws)
    assert plan.quotas == pytest.approx({D: 2 / 3, M: 1 / 3, C: 0.0})
    assert plan.drawn[C] == 0
    with pytest.raises(ValueError, match="cap of 1 contests per query"):
        sampling.draw(cands, n=41, controls=sampling.Controls(max_per_query=1))
