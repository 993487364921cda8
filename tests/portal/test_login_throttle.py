"""Login throttling (portal/auth.py): per (address, username) and per username,
client address from a trusted proxy header, counters shared through Redis."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from django.core.cache import cache
from django.test import Client

from tests import tiers
from tests.conftest import REPO
from tests.factories import UserFactory

REDIS_DB = int(os.environ.get("RCP_TEST_REDIS_DB", "11"))


@pytest.fixture(autouse=True)
def _fresh_counters(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    cache.clear()
    yield
    cache.clear()


def _token(username: str, password: str, **meta: str) -> int:
    return (
        Client(**meta)
        .post("/api/v1/auth/token", {"username": username, "password": password})
        .status_code
    )


def test_sixty_made_up_usernames_never_block_a_real_users_password(db):
    """60 failures with made-up usernames from one address (a guesser, or everyone
    behind one proxy) leave a real user's correct password working from it."""
    UserFactory(username="real", password="right-password-1")
    client = Client(REMOTE_ADDR="198.51.100.1")
    for i in range(60):
        assert (
            client.post("/api/v1/auth/token", {"username": f"x{i}", "password": "no"})
        ).status_code == 400
    assert _token("real", "right-password-1", REMOTE_ADDR="198.51.100.1") == 200
    page = client.post("/login/", {"username": "real", "password": "right-password-1"})
    assert page.status_code == 302


def test_username_limit_holds_across_addresses(db, settings):
    """A guesser spread over many addresses hits the per-username limit; other
    usernames are untouched."""
    settings.LOGIN_THROTTLE_ATTEMPTS = 3
    settings.LOGIN_THROTTLE_USER_ATTEMPTS = 6
    UserFactory(username="victim", password="right-password-1")
    UserFactory(username="bystander", password="right-password-2")
    for i in range(6):
        assert _token("victim", "wrong", REMOTE_ADDR=f"203.0.113.{i}") == 400
    assert _token("victim", "right-password-1", REMOTE_ADDR="192.0.2.99") == 400
    assert _token("bystander", "right-password-2", REMOTE_ADDR="203.0.113.0") == 200


def test_success_gives_the_place_back(db, settings):
    """Failed typos then a success: the pair starts over, the success is not
    counted as a failure."""
    settings.LOGIN_THROTTLE_ATTEMPTS = 3
    UserFactory(username="typo", password="right-password-1")
    for _ in range(2):
        assert _token("typo", "wrong") == 400
    assert _token("typo", "right-password-1") == 200
    for _ in range(2):
        assert _token("typo", "wrong") == 400
    assert _token("typo", "right-password-1") == 200


def test_client_address_comes_from_the_trusted_proxy_header(db, settings):
    """Behind a proxy every request has the proxy's REMOTE_ADDR: with the proxy
    header configured each client has its own counter, and a client cannot escape
    its counter by prepending addresses to the header."""
    settings.LOGIN_THROTTLE_ATTEMPTS = 3
    settings.TRUSTED_PROXY_HEADER = "X-Forwarded-For"
    UserFactory(username="shared", password="right-password-1")
    proxy = {"REMOTE_ADDR": "10.0.0.2"}
    for i in range(3):
        spoof = f"192.0.2.{i}, 203.0.113.5"  # the proxy appended the real address
        assert _token("shared", "wrong", HTTP_X_FORWARDED_FOR=spoof, **proxy) == 400
    blocked = {"HTTP_X_FORWARDED_FOR": "1.1.1.1, 203.0.113.5", **proxy}
    assert _token("shared", "right-password-1", **blocked) == 400
    other = {"HTTP_X_FORWARDED_FOR": "198.51.100.7", **proxy}
    assert _token("shared", "right-password-1", **other) == 200


def test_proxy_header_ignored_unless_configured(db, settings):
    """Off by default: a forged X-Forwarded-For does not give a client a new
    counter."""
    settings.LOGIN_THROTTLE_ATTEMPTS = 2
    UserFactory(username="forger", password="right-password-1")
    for i in range(2):
        assert _token("forger", "no", HTTP_X_FORWARDED_FOR=f"192.0.2.{i}") == 400
    assert (
        _token("forger", "right-password-1", HTTP_X_FORWARDED_FOR="192.0.2.77") == 400
    )


_GUESSER = """
import json, sys, time
import django
django.setup()
from django.core.exceptions import PermissionDenied
from django.test import RequestFactory
from portal.auth import ThrottledModelBackend

start, attempts = float(sys.argv[1]), int(sys.argv[2])
backend, factory = ThrottledModelBackend(), RequestFactory()
while time.time() < start:
    time.sleep(0.002)
outcomes = []
for _ in range(attempts):
    request = factory.post("/api/v1/auth/token", REMOTE_ADDR="203.0.113.9")
    try:
        user = backend.authenticate(request, username="victim", password="guess")
        outcomes.append("let-in" if user else "checked")
    except PermissionDenied:
        outcomes.append("throttled")
print(json.dumps(outcomes))
"""


def _database_url() -> str:
    from django.db import connection

    sd = connection.settings_dict
    if sd["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{sd['NAME']}"
    auth = sd["USER"] + (f":{sd['PASSWORD']}" if sd["PASSWORD"] else "")
    return f"postgres://{auth}@{sd['HOST'] or '127.0.0.1'}:{sd['PORT'] or 5432}/{sd['NAME']}"


@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
def test_limit_holds_across_two_processes_sharing_redis(settings):
    """Two web processes guessing at once through a shared Redis cache: exactly
    LOGIN_THROTTLE_ATTEMPTS passwords are checked in all, the rest refused
    unchecked; then the right password is refused from that address and accepted
    for another username."""
    import redis

    url = tiers.redis_url(REDIS_DB)
    redis.Redis.from_url(url).flushdb()
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": url,
        }
    }
    settings.LOGIN_THROTTLE_ATTEMPTS = 5
    # The default (slow) hasher, as in production: a wide window between the limit
    # check and the recorded failure is where per-process counting let guesses in.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.PBKDF2PasswordHasher"]
    UserFactory(username="victim", password="right-password-1")
    UserFactory(username="bystander", password="right-password-2")
    env = {
        **os.environ,
        "DATABASE_URL": _database_url(),
        "CACHE_URL": url,
        "LOGIN_THROTTLE_ATTEMPTS": "5",
    }
    start = time.time() + 3.0
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _GUESSER, str(start), "8"],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outcomes = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        outcomes += json.loads(out.strip().splitlines()[-1])
    try:
        assert outcomes.count("checked") == 5, outcomes
        assert outcomes.count("throttled") == 11 and "let-in" not in outcomes
        assert _token("victim", "right-password-1", REMOTE_ADDR="203.0.113.9") == 400
        assert _token("bystander", "right-password-2", REMOTE_ADDR="203.0.113.9") == 200
    finally:
        redis.Redis.from_url(url).flushdb()
