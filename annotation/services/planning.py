"""The power planner over a study's design (issue 14): planner inputs filled from
a study's contests where the user gives none. Reads only; the numerics live in
``annotation.analysis.planning``."""

from __future__ import annotations

from typing import Any

from rcp_platform.exceptions import ApplicationError

from ..analysis.planning import (
    expected_counted_share,
    plan_contests,
    power_at,
)
from ..models import Study
from .reports import study_report_build


def _pilot(report: dict[str, Any]) -> dict[str, Any] | None:
    """The LLM-panel run of ``report`` (section ``panels``, added by the panels app)
    whose main measure counts the most contests, or None."""
    runs = [
        {**r, "main": r["agreement"]["main"]}
        for r in report.get("panels", {}).get("runs", [])
        if r["agreement"]["main"]["n"]
    ]
    return max(runs, key=lambda r: r["main"]["n"]) if runs else None


def power_plan_build(
    *,
    true_rate: float | None,
    chance_rate: float | None = None,
    counted_share: float | None = None,
    power: float = 0.8,
    alpha: float = 0.05,
    design_effect: float = 1.0,
    one_sided: bool = False,
    contests: int | None = None,
    study: Study | None = None,
) -> dict[str, Any]:
    """Contests needed for ``power`` (and, with ``contests``, the power at that size).

    Missing ``chance_rate`` / ``counted_share`` come from ``study``: the chance rate
    over its contests as the report computes it (shown winners at the study's depth),
    and the share of its contests that counted so far, or, before any verdict, the
    share expected to count under fair verdict coins. A missing ``true_rate`` is the
    observed main measure of the study's LLM-panel pilot (the panel run counting the
    most contests); before human grades, its counted share too. Sources are labelled
    in ``inputs``. ApplicationError on invalid or missing inputs.
    """
    sources = {"true_rate": "given", "chance_rate": "given", "counted_share": "given"}
    needs = true_rate is None or chance_rate is None or counted_share is None
    if study is not None and needs:
        report, _ = study_report_build(study=study)
        rows = report["per_contest"]
        pilot = _pilot(report)
        if true_rate is None and pilot is not None:
            true_rate = pilot["main"]["rate"]
            sources["true_rate"] = (
                f"study {study.pk}: LLM panel {pilot['panel']!r} ({pilot['mode']}) "
                f"pilot, {pilot['main']['k']}/{pilot['main']['n']}"
            )
            if counted_share is None and not report["main"]["n"]:
                counted_share = pilot["main"]["n"] / report["contests"]
                sources["counted_share"] = f"study {study.pk}: LLM panel pilot"
        if chance_rate is None:
            chance_rate = report["main"]["chance"]
            sources["chance_rate"] = f"study {study.pk}: contests' shown winners"
            if chance_rate is None and pilot is not None:
                # No human verdict yet: the design's chance over the contests the
                # pilot's verdicts counted.
                chance_rate = pilot["main"]["chance"]
                sources["chance_rate"] = (
                    f"study {study.pk}: shown winners of the pilot's counted contests"
                )
        if counted_share is None:
            if report["main"]["n"]:
                counted_share = report["main"]["n"] / report["contests"]
                sources["counted_share"] = f"study {study.pk}: observed"
            else:
                counted_share = expected_counted_share(
                    [r["rcp_winner"] for r in rows], [r["qrel_winner"] for r in rows]
                )
                sources["counted_share"] = f"study {study.pk}: expected under chance"
    if true_rate is None:
        raise ApplicationError(
            "give the expected true rate, or a study with an LLM-panel pilot run"
        )
    if chance_rate is None:
        raise ApplicationError("give a chance rate, or a study to take it from")
    if counted_share is None:
        counted_share = 1.0
        sources["counted_share"] = "default (every contest counts)"
    try:
        plan = plan_contests(
            power=power,
            alpha=alpha,
            true_rate=true_rate,
            chance_rate=chance_rate,
            counted_share=counted_share,
            design_effect=design_effect,
            one_sided=one_sided,
        )
        at_n = None
        if contests is not None:
            at_n = power_at(
                contests,
                true_rate=true_rate,
                chance_rate=chance_rate,
                alpha=alpha,
                counted_share=counted_share,
                design_effect=design_effect,
                one_sided=one_sided,
            )
    except ValueError as exc:
        raise ApplicationError(str(exc)) from exc
    return {
        **plan.as_dict(),
        "inputs": sources,
        "power_at": None if contests is None else {"contests": contests, "power": at_n},
    }
