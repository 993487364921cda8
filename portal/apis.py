"""Site-wide API: obtaining an API token (see portal/tokens.py)."""

from __future__ import annotations

from typing import Any

from rest_framework.authtoken.views import ObtainAuthToken
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.settings import api_settings

from .tokens import token_expires_at, token_obtain


class TokenObtainApi(ObtainAuthToken):
    """POST username and password: the account's API token and when it expires."""

    permission_classes: list[Any] = []
    # ObtainAuthToken names DRF's plain parsers; the platform's refuse over-nested
    # JSON with a 400 (this endpoint is open to anyone).
    parser_classes = api_settings.DEFAULT_PARSER_CLASSES

    def post(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        token = token_obtain(user=serializer.validated_data["user"])
        expires = token_expires_at(token).isoformat(timespec="seconds")
        return Response({"token": token.key, "expires": expires})
