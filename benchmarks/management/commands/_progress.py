"""Periodic progress lines for long imports (shared by the import commands)."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """Prints ``stage: N rows (R rows/s)`` at most every ``interval`` seconds per stage."""

    def __init__(self, stream: TextIO | None = None, interval: float = 1.0) -> None:
        self.stream = stream or sys.stderr
        self.interval = interval
        self.started = time.monotonic()
        self.last: dict[str, float] = {}
        self.counts: dict[str, int] = {}

    def __call__(self, stage: str, count: int) -> None:
        now = time.monotonic()
        self.counts[stage] = count
        if now - self.last.get(stage, 0.0) >= self.interval:
            self.last[stage] = now
            rate = count / max(now - self.started, 1e-9)
            self.stream.write(f"  {stage}: {count:,} rows ({rate:,.0f} rows/s)\n")
            self.stream.flush()

    def summary(self) -> str:
        elapsed = time.monotonic() - self.started
        parts = ", ".join(f"{n:,} {stage}" for stage, n in self.counts.items())
        return f"{parts} in {elapsed:.1f}s"
