"""``demo``: load the demo benchmarks and accounts (idempotent)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser
from django.db import transaction

from annotation.services import annotator_group_ensure
from benchmarks.models import Dataset, Protocol
from benchmarks.services import dataset_import, run_import
from benchmarks.synthetic import SyntheticSpec, write_benchmark
from portal.demo_accounts import ADMIN, ANNOTATORS

DEMO_DIR = Path(__file__).resolve().parents[2] / "demo_data"


class Command(BaseCommand):
    help = "Load the demo data (tiny + a generated benchmark) and demo accounts. Idempotent."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--if-empty",
            action="store_true",
            help="do nothing if any dataset exists (used by `make run` on every start)",
        )

    def handle(self, *args: object, **opts: object) -> None:
        if opts["if_empty"] and Dataset.objects.exists():
            self.stdout.write("Demo: datasets exist already, nothing loaded.")
            return
        with transaction.atomic():
            self._load_tiny()
            self._load_generated()
            self._accounts()
        self._annotation_study()
        self.stdout.write(self.style.SUCCESS("Demo loaded."))
        self.print_logins(self.stdout)

    @staticmethod
    def print_logins(out) -> None:
        out.write(
            "Demo logins (development passwords; change them for any shared install):"
        )
        out.write(f"  admin:     {ADMIN[0]} / {ADMIN[1]}")
        for name, password in ANNOTATORS:
            out.write(f"  annotator: {name} / {password}")

    def _load_tiny(self) -> None:
        if Dataset.objects.filter(name="tiny").exists():
            return
        tiny = DEMO_DIR / "tiny"
        dataset = dataset_import(
            name="tiny",
            corpus=tiny / "corpus.jsonl",
            queries=tiny / "queries.jsonl",
            qrels=tiny / "qrels.tsv",
            pools=tiny / "pools.tsv",
            description="The reference implementation's 3-query tiny data set.",
        )
        for system in ("bm25", "reranker"):
            run_import(
                dataset=dataset, system_name=system, path=tiny / f"{system}.trec"
            )
        self.stdout.write(
            "Demo: loaded dataset 'tiny' (3 queries, 24 documents, 2 systems)."
        )

    def _load_generated(self) -> None:
        name = "demo-synthetic"
        if Dataset.objects.filter(name=name).exists():
            return
        spec = SyntheticSpec()
        with tempfile.TemporaryDirectory() as tmp:
            paths = write_benchmark(tmp, spec)
            dataset = dataset_import(
                name=name,
                corpus=paths["corpus"],
                queries=paths["queries"],
                qrels=paths["qrels"],
                pools=paths["pools"],
                protocol=Protocol.PLAIN,
                description=(
                    f"Generated: {spec.n_queries} queries x {spec.docs_per_query} documents, "
                    "sparse binary qrels, 4 systems of decreasing quality."
                ),
            )
            for system, path in paths["runs"].items():
                run_import(dataset=dataset, system_name=system, path=path)
        self.stdout.write(f"Demo: loaded dataset {name!r}.")

    def _accounts(self) -> None:
        User = get_user_model()
        admin, _ = User.objects.get_or_create(
            username=ADMIN[0], defaults={"email": "admin@example.org"}
        )
        admin.is_staff = admin.is_superuser = True
        admin.set_password(ADMIN[1])
        admin.save(update_fields=["is_staff", "is_superuser", "password"])
        group = annotator_group_ensure()
        for name, password in ANNOTATORS:
            user, _ = User.objects.get_or_create(username=name)
            user.set_password(password)
            user.save(update_fields=["password"])
            user.groups.add(group)
        if not settings.DEBUG:
            self.stderr.write(
                "Warning: demo accounts with known passwords on a DEBUG=off install."
            )

    def _annotation_study(self) -> None:
        """Released gains for 'tiny' (if it has no calibration) and an open study of
        its two systems with the three demo annotators. Idempotent."""
        import json

        from annotation.models import Study
        from annotation.selectors import contest_candidates, fit_latest_for
        from annotation.services import study_create, study_member_add
        from calibration.services import gains_import
        from rcp.gain import rcp_gain

        name = "Demo study"
        dataset = Dataset.objects.filter(name="tiny").first()
        if dataset is None or Study.objects.filter(name=name).exists():
            return
        with transaction.atomic():
            fit = fit_latest_for(datasets=[dataset])
            if fit is None:
                released = json.loads((DEMO_DIR / "tiny" / "released.json").read_text())
                items = released["items"]
                lines = ["query_id\tdoc_id\ttheta\tgain"]
                for qid, thetas in released["thetas"].items():
                    for did, theta in thetas.items():
                        gain = float(rcp_gain(theta, items["gamma"], items["beta"]))
                        lines.append(f"{qid}\t{did}\t{theta!r}\t{gain!r}")
                with tempfile.TemporaryDirectory() as tmp:
                    path = Path(tmp) / "tiny-released-gains.tsv"
                    path.write_text("\n".join(lines) + "\n")
                    fit = gains_import(dataset=dataset, path=path)
            systems = list(dataset.systems.order_by("name"))
            n = len(contest_candidates(fit=fit, systems=systems, depth=5))
            study = study_create(
                name=name,
                datasets=[dataset],
                systems=systems,
                n_contests=n,
                fit=fit,
                seed=1,
                open_now=True,
            )
            User = get_user_model()
            for username, _password in ANNOTATORS:
                study_member_add(
                    study=study, annotator=User.objects.get(username=username)
                )
        self.stdout.write(
            f"Demo: opened study {study.pk} {name!r} ({n} contests on 'tiny', "
            f"3 annotators each)."
        )
