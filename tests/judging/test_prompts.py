"""Prompt rendering, escaping, text budgets and response schemas (rcp_facts §3.1-3.5)."""

from __future__ import annotations

import hashlib
import re

import pytest

from judging import prompts
from judging.prompts import CRITERIA, TextBudget


class WordTokenizer:
    """One token per whitespace-separated word (plus its trailing space)."""

    def encode(self, text: str) -> list[int]:
        return list(range(len(re.findall(r"\S+\s*", text))))

    def decode(self, ids: list[int]) -> str:
        raise AssertionError("decode is given the source text in the test instead")


class SplitTokenizer:
    """A reversible word tokenizer: ids index a vocabulary built on the fly."""

    def __init__(self) -> None:
        self.vocab: list[str] = []

    def encode(self, text: str) -> list[int]:
        ids = []
        for piece in re.findall(r"\S+\s*|\s+", text):
            self.vocab.append(piece)
            ids.append(len(self.vocab) - 1)
        return ids

    def decode(self, ids: list[int]) -> str:
        return "".join(self.vocab[i] for i in ids)


def test_documents_render_as_positional_escaped_doc_elements() -> None:
    """doc_N is the 1-based position; text is stripped and HTML-escaped."""
    block = prompts.render_documents(['  a <b> & "c"\n', "second"])
    assert block == (
        "<documents>\n"
        '<doc id="doc_1">\na &lt;b&gt; &amp; &quot;c&quot;\n</doc>\n'
        '<doc id="doc_2">\nsecond\n</doc>\n'
        "</documents>"
    )


def test_tournament_prompt_fills_every_placeholder() -> None:
    """Query unescaped at the end, document count filled, no placeholder left."""
    messages, digest = prompts.render_prompt(
        "tournament", "tides & <moon>", ["one", "two", "three"]
    )
    assert len(messages) == 1 and messages[0]["role"] == "user"
    text = messages[0]["content"]
    assert "placeholder}" not in text
    assert "3 documents, labelled doc_1" in text
    assert "### Query\ntides & <moon>\n\n### Documents\n<documents>" in text
    assert text.endswith('<doc id="doc_3">\nthree\n</doc>\n</documents>')
    assert digest == hashlib.sha256(text.encode()).hexdigest()
    # The tournament prompt names no rubric criterion (a judge tells stages apart by it).
    assert not re.search(r"\bC\d+\b", text)


def test_instruction_is_appended_to_the_query() -> None:
    """A per-query instruction follows the query after one space."""
    (message,), _ = prompts.render_prompt(
        "tournament", "q text", ["d"], instruction="Find papers."
    )
    assert "### Query\nq text Find papers.\n" in message["content"]


def test_rubric_prompt_lists_the_five_criteria_before_the_documents() -> None:
    """C1..C5 appear with name and question; query and documents sit mid-prompt."""
    (message,), _ = prompts.render_prompt("rubric", "query", ["x", "y"])
    text = message["content"]
    assert [c.label for c in CRITERIA] == ["C1", "C2", "C3", "C4", "C5"]
    assert [c.name for c in CRITERIA] == [
        "Topical Relevance",
        "Information Utility",
        "Entity/Detail Match",
        "Direct Answer",
        "Thorough Treatment",
    ]
    for c in CRITERIA:
        assert f"### {c.label} {c.name}" in text and c.question in text
    assert text.index("### C5") < text.index("## Query") < text.index("## Output")
    assert "num_documents" not in prompts.template("rubric")


def test_prompt_hash_changes_with_any_document_text() -> None:
    """Each window stores the hash of the exact text it was asked with."""
    _, a = prompts.render_prompt("rubric", "q", ["x", "y"])
    _, b = prompts.render_prompt("rubric", "q", ["x", "y "])  # stripped: same prompt
    _, c = prompts.render_prompt("rubric", "q", ["y", "x"])
    assert a == b != c
    assert prompts.template_sha256("rubric") != prompts.template_sha256("tournament")
    assert prompts.PROMPT_VERSION == 1


