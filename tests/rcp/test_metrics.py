"""Gains and nDCG: rcp_facts 10.4 numbers, golden fixtures, trec_eval and sklearn."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import pytrec_eval
from numpy.testing import assert_allclose
from sklearn.metrics import ndcg_score

from rcp.gain import count_gain, pass_probabilities, rcp_gain
from rcp.ndcg import (
    PROTOCOLS,
    Protocol,
    Rankings,
    count_ndcg,
    gain_ndcg,
    index_of,
    ndcg_dense,
    qrel_gain_array,
    qrel_ndcg,
    ranked_label_hits,
    rcp_ndcg,
    rows_array,
)
from rcp.stats import paired_t

TINY = Path(__file__).resolve().parents[1] / "data/reference/tiny"


@pytest.fixture(scope="module")
def tiny():
    released = json.loads((TINY / "released.json").read_text())
    rows = [json.loads(x) for x in (TINY / "rows.jsonl").read_text().splitlines() if x]
    systems = [
        json.loads(x) for x in (TINY / "systems.jsonl").read_text().splitlines() if x
    ]
    gamma, beta = released["items"]["gamma"], released["items"]["beta"]
    gains = {
        q: {d: float(rcp_gain(t, gamma, beta)) for d, t in th.items()}
        for q, th in released["thetas"].items()
    }
    runs = {
        name: {s["query_id"]: s["scores"] for s in systems if s["system"] == name}
        for name in ("bm25", "reranker")
    }
    return {
        "gains": gains,
        "qrels": {r["query_id"]: r["qrels"] for r in rows},
        "pools": {r["query_id"]: r["doc_ids"] for r in rows},
        "runs": runs,
    }


def test_tiny_gains(tiny):
    """g(theta~) of the released tiny items reproduces rcp_facts 10.4 to 1e-6."""
    expected = {
        "q1": [
            0.863536,
            0.812632,
            0.631388,
            0.564482,
            0.389073,
            0.212838,
            0.320829,
            0.441771,
        ],
        "q2": [
            0.834319,
            0.737146,
            0.678765,
            0.547251,
            0.337574,
            0.256831,
            0.406550,
            0.173118,
        ],
        "q3": [
            0.880836,
            0.823697,
            0.663284,
            0.615016,
            0.598391,
            0.272319,
            0.160931,
            0.354552,
        ],
    }
    for q, values in expected.items():
        got = [tiny["gains"][q][f"{q}-d{i}"] for i in range(8)]
        assert_allclose(got, values, atol=1e-6)


@pytest.mark.parametrize(
    ("system", "rcp", "qrel"),
    [
        ("bm25", [0.943953, 0.876292, 0.779113], [0.931330, 0.774759, 0.658992]),
        ("reranker", [0.977301, 0.982348, 1.0], [0.973012, 1.0, 1.0]),
    ],
)
def test_tiny_ndcg_at_5(tiny, system, rcp, qrel):
    """RCP-nDCG@5 and qrel-nDCG@5 per query (plain protocol) match rcp_facts 10.4."""
    run = tiny["runs"][system]
    got_rcp = rcp_ndcg(run, tiny["gains"], k=5, pools=tiny["pools"])
    got_qrel = qrel_ndcg(run, tiny["qrels"], k=5, pools=tiny["pools"])
    assert_allclose([got_rcp[q] for q in ("q1", "q2", "q3")], rcp, atol=1e-6)
    assert_allclose([got_qrel[q] for q in ("q1", "q2", "q3")], qrel, atol=1e-6)
    means = {"bm25": (0.866453, 0.788361), "reranker": (0.986550, 0.991004)}[system]
    assert np.mean(list(got_rcp.values())) == pytest.approx(means[0], abs=1e-6)
    assert np.mean(list(got_qrel.values())) == pytest.approx(means[1], abs=1e-6)


def test_tiny_paired_t(tiny):
    """Paired t, reranker minus bm25 over 3 queries: RCP and qrel rows of 10.4."""
    for metric, gains, expected in [
        (rcp_ndcg, tiny["gains"], (0.120097, 2.1999, 0.1588)),
        (qrel_ndcg, tiny["qrels"], (0.202643, 2.3254, 0.1456)),
    ]:
        a = metric(tiny["runs"]["bm25"], gains, k=5, pools=tiny["pools"])
        b = metric(tiny["runs"]["reranker"], gains, k=5, pools=tiny["pools"])
        res = paired_t(np.array(list(a.values())), np.array(list(b.values())))
        assert res.delta == pytest.approx(expected[0], abs=1e-6)
        assert res.t == pytest.approx(expected[1], abs=1e-4)
        assert res.p == pytest.approx(expected[2], abs=1e-4)
        assert not res.significant()


def test_core_ci_example_gain_and_ndcg():
    """docs/concepts/metric.md example: gains, pass probabilities and nDCG@10."""
    gamma, beta = [1.2, 1.0, 1.1, 0.9, 0.8], [-2.0, -0.5, 0.0, 0.8, 1.7]
    thetas = {"d1": 1.4, "d2": -0.3, "d3": 0.6}
    gains = {d: float(rcp_gain(t, gamma, beta)) for d, t in thetas.items()}
    assert_allclose(list(gains.values()), [0.775322, 0.490005, 0.653770], atol=1e-6)
    assert_allclose(
        pass_probabilities(1.4, gamma, beta),
        [0.983374, 0.869892, 0.823465, 0.631812, 0.440286],
        atol=1e-6,
    )
    run = {"q": {"d1": 0.9, "d2": 0.7, "d3": 0.2}}
    assert rcp_ndcg(run, {"q": gains}, k=10)["q"] == pytest.approx(0.985035, abs=1e-6)


def test_gain_invariant_to_item_convention_and_missing_is_zero():
    """Rescaling (gamma/s, s*beta + c, s*theta + c) leaves g unchanged; NaN -> 0."""
    gamma, beta = np.array([1.3, 0.7, 1.0]), np.array([-1.0, 0.2, 1.5])
    theta = np.linspace(-3, 3, 7)
    s, c = 2.5, -0.7
    assert_allclose(
        rcp_gain(theta, gamma, beta), rcp_gain(s * theta + c, gamma / s, s * beta + c)
    )
    assert np.all(np.diff(rcp_gain(theta, gamma, beta)) > 0)
    assert rcp_gain(np.nan, gamma, beta) == 0.0


def test_count_gain():
    """count_gain([3,3,2,1,0], placements=3) = 9/15 = 0.6; zero placements -> 0."""
    assert count_gain(np.array([3, 3, 2, 1, 0]), 3) == pytest.approx(0.6)
    assert_allclose(
        count_gain(np.array([[1, 0], [0, 0]]), np.array([2, 0])), [0.25, 0.0]
    )
    with pytest.raises(ValueError):
        count_gain(np.array([4, 0]), 3)


def test_protocol_presets_example():
    """protocols.md: nanobeir (doc id desc, d2 before d1) 0.773747, vidore 0.871944;
    the excluded q7 leaves both the ranking and the ideal."""
    run = {"x": {"q7": 0.95, "d1": 0.80, "d2": 0.80, "d3": 0.10}}
    gains = {"x": {"d1": 0.9, "d2": 0.2, "d3": 0.5}}
    kw = {"k": 10, "pools": {"x": ["d3", "q7", "d1", "d2"]}, "excluded": {"x": ["q7"]}}
    assert count_ndcg(run, gains, protocol="nanobeir", **kw)["x"] == pytest.approx(
        0.773747, abs=1e-6
    )
    assert rcp_ndcg(run, gains, protocol="vidore", **kw)["x"] == pytest.approx(
        0.871944, abs=1e-6
    )
    # trecdl keeps pool order on ties: d1 precedes d2 in the pool.
    trecdl = rcp_ndcg(run, gains, protocol="trecdl", **kw)["x"]
    ideal = 0.9 + 0.5 / math.log2(3) + 0.2 / 2
    assert trecdl == pytest.approx((0.9 + 0.2 / math.log2(3) + 0.5 / 2) / ideal)
    with pytest.raises(ValueError):
        rcp_ndcg(run, gains, protocol="nanobeir", k=10)


def test_qrel_golden_cases():
    """oracles.md 5: case A 0.633848 (exp gains 0.639055), case B ties 0.669672 under
    doc_id_desc and 0.809953 tie-averaged, case C float gains 0.763222."""
    qa = {"q": {"d1": 3, "d2": 2, "d3": 0, "d4": 1, "d5": 2, "d6": 0, "d7": 1}}
    ra = {
        "q": {"d3": 10, "d1": 9, "d8": 8, "d2": 7, "d4": 6, "d5": 5, "d6": 4, "d9": 3}
    }
    assert qrel_ndcg(ra, qa, k=10)["q"] == pytest.approx(0.633848, abs=1e-6)
    assert qrel_ndcg(ra, qa, k=10, exponential=True)["q"] == pytest.approx(
        0.639055, abs=1e-6
    )
    qb, rb = (
        {"q": {"dA": 2, "dB": 0, "dC": 1}},
        {"q": {"dA": 1.0, "dB": 1.0, "dC": 0.5}},
    )
    assert qrel_ndcg(rb, qb, k=10, protocol="bright")["q"] == pytest.approx(
        0.669672, abs=1e-6
    )
    assert qrel_ndcg(rb, qb, k=10)["q"] == pytest.approx(0.809953, abs=1e-6)
    qc = {"q": {"e1": 0.7, "e2": 0.3, "e3": 1.5, "e4": 0.0}}
    rc = {"q": {"e2": 3.0, "e3": 2.0, "e1": 1.0, "e4": 0.5}}
    assert qrel_ndcg(rc, qc, k=10)["q"] == pytest.approx(0.763222, abs=1e-6)


def test_qrel_edge_cases():
    """No positive grade -> NaN; a labelled query the system did not rank -> 0."""
    qrels = {"a": {"d1": 0, "d2": -1}, "b": {"d1": 2}}
    got = qrel_ndcg({"a": {"d1": 1.0}}, qrels, k=10)
    assert math.isnan(got["a"])
    assert got["b"] == 0.0


def _graded_run_with_ties(seed: int):
    rng = np.random.default_rng(seed)
    qrels, run = {}, {}
    for q in range(8):
        docs = [f"d{i}" for i in range(30)]
        qrels[f"q{q}"] = {
            d: int(g)
            for d, g in zip(docs, rng.integers(0, 4, 30), strict=True)
            if rng.random() < 0.7
        }
        # Scores on a coarse grid force many ties; a few judged docs stay unretrieved.
        retrieved = [d for d in docs if rng.random() < 0.85]
        run[f"q{q}"] = {d: float(rng.integers(0, 6)) / 2 for d in retrieved}
    return qrels, run


@pytest.mark.parametrize("k", [5, 10, 20])
def test_qrel_ndcg_equals_trec_eval_with_ties(k):
    """qrel-nDCG under doc_id_desc equals pytrec_eval ndcg_cut on a tied graded run."""
    qrels, run = _graded_run_with_ties(seed=k)
    oracle = pytrec_eval.RelevanceEvaluator(qrels, {f"ndcg_cut.{k}"}).evaluate(run)
    ours = qrel_ndcg(run, qrels, k=k, protocol="bright")
    for q in qrels:
        assert ours[q] == pytest.approx(oracle[q][f"ndcg_cut_{k}"], abs=1e-12)
    # The tie rule matters on this run: averaging gives different values.
    averaged = qrel_ndcg(run, qrels, k=k, protocol="plain")
    assert max(abs(averaged[q] - ours[q]) for q in qrels) > 1e-3


def test_rcp_ndcg_group_mean_equals_sklearn():
    """RCP-nDCG with tie-averaged gains equals sklearn ndcg_score(ignore_ties=False)."""
    rng = np.random.default_rng(11)
    gamma, beta = np.array([1.2, 1.0, 1.1, 0.9, 0.8]), np.array([-2, -0.5, 0, 0.8, 1.7])
    n_q, n_d = 6, 25
    theta = rng.normal(0, 1.5, (n_q, n_d))
    scores = np.round(rng.normal(0, 1, (n_q, n_d)), 0)  # coarse -> ties
    gains = rcp_gain(theta, gamma, beta)
    docs = [f"d{i}" for i in range(n_d)]
    runs = {
        f"q{j}": dict(zip(docs, scores[j].tolist(), strict=True)) for j in range(n_q)
    }
    gmap = {
        f"q{j}": dict(zip(docs, gains[j].tolist(), strict=True)) for j in range(n_q)
    }
    for k in (5, 10):
        ours = rcp_ndcg(runs, gmap, k=k)
        for j in range(n_q):
            ref = ndcg_score(
                gains[j : j + 1], scores[j : j + 1], k=k, ignore_ties=False
            )
            assert ours[f"q{j}"] == pytest.approx(ref, abs=1e-12)
        dense = ndcg_dense(scores, gains, gains, k)
        assert_allclose(dense, [ours[f"q{j}"] for j in range(n_q)], atol=1e-12)


def test_gain_ndcg_ideal_covers_unretrieved_pool_docs():
    """The RCP ideal is the whole judged pool, so a run that misses the best pool
    document cannot reach 1."""
    gains = {"q": {"a": 0.9, "b": 0.5, "c": 0.1}}
    run = {"q": {"b": 2.0, "c": 1.0}}
    got = gain_ndcg(run, gains, k=3, pools={"q": ["a", "b", "c"]})["q"]
    assert got == pytest.approx(
        (0.5 + 0.1 / math.log2(3)) / (0.9 + 0.5 / math.log2(3) + 0.05)
    )


def _random_rows(rng: np.random.Generator):
    """A random evaluation as dicts (string ids) and as flat rows (integer keys in
    id order): pools missing for some queries, unlabelled and unpooled documents,
    negative grades, empty rankings and many exact score ties."""
    n_q, n_s, n_d = (
        int(rng.integers(1, 7)),
        int(rng.integers(1, 4)),
        int(rng.integers(2, 25)),
    )
    names = [f"d{i:03d}" for i in range(n_d)]
    pools, labels, runs = {}, {}, {}
    rows = {"pool": [], "label": [], "run": []}
    for q in range(n_q):
        if rng.random() < 0.8:
            docs = rng.choice(n_d, int(rng.integers(1, n_d + 1)), replace=False)
            pools[f"q{q}"] = [names[d] for d in docs]
            rows["pool"] += [(q, d) for d in docs]
        if rng.random() < 0.85:
            docs = rng.choice(n_d, int(rng.integers(1, n_d + 1)), replace=False)
            grades = rng.integers(-1, 4, docs.size) / (1 if rng.random() < 0.5 else 2)
            labels[f"q{q}"] = dict(
                zip([names[d] for d in docs], grades.tolist(), strict=True)
            )
            rows["label"] += [(q, d, g) for d, g in zip(docs, grades, strict=True)]
    for s in range(n_s):
        runs[s] = {}
        for q in range(n_q):
            docs = rng.choice(n_d, int(rng.integers(0, n_d + 1)), replace=False)
            scores = np.round(rng.normal(size=docs.size), int(rng.integers(0, 2)))
            runs[s][f"q{q}"] = dict(
                zip([names[d] for d in docs], scores.tolist(), strict=True)
            )
            rows["run"] += [(s, q, d, x) for d, x in zip(docs, scores, strict=True)]
    return (
        n_q,
        n_s,
        pools,
        labels,
        runs,
        {
            k: np.array(v, dtype=float).reshape(len(v), width)
            for (k, v), width in zip(rows.items(), (2, 3, 4), strict=True)
        },
    )


@pytest.mark.parametrize("seed", range(6))
def test_rankings_from_rows_equal_the_dict_path(seed):
    """Rankings (flat rows, one sort, one call per label set) give gain_ndcg's and
    qrel_ndcg's per-query values under every protocol and tie rule."""
    rng = np.random.default_rng(seed)
    protocols = [*PROTOCOLS.values(), Protocol("io", "input_order", False, None)]
    for _ in range(8):
        n_q, n_s, pools, labels, runs, rows = _random_rows(rng)
        lq, ld, lg = rows["label"].T
        for proto in protocols:
            needs_pool = proto.pool_only or proto.ties == "input_order"
            if needs_pool and any(q not in pools for q in labels):
                continue
            k = int(rng.integers(1, 12))
            pooled = bool(pools)
            rankings = Rankings.from_rows(
                *rows["run"].T,
                n_systems=n_s,
                n_queries=n_q,
                protocol=proto,
                pool_query=rows["pool"][:, 0] if pooled else None,
                pool_doc=rows["pool"][:, 1] if pooled else None,
            )
            table = rankings.ndcg(lq, ld, lg, k=k)
            exponential = bool(rng.random() < 0.5)
            qg = qrel_gain_array(
                lg, exponential=exponential, decimals=proto.qrel_decimals
            )
            pos = qg > 0
            qtable = rankings.ndcg(
                lq, ld, qg, k=k, ideal_query=lq[pos], ideal_gain=qg[pos]
            )
            for s in range(n_s):
                kw = {"k": k, "protocol": proto, "pools": pools if pooled else None}
                ref = gain_ndcg(runs[s], labels, **kw)
                refq = qrel_ndcg(runs[s], labels, exponential=exponential, **kw)
                for q in labels:
                    j = int(q[1:])
                    assert table[s, j] == pytest.approx(ref[q], abs=1e-12)
                    if not math.isnan(refq[q]):
                        assert qtable[s, j] == pytest.approx(refq[q], abs=1e-12)


def test_rows_helpers():
    """rows_array keeps ids exact; index_of maps pks to positions (table or binary
    search); ranked_label_hits flags systems ranking no labelled document."""
    rows = [(2**52 + 1, 3, 0.5), (7, 9, -1.25)]
    assert_allclose(rows_array(rows, 3), np.array(rows, dtype=float))
    assert rows_array(rows, 3)[0, 0] == 2**52 + 1
    pks = np.array([5, 9, 12])
    assert index_of(pks, np.array([12, 5, 9, 9])).tolist() == [2, 0, 1, 1]
    assert index_of(pks * 10**6, np.array([12, 5]) * 10**6).tolist() == [2, 0]
    system = np.repeat([0, 1, 2], 40)
    query = np.tile(np.arange(40) % 4, 3)
    doc = np.arange(120)
    doc[-1] = 7  # system 2's last row ranks labelled doc 7 for query 3
    hits = ranked_label_hits(system, query, doc, np.array([3, 3]), np.array([7, 3]), 4)
    assert hits.tolist() == [True, False, True, False]
