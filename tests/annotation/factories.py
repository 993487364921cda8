"""Factories and a seeded "world" for annotation tests: a dataset with pools, qrels,
rankings of several systems and a done calibration fit with gains.

Calibration rows are made directly here (the calibration app's own services fit
judgments or import files; tests need only gains). Also used by the concurrency
harness and ``perf/bench_annotation.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

import factory
import numpy as np
from django.utils import timezone

from benchmarks.models import (
    Dataset,
    Document,
    PoolEntry,
    Qrel,
    Query,
    RankingEntry,
    System,
)
from calibration.models import (
    CalibrationFit,
    DocumentAbility,
    FitMode,
    FitSource,
    FitStatus,
)
from tests.factories import DatasetFactory, DocumentFactory, QueryFactory


class CalibrationFitFactory(factory.django.DjangoModelFactory):
    """A done fit of imported gains covering ``datasets``."""

    class Meta:
        model = CalibrationFit
        skip_postgeneration_save = True

    source = FitSource.IMPORT
    mode = FitMode.RELEASED
    status = FitStatus.DONE
    finished_at = factory.LazyFunction(timezone.now)

    @factory.post_generation
    def datasets(self, create, extracted, **kwargs):
        if create and extracted:
            self.datasets.set(extracted)


class DocumentAbilityFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = DocumentAbility

    fit = factory.SubFactory(CalibrationFitFactory)
    query = factory.SubFactory(QueryFactory)
    document = factory.SubFactory(
        DocumentFactory, dataset=factory.SelfAttribute("..query.dataset")
    )
    theta = 0.0
    gain = 0.5


@dataclass
class World:
    dataset: Dataset
    systems: list[System]
    fit: CalibrationFit


SYSTEM_NAMES = ["alpha-ranker", "beta-ranker", "gamma-ranker", "delta-ranker"]


def build_world(
    *,
    n_queries: int = 8,
    pool: int = 12,
    n_systems: int = 3,
    seed: int = 0,
    name: str | None = None,
) -> World:
    """A seeded dataset where RCP gains and qrels disagree often enough to fill every
    design cell. Documents have readable titles and texts; bulk inserts keep it fast."""
    rng = np.random.default_rng(seed)
    dataset = DatasetFactory(name=name or f"world-{seed}-{rng.integers(1e9)}")
    queries = Query.objects.bulk_create(
        [
            Query(
                dataset=dataset, external_id=f"wq{i}", text=f"How does topic {i} work?"
            )
            for i in range(n_queries)
        ]
    )
    docs = Document.objects.bulk_create(
        [
            Document(
                dataset=dataset,
                external_id=f"wq{i}-doc{j}",
                title=f"Article {j} on topic {i}",
                text=f"Body of article {j}. It discusses topic {i} at some length.",
            )
            for i in range(n_queries)
            for j in range(pool)
        ]
    )
    systems = System.objects.bulk_create(
        [System(dataset=dataset, name=SYSTEM_NAMES[s]) for s in range(n_systems)]
    )
    fit = CalibrationFitFactory(datasets=[dataset])
    pools, qrels, abilities, rankings = [], [], [], []
    for i, query in enumerate(queries):
        qdocs = docs[i * pool : (i + 1) * pool]
        truth = rng.normal(size=pool)
        for r, doc in enumerate(qdocs, 1):
            pools.append(PoolEntry(query=query, document=doc, rank=r))
        gains = 1 / (1 + np.exp(-(truth + rng.normal(scale=0.8, size=pool))))
        grades = np.clip(np.round(truth + rng.normal(scale=0.8, size=pool)), 0, 2)
        if grades.max() == 0:
            grades[int(np.argmax(truth))] = 1
        for doc, g, grade in zip(qdocs, gains, grades, strict=True):
            abilities.append(
                DocumentAbility(
                    fit=fit, query=query, document=doc, theta=float(g), gain=float(g)
                )
            )
            if grade > 0:
                qrels.append(Qrel(query=query, document=doc, grade=float(grade)))
        for system in systems:
            scores = truth * rng.uniform(0.2, 1.5) + rng.normal(size=pool)
            for rank, j in enumerate(np.argsort(-scores), 1):
                rankings.append(
                    RankingEntry(
                        system=system,
                        query=query,
                        document=qdocs[j],
                        rank=rank,
                        score=float(scores[j]),
                    )
                )
    PoolEntry.objects.bulk_create(pools)
    Qrel.objects.bulk_create(qrels)
    DocumentAbility.objects.bulk_create(abilities)
    RankingEntry.objects.bulk_create(rankings)
    return World(dataset=dataset, systems=list(systems), fit=fit)


def full_grades(payload: dict, rng: np.random.Generator | None = None) -> dict:
    """A complete grades body for an assignment payload (random yes/no answers)."""
    rng = rng or np.random.default_rng(0)
    return {
        doc["key"]: {
            "answers": {
                q["key"]: bool(rng.random() < 0.5) for q in payload["questions"]
            },
            "order": None,
            "comment": None,
            "seconds": float(rng.uniform(2, 30)),
        }
        for doc in payload["documents"]
    }


# ---------------------------------------------------------------------------- simulation


@dataclass
class TruthWorld:
    """A world whose documents have a hidden true usefulness (``truth[doc pk]``)."""

    world: World
    truth: dict[int, float]


def build_truth_world(
    *, n_queries: int = 12, pool: int = 12, n_systems: int = 4, seed: int = 0
) -> TruthWorld:
    """Gains track the hidden truth (small noise); qrels are sparse (about a third
    of the pool judged) and noisy; systems rank by truth plus noise."""
    rng = np.random.default_rng(seed)
    dataset = DatasetFactory(name=f"truth-{seed}-{rng.integers(1e9)}")
    queries = Query.objects.bulk_create(
        Query(dataset=dataset, external_id=f"tq{i}", text=f"What about subject {i}?")
        for i in range(n_queries)
    )
    docs = Document.objects.bulk_create(
        Document(
            dataset=dataset,
            external_id=f"tq{i}-d{j}",
            title=f"Note {j} on subject {i}",
            text=f"Text of note {j} about subject {i}.",
        )
        for i in range(n_queries)
        for j in range(pool)
    )
    systems = System.objects.bulk_create(
        System(dataset=dataset, name=SYSTEM_NAMES[s]) for s in range(n_systems)
    )
    fit = CalibrationFitFactory(datasets=[dataset])
    truth: dict[int, float] = {}
    pools, qrels, abilities, rankings = [], [], [], []
    for i, query in enumerate(queries):
        qdocs = docs[i * pool : (i + 1) * pool]
        t = rng.normal(size=pool)
        judged = rng.random(pool) < 0.35
        best = int(np.argmax(t + rng.normal(scale=1.0, size=pool)))
        judged[best] = True
        noisy = np.clip(np.round(t + rng.normal(scale=1.0, size=pool)), 0, 2)
        noisy[best] = max(noisy[best], 1.0)
        for r, (doc, tj) in enumerate(zip(qdocs, t, strict=True), 1):
            truth[doc.pk] = float(tj)
            pools.append(PoolEntry(query=query, document=doc, rank=r))
            bt = float(tj + rng.normal(scale=0.6))
            abilities.append(
                DocumentAbility(
                    fit=fit,
                    query=query,
                    document=doc,
                    theta_bt=bt,
                    theta=2 * bt,
                    gain=float(1 / (1 + np.exp(-2 * bt))),
                )
            )
            if judged[r - 1]:
                qrels.append(Qrel(query=query, document=doc, grade=float(noisy[r - 1])))
        for system in systems:
            scores = t * rng.uniform(0.3, 1.5) + rng.normal(size=pool)
            for rank, j in enumerate(np.argsort(-scores), 1):
                rankings.append(
                    RankingEntry(
                        system=system,
                        query=query,
                        document=qdocs[j],
                        rank=rank,
                        score=float(scores[j]),
                    )
                )
    PoolEntry.objects.bulk_create(pools)
    Qrel.objects.bulk_create(qrels)
    DocumentAbility.objects.bulk_create(abilities)
    RankingEntry.objects.bulk_create(rankings)
    return TruthWorld(World(dataset=dataset, systems=list(systems), fit=fit), truth)


def simulate_grading(
    *,
    study,
    annotators,
    truth: dict[int, float],
    seed: int = 0,
    noise: float = 0.8,
    comment: str | None = None,
    limit: int | None = None,
) -> int:
    """Every annotator grades through the real services until no contest is left
    (or ``limit`` assignments are submitted): grade = round(1.5 truth + 1.5 + noise)
    in 0..5, answered as "yes" up to it. The noise of a grade depends only on (seed,
    annotator, document), not on the shuffled order the documents are shown in, so
    reports built on it are the same on every run. Returns the number of submitted
    assignments."""
    from annotation.services import assignment_next, assignment_submit

    keys = [q["key"] for q in study.rubrics.order_by("-version").first().questions]
    done, active = 0, True
    while active:
        active = False
        for user in annotators:
            if limit is not None and done >= limit:
                return done
            assignment = assignment_next(study=study, annotator=user)
            if assignment is None:
                continue
            active = True
            grades = {}
            for item in assignment.documents:
                rng = np.random.default_rng([seed, user.pk, item["document"]])
                value = 1.5 * truth[item["document"]] + 1.5 + rng.normal(scale=noise)
                level = int(np.clip(np.round(value), 0, len(keys)))
                grades[item["key"]] = {
                    "answers": {k: i < level for i, k in enumerate(keys)},
                    "order": None,
                    "comment": comment,
                    "seconds": float(rng.uniform(4, 40)),
                }
            assignment_submit(assignment=assignment, grades=grades)
            done += 1
    return done
