"""The leaderboard's bulk path (database rows -> arrays -> one sort of every ranking)
gives the per-query values of the per-query dict API, with ties and uploaded runs."""

from __future__ import annotations

import math

import pytest

from benchmarks.models import Document, PoolEntry, Qrel, RankingEntry
from calibration.models import DocumentAbility
from calibration.selectors import leaderboard_compute
from calibration.services import calibration_fit
from rcp.ndcg import count_ndcg, qrel_ndcg, rcp_ndcg
from tests.calibration.factories import simulated_suite

pytestmark = pytest.mark.django_db

UPLOADED = {
    # Ties, an id the dataset lacks, a document of another query, a query it lacks.
    "q0": {"q0-r01": 1.0, "q0-r02": 1.0, "q0-s": 1.0, "q0-r00": 1.0, "q1-r00": 0.5},
    "q1": {"q1-r03": 0.0, "q1-r04": 0.0, "q1-r05": 2.0},
    "q9": {"x": 1.0},
}


def _dict_inputs(dataset, fit) -> dict:
    """The dataset read the way the per-query API takes it (external ids)."""
    gains: dict = {}
    counts: dict = {}
    for q, d, g, c in DocumentAbility.objects.filter(fit=fit).values_list(
        "query__external_id", "document__external_id", "gain", "count_gain"
    ):
        if g is not None:
            gains.setdefault(q, {})[d] = g
        if c is not None:
            counts.setdefault(q, {})[d] = c
    qrels: dict = {}
    for q, d, g in Qrel.objects.filter(query__dataset=dataset).values_list(
        "query__external_id", "document__external_id", "grade"
    ):
        qrels.setdefault(q, {})[d] = g
    pools: dict = {}
    for q, d in (
        PoolEntry.objects.filter(query__dataset=dataset)
        .order_by("query_id", "rank")
        .values_list("query__external_id", "document__external_id")
    ):
        pools.setdefault(q, []).append(d)
    runs: dict = {}
    for s, q, d, x in (
        RankingEntry.objects.filter(system__dataset=dataset)
        .order_by("system_id", "query_id", "rank")
        .values_list(
            "system__name", "query__external_id", "document__external_id", "score"
        )
    ):
        runs.setdefault(s, {}).setdefault(q, {})[d] = x
    return {
        "gains": gains,
        "counts": counts,
        "qrels": qrels,
        "pools": pools,
        "runs": runs,
    }


@pytest.mark.parametrize(
    "protocol", ["nanobeir", "bright", "vidore", "trecdl", "plain"]
)
def test_leaderboard_equals_the_per_query_api(protocol):
    """Per system, metric and query, leaderboard_compute equals rcp_ndcg /
    count_ndcg / qrel_ndcg on the same data, under each protocol's tie rule: scores
    are coarsened into ties, document ids run against pk order, one ranking is
    emptied, one system ranks a query partly, and an uploaded run names unknown and
    foreign documents."""
    suite = simulated_suite(name="ties", n_queries=4, n_docs=20, rounds=3)
    fit = calibration_fit(datasets=[suite.dataset])
    # Renamed so that id order runs against pk order (doc_id_desc breaks ties by id).
    docs = list(Document.objects.filter(dataset=suite.dataset))
    for d in docs:
        q, i = d.external_id.split("-d")
        d.external_id = f"{q}-r{19 - int(i):02d}"
    Document.objects.bulk_update(docs, ["external_id"])
    entries = list(RankingEntry.objects.filter(system__dataset=suite.dataset))
    for e in entries:
        e.score = float(round(e.score))
    RankingEntry.objects.bulk_update(entries, ["score"])
    RankingEntry.objects.filter(system__name="weak", query__external_id="q2").delete()
    RankingEntry.objects.filter(
        system__name="medium", query__external_id="q3", rank__gt=4
    ).delete()
    data = _dict_inputs(suite.dataset, fit)
    board = leaderboard_compute(
        datasets=[suite.dataset],
        k=5,
        protocol=protocol,
        extra_runs={"mine": UPLOADED},
        include_queries=True,
    )
    runs = {**data["runs"], "mine": UPLOADED}
    metrics = {
        "rcp_ndcg": lambda r: rcp_ndcg(
            r, data["gains"], k=5, protocol=protocol, pools=data["pools"]
        ),
        "count_ndcg": lambda r: count_ndcg(
            r, data["counts"], k=5, protocol=protocol, pools=data["pools"]
        ),
        "qrel_ndcg": lambda r: qrel_ndcg(
            r, data["qrels"], k=5, protocol=protocol, pools=data["pools"]
        ),
    }
    assert sorted(s["system"] for s in board["systems"]) == sorted(runs)
    for row in board["systems"]:
        for metric, fn in metrics.items():
            want = {
                q: v for q, v in fn(runs[row["system"]]).items() if not math.isnan(v)
            }
            got = row["per_query"][metric]
            assert got.keys() == want.keys()
            for q, v in want.items():
                assert got[q] == pytest.approx(v, abs=1e-12), (metric, q)
