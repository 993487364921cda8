"""API plumbing shared by every app: permissions and the one JSON error shape.

Every error response is ``{"message": str, "extra": {...}}``.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from rest_framework import exceptions, permissions
from rest_framework.request import Request
from rest_framework.response import Response

from .exceptions import ApplicationError

REVIEW_PERMISSION = "benchmarks.view_dataset"


def can_read_benchmarks(user: Any) -> bool:
    """Staff, and users granted ``benchmarks.view_dataset`` (reviewers), may read.

    Annotators are deliberately not granted it: they see nothing of the staff API.
    """
    return bool(
        user
        and user.is_authenticated
        and user.is_active
        and (user.is_staff or user.has_perm(REVIEW_PERMISSION))
    )


class IsStaffOrReviewerReadOnly(permissions.BasePermission):
    """Reads for staff and reviewers; writes for staff only."""

    def has_permission(self, request: Request, view: Any) -> bool:
        if request.method in permissions.SAFE_METHODS:
            return can_read_benchmarks(request.user)
        return bool(
            request.user and request.user.is_authenticated and request.user.is_staff
        )


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
