"""Tolerant decoding and validation of judge answers (rcp_facts §1.1, §2.3, §3.6). No Django.

The decoder finds the judge's own JSON object and repairs exactly two things in
it (invalid string escapes, a stray quote after a number). It never reads numbers
from prose and never fills in a missing document: a window is valid only when
the answer covers every prompt position exactly once.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

InvalidCategory = Literal[
    "no_json", "invalid_json", "schema", "incomplete", "truncated", "refused"
]

PARSE_VERSION = 1
MAX_ESCAPE_REPAIRS = 1000
MAX_REASON_CHARS = 2000
LENGTH_FINISH_REASON = "length"
INVALID_CATEGORIES: tuple[InvalidCategory, ...] = (
    "no_json",
    "invalid_json",
    "schema",
    "incomplete",
    "truncated",
    "refused",
)

__all__ = [
    "INVALID_CATEGORIES",
    "PARSE_VERSION",
    "AnswerError",
    "InvalidCategory",
    "ParseResult",
    "decode_json",
    "document_position",
    "parse_rubric",
    "parse_tournament",
    "refused",
]

_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL)
_CODE_FENCE = re.compile(r"\A```[\w-]*[ \t]*\n?(.*?)\n?[ \t]*```\Z", re.DOTALL)
_STRAY_QUOTE = re.compile(r'(-?\d+(?:\.\d*)?)"(\s*})')
_DOC_KEY = re.compile(r"(?:doc(?:ument)?[\s_-]*)?0*([1-9]\d*)", re.IGNORECASE)


class AnswerError(ValueError):
    """An answer that does not give a complete, well-formed observation of its window."""

    def __init__(self, category: InvalidCategory, reason: str) -> None:
        super().__init__(reason)
        self.category: InvalidCategory = category
        self.reason = reason


@dataclass(frozen=True)
class ParseResult:
    """Outcome of parsing one window's answer; positions are 0-based prompt slots.

    ``scores[i]`` / ``answers[i]`` belong to ``doc_{i+1}``; ``ranking`` lists slots
    best first. Invalid results carry a category and reason and no values.
    """

    valid: bool
    category: InvalidCategory | None = None
    reason: str = ""
    scores: tuple[float, ...] | None = None
    ranking: tuple[int, ...] | None = None
    answers: tuple[tuple[int, ...], ...] | None = None


Reader = Callable[[dict[str, Any], int], ParseResult]


def refused(reason: str) -> ParseResult:
    """The result for a request the endpoint rejected (there is no answer to parse)."""
    return ParseResult(
        valid=False, category="refused", reason=reason[:MAX_REASON_CHARS]
    )


# ---------------------------------------------------------------------------
# Decoding
# ---------------------------------------------------------------------------


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise AnswerError("schema", f"duplicate JSON key {key!r}")
        out[key] = value
    return out


_DECODER = json.JSONDecoder(object_pairs_hook=_no_duplicates)


def _strip_wrapping(text: str) -> str:
    text = _THINK_BLOCK.sub("", text)
    # An engine may drop the opening <think> tag; only a closing tag that comes
    # before the object marks reasoning, one after it is trailing prose.
    end, brace = text.find("</think>"), text.find("{")
    if end >= 0 and (brace < 0 or end < brace):
        text = text[end + len("</think>") :]
    text = text.strip()
    fence = _CODE_FENCE.match(text)
    return fence.group(1).strip() if fence else text


def _bad_escape_at(text: str, error: json.JSONDecodeError) -> int | None:
    # json reports "Invalid \escape" at the backslash, "Invalid \uXXXX" just after it.
    for at in (error.pos, error.pos - 1):
        if error.msg.startswith("Invalid \\") and text[at : at + 1] == "\\":
            return at
    return None


def decode_json(text: str | None) -> dict[str, Any]:
    """The first JSON object of an answer, after removing think-blocks and one code fence.

    Doubles backslashes of invalid escapes (LaTeX) up to 1000 times, then once drops
    a stray quote after a number before ``}``. Raises AnswerError (no_json,
    invalid_json, or schema for duplicate keys).
    """
    body = _strip_wrapping(text or "")
    start = body.find("{")
    if start < 0:
        raise AnswerError("no_json", "the answer holds no JSON object")
    candidate, repairs, quote_fixed = body[start:], 0, False
    while True:
        try:
            value, _ = _DECODER.raw_decode(candidate)
            return value
        except json.JSONDecodeError as error:
            at = _bad_escape_at(candidate, error)
            if at is not None and repairs < MAX_ESCAPE_REPAIRS:
                candidate, repairs = candidate[:at] + "\\" + candidate[at:], repairs + 1
                continue
            if not quote_fixed:
                fixed = _STRAY_QUOTE.sub(r"\1\2", candidate)
                quote_fixed = True
                if fixed != candidate:
                    candidate = fixed
                    continue
            raise AnswerError(
                "invalid_json", f"the JSON object does not decode: {error}"
            ) from None


def document_position(value: object) -> int:
    """1-based slot named by ``doc_3``, ``Document 3``, ``document-03``, ``"3"`` or 3."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    if isinstance(value, str) and (match := _DOC_KEY.fullmatch(value.strip())):
        return int(match.group(1))
    raise AnswerError("schema", f"invalid document identifier {value!r}")


