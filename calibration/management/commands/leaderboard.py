"""``leaderboard``: RCP-, Count- and qrel-nDCG of every system with pair tests."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError, CommandParser

from calibration.selectors import METRICS, leaderboard_compute, run_read
from rcp.ndcg import PROTOCOLS
from rcp_platform.exceptions import ApplicationError

from ._common import datasets_named


class Command(BaseCommand):
    help = (
        "Leaderboard of a dataset (or the suite mean of several) under RCP-, Count- "
        "and qrel-nDCG@k, with bootstrap CIs and paired t-tests."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--dataset", action="append", required=True)
        parser.add_argument("--k", type=int, default=10)
        parser.add_argument("--protocol", choices=sorted(PROTOCOLS))
        parser.add_argument(
            "--run",
            action="append",
            default=[],
            metavar="[NAME=]FILE",
            help="also score an unsaved TREC run against the gains (repeatable)",
        )
        parser.add_argument("--per-query", action="store_true")
        parser.add_argument("--json", action="store_true")
        parser.add_argument(
            "--allow-unconverged",
            action="store_true",
            help="score with a fit that did not converge (refused by default; a "
            "warning is printed)",
        )

    def handle(self, *args: object, **opts: object) -> None:
        datasets = datasets_named(opts["dataset"])
        try:
            extra = {}
            for spec in opts["run"]:
                name, _, path = spec.rpartition("=")
                extra[name or path] = run_read(path=path)
            board = leaderboard_compute(
                datasets=datasets,
                k=opts["k"],
                protocol=opts["protocol"],
                extra_runs=extra or None,
                include_queries=opts["per_query"],
                allow_unconverged=opts["allow_unconverged"],
            )
        except ApplicationError as exc:
            raise CommandError(exc.message) from exc
        for warning in board["warnings"]:
            self.stderr.write(self.style.ERROR(f"WARNING: {warning}"))
        for notice in board["notices"]:
            self.stderr.write(self.style.WARNING(f"note: {notice}"))
        if opts["json"]:
            self.stdout.write(json.dumps(board, indent=2, allow_nan=False))
            return
        self._table(board)

    def _table(self, board: dict) -> None:
        self.stdout.write(
            f"k={board['k']}  protocol={board['protocol'] or 'per dataset'}  "
            f"datasets={', '.join(board['datasets'])}  fits="
            + ", ".join(
                f"{d}: {'none (qrel-nDCG only)' if f is None else f}"
                for d, f in board["fits"].items()
            )
        )
        width = max([len(s["system"]) for s in board["systems"]] + [6])
        head = f"{'system':<{width}}  " + "  ".join(
            f"{m:>24}" for m in ("RCP-nDCG [95% CI]", "Count-nDCG", "qrel-nDCG")
        )
        self.stdout.write(head)
        for s in board["systems"]:
            cells = []
            for m, ci in zip(METRICS, ("rcp_ci", "count_ci", "qrel_ci"), strict=True):
                v, c = s[m], s[ci]
                cell = "-" if v is None else f"{v:.4f}"
                if c:
                    cell += f" [{c[0]:.3f},{c[1]:.3f}]"
                if s["rank"][m] and s["rank"][m] != s["rank"]["rcp_ndcg"]:
                    cell += f" #{s['rank'][m]}"
                cells.append(f"{cell:>24}")
            self.stdout.write(f"{s['system']:<{width}}  " + "  ".join(cells))
        sep = [p for p in board["pairs"] if p["separated"]]
        self.stdout.write(
            f"{len(sep)} of {len(board['pairs'])} pair tests separated (p<0.05); "
            "sensitivity "
            + ", ".join(
                f"{m} {v:.2f}" for m, v in board["sensitivity"].items() if v is not None
            )
        )
