"""HTML pages of the annotation app.

Annotators: their studies (``home``) and the grading page, a small script over the
annotator API. Staff (reviewers read only): the study list with a create form that
previews the sampling first, and the monitoring page with close/reopen.
"""

from __future__ import annotations

from datetime import timedelta

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import FileResponse, Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.safestring import mark_safe
from django.views.decorators.http import require_POST

from benchmarks.access import can_read_benchmarks
from benchmarks.models import Dataset, System
from rcp_platform.exceptions import ApplicationError

from . import markdown, plots, sampling, selectors, services
from .models import ReleaseStatus, Study


def _reader(request: HttpRequest) -> None:
    if not can_read_benchmarks(request.user):
        raise PermissionDenied


def _staff(request: HttpRequest) -> None:
    if not request.user.is_staff:
        raise PermissionDenied


# ---------------------------------------------------------------------------- annotators


@login_required
def home(request: HttpRequest) -> HttpResponse:
    """An annotator's studies with their own progress; staff go to the study list."""
    if can_read_benchmarks(request.user):
        return redirect("annotation:study-list")
    if not selectors.is_annotator(request.user):
        raise PermissionDenied
    rows = [
        (study, selectors.annotator_progress(study=study, annotator=request.user))
        for study in selectors.annotator_study_list(user=request.user)
    ]
    return render(request, "annotation/home.html", {"rows": rows})


@login_required
def grading(request: HttpRequest, study_id: int) -> HttpResponse:
    """The grading page. It holds no contest data: the script fetches it blind."""
    if not selectors.is_annotator(request.user):
        raise PermissionDenied
    study = selectors.study_get_for_annotator(user=request.user, study_id=study_id)
    return render(
        request,
        "annotation/grading.html",
        {
            "study": study,
            "instructions": mark_safe(markdown.render(study.instructions)),  # noqa: S308 - escaped by the renderer
        },
    )


# ---------------------------------------------------------------------------- staff


def _system_label(system: System) -> str:
    return f"{system.dataset.name}: {system.name}"


class StudyForm(forms.Form):
    name = forms.CharField(max_length=200)
    datasets = forms.ModelMultipleChoiceField(
        queryset=Dataset.objects.order_by("name"),
        widget=forms.CheckboxSelectMultiple,
    )
    systems = forms.ModelMultipleChoiceField(
        queryset=System.objects.select_related("dataset").order_by(
            "dataset__name", "name"
        ),
        widget=forms.CheckboxSelectMultiple,
        help_text="at least two per dataset; contests pair systems of one dataset",
    )
    contests = forms.IntegerField(min_value=1, initial=40)
    depth = forms.IntegerField(min_value=1, max_value=50, initial=5, label="Depth k")
    per_contest = forms.IntegerField(
        min_value=1, max_value=20, initial=3, label="Annotators per contest"
    )
    quota_decisive = forms.FloatField(
        min_value=0, max_value=1, initial=0.5, label="Quota: discordant, decisive"
    )
    quota_marginal = forms.FloatField(
        min_value=0, max_value=1, initial=0.25, label="Quota: discordant, marginal"
    )
    quota_concordant = forms.FloatField(
        min_value=0, max_value=1, initial=0.25, label="Quota: concordant controls"
    )
    seed = forms.IntegerField(min_value=0, initial=0)
    lease_minutes = forms.IntegerField(min_value=1, initial=30)
    collect_order = forms.BooleanField(
        required=False, label="Ask for an order of equally graded documents"
    )
    collect_comments = forms.BooleanField(
        required=False, initial=True, label="Comment box per document"
    )
    open_now = forms.BooleanField(required=False, label="Open at once")

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.fields["systems"].label_from_instance = _system_label

    def plan_kwargs(self) -> dict:
        data = self.cleaned_data
        return {
            "datasets": list(data["datasets"]),
            "systems": list(data["systems"]),
            "n_contests": data["contests"],
            "depth": data["depth"],
            "quotas": {
                sampling.DECISIVE: data["quota_decisive"],
                sampling.MARGINAL: data["quota_marginal"],
                sampling.CONCORDANT: data["quota_concordant"],
            },
            "seed": data["seed"],
        }


