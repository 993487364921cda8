"""Tolerant decoder and answer validation (rcp_facts §1.1, §2.3, §3.6)."""

from __future__ import annotations

import json

import pytest

from judging import parsing
from judging.parsing import AnswerError, ParseResult


def _tournament(scores: dict[str, object], ranking: list[object] | None = None) -> str:
    ranking = list(scores) if ranking is None else ranking
    return json.dumps({"reasoning": "ok", "ranking": ranking, "scores": scores})


GOOD_T = _tournament(
    {"doc_1": 1.5, "doc_2": -2.0, "doc_3": 4.0}, ["doc_3", "doc_1", "doc_2"]
)
CRIT_A = {"C1": 1, "C2": 1, "C3": 0, "C4": 0, "C5": 0}
CRIT_B = {"C1": 0, "C2": 0, "C3": 0, "C4": 0, "C5": 0}
GOOD_R = json.dumps(
    {
        "doc_1": {"reasoning": "x", "criteria": CRIT_A},
        "doc_2": {"reasoning": "y", "criteria": CRIT_B},
    }
)


# ---------------------------------------------------------------------------
# Well-formed answers
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "wrap",
    [
        "{}",
        "<think>Let me weigh {doc_1} against doc_2.</think>\n{}",
        "I compared them carefully.</think>{}",
        "```json\n{}\n```",
        "<think>hmm</think>\n```\n{}\n```",
        "Here is my answer:\n{}\nHope this helps! {{not json}}",
        "{}\n</think> trailing",
    ],
)
def test_wrapped_tournament_answers_parse(wrap: str) -> None:
    """Think-blocks, code fences and surrounding prose do not hide the object."""
    result = parsing.parse_tournament(wrap.replace("{}", GOOD_T, 1), 3)
    assert result == ParseResult(valid=True, scores=(1.5, -2.0, 4.0), ranking=(2, 0, 1))


def test_scores_map_back_to_prompt_positions_whatever_key_form() -> None:
    """doc_3, Document 1, document-02, "3" and 3 all name positions; numeric strings pass."""
    text = json.dumps(
        {
            "ranking": [3, "Document 1", "document-02"],
            "scores": {"2": "0.5", "Doc_3": 7, "DOC 1": -9.25},
        }
    )
    result = parsing.parse_tournament(text, 3)
    assert result.valid
    # The -5..+5 scale is asked for but not enforced.
    assert result.scores == (-9.25, 0.5, 7.0)
    assert result.ranking == (2, 0, 1)


def test_latex_escapes_are_repaired_inside_strings() -> None:
    """Invalid escapes like \\pi are kept as text; scores are untouched."""
    text = GOOD_T.replace('"ok"', r'"area is \pi r^2, \{set\} and \u12g4"')
    result = parsing.parse_tournament(text, 3)
    assert result.valid and result.scores == (1.5, -2.0, 4.0)
    assert (
        parsing.decode_json(text)["reasoning"] == r"area is \pi r^2, \{set\} and \u12g4"
    )


def test_stray_quote_after_a_number_is_repaired_once() -> None:
    """`-4.5"}` is read as -4.5."""
    text = '{"ranking": ["doc_2", "doc_1"], "scores": {"doc_2": 3, "doc_1": -4.5"}}'
    result = parsing.parse_tournament(text, 2)
    assert result.valid and result.scores == (-4.5, 3.0)


def test_rubric_answer_maps_verdicts_to_positions() -> None:
    """Verdicts per position in C1..C5 order; "0"/"1" strings are accepted."""
    text = json.dumps(
        {
            "Document 2": {"criteria": {**CRIT_B, "C1": "1"}},
            "doc_1": {"reasoning": "r", "criteria": dict(reversed(CRIT_A.items()))},
        }
    )
    result = parsing.parse_rubric(f"<think>x</think>```json\n{text}\n```", 2)
    assert result == ParseResult(valid=True, answers=((1, 1, 0, 0, 0), (1, 0, 0, 0, 0)))
    assert parsing.parse_rubric(GOOD_R, 2).answers == ((1, 1, 0, 0, 0), (0, 0, 0, 0, 0))


