"""study_report: a hand-computed two-contest study, input checks, JSON hygiene, and
whole simulated studies that must side with the metric tracking the hidden truth."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from krippendorff import alpha as kalpha
from scipy.special import expit

from annotation.analysis.report import Annotation, Contest, StudyConfig, study_report

L3 = math.log2(3)

# c1 (q1): A=[a,b], B=[b,a]; RCP says A (gain a .9 > b .1), qrel says B (b = 1).
#   x: a3 b0 -> A; y: a2 b1 -> A; z: a0 b2 -> B; verdict A -> class "rcp".
# c2 (q2): A=[c,d], B=[e,d]; RCP ties (all .5), qrel says A (c = 1).
#   x: all 1 -> tie; y: c2 d1 e0 -> A; z: c3 d0 e1 -> A; verdict A -> class "qrel".
HAND_CONTESTS = [
    Contest("c1", "q1", ("a", "b"), ("b", "a"), {"a": 0.9, "b": 0.1}, {"b": 1}),
    Contest(
        "c2", "q2", ("c", "d"), ("e", "d"), {"c": 0.5, "d": 0.5, "e": 0.5}, {"c": 1}
    ),
]
HAND_ANNOTATIONS = [
    Annotation("c1", "x", {"a": 3, "b": 0}, seconds={"a": 4.0, "b": 6.0}),
    Annotation("c1", "y", {"a": 2, "b": 1}),
    Annotation("c1", "z", {"a": 0, "b": 2}),
    Annotation("c2", "x", {"c": 1, "d": 1, "e": 1}),
    Annotation("c2", "y", {"c": 2, "d": 1, "e": 0}),
    Annotation("c2", "z", {"c": 3, "d": 0, "e": 1}),
    Annotation("c1", "w", {"a": 0, "b": 3}, valid=False),  # never counted
]
UNITS = [[3, 2, 0], [0, 1, 2], [1, 2, 3], [1, 1, 0], [1, 0, 1]]  # a b | c d e

ISSUE_KEYS = {
    "contests",
    "verdicts",
    "main",
    "disagreements",
    "hit_rates",
    "margin_auc",
    "label_auc",
    "ece_gain_useful",
    "icc1k",
    "krippendorff_alpha",
    "pick_agreement",
    "loo_range",
    "annotator_flags",
}


@pytest.fixture(scope="module")
def hand():
    return study_report(HAND_CONTESTS, HAND_ANNOTATIONS)


def test_hand_study_verdicts_and_main_measure(hand):
    """Verdicts A, A; classes rcp, qrel -> main 1/2. Clusters q1 (h 1), q2 (h 0):
    half = 1.96 sqrt(2 * 0.5 / 4) = 0.98 -> [0, 1]. Chance: c1 differ (n 1, k .5),
    c2 qrel-only (n .5, k 0) -> 1/3. Disagreements: c1 alone, 1/1, chance 1/2."""
    assert ISSUE_KEYS <= set(hand)
    assert hand["contests"] == 2
    assert hand["reviews"] == {"valid": 6, "invalid": 1}
    assert hand["verdicts"] == {"A": 2, "B": 0, "tie": 0}
    assert hand["verdict_classes"] == {
        "both": 0,
        "rcp": 1,
        "qrel": 1,
        "neither": 0,
        "tie": 0,
    }
    assert hand["main"] == {
        "rate": 0.5,
        "k": 1,
        "n": 2,
        "ci": [0.0, 1.0],
        "chance": pytest.approx(1 / 3),
    }
    d = hand["disagreements"]
    assert (d["rate"], d["k"], d["n"], d["chance"]) == (1.0, 1, 1, 0.5)


def test_hand_study_per_contest_margins(hand):
    """c1: RCP +0.306571 (1 - 0.667837/0.963093), qrel 1/log2(3) - 1 = -0.369070;
    c2: RCP 0 (tie), qrel 1 - 0 = 1."""
    c1, c2 = hand["per_contest"]
    assert c1["rcp_margin"] == pytest.approx(1 - (0.1 + 0.9 / L3) / (0.9 + 0.1 / L3))
    assert c1["qrel_margin"] == pytest.approx(1 / L3 - 1)
    assert (c1["picks"], c1["class"]) == ({"A": 2, "B": 1, "tie": 0}, "rcp")
    assert (c2["rcp_margin"], c2["qrel_margin"]) == (0.0, 1.0)
    assert (c2["rcp_winner"], c2["qrel_winner"], c2["picks"]["tie"]) == ("tie", "A", 1)


def test_hand_study_hit_rates_and_margin_auc(hand):
    """RCP names a winner only in c1 (hit, |m| >= .20): 1/1. qrel: c1 miss, c2 hit,
    both >= .20: 1/2. Picks A: c1x c1y c2y c2z, B: c1z (c2x tie dropped). RCP
    margins pos [.31 .31 0 0] vs neg [.31]: (.5 + .5) / 4 = 0.25; qrel pos
    [-.37 -.37 1 1] vs [-.37]: (.5 + .5 + 1 + 1) / 4 = 0.75."""
    rcp, qrel = hand["hit_rates"]["rcp"], hand["hit_rates"]["qrel"]
    assert [(rcp[b]["k"], rcp[b]["n"]) for b in rcp] == [(1, 1), (0, 0), (1, 1), (1, 1)]
    assert rcp["lt_0.02"]["rate"] is None
    assert [(qrel[b]["k"], qrel[b]["n"]) for b in qrel] == [
        (1, 2),
        (0, 0),
        (1, 2),
        (1, 2),
    ]
    assert hand["margin_auc"] == {"rcp": 0.25, "qrel": 0.75, "picks": 5}


def test_hand_study_label_quality(hand):
    """Panel means a 5/3, b 1, c 2 (useful), d 2/3, e 2/3. RCP: c (.5) vs .9 .1 .5
    .5 -> (0 + 1 + .5 + .5)/4 = 0.5; qrels: c (1) vs 0 1 0 0 -> 3.5/4 = 0.875.
    ECE over 15 grades: gain .1 (3 grades, 1 useful): |1 - .3|; .5 (9, 2): |2 - 4.5|;
    .9 (3, 2): |2 - 2.7| -> 3.9 / 15 = 0.26."""
    assert hand["label_auc"] == {
        "rcp": 0.5,
        "qrel": 0.875,
        "documents": 5,
        "useful": 1,
    }
    assert hand["ece_gain_useful"] == pytest.approx(0.26)
    assert hand["grades"] == 15
    assert hand["spearman_query"]["calibrated"] is None  # only two queries


def test_hand_study_reliability(hand):
    """Pick pairs: c1 [A,A,B] 1/3, c2 [tie,A,A] 1/3 -> 2/6. Within one grade: 1 + 2
    + 2 + 3 + 3 of 15 pairs. ICC and alpha equal the closed form and the package on
    the five (contest, document) units."""
    assert hand["pick_agreement"] == pytest.approx(1 / 3)
    assert hand["within_one_grade"] == pytest.approx(11 / 15)
    m = np.array(UNITS, dtype=float)
    msb = 3 * ((m.mean(1) - m.mean()) ** 2).sum() / 4
    msw = ((m - m.mean(1, keepdims=True)) ** 2).sum() / (5 * 2)
    assert hand["icc1k"] == pytest.approx((msb - msw) / msb)
    for level in ("ordinal", "interval"):
        assert hand["krippendorff_alpha"][level] == pytest.approx(
            kalpha(reliability_data=m.T, level_of_measurement=level)
        )


def test_hand_study_loo_range_and_flags(hand):
    """Without x: c1 [A,B] tie, c2 [A,A] A (qrel) -> 0; without y: no decided
    class -> skipped; without z: c1 A (rcp), c2 [tie,A] tie -> 1. Range [0, 1].
    x straight-lined c2 only (1 contest, below the minimum of 3): no flag."""
    assert hand["loo_range"] == [0.0, 1.0]
    assert list(hand["annotator_flags"]) == ["x", "y", "z"]  # w's review is invalid
    x = hand["annotator_flags"]["x"]
    assert (x["straight_lined"], x["median_seconds"], x["flags"]) == (1, 5.0, [])


def test_straight_lining_compares_raw_answer_dicts():
    """Raw answers as stored (dicts per document) are compared as a whole: three
    contests with identical dicts on both documents flag straight-lining, even though
    a grade alone could not tell."""
    same = {"C1": True, "C2": False}
    contests = [
        Contest(f"s{i}", f"q{i}", ("a",), ("b",), {"a": 0.5, "b": 0.4})
        for i in range(3)
    ]
    annotations = [
        Annotation(
            f"s{i}",
            "v",
            {"a": 1, "b": 1},
            seconds={"a": 10.0, "b": 10.0},
            answers={"a": dict(same), "b": dict(same)},
        )
        for i in range(3)
    ]
    flags = study_report(contests, annotations)["annotator_flags"]["v"]
    assert (flags["straight_lined"], flags["flags"]) == (3, ["straight_lining"])
    annotations[0] = Annotation(
        "s0", "v", {"a": 1, "b": 2}, answers={"a": same, "b": {"C1": True, "C2": True}}
    )
    flags = study_report(contests, annotations)["annotator_flags"]["v"]
    assert (flags["straight_lined"], flags["flags"]) == (2, [])


def test_report_is_json_clean_and_independent_of_annotation_order(hand):
    """No NaN anywhere (strict JSON), and shuffled annotations give the same dict."""
    json.dumps(hand, allow_nan=False)
    again = study_report(HAND_CONTESTS, list(reversed(HAND_ANNOTATIONS)))
    assert again == hand


def test_report_of_an_empty_study_is_all_undefined():
    """No contests: counts 0 and None for every measure, still valid JSON."""
    r = study_report([], [])
    json.dumps(r, allow_nan=False)
    assert r["main"] == {"rate": None, "k": 0, "n": 0, "ci": None, "chance": None}
    assert (r["icc1k"], r["loo_range"], r["margin_auc"]["rcp"]) == (None, None, None)


@pytest.mark.parametrize(
    ("contests", "annotations", "match"),
    [
        (HAND_CONTESTS, [Annotation("zz", "x", {})], "unknown contest"),
        (HAND_CONTESTS, [HAND_ANNOTATIONS[0], HAND_ANNOTATIONS[0]], "twice"),
        ([Contest("c", "q", ("a",), ("b",), {"a": 0.5})], [], "lacks gains"),
        (
            [
                Contest("c", "q", ("a",), ("b",), {"a": 0.5, "b": 0.1}),
                Contest("d", "q", ("a",), ("c",), {"a": 0.6, "c": 0.1}),
            ],
            [],
            "conflicting gains",
        ),
        (HAND_CONTESTS, [Annotation("c1", "x", {"a": 1})], "ungraded"),
    ],
)
def test_report_rejects_inconsistent_inputs(contests, annotations, match):
    """Unknown contests, double reviews, missing or conflicting gains, ungraded
    displayed documents are errors, never silent zeros."""
    with pytest.raises(ValueError, match=match):
        study_report(contests, annotations)


def simulate(seed: int, *, truth: str, n_queries: int = 60, k: int = 5):
    """A study with a hidden truth per document. Annotators (3 of 9 per contest)
    grade truth + noise on 0..5 and order equal grades by their noisy view.
    truth="rcp": gains track the truth, qrels are sparse (2 judged per query) and
    30% flipped. truth="qrel": graded qrels on every document track the truth and
    gains are unrelated noise."""
    rng = np.random.default_rng(seed)
    people = [f"ann{i}" for i in range(9)]
    contests, annotations = [], []
    for q in range(n_queries):
        docs = [f"q{q}-d{i}" for i in range(12)]
        latent = rng.normal(0.0, 1.5, 12)
        bt = latent + rng.normal(0.0, 0.3, 12)
        if truth == "rcp":
            gains = expit(1.5 * (latent - 0.5) + rng.normal(0.0, 0.2, 12))
            qrels = {}
            for i in rng.choice(12, 2, replace=False):
                good = bool(latent[i] > 0.5) != bool(rng.random() < 0.3)
                qrels[docs[i]] = float(good)
        else:
            gains = expit(rng.normal(0.0, 1.5, 12))
            qrels = {
                d: float(np.clip(np.round(latent[i]), 0, 3)) for i, d in enumerate(docs)
            }
        for c in range(2):
            la = [docs[i] for i in np.argsort(-(latent + rng.normal(0, 1.0, 12)))[:k]]
            lb = [docs[i] for i in np.argsort(-(latent + rng.normal(0, 1.0, 12)))[:k]]
            shown = list(dict.fromkeys(la + lb))
            idx = [docs.index(d) for d in shown]
            cid = f"c{q}-{c}"
            contests.append(
                Contest(
                    cid,
                    f"q{q}",
                    tuple(la),
                    tuple(lb),
                    {d: float(gains[i]) for d, i in zip(shown, idx, strict=True)},
                    {d: v for d, v in qrels.items() if d in shown},
                    bt_raw={d: float(bt[i]) for d, i in zip(shown, idx, strict=True)},
                    design_cell="odd" if c else "even",
                )
            )
            for a in rng.choice(people, 3, replace=False):
                view = latent[idx] + rng.normal(0.0, 0.6, len(idx))
                grades = np.clip(np.round(view + 1.5), 0, 5).astype(int)
                order = {}
                for g in set(grades.tolist()):
                    same = sorted(np.flatnonzero(grades == g), key=lambda j: -view[j])
                    order.update({shown[j]: pos for pos, j in enumerate(same, 1)})
                annotations.append(
                    Annotation(
                        cid,
                        str(a),
                        {d: int(g) for d, g in zip(shown, grades, strict=True)},
                        within_order=order,
                        seconds={d: float(rng.gamma(4.0, 5.0)) for d in shown},
                    )
                )
    return contests, annotations


@pytest.fixture(scope="module")
def rcp_study():
    return study_report(*simulate(7, truth="rcp"))


@pytest.fixture(scope="module")
def qrel_study():
    return study_report(*simulate(7, truth="qrel"))


def test_simulated_study_sides_with_rcp_when_gains_track_the_truth(rcp_study):
    """Main rate above 1/2 and well above its chance rate (sparse qrels tie often,
    so chance is above 1/2); the same on disagreements; RCP wins every head-to-head
    figure (margin AUC, label AUC, hit rate)."""
    r = rcp_study
    json.dumps(r, allow_nan=False)
    main, dis = r["main"], r["disagreements"]
    assert main["n"] >= 20
    assert main["chance"] > 0.5
    assert main["rate"] > 0.5
    assert main["rate"] > main["chance"] + 0.1
    assert main["ci"][0] > 0.5
    assert dis["rate"] > 0.6
    assert r["margin_auc"]["rcp"] > r["margin_auc"]["qrel"] + 0.15
    assert r["label_auc"]["rcp"] > r["label_auc"]["qrel"] + 0.2
    assert r["hit_rates"]["rcp"]["all"]["rate"] > r["hit_rates"]["qrel"]["all"]["rate"]
    assert r["flag_recall"]["recall"]["rcp"] > r["flag_recall"]["recall"]["qrel"]
    lo, hi = r["loo_range"]
    assert 0.5 < lo <= main["rate"] <= hi
    assert r["spearman_query"]["calibrated"] > 0.7
    assert r["spearman_query"]["raw_bt"] > 0.5
    assert set(r["main_by_design_cell"]) == {"even", "odd"}


def test_simulated_study_sides_with_qrels_when_qrels_track_the_truth(qrel_study):
    """Mirror case: gains are noise, qrels are dense and right -> main rate below
    1/2 and well below chance, and every head-to-head figure favours qrels."""
    r = qrel_study
    main, dis = r["main"], r["disagreements"]
    assert main["n"] >= 20
    assert main["rate"] < 0.5
    assert main["rate"] < main["chance"] - 0.1
    assert main["ci"][1] < 0.5
    assert dis["rate"] < 0.4
    assert r["margin_auc"]["qrel"] > r["margin_auc"]["rcp"] + 0.15
    assert r["label_auc"]["qrel"] > r["label_auc"]["rcp"] + 0.2
    assert r["hit_rates"]["qrel"]["all"]["rate"] > r["hit_rates"]["rcp"]["all"]["rate"]


def test_simulated_panel_is_reliable_and_unflagged(rcp_study):
    """Grades are truth + N(0, 0.6): high ICC(1,3) and alpha, most pairs within one
    grade; careful simulated annotators raise no flag."""
    r = rcp_study
    assert r["icc1k"] > 0.8
    assert r["krippendorff_alpha"]["ordinal"] > 0.6
    assert r["krippendorff_alpha"]["interval"] > 0.6
    assert r["within_one_grade"] > 0.85
    assert 0.4 < r["pick_agreement"] < 1.0
    assert all(f["flags"] == [] for f in r["annotator_flags"].values())


def test_study_config_changes_k_and_useful_threshold():
    """k = 1 compares only the first documents; a useful threshold of 6 (above the
    scale) leaves no useful document, so label AUC is undefined."""
    r = study_report(
        HAND_CONTESTS, HAND_ANNOTATIONS, config=StudyConfig(useful_grade=6)
    )
    assert r["label_auc"]["rcp"] is None
    r1 = study_report(HAND_CONTESTS[:1], HAND_ANNOTATIONS[:3], config=StudyConfig(k=1))
    # k = 1, c1: shown a, b; RCP ideal .9 -> A = 1, B = .1/.9; qrel ideal 1 -> 0 - 1.
    row = r1["per_contest"][0]
    assert row["rcp_margin"] == pytest.approx(1 - 0.1 / 0.9)
    assert row["qrel_margin"] == -1.0