@login_required
def study_list(request: HttpRequest) -> HttpResponse:
    """Studies; staff create one in two steps: preview the sampling, then create."""
    _reader(request)
    form = StudyForm(request.POST or None)
    preview = None
    if request.method == "POST":
        _staff(request)
        if form.is_valid():
            try:
                if "create" in request.POST:
                    data = form.cleaned_data
                    study = services.study_create(
                        name=data["name"],
                        **form.plan_kwargs(),
                        per_contest=data["per_contest"],
                        lease_duration=timedelta(minutes=data["lease_minutes"]),
                        collect_order=data["collect_order"],
                        collect_comments=data["collect_comments"],
                        created_by=request.user,
                        open_now=data["open_now"],
                    )
                    messages.success(
                        request,
                        f"Study {study.pk} created with "
                        f"{study.contests.count()} contests.",
                    )
                    return redirect("annotation:study-detail", study_id=study.pk)
                summary = services.study_plan(**form.plan_kwargs()).summary()
                preview = {
                    "candidates": summary["candidates"],
                    "fit": summary["fit"],
                    "rows": [
                        (
                            cell,
                            summary["quotas"][cell],
                            summary["available"][cell],
                            summary["requested"][cell],
                            summary["drawn"][cell],
                        )
                        for cell in sampling.CELLS
                    ],
                }
            except ApplicationError as exc:
                form.add_error(None, exc.message)
    return render(
        request,
        "annotation/study_list.html",
        {
            "studies": selectors.study_list(user=request.user),
            "form": form,
            "preview": preview,
        },
    )


@login_required
def study_detail(request: HttpRequest, study_id: int) -> HttpResponse:
    """Monitoring: contest states, annotators, expired leases, progress chart."""
    _reader(request)
    study = selectors.study_get(user=request.user, study_id=study_id)
    releases = []
    if request.user.is_staff:
        services.releases_reap_stale(study=study)  # a lost build shows as failed
        releases = list(selectors.release_list(study=study))
    building = (ReleaseStatus.PENDING, ReleaseStatus.RUNNING)
    return render(
        request,
        "annotation/study_detail.html",
        {
            "study": study,
            "progress": selectors.study_progress(study=study),
            "releases": releases,
            "releases_building": any(r.status in building for r in releases),
        },
    )


@login_required
@require_POST
def study_action(request: HttpRequest, study_id: int, action: str) -> HttpResponse:
    """Close or (re)open a study."""
    _staff(request)
    study = selectors.study_get(user=request.user, study_id=study_id)
    actions = {"open": services.study_open, "close": services.study_close}
    try:
        actions[action](study=study)
        messages.success(request, f"Study {study.pk} is {study.status}.")
    except ApplicationError as exc:
        messages.error(request, exc.message)
    return redirect("annotation:study-detail", study_id=study.pk)


# ---------------------------------------------------------------------------- planning


