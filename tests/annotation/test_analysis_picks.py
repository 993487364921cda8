"""Annotator picks (shared-ideal nDCG, Copeland tie-break) and majority verdicts."""

from __future__ import annotations

import math

import pytest

from annotation.analysis.picks import (
    annotator_pick,
    copeland_scores,
    displayed_docs,
    majority_verdict,
    shared_ideal_ndcg,
)

L3 = math.log2(3)  # discount at rank 2 is 1/log2(3) = 0.630930


def test_displayed_docs_is_the_deduplicated_union_of_both_top_k():
    """Union of A[:k] then B[:k], first-seen order; documents past k are not shown."""
    assert displayed_docs(["a", "b", "z"], ["b", "c"], k=2) == ("a", "b", "c")


def test_displayed_docs_rejects_repeated_documents_and_bad_k():
    """A list repeating a document, or k < 1, is an input error."""
    with pytest.raises(ValueError):
        displayed_docs(["a", "a"], ["b"], k=2)
    with pytest.raises(ValueError):
        displayed_docs(["a"], ["b"], k=0)


def test_shared_ideal_ndcg_hand_computed():
    """A=[a,b], B=[b,c], gains a=2, b=1, c=3, k=2. Ideal = union by gain = [c, a]:
    IDCG = 3 + 2/log2(3) = 4.261860; DCG_A = 2 + 1/log2(3) = 2.630930 -> 0.617320;
    DCG_B = 1 + 3/log2(3) = 2.892789 -> 0.678762."""
    nd_a, nd_b = shared_ideal_ndcg(
        ["a", "b"], ["b", "c"], {"a": 2, "b": 1, "c": 3}, k=2
    )
    idcg = 3 + 2 / L3
    assert nd_a == pytest.approx((2 + 1 / L3) / idcg)
    assert nd_b == pytest.approx((1 + 3 / L3) / idcg)
    assert (round(nd_a, 6), round(nd_b, 6)) == (0.61732, 0.678762)


def test_shared_ideal_uses_displayed_documents_not_each_list_alone():
    """List A alone is perfectly ordered (nDCG 1 under its own ideal) but the shared
    ideal holds c from list B: A=[a] g=1, B=[c] g=2 -> 1/2 and 2/2."""
    assert shared_ideal_ndcg(["a"], ["c"], {"a": 1, "c": 2}, k=1) == (0.5, 1.0)


def test_shared_ideal_ndcg_all_zero_and_missing_gains():
    """All-zero gains give (0, 0); a missing gain counts 0 (b here): A=[a,b] -> 1."""
    assert shared_ideal_ndcg(["a"], ["b"], {}, k=1) == (0.0, 0.0)
    nd_a, nd_b = shared_ideal_ndcg(["a", "b"], ["b", "a"], {"a": 1.0}, k=2)
    assert nd_a == pytest.approx(1.0)
    assert nd_b == pytest.approx(1 / L3)


def test_shared_ideal_ndcg_rejects_negative_gains_and_short_display():
    """Negative gains and a displayed set missing a listed document are errors."""
    with pytest.raises(ValueError):
        shared_ideal_ndcg(["a"], ["b"], {"a": -1.0}, k=1)
    with pytest.raises(ValueError):
        shared_ideal_ndcg(["a"], ["b"], {"a": 1.0}, k=1, displayed=["a"])


def test_copeland_scores_inside_each_grade_class():
    """Grade 2: order b(1) a(2) c(3) -> duels b>a, b>c, a>c: b=+2, a=0, c=-2. d is
    alone in grade 1 (0); e (grade 2) has no position, so it duels nobody (0)."""
    grades = {"a": 2, "b": 2, "c": 2, "d": 1, "e": 2}
    order = {"a": 2, "b": 1, "c": 3, "d": 1}
    assert copeland_scores(grades, order) == {"a": 0, "b": 2, "c": -2, "d": 0, "e": 0}


def test_copeland_equal_positions_give_no_duel():
    """Two documents sharing a position neither win nor lose against each other."""
    assert copeland_scores({"a": 1, "b": 1}, {"a": 1, "b": 1}) == {"a": 0, "b": 0}


