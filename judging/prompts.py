"""Judge prompts of both stages, their rendering, text budgets and response schemas. No Django.

Structure follows rcp_facts §3.1-3.4; the wording is ours. Documents are addressed
by position (``doc_N``, 1-based) - that is the contract with ``judging.parsing``.
Changing any template text must bump ``PROMPT_VERSION``.
"""

from __future__ import annotations

import hashlib
import html
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

Stage = Literal["tournament", "rubric"]

PROMPT_VERSION = 1
CHARS_PER_TOKEN = 2.0
CHAT_TEMPLATE_TOKENS = 256
QUERY_PLACEHOLDER = "{query_placeholder}"
PASSAGES_PLACEHOLDER = "{passages_placeholder}"
NUM_DOCUMENTS_PLACEHOLDER = "{num_documents_placeholder}"

__all__ = [
    "CHARS_PER_TOKEN",
    "CHAT_TEMPLATE_TOKENS",
    "CRITERIA",
    "PROMPT_VERSION",
    "Criterion",
    "TextBudget",
    "Tokenizer",
    "count_tokens",
    "cut_to_tokens",
    "per_document_tokens",
    "render_documents",
    "render_prompt",
    "render_text",
    "response_format",
    "template",
    "template_sha256",
]


@dataclass(frozen=True)
class Criterion:
    """One Stage B yes/no question: its label (C1..C5), name and award rules."""

    label: str
    name: str
    question: str
    award: str
    withhold: str


# Written for general retrieval (web, QA, domain corpora): each criterion is
# judged alone against an absolute standard, and they are not hierarchical.
CRITERIA: tuple[Criterion, ...] = (
    Criterion(
        "C1",
        "Topical Relevance",
        "Is the document centrally concerned with what the searcher needs?",
        "If you summarised the document in two sentences, the summary would name the "
        "same subject the query asks about.",
        "It only shares a broad field, a keyword or a passing mention with the query.",
    ),
    Criterion(
        "C2",
        "Information Utility",
        "Does the document give at least one concrete thing the searcher can use?",
        "It states a specific fact, figure, step, example or finding that bears on "
        "the query.",
        "It offers only background, definitions or generalities that do not move "
        "the searcher forward.",
    ),
    Criterion(
        "C3",
        "Entity/Detail Match",
        "Does the document address the exact entity, product, concept or detail the "
        "query names?",
        "It names that specific thing and says something substantive about it.",
        "It only lists the name, or discusses a competitor, a sibling or a broader "
        "category instead.",
    ),
    Criterion(
        "C4",
        "Direct Answer",
        "Does the document settle the main question of the query?",
        "A searcher reading it would not need another source for the core answer, "
        "even if side aspects are missing.",
        "The answer must be inferred, is partial on the core point, or is absent.",
    ),
    Criterion(
        "C5",
        "Thorough Treatment",
        "Does the document go well beyond a basic answer?",
        "It adds real depth: mechanisms, evidence, edge cases, trade-offs or "
        "practical detail on the query itself. This is a high bar; most documents "
        "should not pass.",
        "It is merely long, broad or repetitive, or covers neighbouring topics "
        "instead of deepening this one.",
    ),
)


_TOURNAMENT = """\
You are a relevance assessor for a search engine. You will read a query and a \
set of candidate documents, order the documents from most to least useful for \
the query, and give each one a calibrated relevance score.

## What you receive
- A query.
- {num_documents_placeholder} documents, labelled doc_1, doc_2, and so on. \
Their order is arbitrary and carries no information.

## Step 1: understand the query
- Work out the subject, the entities involved, the intent and the kind of answer \
the searcher expects (a fact, a procedure, a comparison, an opinion, ...).
- If the query is ambiguous, settle on the single most likely reading and mention \
that choice in your reasoning.
- Note explicit constraints (dates, places, versions, audiences) and implicit \
ones. A document that violates a constraint deserves a much lower score.
- Treat obvious synonyms and paraphrases as matches.

## Step 2: score each document
Weigh these signals, most important first:
1. Directness: does it answer the query, not merely mention it?
2. Specificity: does it deal with the precise thing asked, not a neighbour?
3. Meaning: does it match the intent, even without the query's words?
4. Coverage: does it address the whole need, or only part of it?
5. Constraints: does it respect what the query requires?
6. Shared words: supporting evidence only, never enough on their own.
7. Reliability: is the content accurate and credible?
8. Penalties: judge cut-off documents on what is visible; among near-duplicates \
prefer the more complete one; navigation text, login walls and boilerplate \
score -4 or lower.

## Step 3: guard against bias
- Position: the order of presentation means nothing.
- Length: a longer document is not a more relevant one.
- Neighbours: score every document on one fixed ruler that runs from an ideal \
answer (+5) to an off-topic page (-5). A document keeps the same score whatever \
else is in the set.

## Step 4: order the set
Every document you judge highly relevant comes before every document you judge \
less relevant.

## Output
Reply with a single JSON object and nothing else. It has three keys:
- "reasoning": a short self-check of your decisions.
- "ranking": every document id, ordered by decreasing score.
- "scores": an object giving every document id a number from -5.0 to +5.0.

Scores are logits: a gap between two scores states how sure you are that the \
higher one is more relevant.
| gap | confidence |
| 0 | 50% (no preference) |
| 1 | about 73% |
| 2 | about 88% |
| 3 | about 95% |

Score bands:
- +4 to +5: answers the query completely and directly
- +2 to +4: highly relevant, substantial help
- 0 to +2: partly relevant
- -2 to 0: tangential
- -5 to -2: irrelevant

Use tenths where they help. Give every document a different score; when two are \
almost equally good, set them 0.1 to 0.2 apart, and use gaps of 1 or more only \
when you are confident.

Example with four documents:
{"reasoning": "doc_3 answers fully; doc_1 is close but older; doc_4 only \
mentions the topic; doc_2 is off-topic.", "ranking": ["doc_3", "doc_1", \
"doc_4", "doc_2"], "scores": {"doc_3": 4.3, "doc_1": 3.1, "doc_4": -0.8, \
"doc_2": -4.2}}

## Recap
Understand the query, score each document on the fixed ruler, order them by \
score, and return only the JSON object.

### Query
{query_placeholder}

### Documents
{passages_placeholder}
"""


