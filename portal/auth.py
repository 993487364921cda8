"""Login throttling for every password login (login page, admin, API token).

Annotator accounts are many and their passwords travel by CSV and e-mail, so guessing
is the main threat to a study. Two counters of failed logins, each over
``LOGIN_THROTTLE_WINDOW`` seconds:

- per (client address, username): ``LOGIN_THROTTLE_ATTEMPTS`` (one guesser, one
  account);
- per username, from any address: ``LOGIN_THROTTLE_USER_ATTEMPTS`` (a guesser
  spread over many addresses, or many users behind one proxy).

Past either limit every attempt at *that username* fails, the right password
included, until the window passes. There is no per-address limit: made-up usernames
from one address (or everyone behind one proxy) never block a correct password for
another username.

Counters live in the default cache. With several web processes it must be shared
(``CACHE_URL=redis://...``; ``check --deploy`` warns about the per-process
default). An attempt takes its place in the counters *before* the password is
checked (atomic increments), so concurrent guesses in several processes cannot
slip past the limit; a successful login gives its place back.

The client address is ``REMOTE_ADDR`` unless ``TRUSTED_PROXY_HEADER`` names the
header a reverse proxy sets (e.g. ``X-Forwarded-For``): then the address
``TRUSTED_PROXY_COUNT`` entries from its right end, the one the outermost trusted
proxy saw. Off by default, since without such a proxy the header is whatever the
client sent.
"""

from __future__ import annotations

import hashlib
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.core.cache import cache
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest


def client_address(request: HttpRequest | None) -> str:
    """The client's address: from the trusted proxy header when configured (and the
    request came through the proxies), else ``REMOTE_ADDR``."""
    if request is None:
        return "-"
    header = getattr(settings, "TRUSTED_PROXY_HEADER", "")
    if header:
        meta = "HTTP_" + header.upper().replace("-", "_")
        hops = [h.strip() for h in request.META.get(meta, "").split(",") if h.strip()]
        count = max(1, int(getattr(settings, "TRUSTED_PROXY_COUNT", 1)))
        if len(hops) >= count:
            return hops[-count]
    return str(request.META.get("REMOTE_ADDR") or "-")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _keys(request: HttpRequest | None, username: str) -> tuple[str, str]:
    name = username.strip().lower()
    pair = f"login-fail:pair:{_digest(f'{client_address(request)}|{name}')}"
    return pair, f"login-fail:user:{_digest(name)}"


def _limits() -> tuple[int, int, int]:
    per_pair = int(getattr(settings, "LOGIN_THROTTLE_ATTEMPTS", 5))
    per_user = int(getattr(settings, "LOGIN_THROTTLE_USER_ATTEMPTS", 4 * per_pair))
    return per_pair, per_user, int(getattr(settings, "LOGIN_THROTTLE_WINDOW", 300))


def _increment(key: str, window: int) -> int:
    """Atomically add one to ``key``; the first increment starts the window and later
    ones never extend it."""
    if cache.add(key, 1, timeout=window):
        return 1
    try:
        count = int(cache.incr(key))
    except ValueError:  # expired between add() and incr()
        cache.add(key, 1, timeout=window)
        return 1
    if count == 1:
        # The key expired just before incr(), which recreated it without expiry.
        cache.touch(key, window)
    return count


def _decrement(key: str) -> None:
    try:
        cache.decr(key)
    except ValueError:  # expired meanwhile: nothing to give back
        pass


def _reserve(pair_key: str, user_key: str) -> bool:
    """Take a place for one attempt in both counters; False (and nothing taken) when
    either is full."""
    per_pair, per_user, window = _limits()
    if _increment(pair_key, window) > per_pair:
        _decrement(pair_key)
        return False
    if _increment(user_key, window) > per_user:
        _decrement(user_key)
        _decrement(pair_key)
        return False
    return True


def login_throttled(request: HttpRequest | None, username: str) -> bool:
    """True while this username is locked for this client (read-only)."""
    per_pair, per_user, _window = _limits()
    pair_key, user_key = _keys(request, username)
    return cache.get(pair_key, 0) >= per_pair or cache.get(user_key, 0) >= per_user


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
            username = kwargs.get(get_user_model().USERNAME_FIELD)
        if username is None or password is None:
            return None
        pair_key, user_key = _keys(request, str(username))
        if not _reserve(pair_key, user_key):
            # PermissionDenied stops the backend chain: the login simply fails.
            raise PermissionDenied("too many failed logins; try again later")
        user = super().authenticate(
            request, username=username, password=password, **kwargs
        )
        if user is not None:
            # A success is not a failure: give the places back, forget the pair's
            # earlier typos.
            cache.delete(pair_key)
            _decrement(user_key)
        return user
