"""Reads of the benchmarks app. Access rules live here, not in views."""

from __future__ import annotations

from typing import Any

from django.db.models import Count, IntegerField, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce

from benchmarks.access import can_read_benchmarks
from rcp_platform.exceptions import NotFoundError

from .models import Dataset, Document, PoolEntry, Qrel, Query, RankingEntry, System


def _count(model: Any, path: str) -> Coalesce:
    """A correlated COUNT subquery: one per column, so counts never multiply by joins."""
    sub = (
        model.objects.filter(**{path: OuterRef("pk")})
        .order_by()
        .values(path)
        .annotate(n=Count("pk"))
        .values("n")
    )
    return Coalesce(Subquery(sub, output_field=IntegerField()), 0)


def dataset_list(*, user: Any) -> QuerySet[Dataset]:
    """Datasets the user may read, each annotated with row counts (one query in all)."""
    if not can_read_benchmarks(user):
        return Dataset.objects.none()
    return Dataset.objects.annotate(
        n_queries=_count(Query, "dataset"),
        n_documents=_count(Document, "dataset"),
        n_systems=_count(System, "dataset"),
        n_qrels=_count(Qrel, "query__dataset"),
        n_pool=_count(PoolEntry, "query__dataset"),
        n_rankings=_count(RankingEntry, "system__dataset"),
    ).order_by("name")


def dataset_get(*, user: Any, ref: str | int) -> Dataset:
    """One readable dataset by id or name, with counts; NotFoundError otherwise."""
    qs = dataset_list(user=user)
    ref = str(ref)
    dataset = qs.filter(pk=int(ref)).first() if ref.isdigit() else None
    dataset = dataset or qs.filter(name=ref).first()
    if dataset is None:
        raise NotFoundError(f"dataset {ref!r} not found")
    return dataset


def query_list(*, dataset: Dataset) -> QuerySet[Query]:
    """A dataset's queries with pool and qrel counts."""
    return (
        Query.objects.filter(dataset=dataset)
        .annotate(n_pool=_count(PoolEntry, "query"), n_qrels=_count(Qrel, "query"))
        .order_by("id")
    )


def document_list(*, dataset: Dataset) -> QuerySet[Document]:
    return Document.objects.filter(dataset=dataset).order_by("id")


def system_list(*, dataset: Dataset) -> QuerySet[System]:
    """A dataset's systems with the number of ranked (query, document) rows."""
    return (
        System.objects.filter(dataset=dataset)
        .annotate(n_rankings=_count(RankingEntry, "system"))
        .order_by("name")
    )


def query_pool(*, query: Query) -> QuerySet[PoolEntry]:
    """A query's candidate pool in pool-rank order, with documents and qrels joined."""
    return (
        PoolEntry.objects.filter(query=query)
        .select_related("document")
        .order_by("rank")
    )


def system_ranking(*, system: System, query: Query) -> QuerySet[RankingEntry]:
    return (
        RankingEntry.objects.filter(system=system, query=query)
        .select_related("document")
        .order_by("rank")
    )


def dataset_counts(*, dataset: Dataset) -> dict[str, int]:
    """Row counts of one dataset (for ``dataset_info`` and the detail page)."""
    return {
        "queries": Query.objects.filter(dataset=dataset).count(),
        "documents": Document.objects.filter(dataset=dataset).count(),
        "pool_entries": PoolEntry.objects.filter(query__dataset=dataset).count(),
        "qrels": Qrel.objects.filter(query__dataset=dataset).count(),
        "systems": System.objects.filter(dataset=dataset).count(),
        "ranking_entries": RankingEntry.objects.filter(system__dataset=dataset).count(),
    }