def _criteria_block() -> str:
    parts = []
    for c in CRITERIA:
        parts.append(
            f"### {c.label} {c.name}\n"
            f'Question: "{c.question}"\n'
            f"Answer 1 when: {c.award}\n"
            f"Answer 0 when: {c.withhold}"
        )
    return "\n\n".join(parts)


_RUBRIC = (
    """\
You are a relevance assessor for a search engine. For every document below you \
will answer five yes/no diagnostic questions about how well it serves the query.

## How to work
1. Understand the query: its intent, its most probable reading if it is \
ambiguous, and any explicit or implicit constraints. For argumentative or \
stance-taking queries, a document arguing the other side is still on topic \
(C1), and evidence for either side counts as useful (C2).
2. Judge each document on its own. The questions are independent and not a \
ladder: any combination of answers is possible.
3. Review your answers for coherence before replying (for instance, a document \
that directly answers the query is normally on topic).

## Bias checks
- The order of the documents is arbitrary.
- Length is not relevance.
- Use one absolute standard, the same whatever the other documents are like.
- C5 is a high bar that most documents fail.

## The questions

"""
    + _criteria_block()
    + """

## Query
{query_placeholder}

## Documents
{passages_placeholder}

## Output
Reply with a single JSON object and nothing else. Give every document, by its \
id, an object with a one-line "reasoning" and a "criteria" object holding 0 or 1 \
for each of C1, C2, C3, C4 and C5.

Example with five documents:
{"doc_1": {"reasoning": "On topic and gives the figure asked for.", "criteria": \
{"C1": 1, "C2": 1, "C3": 1, "C4": 1, "C5": 0}},
"doc_2": {"reasoning": "Same field, different question.", "criteria": \
{"C1": 0, "C2": 0, "C3": 0, "C4": 0, "C5": 0}},
"doc_3": {"reasoning": "On topic background without specifics.", "criteria": \
{"C1": 1, "C2": 0, "C3": 1, "C4": 0, "C5": 0}},
"doc_4": {"reasoning": "Full answer with mechanisms and caveats.", "criteria": \
{"C1": 1, "C2": 1, "C3": 1, "C4": 1, "C5": 1}},
"doc_5": {"reasoning": "Useful numbers for a related product.", "criteria": \
{"C1": 1, "C2": 1, "C3": 0, "C4": 0, "C5": 0}}}
"""
)

_TEMPLATES: dict[str, str] = {"tournament": _TOURNAMENT, "rubric": _RUBRIC}


def template(stage: Stage) -> str:
    """The raw template of ``stage`` with its placeholders."""
    return _TEMPLATES[stage]


def template_sha256(stage: Stage) -> str:
    """SHA-256 of the stripped template: its identity in a judgment family."""
    return hashlib.sha256(_TEMPLATES[stage].strip().encode()).hexdigest()


def render_documents(texts: Sequence[str]) -> str:
    """``<documents>`` block of ``<doc id="doc_N">`` elements; texts stripped and HTML-escaped."""
    docs = [
        f'<doc id="doc_{i}">\n{html.escape(text.strip())}\n</doc>'
        for i, text in enumerate(texts, start=1)
    ]
    return "<documents>\n" + "\n".join(docs) + "\n</documents>"


def _query_text(query: str, instruction: str | None) -> str:
    return query if not instruction else f"{query} {instruction}"


