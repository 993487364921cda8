"""Deployment checks (``manage.py check --deploy``) for the platform's own settings.

Django's deploy checks cover cookies, HSTS, SSL and SECRET_KEY; these add what only
this platform knows: a release key fit for export and a cache shared by every web
process (login throttling counts in it).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import Tags, Warning, register

from rcp_platform.keys import weak_key_reason


@register(Tags.security, deploy=True)
def release_hash_key_check(app_configs: Any = None, **kwargs: Any) -> list[Warning]:
    problem = weak_key_reason(getattr(settings, "RELEASE_HASH_KEY", "") or "")
    if problem is None:
        return []
    return [
        Warning(
            f"RELEASE_HASH_KEY {problem}: study releases will be refused.",
            hint='Set it to python -c "import secrets; print(secrets.token_urlsafe(48))"',
            id="portal.W001",
        )
    ]


@register(Tags.caches, deploy=True)
def shared_cache_check(app_configs: Any = None, **kwargs: Any) -> list[Warning]:
    backend = settings.CACHES["default"]["BACKEND"]
    if not backend.endswith(("LocMemCache", "DummyCache")):
        return []
    return [
        Warning(
            "The default cache is per process: with several web processes each "
            "counts failed logins on its own, so throttling lets more guesses through.",
            hint="Set CACHE_URL=redis://host:6379/1 (shared by every web process).",
            id="portal.W002",
        )
    ]
