"""A long fit never blocks other writers: it computes outside any transaction and
writes in one short transaction at the end. Runs on the suite's database (SQLite
in `make test`, PostgreSQL in CI's second pass)."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection

from benchmarks.models import Dataset
from benchmarks.services import dataset_import
from calibration.models import CalibrationFit, FitStatus
from calibration.services import calibration_fit
from judging.models import JudgmentWindow
from tests.calibration.factories import JudgmentWindowFactory, simulated_suite
from tests.conftest import DEMO_TINY


@pytest.mark.django_db(transaction=True)
def test_imports_and_judging_keep_writing_while_a_fit_runs():
    """While a fit is paused in its computation, a dataset import and a judging
    write each commit within seconds (before: the fit's transaction held the write
    lock for its whole run); then the fit finishes done."""
    suite = simulated_suite(name="long", n_queries=4, seed=6)
    reached, release = threading.Event(), threading.Event()
    outcome: dict = {}

    def progress(stage: str, done: int, total: int) -> None:
        if stage == "2PL fit" and done == 0:
            reached.set()
            release.wait(timeout=120)

    def run() -> None:
        try:
            outcome["fit"] = calibration_fit(
                datasets=[suite.dataset], progress=progress
            )
        except Exception as exc:  # reported below
            outcome["error"] = exc
        finally:
            connection.close()

    worker = threading.Thread(target=run)
    worker.start()
    try:
        assert reached.wait(timeout=60), outcome
        assert CalibrationFit.objects.get().status == FitStatus.RUNNING
        started = time.monotonic()
        imported = dataset_import(
            name="tiny-meanwhile",
            corpus=DEMO_TINY / "corpus.jsonl",
            queries=DEMO_TINY / "queries.jsonl",
            qrels=DEMO_TINY / "qrels.tsv",
            pools=DEMO_TINY / "pools.tsv",
        )
        JudgmentWindowFactory(
            query=imported.queries.first(),
            doc_ids=["q1-d0"],
            answers=[[1, 0, 0, 0, 0]],
        )
        elapsed = time.monotonic() - started
    finally:
        release.set()
        worker.join(timeout=120)
    assert "error" not in outcome, outcome.get("error")
    assert elapsed < 10, f"writers waited {elapsed:.1f} s behind the fit"
    assert Dataset.objects.filter(name="tiny-meanwhile").exists()
    assert JudgmentWindow.objects.filter(query__dataset=imported).count() == 1
    fit = outcome["fit"]
    assert fit.status == FitStatus.DONE and fit.converged
    # The fit read only its own dataset's windows.
    assert fit.diagnostics["coverage"]["queries"] == 4
