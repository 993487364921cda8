"""HTML pages of the annotation app.

Annotators: their studies (``home``) and the grading page, a small script over the
annotator API. Staff (reviewers read only): the study list with a create form that
previews the sampling first, and the monitoring page with close/reopen.
"""

from __future__ import annotations

from datetime import timedelta

from django import forms
from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import FileResponse, Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse, reverse_lazy
from django.utils.safestring import mark_safe
from django.views.decorators.http import require_POST

from benchmarks.access import can_read_benchmarks, require_reader, require_staff
from benchmarks.models import Dataset, System
from portal.figures import figure_response, shown
from rcp_platform.exceptions import ApplicationError

from . import acceptance, markdown, report_sections, sampling, selectors, services
from .figures import report_figures
from .models import ReleaseStatus, Study

# ---------------------------------------------------------------------------- annotators


@login_required
def home(request: HttpRequest) -> HttpResponse:
    """An annotator's studies with their own progress; staff go to the study list."""
    if can_read_benchmarks(request.user):
        return redirect("annotation:study-list")
    if not selectors.is_annotator(request.user):
        raise PermissionDenied
    rows = [
        (
            study,
            {
                **selectors.annotator_progress(study=study, annotator=request.user),
                "has_lease": selectors.annotator_has_lease(
                    study=study, annotator=request.user
                ),
            },
        )
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
    # Design controls and analysis settings (issue 14); all optional.
    metric_k = forms.IntegerField(
        min_value=1,
        max_value=1000,
        initial=10,
        required=False,
        label="Draw depth (nDCG cut-off)",
    )
    balance_pairs = forms.BooleanField(
        required=False, label="Balance system pairs within each cell"
    )
    max_per_query = forms.IntegerField(
        min_value=1, required=False, label="At most this many contests per query"
    )
    verdict_rule = forms.ChoiceField(
        choices=[
            ("majority", "strict majority of all picks"),
            ("plurality", "plurality"),
        ],
        initial="majority",
        required=False,
    )
    stopping_rule = forms.ChoiceField(
        choices=[
            ("fixed", "fixed sample"),
            ("obrien_fleming", "O'Brien-Fleming alpha spending"),
            ("pocock", "Pocock alpha spending"),
        ],
        initial="fixed",
        required=False,
        label="Stopping rule (registered when the study opens)",
    )
    lease_minutes = forms.IntegerField(
        min_value=1, max_value=services.MAX_LEASE_MINUTES, initial=30
    )
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
            "metric_k": data["metric_k"] or services.METRIC_K,
            "controls": sampling.Controls(
                balance_pairs=data["balance_pairs"],
                max_per_query=data["max_per_query"],
                # A zero concordant quota means the reference's design: no controls.
                concordant_controls=data["quota_concordant"] > 0,
            ),
        }


@login_required
def study_list(request: HttpRequest) -> HttpResponse:
    """Studies; staff create one in two steps: preview the sampling, then create."""
    require_reader(request)
    form = StudyForm(request.POST or None)
    preview = None
    if request.method == "POST":
        require_staff(request)
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
                        verdict_rule=data["verdict_rule"] or "majority",
                        analysis_plan={
                            "stopping_rule": {"kind": data["stopping_rule"] or "fixed"}
                        },
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
    require_reader(request)
    study = selectors.study_get(user=request.user, study_id=study_id)
    releases = []
    if request.user.is_staff:
        services.releases_reap_stale(study=study)  # a lost build shows as failed
        releases = list(selectors.release_list(study=study))
    building = (ReleaseStatus.PENDING, ReleaseStatus.RUNNING)
    staff_only = {}
    if request.user.is_staff:
        staff_only = {
            "acceptance": acceptance.study_acceptance(study=study),
            "thresholds": acceptance.study_thresholds(study=study),
            "gold_items": study.gold_items.count(),
        }
    return render(
        request,
        "annotation/study_detail.html",
        {
            "study": study,
            "progress": selectors.study_progress(study=study),
            "releases": releases,
            "releases_building": any(r.status in building for r in releases),
            **staff_only,
        },
    )


@login_required
@require_POST
def annotator_exclude(
    request: HttpRequest, study_id: int, user_id: int
) -> HttpResponse:
    """Exclude an annotator from a study (staff, with a reason): their reviews become
    invalid and their contests re-open for others."""
    require_staff(request)
    study = selectors.study_get(user=request.user, study_id=study_id)
    user = selectors.annotator_accounts().filter(pk=user_id).first()
    if user is None:
        raise Http404("no such annotator")
    try:
        counts = services.annotator_exclude(
            study=study,
            annotator=user,
            reason=request.POST.get("reason", ""),
            excluded_by=request.user,
        )
        messages.success(
            request,
            f"{user.username!r} excluded: {counts['reviews']} reviews invalid, "
            f"{counts['contests']} contests re-open for other annotators.",
        )
    except ApplicationError as exc:
        messages.error(request, exc.message)
    return redirect("annotation:study-detail", study_id=study.pk)


