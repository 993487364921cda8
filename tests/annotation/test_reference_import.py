"""Re-analysis of a published study in the reference layout (issue 14): a generated
study with hand-known answers (CSV and parquet), and one of our own studies exported,
rewritten in the reference layout and re-imported, which must reproduce the database
report's agreement, inference and reliability figures."""

from __future__ import annotations

import io
import json
import math

import numpy as np
import pytest
from django.core.management import call_command
from sklearn.metrics import roc_auc_score

from annotation.analysis.reliability import within_one_share
from annotation.reference_import import (
    read_reference,
    reference_tables_from_release,
    write_reference,
)
from annotation.services import reference_report, study_report_build
from annotation.services.reports import study_pseudonyms, study_tables, tables_complete
from rcp_platform.exceptions import ApplicationError

# (id, query, sys A, sys B, rcp winner, ndcg winner, d_rcp, d_ndcg, cell, in, verdict)
CONTESTS = [
    ("c1", "q1", "x", "y", "A", "B", 0.10, -0.05, "discordant_decisive", True, "A"),
    ("c2", "q2", "x", "z", "b", "a", -0.03, 0.01, "discordant_marginal", True, "tie"),
    ("c3", "q3", "y", "z", "A", "tie", 0.20, 0.0, "discordant_marginal", True, "A"),
    ("c4", "q3", "x", "y", "none", "B", 0.0, -0.30, "discordant_marginal", True, "B"),
    ("c5", "q4", "x", "z", "A", "A", 0.05, 0.05, "concordant", True, "A"),
    ("c6", "q5", "y", "z", "A", "B", 0.4, -0.4, "discordant_decisive", False, "B"),
]
PICKS = {
    "c1": "AAB",
    "c2": "AA-",  # "-" = tie pick; published verdict "tie" is wrong: majority is A
    "c3": "ABA",
    "c4": "BBA",
    "c5": "AAB",
    "c6": "BBB",  # not in the analysis
}


def _tables():
    contests = [
        {
            "contest_id": c[0],
            "suite": "paper",
            "dataset": "ds",
            "query_id": c[1],
            "system_a": c[2],
            "system_b": c[3],
            "human_verdict": c[10],
            "rcp_winner_shown": c[4],
            "ndcg_winner_shown": c[5],
            "d_rcp_shown": c[6],
            "d_ndcg_shown": c[7],
            "design_cell": c[8],
            "in_analysis": c[9],
        }
        for c in CONTESTS
    ]
    reviews = [
        {
            "contest_id": cid,
            "annotator": ann,
            "valid_review": True,
            "pick": "tie" if p == "-" else p,
        }
        for cid, picks in PICKS.items()
        for ann, p in zip("abc", picks, strict=True)
    ]
    reviews.append({"contest_id": "c1", "annotator": "w", "valid_review": False,
                    "pick": "B"})  # fmt: skip
    grades = [
        {
            "contest_id": "c1",
            "doc_id": "d1",
            "counted": True,
            "annotator": a,
            "grade": g,
        }
        for a, g in zip("abc", (3, 2, 0), strict=True)
    ] + [
        {
            "contest_id": "c1",
            "doc_id": "d2",
            "counted": True,
            "annotator": "a",
            "grade": 1,
        },
        {
            "contest_id": "c1",
            "doc_id": "d2",
            "counted": True,
            "annotator": "b",
            "grade": 1,
        },
        {
            "contest_id": "c1",
            "doc_id": "d2",
            "counted": False,
            "annotator": "c",
            "grade": 5,
        },
    ]
    return {"contests": contests, "reviews": reviews, "grades": grades}


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_generated_reference_study_gives_the_known_answers(tmp_path, fmt):
    """Classes: c1 rcp, c2 qrel (A by majority), c3 rcp, c4 qrel, c5 both -> main
    2/4. Chance over c1..c5: differ c1, c2 (n 1, k .5 each), rcp-only c3 (.5, .5),
    qrel-only c4 (.5, 0) -> 1.5 / 3 = 0.5. Disagreements c1, c2 -> 1/2. c6 is left
    out; c2's published verdict 'tie' disagrees with its picks."""
    write_reference(tmp_path, _tables(), fmt=fmt)
    r = reference_report(folder=tmp_path)
    assert r["import"]["formats"] == dict.fromkeys(
        ("contests", "reviews", "grades"), fmt
    )
    assert r["import"]["contests_left_out"] == 1
    assert r["import"]["verdict_mismatches"] == ["c2"]
    assert r["contests"] == 5 and r["reviews"] == {"valid": 15, "invalid": 1}
    assert r["verdicts"] == {"A": 4, "B": 1, "tie": 0}
    assert r["verdict_classes"] == {
        "both": 1,
        "rcp": 2,
        "qrel": 2,
        "neither": 0,
        "tie": 0,
    }
    assert (r["main"]["k"], r["main"]["n"], r["main"]["chance"]) == (2, 4, 0.5)
    assert (r["disagreements"]["k"], r["disagreements"]["n"]) == (1, 2)
    margins = {c[0]: (c[6], c[7]) for c in CONTESTS}
    y, s_rcp, s_q = [], [], []
    for cid, picks in PICKS.items():
        if cid == "c6":
            continue
        for p in picks:
            if p in "AB":
                y.append(p == "A")
                s_rcp.append(margins[cid][0])
                s_q.append(margins[cid][1])
    assert r["margin_auc"]["rcp"] == pytest.approx(roc_auc_score(y, s_rcp))
    assert r["margin_auc"]["qrel"] == pytest.approx(roc_auc_score(y, s_q))
    assert r["label_auc"]["rcp"] is None and r["ece_gain_useful"] is None
    assert r["within_one_grade"] == pytest.approx(within_one_share([[3, 2, 0], [1, 1]]))
    slices = r["inference"]["slices"]
    assert slices["all"]["test"]["expected"] == pytest.approx(0.5)
    assert slices["cell:discordant_marginal"]["n"] == 3  # c2, c3, c4


