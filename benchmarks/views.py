"""HTML pages of the benchmarks app: the staff dashboard, dataset browsing, and the
upload forms (dataset import, run) whose files a worker imports."""

from __future__ import annotations

from django import forms
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render

from benchmarks.access import require_reader, require_staff
from rcp_platform.exceptions import ApplicationError

from . import selectors, services
from .models import Protocol, Query, UploadKind, UploadStatus

RECENT_UPLOADS = 10


@login_required
def dataset_list(request: HttpRequest) -> HttpResponse:
    """Every dataset the user may read, with its counts (the navigation's
    "Datasets"), and staff's recent uploads."""
    require_reader(request)
    datasets = selectors.dataset_list(user=request.user)
    uploads = selectors.upload_list(user=request.user)[:RECENT_UPLOADS]
    return render(
        request,
        "benchmarks/dashboard.html",
        {"datasets": datasets, "uploads": uploads},
    )


class DatasetImportForm(forms.Form):
    name = forms.SlugField(max_length=200, help_text="letters, digits, - and _")
    protocol = forms.ChoiceField(choices=Protocol.choices, initial=Protocol.PLAIN)
    description = forms.CharField(
        required=False, widget=forms.Textarea(attrs={"rows": 2})
    )
    corpus = forms.FileField(help_text="JSONL: _id, title, text (.gz allowed)")
    queries = forms.FileField(help_text="JSONL: _id, text")
    qrels = forms.FileField(required=False, help_text="TSV: query-id, corpus-id, score")
    pools = forms.FileField(required=False, help_text="TSV: query-id, corpus-id")
    replace = forms.BooleanField(
        required=False, help_text="replace a dataset of the same name"
    )


class RunUploadForm(forms.Form):
    system = forms.CharField(max_length=200)
    run = forms.FileField(
        label="Run file", help_text="TREC run: qid Q0 docid rank score tag"
    )
    description = forms.CharField(required=False)
    replace = forms.BooleanField(
        required=False, help_text="replace the rankings of a system of this name"
    )


@login_required
def dataset_import(request: HttpRequest) -> HttpResponse:
    """The import form (staff): files are stored and imported by a worker; the
    browser goes to the upload's page with its progress bar."""
    require_staff(request)
    form = DatasetImportForm(request.POST or None, request.FILES or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            upload = services.upload_create(
                kind=UploadKind.DATASET,
                files={r: data[r] for r in services.DATASET_FILES},
                dataset_name=data["name"],
                protocol=data["protocol"],
                description=data["description"],
                replace=data["replace"],
                created_by=request.user,
            )
        except ApplicationError as exc:
            form.add_error(None, exc.message)
        else:
            return redirect("benchmarks:upload-detail", pk=upload.pk)
    return render(
        request, "benchmarks/upload_form.html", {"form": form, "dataset": None}
    )


@login_required
def run_upload(request: HttpRequest, pk: int) -> HttpResponse:
    """Add a run (a system's rankings) to a dataset from the browser (staff)."""
    require_staff(request)
    dataset = selectors.dataset_get(user=request.user, ref=pk)
    form = RunUploadForm(request.POST or None, request.FILES or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            upload = services.upload_create(
                kind=UploadKind.RUN,
                files={"run": data["run"]},
                dataset_name=dataset.name,
                dataset=dataset,
                system_name=data["system"],
                description=data["description"],
                replace=data["replace"],
                created_by=request.user,
            )
        except ApplicationError as exc:
            form.add_error(None, exc.message)
        else:
            return redirect("benchmarks:upload-detail", pk=upload.pk)
    return render(
        request, "benchmarks/upload_form.html", {"form": form, "dataset": dataset}
    )


def _upload_context(request: HttpRequest, pk: int) -> dict:
    upload = selectors.upload_get(user=request.user, pk=pk)
    return {
        "upload": upload,
        "progress": selectors.upload_progress(upload=upload),
        "active": upload.status in (UploadStatus.PENDING, UploadStatus.RUNNING),
        "error_lines": selectors.upload_error_lines(upload=upload),
    }


@login_required
def upload_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """An upload's status and progress bar; on failure the message with the file's
    numbered lines around the faulty one."""
    require_staff(request)
    return render(
        request, "benchmarks/upload_detail.html", _upload_context(request, pk)
    )


@login_required
def upload_progress_fragment(request: HttpRequest, pk: int) -> HttpResponse:
    """The status block alone; the upload page re-fetches it every second."""
    require_staff(request)
    return render(
        request, "benchmarks/_upload_status.html", _upload_context(request, pk)
    )


@login_required
def dataset_detail(request: HttpRequest, pk: int) -> HttpResponse:
    require_reader(request)
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
    require_reader(request)
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
