"""Routes of the benchmarks app: HTML pages (namespace ``benchmarks``) and API v1."""

from django.urls import path

from . import apis, views

app_name = "benchmarks"
urlpatterns = [
    path("datasets/", views.dataset_list, name="dataset-list"),
    path("datasets/new", views.dataset_import, name="dataset-import"),
    path("datasets/<int:pk>/runs/new", views.run_upload, name="run-upload"),
    path("uploads/<int:pk>/", views.upload_detail, name="upload-detail"),
    path(
        "uploads/<int:pk>/progress",
        views.upload_progress_fragment,
        name="upload-progress",
    ),
    path("datasets/<int:pk>/", views.dataset_detail, name="dataset-detail"),
    path(
        "datasets/<int:pk>/queries/<int:query_pk>/",
        views.query_detail,
        name="query-detail",
    ),
]

# Mounted under /api/v1/ by rcp_platform/urls.py (namespace ``benchmarks-api``).
api_urlpatterns = [
    path("datasets", apis.DatasetListApi.as_view(), name="dataset-list"),
    path(
        "datasets/<str:dataset>", apis.DatasetDetailApi.as_view(), name="dataset-detail"
    ),
    path(
        "datasets/<str:dataset>/queries", apis.QueryListApi.as_view(), name="query-list"
    ),
    path(
        "datasets/<str:dataset>/documents",
        apis.DocumentListApi.as_view(),
        name="document-list",
    ),
    path(
        "datasets/<str:dataset>/systems",
        apis.SystemListApi.as_view(),
        name="system-list",
    ),
    path("datasets/<str:dataset>/runs", apis.RunUploadApi.as_view(), name="run-upload"),
    path(
        "uploads/<int:upload_id>", apis.UploadDetailApi.as_view(), name="upload-detail"
    ),
]
