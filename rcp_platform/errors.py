"""What a server error shows, and to whom.

With DEBUG on, Django answers an uncaught exception with its technical 500 page
(``django.views.debug.technical_500_response``, not ``handler500``): the traceback
with every frame's local variables, where an annotator read internal contest and
user ids and the study name (issue 10, item 4). This reporter keeps that page for
staff (developers running ``make run``) and gives everyone else a plain message. The
error is still logged in full (``django.request``), and the reports mailed to admins
(``is_email``) keep every detail.
"""

from __future__ import annotations

from typing import Any

from django.views.debug import ExceptionReporter

PLAIN_MESSAGE = (
    "Server error (500). It was logged; please tell the study's organisers what you "
    "were doing."
)


class StaffOnlyExceptionReporter(ExceptionReporter):
    """Django's reporter for staff and e-mails; a plain message for anyone else."""

    def _plain(self) -> bool:
        if self.is_email:
            return False
        user: Any = getattr(self.request, "user", None)
        return not (
            user is not None
            and user.is_authenticated
            and (user.is_staff or user.is_superuser)
        )

    def get_traceback_html(self) -> str:
        if self._plain():
            return f"<!doctype html><title>Server error</title><p>{PLAIN_MESSAGE}</p>"
        return super().get_traceback_html()

    def get_traceback_text(self) -> str:
        if self._plain():
            return PLAIN_MESSAGE + "\n"
        return super().get_traceback_text()
