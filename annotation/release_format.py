"""The file format of a study release: schema, writing, reading and verification.

No Django import: ``verify_release`` and ``study_report --release`` work on a folder
alone. A release holds five tables, each as CSV and JSONL with the same rows
(nested values are JSON text in CSV cells, null is an empty cell), a datasheet
``README.md`` and ``manifest.json`` with the SHA-256 of every other file.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FORMAT = "rcp-study-release"
FORMAT_VERSION = 2  # 2: grades.valid_review; version 1 releases still read
READABLE_VERSIONS = (1, 2)
MANIFEST = "manifest.json"
DATASHEET = "README.md"


@dataclass(frozen=True)
class Field:
    name: str
    type: str  # str | int | float | bool | list[str] | dict
    description: str
    nullable: bool = False


def _f(name: str, type_: str, description: str, nullable: bool = False) -> Field:
    return Field(name, type_, description, nullable)


SCHEMA: dict[str, tuple[Field, ...]] = {
    "contests": (
        _f("contest_id", "int", "contest number within the study (1, 2, ...)"),
        _f("design_cell", "str", "why the contest was drawn (sampling design cell)"),
        _f("dataset", "str", "dataset name"),
        _f("query_id", "str", "query id in the dataset"),
        _f("query_text", "str", "query text (with --include-text)", True),
        _f("system_a", "str", "system shown as list A"),
        _f("system_b", "str", "system shown as list B"),
        _f("list_a", "list[str]", "document ids of list A, rank 1 first"),
        _f("list_b", "list[str]", "document ids of list B, rank 1 first"),
        _f("displayed", "list[str]", "the de-duplicated union shown to annotators"),
        _f("rcp_ndcg_a", "float", "RCP-nDCG@metric_k of A over its ranking (design)"),
        _f("rcp_ndcg_b", "float", "RCP-nDCG@metric_k of B over its ranking (design)"),
        _f("qrel_ndcg_a", "float", "qrel-nDCG@metric_k of A (design)"),
        _f("qrel_ndcg_b", "float", "qrel-nDCG@metric_k of B (design)"),
        _f("rcp_margin_shown", "float", "RCP-nDCG@k(A) - (B), displayed docs"),
        _f("qrel_margin_shown", "float", "qrel-nDCG@k(A) - (B), displayed docs"),
        _f("rcp_winner_shown", "str", "A, B or tie by RCP-nDCG@k shown"),
        _f("qrel_winner_shown", "str", "A, B or tie by qrel-nDCG@k shown"),
    ),
    "documents": (
        _f("dataset", "str", "dataset name"),
        _f("query_id", "str", "query id"),
        _f("doc_id", "str", "document id in the dataset"),
        _f("gain", "float", "RCP gain in [0, 1] of the study's calibration", True),
        _f("qrel", "float", "benchmark qrel grade (null: unjudged)", True),
        _f("theta_bt", "float", "raw Bradley-Terry ability", True),
        _f("theta", "float", "calibrated ability", True),
        _f("title", "str", "document title (with --include-text)", True),
        _f("text", "str", "document text (with --include-text)", True),
    ),
    "grades": (
        _f("contest_id", "int", "contest number"),
        _f("doc_id", "str", "document id"),
        _f("annotator", "str", "annotator hash (HMAC-SHA256, 16 hex)"),
        _f("rubric_version", "int", "rubric version answered"),
        _f("answers", "dict", "raw answers per question key (true/false/null)"),
        _f("grade", "int", "index of the most stringent yes (0 if none)"),
        _f("order", "int", "rank among equally graded documents (1 best)", True),
        _f("seconds", "float", "seconds spent on the document"),
        _f(
            "valid_review",
            "bool",
            "the review counts (false: its annotator was excluded; see reviews.valid)",
        ),
    ),
    "reviews": (
        _f("contest_id", "int", "contest number"),
        _f("annotator", "str", "annotator hash"),
        _f("pick", "str", "A, B or tie from the annotator's grades (shared ideal)"),
        _f("valid", "bool", "counted in the analysis"),
    ),
    "verdicts": (
        _f("contest_id", "int", "contest number"),
        _f("picks_a", "int", "valid picks of A"),
        _f("picks_b", "int", "valid picks of B"),
        _f("picks_tie", "int", "valid tie picks"),
        _f("verdict", "str", "strict majority of all picks: A, B or tie"),
        _f("rcp_winner_shown", "str", "A, B or tie by RCP-nDCG@k"),
        _f("qrel_winner_shown", "str", "A, B or tie by qrel-nDCG@k"),
        _f("class", "str", "both, rcp, qrel, neither or tie"),
    ),
}
TABLES = tuple(SCHEMA)


def schema_for(version: Any) -> dict[str, tuple[Field, ...]]:
    """The schema a release of ``version`` was written with (v1 lacks
    ``grades.valid_review``, which ``read`` then fills from ``reviews.valid``)."""
    if version == 1:
        return {
            **SCHEMA,
            "grades": tuple(f for f in SCHEMA["grades"] if f.name != "valid_review"),
        }
    return SCHEMA


DATA_FILES = tuple(f"{t}.{ext}" for t in TABLES for ext in ("csv", "jsonl"))


class ReleaseError(Exception):
    """A release folder is incomplete, tampered with or off-schema."""

    def __init__(self, errors: Sequence[str]) -> None:
        super().__init__("; ".join(errors[:5]))
        self.errors = list(errors)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 16), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool | list | dict):
        return json.dumps(value, sort_keys=True)
    return str(value) if not isinstance(value, float) else repr(value)


def write_tables(
    folder: Path, tables: Mapping[str, Sequence[Mapping[str, Any]]]
) -> None:
    """Write every table as ``<name>.csv`` and ``<name>.jsonl`` in schema order."""
    for name, fields in SCHEMA.items():
        names = [f.name for f in fields]
        rows = tables[name]
        with (folder / f"{name}.jsonl").open("w", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps({n: row[n] for n in names}, sort_keys=False))
                fh.write("\n")
        with (folder / f"{name}.csv").open("w", encoding="utf-8", newline="") as fh:
            writer = csv.writer(fh, lineterminator="\n")
            writer.writerow(names)
            for row in rows:
                writer.writerow([_cell(row[n]) for n in names])


def write_manifest(folder: Path, header: Mapping[str, Any]) -> str:
    """Hash every file of the release into ``manifest.json``; returns its SHA-256."""
    files = {}
    for name in (*DATA_FILES, DATASHEET):
        path = folder / name
        rows = None
        if name.endswith(".jsonl"):
            rows = sum(1 for _ in path.open(encoding="utf-8"))
        files[name] = {"sha256": sha256_file(path), "rows": rows}
    manifest = {"format": FORMAT, "version": FORMAT_VERSION, **header, "files": files}
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return sha256_file(folder / MANIFEST)


def _type_error(field: Field, value: Any) -> str | None:
    if value is None:
        return None if field.nullable else "is null"
    ok = {
        "str": isinstance(value, str),
        "int": isinstance(value, int) and not isinstance(value, bool),
        "float": isinstance(value, int | float) and not isinstance(value, bool),
        "bool": isinstance(value, bool),
        "dict": isinstance(value, dict),
        "list[str]": isinstance(value, list) and all(isinstance(v, str) for v in value),
    }[field.type]
    return None if ok else f"expected {field.type}, got {type(value).__name__}"


def _parse_cell(field: Field, text: str) -> Any:
    if text == "":
        return None if field.nullable or field.type != "str" else ""
    if field.type == "str":
        return text
    return json.loads(text)


def _check_jsonl(
    folder: Path, table: str, errors: list[str], schema: Mapping = SCHEMA
) -> list[dict]:
    fields = schema[table]
    names = [f.name for f in fields]
    rows: list[dict] = []
    path = folder / f"{table}.jsonl"
    for line_no, line in enumerate(path.open(encoding="utf-8"), 1):
        where = f"{table}.jsonl line {line_no}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            errors.append(f"{where}: not JSON ({exc.msg})")
            continue
        if not isinstance(row, dict):
            errors.append(f"{where}: not an object")
            continue
        for name in sorted(set(names) - set(row)):
            errors.append(f"{where}: field {name!r} missing")
        for name in sorted(set(row) - set(names)):
            errors.append(f"{where}: unexpected field {name!r}")
        for field in fields:
            if field.name in row:
                problem = _type_error(field, row[field.name])
                if problem:
                    errors.append(f"{where}: field {field.name!r} {problem}")
        rows.append(row)
    return rows


def _check_csv(
    folder: Path,
    table: str,
    rows: list[dict],
    errors: list[str],
    schema: Mapping = SCHEMA,
) -> None:
    fields = schema[table]
    with (folder / f"{table}.csv").open(encoding="utf-8", newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader, [])
        if header != [f.name for f in fields]:
            errors.append(f"{table}.csv line 1: header {header} is not the schema")
            return
        count = 0
        for line_no, cells in enumerate(reader, 2):
            count += 1
            if len(cells) != len(fields):
                errors.append(f"{table}.csv line {line_no}: {len(cells)} cells")
                continue
            jsonl = rows[line_no - 2] if line_no - 2 < len(rows) else {}
            for field, text in zip(fields, cells, strict=True):
                try:
                    value = _parse_cell(field, text)
                except json.JSONDecodeError:
                    value = text
                problem = _type_error(field, value)
                if problem is None and value != jsonl.get(field.name):
                    problem = "differs from the JSONL row"
                if problem:
                    errors.append(
                        f"{table}.csv line {line_no}: field {field.name!r} {problem}"
                    )
        if count != len(rows):
            errors.append(f"{table}.csv: {count} rows, {table}.jsonl has {len(rows)}")


def _check_references(tables: Mapping[str, list[dict]], errors: list[str]) -> None:
    contests = {r.get("contest_id"): r for r in tables["contests"]}
    docs = {
        (r.get("dataset"), r.get("query_id"), r.get("doc_id"))
        for r in tables["documents"]
    }
    for line_no, c in enumerate(tables["contests"], 1):
        for d in c.get("displayed") or []:
            if (c.get("dataset"), c.get("query_id"), d) not in docs:
                errors.append(
                    f"contests.jsonl line {line_no}: field 'displayed': document "
                    f"{d!r} missing from documents"
                )
    for table in ("grades", "reviews", "verdicts"):
        for line_no, r in enumerate(tables[table], 1):
            contest = contests.get(r.get("contest_id"))
            if contest is None:
                errors.append(
                    f"{table}.jsonl line {line_no}: field 'contest_id': "
                    f"unknown contest {r.get('contest_id')!r}"
                )
            elif table == "grades" and r.get("doc_id") not in (
                contest.get("displayed") or []
            ):
                errors.append(
                    f"grades.jsonl line {line_no}: field 'doc_id': "
                    f"{r.get('doc_id')!r} was not shown in contest {r['contest_id']}"
                )


def verify(
    folder: Path, *, digest: str | None = None
) -> tuple[dict, dict[str, list[dict]], list[str]]:
    """Check a release folder: manifest, SHA-256 of each file, schema of every line,
    CSV equal to JSONL, references between tables. Returns (manifest, tables,
    errors); errors name the file, line and field.

    The manifest only proves the files agree with it: whoever changes a file can
    rewrite the manifest too. ``digest``, the manifest's SHA-256 printed at export
    (and shown on the study page), closes that gap: a different manifest is an error.
    """
    folder = Path(folder)
    errors: list[str] = []
    if digest is not None and (folder / MANIFEST).is_file():
        actual = sha256_file(folder / MANIFEST)
        if actual != digest.strip().lower():
            errors.append(
                f"{MANIFEST}: SHA-256 {actual} is not the published digest "
                f"{digest.strip()}: the manifest (so possibly any file) was changed"
            )
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except FileNotFoundError:
        return {}, {}, [f"{MANIFEST}: missing"]
    except json.JSONDecodeError as exc:
        return {}, {}, [f"{MANIFEST}: not JSON ({exc.msg})"]
    version = manifest.get("version")
    if manifest.get("format") != FORMAT or version not in READABLE_VERSIONS:
        errors.append(f"{MANIFEST}: not a {FORMAT} v{FORMAT_VERSION} manifest")
    schema = schema_for(version)
    listed = manifest.get("files") or {}
    for name in (*DATA_FILES, DATASHEET):
        if name not in listed:
            errors.append(f"{MANIFEST}: file {name!r} not listed")
    present = {p.name for p in folder.iterdir() if p.is_file()} - {MANIFEST}
    for name in sorted(present - set(listed)):
        errors.append(f"{name}: not listed in the manifest")
    for name, meta in sorted(listed.items()):
        path = folder / name
        if not path.is_file():
            errors.append(f"{name}: missing")
        elif sha256_file(path) != (meta or {}).get("sha256"):
            errors.append(f"{name}: SHA-256 differs from the manifest (file changed)")
    tables: dict[str, list[dict]] = {}
    for table in TABLES:
        if not (folder / f"{table}.jsonl").is_file():
            continue
        tables[table] = _check_jsonl(folder, table, errors, schema)
        if (folder / f"{table}.csv").is_file():
            _check_csv(folder, table, tables[table], errors, schema)
    if len(tables) == len(TABLES):
        _check_references(tables, errors)
    return manifest, tables, errors


def read(folder: Path) -> tuple[dict, dict[str, list[dict]]]:
    """Manifest and tables of a verified release; ReleaseError listing the problems."""
    manifest, tables, errors = verify(folder)
    if errors:
        raise ReleaseError(errors)
    if manifest.get("version") == 1:
        valid = {
            (r["contest_id"], r["annotator"]): r["valid"] for r in tables["reviews"]
        }
        for g in tables["grades"]:
            g["valid_review"] = valid.get((g["contest_id"], g["annotator"]), True)
    return manifest, tables


THREAT_MODEL = """## Annotator anonymity and threat model

