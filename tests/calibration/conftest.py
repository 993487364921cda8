"""Fixtures of the calibration tests: the tiny dataset and its released gains."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.services import dataset_import, run_import
from rcp.gain import rcp_gain
from tests.conftest import DEMO_TINY


@pytest.fixture
def tiny():
    dataset = dataset_import(
        name="tiny",
        corpus=DEMO_TINY / "corpus.jsonl",
        queries=DEMO_TINY / "queries.jsonl",
        qrels=DEMO_TINY / "qrels.tsv",
        pools=DEMO_TINY / "pools.tsv",
    )
    for system in ("bm25", "reranker"):
        run_import(
            dataset=dataset, system_name=system, path=DEMO_TINY / f"{system}.trec"
        )
    return dataset


def write_released_gains(path: Path, *, theta: bool = True) -> Path:
    """The released tiny items and thetas as a gains TSV, via rcp.gain."""
    released = json.loads((DEMO_TINY / "released.json").read_text())
    gamma, beta = released["items"]["gamma"], released["items"]["beta"]
    lines = ["query_id\tdoc_id\tgain" + ("\ttheta" if theta else "")]
    for q, thetas in released["thetas"].items():
        for d, t in thetas.items():
            g = float(rcp_gain(t, gamma, beta))
            lines.append(f"{q}\t{d}\t{g!r}" + (f"\t{t!r}" if theta else ""))
    path.write_text("\n".join(lines) + "\n")
    return path
