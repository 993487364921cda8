"""Routes of the annotation app: HTML pages (namespace ``annotation``) and API v1."""

from django.urls import path

from . import apis, views

app_name = "annotation"
urlpatterns = [
    path("", views.home, name="home"),
    path("studies/", views.study_list, name="study-list"),
    path("studies/power", views.study_power, name="study-power"),
    path("releases/", views.release_index, name="release-list"),
    path("annotators/", views.annotator_list, name="annotator-list"),
    path(
        "set-password/<uidb64>/<token>/",
        views.SetPasswordView.as_view(),
        name="set-password",
    ),
    path("set-password/done/", views.set_password_done, name="set-password-done"),
    path("studies/<int:study_id>/", views.study_detail, name="study-detail"),
    path("studies/<int:study_id>/grading", views.grading, name="grading"),
    path("studies/<int:study_id>/report", views.study_report, name="study-report"),
    path(
        "studies/<int:study_id>/report/figures/<slug:name>.<str:fmt>",
        views.report_figure,
        name="report-figure",
    ),
    path(
        "studies/<int:study_id>/releases",
        views.release_create,
        name="release-create",
    ),
    path(
        "studies/<int:study_id>/releases/<int:number>.zip",
        views.release_download,
        name="release-download",
    ),
    path(
        "studies/<int:study_id>/releases/<int:number>/retry",
        views.release_retry,
        name="release-retry",
    ),
    path(
        "studies/<int:study_id>/annotators/<int:user_id>/exclude",
        views.annotator_exclude,
        name="annotator-exclude",
    ),
    path("studies/<int:study_id>/gold", views.study_gold, name="study-gold"),
    path(
        "studies/<int:study_id>/open",
        views.study_action,
        {"action": "open"},
        name="study-open",
    ),
    path(
        "studies/<int:study_id>/close",
        views.study_action,
        {"action": "close"},
        name="study-close",
    ),
]

# Mounted under /api/v1/ by rcp_platform/urls.py (namespace ``annotation-api``).
api_urlpatterns = [
    path("studies", apis.StudyListApi.as_view(), name="study-list"),
    path("studies/plan", apis.StudyPlanApi.as_view(), name="study-plan"),
    path("studies/power", apis.StudyPowerApi.as_view(), name="study-power"),
    path("studies/<int:study_id>", apis.StudyDetailApi.as_view(), name="study-detail"),
    path(
        "studies/<int:study_id>/plan",
        apis.StudyAnalysisPlanApi.as_view(),
        name="study-analysis-plan",
    ),
    path(
        "studies/<int:study_id>/report",
        apis.StudyReportApi.as_view(),
        name="study-report",
    ),
    path("studies/<int:study_id>/open", apis.StudyOpenApi.as_view(), name="study-open"),
    path(
        "studies/<int:study_id>/close",
        apis.StudyCloseApi.as_view(),
        name="study-close",
    ),
    path(
        "studies/<int:study_id>/annotators",
        apis.StudyMemberListApi.as_view(),
        name="study-members",
    ),
    path(
        "studies/<int:study_id>/assignments/next",
        apis.AssignmentNextApi.as_view(),
        name="assignment-next",
    ),
    path(
        "assignments/<int:assignment_id>",
        apis.AssignmentDetailApi.as_view(),
        name="assignment-detail",
    ),
    path(
        "assignments/<int:assignment_id>/draft",
        apis.AssignmentDraftApi.as_view(),
        name="assignment-draft",
    ),
    path(
        "assignments/<int:assignment_id>/submit",
        apis.AssignmentSubmitApi.as_view(),
        name="assignment-submit",
    ),
]
