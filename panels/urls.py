"""Routes of the panels app: HTML pages (namespace ``panels``) and API v1."""

from django.urls import path

from . import apis, views

app_name = "panels"
urlpatterns = [
    path("studies/<int:study_id>/", views.study_panels, name="study-panels"),
    path("studies/<int:study_id>/launch", views.run_launch, name="run-launch"),
    path("runs/<int:run_id>/", views.run_detail, name="run-detail"),
    path(
        "runs/<int:run_id>/progress", views.run_progress_fragment, name="run-progress"
    ),
    path("runs/<int:run_id>/pause", views.run_pause, name="run-pause"),
]

# Mounted under /api/v1/ by rcp_platform/urls.py (namespace ``panels-api``).
api_urlpatterns = [
    path("panels", apis.PanelListApi.as_view(), name="panel-list"),
    path("panel-runs", apis.RunListApi.as_view(), name="run-list"),
    path("panel-runs/estimate", apis.RunEstimateApi.as_view(), name="run-estimate"),
    path("panel-runs/<int:run_id>", apis.RunDetailApi.as_view(), name="run-detail"),
    path("panel-runs/<int:run_id>/pause", apis.RunPauseApi.as_view(), name="run-pause"),
]
