"""Streaming parsers for standard IR file formats. No Django import.

Every parser is a generator over records that carry their 1-based line number, so a
service can report exactly where a problem is. Malformed input raises
:class:`FormatError` naming the file, the line and what is wrong. ``.gz`` files are
read transparently; a UTF-8 byte order mark is skipped.

Every read is capped (:class:`Limits`): the bytes read after decompression (a 2 MB
gzip can hold 2 GB) and the length of one line (a line is held in memory whole).
Identifiers are capped at the database's column length, and text holding NUL
characters or lone surrogates (which PostgreSQL refuses) is refused with its line.
The caps come from ``limits_provider`` (the benchmarks app points it at the
settings ``IMPORT_MAX_BYTES``/``IMPORT_MAX_LINE_CHARS``) unless a caller passes its
own.

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
import re
from collections.abc import Callable, Iterator
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
class Limits:
    """Caps of one file read: bytes after decompression, characters per line,
    characters per identifier (the ``external_id`` column)."""

    max_bytes: int = 16 * 1024**3
    max_line_chars: int = 8 * 1024**2
    max_id_chars: int = 200


# Replaced by the benchmarks app at start-up with one that reads the settings.
limits_provider: Callable[[], Limits] = Limits

_SURROGATE = re.compile("[\ud800-\udfff]")


class _CappedReader(io.RawIOBase):
    """A binary stream that refuses to deliver more than ``limit`` bytes."""

    def __init__(self, raw: IO[bytes], limit: int, path: str | Path) -> None:
        self._raw, self._limit, self._path, self._read = raw, limit, path, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        count = self._raw.readinto(buffer)  # type: ignore[attr-defined]
        self._read += count or 0
        if self._read > self._limit:
            raise FormatError(
                self._path,
                None,
                f"more than {self._limit} bytes after decompression "
                "(IMPORT_MAX_BYTES); refused",
            )
        return count

    def close(self) -> None:
        self._raw.close()
        super().close()


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


def open_text(path: str | Path, limits: Limits | None = None) -> IO[str]:
    """Open a UTF-8 text file (a leading BOM is skipped), gunzipping ``*.gz``, capped
    at ``limits.max_bytes`` read. Missing files raise FormatError."""
    path = Path(path)
    limits = limits or limits_provider()
    if not path.is_file():
        raise FormatError(path, None, "file not found")
    raw: IO[bytes] = gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")
    capped = io.BufferedReader(_CappedReader(raw, limits.max_bytes, path))
    return io.TextIOWrapper(capped, encoding="utf-8-sig")


def numbered_lines(
    handle: IO[str], path: str | Path, limits: Limits | None = None
) -> Iterator[tuple[int, str]]:
    """Yield (line number, raw line) of an open text file, refusing a line longer than
    ``limits.max_line_chars``, NUL characters, bad UTF-8 and broken gzip streams."""
    max_line = (limits or limits_provider()).max_line_chars
    lineno = 0
    while True:
        try:
            raw = handle.readline(max_line + 1)
        except UnicodeDecodeError as exc:
            raise FormatError(
                path, lineno + 1, f"not valid UTF-8 ({exc.reason})"
            ) from exc
        except FormatError as exc:  # the size cap: name the line it was reached at
            raise FormatError(path, lineno + 1, exc.message) from None
        except (OSError, EOFError) as exc:  # truncated or corrupt gzip stream
            raise FormatError(path, lineno + 1, f"cannot read file: {exc}") from exc
        if not raw:
            return
        lineno += 1
        if len(raw) > max_line and not raw.endswith("\n"):
            raise FormatError(
                path,
                lineno,
                f"line longer than {max_line} characters (IMPORT_MAX_LINE_CHARS); "
                "refused",
            )
        if "\x00" in raw:
            raise FormatError(
                path, lineno, "contains a NUL character (\\u0000), not text"
            )
        yield lineno, raw


def _lines(path: str | Path, limits: Limits) -> Iterator[tuple[int, str]]:
    """Yield (line number, stripped line) for non-blank lines; refuse an empty file."""
    seen = False
    with open_text(path, limits) as handle:
        for lineno, raw in numbered_lines(handle, path, limits):
            line = raw.strip()
            if line:
                seen = True
                yield lineno, line
    if not seen:
        raise FormatError(path, None, "file is empty")


def _check_text(value: str, path: str | Path, line: int, field: str) -> str:
    """Refuse what databases cannot store: NUL characters and lone surrogates."""
    if "\x00" in value:
        raise FormatError(
            path, line, f"field {field!r} contains a NUL character (\\u0000)"
        )
    bad = _SURROGATE.search(value)
    if bad:
        raise FormatError(
            path,
            line,
            f"field {field!r} contains a lone surrogate "
            f"(\\u{ord(bad.group()):04x}), which is not valid Unicode",
        )
    return value


def _identifier(
    value: object, path: str | Path, line: int, field: str, limits: Limits
) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise FormatError(path, line, f"field {field!r} must be a string or integer")
    text = str(value).strip()
    if not text:
        raise FormatError(path, line, f"field {field!r} is empty")
    if len(text) > limits.max_id_chars:
        raise FormatError(
            path,
            line,
            f"field {field!r} is {len(text)} characters long; ids have at most "
            f"{limits.max_id_chars}",
        )
    return _check_text(text, path, line, field)


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
    return _check_text(value, path, lineno, key)


def iter_corpus(
    path: str | Path, limits: Limits | None = None
) -> Iterator[CorpusRecord]:
    """BEIR corpus JSONL: ``_id`` and ``text`` required, ``title`` optional."""
    limits = limits or limits_provider()
    for lineno, line in _lines(path, limits):
        obj = _json_object(path, lineno, line)
        if "_id" not in obj:
            raise FormatError(path, lineno, "missing field '_id'")
        doc_id = _identifier(obj["_id"], path, lineno, "_id", limits)
        yield CorpusRecord(
            lineno,
            doc_id,
            _text_field(obj, "title", path, lineno, required=False),
            _text_field(obj, "text", path, lineno, required=True),
        )


def iter_queries(
    path: str | Path, limits: Limits | None = None
) -> Iterator[QueryRecord]:
    """BEIR queries JSONL: ``_id`` and ``text`` required."""
    limits = limits or limits_provider()
    for lineno, line in _lines(path, limits):
        obj = _json_object(path, lineno, line)
        if "_id" not in obj:
            raise FormatError(path, lineno, "missing field '_id'")
        query_id = _identifier(obj["_id"], path, lineno, "_id", limits)
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


def iter_qrels(path: str | Path, limits: Limits | None = None) -> Iterator[QrelRecord]:
    """Qrels in BEIR TSV (3 columns, optional header) or TREC (4 columns) format.
    Grades are numbers >= 0; a file with a header and no rows is refused."""
    limits = limits or limits_provider()
    columns: int | None = None
    rows = 0
    for lineno, line in _lines(path, limits):
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
            qid, docid, grade_text = fields
        else:
            qid, _iteration, docid, grade_text = fields
        grade = _number(grade_text, path, lineno, "grade")
        if grade < 0:
            raise FormatError(
                path,
                lineno,
                f"grade {grade_text} is negative; grades are 0 (not relevant) or more "
                "(map negative junk grades such as TREC's -2 to 0 before importing)",
            )
        rows += 1
        yield QrelRecord(
            lineno,
            _identifier(qid, path, lineno, "query id", limits),
            _identifier(docid, path, lineno, "doc id", limits),
            grade,
        )
    if not rows:
        raise FormatError(path, None, "no qrels after the header line")


def iter_pools(path: str | Path, limits: Limits | None = None) -> Iterator[PoolRecord]:
    """Pools as ``qid<TAB>docid<TAB>rank``; ranks are positive integers. A file with a
    header and no rows is refused."""
    limits = limits or limits_provider()
    first = True
    rows = 0
    for lineno, line in _lines(path, limits):
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
        rows += 1
        yield PoolRecord(
            lineno,
            _identifier(fields[0], path, lineno, "query id", limits),
            _identifier(fields[1], path, lineno, "doc id", limits),
            rank,
        )
    if not rows:
        raise FormatError(path, None, "no pool entries after the header line")


def iter_run(path: str | Path, limits: Limits | None = None) -> Iterator[RunRecord]:
    """TREC run lines ``qid Q0 docid rank score tag`` (the tag may be missing)."""
    limits = limits or limits_provider()
    for lineno, line in _lines(path, limits):
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
            _identifier(fields[0], path, lineno, "query id", limits),
            _identifier(fields[2], path, lineno, "doc id", limits),
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
