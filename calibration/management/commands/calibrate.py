"""``calibrate``: fit BT + 2PL over one dataset or a suite of datasets."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser

from calibration.models import CalibrationFit, FitStatus
from calibration.services import DEFAULT_MAXITER, calibration_fit
from rcp.irt import FLAG_TEXT
from rcp_platform.exceptions import ApplicationError

from ._common import StageProgress, datasets_named

SHOW_FLAGGED = 20


class Command(BaseCommand):
    help = (
        "Calibrate judgments: BT per query, then the 2PL with shared items. Several "
        "--dataset options form one suite fitted together. Exits non-zero unless the "
        "fit converged."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--dataset", action="append", required=True)
        parser.add_argument(
            "--mode",
            default="auto",
            choices=["auto", "tournament", "rubric-only", "rubric_only"],
        )
        parser.add_argument("--family", help="judge family (needed if several)")
        parser.add_argument(
            "--maxiter",
            type=int,
            default=DEFAULT_MAXITER,
            help="Newton iterations of the 2PL (default %(default)s; converged fits "
            "take about 10)",
        )

    def handle(self, *args: object, **opts: object) -> None:
        datasets = datasets_named(opts["dataset"])
        try:
            fit = calibration_fit(
                datasets=datasets,
                mode=opts["mode"],
                family=opts["family"],
                progress=StageProgress(self.stderr._out),
                maxiter=opts["maxiter"],
            )
        except ApplicationError as exc:
            failed = (
                CalibrationFit.objects.filter(status=FitStatus.FAILED)
                .order_by("-id")
                .values_list("id", flat=True)
                .first()
            )
            where = f" (fit {failed} marked failed)" if failed else ""
            raise CommandError(f"{exc.message}{where}") from exc
        self._summary(fit)
        if fit.status != FitStatus.DONE:
            raise CommandError(
                f"fit {fit.pk} did NOT converge and is stored as {fit.status!r}: "
                f"{fit.error}. Its numbers are not trustworthy; `leaderboard` refuses "
                "it unless --allow-unconverged."
            )

    def _summary(self, fit: CalibrationFit) -> None:
        items = fit.items
        diag = fit.diagnostics
        cov, rel, opt = diag["coverage"], diag["reliability"], diag["optimizer"]
        style = self.style.SUCCESS if fit.status == FitStatus.DONE else self.style.ERROR
        self.stdout.write(
            style(
                f"Fit {fit.pk} {fit.status} ({fit.mode}, family {fit.family!r}, "
                f"fingerprint {fit.fingerprint}): {cov['queries']} queries, "
                f"{cov['documents']} documents ({cov['uncalibrated_documents']} "
                "uncalibrated)"
            )
        )
        bt = opt.get("bt", {})
        self.stdout.write(
            f"  optimizer: {opt.get('method')}, converged {opt.get('converged')}, "
            f"{opt.get('iterations')} iterations"
            + (f", max |grad| {opt['max_grad']:.1e}" if "max_grad" in opt else "")
            + f"; BT fits converged {bt.get('converged')}/{bt.get('fits')}"
        )
        gam = " ".join(f"{g:.3f}" for g in items["gamma"])
        bet = " ".join(f"{b:.3f}" for b in items["beta"])
        self.stdout.write(f"  gamma {gam}\n  beta  {bet}")
        if rel["ece"] is not None:
            self.stdout.write(f"  ECE {rel['ece']:.4f}  Brier {rel['brier']:.4f}")
        rows = list(
            fit.query_rows.filter(flagged=True)
            .select_related("query__dataset")
            .order_by("query__dataset__name", "query__external_id")
        )
        if rows:
            counts = ", ".join(f"{k} {v}" for k, v in cov.get("flags", {}).items())
            self.stdout.write(
                self.style.WARNING(
                    f"  {len(rows)} flagged queries ({counts}): their scale is pinned "
                    "by priors or a bound, or their windows are often invalid:"
                )
            )
            for row in rows[:SHOW_FLAGGED]:
                label = row.query.external_id
                if len(fit.diagnostics.get("datasets", [])) > 1:
                    label = f"{row.query.dataset.name}||{label}"
                tau = "-" if row.tau is None else f"{row.tau:.3g}"
                alpha = "-" if row.alpha is None else f"{row.alpha:.3g}"
                self.stdout.write(
                    f"    {label}: tau {tau}, alpha {alpha}: {', '.join(row.flags)}"
                )
            if len(rows) > SHOW_FLAGGED:
                self.stdout.write(f"    ... and {len(rows) - SHOW_FLAGGED} more")
            self.stdout.write(
                "  flags: "
                + "; ".join(
                    f"{code} = {FLAG_TEXT.get(code, 'more than 5% invalid windows')}"
                    for code in cov.get("flags", {})
                )
            )
