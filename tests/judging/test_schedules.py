"""Window schedules: the reference's counts (rcp_facts §10.1) and numerics digest (§10.2)."""

from __future__ import annotations

import hashlib
import json
import math
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from judging import schedules as sched
from judging.schedules import (
    PlannedWindow,
    RubricAnswer,
    RubricSchedule,
    TournamentAnswer,
    TournamentSchedule,
)

# ---------------------------------------------------------------------------
# §10.1 counts
# ---------------------------------------------------------------------------


def test_default_tournament_is_the_papers_216_calls_at_150() -> None:
    """53 random + 27 stratified (mirrored) + 7 x 8 adaptive = 216 calls."""
    schedule = TournamentSchedule()
    assert schedule.windows_for(150) == (53, 27, 8)
    assert schedule.phase_calls(150) == (160, 56)
    assert schedule.calls_per_query(150) == 216


@pytest.mark.parametrize(
    ("n", "windows", "calls"),
    [
        (300, (106, 54, 16), 2 * 160 + 7 * 16),
        (75, (26, 14, 4), 2 * 40 + 28),  # 26.5 rounds half to even
        (4, (4, 2, 1), 13),
        (8, (4, 2, 1), 13),
        (23, (8, 4, 1), 31),
        (30, (11, 5, 2), 46),
        (50, (18, 9, 3), 75),
        (100, (35, 18, 5), 141),
    ],
)
def test_tournament_counts_scale_with_the_pool(
    n: int, windows: tuple[int, int, int], calls: int
) -> None:
    """Counts are round(placements * n / w) with w = min(window, n)."""
    assert TournamentSchedule().windows_for(n) == windows
    assert TournamentSchedule().calls_per_query(n) == calls


def test_small_pools() -> None:
    """n < 2 has no windows; a pool within the adaptive window gets one adaptive call."""
    assert TournamentSchedule().calls_per_query(1) == 0
    assert TournamentSchedule().windows_for(1) == (0, 0, 0)
    assert TournamentSchedule().phase_calls(8) == (12, 1)
    wide = TournamentSchedule(stratified_placements=5, adaptive_placements=20)
    assert wide.windows_for(8) == (4, 5, 1)
    assert wide.calls_per_query(8) == 19
    assert TournamentSchedule(adaptive_batches=0).windows_for(8) == (4, 2, 0)


@pytest.mark.parametrize(
    ("kwargs", "n", "batches"),
    [({}, 2, 1), ({}, 10, 1), ({}, 11, 7), ({}, 150, 7), ({}, 1, 0)]
    + [({"adaptive_batches": 3}, 8, 1), ({"adaptive_batches": 0}, 8, 0)],
)
def test_adaptive_batches_for(kwargs: dict[str, int], n: int, batches: int) -> None:
    """One batch while the pool fits an adaptive window, the schedule's above it."""
    assert TournamentSchedule(**kwargs).adaptive_batches_for(n) == batches


def test_image_and_video_tournaments_use_windows_of_five() -> None:
    """Same placements in windows of 5: 106/54/7x16 = 432 calls at 150."""
    assert TournamentSchedule.for_modality("text") == TournamentSchedule()
    for modality in ("image", "video"):
        schedule = TournamentSchedule.for_modality(modality)
        assert schedule == TournamentSchedule(window=5, adaptive_window=5)
        assert schedule.windows_for(150) == (106, 54, 16)
        assert schedule.calls_per_query(150) == 432


def test_placements_are_the_papers_counts_as_fractions() -> None:
    """Defaults are exact fractions of the paper's window counts at 150."""
    t, r = TournamentSchedule(), RubricSchedule()
    assert t.random_placements == pytest.approx(53 * 10 / 150, rel=1e-15)
    assert t.stratified_placements == pytest.approx(1.8, rel=1e-15)
    assert t.adaptive_placements == pytest.approx(7 * 8 * 10 / 150, rel=1e-15)
    assert r.placements_per_doc == pytest.approx(100 * 10 / 150, rel=1e-15)
    assert (t.window, t.mirror, t.adaptive_depth, t.overlap_discount, t.seed) == (
        10,
        True,
        150,
        0.3,
        42,
    )


@pytest.mark.parametrize(
    ("n", "windows"),
    [
        (150, (50, 50)),
        (300, (100, 100)),
        (30, (10, 10)),
        (15, (5, 5)),
        (4, (4, 3)),
        (0, (0, 0)),
        (23, (8, 7)),
        (50, (16, 17)),
        (100, (34, 33)),
    ],
)
def test_rubric_counts(n: int, windows: tuple[int, int]) -> None:
    """max(ceil(n/w), round(placements * n / w)) windows, half random (half to even)."""
    assert RubricSchedule().windows_for(n) == windows
    assert RubricSchedule().calls_per_query(n) == sum(windows)