Annotators appear only as 16 hex characters: HMAC-SHA256 of the study id and a
random per-annotator id (32 random bytes, created with the annotator's account and
never shown), keyed by a secret of at least 32 random bytes (`RELEASE_HASH_KEY`)
kept outside the database. A hash is the same in every release of this study and
unrelated across studies.

- **Protected against anyone holding this release** (readers, other annotators, the
  public): linking a hash to a platform account or a person. Without the key the
  hash is one-way; even with the key, trying account numbers or usernames reveals
  nothing, because the hashed value is random, not an account number.
- **Not protected against the platform's operators**: whoever has both the
  database and the key can map hashes to accounts (needed to honour a withdrawal
  request). Leaking both together de-anonymises every release.
- **Not hidden**: what each annotator did. The number of grades, time per document
  and answer patterns can single out an annotator to someone who knows how much a
  person graded, above all in studies with few annotators.
- **Not included**: usernames, names, e-mails, IP addresses, comments or any free
  text typed by annotators, times of day.

"""


def datasheet(
    *,
    header: Mapping[str, Any],
    rubrics: Sequence[Mapping[str, Any]],
    counts: Mapping[str, int],
) -> str:
    """The release's README.md: design, rubric versions with questions, counts and
    the field descriptions of every table."""
    out = io.StringIO()
    w = out.write
    w(f"# {header['title']}: release {header['release']}\n\n")
    w(
        "Anonymised grades of a blind human study comparing two rankings per query "
        "(a *contest*). Annotators saw the de-duplicated union of both top-k lists in "
        "a per-annotator random order, without system names, ranks, qrels or gains.\n\n"
    )
    w(THREAT_MODEL)
    w("## Design\n\n")
    for key, value in header["design"].items():
        w(f"- **{key}**: `{json.dumps(value, sort_keys=True)}`\n")
    w("\n## Rubric\n\nGrade = index of the most stringent question answered yes ")
    w("(0 if none).\n\n")
    for rubric in rubrics:
        w(f"### Version {rubric['version']}\n\n")
        for i, q in enumerate(rubric["questions"], 1):
            w(f"{i}. `{q['key']}`: {q['text']}\n")
        w("\n")
    w("## Counts\n\n")
    for key, value in counts.items():
        w(f"- {key}: {value}\n")
    w("\n## Files\n\nEach table comes as CSV (nested values as JSON text, null as an ")
    w("empty cell) and JSONL with the same rows. `manifest.json` holds the SHA-256 ")
    w("of every file, and the SHA-256 of `manifest.json` itself (the digest printed ")
    w("at export and shown with the release; publish it with the data) pins them ")
    w("all: check with `manage.py verify_release DIR --digest SHA256` and re-run the ")
    w("analysis with `manage.py study_report --release DIR`.\n\n")
    for table, fields in SCHEMA.items():
        w(f"### `{table}`\n\n| field | type | description |\n|---|---|---|\n")
        for f in fields:
            kind = f.type + (" or null" if f.nullable else "")
            w(f"| `{f.name}` | {kind} | {f.description} |\n")
        w("\n")
    return out.getvalue()