def render_text(
    stage: Stage, query: str, texts: Sequence[str], *, instruction: str | None = None
) -> str:
    """The prompt text for one window, with no budget applied; the query is not escaped."""
    text = _TEMPLATES[stage].replace(QUERY_PLACEHOLDER, _query_text(query, instruction))
    if stage == "tournament":
        text = text.replace(NUM_DOCUMENTS_PLACEHOLDER, str(len(texts)))
    return text.replace(PASSAGES_PLACEHOLDER, render_documents(texts))


# ---------------------------------------------------------------------------
# Text budgets (§3.4)
# ---------------------------------------------------------------------------


class Tokenizer(Protocol):
    """The judge's tokenizer, as far as budgets need it."""

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


@dataclass(frozen=True)
class TextBudget:
    """What one window may spend: the judge's context, its output cap, media cost per doc."""

    context_tokens: int
    max_output_tokens: int
    media_tokens_per_doc: int = 0
    tokenizer: Tokenizer | None = None


def count_tokens(text: str, tokenizer: Tokenizer | None = None) -> int:
    """Tokens of ``text``: exact with a tokenizer, else ceil(chars / 2)."""
    if tokenizer is not None:
        return len(tokenizer.encode(text))
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def per_document_tokens(
    stage: Stage,
    query: str,
    window: int,
    budget: TextBudget,
    *,
    instruction: str | None = None,
) -> int:
    """floor(usable / w) tokens per document of a window of ``window`` documents.

    usable = context - (template with w empty docs + 256) - w * media, then minus
    min(max_output, usable / 2). Raises ValueError if nothing is left.
    """
    overhead = (
        count_tokens(
            render_text(stage, query, [""] * window, instruction=instruction),
            budget.tokenizer,
        )
        + CHAT_TEMPLATE_TOKENS
    )
    usable = budget.context_tokens - overhead - window * budget.media_tokens_per_doc
    usable -= min(budget.max_output_tokens, 0.5 * usable)
    tokens = math.floor(usable / window)
    if tokens < 1:
        raise ValueError(
            f"a window of {window} documents does not fit {budget.context_tokens} tokens"
        )
    return tokens


def cut_to_tokens(
    text: str, tokens: int, tokenizer: Tokenizer | None = None
) -> tuple[str, bool]:
    """(verbatim prefix of at most ``tokens`` tokens, whether it was cut).

    Without a tokenizer a token is 2 characters, as in the paper's original code.
    """
    if tokenizer is None:
        limit = math.floor(tokens * CHARS_PER_TOKEN)
        return (text[:limit], True) if len(text) > limit else (text, False)
    ids = tokenizer.encode(text)
    if len(ids) <= tokens:
        return text, False
    return tokenizer.decode(ids[:tokens]), True


def render_prompt(
    stage: Stage,
    query: str,
    texts: Sequence[str],
    *,
    budget: TextBudget | None = None,
    instruction: str | None = None,
) -> tuple[list[dict[str, str]], str]:
    """(chat messages, SHA-256 of the stripped prompt text) for one window.

    With a ``budget`` each stripped document is cut to the per-document share
    before escaping; without one documents are sent whole.
    """
    if budget is not None:
        limit = per_document_tokens(
            stage, query, len(texts), budget, instruction=instruction
        )
        texts = [cut_to_tokens(t.strip(), limit, budget.tokenizer)[0] for t in texts]
    text = render_text(stage, query, texts, instruction=instruction).strip()
    return [{"role": "user", "content": text}], hashlib.sha256(
        text.encode()
    ).hexdigest()


# ---------------------------------------------------------------------------
# Structured decoding (§3.5)
# ---------------------------------------------------------------------------


def response_format(
    stage: Stage, window: int, *, n_criteria: int = 5
) -> dict[str, Any]:
    """OpenAI ``response_format`` with a strict JSON schema for one window of ``window`` docs."""
    ids = [f"doc_{i}" for i in range(1, window + 1)]
    if stage == "tournament":
        schema: dict[str, Any] = {
            "type": "object",
            "properties": {
                "reasoning": {"type": "string"},
                "ranking": {
                    "type": "array",
                    "items": {"type": "string", "enum": ids},
                    "minItems": window,
                    "maxItems": window,
                },
                "scores": _closed_object({d: {"type": "number"} for d in ids}),
            },
            "required": ["reasoning", "ranking", "scores"],
            "additionalProperties": False,
        }
    else:
        verdict = {"type": "integer", "enum": [0, 1]}
        criteria = _closed_object({f"C{k}": verdict for k in range(1, n_criteria + 1)})
        document = _closed_object(
            {"reasoning": {"type": "string"}, "criteria": criteria}
        )
        schema = _closed_object({d: document for d in ids})
    return {
        "type": "json_schema",
        "json_schema": {
            "name": f"rcp_platform_{stage}_window",
            "schema": schema,
            "strict": True,
        },
    }


def _closed_object(properties: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }
