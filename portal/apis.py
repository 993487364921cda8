"""Site-wide API: the index of API v1 and obtaining an API token (see
portal/tokens.py)."""

from __future__ import annotations

from typing import Any

from django.urls import URLPattern, URLResolver, get_resolver, reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.authtoken.views import ObtainAuthToken
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from .tokens import token_expires_at, token_obtain


class TokenObtainApi(ObtainAuthToken):
    """POST username and password: the account's API token and when it expires."""

    permission_classes: list[Any] = []

    def post(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        token = token_obtain(user=serializer.validated_data["user"])
        expires = token_expires_at(token).isoformat(timespec="seconds")
        return Response({"token": token.key, "expires": expires})


API_PREFIX = "api/v1/"


def _methods(pattern: URLPattern) -> list[str]:
    view = getattr(pattern.callback, "view_class", None)
    if view is None:
        return ["GET"]
    return [
        m.upper()
        for m in view.http_method_names
        if m not in ("options", "head") and hasattr(view, m)
    ]


def _summary(pattern: URLPattern) -> str:
    """The view's docstring up to its first blank line, else its route name in
    words ("job-cancel" -> "job cancel")."""
    view = getattr(pattern.callback, "view_class", pattern.callback)
    doc = (view.__doc__ or "").strip().split("\n\n")[0]
    return " ".join(doc.split()) or (pattern.name or "").replace("-", " ")


def api_endpoints() -> list[dict[str, Any]]:
    """Every route under /api/v1/ as {path, name, methods, summary}, in URLconf
    order; read from the live URLconf, so the index cannot drift from the routes."""
    found = []
    for entry in get_resolver().url_patterns:
        prefix = str(entry.pattern)
        if not prefix.startswith(API_PREFIX):
            continue
        if isinstance(entry, URLResolver):
            children = [(p, entry.namespace) for p in entry.url_patterns]
        else:
            children = [(entry, None)]
            prefix = ""
        for pattern, namespace in children:
            if not isinstance(pattern, URLPattern):
                continue
            found.append(
                {
                    "path": "/" + prefix + str(pattern.pattern),
                    "name": f"{namespace}:{pattern.name}"
                    if namespace
                    else pattern.name,
                    "methods": _methods(pattern),
                    "summary": _summary(pattern),
                }
            )
    return found


class ApiIndexApi(APIView):
    """GET: the index of API v1 (every endpoint with its methods and purpose), the
    OpenAPI schema and the interactive docs. Public: it lists routes, not data."""

    permission_classes: list[Any] = []
    authentication_classes: list[Any] = []

    @extend_schema(responses={200: OpenApiTypes.OBJECT})
    def get(self, request: Request) -> Response:
        return Response(
            {
                "version": "v1",
                "schema": request.build_absolute_uri(reverse("schema")),
                "docs": request.build_absolute_uri(reverse("api-docs")),
                "auth": "Authorization: Token KEY (POST /api/v1/auth/token) or a "
                "session cookie",
                "endpoints": api_endpoints(),
            }
        )
