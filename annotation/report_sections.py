"""Extra sections of a study report, contributed by apps above annotation.

An app that reports on studies (``panels``) registers a builder from its
``AppConfig.ready``; ``study_report_build`` adds each builder's result under its key,
so the report page, the API and ``study_report --json`` all show it, while
annotation never imports the apps above it. A builder takes the study and the
finished human report (read-only) and returns a JSON-safe dict.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Builder = Callable[..., dict[str, Any]]


@dataclass(frozen=True)
class Section:
    key: str
    build: Builder
    template: str | None  # included at the end of the report page, if given


_SECTIONS: dict[str, Section] = {}


def section_register(key: str, build: Builder, *, template: str | None = None) -> None:
    """Register (or replace) the section ``key``; idempotent across reloads."""
    _SECTIONS[key] = Section(key, build, template)


def sections() -> list[Section]:
    return [_SECTIONS[k] for k in sorted(_SECTIONS)]


def sections_build(*, study: Any, report: dict[str, Any]) -> dict[str, Any]:
    """{key: builder(study=study, report=report)} for every registered section
    with something to say: an empty result (None, {}) adds no key, so a study
    without extra data reports exactly as its release does."""
    built = {s.key: s.build(study=study, report=report) for s in sections()}
    return {key: value for key, value in built.items() if value}
