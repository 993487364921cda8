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
