"""Which environment variables may hold a judge's API key.

A judge names the variable that holds its key (``Judge.api_key_env``) and the worker
sends that variable's value as a bearer token to the judge's base URL, a URL chosen
by whoever edits the judge. Without a rule, naming ``SECRET_KEY`` or ``DATABASE_URL``
would post the platform's own secrets to any listener. So a key variable must be one
an operator declared for judges:

- its name starts with ``RCP_JUDGE_KEY_`` (e.g. ``RCP_JUDGE_KEY_OPENAI``), or
- it is listed in the ``JUDGE_KEY_ENV_ALLOW`` setting (comma-separated, from the
  environment), for keys whose names a provider's tooling fixes;

and, whatever the allow-list says, it is never a name the platform's settings read
(every ``env.*("NAME")`` of the settings module, every setting name, and a fixed list
of well-known secrets).

Checked when a judge is created or edited (model ``clean``, API serializer, form,
``add_judge``) and again by the worker right before a call (``judging.runner``) and by
``JudgeEndpoint.api_key``, so a row written before this rule existed sends nothing.
No Django import at module level: ``judging.clients`` uses it in worker processes.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
from collections.abc import Iterable

PREFIX = "RCP_JUDGE_KEY_"
NAME_RE = re.compile(r"^[A-Z_][A-Z0-9_]{0,199}$")
# Secrets any deployment of this platform (or its containers) may hold, whether or
# not the settings module reads them by that name.
WELL_KNOWN_SECRETS = frozenset(
    {
        "SECRET_KEY",
        "DJANGO_SECRET_KEY",
        "DATABASE_URL",
        "RELEASE_HASH_KEY",
        "RELEASE_SIGNING_KEY",
        "CELERY_BROKER_URL",
        "CELERY_RESULT_BACKEND",
        "JUDGE_LIMITER_URL",
        "REDIS_URL",
        "POSTGRES_PASSWORD",
        "PGPASSWORD",
        "EMAIL_HOST_PASSWORD",
        "DJANGO_SUPERUSER_PASSWORD",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
    }
)
_ENV_READ = re.compile(
    r"""(?:env(?:\.\w+)?\(|os\.environ\.get\(|os\.environ\[|os\.getenv\()\s*["']([A-Z][A-Z0-9_]*)["']"""
)


@functools.cache
def _settings_env_names(module: str) -> frozenset[str]:
    """Variable names the settings module reads (scanned from its source once)."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        return frozenset()
    with open(spec.origin, encoding="utf-8") as handle:
        return frozenset(_ENV_READ.findall(handle.read()))


def platform_names() -> frozenset[str]:
    """Names that belong to the platform itself and are never a judge's key."""
    names = set(WELL_KNOWN_SECRETS)
    try:
        from django.conf import settings

        if settings.configured:
            names.update(n for n in dir(settings) if n.isupper())
            module = getattr(settings, "SETTINGS_MODULE", None) or os.environ.get(
                "DJANGO_SETTINGS_MODULE"
            )
            for candidate in {module, "rcp_platform.settings"} - {None}:
                names.update(_settings_env_names(candidate))
    except ImportError:  # pragma: no cover - Django is always installed here
        pass
    return frozenset(names)


def allowed_names() -> frozenset[str]:
    """The ``JUDGE_KEY_ENV_ALLOW`` allow-list (Django setting, else the environment)."""
    raw: Iterable[str] | str = ()
    try:
        from django.conf import settings

        if settings.configured:
            raw = getattr(settings, "JUDGE_KEY_ENV_ALLOW", ())
    except ImportError:  # pragma: no cover
        pass
    if not raw:
        raw = os.environ.get("JUDGE_KEY_ENV_ALLOW", "")
    if isinstance(raw, str):
        raw = raw.split(",")
    return frozenset(n.strip() for n in raw if n.strip())


def api_key_env_refusal(name: str) -> str | None:
    """Why ``name`` may not hold a judge's key, or None if it may (empty: no key)."""
    if not name:
        return None
    if not NAME_RE.match(name):
        return (
            f"{name!r} is not an environment variable name "
            "(capital letters, digits and underscores)"
        )
    if name in platform_names():
        return (
            f"${name} is one of the platform's own settings; a judge's key must be in a "
            f"variable declared for judges (name it {PREFIX}<SOMETHING>)"
        )
    if name.startswith(PREFIX) and len(name) > len(PREFIX):
        return None
    if name in allowed_names():
        return None
    return (
        f"${name} is not declared for judge keys: name it {PREFIX}<SOMETHING>, or have "
        "an operator add it to JUDGE_KEY_ENV_ALLOW"
    )
