"""Helpers shared by the calibration commands: dataset lookup and progress lines."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import TextIO

from django.core.management.base import CommandError

from benchmarks.models import Dataset


def datasets_named(names: Sequence[str]) -> list[Dataset]:
    """Datasets by name, in the order given; CommandError naming any unknown one."""
    found = {d.name: d for d in Dataset.objects.filter(name__in=names)}
    unknown = [n for n in names if n not in found]
    if unknown:
        known = ", ".join(sorted(Dataset.objects.values_list("name", flat=True))[:10])
        raise CommandError(
            f"dataset {unknown[0]!r} does not exist (known: {known or 'none'})"
        )
    return [found[n] for n in dict.fromkeys(names)]


class StageProgress:
    """Prints ``stage: done/total`` at most every ``interval`` seconds, and always at
    the end of a stage."""

    def __init__(self, stream: TextIO | None = None, interval: float = 1.0) -> None:
        self.stream = stream or sys.stderr
        self.interval = interval
        self.started = time.monotonic()
        self.last: dict[str, float] = {}

    def __call__(self, stage: str, done: int, total: int) -> None:
        now = time.monotonic()
        if done < total and now - self.last.get(stage, 0.0) < self.interval:
            return
        self.last[stage] = now
        self.stream.write(
            f"  {stage}: {done:,}/{total:,} ({now - self.started:.1f}s)\n"
        )
        self.stream.flush()
