"""``plan_study``: how many contests a study needs (power planner, issue 14)."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError, CommandParser

from annotation import selectors, services
from rcp_platform.exceptions import ApplicationError


class Command(BaseCommand):
    help = (
        "Contests to sample so the main measure's clustered 95% interval excludes "
        "the chance rate with the target power; with --contests, the power of that "
        "size. --study fills the chance rate and counted share from its contests."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--true-rate",
            type=float,
            help="expected share of counted contests won by RCP; default: the "
            "observed rate of --study's LLM-panel pilot (run_panel)",
        )
        parser.add_argument("--chance-rate", type=float)
        parser.add_argument(
            "--counted-share",
            type=float,
            help="share of contests where exactly one metric names the verdict",
        )
        parser.add_argument("--power", type=float, default=0.8)
        parser.add_argument("--alpha", type=float, default=0.05)
        parser.add_argument(
            "--design-effect",
            type=float,
            default=1.0,
            help="variance inflation by query clustering, 1 + (m - 1) ICC",
        )
        parser.add_argument("--one-sided", action="store_true")
        parser.add_argument("--contests", type=int, help="also give the power at N")
        parser.add_argument("--study", help="study id or name (pilot or design)")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: object, **opts: object) -> None:
        try:
            study = None
            if opts["study"]:
                study = selectors.study_by_ref(ref=str(opts["study"]))
            plan = services.power_plan_build(
                true_rate=opts["true_rate"],  # type: ignore[arg-type]
                chance_rate=opts["chance_rate"],  # type: ignore[arg-type]
                counted_share=opts["counted_share"],  # type: ignore[arg-type]
                power=opts["power"],  # type: ignore[arg-type]
                alpha=opts["alpha"],  # type: ignore[arg-type]
                design_effect=opts["design_effect"],  # type: ignore[arg-type]
                one_sided=bool(opts["one_sided"]),
                contests=opts["contests"],  # type: ignore[arg-type]
                study=study,
            )
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc
        if opts["json"]:
            self.stdout.write(json.dumps(plan, indent=2, sort_keys=True))
            return
        sided = "one-sided" if plan["one_sided"] else "two-sided"
        self.stdout.write(
            f"{plan['contests']} contests ({plan['counted']:.1f} expected to count) "
            f"reach power {plan['power']:.3f} >= {plan['power_target']:.2f} at alpha "
            f"{plan['alpha']:g} ({sided}): true rate {plan['true_rate']:.3f} "
            f"[{plan['inputs']['true_rate']}] vs chance "
            f"{plan['chance_rate']:.3f} [{plan['inputs']['chance_rate']}], counted "
            f"share {plan['counted_share']:.3f} [{plan['inputs']['counted_share']}], "
            f"design effect {plan['design_effect']:.2f}"
        )
        if plan["power_at"]:
            at = plan["power_at"]
            self.stdout.write(
                f"power with {at['contests']} contests: {at['power']:.3f}"
            )
