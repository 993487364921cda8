"""Streaming parsers for standard IR file formats. No Django import.

Every parser is a generator over records that carry their 1-based line number, so a
service can report exactly where a problem is. Malformed input raises
:class:`FormatError` naming the file, the line and what is wrong. ``.gz`` files are
read transparently.

Formats:
- corpus: BEIR JSONL, one ``{"_id", "title"?, "text"}`` object per line;
- queries: BEIR JSONL, one ``{"_id", "text"}`` object per line;
- qrels: BEIR TSV (``query-id corpus-id score``, header optional) or TREC
  (``qid iter docid rel``), detected from the first non-blank line;
- pools: ``qid<TAB>docid<TAB>rank`` (a header line is allowed);
- runs: TREC run (``qid Q0 docid rank score tag``).
"""

from __future__ import annotations

import gzip
import io
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO


class FormatError(ValueError):
    """A malformed input file. ``line`` is 1-based, or None for a whole-file problem."""

    def __init__(self, path: str | Path, line: int | None, message: str) -> None:
        self.path = str(path)
        self.line = line
        self.message = message
        where = f"{self.path}, line {line}" if line is not None else self.path
        super().__init__(f"{where}: {message}")


@dataclass(frozen=True, slots=True)
class CorpusRecord:
    line: int
    doc_id: str
    title: str
    text: str


@dataclass(frozen=True, slots=True)
class QueryRecord:
    line: int
    query_id: str
    text: str


@dataclass(frozen=True, slots=True)
class QrelRecord:
    line: int
    query_id: str
    doc_id: str
    grade: float


@dataclass(frozen=True, slots=True)
class PoolRecord:
    line: int
    query_id: str
    doc_id: str
    rank: int


@dataclass(frozen=True, slots=True)
class RunRecord:
    line: int
    query_id: str
    doc_id: str
    rank: int
    score: float


def open_text(path: str | Path) -> IO[str]:
    """Open a UTF-8 text file, gunzipping ``*.gz``. Missing files raise FormatError."""
    path = Path(path)
    if not path.is_file():
        raise FormatError(path, None, "file not found")
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8")
    return open(path, encoding="utf-8")


def _lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """Yield (line number, stripped line) for non-blank lines; refuse an empty file."""
    seen = False
    with open_text(path) as handle:
        lineno = 0
        while True:
            try:
                raw = handle.readline()
            except UnicodeDecodeError as exc:
                raise FormatError(
                    path, lineno + 1, f"not valid UTF-8 ({exc.reason})"
                ) from exc
            except (OSError, EOFError) as exc:  # truncated or corrupt gzip stream
                raise FormatError(path, lineno + 1, f"cannot read file: {exc}") from exc
            if not raw:
                break
            lineno += 1
            line = raw.strip()
            if line:
                seen = True
                yield lineno, line
    if not seen:
        raise FormatError(path, None, "file is empty")


def _identifier(value: object, path: str | Path, line: int, field: str) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise FormatError(path, line, f"field {field!r} must be a string or integer")
    text = str(value).strip()
    if not text:
        raise FormatError(path, line, f"field {field!r} is empty")
    return text


def _json_object(path: str | Path, lineno: int, line: str) -> dict:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise FormatError(
            path, lineno, f"bad JSON: {exc.msg} (column {exc.colno})"
        ) from exc
    if not isinstance(obj, dict):
        raise FormatError(path, lineno, "expected a JSON object")
    return obj


def _text_field(
    obj: dict, key: str, path: str | Path, lineno: int, required: bool
) -> str:
    if key not in obj or obj[key] is None:
        if required:
            raise FormatError(path, lineno, f"missing field {key!r}")
        return ""
    value = obj[key]
    if not isinstance(value, str):
        raise FormatError(path, lineno, f"field {key!r} must be a string")
    return value


def iter_corpus(path: str | Path) -> Iterator[CorpusRecord]:
    """BEIR corpus JSONL: ``_id`` and ``text`` required, ``title`` optional."""
    for lineno, line in _lines(path):
        obj = _json_object(path, lineno, line)
        if "_id" not in obj:
            raise FormatError(path, lineno, "missing field '_id'")
        doc_id = _identifier(obj["_id"], path, lineno, "_id")
        yield CorpusRecord(
            lineno,
            doc_id,
            _text_field(obj, "title", path, lineno, required=False),
            _text_field(obj, "text", path, lineno, required=True),
        )


def iter_queries(path: str | Path) -> Iterator[QueryRecord]:
    """BEIR queries JSONL: ``_id`` and ``text`` required."""
    for lineno, line in _lines(path):
        obj = _json_object(path, lineno, line)
        if "_id" not in obj:
            raise FormatError(path, lineno, "missing field '_id'")
        query_id = _identifier(obj["_id"], path, lineno, "_id")
        text = _text_field(obj, "text", path, lineno, required=True)
        if not text.strip():
            raise FormatError(path, lineno, "field 'text' is empty")
        yield QueryRecord(lineno, query_id, text)


