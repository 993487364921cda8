"""Strength rules for the platform's secrets (SECRET_KEY, RELEASE_HASH_KEY).

No Django import: the settings module calls this before Django is configured, and
``scripts/run.py`` uses :func:`new_key` to fill ``.env`` on the first ``make run``.
A key must be long, not a known placeholder, and look random: a key chosen by a
person ("change-me", "aaaa...", a word repeated) is refused with the reason.
"""

from __future__ import annotations

import math
import secrets
from collections import Counter

# Values that ship in this repository or its documentation, and common stand-ins.
PLACEHOLDER_WORDS = (
    "change-me",
    "changeme",
    "change_me",
    "placeholder",
    "dev-release-hash-key",
    "dev-insecure-secret-key",
    "django-insecure",
    "build-only",
    "example",
    "your-secret",
    "replace-me",
)
# 32 random bytes are 43 characters as URL-safe base64 (64 as hex).
MIN_KEY_CHARS = 43
# Estimated from the characters' own frequencies: random base64 or hex keys of
# this length sit well above it; a word, a repeated pattern or a keyboard walk
# repeated to the length stays below.
MIN_BITS_PER_CHAR = 3.0
MIN_DISTINCT_CHARS = 12


def _bits_per_char(value: str) -> float:
    counts = Counter(value)
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


def weak_key_reason(value: str, *, min_chars: int = MIN_KEY_CHARS) -> str | None:
    """Why ``value`` is not an acceptable secret key, or None when it is.

    Refused: shorter than ``min_chars``, containing a known placeholder, fewer than
    12 distinct characters, or under 3 bits of character entropy per character.
    """
    if not value or not value.strip():
        return "is not set"
    lowered = value.lower()
    for word in PLACEHOLDER_WORDS:
        if word in lowered:
            return f"is a placeholder (contains {word!r})"
    if len(value) < min_chars:
        return f"is too short ({len(value)} characters; at least {min_chars} needed)"
    if (
        len(set(value)) < MIN_DISTINCT_CHARS
        or _bits_per_char(value) < MIN_BITS_PER_CHAR
    ):
        return "does not look random (too few distinct characters)"
    return None


def new_key() -> str:
    """A fresh key of 48 random bytes, URL-safe base64 (64 characters)."""
    return secrets.token_urlsafe(48)
