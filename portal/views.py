"""Site-wide pages: the home page sends each role to its own start page."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.templatetags.static import static

from annotation.views import home as annotator_home
from benchmarks import selectors as benchmark_selectors
from benchmarks.access import can_read_benchmarks


@login_required
def home(request: HttpRequest) -> HttpResponse:
    """Staff and reviewers see the dashboard, annotators their studies, anyone
    else a page saying they have no access yet."""
    if can_read_benchmarks(request.user):
        datasets = benchmark_selectors.dataset_list(user=request.user)
        return render(request, "benchmarks/dashboard.html", {"datasets": datasets})
    if request.user.has_perm("annotation.annotate"):
        return annotator_home(request)
    return render(request, "portal/no_access.html", status=200)


def favicon(request: HttpRequest) -> HttpResponse:
    """/favicon.ico, which browsers ask for on their own: the site's SVG icon."""
    return HttpResponseRedirect(static("img/favicon.svg"))
