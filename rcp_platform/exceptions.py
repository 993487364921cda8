"""Domain errors. Services raise these; the API maps them to one JSON error shape."""

from __future__ import annotations

from django.http import Http404


class ApplicationError(Exception):
    """A domain rule was broken. ``message`` is shown to the user as-is."""

    status_code = 400

    def __init__(self, message: str, *, extra: dict | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.extra = extra or {}


class NotFoundError(ApplicationError, Http404):
    """Also an Http404, so HTML views that let it escape answer 404."""

    status_code = 404


class ConflictError(ApplicationError):
    status_code = 409
