"""A simulated suite with known truth through the user's path: import files,
`import_dataset` / `import_run` / `import_judgments`, `calibrate`, `leaderboard`."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from django.core.management import call_command
from numpy.testing import assert_allclose
from scipy.stats import spearmanr

from benchmarks.synthetic import JUDGED_SYSTEMS, write_judged_suite
from calibration.models import CalibrationFit, DocumentAbility, FitStatus
from rcp.fit import Judgments, calibrate
from rcp.simulate import STRESS, recovery, simulate_suite, spec_with

pytestmark = pytest.mark.django_db


def test_commands_reproduce_the_pure_fit_and_rank_systems_by_truth(tmp_path):
    """The database path gives the same fit as ``rcp.fit.calibrate`` on the same
    windows (items and abilities to 1e-9), recovers the truth on normal queries,
    flags the degenerate ones, and the RCP leaderboard orders systems by their noise
    (oracle first) where qrel-nDCG, with sparse binary qrels, separates less."""
    suite = simulate_suite(spec_with(STRESS, n_queries=16, seed=21))
    paths = write_judged_suite(tmp_path, suite)
    quiet = {"stdout": io.StringIO(), "stderr": io.StringIO()}
    call_command(
        "import_dataset",
        "--name",
        "sim",
        "--corpus",
        str(paths["corpus"]),
        "--queries",
        str(paths["queries"]),
        "--qrels",
        str(paths["qrels"]),
        "--pools",
        str(paths["pools"]),
        **quiet,
    )
    for name, path in paths["runs"].items():
        call_command(
            "import_run", "--dataset", "sim", "--system", name, str(path), **quiet
        )
    call_command(
        "import_judgments", "--dataset", "sim", "--judge", "sim-judge",
        str(paths["judgments"]), **quiet,
    )  # fmt: skip
    call_command("calibrate", "--dataset", "sim", **quiet)
    fit = CalibrationFit.objects.get()
    assert fit.status == FitStatus.DONE and fit.converged

    t_size, t_doc, t_score = suite.valid_tournament()
    r_doc, r_answers = suite.valid_rubric()
    pure = calibrate(
        Judgments(
            n_queries=suite.n_queries,
            doc_query=suite.doc_query,
            t_size=t_size,
            t_doc=t_doc,
            t_score=np.round(t_score, 4),  # as written to the JSONL
            r_doc=r_doc,
            r_answers=r_answers,
        )
    )
    assert_allclose(fit.items["gamma"], pure.gamma, atol=1e-9)
    assert_allclose(fit.items["beta"], pure.beta, atol=1e-9)
    rows = DocumentAbility.objects.filter(fit=fit).values_list(
        "query__external_id", "document__external_id", "theta"
    )
    theta = np.full(suite.doc_query.size, np.nan)
    offsets = np.concatenate([[0], np.cumsum(np.bincount(suite.doc_query))[:-1]])
    for q, d, t in rows:
        j, i = int(q[1:]), int(d.split("-d")[1])
        theta[offsets[j] + i] = np.nan if t is None else t
    assert_allclose(theta, pure.theta, atol=1e-9, equal_nan=True)
    rec = recovery(suite, theta, pure.gamma, pure.beta)
    assert rec.pooled > 0.97

    flagged = set(
        fit.query_rows.filter(flagged=True).values_list("query__external_id", flat=True)
    )
    degenerate = {f"q{j}" for j in np.flatnonzero(np.isin(suite.kind, [2, 3]))}
    assert degenerate and degenerate <= flagged

    out = io.StringIO()
    call_command(
        "leaderboard", "--dataset", "sim", "--json", stdout=out, stderr=io.StringIO()
    )
    board = json.loads(out.getvalue())
    by_rcp = [s["system"] for s in board["systems"]]
    assert by_rcp[0] == "oracle" and by_rcp[-1] == "noise"
    noise = dict(JUDGED_SYSTEMS)
    rho = spearmanr(
        [s["rcp_ndcg"] for s in board["systems"]], [-noise[n] for n in by_rcp]
    )
    assert rho.statistic > 0.9