def test_reference_csv_and_parquet_agree_and_errors_are_readable(tmp_path):
    write_reference(tmp_path / "csv", _tables(), fmt="csv")
    write_reference(tmp_path / "pq", _tables(), fmt="parquet")
    a = reference_report(folder=tmp_path / "csv")
    b = reference_report(folder=tmp_path / "pq")
    a.pop("import"), b.pop("import")
    assert a == b
    broken = _tables()
    for row in broken["contests"]:
        del row["d_ndcg_shown"]
    write_reference(tmp_path / "bad", broken)
    with pytest.raises(ApplicationError, match="lacks columns: d_ndcg_shown"):
        reference_report(folder=tmp_path / "bad")
    with pytest.raises(ApplicationError, match="missing table contests"):
        reference_report(folder=tmp_path / "empty")


def _close(a, b, path=""):
    """Nested equality with float tolerance (cluster labels differ in the two
    paths, so sums may be taken in another order)."""
    if isinstance(a, dict):
        assert set(a) == set(b), path
        for k in a:
            _close(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _close(x, y, f"{path}[{i}]")
    elif isinstance(a, float) and isinstance(b, float):
        assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12), (path, a, b)
    else:
        assert a == b, (path, a, b)


@pytest.mark.django_db
@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_our_release_reimported_reproduces_the_report(simulated_study, tmp_path, fmt):
    study, _ = simulated_study
    tables = study_tables(study=study, pseudonyms=study_pseudonyms(study=study))
    tables = tables_complete(tables, k=study.depth)
    write_reference(tmp_path, reference_tables_from_release(tables), fmt=fmt)
    ref = read_reference(tmp_path)
    assert ref.left_out == 0 and len(ref.contests) == 30
    again = reference_report(folder=tmp_path)
    db, _ = study_report_build(study=study)
    assert again["import"]["verdict_mismatches"] == []
    for key in (
        "contests",
        "reviews",
        "annotators",
        "verdicts",
        "verdict_classes",
        "main",
        "disagreements",
        "disagreements_by_margin",
        "main_by_design_cell",
        "hit_rates",
        "margin_auc",
        "loo_range",
        "icc1k",
        "krippendorff_alpha",
        "pick_agreement",
        "within_one_grade",
    ):
        _close(again[key], db[key], key)
    for key in ("slices", "hit_rates", "verdict_rules", "chance", "main_test"):
        _close(again["inference"][key], db["inference"][key], key)
    _close(
        again["inference"]["jackknife"]["margin_auc"],
        db["inference"]["jackknife"]["margin_auc"],
    )
    out = io.StringIO()
    call_command("study_report", reference=str(tmp_path), json=True, stdout=out)
    assert json.loads(out.getvalue())["main"] == json.loads(json.dumps(again["main"]))
    assert np.isfinite(again["icc1k"])
