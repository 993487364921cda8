"""HTML pages of the panels app (staff launch; reviewers read).

The study's panel page picks a panel and a mode, shows the estimate (calls, tokens,
time) before anything is asked, and launches; the run page shows live progress.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from annotation.selectors import rubric_current, study_get
from benchmarks.access import require_reader, require_staff
from rcp_platform.exceptions import ApplicationError

from . import selectors, services
from .models import PanelMode


@login_required
def study_panels(request: HttpRequest, study_id: int) -> HttpResponse:
    """Pick a panel and a mode (``?panel=&mode=``): the estimate, then launch."""
    require_reader(request)
    study = study_get(user=request.user, study_id=study_id)
    panels = list(selectors.panel_list(user=request.user))
    mode = request.GET.get("mode", PanelMode.LISTS)
    mode = mode if mode in PanelMode.values else PanelMode.LISTS
    chosen = next((p for p in panels if str(p.pk) == request.GET.get("panel")), None)
    estimate, error = None, None
    if chosen is not None:
        try:
            questions = (
                list(rubric_current(study=study).questions)
                if mode == PanelMode.RUBRIC
                else []
            )
            estimate = selectors.run_estimate(
                study=study, panel=chosen, mode=mode, questions=questions
            )
        except ApplicationError as exc:
            error = exc.message
    runs = selectors.run_list(study=study).order_by("panel__name", "mode")
    return render(
        request,
        "panels/study_panels.html",
        {
            "study": study,
            "panels": panels,
            "chosen": chosen,
            "mode": mode,
            "modes": PanelMode.choices,
            "estimate": estimate,
            "error": error,
            "runs": runs,
        },
    )


@login_required
@require_POST
def run_launch(request: HttpRequest, study_id: int) -> HttpResponse:
    """Create (or resume) the run of the chosen panel and mode, queued for a worker."""
    require_staff(request)
    study = study_get(user=request.user, study_id=study_id)
    try:
        panel = selectors.panel_get(ref=request.POST.get("panel", ""))
        run = services.panel_run_create(
            study=study,
            panel=panel,
            mode=request.POST.get("mode", PanelMode.LISTS),
            created_by=request.user,
        )
    except ApplicationError as exc:
        messages.error(request, exc.message)
        return redirect("panels:study-panels", study_id=study.pk)
    messages.success(request, f"Run {run.pk} queued ({run.total} requests).")
    return redirect("panels:run-detail", run_id=run.pk)


def _run_context(request: HttpRequest, run_id: int) -> dict:
    require_reader(request)
    run = selectors.run_get(run_id=run_id, user=request.user)
    return {"run": run, "progress": selectors.run_progress(run=run)}


@login_required
def run_detail(request: HttpRequest, run_id: int) -> HttpResponse:
    return render(request, "panels/run_detail.html", _run_context(request, run_id))


@login_required
def run_progress_fragment(request: HttpRequest, run_id: int) -> HttpResponse:
    """The progress block alone; the run page re-fetches it every 2 s."""
    return render(request, "panels/_progress.html", _run_context(request, run_id))


@login_required
@require_POST
def run_pause(request: HttpRequest, run_id: int) -> HttpResponse:
    require_staff(request)
    run = selectors.run_get(run_id=run_id, user=request.user)
    try:
        services.panel_run_pause(run=run)
    except ApplicationError as exc:
        messages.error(request, exc.message)
    return redirect("panels:run-detail", run_id=run.pk)
