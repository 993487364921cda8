"""Factories for judging windows and a simulated suite with known truth.

``simulated_suite`` writes a dataset whose documents have a true ability, judge
windows (Stage A scores and Stage B verdicts) generated from that truth with
per-query judge decisiveness differing ~3x, graded qrels and systems of decreasing
quality. Rows go in with ``bulk_create`` so a suite costs a few queries.
"""

from __future__ import annotations

from dataclasses import dataclass

import factory
import numpy as np
from scipy.special import expit

from benchmarks.models import (
    Dataset,
    Document,
    PoolEntry,
    Qrel,
    Query,
    RankingEntry,
    System,
)
from judging.models import Judge, JudgmentWindow, Phase, Stage, WindowStatus

TRUE_GAMMA = np.array([1.4, 1.2, 0.9, 0.8, 0.7])
TRUE_BETA = np.array([-2.0, -1.0, 0.0, 1.0, 2.0])
SYSTEM_NOISE = {"oracle": 0.15, "strong": 0.7, "medium": 1.6, "weak": 5.0}


class JudgeFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Judge
        django_get_or_create = ("name",)

    name = factory.Sequence(lambda n: f"judge-{n}")
    offline = True


class JudgmentWindowFactory(factory.django.DjangoModelFactory):
    """A completed valid window; pass ``scores`` (Stage A) or ``answers`` (Stage B)."""

    class Meta:
        model = JudgmentWindow

    judge = factory.SubFactory(JudgeFactory)
    family = factory.SelfAttribute("judge.name")
    query = None
    stage = Stage.RUBRIC
    phase = Phase.RANDOM
    seq = factory.Sequence(lambda n: n)
    doc_ids = factory.LazyFunction(list)
    status = WindowStatus.DONE
    valid = True


@dataclass
class Suite:
    dataset: Dataset
    truth: dict[str, dict[str, float]]  # query ext id -> doc ext id -> true ability
    decisiveness: np.ndarray
    offsets: np.ndarray


def _rounds(rng: np.random.Generator, n_docs: int, rounds: int, w: int) -> list:
    """Balanced windows: each round is a permutation cut into windows of ``w``."""
    out = []
    for _ in range(rounds):
        perm = rng.permutation(n_docs)
        out.extend(perm[i : i + w] for i in range(0, n_docs, w))
    return out


def simulated_suite(
    *,
    name: str = "sim",
    seed: int = 11,
    n_queries: int = 6,
    n_docs: int = 30,
    rounds: int = 4,
    judge: Judge | None = None,
    tournament: bool = True,
    rubric: bool = True,
    systems: dict[str, float] | None = None,
    invalid_rubric_per_query: int = 0,
) -> Suite:
    """Create a dataset with pools, qrels, systems and judge windows from a truth.

    True ability of doc i of query j = offset_j + N(0, 1); Stage A scores =
    decisiveness_j * truth + N(0, 0.3) (decisiveness spans 0.7..2.1); Stage B
    verdicts ~ Bernoulli(sigmoid(gamma_c (truth - beta_c))); qrels 2 if truth > 1.5,
    1 if > 0.3; system s scores truth + noise_s * N(0, 1).
    """
    rng = np.random.default_rng(seed)
    judge = judge or JudgeFactory(name=f"{name}-judge")
    dataset = Dataset.objects.create(name=name)
    offsets = np.linspace(-1.5, 1.5, n_queries)
    decisiveness = np.linspace(0.7, 2.1, n_queries)[rng.permutation(n_queries)]
    queries = Query.objects.bulk_create(
        Query(dataset=dataset, external_id=f"q{j}", text=f"query {j}")
        for j in range(n_queries)
    )
    docs = Document.objects.bulk_create(
        Document(dataset=dataset, external_id=f"q{j}-d{i:02d}", text=f"doc {j}/{i}")
        for j in range(n_queries)
        for i in range(n_docs)
    )
    truth: dict[str, dict[str, float]] = {}
    pools, qrels, windows, entries = [], [], [], []
    systems = SYSTEM_NOISE if systems is None else systems
    sys_objs = {
        s: System.objects.create(dataset=dataset, name=s) for s in sorted(systems)
    }
    for j, q in enumerate(queries):
        qdocs = docs[j * n_docs : (j + 1) * n_docs]
        t = offsets[j] + rng.normal(0.0, 1.0, n_docs)
        truth[q.external_id] = {
            d.external_id: float(x) for d, x in zip(qdocs, t, strict=True)
        }
        ids = np.array([d.external_id for d in qdocs])
        for r, d in enumerate(qdocs, 1):
            pools.append(PoolEntry(query=q, document=d, rank=r))
            grade = 2 if t[r - 1] > 1.5 else 1 if t[r - 1] > 0.3 else 0
            if grade:
                qrels.append(Qrel(query=q, document=d, grade=grade))
        seq = 0
        if tournament:
            for idx in _rounds(rng, n_docs, rounds, 10):
                scores = decisiveness[j] * t[idx] + rng.normal(0.0, 0.3, idx.size)
                windows.append(
                    JudgmentWindow(
                        family=judge.name,
                        judge=judge,
                        query=q,
                        stage=Stage.TOURNAMENT,
                        phase=Phase.RANDOM,
                        seq=seq,
                        doc_ids=ids[idx].tolist(),
                        scores=np.round(scores, 3).tolist(),
                        status=WindowStatus.DONE,
                        valid=True,
                    )
                )
                seq += 1
        if rubric:
            for idx in _rounds(rng, n_docs, rounds, 10):
                p = expit(TRUE_GAMMA * (t[idx, None] - TRUE_BETA))
                answers = (rng.random(p.shape) < p).astype(int)
                windows.append(
                    JudgmentWindow(
                        family=judge.name,
                        judge=judge,
                        query=q,
                        stage=Stage.RUBRIC,
                        phase=Phase.RANDOM,
                        seq=seq,
                        doc_ids=ids[idx].tolist(),
                        answers=answers.tolist(),
                        status=WindowStatus.DONE,
                        valid=True,
                    )
                )
                seq += 1
            for _ in range(invalid_rubric_per_query):
                windows.append(
                    JudgmentWindow(
                        family=judge.name,
                        judge=judge,
                        query=q,
                        stage=Stage.RUBRIC,
                        phase=Phase.RANDOM,
                        seq=seq,
                        doc_ids=ids[:10].tolist(),
                        status=WindowStatus.DONE,
                        valid=False,
                        invalid_category="invalid_json",
                    )
                )
                seq += 1
        for s, noise in systems.items():
            score = t + noise * rng.normal(0.0, 1.0, n_docs)
            order = np.argsort(-score)
            entries.extend(
                RankingEntry(
                    system=sys_objs[s],
                    query=q,
                    document=qdocs[i],
                    rank=r,
                    score=float(score[i]),
                )
                for r, i in enumerate(order, 1)
            )
    PoolEntry.objects.bulk_create(pools)
    Qrel.objects.bulk_create(qrels)
    JudgmentWindow.objects.bulk_create(windows)
    RankingEntry.objects.bulk_create(entries)
    return Suite(
        dataset=dataset, truth=truth, decisiveness=decisiveness, offsets=offsets
    )
