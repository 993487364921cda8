"""Metric winners and margins over the displayed documents; verdict classes."""

from __future__ import annotations

import math

import pytest

from annotation.analysis.verdicts import contest_metrics, metric_winner, verdict_class

L3 = math.log2(3)


@pytest.mark.parametrize(
    ("margin", "winner"),
    [(0.3, "A"), (-0.3, "B"), (0.0, "tie"), (5e-10, "tie"), (-1e-9, "B"), (1e-9, "A")],
)
def test_metric_winner_uses_the_tie_margin(margin, winner):
    """|margin| < 1e-9 ties; otherwise the sign names the winner."""
    assert metric_winner(margin) == winner


def test_contest_metrics_hand_computed():
    """A=[a,b], B=[b,a], k=2. RCP gains a=0.9, b=0.1: IDCG = 0.9 + 0.1/log2(3) =
    0.963093, A = 1, B = (0.1 + 0.9/log2(3)) / IDCG = 0.693429 -> +0.306571, A wins.
    qrels b=1 (a unjudged): IDCG 1, A = 1/log2(3) = 0.630930, B = 1 -> -0.369070."""
    m = contest_metrics(["a", "b"], ["b", "a"], {"a": 0.9, "b": 0.1}, {"b": 1}, k=2)
    assert m.rcp_margin == pytest.approx(1 - (0.1 + 0.9 / L3) / (0.9 + 0.1 / L3))
    assert round(m.rcp_margin, 6) == 0.306571
    assert m.qrel_margin == pytest.approx(1 / L3 - 1)
    assert (m.rcp_winner, m.qrel_winner) == ("A", "B")


def test_contest_metrics_ideal_is_displayed_documents_only():
    """A qrel on an undisplayed document never enters the ideal: A=[c], B=[d], k=1,
    qrels c=1, z=3 (not shown) -> A = 1 (not 1/3), B = 0."""
    m = contest_metrics(["c"], ["d"], {"c": 0.5, "d": 0.5}, {"c": 1, "z": 3}, k=1)
    assert m.qrel_margin == pytest.approx(1.0)
    assert (m.rcp_margin, m.rcp_winner) == (0.0, "tie")


def test_contest_metrics_unjudged_contest_ties_and_negative_qrels_count_zero():
    """No positive qrel among the displayed documents: margin 0, tie."""
    m = contest_metrics(["a"], ["b"], {"a": 0.2, "b": 0.1}, {"a": -1}, k=1)
    assert (m.qrel_margin, m.qrel_winner) == (0.0, "tie")
    assert m.rcp_winner == "A"


@pytest.mark.parametrize(
    ("verdict", "rcp", "qrel", "cls"),
    [
        ("A", "A", "A", "both"),
        ("A", "A", "B", "rcp"),
        ("A", "A", "tie", "rcp"),
        ("B", "A", "B", "qrel"),
        ("B", "tie", "B", "qrel"),
        ("B", "A", "A", "neither"),
        ("B", "tie", "tie", "neither"),
        ("tie", "A", "B", "tie"),
        ("tie", "A", "A", "tie"),
    ],
)
def test_verdict_class_table(verdict, rcp, qrel, cls):
    """Which metric's winner equals a decided verdict; a tied verdict is "tie"."""
    assert verdict_class(verdict, rcp, qrel) == cls
