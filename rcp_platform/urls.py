"""Root URLs: HTML pages per app, the API under /api/v1/, OpenAPI schema and docs."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from annotation import urls as annotation_urls
from benchmarks import urls as benchmarks_urls
from calibration import urls as calibration_urls
from judging import urls as judging_urls
from panels import urls as panels_urls
from portal import views as portal_views
from portal.apis import ApiIndexApi, TokenObtainApi

urlpatterns = [
    path("admin/", admin.site.urls),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path(
        # The split view serves its start-up script as a file: no inline script (CSP).
        "api/docs/",
        SpectacularSwaggerSplitView.as_view(url_name="schema"),
        name="api-docs",
    ),
    path("api/v1/", ApiIndexApi.as_view(), name="api-index"),
    path(
        "api/v1/auth/token",
        TokenObtainApi.as_view(),
        name="api-token",
    ),
    path("api/v1/", include((benchmarks_urls.api_urlpatterns, "benchmarks-api"))),
    path("api/v1/", include((judging_urls.api_urlpatterns, "judging-api"))),
    path("api/v1/", include((calibration_urls.api_urlpatterns, "calibration-api"))),
    path("api/v1/", include((annotation_urls.api_urlpatterns, "annotation-api"))),
    path("api/v1/", include((panels_urls.api_urlpatterns, "panels-api"))),
    path("benchmarks/", include("benchmarks.urls")),
    path("judging/", include("judging.urls")),
    path("calibration/", include("calibration.urls")),
    path("annotation/", include("annotation.urls")),
    path("panels/", include("panels.urls")),
    path("favicon.ico", portal_views.favicon, name="favicon"),
    path("", portal_views.home, name="home"),
]