def _check_cover(what: str, positions: list[int], size: int) -> None:
    expected = set(range(1, size + 1))
    unknown = sorted(set(positions) - expected)
    repeated = sorted({p for p in positions if positions.count(p) > 1})
    if unknown or repeated:
        raise AnswerError(
            "schema",
            f"{what} names unknown documents {unknown} or repeats {repeated} (window of {size})",
        )
    if missing := sorted(expected - set(positions)):
        raise AnswerError(
            "incomplete", f"{what} leaves out documents {missing} (window of {size})"
        )


def _parse(
    text: str | None,
    window_size: int,
    finish_reason: str | None,
    read: Reader,
) -> ParseResult:
    if window_size < 1:
        raise ValueError("a window holds at least one document")
    try:
        return read(decode_json(text), window_size)
    except AnswerError as error:
        category, reason = error.category, error.reason
        if finish_reason == LENGTH_FINISH_REASON:
            category, reason = "truncated", f"{reason} (the answer hit the token limit)"
        return ParseResult(
            valid=False, category=category, reason=reason[:MAX_REASON_CHARS]
        )


# ---------------------------------------------------------------------------
# Stage A: ranking + logit scores
# ---------------------------------------------------------------------------


def _score(key: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise AnswerError(
            "schema", f"the score of {key!r} must be a number, got {value!r}"
        )
    try:
        score = float(value)
    except ValueError:
        raise AnswerError(
            "schema", f"the score of {key!r} must be a number, got {value!r}"
        ) from None
    if not math.isfinite(score):
        raise AnswerError(
            "schema", f"the score of {key!r} must be finite, got {value!r}"
        )
    return score


def _read_tournament(parsed: dict[str, Any], size: int) -> ParseResult:
    for key, kind in (("ranking", list), ("scores", dict)):
        if key not in parsed:
            raise AnswerError("schema", f"the answer has no {key!r} key")
        if not isinstance(parsed[key], kind):
            raise AnswerError("schema", f"{key!r} must be a {kind.__name__}")
    ranking = [document_position(v) for v in parsed["ranking"]]
    scored = [(document_position(k), _score(k, v)) for k, v in parsed["scores"].items()]
    _check_cover("the ranking", ranking, size)
    _check_cover("the scores", [p for p, _ in scored], size)
    scores = dict(scored)
    return ParseResult(
        valid=True,
        scores=tuple(scores[p] for p in range(1, size + 1)),
        ranking=tuple(p - 1 for p in ranking),
    )


def parse_tournament(
    text: str | None, window_size: int, *, finish_reason: str | None = None
) -> ParseResult:
    """Parse a Stage A answer: a ranking and one finite score per prompt position.

    Any finite number (or numeric string) is accepted; the -5..+5 scale is not
    enforced. Failures under ``finish_reason == "length"`` are ``truncated``.
    """
    return _parse(text, window_size, finish_reason, _read_tournament)


# ---------------------------------------------------------------------------
# Stage B: per-document criteria verdicts
# ---------------------------------------------------------------------------


def _verdict(doc: int, label: str, value: object) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value in (0, 1):
        return value
    if isinstance(value, str) and value in ("0", "1"):
        return int(value)
    raise AnswerError("schema", f"doc_{doc} {label} must be 0 or 1, got {value!r}")


def _rubric_reader(n_criteria: int) -> Reader:
    labels = [f"C{k}" for k in range(1, n_criteria + 1)]

    def read(parsed: dict[str, Any], size: int) -> ParseResult:
        positions = [document_position(k) for k in parsed]
        _check_cover("the answer", positions, size)
        answers: dict[int, tuple[int, ...]] = {}
        for position, entry in zip(positions, parsed.values(), strict=True):
            criteria = entry.get("criteria") if isinstance(entry, dict) else None
            if not isinstance(criteria, dict):
                raise AnswerError("schema", f"doc_{position} has no 'criteria' object")
            if sorted(criteria) != sorted(labels):
                raise AnswerError(
                    "schema",
                    f"doc_{position} criteria are {sorted(criteria)}, expected {labels}",
                )
            answers[position] = tuple(
                _verdict(position, c, criteria[c]) for c in labels
            )
        return ParseResult(
            valid=True, answers=tuple(answers[p] for p in range(1, size + 1))
        )

    return read


def parse_rubric(
    text: str | None,
    window_size: int,
    *,
    n_criteria: int = 5,
    finish_reason: str | None = None,
) -> ParseResult:
    """Parse a Stage B answer: every position once, each with exactly C1..CK as 0/1.

    Verdicts may be 0/1 or "0"/"1" (not booleans). Unknown or repeated documents
    are ``schema``, missing ones ``incomplete``.
    """
    return _parse(text, window_size, finish_reason, _rubric_reader(n_criteria))
