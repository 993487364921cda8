"""``create_study``: sample contests for a blind human study (prints the study id)."""

from __future__ import annotations

import sys
from datetime import timedelta

from django.core.management.base import BaseCommand, CommandError, CommandParser

from annotation import sampling, selectors, services
from benchmarks.models import Dataset
from calibration.models import CalibrationFit
from rcp_platform.exceptions import ApplicationError


def _quota(text: str) -> tuple[str, float]:
    cell, sep, share = text.partition("=")
    if not sep:
        raise ValueError(f"quota {text!r} is not CELL=SHARE")
    return cell.strip(), float(share)


class Command(BaseCommand):
    help = (
        "Create a study: contests sampled from (query, system pair) candidates with "
        "quotas per design cell. Prints the new study's id on stdout (summary on "
        "stderr)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--name", required=True)
        parser.add_argument(
            "--dataset", action="append", required=True, help="repeat for a suite"
        )
        parser.add_argument("--systems", nargs="+", required=True, metavar="SYSTEM")
        parser.add_argument("--contests", type=int, required=True)
        parser.add_argument("--depth", type=int, default=5, help="top-k shown (5)")
        parser.add_argument(
            "--per-contest", type=int, default=3, help="annotators per contest (3)"
        )
        parser.add_argument(
            "--quota",
            action="append",
            default=[],
            metavar="CELL=SHARE",
            help=f"cells: {', '.join(sampling.CELLS)}; unnamed cells share the rest "
            "(default 0.5/0.25/0.25)",
        )
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument(
            "--fit", type=int, help="calibration fit id (default: newest)"
        )
        parser.add_argument("--lease-minutes", type=float, default=30.0)
        parser.add_argument("--collect-order", action="store_true")
        parser.add_argument("--no-comments", action="store_true")
        parser.add_argument("--instructions", help="Markdown file (default: built-in)")
        parser.add_argument("--open", action="store_true", help="open it at once")
        parser.add_argument(
            "--metric-k",
            type=int,
            default=services.METRIC_K,
            help="draw depth: nDCG cut-off that places pairs in design cells (10)",
        )
        parser.add_argument(
            "--dataset-quota",
            action="append",
            default=[],
            metavar="DATASET=SHARE",
            help="share of contests from a dataset (repeatable; others split the rest)",
        )
        parser.add_argument(
            "--balance-pairs",
            action="store_true",
            help="within each cell, system pairs take turns",
        )
        parser.add_argument(
            "--max-per-query", type=int, help="at most this many contests per query"
        )
        parser.add_argument(
            "--no-controls",
            action="store_true",
            help="no concordant controls: only the two discordant cells",
        )
        parser.add_argument(
            "--stopping-rule",
            choices=("fixed", "obrien_fleming", "pocock"),
            default="fixed",
            help="pre-registered stopping rule (alpha spending for interim looks)",
        )
        parser.add_argument("--alpha", type=float, default=0.05)
        parser.add_argument(
            "--endpoint",
            choices=("main", "disagreements"),
            default="main",
            help="pre-registered primary endpoint",
        )
        parser.add_argument(
            "--verdict-rule",
            choices=("majority", "plurality"),
            default="majority",
            help="how picks become verdicts (strict majority of all picks, default)",
        )

    def handle(self, *args: object, **opts: object) -> None:
        datasets = []
        for name in opts["dataset"]:
            dataset = Dataset.objects.filter(name=name).first()
            if dataset is None:
                raise CommandError(f"dataset {name!r} does not exist")
            datasets.append(dataset)
        try:
            quotas = dict(_quota(q) for q in opts["quota"]) or None
            if quotas:
                sampling.resolve_quotas(quotas)
            controls = sampling.Controls(
                dataset_quotas=dict(_quota(q) for q in opts["dataset_quota"]) or None,
                balance_pairs=opts["balance_pairs"],
                max_per_query=opts["max_per_query"],
                concordant_controls=not opts["no_controls"],
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        fit = None
        if opts["fit"] is not None:
            fit = CalibrationFit.objects.filter(pk=opts["fit"]).first()
            if fit is None:
                raise CommandError(f"calibration fit {opts['fit']} does not exist")
        instructions = None
        if opts["instructions"]:
            try:
                with open(opts["instructions"], encoding="utf-8") as handle:
                    instructions = handle.read()
            except OSError as exc:
                raise CommandError(
                    f"cannot read {opts['instructions']}: {exc}"
                ) from exc
        if not 0 < opts["lease_minutes"] <= services.MAX_LEASE_MINUTES:
            raise CommandError(
                f"--lease-minutes must be positive and at most "
                f"{services.MAX_LEASE_MINUTES} (7 days)"
            )
        try:
            systems = selectors.systems_by_names(
                datasets=datasets, names=opts["systems"]
            )
            study = services.study_create(
                name=opts["name"],
                datasets=datasets,
                systems=systems,
                n_contests=opts["contests"],
                depth=opts["depth"],
                per_contest=opts["per_contest"],
                quotas=quotas,
                seed=opts["seed"],
                fit=fit,
                instructions=instructions,
                lease_duration=timedelta(minutes=opts["lease_minutes"]),
                collect_order=opts["collect_order"],
                collect_comments=not opts["no_comments"],
                open_now=opts["open"],
                metric_k=opts["metric_k"],
                verdict_rule=opts["verdict_rule"],
                controls=controls,
                analysis_plan={
                    "primary_endpoint": opts["endpoint"],
                    "alpha": opts["alpha"],
                    "stopping_rule": {"kind": opts["stopping_rule"]},
                },
            )
        except ApplicationError as exc:
            raise CommandError(f"{exc.message}\nNo study was created.") from exc
        design = study.design
        err = self.stderr
        err.write(
            f"Study {study.pk} {study.name!r} ({study.status}): "
            f"{sum(design['drawn'].values())} contests from {design['candidates']} "
            f"candidates, fit {design['fit']}, seed {study.seed}"
        )
        for cell in sampling.CELLS:
            err.write(
                f"  {cell:<20} share {design['quotas'][cell]:.2f}  "
                f"candidates {design['available'][cell]:>5}  "
                f"requested {design['requested'][cell]:>4}  drawn {design['drawn'][cell]:>4}"
            )
        if not study.status == "open":
            err.write("Open it with --open next time, or from the study page.")
        self.stdout.write(str(study.pk))
        sys.stdout.flush()
