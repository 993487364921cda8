"""Routes of the judging app: HTML pages (namespace ``judging``) and API v1."""

from django.urls import path

from . import apis, views

app_name = "judging"
urlpatterns = [
    path("", views.job_list, name="job-list"),
    path("judges/new", views.judge_form, name="judge-create"),
    path("judges/<int:judge_id>/edit", views.judge_form, name="judge-edit"),
    path("jobs/<int:job_id>/", views.job_detail, name="job-detail"),
    path(
        "jobs/<int:job_id>/progress", views.job_progress_fragment, name="job-progress"
    ),
    path("jobs/<int:job_id>/<str:action>", views.job_action, name="job-action"),
    path("windows/<int:window_id>/", views.window_detail, name="window-detail"),
]

# Mounted under /api/v1/ by rcp_platform/urls.py (namespace ``judging-api``).
api_urlpatterns = [
    path("judges", apis.JudgeListApi.as_view(), name="judge-list"),
    path("jobs", apis.JobListApi.as_view(), name="job-list"),
    path("jobs/estimate", apis.JobEstimateApi.as_view(), name="job-estimate"),
    path("jobs/<int:job_id>", apis.JobDetailApi.as_view(), name="job-detail"),
    path("jobs/<int:job_id>/pause", apis.JobPauseApi.as_view(), name="job-pause"),
    path("jobs/<int:job_id>/cancel", apis.JobCancelApi.as_view(), name="job-cancel"),
    path("jobs/<int:job_id>/resume", apis.JobResumeApi.as_view(), name="job-resume"),
    path(
        "windows/<int:window_id>", apis.WindowDetailApi.as_view(), name="window-detail"
    ),
]
