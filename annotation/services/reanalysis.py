"""Re-analysis of a published human study (reference layout, issue 14) through the
same report code as our own studies (``analysis.study_report``). Reads files only."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace
from pathlib import Path
from typing import Any

from rcp_platform.exceptions import ApplicationError

from ..analysis import StudyConfig, study_report
from ..analysis.rules import VERDICT_RULES
from ..reference_import import ReferenceError, read_reference


def reference_report(
    *,
    folder: Path,
    verdict_rule: str = "majority",
    exclude_systems: Collection[str] = (),
    focus_system: str = "",
) -> dict[str, Any]:
    """The report of a published study folder, plus ``import``: formats read,
    contests left out by ``in_analysis``, and the contests whose recomputed verdict
    differs from the published ``human_verdict`` (none when the rule matches the
    reference's). Label-quality figures are undefined (no gains are published).
    ApplicationError on unreadable input."""
    if verdict_rule not in VERDICT_RULES:
        raise ApplicationError(f"unknown verdict rule {verdict_rule!r}")
    try:
        ref = read_reference(Path(folder))
    except ReferenceError as exc:
        raise ApplicationError(f"cannot read the published study: {exc}") from exc
    drop = set(exclude_systems)
    contests = [c for c in ref.contests if not {c.system_a, c.system_b} & drop]
    kept = {c.contest_id for c in contests}
    annotations = [a for a in ref.annotations if a.contest_id in kept]
    if focus_system and not any(
        focus_system in (c.system_a, c.system_b) for c in contests
    ):
        raise ApplicationError(f"no contest of this report involves {focus_system!r}")
    config = replace(
        StudyConfig(), verdict_rule=verdict_rule, focus_system=focus_system
    )
    try:
        report = study_report(contests, annotations, config=config)
    except ValueError as exc:
        raise ApplicationError(f"cannot analyse this study: {exc}") from exc
    mismatched = sorted(
        r["contest_id"]
        for r in report["per_contest"]
        if r["verdict"] != ref.human_verdicts[r["contest_id"]]
    )
    report["subset"] = {"exclude_systems": sorted(drop)}
    report["import"] = {
        "folder": str(folder),
        "formats": ref.formats,
        "contests_left_out": ref.left_out,
        "verdict_mismatches": mismatched,
    }
    return report