def test_character_budget_is_two_characters_per_token() -> None:
    """usable = ctx - (template + 256) - media; minus min(out, usable/2); / w."""
    query, window = "q", 4
    empty = prompts.render_text("tournament", query, [""] * window)
    overhead = -(-len(empty) // 2) + 256
    budget = TextBudget(context_tokens=20_000, max_output_tokens=4_000)
    usable = 20_000 - overhead
    usable -= min(4_000, usable / 2)
    expected = int(usable // window)
    assert prompts.per_document_tokens("tournament", query, window, budget) == expected

    long_doc = "x" * (2 * expected + 50)
    (message,), _ = prompts.render_prompt(
        "tournament", query, [long_doc, "short", "b", "c"], budget=budget
    )
    assert "x" * (2 * expected) + "\n</doc>" in message["content"]
    assert "x" * (2 * expected + 1) not in message["content"]
    assert '<doc id="doc_2">\nshort\n</doc>' in message["content"]


def _expected_per_doc(stage: str, window: int, budget: TextBudget) -> int:
    overhead = -(-len(prompts.render_text(stage, "q", [""] * window)) // 2) + 256
    usable = budget.context_tokens - overhead - window * budget.media_tokens_per_doc
    return int((usable - min(budget.max_output_tokens, usable / 2)) // window)


@pytest.mark.parametrize(
    ("max_output", "media"), [(100, 0), (1_000_000, 0), (1_000_000, 100)]
)
def test_output_cap_takes_at_most_half_of_the_usable_context(
    max_output: int, media: int
) -> None:
    """A huge max_output leaves half the usable tokens to the documents; media cost first."""
    budget = TextBudget(
        context_tokens=10_000, max_output_tokens=max_output, media_tokens_per_doc=media
    )
    got = prompts.per_document_tokens("rubric", "q", 5, budget)
    assert got == _expected_per_doc("rubric", 5, budget)
    assert (
        got
        == {(100, 0): 1_567, (1_000_000, 0): 793, (1_000_000, 100): 743}[
            (max_output, media)
        ]
    )


def test_budget_too_small_is_refused() -> None:
    """A window that cannot fit the template is an error, not an empty prompt."""
    with pytest.raises(ValueError, match="does not fit"):
        prompts.per_document_tokens(
            "rubric", "q", 10, TextBudget(context_tokens=500, max_output_tokens=100)
        )


def test_tokenizer_cuts_at_token_boundaries() -> None:
    """With a tokenizer the cut is a verbatim prefix of whole tokens."""
    tok = SplitTokenizer()
    assert prompts.cut_to_tokens("alpha beta gamma delta", 2, tok) == (
        "alpha beta ",
        True,
    )
    assert prompts.cut_to_tokens("alpha beta", 2, tok) == ("alpha beta", False)
    assert prompts.count_tokens("a b c", WordTokenizer()) == 3
    assert prompts.count_tokens("abcde") == 3
    assert prompts.cut_to_tokens("abcdef", 2) == ("abcd", True)


def test_tournament_response_schema_is_closed_and_exact() -> None:
    """Ranking of exactly w ids from doc_1..doc_w; one number per document."""
    fmt = prompts.response_format("tournament", 3)
    assert fmt["type"] == "json_schema"
    spec = fmt["json_schema"]
    assert spec["name"] == "rcp_platform_tournament_window" and spec["strict"] is True
    schema = spec["schema"]
    assert schema["required"] == ["reasoning", "ranking", "scores"]
    assert schema["additionalProperties"] is False
    ranking = schema["properties"]["ranking"]
    assert ranking["items"]["enum"] == ["doc_1", "doc_2", "doc_3"]
    assert ranking["minItems"] == ranking["maxItems"] == 3
    scores = schema["properties"]["scores"]
    assert scores["required"] == ["doc_1", "doc_2", "doc_3"]
    assert scores["properties"]["doc_2"] == {"type": "number"}
    assert scores["additionalProperties"] is False


def test_rubric_response_schema_has_binary_criteria_per_document() -> None:
    """Each doc_i holds reasoning and C1..CK integers restricted to 0/1."""
    schema = prompts.response_format("rubric", 2, n_criteria=5)["json_schema"]["schema"]
    assert schema["required"] == ["doc_1", "doc_2"]
    doc = schema["properties"]["doc_2"]
    assert doc["required"] == ["reasoning", "criteria"]
    criteria = doc["properties"]["criteria"]
    assert criteria["required"] == ["C1", "C2", "C3", "C4", "C5"]
    assert criteria["properties"]["C5"] == {"type": "integer", "enum": [0, 1]}
    assert criteria["additionalProperties"] is False