def test_rubric_with_custom_criteria_count() -> None:
    """K criteria means exactly C1..CK."""
    text = json.dumps({"doc_1": {"criteria": {"C1": 1, "C2": 0, "C3": 1}}})
    assert parsing.parse_rubric(text, 1, n_criteria=3).answers == ((1, 0, 1),)
    assert parsing.parse_rubric(text, 1).category == "schema"


# ---------------------------------------------------------------------------
# Malformed answers -> categories
# ---------------------------------------------------------------------------

TOURNAMENT_FAILURES = [
    ("", "no_json"),
    (None, "no_json"),
    ("doc_3 is best, then doc_1 and doc_2", "no_json"),
    ('<think>{"ranking": []}</think> I cannot decide.', "no_json"),
    ('{"ranking": ["doc_1", "doc_2"], "scores": {"doc_1": 1, ', "invalid_json"),
    ("{ranking: [doc_1]}", "invalid_json"),
    ('{"ranking": [], "scores": {}, "ranking": []}', "schema"),
    (json.dumps({"scores": {"doc_1": 1, "doc_2": 2, "doc_3": 3}}), "schema"),
    (json.dumps({"ranking": "doc_1", "scores": {}}), "schema"),
    (json.dumps({"ranking": [], "scores": [1, 2, 3]}), "schema"),
    (_tournament({"doc_1": 1, "doc_2": 2, "doc_4": 3}), "schema"),
    (
        _tournament({"doc_1": 1, "doc_2": 2, "doc_3": 3}, ["doc_1", "doc_1", "doc_3"]),
        "schema",
    ),
    (_tournament({"doc_1": 1, "doc_2": 2, "2": 3}), "schema"),
    (_tournament({"doc_1": 1, "doc_2": True, "doc_3": 3}), "schema"),
    (_tournament({"doc_1": 1, "doc_2": "high", "doc_3": 3}), "schema"),
    (_tournament({"doc_1": 1, "doc_2": None, "doc_3": 3}), "schema"),
    (_tournament({"doc_1": 1, "doc_2": "NaN", "doc_3": 3}), "schema"),
    (
        _tournament({"doc_1": 1, "doc_2": 2, "doc_3": 3}, ["doc_0", "doc_1", "doc_2"]),
        "schema",
    ),
    (
        _tournament({"doc_1": 1, "doc_2": 2, "doc_3": 3}, [True, "doc_1", "doc_2"]),
        "schema",
    ),
    (
        _tournament({"doc_1": 1, "doc_2": 2, "doc_3": 3}, ["doc_1", "doc_3"]),
        "incomplete",
    ),
    (_tournament({"doc_1": 1, "doc_3": 3}, ["doc_1", "doc_2", "doc_3"]), "incomplete"),
]


@pytest.mark.parametrize(("text", "category"), TOURNAMENT_FAILURES)
def test_malformed_tournament_answers_are_categorised(
    text: str | None, category: str
) -> None:
    """Each failure is invalid with its category, a reason and no values."""
    result = parsing.parse_tournament(text, 3)
    assert result.valid is False
    assert result.category == category
    assert result.reason and result.scores is None and result.ranking is None


