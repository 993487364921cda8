"""``study_report``: the analysis of a study, from the database or from a release."""

from __future__ import annotations

import json
from collections.abc import Callable
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


def _interval(pair: list | None) -> str:
    return "-" if not pair else f"{pair[0]:.1%}-{pair[1]:.1%}"


def _p(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def _inference(out: Callable[[str], None], inf: dict) -> None:
    """The inference section as text: tests, intervals and Holm-adjusted p-values."""
    chance = inf["chance"]
    test = inf["main_test"]["design_exact"]
    out(
        f"inference (verdict rule {inf['verdict_rule']}): chance over all contests "
        f"{_p(chance['all_contests'])}, over decided contests "
        f"{_p(chance['decided_contests'])}; exact test p (two-sided) "
        f"{_p(test['p_two_sided'])}, p (RCP above chance) {_p(test['p_greater'])}"
    )
    out("  slice: rate k/n | CI query | CI query+annotator | Wilson | p | p Holm")
    for name, s in inf["slices"].items():
        rate = "-" if s["rate"] is None else f"{s['rate']:.1%}"
        out(
            f"  {name}: {rate} {s['k']}/{s['n']} | {_interval(s['ci_query'])} | "
            f"{_interval(s['ci_twoway'])} | {_interval(s['wilson'])} | "
            f"{_p(s['p'])} | {_p(s['p_holm'])}"
        )
    jk = inf["jackknife"]
    for label, fig in (
        ("margin AUC RCP", jk["margin_auc"]["rcp"]),
        ("margin AUC qrel", jk["margin_auc"]["qrel"]),
        ("label AUC RCP", jk["label_auc"]["rcp"]),
        ("label AUC qrel", jk["label_auc"]["qrel"]),
        ("ECE gain/useful", jk["ece_gain_useful"]),
        ("Spearman raw BT", jk["spearman_query"]["raw_bt"]),
        ("Spearman calibrated", jk["spearman_query"]["calibrated"]),
    ):
        ci = fig["ci"]
        est = _p(fig["estimate"])
        band = "-" if not ci else f"{ci[0]:.3f}-{ci[1]:.3f}"
        out(f"  {label}: {est}, jackknife 95% CI {band}")
    paired = jk["margin_auc_paired"]
    out(
        f"  margin AUC RCP - qrel: {_p(paired['difference'])}, "
        f"jackknife z {_p(paired['z'])}, p {_p(paired['p_two_sided'])}"
    )
    for rule, fig in inf["verdict_rules"].items():
        out(
            f"  rule {rule}: main {_p(fig['main'])}; leave-one-annotator-out "
            f"recompute {fig['loo_recompute']}, drop contests {fig['loo_drop_contests']}"
        )


def _plan(out: Callable[[str], None], plan: dict, seq: dict) -> None:
    """The registered plan, its deviations and the interim looks as text."""
    p = plan["effective"]
    when = plan["registered_at"] or "not registered"
    out(
        f"plan ({when}): endpoint {p['primary_endpoint']}, rule {p['verdict_rule']}, "
        f"alpha {p['alpha']}, {p['planned_contests']} contests, stopping "
        f"{p['stopping_rule']['kind']}"
    )
    for item in plan["deviations"]:
        out(f"  deviation: {item}")
    out(f"looks ({seq['label']}):")
    for look in seq["looks"]:
        out(
            f"  {look['look']}: information {look['information']:.2f}, "
            f"rate {_p(look['rate'])} ({look['k']}/{look['n']}), z {_p(look['z'])}, "
            f"boundary {_p(look['boundary'])}, crossed {look['crossed']}"
        )


class Command(BaseCommand):
    help = (
        "Report whether annotators side with RCP-nDCG or qrel-nDCG: from a study "
        "(--study) or from a release folder alone (--release); same numbers."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        source = parser.add_mutually_exclusive_group(required=True)
        source.add_argument("--study", help="study id or name")
        source.add_argument("--release", help="release folder (from export_release)")
        source.add_argument(
            "--reference",
            help="folder of a published study in the reference layout (CSV/parquet)",
        )
        parser.add_argument(
            "--verdict-rule",
            choices=("majority", "plurality"),
            default="majority",
            help="with --reference: how picks become verdicts",
        )
        parser.add_argument("--json", action="store_true", help="print the JSON report")
        parser.add_argument(
            "--system",
            default="",
            metavar="NAME",
            help="add this system's slices (RCP favours it, its win rate, its contests)",
        )
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
            if opts["reference"]:
                report = services.reference_report(
                    folder=Path(str(opts["reference"])),
                    verdict_rule=str(opts["verdict_rule"]),
                    exclude_systems=exclude,
                    focus_system=str(opts["system"]),
                )
            elif opts["release"]:
                report = services.release_report(
                    folder=Path(str(opts["release"])),
                    exclude_systems=exclude,
                    focus_system=str(opts["system"]),
                    severity=bool(opts["severity"]),
                )
            else:
                study = selectors.study_by_ref(ref=str(opts["study"]))
                report, _names = services.study_report_requested(
                    study=study,
                    exclude_systems=exclude,
                    focus_system=str(opts["system"]),
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
        _inference(out, report["inference"])
        if "plan" in report:
            _plan(out, report["plan"], report["sequential"])