class PowerForm(forms.Form):
    """Inputs of the power planner (all shares are fractions, e.g. 0.62)."""

    true_rate = forms.FloatField(min_value=0.0, max_value=1.0, initial=0.62)
    chance_rate = forms.FloatField(min_value=0.0, max_value=1.0, required=False)
    counted_share = forms.FloatField(min_value=0.0, max_value=1.0, required=False)
    # Left empty, these take the planner's defaults (0.8, 0.05, 1).
    power = forms.FloatField(min_value=0.0, max_value=1.0, required=False)
    alpha = forms.FloatField(min_value=0.0, max_value=1.0, required=False)
    design_effect = forms.FloatField(min_value=1.0, required=False)
    one_sided = forms.BooleanField(required=False)
    contests = forms.IntegerField(min_value=1, required=False)
    study = forms.ModelChoiceField(queryset=Study.objects.none(), required=False)

    def __init__(self, *args: object, user: object = None, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.fields["study"].queryset = selectors.study_list(user=user)  # type: ignore[attr-defined]


@login_required
def study_power(request: HttpRequest) -> HttpResponse:
    """The power planner page: contests needed for a target power, power of a size.
    A study fills a missing chance rate and counted share from its contests."""
    _reader(request)
    form = PowerForm(request.GET or None, user=request.user)
    plan, error = None, None
    if form.is_bound and form.is_valid():
        values = {k: v for k, v in form.cleaned_data.items() if v is not None}
        try:
            plan = services.power_plan_build(**values)
        except ApplicationError as exc:
            error = exc.message
    return render(
        request,
        "annotation/study_power.html",
        {"form": form, "plan": plan, "error": error},
    )


# ---------------------------------------------------------------------------- reports


def _flag_rows(report: dict, names: dict[str, str]) -> list[dict]:
    return [
        {"username": names.get(key, key), "pseudonym": key, **figures}
        for key, figures in sorted(
            report["annotator_flags"].items(), key=lambda kv: names.get(kv[0], kv[0])
        )
    ]


def _slice_rows(report: dict) -> list[dict]:
    """The inference slices as table rows, in the report's order."""
    slices = (report.get("inference") or {}).get("slices") or {}
    return [{"name": name, **figures} for name, figures in slices.items()]


@login_required
def study_report(request: HttpRequest, study_id: int) -> HttpResponse:
    """The study's analysis with SVG plots (staff only: it shows annotator flags).
    ``?exclude_system=NAME`` (repeatable) restricts it to a subset; ``?system=NAME``
    adds the slices of one system (RCP favours it, its win rate, its contests)."""
    _staff(request)
    study = selectors.study_get(user=request.user, study_id=study_id)
    systems = sorted(set(study.systems.values_list("name", flat=True)))
    exclude = [s for s in request.GET.getlist("exclude_system") if s in systems]
    focus = request.GET.get("system", "")
    focus = focus if focus in systems and focus not in exclude else ""
    error = None
    report: dict = {}
    names: dict[str, str] = {}
    try:
        report, names = services.study_report_requested(
            study=study, exclude_systems=exclude, focus_system=focus
        )
    except ApplicationError as exc:
        error = exc.message
    svgs = {}
    annotators = []
    if report:
        annotators = _flag_rows(report, names)
        svgs = {
            "margin": plots.agreement_by_margin(report["hit_rates"]),
            "reliability": plots.reliability_diagram(report["reliability_bins"]),
            "classes": plots.verdict_classes(report["verdict_classes"]),
            "agreement": plots.horizontal_bars(
                "Per-annotator agreement with the panel verdict",
                [(a["username"], a["panel_agreement"]) for a in annotators],
                maximum=1.0,
            ),
            "seconds": plots.horizontal_bars(
                "Median seconds per document",
                [(a["username"], a["median_seconds"]) for a in annotators],
                fmt="{:.1f} s",
            ),
        }
        svgs = {k: mark_safe(v) for k, v in svgs.items()}  # noqa: S308 - escaped in plots
    return render(
        request,
        "annotation/study_report.html",
        {
            "study": study,
            "report": report,
            "error": error,
            "svgs": svgs,
            "annotators": annotators,
            "systems": systems,
            "excluded": exclude,
            "focus": focus,
            "slices": _slice_rows(report),
        },
    )


@login_required
@require_POST
def release_create(request: HttpRequest, study_id: int) -> HttpResponse:
    """Queue the next numbered release of a study (built by a worker)."""
    _staff(request)
    study = selectors.study_get(user=request.user, study_id=study_id)
    try:
        release = services.release_request(
            study=study,
            include_text=bool(request.POST.get("include_text")),
            created_by=request.user,
        )
        messages.success(request, f"Release {release.number} is being built.")
    except ApplicationError as exc:
        messages.error(request, exc.message)
    return redirect("annotation:study-detail", study_id=study.pk)


@login_required
@require_POST
def release_retry(request: HttpRequest, study_id: int, number: int) -> HttpResponse:
    """Queue a failed release again (same number)."""
    _staff(request)
    study = selectors.study_get(user=request.user, study_id=study_id)
    release = selectors.release_get(study=study, number=number)
    try:
        services.release_retry(release=release)
        messages.success(request, f"Release {number} is being built again.")
    except ApplicationError as exc:
        messages.error(request, exc.message)
    return redirect("annotation:study-detail", study_id=study.pk)


@login_required
def release_download(request: HttpRequest, study_id: int, number: int) -> HttpResponse:
    """The zip of a finished release."""
    _staff(request)
    study = selectors.study_get(user=request.user, study_id=study_id)
    release = selectors.release_get(study=study, number=number)
    archive = services.release_folder(release=release).with_suffix(".zip")
    if release.status != ReleaseStatus.DONE or not archive.is_file():
        raise Http404("this release is not ready")
    return FileResponse(
        archive.open("rb"),
        as_attachment=True,
        filename=f"study-{study.pk}-release-{number}.zip",
    )