RUBRIC_FAILURES = [
    ("Both documents are relevant.", "no_json"),
    ('{"doc_1": {"criteria": {"C1": 1', "invalid_json"),
    ('{"doc_1": {"criteria": CRIT}}', "invalid_json"),
    (json.dumps({"doc_1": {"criteria": CRIT_A}}), "incomplete"),
    (
        json.dumps({"doc_1": {"criteria": CRIT_A}, "doc_3": {"criteria": CRIT_A}}),
        "schema",
    ),
    (json.dumps({"doc_1": {"criteria": CRIT_A}, "1": {"criteria": CRIT_A}}), "schema"),
    (json.dumps({"documents": {"doc_1": {}, "doc_2": {}}}), "schema"),
    (json.dumps({"doc_1": {"criteria": CRIT_A}, "doc_2": {"C1": 1}}), "schema"),
    (json.dumps({"doc_1": {"criteria": CRIT_A}, "doc_2": [1, 0, 0, 0, 0]}), "schema"),
    (
        json.dumps({"doc_1": {"criteria": CRIT_A}, "doc_2": {"criteria": {"C1": 1}}}),
        "schema",
    ),
    (
        json.dumps(
            {"doc_1": {"criteria": CRIT_A}, "doc_2": {"criteria": {**CRIT_B, "C6": 0}}}
        ),
        "schema",
    ),
    (
        json.dumps(
            {
                "doc_1": {"criteria": CRIT_A},
                "doc_2": {"criteria": {**CRIT_B, "C3": True}},
            }
        ),
        "schema",
    ),
    (
        json.dumps(
            {"doc_1": {"criteria": CRIT_A}, "doc_2": {"criteria": {**CRIT_B, "C3": 2}}}
        ),
        "schema",
    ),
    (
        json.dumps(
            {
                "doc_1": {"criteria": CRIT_A},
                "doc_2": {"criteria": {**CRIT_B, "C3": "yes"}},
            }
        ),
        "schema",
    ),
    (
        json.dumps(
            {
                "doc_1": {"criteria": CRIT_A},
                "doc_2": {"criteria": {**CRIT_B, "C3": 1.0}},
            }
        ),
        "schema",
    ),
    ('{"doc_1": {"criteria": {}}, "doc_1": {"criteria": {}}}', "schema"),
]


@pytest.mark.parametrize(("text", "category"), RUBRIC_FAILURES)
def test_malformed_rubric_answers_are_categorised(text: str, category: str) -> None:
    """Unknown/duplicate docs or bad verdicts are schema; missing docs are incomplete."""
    result = parsing.parse_rubric(text, 2)
    assert (result.valid, result.category, result.answers) == (False, category, None)
    assert result.reason


def test_any_failure_at_the_token_limit_is_truncated() -> None:
    """finish_reason 'length' turns every failure into 'truncated'; a valid answer stays valid."""
    cut = GOOD_T[: len(GOOD_T) // 2]
    assert parsing.parse_tournament(cut, 3).category == "invalid_json"
    result = parsing.parse_tournament(cut, 3, finish_reason="length")
    assert (result.valid, result.category) == (False, "truncated")
    assert "token limit" in result.reason
    assert parsing.parse_rubric("", 2, finish_reason="length").category == "truncated"
    assert parsing.parse_tournament(GOOD_T, 3, finish_reason="length").valid


def test_refused_requests_have_their_own_category() -> None:
    """An endpoint rejection is stored as 'refused' with a bounded reason."""
    result = parsing.refused("HTTP 400: " + "x" * 5000)
    assert (result.valid, result.category) == (False, "refused")
    assert len(result.reason) == parsing.MAX_REASON_CHARS


def test_every_category_is_reachable() -> None:
    """The six categories of §1.5 are the only ones, and each has a trigger above."""
    seen = {c for _, c in TOURNAMENT_FAILURES + RUBRIC_FAILURES} | {
        "truncated",
        "refused",
    }
    assert seen == set(parsing.INVALID_CATEGORIES)


def test_escape_repairs_are_bounded() -> None:
    """More than 1000 invalid escapes is invalid_json, not an endless loop."""
    text = '{"reasoning": "' + "\\q" * 1001 + '", "ranking": [], "scores": {}}'
    with pytest.raises(AnswerError) as error:
        parsing.decode_json(text)
    assert error.value.category == "invalid_json"
    assert (
        parsing.decode_json(text.replace("\\q" * 1001, "\\q" * 1000))["ranking"] == []
    )


def test_result_is_frozen() -> None:
    """Parse results are immutable values."""
    result = parsing.parse_tournament(GOOD_T, 3)
    with pytest.raises(AttributeError):
        result.valid = False  # type: ignore[misc]


def test_window_size_must_be_positive() -> None:
    """A zero-document window is a caller's defect."""
    with pytest.raises(ValueError):
        parsing.parse_tournament(GOOD_T, 0)
