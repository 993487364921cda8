"""HTML pages of the judging app: jobs list with create form (estimate first), job
detail with live progress (htmx-free polling fragment), controls and windows."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from benchmarks.access import require_reader
from benchmarks.models import Dataset
from rcp_platform.exceptions import ApplicationError

from . import selectors, services
from .keyenv import PREFIX, api_key_env_refusal
from .models import Decoding, JobStages, Judge


class JobForm(forms.Form):
    dataset = forms.ModelChoiceField(queryset=Dataset.objects.order_by("name"))
    judge = forms.ModelChoiceField(
        queryset=Judge.objects.filter(offline=False).order_by("name")
    )
    stages = forms.ChoiceField(choices=JobStages.choices, initial=JobStages.BOTH)
    queries = forms.CharField(
        required=False, help_text="space-separated query ids (empty: all)"
    )


@login_required
def job_list(request: HttpRequest) -> HttpResponse:
    """Jobs and judges; staff create a job in two steps: estimate, then launch."""
    require_reader(request)
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
    require_reader(request)
    context = _detail_context(request, job_id)
    context["samples"] = selectors.window_sample(job=context["job"])
    context["invalid_samples"] = selectors.window_sample(
        job=context["job"], invalid=True
    )
    return render(request, "judging/job_detail.html", context)


@login_required
def job_progress_fragment(request: HttpRequest, job_id: int) -> HttpResponse:
    """The progress block alone; the detail page re-fetches it every 2 s."""
    require_reader(request)
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
    require_reader(request)
    window = selectors.window_get(user=request.user, window_id=window_id)
    return render(
        request,
        "judging/window_detail.html",
        {"window": window, "prompt": selectors.window_prompt(window=window)},
    )


class JudgeForm(forms.Form):
    """A judge's endpoint settings. The key itself is never entered here: only the
    name of the environment variable that holds it on the workers."""

    name = forms.CharField(max_length=200)
    base_urls = forms.CharField(
        label="Base URLs",
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="one per line (replicas), usually ending in /v1",
    )
    model = forms.CharField(max_length=300)
    api_key_env = forms.CharField(
        label="Key variable",
        max_length=200,
        required=False,
        help_text=(
            f"name of the environment variable holding the key on the workers, e.g. "
            f"{PREFIX}OPENAI (never the key itself); empty for a server without one"
        ),
    )
    concurrency = forms.IntegerField(
        min_value=1, initial=8, help_text="requests in flight, across all workers"
    )
    timeout_s = forms.FloatField(label="Timeout (s)", min_value=1, initial=120.0)
    decoding = forms.ChoiceField(choices=Decoding.choices, initial=Decoding.JSON_SCHEMA)
    max_output_tokens = forms.IntegerField(min_value=16, initial=2048)
    temperature = forms.FloatField(
        required=False, min_value=0, help_text="empty: the server's default"
    )
    context_tokens = forms.IntegerField(
        required=False, min_value=256, help_text="empty: documents are not truncated"
    )
    extra_body = forms.JSONField(
        required=False,
        initial=dict,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text='JSON merged into each request, e.g. {"chat_template_kwargs": {"enable_thinking": false}}',
    )

    def clean_base_urls(self) -> list[str]:
        urls = [u.strip() for u in self.cleaned_data["base_urls"].split() if u.strip()]
        if not urls:
            raise forms.ValidationError("at least one base URL")
        for url in urls:
            if not url.startswith(("http://", "https://")):
                raise forms.ValidationError(
                    f"{url!r} must start with http:// or https://"
                )
        return urls

    def clean_api_key_env(self) -> str:
        name = self.cleaned_data["api_key_env"].strip()
        refusal = api_key_env_refusal(name)
        if refusal is not None:
            raise forms.ValidationError(refusal)
        return name

    def clean_extra_body(self) -> dict:
        value = self.cleaned_data.get("extra_body") or {}
        if not isinstance(value, dict):
            raise forms.ValidationError("a JSON object")
        return value

    @classmethod
    def initial_for(cls, judge: Judge) -> dict:
        return {
            "name": judge.name,
            "base_urls": "\n".join(judge.base_urls),
            **{f: getattr(judge, f) for f in services.JUDGE_FIELDS if f != "base_urls"},
        }


@login_required
def judge_form(request: HttpRequest, judge_id: int | None = None) -> HttpResponse:
    """Add (``judging.add_judge``) or edit (``judging.change_judge``) a judge, and test
    its connection before saving. The permission, not staff status, is required: the
    judge's URL receives the key its variable holds."""
    require_reader(request)
    judge = None
    if judge_id is not None:
        judge = get_object_or_404(Judge, pk=judge_id, offline=False)
    if not request.user.has_perm(
        "judging.change_judge" if judge else "judging.add_judge"
    ):
        raise PermissionDenied
    form = JudgeForm(
        request.POST or None, initial=JudgeForm.initial_for(judge) if judge else None
    )
    if judge is not None:
        form.fields["name"].disabled = True  # the default family of its windows
    checks = None
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        fields = {f: data[f] for f in services.JUDGE_FIELDS}
        if "test" in request.POST:
            checks = _test_connection(data["name"], fields)
        else:
            try:
                if judge is None:
                    judge = services.judge_create(name=data["name"], **fields)
                    messages.success(request, f"Judge {judge.name!r} added.")
                else:
                    services.judge_update(judge=judge, **fields)
                    messages.success(request, f"Judge {judge.name!r} saved.")
                return redirect("judging:job-list")
            except ApplicationError as exc:
                form.add_error(None, exc.message)
    return render(
        request,
        "judging/judge_form.html",
        {"form": form, "judge": judge, "checks": checks},
    )


def _test_connection(name: str, fields: dict) -> list:
    from .clients import FatalJudgeError, JudgeEndpoint, ReplicaCheck, check_connection
    from .limits import limiter_for_settings

    endpoint = JudgeEndpoint(
        name=name,
        base_urls=tuple(u.rstrip("/") for u in fields["base_urls"]),
        model=fields["model"],
        api_key_env=fields["api_key_env"],
        max_output_tokens=fields["max_output_tokens"],
        temperature=fields["temperature"],
        timeout_s=fields["timeout_s"],
        decoding=fields["decoding"],
        extra_body=fields["extra_body"] or {},
        concurrency=fields["concurrency"],
    )
    try:
        return check_connection(endpoint, limiter_for_settings())
    except FatalJudgeError as exc:
        return [ReplicaCheck(base_url=", ".join(endpoint.base_urls), error=str(exc))]
