"""HTML pages of the judging app: jobs list with create form (estimate first), job
detail with live progress (htmx-free polling fragment), controls and windows."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from benchmarks.access import can_read_benchmarks
from benchmarks.models import Dataset
from rcp_platform.exceptions import ApplicationError

from . import selectors, services
from .models import JobStages, Judge


class JobForm(forms.Form):
    dataset = forms.ModelChoiceField(queryset=Dataset.objects.order_by("name"))
    judge = forms.ModelChoiceField(
        queryset=Judge.objects.filter(offline=False).order_by("name")
    )
    stages = forms.ChoiceField(choices=JobStages.choices, initial=JobStages.BOTH)
    queries = forms.CharField(
        required=False, help_text="space-separated query ids (empty: all)"
    )


def _reader(request: HttpRequest) -> None:
    if not can_read_benchmarks(request.user):
        raise PermissionDenied


@login_required
def job_list(request: HttpRequest) -> HttpResponse:
    """Jobs and judges; staff create a job in two steps: estimate, then launch."""
    _reader(request)
    form = JobForm(request.POST or None)
    estimate = None
    if request.method == "POST":
        if not request.user.is_staff:
            raise PermissionDenied
        if form.is_valid():
            data = form.cleaned_data
            query_ids = data["queries"].split() or None
            try:
                if "launch" in request.POST:
                    job = services.job_create(
                        dataset=data["dataset"],
                        judge=data["judge"],
                        stages=data["stages"],
                        query_ids=query_ids,
                        user=request.user,
                    )
                    messages.success(request, f"Job {job.pk} queued.")
                    return redirect("judging:job-detail", job_id=job.pk)
                estimate = services.job_estimate(
                    dataset=data["dataset"],
                    judge=data["judge"],
                    stages=data["stages"],
                    query_ids=query_ids,
                )
            except ApplicationError as exc:
                form.add_error(None, exc.message)
    return render(
        request,
        "judging/job_list.html",
        {
            "jobs": selectors.job_list(user=request.user)[:100],
            "judges": selectors.judge_list(user=request.user),
            "form": form,
            "estimate": estimate,
        },
    )


def _detail_context(request: HttpRequest, job_id: int) -> dict:
    job = selectors.job_get(user=request.user, job_id=job_id)
    return {
        "job": job,
        "progress": selectors.job_progress(job=job),
        "invalid": selectors.invalid_windows(job=job),
    }


@login_required
def job_detail(request: HttpRequest, job_id: int) -> HttpResponse:
    _reader(request)
    context = _detail_context(request, job_id)
    context["samples"] = selectors.window_sample(job=context["job"])
    context["invalid_samples"] = selectors.window_sample(
        job=context["job"], invalid=True
    )
    return render(request, "judging/job_detail.html", context)


@login_required
def job_progress_fragment(request: HttpRequest, job_id: int) -> HttpResponse:
    """The progress block alone; the detail page re-fetches it every 2 s."""
    _reader(request)
    return render(request, "judging/_progress.html", _detail_context(request, job_id))


@login_required
@require_POST
def job_action(request: HttpRequest, job_id: int, action: str) -> HttpResponse:
    if not request.user.is_staff:
        raise PermissionDenied
    actions = {
        "pause": services.job_pause,
        "cancel": services.job_cancel,
        "resume": services.job_resume,
    }
    if action not in actions:
        raise PermissionDenied
    job = selectors.job_get(user=request.user, job_id=job_id)
    try:
        actions[action](job=job)
        messages.success(request, f"Job {job.pk}: {action} requested.")
    except ApplicationError as exc:
        messages.error(request, exc.message)
    return redirect("judging:job-detail", job_id=job_id)


@login_required
def window_detail(request: HttpRequest, window_id: int) -> HttpResponse:
    _reader(request)
    window = selectors.window_get(user=request.user, window_id=window_id)
    return render(
        request,
        "judging/window_detail.html",
        {"window": window, "prompt": selectors.window_prompt(window=window)},
    )
