"""``calibrate``: fit BT + 2PL over one dataset or a suite of datasets."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

from calibration.services import calibration_fit
from rcp_platform.exceptions import ApplicationError

from ._common import StageProgress, datasets_named


class Command(BaseCommand):
    help = (
        "Calibrate judgments: BT per query, then the 2PL with shared items. Several "
        "--dataset options form one suite fitted together."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--dataset", action="append", required=True)
        parser.add_argument(
            "--mode",
            default="auto",
            choices=["auto", "tournament", "rubric-only", "rubric_only"],
        )
        parser.add_argument("--family", help="judge family (needed if several)")

    def handle(self, *args: object, **opts: object) -> None:
        datasets = datasets_named(opts["dataset"])
        try:
            fit = calibration_fit(
                datasets=datasets,
                mode=opts["mode"],
                family=opts["family"],
                progress=StageProgress(self.stderr._out),
            )
        except ApplicationError as exc:
            raise CommandError(f"{exc.message}\nNothing was written.") from exc
        items = fit.items
        cov = fit.diagnostics["coverage"]
        rel = fit.diagnostics["reliability"]
        gam = " ".join(f"{g:.3f}" for g in items["gamma"])
        bet = " ".join(f"{b:.3f}" for b in items["beta"])
        self.stdout.write(
            self.style.SUCCESS(
                f"Fit {fit.pk} ({fit.mode}, family {fit.family!r}, fingerprint "
                f"{fit.fingerprint}): {cov['queries']} queries, {cov['documents']} "
                f"documents ({cov['uncalibrated_documents']} uncalibrated)"
            )
        )
        self.stdout.write(f"  gamma {gam}\n  beta  {bet}")
        if rel["ece"] is not None:
            self.stdout.write(f"  ECE {rel['ece']:.4f}  Brier {rel['brier']:.4f}")
        if cov["flagged_queries"]:
            self.stdout.write(
                self.style.WARNING(
                    f"  {len(cov['flagged_queries'])} queries flagged for invalid "
                    f"windows, e.g. {cov['flagged_queries'][0]}"
                )
            )
