"""Reads of the benchmarks app. Access rules live here, not in views."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.db.models import Count, IntegerField, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce

from benchmarks.access import can_read_benchmarks
from rcp_platform.exceptions import NotFoundError

from .models import (
    Dataset,
    Document,
    PoolEntry,
    Qrel,
    Query,
    RankingEntry,
    System,
    Upload,
    UploadStatus,
)


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


# ---------------------------------------------------------------------------- uploads
ERROR_CONTEXT_LINES = 2
ERROR_LINE_CHARS = 300


def upload_list(*, user: Any) -> QuerySet[Upload]:
    """Recent uploads, newest first (staff only: uploads are staff work)."""
    if not getattr(user, "is_staff", False):
        return Upload.objects.none()
    return Upload.objects.select_related("dataset", "created_by").order_by(
        "-created_at", "-id"
    )


def upload_get(*, user: Any, pk: int) -> Upload:
    """One upload (staff only); NotFoundError otherwise."""
    upload = upload_list(user=user).filter(pk=pk).first()
    if upload is None:
        raise NotFoundError(f"upload {pk} not found")
    return upload


def upload_progress(*, upload: Upload) -> dict:
    """{"stages": {stage: rows}, "rows", "lines", "percent"} of an upload. The
    worker writes the counts to a file beside the upload; ``percent`` is rows over
    the lines of the uploaded files (None when a file is gzipped), 100 when done."""
    from .services import upload_folder

    try:
        stages = json.loads((upload_folder(upload) / "progress.json").read_text())
    except (OSError, ValueError):
        stages = {}
    rows = sum(stages.values())
    sizes = [f.get("lines") for f in upload.files.values()]
    lines = None if None in sizes else sum(sizes)
    if upload.status == UploadStatus.DONE:
        percent: float | None = 100.0
    elif lines:
        # Header lines are not rows: stay below 100 until the worker says done.
        percent = min(99.0, round(100 * rows / lines, 1))
    else:
        percent = None if upload.status == UploadStatus.RUNNING else 0.0
    return {"stages": stages, "rows": rows, "lines": lines, "percent": percent}


def upload_error_lines(*, upload: Upload) -> list[tuple[int, str, bool]]:
    """The lines around a failed upload's error line as (number, text, is_error), so
    the page can show the faulty line in its context; empty without a line."""
    if not upload.error_line or not upload.error_file:
        return []
    role = next(
        (r for r, f in upload.files.items() if f["name"] == upload.error_file), None
    )
    if role is None:
        return []
    from django.conf import settings

    from .formats import FormatError, open_text

    first = max(1, upload.error_line - ERROR_CONTEXT_LINES)
    last = upload.error_line + ERROR_CONTEXT_LINES
    out = []
    try:
        with open_text(Path(settings.MEDIA_ROOT) / upload.files[role]["path"]) as fh:
            for number, text in enumerate(fh, start=1):
                if number > last:
                    break
                if number >= first:
                    shown = text.rstrip("\n")
                    if len(shown) > ERROR_LINE_CHARS:
                        shown = shown[:ERROR_LINE_CHARS] + " …"
                    out.append((number, shown, number == upload.error_line))
    except (OSError, UnicodeDecodeError, FormatError):
        return []
    return out
