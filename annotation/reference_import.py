"""Re-analysis of a published human study in the reference's column layout (issue 14).

A folder holds three tables, each as ``NAME.csv`` or ``NAME.parquet`` (pyarrow):

- ``contests``: contest_id, suite, dataset, query_id, system_a, system_b,
  human_verdict, rcp_winner_shown, ndcg_winner_shown, d_rcp_shown, d_ndcg_shown,
  design_cell, in_analysis;
- ``reviews``: contest_id, annotator, valid_review, pick;
- ``grades``: contest_id, doc_id, counted, and annotator and grade where present.

``read_reference`` turns them into the ``Contest``/``Annotation`` inputs of
``analysis.study_report`` (the same code path as our own studies): contests with
``in_analysis`` false are left out, as the reference's analysis did; margins and
winners are taken as published (``Contest.shown_metrics``), picks too
(``Annotation.pick``); the cluster key is ``suite|dataset|query_id``; only counted
grades with an annotator feed the reliability figures. Verdicts are recomputed from
the picks under the chosen rule and compared with ``human_verdict``.
``reference_tables_from_release`` writes one of our releases in this layout. No Django.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from annotation.analysis import Annotation, Contest

__all__ = [
    "COLUMNS",
    "ReferenceStudy",
    "read_reference",
    "read_table",
    "reference_tables_from_release",
    "write_reference",
]

COLUMNS = {
    "contests": (
        "contest_id",
        "suite",
        "dataset",
        "query_id",
        "system_a",
        "system_b",
        "human_verdict",
        "rcp_winner_shown",
        "ndcg_winner_shown",
        "d_rcp_shown",
        "d_ndcg_shown",
        "design_cell",
        "in_analysis",
    ),
    "reviews": ("contest_id", "annotator", "valid_review", "pick"),
    "grades": ("contest_id", "doc_id", "counted"),
}
OPTIONAL_GRADE_COLUMNS = ("annotator", "grade")
_TRUE = {"true", "1", "yes", "y", "t"}
_FALSE = {"false", "0", "no", "n", "f", ""}
_TIES = {"tie", "none", "equal", "draw", "", "nan"}


class ReferenceError(ValueError):
    """A table is missing, lacks columns or holds a value that cannot be read."""


@dataclass(frozen=True)
class ReferenceStudy:
    contests: list[Contest]
    annotations: list[Annotation]
    human_verdicts: dict[str, str]
    left_out: int  # contests with in_analysis false
    formats: dict[str, str]


def _flag(value: Any, what: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ReferenceError(f"{what}: {value!r} is not a boolean")


def _side(value: Any, what: str) -> str:
    """ "A", "B" or "tie" from the published spellings (a/b, tie/none/empty)."""
    text = "" if value is None else str(value).strip()
    if text.upper() in ("A", "B"):
        return text.upper()
    if text.lower() in _TIES:
        return "tie"
    raise ReferenceError(f"{what}: {value!r} is not A, B or a tie")


def read_table(folder: Path, name: str) -> tuple[list[dict[str, Any]], str]:
    """Rows of ``NAME.parquet`` (preferred) or ``NAME.csv`` and the format read."""
    parquet, text = folder / f"{name}.parquet", folder / f"{name}.csv"
    if parquet.is_file():
        import pyarrow.parquet as pq  # optional dependency, pinned in requirements

        return pq.read_table(parquet).to_pylist(), "parquet"
    if text.is_file():
        with text.open(newline="", encoding="utf-8") as fh:
            return list(csv.DictReader(fh)), "csv"
    raise ReferenceError(f"missing table {name} (.parquet or .csv) in {folder}")


def _check_columns(name: str, rows: list[dict[str, Any]]) -> None:
    if not rows:
        raise ReferenceError(f"table {name} is empty")
    missing = [c for c in COLUMNS[name] if c not in rows[0]]
    if missing:
        raise ReferenceError(f"table {name} lacks columns: {', '.join(missing)}")


def read_reference(folder: Path) -> ReferenceStudy:
    """The published study of ``folder`` as report inputs (see the module doc)."""
    folder = Path(folder)
    tables, formats = {}, {}
    for name in COLUMNS:
        tables[name], formats[name] = read_table(folder, name)
        _check_columns(name, tables[name])
    contests, verdicts, left_out = [], {}, 0
    for row in tables["contests"]:
        cid = str(row["contest_id"])
        if not _flag(row["in_analysis"], f"contest {cid} in_analysis"):
            left_out += 1
            continue
        try:
            margins = float(row["d_rcp_shown"]), float(row["d_ndcg_shown"])
        except (TypeError, ValueError) as exc:
            raise ReferenceError(f"contest {cid}: margins must be numbers") from exc
        contests.append(
            Contest(
                contest_id=cid,
                query_id=f"{row['suite']}|{row['dataset']}|{row['query_id']}",
                list_a=(),
                list_b=(),
                gains={},
                design_cell=str(row["design_cell"] or ""),
                dataset=str(row["dataset"]),
                system_a=str(row["system_a"]),
                system_b=str(row["system_b"]),
                shown_metrics=(
                    margins[0],
                    margins[1],
                    _side(row["rcp_winner_shown"], f"contest {cid} rcp winner"),
                    _side(row["ndcg_winner_shown"], f"contest {cid} ndcg winner"),
                ),
            )
        )
        verdicts[cid] = _side(row["human_verdict"], f"contest {cid} verdict")
    kept = set(verdicts)
    grades: dict[tuple[str, str], dict[str, int]] = defaultdict(dict)
    if all(c in tables["grades"][0] for c in OPTIONAL_GRADE_COLUMNS):
        for g in tables["grades"]:
            cid = str(g["contest_id"])
            if cid not in kept or not _flag(g["counted"], f"grade of {cid} counted"):
                continue
            if g["annotator"] in (None, "") or g["grade"] in (None, ""):
                continue
            grades[cid, str(g["annotator"])][str(g["doc_id"])] = int(float(g["grade"]))
    annotations = [
        Annotation(
            contest_id=str(r["contest_id"]),
            annotator=str(r["annotator"]),
            grades=grades.get((str(r["contest_id"]), str(r["annotator"])), {}),
            valid=_flag(r["valid_review"], f"review of {r['contest_id']} valid"),
            pick=_side(r["pick"], f"review of {r['contest_id']} pick"),
        )
        for r in tables["reviews"]
        if str(r["contest_id"]) in kept
    ]
    return ReferenceStudy(contests, annotations, verdicts, left_out, formats)


def reference_tables_from_release(
    tables: Mapping[str, list[dict[str, Any]]], *, suite: str = "rcp-platform"
) -> dict[str, list[dict[str, Any]]]:
    """One of our completed releases (``release_format`` tables) in the reference
    layout: shown margins and winners, published picks and verdicts, every grade
    counted. Everything is in the analysis."""
    verdicts = {v["contest_id"]: v["verdict"] for v in tables["verdicts"]}
    return {
        "contests": [
            {
                "contest_id": c["contest_id"],
                "suite": suite,
                "dataset": c["dataset"],
                "query_id": c["query_id"],
                "system_a": c["system_a"],
                "system_b": c["system_b"],
                "human_verdict": verdicts[c["contest_id"]],
                "rcp_winner_shown": c["rcp_winner_shown"],
                "ndcg_winner_shown": c["qrel_winner_shown"],
                "d_rcp_shown": c["rcp_margin_shown"],
                "d_ndcg_shown": c["qrel_margin_shown"],
                "design_cell": c["design_cell"],
                "in_analysis": True,
            }
            for c in tables["contests"]
        ],
        "reviews": [
            {
                "contest_id": r["contest_id"],
                "annotator": r["annotator"],
                "valid_review": r["valid"],
                "pick": r["pick"],
            }
            for r in tables["reviews"]
        ],
        "grades": [
            {
                "contest_id": g["contest_id"],
                "doc_id": g["doc_id"],
                "counted": True,
                "annotator": g["annotator"],
                "grade": g["grade"],
            }
            for g in tables["grades"]
        ],
    }


def write_reference(
    folder: Path, tables: Mapping[str, list[dict[str, Any]]], *, fmt: str = "csv"
) -> None:
    """Write reference-layout tables as ``NAME.csv`` or ``NAME.parquet``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for name, rows in tables.items():
        if fmt == "parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            pq.write_table(pa.Table.from_pylist(list(rows)), folder / f"{name}.parquet")
        elif fmt == "csv":
            with (folder / f"{name}.csv").open("w", newline="", encoding="utf-8") as fh:
                writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
                writer.writeheader()
                writer.writerows(rows)
        else:
            raise ValueError(f"unknown format {fmt!r}")