@login_required
@require_POST
def study_gold(request: HttpRequest, study_id: int) -> HttpResponse:
    """Gold items of a study (staff): the mixing rate, items from the qrels, or one
    item entered by hand (query id, document id, expected grade)."""
    require_staff(request)
    study = selectors.study_get(user=request.user, study_id=study_id)
    action = request.POST.get("action")
    try:
        if action == "rate":
            try:
                rate = float(request.POST.get("rate", ""))
            except ValueError as exc:
                raise ApplicationError("the gold rate is a number") from exc
            services.study_gold_rate_set(study=study, rate=rate)
            messages.success(request, f"Gold rate set to {study.gold_rate:g}.")
        elif action == "qrels":
            made = services.gold_items_from_qrels(study=study, created_by=request.user)
            messages.success(request, f"{len(made)} gold items from the qrels.")
        elif action == "add":
            query, document = selectors.query_document_for_gold(
                study=study,
                query_id=request.POST.get("query", ""),
                doc_id=request.POST.get("document", ""),
            )
            try:
                grade = int(request.POST.get("grade", ""))
            except ValueError as exc:
                raise ApplicationError("the expected grade is a whole number") from exc
            services.gold_item_add(
                study=study,
                query=query,
                document=document,
                expected_grade=grade,
                created_by=request.user,
            )
            messages.success(request, "Gold item saved.")
    except ApplicationError as exc:
        messages.error(request, exc.message)
    return redirect("annotation:study-detail", study_id=study.pk)


