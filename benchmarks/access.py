"""Who may read benchmark data: staff, and reviewers granted ``benchmarks.view_dataset``.

The bottom app owns the rule, so every domain app (and the DRF default permission)
applies the same one.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from rest_framework import permissions
from rest_framework.request import Request

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


def require_reader(request: Any) -> None:
    """Pages: PermissionDenied (403) unless the user may read benchmark data."""
    if not can_read_benchmarks(request.user):
        raise PermissionDenied


def require_staff(request: Any) -> None:
    """Pages: PermissionDenied (403) unless the user is staff."""
    if not request.user.is_staff:
        raise PermissionDenied


class IsStaffOrReviewerReadOnly(permissions.BasePermission):
    """Reads for staff and reviewers; writes for staff only."""

    def has_permission(self, request: Request, view: Any) -> bool:
        if request.method in permissions.SAFE_METHODS:
            return can_read_benchmarks(request.user)
        return bool(
            request.user and request.user.is_authenticated and request.user.is_staff
        )
