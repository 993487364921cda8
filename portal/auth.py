"""Login throttling for every password login (login page, admin, API token).

Annotator accounts are many and their passwords travel by CSV and e-mail, so guessing
is the main threat to a study. After ``LOGIN_THROTTLE_ATTEMPTS`` failed logins for one
(username, client address) within ``LOGIN_THROTTLE_WINDOW`` seconds, or four times as
many from one address, every further attempt fails, the right password included,
until the window passes. Counters live in the cache (shared by all workers when
``CACHE_URL`` points at Redis; per process with the local-memory default).
"""

from __future__ import annotations

import hashlib
from typing import Any

from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.core.cache import cache
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest

PER_ADDRESS_FACTOR = 4


def _address(request: HttpRequest | None) -> str:
    if request is None:
        return "-"
    return str(request.META.get("REMOTE_ADDR") or "-")


def _keys(request: HttpRequest | None, username: str | None) -> tuple[str, str]:
    address = _address(request)
    who = hashlib.sha256(f"{(username or '').lower()}|{address}".encode()).hexdigest()
    where = hashlib.sha256(address.encode()).hexdigest()
    return f"login-fail:user:{who[:32]}", f"login-fail:addr:{where[:32]}"


def _limits() -> tuple[int, int, int]:
    attempts = int(getattr(settings, "LOGIN_THROTTLE_ATTEMPTS", 5))
    window = int(getattr(settings, "LOGIN_THROTTLE_WINDOW", 300))
    return attempts, attempts * PER_ADDRESS_FACTOR, window


def login_throttled(request: HttpRequest | None, username: str | None) -> bool:
    """True while this username/address pair, or this address, is locked out."""
    per_user, per_address, _window = _limits()
    user_key, address_key = _keys(request, username)
    return (
        cache.get(user_key, 0) >= per_user or cache.get(address_key, 0) >= per_address
    )


def _record_failure(request: HttpRequest | None, username: str | None) -> None:
    _per_user, _per_address, window = _limits()
    for key in _keys(request, username):
        # add() starts the window; incr() never extends it.
        if not cache.add(key, 1, timeout=window):
            try:
                cache.incr(key)
            except ValueError:
                cache.add(key, 1, timeout=window)


class ThrottledModelBackend(ModelBackend):
    """Django's ModelBackend with failed-login throttling (see module docstring)."""

    def authenticate(
        self,
        request: HttpRequest | None,
        username: str | None = None,
        password: str | None = None,
        **kwargs: Any,
    ) -> Any:
        if username is None:
            username = kwargs.get("username")
        if login_throttled(request, username):
            # PermissionDenied stops the backend chain: the login simply fails.
            raise PermissionDenied("too many failed logins; try again later")
        user = super().authenticate(
            request, username=username, password=password, **kwargs
        )
        if user is None:
            _record_failure(request, username)
        return user
