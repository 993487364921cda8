"""HTML pages of the benchmarks app: the staff dashboard and dataset browsing."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from benchmarks.access import can_read_benchmarks

from . import selectors
from .models import Query


def _require_reader(request: HttpRequest) -> None:
    if not can_read_benchmarks(request.user):
        raise PermissionDenied


@login_required
def dataset_list(request: HttpRequest) -> HttpResponse:
    """Every dataset the user may read, with its counts (the navigation's
    "Datasets")."""
    _require_reader(request)
    datasets = selectors.dataset_list(user=request.user)
    return render(request, "benchmarks/dashboard.html", {"datasets": datasets})


@login_required
def dataset_detail(request: HttpRequest, pk: int) -> HttpResponse:
    _require_reader(request)
    dataset = selectors.dataset_get(user=request.user, ref=pk)
    queries = Paginator(selectors.query_list(dataset=dataset), 50).get_page(
        request.GET.get("page")
    )
    return render(
        request,
        "benchmarks/dataset_detail.html",
        {
            "dataset": dataset,
            "queries": queries,
            "systems": selectors.system_list(dataset=dataset),
        },
    )


@login_required
def query_detail(request: HttpRequest, pk: int, query_pk: int) -> HttpResponse:
    _require_reader(request)
    dataset = selectors.dataset_get(user=request.user, ref=pk)
    query = get_object_or_404(Query, pk=query_pk, dataset=dataset)
    pool = selectors.query_pool(query=query)
    grades = dict(query.qrels.values_list("document_id", "grade"))
    rows = [(entry, grades.get(entry.document_id)) for entry in pool]
    return render(
        request,
        "benchmarks/query_detail.html",
        {"dataset": dataset, "query": query, "rows": rows, "n_qrels": len(grades)},
    )