@login_required
@require_POST
def study_action(request: HttpRequest, study_id: int, action: str) -> HttpResponse:
    """Close or (re)open a study."""
    require_staff(request)
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

    # Empty with a study: the observed rate of its LLM-panel pilot.
    true_rate = forms.FloatField(
        min_value=0.0, max_value=1.0, initial=0.62, required=False
    )
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
    A study fills a missing chance rate and counted share from its contests, and a
    missing true rate from its LLM-panel pilot."""
    require_reader(request)
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


# ---------------------------------------------------------------------------- accounts


class AnnotatorCreateForm(forms.Form):
    username = forms.CharField(max_length=150)
    email = forms.EmailField(required=False)
    study = forms.ModelChoiceField(
        queryset=Study.objects.order_by("-created_at"),
        required=False,
        help_text="invite the new annotator to this study at once",
    )


class AnnotatorInviteForm(forms.Form):
    annotator = forms.ModelChoiceField(queryset=None)
    study = forms.ModelChoiceField(queryset=Study.objects.order_by("-created_at"))

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.fields["annotator"].queryset = selectors.annotator_accounts()


@login_required
def annotator_list(request: HttpRequest) -> HttpResponse:
    """Staff: annotator accounts and their studies; create one, invite one to a
    study, or issue a one-time set-password link (shown here, never e-mailed).

    Inviting never touches a password. A new account has no usable password until
    its owner opens the link.
    """
    require_staff(request)
    create = AnnotatorCreateForm(
        request.POST if request.POST.get("action") == "create" else None,
        prefix="create",
    )
    invite = AnnotatorInviteForm(
        request.POST if request.POST.get("action") == "invite" else None,
        prefix="invite",
    )
    link = None
    if request.method == "POST":
        action = request.POST.get("action")
        try:
            if action == "create" and create.is_valid():
                data = create.cleaned_data
                user, _generated = services.annotator_create(
                    username=data["username"],
                    email=data["email"] or "",
                    study=data["study"],
                    unusable_password=True,
                )
                link = (user, services.annotator_password_link(user=user))
                messages.success(request, f"Annotator {user.username!r} created.")
            elif action == "invite" and invite.is_valid():
                data = invite.cleaned_data
                services.study_member_add(
                    study=data["study"], annotator=data["annotator"]
                )
                messages.success(
                    request,
                    f"{data['annotator'].username!r} invited to study "
                    f"{data['study'].pk}; their password is unchanged.",
                )
                return redirect("annotation:annotator-list")
            elif action == "link":
                user = (
                    selectors.annotator_accounts()
                    .filter(pk=request.POST.get("user"))
                    .first()
                )
                if user is None:
                    raise Http404("no such annotator")
                link = (user, services.annotator_password_link(user=user))
        except ApplicationError as exc:
            messages.error(request, exc.message)
    return render(
        request,
        "annotation/annotators.html",
        {
            "annotators": selectors.annotator_accounts_with_studies(),
            "create": create,
            "invite": invite,
            "link": link and (link[0], request.build_absolute_uri(link[1])),
        },
    )


class SetPasswordView(auth_views.PasswordResetConfirmView):
    """The one-time set-password page of an annotator link (Django's reset
    confirmation: token check, SetPasswordForm with AUTH_PASSWORD_VALIDATORS)."""

    template_name = "annotation/set_password.html"
    success_url = reverse_lazy("annotation:set-password-done")

    def get_user(self, uidb64: str) -> object | None:
        user = super().get_user(uidb64)
        # Links are for annotator accounts only; a staff uid never validates.
        if user is not None and (user.is_staff or user.is_superuser):
            return None
        return user


def set_password_done(request: HttpRequest) -> HttpResponse:
    return render(request, "annotation/set_password_done.html")


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
    require_staff(request)
    study = selectors.study_get(user=request.user, study_id=study_id)
    systems = sorted(set(study.systems.values_list("name", flat=True)))
    exclude = [s for s in request.GET.getlist("exclude_system") if s in systems]
    focus = request.GET.get("system", "")
    focus = focus if focus in systems and focus not in exclude else ""
    severity = request.GET.get("severity") == "1"
    error = None
    report: dict = {}
    names: dict[str, str] = {}
    try:
        report, names = services.study_report_requested(
            study=study,
            exclude_systems=exclude,
            focus_system=focus,
            severity=severity,
        )
    except ApplicationError as exc:
        error = exc.message
    figures = {}
    annotators = _flag_rows(report, names) if report else []
    if report:
        query = request.GET.urlencode()
        figures = {
            s["figure"].name: s
            for s in shown(
                report_figures(report=report, annotators=annotators),
                lambda name, fmt: (
                    reverse("annotation:report-figure", args=[study.pk, name, fmt])
                    + (f"?{query}" if query else "")
                ),
            )
        }
    return render(
        request,
        "annotation/study_report.html",
        {
            "study": study,
            "report": report,
            "error": error,
            "figures": figures,
            "annotators": annotators,
            "systems": systems,
            "excluded": exclude,
            "focus": focus,
            "slices": _slice_rows(report),
            "severity": severity,
            "severities": sorted(
                (
                    (names.get(key, key), value)
                    for key, value in report.get("severity", {})
                    .get("severity", {})
                    .items()
                ),
                key=lambda row: -row[1],
            ),
            # Sections other apps add to the report (e.g. LLM panels), shown last.
            "section_templates": [
                s.template
                for s in report_sections.sections()
                if s.template and s.key in report
            ],
        },
    )


@login_required
def report_figure(
    request: HttpRequest, study_id: int, name: str, fmt: str
) -> HttpResponse:
    """One report figure (same ``exclude_system`` subset as the page) as SVG, PDF,
    PNG or CSV (staff only, like the report)."""
    require_staff(request)
    study = selectors.study_get(user=request.user, study_id=study_id)
    systems = set(study.systems.values_list("name", flat=True))
    exclude = [s for s in request.GET.getlist("exclude_system") if s in systems]
    try:
        report, names = services.study_report_build(
            study=study, exclude_systems=exclude
        )
    except ApplicationError as exc:
        raise Http404(exc.message) from exc
    figures = report_figures(report=report, annotators=_flag_rows(report, names))
    return figure_response(figures, name, fmt)


@login_required
@require_POST
def release_create(request: HttpRequest, study_id: int) -> HttpResponse:
    """Queue the next numbered release of a study (built by a worker)."""
    require_staff(request)
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
    require_staff(request)
    study = selectors.study_get(user=request.user, study_id=study_id)
    release = selectors.release_get(study=study, number=number)
    try:
        services.release_retry(release=release)
        messages.success(request, f"Release {number} is being built again.")
    except ApplicationError as exc:
        messages.error(request, exc.message)
    return redirect("annotation:study-detail", study_id=study.pk)


@login_required
def release_index(request: HttpRequest) -> HttpResponse:
    """Every release of every study on one page (staff only)."""
    require_staff(request)
    releases = Paginator(selectors.release_list_all(user=request.user), 50).get_page(
        request.GET.get("page")
    )
    return render(request, "annotation/release_list.html", {"releases": releases})


@login_required
def release_download(request: HttpRequest, study_id: int, number: int) -> HttpResponse:
    """The zip of a finished release."""
    require_staff(request)
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