def test_pick_higher_ndcg_wins_with_margin():
    """Grades a=3, b=0, c=1; A=[a,b], B=[c,a], k=2, ideal [3,1]: IDCG = 3.630930;
    DCG_A = 3, DCG_B = 1 + 3/log2(3) = 2.892789 -> A wins by 0.107211 / 3.630930
    = 0.029527."""
    p = annotator_pick(["a", "b"], ["c", "a"], {"a": 3, "b": 0, "c": 1}, k=2)
    assert p.choice == "A"
    assert not p.by_copeland
    assert p.margin == pytest.approx((3 - (1 + 3 / L3)) / (3 + 1 / L3))
    assert round(p.margin, 6) == 0.029527


def test_pick_tie_margin_is_strict():
    """|delta| below the margin is a tie, at or above it a win (B here)."""
    grades = {"a": 3, "b": 0, "c": 1}
    delta = annotator_pick(["a", "b"], ["c", "a"], grades, k=2).margin  # 0.029527
    assert annotator_pick(
        ["a", "b"], ["c", "a"], grades, k=2, tie_margin=0.03
    ).choice == ("tie")
    assert (
        annotator_pick(["a", "b"], ["c", "a"], grades, k=2, tie_margin=delta).choice
        == "A"
    )


def test_pick_equal_ndcg_is_tie_without_order_and_copeland_breaks_it():
    """A=[x,y], B=[y,x], both grade 2: nDCG 1 vs 1 -> tie. With x ordered above y,
    Copeland x=+1, y=-1: A = 1 - 1/log2(3) = 0.369 > B = -0.369 -> A."""
    grades = {"x": 2, "y": 2}
    tied = annotator_pick(["x", "y"], ["y", "x"], grades, k=2)
    assert (tied.choice, tied.ndcg_a, tied.ndcg_b) == ("tie", 1.0, 1.0)
    broken = annotator_pick(
        ["x", "y"], ["y", "x"], grades, k=2, within_order={"x": 1, "y": 2}
    )
    assert (broken.choice, broken.by_copeland) == ("A", True)
    flipped = annotator_pick(
        ["x", "y"], ["y", "x"], grades, k=2, within_order={"x": 2, "y": 1}
    )
    assert flipped.choice == "B"


def test_copeland_never_overrides_a_clear_ndcg_winner():
    """Within-grade order matters only for near-equal nDCG: grades a=3, b=1 give A."""
    p = annotator_pick(
        ["a"], ["b"], {"a": 3, "b": 1}, k=1, within_order={"a": 1, "b": 1}
    )
    assert (p.choice, p.by_copeland) == ("A", False)


def test_copeland_breaks_tie_between_different_equally_graded_documents():
    """A=[x,z], B=[y,z]; x, y grade 1, z grade 0 -> equal nDCG. y ordered first in
    grade 1 -> Copeland y=+1, x=-1 -> B."""
    grades = {"x": 1, "y": 1, "z": 0}
    p = annotator_pick(
        ["x", "z"], ["y", "z"], grades, k=2, within_order={"y": 1, "x": 2, "z": 1}
    )
    assert (p.choice, p.by_copeland) == ("B", True)


def test_pick_requires_every_displayed_document_graded():
    """An ungraded displayed document is an error, not a zero."""
    with pytest.raises(ValueError, match="ungraded"):
        annotator_pick(["a"], ["b"], {"a": 1}, k=1)


@pytest.mark.parametrize(
    ("picks", "verdict"),
    [
        (["A", "A", "B"], "A"),
        (["B", "B", "B"], "B"),
        (["A", "A", "tie"], "A"),
        (["A", "B", "tie"], "tie"),
        (["A", "tie", "tie"], "tie"),  # 1 of 3 is no majority
        (["A", "B"], "tie"),
        (["A", "A", "B", "B", "tie"], "tie"),
        (["B", "B", "B", "A", "tie"], "B"),
        ([], "tie"),
    ],
)
def test_majority_verdict_needs_more_than_half_of_all_picks(picks, verdict):
    """A or B wins with a strict majority of the N picks (ties count in N)."""
    assert majority_verdict(picks) == verdict


def test_majority_verdict_rejects_unknown_picks():
    """Only A, B and tie are picks."""
    with pytest.raises(ValueError):
        majority_verdict(["A", "C"])
