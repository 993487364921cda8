"""HTML pages of the calibration app: fits, the calibrate button, fit diagnostics
with plots, and the leaderboard with CI bars and the pair-separation matrix."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from benchmarks.access import require_reader
from benchmarks.selectors import dataset_get, dataset_list
from portal.figures import figure_response, shown
from rcp.irt import FLAG_TEXT
from rcp.ndcg import PROTOCOLS
from rcp_platform.exceptions import ApplicationError

from . import selectors, services
from .figures import QUESTIONS, fit_figures, leaderboard_figures
from .models import FitSource, FitStatus, RequestedMode

SHOW_FLAGGED = 100
INVALID_TEXT = "more than 5% of its windows in a stage were invalid, or an adaptive one"


@login_required
def fit_index(request: HttpRequest) -> HttpResponse:
    """Fits, newest first, and the calibrate form (staff) per dataset."""
    require_reader(request)
    services.fits_reap_stale()
    fits = Paginator(selectors.fit_list(user=request.user), 30).get_page(
        request.GET.get("page")
    )
    return render(
        request,
        "calibration/index.html",
        {
            "fits": fits,
            "datasets": dataset_list(user=request.user),
            "modes": RequestedMode.choices,
        },
    )


@login_required
@require_POST
def fit_create(request: HttpRequest) -> HttpResponse:
    """The calibrate button: queue a fit as a Celery job (staff only)."""
    if not request.user.is_staff:
        raise PermissionDenied
    try:
        datasets = [
            dataset_get(user=request.user, ref=ref)
            for ref in request.POST.getlist("dataset")
        ]
        fit = services.calibration_fit_request(
            datasets=datasets,
            mode=request.POST.get("mode", RequestedMode.AUTO),
            family=request.POST.get("family") or None,
            created_by=request.user,
        )
    except ApplicationError as exc:
        messages.error(request, exc.message)
        return redirect("calibration:index")
    messages.success(request, f"Calibration {fit.pk} queued.")
    return redirect("calibration:fit-detail", pk=fit.pk)


@login_required
def fit_detail(request: HttpRequest, pk: int) -> HttpResponse:
    """Items, item characteristic curves + gain curve, tau distribution,
    reliability diagram, criterion correlations and coverage of one fit."""
    require_reader(request)
    services.fits_reap_stale()
    fit = selectors.fit_get(user=request.user, pk=pk)
    diag = fit.diagnostics or {}
    context: dict = {
        "fit": fit,
        "datasets": sorted(d.name for d in fit.datasets.all()),
        "running": fit.status in (FitStatus.PENDING, FitStatus.RUNNING),
        "diag": diag,
    }
    items = fit.items or {}
    if items.get("gamma"):
        context["items"] = [
            (c, QUESTIONS.get(c, ""), g, b)
            for c, g, b in zip(
                items["criteria"], items["gamma"], items["beta"], strict=True
            )
        ]
    rel = diag.get("reliability")
    if rel and rel.get("bins"):
        context["per_criterion"] = list(
            zip(items.get("criteria", []), rel.get("per_criterion", []), strict=False)
        )
    query_rows = list(selectors.fit_query_rows(fit=fit))
    context["figures"] = {  # keyed for templates: "item-curves" -> item_curves
        s["figure"].name.replace("-", "_"): s
        for s in shown(
            fit_figures(fit=fit, taus=[r.tau for r in query_rows]),
            lambda name, fmt: reverse(
                "calibration:fit-figure", args=[fit.pk, name, fmt]
            ),
        )
    }
    flagged = [r for r in query_rows if r.flagged or not r.has_rubric]
    for r in flagged[:SHOW_FLAGGED]:
        codes = r.flags or ([] if r.has_rubric else ["no_rubric"])
        r.flag_texts = [(c, FLAG_TEXT.get(c, INVALID_TEXT)) for c in codes]
    context["query_rows"] = flagged[:SHOW_FLAGGED]
    context["n_flagged"] = len(flagged)
    context["can_retry"] = (
        request.user.is_staff
        and fit.status == FitStatus.FAILED
        and fit.source == FitSource.JUDGMENTS
    )
    context["abilities"] = list(selectors.ability_list(fit=fit)[:20])
    return render(request, "calibration/fit_detail.html", context)


@login_required
def fit_figure(request: HttpRequest, pk: int, name: str, fmt: str) -> HttpResponse:
    """One figure of the fit page as SVG, PDF, PNG or its data as CSV."""
    require_reader(request)
    fit = selectors.fit_get(user=request.user, pk=pk)
    taus = [r.tau for r in selectors.fit_query_rows(fit=fit)]
    return figure_response(fit_figures(fit=fit, taus=taus), name, fmt)


@login_required
@require_POST
def fit_retry(request: HttpRequest, pk: int) -> HttpResponse:
    """Run a failed fit again on a worker (staff only)."""
    if not request.user.is_staff:
        raise PermissionDenied
    fit = selectors.fit_get(user=request.user, pk=pk)
    try:
        services.calibration_fit_retry(fit=fit)
    except ApplicationError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Calibration {fit.pk} queued again.")
    return redirect("calibration:fit-detail", pk=fit.pk)


@login_required
def leaderboard(request: HttpRequest) -> HttpResponse:
    """Leaderboard of one dataset or a suite (?dataset=A&dataset=B&k=10&protocol=)."""
    require_reader(request)
    refs = request.GET.getlist("dataset")
    context: dict = {
        "protocols": sorted(PROTOCOLS),
        "all_datasets": dataset_list(user=request.user),
        "selected": refs,
        "k": request.GET.get("k", "10"),
        "protocol": request.GET.get("protocol", ""),
    }
    if refs:
        context.update(
            _board_or_error(request, refs, context["k"], context["protocol"])
        )
        if "board" in context:
            query = request.GET.urlencode()
            context["figures"] = shown(
                leaderboard_figures(board=context["board"], rows=context["rows"]),
                lambda name, fmt: (
                    reverse("calibration:leaderboard-figure", args=[name, fmt])
                    + f"?{query}"
                ),
            )
    return render(request, "calibration/leaderboard.html", context)


@login_required
def leaderboard_figure(request: HttpRequest, name: str, fmt: str) -> HttpResponse:
    """One leaderboard figure (same query string as the page) as SVG, PDF, PNG or
    CSV."""
    require_reader(request)
    refs = request.GET.getlist("dataset")
    context = _board_or_error(
        request, refs, request.GET.get("k", "10"), request.GET.get("protocol", "")
    )
    if "board" not in context:
        raise Http404(context.get("error", "no leaderboard"))
    figures = leaderboard_figures(board=context["board"], rows=context["rows"])
    return figure_response(figures, name, fmt)


def _board_or_error(
    request: HttpRequest, refs: list[str], k_text: str, protocol: str
) -> dict:
    """The leaderboard context of ``refs``, or ``error`` (and whether an
    unconverged fit was refused) when it cannot be computed."""
    try:
        k = int(k_text)
        datasets = [dataset_get(user=request.user, ref=r) for r in refs]
        board = selectors.leaderboard_compute(
            datasets=datasets,
            k=k,
            protocol=protocol or None,
            allow_unconverged=request.GET.get("allow_unconverged") == "1",
        )
    except ValueError:
        return {"error": "k must be a whole number"}
    except ApplicationError as exc:
        return {
            "error": exc.message,
            "unconverged_refused": exc.extra.get("status") == FitStatus.UNCONVERGED,
        }
    return _board_context(board)


def _board_context(board: dict) -> dict:
    systems = board["systems"]
    metrics = selectors.METRICS
    rows = []
    for s in systems:
        cells = []
        for m in metrics:
            rank, base = s["rank"][m], s["rank"]["rcp_ndcg"]
            cells.append(
                {
                    "value": s[m],
                    "ci": s[selectors.CI_KEYS[m]],
                    "rank": rank,
                    "change": 0 if rank is None or base is None else base - rank,
                }
            )
        rows.append(
            {"system": s["system"], "rank": s["rank"]["rcp_ndcg"], "cells": cells}
        )
    summary = [
        {
            "metric": selectors.METRIC_LABELS[m],
            "sensitivity": board["sensitivity"].get(m),
            "failure": board["failure_modes"].get(m),
            "separated": sum(
                1 for p in board["pairs"] if p["metric"] == m and p["separated"]
            ),
            "pairs": sum(1 for p in board["pairs"] if p["metric"] == m),
        }
        for m in metrics
    ]
    return {
        "board": board,
        "rows": rows,
        "summary": summary,
    }
