"""API tokens with a lifetime, rotated on every password change (issue 10).

``POST /api/v1/auth/token`` (portal/apis.py) (username, password) answers ``{"token", "expires"}``:
the account's current token, or a fresh one when it has expired. A token is refused
``API_TOKEN_LIFETIME_S`` seconds after it was issued, with a message saying how to
get a new one. Changing an account's password deletes its token, whichever way the
password changed (admin, ``changepassword``, annotator re-password, password form).
"""

from __future__ import annotations

import functools
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, connection, transaction
from django.db.models.signals import pre_save
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from rest_framework.authentication import TokenAuthentication
from rest_framework.authtoken.models import Token
from rest_framework.exceptions import AuthenticationFailed

from benchmarks.rawsql import Columns


def token_expires_at(token: Token) -> datetime:
    return token.created + timedelta(seconds=settings.API_TOKEN_LIFETIME_S)


class ExpiringTokenAuthentication(TokenAuthentication):
    """DRF's token authentication, refusing tokens past their lifetime.

    The token and its user are read in one fixed statement: every API request
    authenticates, and the ORM spent longer compiling DRF's
    ``select_related("user").get(key=...)`` than the database spent running it.
    """

    def authenticate_credentials(self, key: str) -> tuple[Any, Token]:
        token_cols, user_cols = _token_columns()
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT {token_cols.sql}, {user_cols.sql} "
                f"FROM {Token._meta.db_table} t "
                f"JOIN {get_user_model()._meta.db_table} u ON u.id = t.user_id "
                "WHERE t.key = %s",
                [key],
            )
            row = cursor.fetchone()
        if row is None:
            raise AuthenticationFailed(_("Invalid token."))
        using = connection.alias
        token = token_cols.build(row, 0, using=using)
        user = user_cols.build(row, len(token_cols), using=using)
        token.user = user
        if not user.is_active:
            raise AuthenticationFailed(_("User inactive or deleted."))
        expired = token_expires_at(token)
        if timezone.now() >= expired:
            raise AuthenticationFailed(
                f"API token expired at {expired.isoformat(timespec='seconds')}; "
                "get a new one with POST /api/v1/auth/token (username, password)."
            )
        return user, token


@functools.cache
def _token_columns() -> tuple[Columns, Columns]:
    return Columns(Token, "t"), Columns(get_user_model(), "u")


@transaction.atomic
def token_obtain(*, user: Any) -> Token:
    """The account's token, replaced by a fresh one when it has expired. Locks the
    token row so two concurrent logins get the same token; when there is no row to
    lock (first login, or the other login deleted it), the loser of the insert race
    takes the winner's token instead of failing on the unique user."""
    token = Token.objects.select_for_update().filter(user=user).first()
    if token is not None and timezone.now() < token_expires_at(token):
        return token
    try:
        with transaction.atomic():  # a savepoint: the IntegrityError stays inside
            if token is not None:
                token.delete()
            return Token.objects.create(user=user)
    except IntegrityError:
        return Token.objects.get(user=user)


def _tokens_rotate_on_password_change(
    sender: Any, instance: Any, update_fields: Any = None, **kwargs: Any
) -> None:
    # A signal because passwords change through many doors (admin, changepassword,
    # the password-change view, annotator re-password) that all end in a save.
    if instance.pk is None or (
        update_fields is not None and "password" not in update_fields
    ):
        return
    stored = (
        sender.objects.filter(pk=instance.pk).values_list("password", flat=True).first()
    )
    if stored is not None and stored != instance.password:
        Token.objects.filter(user_id=instance.pk).delete()


pre_save.connect(
    _tokens_rotate_on_password_change,
    sender=get_user_model(),
    dispatch_uid="portal.tokens.rotate_on_password_change",
)
