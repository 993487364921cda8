"""calibrate: windows in the database -> fit -> leaderboard, on a simulated suite with
known truth and on the real NanoBEIR rubric fixture (rcp_facts 10.3); the Celery task
is safe to deliver twice; bad inputs are refused and write nothing."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from django.core.management import CommandError, call_command
from scipy.stats import kendalltau, spearmanr

from benchmarks.models import Dataset, Document, Query
from calibration import tasks
from calibration.models import (
    CalibrationFit,
    DocumentAbility,
    FitMode,
    FitStatus,
    QueryCalibration,
)
from calibration.selectors import leaderboard_compute
from calibration.services import calibration_fit, calibration_fit_request
from judging.models import JudgmentWindow, Stage, WindowStatus
from rcp.gain import rcp_gain
from rcp.ndcg import rcp_ndcg
from rcp_platform.exceptions import ApplicationError
from tests.calibration.factories import (
    SYSTEM_NOISE,
    TRUE_BETA,
    TRUE_GAMMA,
    JudgeFactory,
    JudgmentWindowFactory,
    simulated_suite,
)
from tests.conftest import REFERENCE_DATA

pytestmark = pytest.mark.django_db

ANCHOR_GAMMA = [
    1.6495678696710352,
    1.289852639837022,
    0.723537070788223,
    0.9731263134922336,
    0.3639161062114862,
]
ANCHOR_BETA = [
    -4.7186716111726446,
    -4.504898381938539,
    -0.6181378437315566,
    1.9196043739084772,
    7.922103462934263,
]


def _abilities(fit: CalibrationFit) -> dict[tuple[str, str], DocumentAbility]:
    return {
        (a.query.external_id, a.document.external_id): a
        for a in DocumentAbility.objects.filter(fit=fit).select_related(
            "query", "document"
        )
    }


def test_simulated_suite_calibrate_then_leaderboard_ranks_systems_by_truth():
    """Tournament fit from DB windows: per-document theta = tau*theta_BT + alpha,
    calibrated abilities rank the pooled top-10 of every query by truth far better
    than raw BT, and the RCP leaderboard orders systems as their true-gain nDCG."""
    suite = simulated_suite(name="sim", seed=11)
    out, err = io.StringIO(), io.StringIO()
    call_command("calibrate", "--dataset", "sim", stdout=out, stderr=err)
    assert "BT fits: 6/6" in err.getvalue() and "2PL fit: 1/1" in err.getvalue()
    fit = CalibrationFit.objects.get()
    assert fit.mode == FitMode.TOURNAMENT and fit.status == FitStatus.DONE
    assert f"Fit {fit.pk} done (tournament" in out.getvalue()
    assert fit.converged and fit.diagnostics["optimizer"]["converged"]
    assert len(fit.fingerprint) == 16 and fit.family == "sim-judge"
    gamma, beta = np.array(fit.items["gamma"]), np.array(fit.items["beta"])
    assert gamma.sum() == pytest.approx(5.0) and beta.mean() == pytest.approx(
        0.0, abs=1e-9
    )
    assert np.all(np.diff(beta) > 0)  # C1 easiest ... C5 hardest, as simulated
    assert np.abs(beta - (TRUE_BETA - TRUE_BETA.mean()) * 1.0).max() < 1.0

    rows = _abilities(fit)
    assert len(rows) == 180
    taus = {
        r.query.external_id: (r.tau, r.alpha)
        for r in QueryCalibration.objects.filter(fit=fit).select_related("query")
    }
    for (q, _d), a in rows.items():
        tau, alpha = taus[q]
        assert a.theta == pytest.approx(tau * a.theta_bt + alpha, abs=1e-9)
        assert a.gain == pytest.approx(float(rcp_gain(a.theta, gamma, beta)), abs=1e-12)
        assert a.placements == 4 and 0 <= a.count_gain <= 1
    # tau undoes the judge's decisiveness: larger decisiveness -> smaller tau.
    order = [f"q{j}" for j in range(6)]
    rho = spearmanr([taus[q][0] for q in order], suite.decisiveness).statistic
    assert rho < -0.8

    top = [
        (q, d)
        for q, docs in suite.truth.items()
        for d in sorted(docs, key=docs.get, reverse=True)[:10]
    ]
    truth = [suite.truth[q][d] for q, d in top]
    calibrated = spearmanr([rows[k].theta for k in top], truth).statistic
    raw = spearmanr([rows[k].theta_bt for k in top], truth).statistic
    assert calibrated > 0.85 and calibrated - raw > 0.3

    board = leaderboard_compute(datasets=[suite.dataset], k=10)
    true_gains = {
        q: {d: float(rcp_gain(t, TRUE_GAMMA, TRUE_BETA)) for d, t in docs.items()}
        for q, docs in suite.truth.items()
    }
    runs = {
        s: {
            q: dict(
                suite.dataset.systems.get(name=s)
                .rankings.filter(query__external_id=q)
                .values_list("document__external_id", "score")
            )
            for q in suite.truth
        }
        for s in SYSTEM_NOISE
    }
    true_means = {
        s: np.mean(list(rcp_ndcg(runs[s], true_gains, k=10).values())) for s in runs
    }
    expected = sorted(true_means, key=true_means.get, reverse=True)
    assert expected == ["oracle", "strong", "medium", "weak"]
    got = [s["system"] for s in board["systems"]]
    assert got == expected
    assert kendalltau(
        [s["rcp_ndcg"] for s in board["systems"]],
        [true_means[s] for s in got],
    ).statistic == pytest.approx(1.0)
    oracle_vs_weak = next(
        p
        for p in board["pairs"]
        if {p["a"], p["b"]} == {"oracle", "weak"} and p["metric"] == "rcp_ndcg"
    )
    assert oracle_vs_weak["separated"] and oracle_vs_weak["p"] < 0.01
    assert board["systems"][0]["count_ndcg"] > board["systems"][-1]["count_ndcg"]
    rel = fit.diagnostics["reliability"]
    assert 0 <= rel["ece"] < 0.1 and 0 < rel["brier"] < 0.25
    assert (
        len(rel["bins"]) == 10 and sum(b["count"] for b in rel["bins"]) == 180 * 4 * 5
    )
    corr = fit.diagnostics["criterion_correlation"]
    assert corr["conditional"] < corr["raw"]
    assert fit.diagnostics["tau"]["ratio"] > 1.5


def test_suite_of_two_datasets_shares_items_and_averages_dataset_means():
    """Two datasets calibrated together = one fit with shared items; the suite mean
    is the mean of the per-dataset means."""
    judge = JudgeFactory(name="shared")
    a = simulated_suite(name="suite-a", seed=1, judge=judge, n_queries=4)
    b = simulated_suite(name="suite-b", seed=2, judge=judge, n_queries=3)
    out = io.StringIO()
    call_command(
        "calibrate",
        "--dataset",
        "suite-a",
        "--dataset",
        "suite-b",
        stdout=out,
        stderr=io.StringIO(),
    )
    fit = CalibrationFit.objects.get()
    assert sorted(fit.datasets.values_list("name", flat=True)) == ["suite-a", "suite-b"]
    assert fit.diagnostics["coverage"]["queries"] == 7
    board = leaderboard_compute(datasets=[a.dataset, b.dataset], k=10)
    for row in board["systems"]:
        per = row["datasets"]
        assert row["rcp_ndcg"] == pytest.approx(
            (per["suite-a"]["rcp_ndcg"] + per["suite-b"]["rcp_ndcg"]) / 2
        )
        assert row["n_queries"]["rcp_ndcg"] == 7
    one = leaderboard_compute(datasets=[a.dataset], k=10)
    assert {r["system"]: r["rcp_ndcg"] for r in one["systems"]} == pytest.approx(
        {r["system"]: r["datasets"]["suite-a"]["rcp_ndcg"] for r in board["systems"]}
    )


def _load_anchor() -> tuple[int, dict]:
    """The NanoBEIR rubric fixture as one dataset per NanoBEIR subset (three) of done windows."""
    data = json.loads((REFERENCE_DATA / "nanobeir_rubric_anchor.json").read_text())
    judge = JudgeFactory(name="qwen3.5-397b")
    windows = []
    expected_count: dict[tuple[str, str], list[int]] = {}
    for key, body in data["queries"].items():
        subset, qid = key.split("||")
        ds, _ = Dataset.objects.get_or_create(
            name=subset, defaults={"protocol": "nanobeir"}
        )
        query = Query.objects.create(dataset=ds, external_id=qid, text=key)
        doc_ids = {doc for w in body["windows"] for doc, *_ in w}
        existing = set(
            Document.objects.filter(dataset=ds, external_id__in=doc_ids).values_list(
                "external_id", flat=True
            )
        )
        Document.objects.bulk_create(
            Document(dataset=ds, external_id=d) for d in sorted(doc_ids - existing)
        )
        for seq, window in enumerate(body["windows"]):
            windows.append(
                JudgmentWindow(
                    family=judge.name,
                    judge=judge,
                    query=query,
                    stage=Stage.RUBRIC,
                    phase="random",
                    seq=seq,
                    doc_ids=[doc for doc, *_ in window],
                    answers=[v for _doc, *v in window],
                    status=WindowStatus.DONE,
                    valid=True,
                )
            )
            for doc, *v in window:
                c = expected_count.setdefault((qid, doc), [0, 0])
                c[0] += sum(v)
                c[1] += 1
    JudgmentWindow.objects.bulk_create(windows)
    return len(windows), expected_count


def test_nanobeir_rubric_fixture_reproduces_reference_items():
    """rcp_facts 10.3 through the database: 120 windows of six NanoBEIR queries,
    auto mode -> rubric-only on 747 documents / 1,200 placements, gamma and beta
    within 1e-3, Count gains = passes / (5 * placements)."""
    n_windows, expected_count = _load_anchor()
    assert n_windows == 120
    names = list(Dataset.objects.order_by("name").values_list("name", flat=True))
    args = [x for n in names for x in ("--dataset", n)]
    call_command("calibrate", *args, stdout=io.StringIO(), stderr=io.StringIO())
    fit = CalibrationFit.objects.get()
    assert fit.mode == FitMode.RUBRIC_ONLY and fit.datasets.count() == 3
    assert fit.diagnostics["coverage"]["queries"] == 6
    np.testing.assert_allclose(fit.items["gamma"], ANCHOR_GAMMA, atol=1e-3)
    np.testing.assert_allclose(fit.items["beta"], ANCHOR_BETA, atol=1e-3)
    cov = fit.diagnostics["coverage"]
    assert (cov["documents"], cov["placements"]) == (747, 1200)
    assert cov["uncalibrated_documents"] == 0
    opt = fit.diagnostics["optimizer"]
    assert (opt["prior_mean"], opt["prior_sd"]) == pytest.approx(
        (-8.896, 5.930), abs=1e-3
    )
    rows = DocumentAbility.objects.filter(fit=fit).values_list(
        "query__external_id",
        "document__external_id",
        "count_gain",
        "placements",
        "theta_bt",
        "gain",
    )
    assert len(rows) == 747
    for q, d, cg, n, theta_bt, gain in rows:
        passes, placements = expected_count[q, d]
        assert n == placements and cg == pytest.approx(passes / (5 * placements))
        assert theta_bt is None and 0 < gain < 1
    assert set(
        QueryCalibration.objects.filter(fit=fit).values_list("tau", flat=True)
    ) == {None}


def test_celery_task_is_safe_to_run_twice(
    django_capture_on_commit_callbacks, monkeypatch
):
    """The request queues the task on commit; a second delivery is a no-op and rows
    are written once."""
    suite = simulated_suite(name="twice", n_queries=3)
    queued: list[int] = []
    monkeypatch.setattr(tasks.calibration_fit_run, "delay", queued.append)
    with django_capture_on_commit_callbacks(execute=True):
        fit = calibration_fit_request(datasets=[suite.dataset], mode="rubric-only")
    assert queued == [fit.pk] and fit.status == FitStatus.PENDING
    assert tasks.calibration_fit_run(fit.pk) == FitStatus.DONE
    assert tasks.calibration_fit_run(fit.pk) == "skipped"
    fit.refresh_from_db()
    assert fit.mode == FitMode.RUBRIC_ONLY
    assert DocumentAbility.objects.filter(fit=fit).count() == 90


def test_failed_task_marks_the_fit_failed_and_writes_no_rows():
    suite = simulated_suite(name="no-rubric", n_queries=2, rubric=False)
    fit = calibration_fit_request(datasets=[suite.dataset])
    assert tasks.calibration_fit_run(fit.pk) == FitStatus.FAILED
    fit.refresh_from_db()
    assert "no valid rubric" in fit.error
    assert not DocumentAbility.objects.filter(fit=fit).exists()


def test_mixed_coverage_several_families_and_no_windows_are_refused():
    suite = simulated_suite(name="mixed", n_queries=3)
    q0 = suite.dataset.queries.get(external_id="q0")
    JudgmentWindow.objects.filter(query=q0, stage=Stage.TOURNAMENT).delete()
    with pytest.raises(CommandError, match=r"mixed coverage: 2 of 3 queries .*q0"):
        call_command("calibrate", "--dataset", "mixed", stderr=io.StringIO())
    # The attempt is recorded as a failed fit with the reason, and nothing else.
    failed = CalibrationFit.objects.get()
    assert failed.status == FitStatus.FAILED and "mixed coverage" in failed.error
    assert not DocumentAbility.objects.exists()
    failed.delete()
    JudgmentWindowFactory(
        judge=JudgeFactory(name="other"),
        query=q0,
        doc_ids=["q0-d00"],
        answers=[[1, 0, 0, 0, 0]],
    )
    with pytest.raises(ApplicationError, match="several judge families"):
        calibration_fit(datasets=[suite.dataset])
    fit = calibration_fit(datasets=[suite.dataset], family="other", mode="rubric-only")
    assert DocumentAbility.objects.filter(fit=fit).count() == 1
    empty = Dataset.objects.create(name="empty")
    with pytest.raises(
        ApplicationError, match="no completed judgment windows for empty"
    ):
        calibration_fit(datasets=[empty])
    with pytest.raises(CommandError, match="dataset 'nope' does not exist"):
        call_command("calibrate", "--dataset", "nope")


def test_invalid_windows_are_skipped_and_flagged_in_coverage():
    """Invalid windows contribute nothing; a query with > 5% invalid rubric windows
    is flagged; rubric-only documents without Stage A stay uncalibrated."""
    suite = simulated_suite(name="inv", n_queries=3, invalid_rubric_per_query=1)
    q1 = suite.dataset.queries.get(external_id="q1")
    extra = Document.objects.create(dataset=suite.dataset, external_id="q1-extra")
    JudgmentWindowFactory(
        judge=JudgeFactory(name="inv-judge"),
        query=q1,
        seq=999,
        doc_ids=[extra.external_id],
        answers=[[1, 1, 0, 0, 0]],
    )
    fit = calibration_fit(datasets=[suite.dataset])
    cov = fit.diagnostics["coverage"]
    assert cov["invalid_windows"] == {"tournament": 0, "rubric": 3}
    assert cov["invalid_share"]["rubric"] == pytest.approx(
        3 / 40
    )  # 36 + 1 valid, 3 invalid
    assert cov["flagged_queries"] == ["q0", "q1", "q2"]
    assert cov["uncalibrated_documents"] == 1
    assert fit.diagnostics["optimizer"]["skipped_rows"] == 1
    row = DocumentAbility.objects.get(fit=fit, document=extra)
    assert (row.theta, row.gain, row.count_gain) == (None, None, 0.4)