def test_rubric_modalities_coverage_and_share() -> None:
    """Image 8 / video 5 windows; every unit seen once; at least one random window."""
    assert RubricSchedule.for_modality("image").windows_for(150) == (62, 63)
    assert RubricSchedule.for_modality("video").windows_for(150) == (100, 100)
    sparse = RubricSchedule(placements_per_doc=0.2)
    assert sum(sparse.windows_for(95)) == 10
    assert sum(sparse.windows_for(15, n_units=95)) == 10
    assert RubricSchedule(random_share=0.01).windows_for(20) == (1, 12)


def test_rubric_refuses_a_schedule_that_cannot_cover_every_unit() -> None:
    """n_random * w < n_units is refused before any call."""
    RubricSchedule().check_coverage(150, n_units=500)  # 50 x 10 covers 500
    with pytest.raises(ValueError, match="cannot show"):
        RubricSchedule().check_coverage(150, n_units=501)


def test_tiny_run_is_66_calls() -> None:
    """The reference's tiny config: 14 tournament + 8 rubric calls per query, 3 queries."""
    t = TournamentSchedule(
        window=4,
        random_placements=2.0,
        stratified_placements=1.0,
        adaptive_window=4,
        adaptive_batches=1,
        adaptive_placements=1.0,
    )
    r = RubricSchedule(window=4, placements_per_doc=4.0, random_share=0.5)
    assert t.windows_for(8) == (4, 2, 2)
    assert r.windows_for(8) == (4, 4)
    assert 3 * (t.calls_per_query(8) + r.calls_per_query(8)) == 66


@pytest.mark.parametrize(
    "kwargs",
    [{"window": 1}, {"random_placements": -1.0}, {"overlap_discount": 1.5}],
)
def test_invalid_tournament_parameters_are_refused(kwargs: dict[str, float]) -> None:
    """Schedules validate their parameters on construction."""
    with pytest.raises(ValueError):
        TournamentSchedule(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kwargs", [{"random_share": 1.5}, {"placements_per_doc": 0.0}, {"window": 0}]
)
def test_invalid_rubric_parameters_are_refused(kwargs: dict[str, float]) -> None:
    """Schedules validate their parameters on construction."""
    with pytest.raises(ValueError):
        RubricSchedule(**kwargs)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------
# §10.2 digest and window algorithms
# ---------------------------------------------------------------------------


