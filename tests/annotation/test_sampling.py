"""Contest sampling: design cells, quotas, seeded draws, and study creation."""

from __future__ import annotations

import pytest

from annotation import sampling
from annotation.models import Contest, ContestDocument, DesignCell, StudyStatus
from annotation.services import study_create, study_plan
from benchmarks.models import RankingEntry
from rcp_platform.exceptions import ApplicationError, ConflictError

D, M, C = sampling.DECISIVE, sampling.MARGINAL, sampling.CONCORDANT


@pytest.mark.parametrize(
    ("rcp", "qrel", "cell"),
    [
        (0.10, -0.05, D),  # winners differ, both margins >= 0.02
        (0.10, -0.01, M),  # winners differ, qrel margin small
        (0.001, -0.30, M),
        (0.0, 0.05, M),  # exact tie against a winner: discordant, tie margin 0
        (0.2, 0.01, C),  # same winner however small
        (-0.2, -0.3, C),
        (0.0, 0.0, C),  # both tie
    ],
)
def test_design_cell_of_a_pair(rcp, qrel, cell):
    """Cells follow the issue: discordant = winners differ; decisive = both >= 0.02."""
    assert sampling.classify(rcp, qrel) == cell


def test_quotas_default_override_and_errors():
    assert sampling.resolve_quotas(None) == {D: 0.5, M: 0.25, C: 0.25}
    assert sampling.resolve_quotas({D: 0.7}) == pytest.approx(
        {D: 0.7, M: 0.15, C: 0.15}
    )
    assert sampling.resolve_quotas({D: 0.5, M: 0.5, C: 0}) == {D: 0.5, M: 0.5, C: 0}
    for bad in ({"nope": 1.0}, {D: 0.8, M: 0.5}, {D: 0.5, M: 0.2, C: 0.1}, {D: -1}):
        with pytest.raises(ValueError):
            sampling.resolve_quotas(bad)


def test_allocate_rounds_and_redistributes_shortfalls():
    """Largest remainder; a short cell's remainder goes to cells with spare candidates."""
    quotas = sampling.resolve_quotas(None)
    requested, drawn = sampling.allocate(10, quotas, {D: 100, M: 100, C: 100})
    assert sum(requested.values()) == 10 and requested[D] == 5
    assert drawn == requested
    requested, drawn = sampling.allocate(10, quotas, {D: 1, M: 100, C: 100})
    assert requested[D] == 5 and drawn[D] == 1 and sum(drawn.values()) == 10
    _, drawn = sampling.allocate(10, quotas, {D: 0, M: 0, C: 10})
    assert drawn == {D: 0, M: 0, C: 10}


def _cands(n):
    return [
        sampling.Candidate(
            key=("ds", f"q{i:03d}", "a", "b"),
            rcp_a=0.5 + (i % 3) * 0.1,
            rcp_b=0.55,
            qrel_a=0.5,
            qrel_b=0.5 + (i % 5 - 2) * 0.01,
        )
        for i in range(n)
    ]


def test_draw_is_seeded_and_independent_of_input_order():
    cands = _cands(60)
    one = sampling.draw(cands, n=20, seed=4)
    two = sampling.draw(list(reversed(cands)), n=20, seed=4)
    other = sampling.draw(cands, n=20, seed=5)
    key = lambda plan: [(d.candidate.key, d.swap) for d in plan.draws]  # noqa: E731
    assert key(one) == key(two)
    assert key(one) != key(other)
    assert len({d.candidate.key for d in one.draws}) == 20
    assert sum(one.drawn.values()) == 20
    with pytest.raises(ValueError, match="only 60 candidate"):
        sampling.draw(cands, n=61)


def test_union_and_shuffle():
    assert sampling.union([3, 1, 2], [2, 5, 3, 4]) == [3, 1, 2, 5, 4]
    items = list(range(12))
    assert sampling.shuffled(items, 7) == sampling.shuffled(items, 7)
    assert sorted(sampling.shuffled(items, 7)) == items
    assert sampling.shuffled(items, 7) != sampling.shuffled(items, 8)


def test_plan_fills_every_cell_of_a_seeded_world(world):
    plan = study_plan(
        datasets=[world.dataset], systems=world.systems, n_contests=12, seed=1
    )
    summary = plan.summary()
    assert summary["candidates"] == 24  # 8 queries x 3 pairs, none identical
    assert all(summary["available"][c] > 0 for c in sampling.CELLS)
    assert sum(summary["drawn"].values()) == 12
    assert summary["fit"] == world.fit.pk


def test_study_create_stores_contests_lists_and_union(study, world):
    """Each contest: query, two systems, both top-k lists, union, cell, margins."""
    assert study.status == StudyStatus.OPEN
    assert study.rubrics.get().version == 1
    contests = list(Contest.objects.filter(study=study))
    assert len(contests) == 6
    assert sorted(c.position for c in contests) == list(range(1, 7))
    for contest in contests:
        assert contest.system_a_id != contest.system_b_id
        assert contest.cell in DesignCell.values
        assert contest.cell == sampling.classify(
            contest.rcp_margin, contest.qrel_margin
        )
        entries = ContestDocument.objects.filter(contest=contest)
        top = {
            side: list(
                RankingEntry.objects.filter(
                    system=system, query=contest.query, rank__lte=5
                )
                .order_by("rank")
                .values_list("document_id", flat=True)
            )
            for side, system in (("a", contest.system_a), ("b", contest.system_b))
        }
        by_rank_a = sorted((e.rank_a, e.document_id) for e in entries if e.rank_a)
        by_rank_b = sorted((e.rank_b, e.document_id) for e in entries if e.rank_b)
        assert [d for _, d in by_rank_a] == top["a"]
        assert [d for _, d in by_rank_b] == top["b"]
        assert {e.document_id for e in entries} == set(top["a"]) | set(top["b"])


def test_same_seed_same_contests_and_sides_are_randomised(make_study, world):
    one = make_study(name="one", n_contests=20, seed=9)
    two = make_study(name="two", n_contests=20, seed=9)
    rows = lambda s: list(  # noqa: E731
        s.contests.order_by("position").values_list(
            "query_id", "system_a_id", "system_b_id", "cell"
        )
    )
    assert rows(one) == rows(two)
    # sides are a coin flip: the alphabetically first system is not always side A
    first = {s.pk for s in world.systems[:1]}
    sides = [a in first for _q, a, _b, _c in rows(one) if first & {a, _b}]
    assert any(sides) and not all(sides)


def test_study_create_refuses_bad_input(make_study, world):
    make_study(name="taken")
    with pytest.raises(ConflictError):
        make_study(name="taken")
    with pytest.raises(ApplicationError, match="at least two systems"):
        make_study(name="x", systems=world.systems[:1])
    with pytest.raises(ApplicationError, match="only 24 candidate"):
        make_study(name="y", n_contests=25)
    with pytest.raises(ApplicationError, match="quotas must sum"):
        make_study(name="z", quotas={D: 0.9, M: 0.9})


def test_study_create_needs_a_calibration(world, admin_user):
    world.fit.datasets.clear()
    with pytest.raises(ApplicationError, match="no calibration covers"):
        study_create(
            name="s", datasets=[world.dataset], systems=world.systems, n_contests=2
        )
