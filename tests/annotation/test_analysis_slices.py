"""The report's inference section on whole simulated studies: slices recomputed by
hand from the per-contest rows, Holm against statsmodels, the verdict rule setting
and both leave-one-annotator-out readings (issue 14)."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.proportion import proportion_confint

from annotation.analysis.agreement import clustered_rate
from annotation.analysis.report import StudyConfig, study_report
from annotation.analysis.rules import verdict_by_rule
from annotation.analysis.verdicts import verdict_class
from tests.annotation.test_analysis_report import simulate

SYSTEMS = {"d1": ("bm25", "dense", "splade"), "d2": ("bm25-2", "colbert")}


def _study(seed: int = 7):
    """simulate()'s study with datasets and system pairs attached: even queries are
    dataset d1 (three systems), odd ones d2."""
    contests, annotations = simulate(seed, truth="rcp", n_queries=30)
    rng = np.random.default_rng(seed)
    out = []
    for c in contests:
        ds = "d1" if int(c.query_id[1:]) % 2 == 0 else "d2"
        a, b = rng.choice(SYSTEMS[ds], 2, replace=False)
        out.append(replace(c, dataset=ds, system_a=str(a), system_b=str(b)))
    return out, annotations


@pytest.fixture(scope="module")
def focused():
    contests, annotations = _study()
    cfg = StudyConfig(focus_system="dense")
    return study_report(contests, annotations, config=cfg), contests, annotations


def test_all_slice_repeats_the_headline_and_adds_intervals(focused):
    r, _, _ = focused
    json.dumps(r, allow_nan=False)
    inf = r["inference"]
    main = inf["slices"]["all"]
    assert (main["rate"], main["k"], main["n"]) == (
        r["main"]["rate"],
        r["main"]["k"],
        r["main"]["n"],
    )
    assert main["ci_query"] == r["main"]["ci"]
    assert main["chance_all"] == r["main"]["chance"]
    lo, hi = proportion_confint(main["k"], main["n"], method="wilson")
    assert main["wilson"] == pytest.approx([lo, hi], abs=2e-4)  # 1.96 vs 1.95996
    assert main["ci_twoway"][0] <= main["rate"] <= main["ci_twoway"][1]
    assert inf["main_test"]["design_exact"] == main["test"]
    # RCP tracks the truth: the exact test rejects chance.
    assert main["test"]["p_greater"] < 0.01
    decided = [x for x in r["per_contest"] if x["verdict"] in ("A", "B")]
    from annotation.analysis.agreement import chance_rate

    assert inf["chance"]["decided_contests"] == pytest.approx(
        chance_rate(
            [x["rcp_winner"] for x in decided], [x["qrel_winner"] for x in decided]
        )
    )


def test_focus_system_slices_recomputed_from_rows(focused):
    """Contests of 'dense', where RCP favours it and qrels its opponent, and its win
    rate, recomputed from per-contest rows."""
    r, _, _ = focused
    rows = r["per_contest"]
    s = r["inference"]["slices"]
    mine = [x for x in rows if "dense" in (x["system_a"], x["system_b"])]

    def side(x):
        return "A" if x["system_a"] == "dense" else "B"

    def other(x):
        return "B" if side(x) == "A" else "A"

    fav = [
        x for x in mine if x["rcp_winner"] == side(x) and x["qrel_winner"] == other(x)
    ]
    counted = [x for x in fav if x["class"] in ("rcp", "qrel")]
    got = s["system:dense/rcp_favours_it_qrels_its_opponent"]
    assert got["contests"] == len(fav) > 0
    assert got["n"] == len(counted)
    assert got["k"] == sum(x["class"] == "rcp" for x in counted)
    assert got["chance_all"] == 0.5
    decided = [x for x in mine if x["verdict"] in ("A", "B")]
    win = s["system:dense/win_rate"]
    assert win["n"] == len(decided)
    assert win["k"] == sum(x["verdict"] == side(x) for x in decided)
    assert s["system:dense"]["contests"] == len(mine)
    # 'dense' is a d1 system: its per-dataset slices equal the whole-study ones.
    assert s["dataset:d1/system:dense/win_rate"]["k"] == win["k"]
    assert s["dataset:d2/system:dense"]["contests"] == 0


def test_every_slice_per_dataset_and_holm_over_the_family(focused):
    r, _, _ = focused
    s = r["inference"]["slices"]
    rows = r["per_contest"]
    for ds in ("d1", "d2"):
        sub = [x for x in rows if x["dataset"] == ds]
        got = s[f"dataset:{ds}/all"]
        hits = [x["class"] == "rcp" for x in sub if x["class"] in ("rcp", "qrel")]
        qs = [x["query_id"] for x in sub if x["class"] in ("rcp", "qrel")]
        assert (got["k"], got["n"]) == (sum(hits), len(hits))
        assert got["ci_query"] == pytest.approx(list(clustered_rate(hits, qs).ci))
        for name in ("disagreements", "cell:even", "cell:odd"):
            assert f"dataset:{ds}/{name}" in s
    names = [n for n in s if s[n]["p"] is not None]
    assert r["inference"]["multiplicity"]["family"] == len(names)
    adjusted = multipletests([s[n]["p"] for n in names], method="holm")[1]
    assert [s[n]["p_holm"] for n in names] == pytest.approx(adjusted.tolist())


def test_verdict_rule_setting_and_both_loo_readings(focused):
    """Plurality as the study's rule changes verdicts exactly as rules.py says; the
    leave-one-annotator-out ranges match a hand loop in both readings."""
    r, contests, annotations = focused
    plural = study_report(
        contests, annotations, config=StudyConfig(verdict_rule="plurality")
    )
    assert plural["inference"]["verdict_rule"] == "plurality"
    for a, b in zip(r["per_contest"], plural["per_contest"], strict=True):
        picks = [p for p, n in a["picks"].items() for _ in range(n)]
        assert b["verdict"] == verdict_by_rule(picks, "plurality")
    assert r["inference"]["verdict_rules"]["plurality"]["main"] == pytest.approx(
        plural["main"]["rate"]
    )
    # Hand loop: rebuild each contest's panel from annotations (all valid here).
    rows = r["per_contest"]
    by_id = {x["contest_id"]: x for x in rows}
    from annotation.analysis.picks import annotator_pick

    panel: dict[str, list[tuple[str, str]]] = {x["contest_id"]: [] for x in rows}
    cmap = {c.contest_id: c for c in contests}
    for a in annotations:
        c = cmap[a.contest_id]
        p = annotator_pick(c.list_a, c.list_b, a.grades, within_order=a.within_order)
        panel[a.contest_id].append((a.annotator, p.choice))

    def main(ids, verdicts):
        cl = [
            verdict_class(v, by_id[i]["rcp_winner"], by_id[i]["qrel_winner"])
            for i, v in zip(ids, verdicts, strict=True)
        ]
        n = sum(c in ("rcp", "qrel") for c in cl)
        return sum(c == "rcp" for c in cl) / n

    people = sorted({a.annotator for a in annotations})
    ids = list(panel)
    rec = [
        main(ids, [verdict_by_rule([p for a, p in panel[i] if a != x]) for i in ids])
        for x in people
    ]
    drop = []
    for x in people:
        keep = [i for i in ids if all(a != x for a, _ in panel[i])]
        drop.append(main(keep, [by_id[i]["verdict"] for i in keep]))
    got = r["inference"]["verdict_rules"]["majority"]
    assert got["loo_recompute"] == pytest.approx([min(rec), max(rec)])
    assert got["loo_drop_contests"] == pytest.approx([min(drop), max(drop)])
    assert got["loo_recompute"] == pytest.approx(r["loo_range"])


def test_margin_auc_jackknife_and_paired_test_by_hand(focused):
    """Delete-one-query jackknife of both margin AUCs and their difference,
    recomputed with sklearn over the individual picks."""
    r, _, _ = focused
    rows = r["per_contest"]
    q, y, mr, mq = [], [], [], []
    for x in rows:
        for p, n in x["picks"].items():
            if p == "tie":
                continue
            q += [x["query_id"]] * n
            y += [p == "A"] * n
            mr += [x["rcp_margin"]] * n
            mq += [x["qrel_margin"]] * n
    q, y, mr, mq = map(np.asarray, (q, y, mr, mq))
    keys = np.unique(q)
    g = len(keys)

    def jk(fn):
        t = np.array([fn(q != k) for k in keys])
        return fn(np.ones(len(q), bool)), np.sqrt(
            (g - 1) / g * ((t - t.mean()) ** 2).sum()
        )

    def d(m):
        return roc_auc_score(y[m], mr[m]) - roc_auc_score(y[m], mq[m])

    est, se = jk(lambda m: roc_auc_score(y[m], mr[m]))
    got = r["inference"]["jackknife"]
    assert got["margin_auc"]["rcp"]["estimate"] == pytest.approx(r["margin_auc"]["rcp"])
    assert got["margin_auc"]["rcp"]["se"] == pytest.approx(se)
    dest, dse = jk(d)
    paired = got["margin_auc_paired"]
    assert paired["difference"] == pytest.approx(dest)
    assert paired["se"] == pytest.approx(dse)
    assert paired["z"] == pytest.approx(dest / dse)
    for key in ("label_auc", "spearman_query"):
        for side, value in got[key].items():
            assert value["estimate"] == pytest.approx(r[key][side])
            assert value["ci"][0] <= value["estimate"] <= value["ci"][1]
    assert got["ece_gain_useful"]["estimate"] == pytest.approx(r["ece_gain_useful"])