def _numerics_digest() -> str:
    out = []
    for seed in range(6):
        for n in (7, 23, 150):
            rng = random.Random(seed)
            ids = [f"d{i}" for i in range(n)]
            groups = sched.balanced_random_windows(n, 10, 53, rng)
            theta = {d: rng.gauss(0, 1.5) for d in ids}
            stratified = sched.stratified_windows(ids, theta, min(10, n), 27, rng)
            counts = sched.pair_counts([[ids[i] for i in g] for g in groups])
            boundaries = sched.boundary_values(theta, counts, depth=150)
            adaptive = sched.greedy_adaptive_windows(
                theta, boundaries, min(10, n), 8, overlap_discount=0.3
            )
            out.append((groups, stratified, boundaries, adaptive))
    payload = json.dumps(out, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()


def test_window_numerics_match_the_reference_digest() -> None:
    """Every draw, boundary value and greedy pick equals the reference scheduler's."""
    assert (
        _numerics_digest()
        == "11707e05029e6730160d7022573929be5e9c188c7f9d1b2b829acc6c00161389"
    )


def test_balanced_windows_spread_placements_evenly() -> None:
    """53 windows of 10 over 150 docs: every doc shown 3 or 4 times, none twice per window."""
    groups = sched.balanced_random_windows(150, 10, 53, random.Random(1))
    shown = Counter(i for g in groups for i in g)
    assert sorted(set(shown.values())) == [3, 4]
    assert sum(shown.values()) == 530
    assert all(len(set(g)) == 10 for g in groups)


def test_whole_pool_windows_are_reshuffled_each_time() -> None:
    """A window >= n holds the whole pool, each draw in its own order."""
    groups = sched.balanced_random_windows(4, 10, 4, random.Random(0))
    assert all(sorted(g) == [0, 1, 2, 3] for g in groups)
    assert len({tuple(g) for g in groups}) > 1
    theta = {"a": 3.0, "b": 2.0, "c": 1.0, "d": 0.0}
    strat = sched.stratified_windows(list(theta), theta, 4, 3, random.Random(0))
    assert len(strat) == 3 and all(sorted(g) == ["a", "b", "c", "d"] for g in strat)


def test_stratified_windows_are_contiguous_tiers() -> None:
    """Each stratified window is a block of adjacent ranks; coverage stays balanced."""
    ids = [f"d{i}" for i in range(30)]
    theta = {d: -float(i) for i, d in enumerate(ids)}
    strat = sched.stratified_windows(ids, theta, 10, 9, random.Random(3))
    for group in strat:
        ranks = sorted(int(d[1:]) for d in group)
        assert ranks == list(range(ranks[0], ranks[0] + 10))
    shown = Counter(d for g in strat for d in g)
    # Tie switches leave gaps narrower than a window, so coverage is near-even.
    assert sum(shown.values()) == 90 and set(shown.values()) <= {2, 3, 4}


def test_boundary_values_follow_the_formula() -> None:
    """v_r = p(1-p) / log2(r+1) / (1 + n_r) over adjacent ranks, best first."""
    theta = {"x": 0.0, "a": 2.0, "b": 1.0}
    counts = Counter({("a", "b"): 2})
    values = sched.boundary_values(theta, counts)
    p = 1 / (1 + math.exp(-1.0))
    assert [(b.above, b.below) for b in values] == [("a", "b"), ("b", "x")]
    assert values[0].value == pytest.approx(p * (1 - p) / 1.0 / 3)
    assert values[1].value == pytest.approx(p * (1 - p) / math.log2(3))
    assert sched.boundary_values(theta, counts, depth=2) == values[:1]


def test_greedy_discounts_covered_boundaries() -> None:
    """The best stretch goes first; covered boundaries lose 70% so the next moves on."""
    ranked = [f"d{i}" for i in range(6)]
    theta = {d: -float(i) for i, d in enumerate(ranked)}
    boundaries = [
        sched.Boundary(v, a, b)
        for v, a, b in zip(
            [0.1, 1.0, 1.0, 0.2, 0.9], ranked[:-1], ranked[1:], strict=True
        )
    ]
    picks = sched.greedy_adaptive_windows(theta, boundaries, 3, 3)
    # Stretch sums: [1.1, 2.0, 1.2, 1.1] -> start 1; then [0.4, 0.6, 0.5, 1.1] -> 3.
    assert picks[:2] == [["d1", "d2", "d3"], ["d3", "d4", "d5"]]
    zero = [
        sched.Boundary(0.0, a, b) for a, b in zip(ranked[:-1], ranked[1:], strict=True)
    ]
    assert sched.greedy_adaptive_windows(theta, zero, 3, 3) == []
    assert sched.greedy_adaptive_windows(theta, zero, 6, 3) == [ranked]


def test_query_streams_are_per_query() -> None:
    """Each (seed, dataset, query) has its own reproducible stream."""
    first = [sched.query_rng(42, "ds", "q1").random() for _ in range(2)]
    assert first == [sched.query_rng(42, "ds", "q1").random() for _ in range(2)]
    assert first[0] == random.Random("42/ds/q1").random()
    assert first != [sched.query_rng(42, "ds", "q2").random() for _ in range(2)]


# ---------------------------------------------------------------------------
# Per-query planners
# ---------------------------------------------------------------------------


def _truth(ids: list[str]) -> dict[str, float]:
    return {d: 3.0 - 6.0 * i / (len(ids) - 1) for i, d in enumerate(ids)}


def _tournament_judge(truth: dict[str, float]):
    def judge(windows: list[PlannedWindow]) -> list[TournamentAnswer]:
        out = []
        for w in windows:
            rng = np.random.default_rng(w.seq)
            noise = rng.normal(0, 0.3, len(w.doc_ids))
            scores = tuple(
                float(truth[d] + e) for d, e in zip(w.doc_ids, noise, strict=True)
            )
            out.append(TournamentAnswer(w.doc_ids, scores))
        return out

    return judge


def test_tournament_planner_walks_all_phases_at_150() -> None:
    """216 windows: mirrored pairs consecutive, adaptive in current best-first order."""
    ids = [f"d{i:03d}" for i in range(150)]
    truth = _truth(ids)
    asked: list[PlannedWindow] = []

    def judge(windows: list[PlannedWindow]) -> list[TournamentAnswer]:
        asked.extend(windows)
        return _tournament_judge(truth)(windows)

    judged = sched.run_tournament(
        ids, judge, schedule=TournamentSchedule(), dataset="ds", query_id="q1"
    )
    assert sorted(judged) == list(range(216))
    assert [w.seq for w in asked] == list(range(216))
    assert Counter(w.phase for w in asked) == {
        "random": 106,
        "stratified": 54,
        "adaptive": 56,
    }
    for first, copy in zip(asked[:160:2], asked[1:160:2], strict=True):
        assert copy.reversed and copy.doc_ids == first.doc_ids[::-1]
    adaptive = [w for w in asked if w.phase == "adaptive"]
    assert Counter(w.batch for w in adaptive) == dict.fromkeys(range(7), 8)
    true_ranks = [[ids.index(d) for d in w.doc_ids] for w in adaptive]
    # Stretches of the fitted order are tight bands of the true order, and the
    # nDCG discount pulls them towards the top of the pool.
    assert max(max(r) - min(r) for r in true_ranks) <= 25
    assert np.mean(true_ranks) < 75


def test_tournament_planner_resumes_with_the_same_windows() -> None:
    """Replaying from stored answers plans exactly the windows still missing."""
    ids = [f"d{i}" for i in range(23)]
    judge = _tournament_judge(_truth(ids))
    kwargs = {"schedule": TournamentSchedule(), "dataset": "ds", "query_id": "q7"}
    full = sched.run_tournament(ids, judge, **kwargs)
    assert len(full) == 31
    partial = {seq: a for seq, a in full.items() if seq < 20 and seq != 5}
    missing = sched.next_tournament_windows(ids, partial, **kwargs)
    assert [w.seq for w in missing] == [5]
    assert missing[0].doc_ids == full[5].doc_ids
    stratified = sched.next_tournament_windows(
        ids, {s: a for s, a in full.items() if s < 20}, **kwargs
    )
    assert [w.seq for w in stratified] == [20, 21, 22, 23]
    assert [w.doc_ids for w in stratified] == [full[s].doc_ids for s in range(20, 24)]
    assert sched.next_tournament_windows(ids, full, **kwargs) == []


def test_invalid_windows_count_as_asked_and_feed_nothing() -> None:
    """An all-invalid random phase still moves on; the fit sees no scores."""
    ids = [f"d{i}" for i in range(8)]
    seen: list[int] = []

    def fit(doc_ids, answers):
        seen.append(sum(a.scores is not None for a in answers))
        return {d: 0.0 for d in doc_ids}

    def judge(windows):
        return [TournamentAnswer(w.doc_ids, None) for w in windows]

    judged = sched.run_tournament(
        ids, judge, schedule=TournamentSchedule(), dataset="ds", query_id="q", fit=fit
    )
    # Flat abilities still give positive boundary values (p = 0.5), so one adaptive call.
    assert len(judged) == 13 and set(seen) == {0}


def test_rubric_planner_random_then_stratified() -> None:
    """100 windows at 150: 50 random then 50 stratified by the Rasch TCC."""
    ids = [f"d{i:03d}" for i in range(150)]
    truth = _truth(ids)
    betas = (-2.0, -1.0, 0.0, 1.0, 2.0)

    def judge(windows: list[PlannedWindow]) -> list[RubricAnswer]:
        return [
            RubricAnswer(
                w.doc_ids,
                tuple(tuple(int(truth[d] > b) for b in betas) for d in w.doc_ids),
            )
            for w in windows
        ]

    judged = sched.run_rubric(
        ids, judge, schedule=RubricSchedule(), dataset="ds", query_id="q1"
    )
    assert sorted(judged) == list(range(100))
    shown = Counter(d for a in judged.values() for d in a.doc_ids)
    assert min(shown.values()) >= 5 and sum(shown.values()) == 1000
    scores = sched.rasch_scores(ids, list(judged.values()))
    assert all(0 < s < 100 for s in scores.values())
    assert scores["d000"] > scores["d075"] > scores["d149"]


def test_rubric_stratified_phase_dropped_without_valid_random_answers() -> None:
    """No valid random window: the stratified phase is skipped."""
    ids = [f"d{i}" for i in range(30)]
    judged = sched.run_rubric(
        ids,
        lambda ws: [RubricAnswer(w.doc_ids, None) for w in ws],
        schedule=RubricSchedule(),
        dataset="ds",
        query_id="q",
    )
    assert len(judged) == 10


def test_bt_abilities_orders_by_judge_scores() -> None:
    """The default fit recovers the judge's order and is mean-zero."""
    ids = ["a", "b", "c", "d"]
    answers = [
        TournamentAnswer(("a", "b", "c", "d"), (2.0, 1.0, 0.0, -1.0)),
        TournamentAnswer(("d", "c", "b", "a"), (-1.0, 0.0, 1.0, 2.0)),
        TournamentAnswer(("a", "b"), None),
    ]
    theta = sched.bt_abilities(ids, answers)
    assert sched.rank_by_ability(ids, theta) == ids
    assert sum(theta.values()) == pytest.approx(0.0, abs=1e-9)


def test_judging_numerics_import_no_django() -> None:
    """schedules, prompts and parsing stay pure: importing them loads no Django."""
    code = (
        "import sys, judging.schedules, judging.prompts, judging.parsing;"
        "sys.exit(any(m.split('.')[0] == 'django' for m in sys.modules))"
    )
    repo = Path(__file__).resolve().parents[2]
    assert subprocess.run([sys.executable, "-c", code], cwd=repo).returncode == 0


def test_pair_counts_equal_the_plain_double_loop():
    """The vectorised counter matches counting every pair of every window by hand."""
    import random as _random
    from collections import Counter as _Counter

    from judging.schedules import pair_counts, pair_key

    rng = _random.Random(4)
    ids = [f"d{i}" for i in range(40)] + ["a", "Z", "10"]
    windows = [rng.sample(ids, rng.choice([1, 2, 5, 10])) for _ in range(300)]
    expected: _Counter = _Counter()
    for window in windows:
        for i, a in enumerate(window):
            for b in window[i + 1 :]:
                expected[pair_key(a, b)] += 1
    assert pair_counts(windows) == expected
    assert pair_counts([]) == _Counter()


def _walk_with_memo(plan, judge):
    """Walk a planner as the runner does (one memo for the query); returns the
    windows of each call and how many fits ran."""
    memo, judged, calls = {}, {}, []
    while windows := plan(judged, memo):
        calls.append(windows)
        for w, a in zip(windows, judge(windows), strict=True):
            judged[w.seq] = a
    return calls, judged


def test_planner_memo_plans_the_same_windows_and_fits_each_boundary_once() -> None:
    """With a memo kept between calls, each call plans what the plain replay plans
    (also after an answer changes, as on a resume), and each phase boundary is
    fitted once instead of at every later call."""
    ids = [f"d{i:03d}" for i in range(60)]
    judge = _tournament_judge(_truth(ids))
    kwargs = {"schedule": TournamentSchedule(), "dataset": "ds", "query_id": "q3"}
    fits = []

    def fit(doc_ids, answers):
        fits.append(len(answers))
        return sched.bt_abilities(doc_ids, answers)

    def plan(judged, memo):
        with_memo = sched.next_tournament_windows(
            ids, judged, fit=fit, memo=memo, **kwargs
        )
        assert with_memo == sched.next_tournament_windows(ids, judged, **kwargs)
        return with_memo

    calls, judged = _walk_with_memo(plan, judge)
    assert len(calls) == 2 + 7 and len(judged) == 42 + 22 + 7 * 3
    # One fit per boundary: before the stratified phase and before each batch.
    assert fits == [42] + [42 + 22 + 3 * b for b in range(7)]
    # An answer of the random phase changes (a resume stored another answer):
    # the memo notices and replans from there, as the plain replay does.
    memo: dict = {}
    assert sched.next_tournament_windows(ids, judged, memo=memo, **kwargs) == []
    changed = dict(judged)
    first = changed[0]
    changed[0] = TournamentAnswer(first.doc_ids, tuple(-s for s in first.scores))
    for seq in [s for s in changed if s >= 42]:
        del changed[seq]
    replanned = sched.next_tournament_windows(ids, changed, memo=memo, **kwargs)
    assert replanned == sched.next_tournament_windows(ids, changed, **kwargs)
    assert [w.seq for w in replanned] == list(range(42, 64))
    assert [w.doc_ids for w in replanned] != [judged[w.seq].doc_ids for w in replanned]


def test_rubric_planner_memo_plans_the_same_windows() -> None:
    ids = [f"d{i:03d}" for i in range(40)]
    kwargs = {"schedule": RubricSchedule(), "dataset": "ds", "query_id": "q4"}
    fits = []

    def fit(unit_ids, answers):
        fits.append(len(answers))
        return sched.rasch_scores(unit_ids, answers)

    def judge(windows):
        return [
            RubricAnswer(w.doc_ids, tuple((1, 0, 1, 0, 1) for _ in w.doc_ids))
            for w in windows
        ]

    def plan(judged, memo):
        with_memo = sched.next_rubric_windows(ids, judged, fit=fit, memo=memo, **kwargs)
        assert with_memo == sched.next_rubric_windows(ids, judged, **kwargs)
        return with_memo

    calls, _ = _walk_with_memo(plan, judge)
    assert len(calls) == 2 and len(fits) == 1
