"""``study_report``: the analysis of a study, from the database or from a release."""

from __future__ import annotations

import json
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError, CommandParser

from annotation import selectors, services
from rcp_platform.exceptions import ApplicationError


def _pct(rate: dict) -> str:
    if rate.get("rate") is None:
        return "-"
    ci = rate.get("ci") or [None, None]
    text = f"{rate['rate']:.1%} ({rate['k']}/{rate['n']})"
    if ci[0] is not None:
        text += f", 95% CI {ci[0]:.1%}-{ci[1]:.1%}"
    if rate.get("chance") is not None:
        text += f", chance {rate['chance']:.1%}"
    return text


class Command(BaseCommand):
    help = (
        "Report whether annotators side with RCP-nDCG or qrel-nDCG: from a study "
        "(--study) or from a release folder alone (--release); same numbers."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        source = parser.add_mutually_exclusive_group(required=True)
        source.add_argument("--study", help="study id or name")
        source.add_argument("--release", help="release folder (from export_release)")
        parser.add_argument("--json", action="store_true", help="print the JSON report")
        parser.add_argument(
            "--exclude-system",
            action="append",
            default=[],
            metavar="NAME",
            help="leave out contests of this system (repeatable)",
        )
        parser.add_argument(
            "--severity",
            action="store_true",
            help="add annotator severities (many-facet Rasch) beside the raw means",
        )

    def handle(self, *args: object, **opts: object) -> None:
        exclude = list(opts["exclude_system"])  # type: ignore[call-overload]
        try:
            if opts["release"]:
                report = services.release_report(
                    folder=Path(str(opts["release"])),
                    exclude_systems=exclude,
                    severity=bool(opts["severity"]),
                )
            else:
                study = selectors.study_by_ref(ref=str(opts["study"]))
                report, _names = services.study_report_build(
                    study=study,
                    exclude_systems=exclude,
                    severity=bool(opts["severity"]),
                )
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc
        if opts["json"]:
            self.stdout.write(json.dumps(report, indent=2, sort_keys=True))
            return
        out = self.stdout.write
        v = report["verdicts"]
        out(
            f"{report['contests']} contests, {report['annotators']} annotators; "
            f"verdicts A {v['A']}, B {v['B']}, tie {v['tie']}"
        )
        out(f"  main (RCP share): {_pct(report['main'])}")
        out(f"  disagreements:    {_pct(report['disagreements'])}")
        auc = report["margin_auc"]
        out(f"  margin AUC: RCP {auc['rcp']}, qrel {auc['qrel']}")
        lab = report["label_auc"]
        out(f"  label AUC:  RCP {lab['rcp']}, qrel {lab['qrel']}")
        alpha = report["krippendorff_alpha"]
        out(
            f"  ICC(1,k) {report['icc1k']}; alpha ordinal {alpha['ordinal']}, "
            f"interval {alpha['interval']}; pick agreement {report['pick_agreement']}"
        )
        out(f"  leave-one-annotator-out range: {report['loo_range']}")
        if "with_excluded" in report:
            w = report["with_excluded"]
            out(
                f"  with the {len(report['excluded_annotators'])} excluded "
                f"annotator(s): main {_pct(w['main'])}; "
                f"{w['reviews']['valid']} reviews"
            )
        sev = report.get("severity")
        if sev and "error" not in sev:
            out(
                f"  severity (Rasch): sd {sev['severity_sd']:.3f} logits; largest "
                f"fair-minus-raw grade shift {sev['largest_shift']:.3f}"
            )
        for run in report.get("panels", {}).get("runs", []):
            agree = run["agreement"]
            out(
                f"  LLM panel {run['panel']!r} ({run['mode']}, {run['status']}): "
                f"decided {_pct(run['decided'])}; agrees with humans "
                f"{_pct(agree['human'])}, RCP {_pct(agree['rcp']['all'])}, "
                f"qrel {_pct(agree['qrel']['all'])}"
            )
