"""Panel prompts (lists and rubric modes), their schemas and parsers. No Django.

Blind exactly as the annotator page: the query, document titles and texts, the
study's questions - never a system name, an id, a rank number, a qrel or a gain.
Documents are addressed by position only. The block layout (``<lists>`` with
``<list id="list_N">``, ``<questions>`` with ``<question id="KEY">``, and
``<doc id="...">`` elements) is the contract with ``judging.simulated``.
Changing any template text must bump ``PROMPT_VERSION``.
"""

from __future__ import annotations

import hashlib
import html
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from judging.parsing import AnswerError, decode_json, document_position

__all__ = [
    "PROMPT_VERSION",
    "AnswerError",
    "Document",
    "ListsAnswer",
    "RubricAnswer",
    "lists_prompt",
    "lists_response_format",
    "parse_lists",
    "parse_rubric",
    "rubric_prompt",
    "rubric_response_format",
]

PROMPT_VERSION = 1


@dataclass(frozen=True)
class Document:
    """What a judge sees of one document: the title and text an annotator sees."""

    title: str
    text: str

    def render(self) -> str:
        body = (
            f"{self.title.strip()}\n\n{self.text.strip()}" if self.title else self.text
        )
        return html.escape(body.strip())


_LISTS = """\
You compare two ranked lists of search results for one query and decide which \
list serves the searcher better.

## How to judge
- Read the query and settle on its most likely intent.
- A list is better when its documents, especially the ones near the top, are \
more useful for the query. Judge the content only: which list is shown first \
carries no information, and longer documents are not better for being long.
- You must choose one list, even when they are close.

## Query
{query}

## Lists
{lists}

## Output
Reply with a single JSON object and nothing else: a one-line "reasoning" and \
"better", either "List 1" or "List 2".
Example: {{"reasoning": "List 2 answers the question in its first result.", \
"better": "List 2"}}
"""

_RUBRIC = """\
You are a relevance assessor for a search engine. For every document below, \
answer each yes/no question about how well it serves the query.

## How to work
- Judge each document on its own, against one absolute standard.
- The order of the documents is arbitrary and carries no information.
- Length is not relevance.

## Questions
{questions}

## Query
{query}

## Documents
{documents}

## Output
Reply with a single JSON object and nothing else. Give every document, by its id, \
an object with a one-line "reasoning" and "answers": true or false for each \
question key ({keys}).
"""


def _docs(prefix: str, docs: Sequence[Document]) -> str:
    return "\n".join(
        f'<doc id="{prefix}{i}">\n{d.render()}\n</doc>' for i, d in enumerate(docs, 1)
    )


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def lists_prompt(
    query: str, list_1: Sequence[Document], list_2: Sequence[Document]
) -> tuple[list[dict[str, str]], str]:
    """(chat messages, SHA-256 of the prompt text) naming two lists "List 1"/"List 2"."""
    lists = (
        "<lists>\n"
        f'<list id="list_1">\n{_docs("list_1_doc_", list_1)}\n</list>\n'
        f'<list id="list_2">\n{_docs("list_2_doc_", list_2)}\n</list>\n'
        "</lists>"
    )
    text = _LISTS.format(query=query.strip(), lists=lists).strip()
    return [{"role": "user", "content": text}], _sha(text)


def rubric_prompt(
    query: str, questions: Sequence[Mapping[str, str]], docs: Sequence[Document]
) -> tuple[list[dict[str, str]], str]:
    """(chat messages, SHA-256) asking the study's questions of every document."""
    block = "<questions>\n" + "\n".join(
        f'<question id="{html.escape(q["key"])}">{html.escape(q["text"])}</question>'
        for q in questions
    )
    block += "\n</questions>"
    text = _RUBRIC.format(
        questions=block,
        query=query.strip(),
        documents=f"<documents>\n{_docs('doc_', docs)}\n</documents>",
        keys=", ".join(q["key"] for q in questions),
    ).strip()
    return [{"role": "user", "content": text}], _sha(text)


def lists_response_format() -> dict[str, Any]:
    """Strict JSON schema of a lists answer (sent to json_schema judges)."""
    return {
        "type": "json_schema",
        "json_schema": {
            "name": "rcp_panel_lists",
            "strict": True,
            "schema": {
                "type": "object",
                "properties": {
                    "reasoning": {"type": "string"},
                    "better": {"type": "string", "enum": ["List 1", "List 2"]},
                },
                "required": ["reasoning", "better"],
                "additionalProperties": False,
            },
        },
    }


def _closed(properties: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


def rubric_response_format(keys: Sequence[str], n_docs: int) -> dict[str, Any]:
    """Strict JSON schema of a rubric answer for ``n_docs`` documents."""
    answers = _closed({k: {"type": "boolean"} for k in keys})
    doc = _closed({"reasoning": {"type": "string"}, "answers": answers})
    return {
        "type": "json_schema",
        "json_schema": {
            "name": "rcp_panel_rubric",
            "strict": True,
            "schema": _closed({f"doc_{i}": doc for i in range(1, n_docs + 1)}),
        },
    }


@dataclass(frozen=True)
class ListsAnswer:
    position: int  # 1 or 2: the list named better


@dataclass(frozen=True)
class RubricAnswer:
    answers: tuple[dict[str, bool], ...]  # per prompt position, keyed by question


_LIST = re.compile(r"^\s*(?:list[\s_-]*)?([12])\s*$", re.IGNORECASE)


def parse_lists(text: str) -> ListsAnswer:
    """The list named better: "List 1", "list_2", "1" or 2. AnswerError otherwise."""
    parsed = decode_json(text)
    value = parsed.get("better")
    if isinstance(value, int) and not isinstance(value, bool) and value in (1, 2):
        return ListsAnswer(value)
    match = _LIST.match(value) if isinstance(value, str) else None
    if match is None:
        raise AnswerError("schema", f'"better" must be "List 1" or "List 2": {value!r}')
    return ListsAnswer(int(match.group(1)))


def _yes_no(doc: int, key: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    if value in (0, 1, "0", "1") and not isinstance(value, float):
        return str(value) == "1"
    if isinstance(value, str) and value.strip().lower() in (
        "yes",
        "no",
        "true",
        "false",
    ):
        return value.strip().lower() in ("yes", "true")
    raise AnswerError("schema", f"doc_{doc}.{key} must be true or false: {value!r}")


def parse_rubric(text: str, keys: Sequence[str], n_docs: int) -> RubricAnswer:
    """Every document exactly once, every question answered yes/no; AnswerError
    (schema for unknown/duplicate documents or keys, incomplete for a gap)."""
    parsed = decode_json(text)
    out: dict[int, dict[str, bool]] = {}
    for name, entry in parsed.items():
        pos = document_position(name)
        if not 1 <= pos <= n_docs or pos in out:
            raise AnswerError("schema", f"unknown or repeated document {name!r}")
        answers = entry.get("answers") if isinstance(entry, dict) else None
        if not isinstance(answers, dict) or set(answers) != set(keys):
            raise AnswerError(
                "schema", f"doc_{pos}.answers must hold exactly the keys {list(keys)}"
            )
        out[pos] = {k: _yes_no(pos, k, answers[k]) for k in keys}
    missing = [i for i in range(1, n_docs + 1) if i not in out]
    if missing:
        raise AnswerError("incomplete", f"no answer for documents {missing}")
    return RubricAnswer(tuple(out[i] for i in range(1, n_docs + 1)))
