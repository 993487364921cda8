"""The one JSON error shape of every API response (DRF exception handler).

Every error response is ``{"message": str, "extra": {...}}``.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from rest_framework import exceptions
from rest_framework.response import Response

from .exceptions import ApplicationError


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """Map domain and framework errors to ``{"message", "extra"}``."""
    # Imported here: rest_framework.views imports the settings that name this module.
    from rest_framework.views import exception_handler as drf_exception_handler

    if isinstance(exc, ApplicationError):
        return Response(
            {"message": exc.message, "extra": exc.extra}, status=exc.status_code
        )
    if isinstance(exc, DjangoValidationError):
        exc = exceptions.ValidationError(
            exc.message_dict if hasattr(exc, "error_dict") else exc.messages
        )
    elif isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied()
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        response.data = {
            "message": "Validation error",
            "extra": {"fields": response.data},
        }
    else:
        detail = (
            response.data.get("detail", "") if isinstance(response.data, dict) else ""
        )
        response.data = {"message": str(detail), "extra": {}}
    return response
