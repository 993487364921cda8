"""Routes of the calibration app: HTML pages (namespace ``calibration``) and API v1."""

from django.urls import path

from . import apis, views

app_name = "calibration"
urlpatterns = [
    path("", views.fit_index, name="index"),
    path("fits/new", views.fit_create, name="fit-create"),
    path("fits/<int:pk>/", views.fit_detail, name="fit-detail"),
    path("fits/<int:pk>/retry", views.fit_retry, name="fit-retry"),
    path(
        "fits/<int:pk>/figures/<slug:name>.<str:fmt>",
        views.fit_figure,
        name="fit-figure",
    ),
    path("leaderboard/", views.leaderboard, name="leaderboard"),
    path(
        "leaderboard/figures/<slug:name>.<str:fmt>",
        views.leaderboard_figure,
        name="leaderboard-figure",
    ),
]

# Mounted under /api/v1/ by rcp_platform/urls.py (namespace ``calibration-api``).
api_urlpatterns = [
    path("calibration/fits", apis.FitListApi.as_view(), name="fit-list"),
    path("calibration/fits/create", apis.FitCreateApi.as_view(), name="fit-create"),
    path("calibration/fits/<int:pk>", apis.FitDetailApi.as_view(), name="fit-detail"),
    path(
        "calibration/fits/<int:pk>/queries",
        apis.FitQueryListApi.as_view(),
        name="fit-query-list",
    ),
    path(
        "calibration/fits/<int:pk>/retry", apis.FitRetryApi.as_view(), name="fit-retry"
    ),
    path(
        "calibration/fits/<int:pk>/abilities",
        apis.AbilityListApi.as_view(),
        name="ability-list",
    ),
    path(
        "calibration/fits/<int:pk>/gains",
        apis.GainsExportApi.as_view(),
        name="gains-export",
    ),
    path("calibration/leaderboard", apis.LeaderboardApi.as_view(), name="leaderboard"),
]
