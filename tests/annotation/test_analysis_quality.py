"""Annotator quality figures and flags (agreement, seconds, straight-lining)."""

from __future__ import annotations

import pytest

from annotation.analysis.quality import FlagRules, ReviewSummary, annotator_quality

# c1: x A, y A, z B -> verdict A; c2: x B, y A, z A -> A; c3: x A, y B, z tie -> tie.
REVIEWS = [
    ReviewSummary("c1", "x", "A", (1.0, 2.0, 2.0), (1, 1, 1)),
    ReviewSummary("c1", "y", "A", (10.0, 20.0, 30.0), (0, 2, 3)),
    ReviewSummary("c1", "z", "B", (5.0,), (1, 2, 1)),
    ReviewSummary("c2", "x", "B", (1.0, 1.0), (2, 2, 2)),
    ReviewSummary("c2", "y", "A", (), (0, 1)),
    ReviewSummary("c2", "z", "A", (7.0,), (3,)),
    ReviewSummary("c3", "x", "A", (2.0,), (0, 0)),
    ReviewSummary("c3", "y", "B", (), (1, 0)),
    ReviewSummary("c3", "z", "tie", (9.0,), (2, 2)),
]


def test_annotator_quality_hand_computed():
    """x: panel c1 hit, c2 miss, c3 miss (verdict tie) = 1/3; others' majority is
    decided only in c2 (A, x says B) = 0/1; seconds 1 2 2 1 1 2 -> median 1.5;
    straight-lined in all 3 contests. y: panel 2/3, others never decided (None),
    median 20. z: panel c2, c3 hit = 2/3; others' majority A in c1 (z says B) = 0/1;
    median 7; c3 (2, 2) is straight-lined, c2 has one answer (not eligible) -> 1/2."""
    q = annotator_quality(REVIEWS)
    assert list(q) == ["x", "y", "z"]
    x, y, z = q["x"], q["y"], q["z"]
    assert (x.contests, x.panel_agreement) == (3, pytest.approx(1 / 3))
    assert (x.others_agreement, x.others_compared) == (0.0, 1)
    assert x.median_seconds == 1.5
    assert (x.straight_lined, x.straight_share) == (3, 1.0)
    assert x.flags == ("fast", "straight_lining")
    assert (y.panel_agreement, y.others_agreement, y.others_compared) == (
        pytest.approx(2 / 3),
        None,
        0,
    )
    assert (y.median_seconds, y.straight_lined, y.flags) == (20.0, 0, ())
    assert (z.panel_agreement, z.others_agreement) == (pytest.approx(2 / 3), 0.0)
    assert (z.median_seconds, z.straight_lined, z.straight_share) == (7.0, 1, 0.5)
    assert z.flags == ()


def test_low_agreement_flag_respects_the_minimum_contest_count():
    """With min_contests = 1, x and z (0 of 1 with the others) are flagged; y has
    nothing to compare; z's single straight-lined contest now also counts."""
    q = annotator_quality(REVIEWS, rules=FlagRules(min_contests=1))
    assert q["x"].flags == ("low_agreement", "fast", "straight_lining")
    assert q["y"].flags == ()
    assert q["z"].flags == ("low_agreement", "straight_lining")


def test_as_dict_is_plain():
    """as_dict gives JSON-ready values (flags as a list)."""
    d = annotator_quality(REVIEWS)["x"].as_dict()
    assert d["flags"] == ["fast", "straight_lining"]
    assert set(d) == {
        "contests",
        "panel_agreement",
        "others_agreement",
        "others_compared",
        "median_seconds",
        "straight_lined",
        "straight_share",
        "flags",
    }