def _number(value: str, path: str | Path, lineno: int, field: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise FormatError(path, lineno, f"{field} {value!r} is not a number") from None
    if not math.isfinite(number):
        raise FormatError(path, lineno, f"{field} {value!r} is not a finite number")
    return number


def _integer(value: str, path: str | Path, lineno: int, field: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise FormatError(
            path, lineno, f"{field} {value!r} is not an integer"
        ) from None


def _is_number(value: str) -> bool:
    try:
        float(value)
    except ValueError:
        return False
    return True


def _split(line: str) -> list[str]:
    # BEIR files are tab-separated; TREC files use any whitespace.
    return line.split("\t") if "\t" in line else line.split()


def iter_qrels(path: str | Path) -> Iterator[QrelRecord]:
    """Qrels in BEIR TSV (3 columns, optional header) or TREC (4 columns) format."""
    columns: int | None = None
    for lineno, line in _lines(path):
        fields = [f.strip() for f in _split(line)]
        if columns is None:
            if len(fields) == 3 and not _is_number(fields[2]):
                columns = 3  # BEIR header such as "query-id corpus-id score"
                continue
            if len(fields) not in (3, 4):
                raise FormatError(
                    path,
                    lineno,
                    f"expected 3 columns (BEIR: query-id corpus-id score) or 4 columns "
                    f"(TREC: qid iter docid rel), found {len(fields)}",
                )
            columns = len(fields)
        if len(fields) != columns:
            raise FormatError(
                path,
                lineno,
                f"wrong column count: expected {columns}, found {len(fields)}",
            )
        if columns == 3:
            qid, docid, grade = fields
        else:
            qid, _iteration, docid, grade = fields
        yield QrelRecord(
            lineno,
            _identifier(qid, path, lineno, "query id"),
            _identifier(docid, path, lineno, "doc id"),
            _number(grade, path, lineno, "grade"),
        )


def iter_pools(path: str | Path) -> Iterator[PoolRecord]:
    """Pools as ``qid<TAB>docid<TAB>rank``; ranks are positive integers."""
    first = True
    for lineno, line in _lines(path):
        fields = [f.strip() for f in _split(line)]
        if first and len(fields) == 3 and not _is_number(fields[2]):
            first = False
            continue  # header
        first = False
        if len(fields) != 3:
            raise FormatError(
                path,
                lineno,
                f"wrong column count: expected 3 (qid docid rank), found {len(fields)}",
            )
        rank = _integer(fields[2], path, lineno, "rank")
        if rank < 1:
            raise FormatError(path, lineno, f"rank {rank} must be at least 1")
        yield PoolRecord(
            lineno,
            _identifier(fields[0], path, lineno, "query id"),
            _identifier(fields[1], path, lineno, "doc id"),
            rank,
        )


def iter_run(path: str | Path) -> Iterator[RunRecord]:
    """TREC run lines ``qid Q0 docid rank score tag`` (the tag may be missing)."""
    for lineno, line in _lines(path):
        fields = line.split()
        if len(fields) not in (5, 6):
            raise FormatError(
                path,
                lineno,
                f"wrong column count: expected 6 (qid Q0 docid rank score tag), "
                f"found {len(fields)}",
            )
        yield RunRecord(
            lineno,
            _identifier(fields[0], path, lineno, "query id"),
            _identifier(fields[2], path, lineno, "doc id"),
            _integer(fields[3], path, lineno, "rank"),
            _number(fields[4], path, lineno, "score"),
        )


def rank_run(
    records: Iterator[RunRecord], path: str | Path
) -> dict[str, list[tuple[str, float, int]]]:
    """Group a run by query and order it by score (descending), ties by the file's rank.

    Returns ``{query_id: [(doc_id, score, line), ...]}`` best first. A document listed
    twice for one query raises FormatError at its second line.
    """
    by_query: dict[str, list[tuple[float, int, str, int]]] = {}
    seen: dict[str, set[str]] = {}
    for rec in records:
        docs = seen.setdefault(rec.query_id, set())
        if rec.doc_id in docs:
            raise FormatError(
                path,
                rec.line,
                f"duplicate document {rec.doc_id!r} for query {rec.query_id!r}",
            )
        docs.add(rec.doc_id)
        by_query.setdefault(rec.query_id, []).append(
            (-rec.score, rec.rank, rec.doc_id, rec.line)
        )
    ranked: dict[str, list[tuple[str, float, int]]] = {}
    for qid, entries in by_query.items():
        entries.sort(key=lambda e: (e[0], e[1]))
        ranked[qid] = [(doc_id, -neg, line) for neg, _rank, doc_id, line in entries]
    return ranked
