"""Test tiers: tests that need PostgreSQL, Redis or Chromium carry a marker.

``make test`` on a machine with only Python and make runs every other test and skips
these, one line each saying what to install. CI sets ``RCP_REQUIRE_SERVICES=1``,
which turns every such skip into a failure, so CI runs everything.

Where the services are: ``RCP_TEST_PG`` (a server URL without database, default
``postgres://postgres@127.0.0.1:5432``), ``RCP_TEST_REDIS`` (default
``redis://127.0.0.1:6379``), ``CHROMIUM_PATH`` (default: ``chromium`` on the PATH).
"""

from __future__ import annotations

import functools
import os
import shutil
import socket
from urllib.parse import urlsplit

TIERS = {
    "postgres": "a PostgreSQL server: apt-get install -y postgresql, start it "
    "(trust auth for user postgres on 127.0.0.1:5432) or set RCP_TEST_PG",
    "redis": "a Redis server: apt-get install -y redis-server, start it on "
    "127.0.0.1:6379 or set RCP_TEST_REDIS",
    "chromium": "Chromium: apt-get install -y chromium, or set CHROMIUM_PATH",
}


def pg_server_url() -> str:
    """PostgreSQL server URL without a database name: RCP_TEST_PG, else the suite's
    own DATABASE_URL server when that is PostgreSQL, else the local default."""
    explicit = os.environ.get("RCP_TEST_PG")
    if explicit:
        return explicit.rstrip("/")
    url = os.environ.get("DATABASE_URL", "")
    if url.startswith(("postgres://", "postgresql://", "pgsql://")):
        parts = urlsplit(url)
        return f"{parts.scheme}://{parts.netloc}"
    return "postgres://postgres@127.0.0.1:5432"


def redis_url(db: int) -> str:
    """Redis URL of database ``db`` on the test server."""
    base = os.environ.get("RCP_TEST_REDIS", "redis://127.0.0.1:6379").rstrip("/")
    return f"{base}/{db}"


def _reachable(url: str, default_port: int) -> bool:
    parts = urlsplit(url)
    try:
        with socket.create_connection(
            (parts.hostname or "127.0.0.1", parts.port or default_port), timeout=1.0
        ):
            return True
    except OSError:
        return False


def chromium_path() -> str | None:
    return (
        os.environ.get("CHROMIUM_PATH")
        or shutil.which("chromium")
        or shutil.which("chromium-browser")
    )


@functools.cache
def available(tier: str) -> bool:
    if tier == "postgres":
        if not _reachable(pg_server_url(), 5432):
            return False
        try:
            import psycopg

            parts = urlsplit(pg_server_url())
            with psycopg.connect(
                host=parts.hostname or "127.0.0.1",
                port=parts.port or 5432,
                user=parts.username or "postgres",
                password=parts.password,
                dbname="postgres",
                connect_timeout=3,
            ):
                return True
        except Exception:
            return False
    if tier == "redis":
        if not _reachable(redis_url(0), 6379):
            return False
        try:
            import redis

            return bool(redis.Redis.from_url(redis_url(0), socket_timeout=2).ping())
        except Exception:
            return False
    if tier == "chromium":
        return chromium_path() is not None
    raise ValueError(f"unknown tier {tier!r}")


def missing_message(tier: str) -> str:
    return f"needs {TIERS[tier]}"


def required() -> bool:
    return os.environ.get("RCP_REQUIRE_SERVICES", "").lower() in {"1", "true", "yes"}
