"""The panel rule against the simulated judge's model, without a database: the
panel's agreement with a simulated human verdict matches what the simulation
implies (computed exactly from each judge's answer probabilities), and the
prompt contract between ``panels.prompts`` and ``judging.simulated`` holds."""

from __future__ import annotations

import itertools
import math

import numpy as np

from judging.simulated import SimulatedJudge, read_panel_prompt
from panels import analysis, prompts

WORDS = "battery charge lithium voltage solar panel inverter grid storage cell".split()


def _contests(n: int, rng: np.random.Generator):
    out = []
    for c in range(n):
        query = " ".join(rng.choice(WORDS, size=3, replace=False))
        docs = [
            prompts.Document(
                f"Note {c}-{i}",
                " ".join(rng.choice(WORDS, size=int(rng.integers(2, 7)))),
            )
            for i in range(8)
        ]
        out.append((f"c{c}", query, docs[:5], docs[3:]))
    return out


def _decide_probs(p1: float, p2: float) -> dict[str, float]:
    """Rep 1 shows A first (P(List 1) = p1), rep 2 shows B first (p2)."""
    a, b = p1 * (1 - p2), (1 - p1) * p2
    return {"A": a, "B": b, "tie": 1 - a - b}


def test_panel_agreement_matches_the_simulation():
    """Judges with a position bias of 0.2 and a finite signal: over 400 contests the
    observed share of decided panel verdicts equal to the human verdict (the side
    of higher quality for a reference judge) is within 3 standard errors of the
    ratio of expectations the model implies, and so is the decided count."""
    rng = np.random.default_rng(7)
    judges = [SimulatedJudge(seed) for seed in (11, 12, 13)]
    human = SimulatedJudge(99)
    bias, signal = 0.2, 8.0
    refs, answers = [], []
    expect_k = expect_n = 0.0
    for cid, query, list_a, list_b in _contests(400, rng):
        texts_a = [d.render() for d in list_a]  # no markup in these texts
        texts_b = [d.render() for d in list_b]
        truth = (
            "A"
            if human.list_quality(query, texts_a) > human.list_quality(query, texts_b)
            else "B"
        )
        refs.append(analysis.ContestRef(cid, cid, truth, 3, "A", "B", 0.1, -0.1))
        dists = []
        for j, judge in enumerate(judges):
            probs = []
            for rep, (first, second) in ((1, (list_a, list_b)), (2, (list_b, list_a))):
                messages, sha = prompts.lists_prompt(query, first, second)
                seen = read_panel_prompt(messages[0]["content"])
                assert seen.mode == "lists" and seen.query == query
                assert seen.lists == (
                    [d.render() for d in first],
                    [d.render() for d in second],
                )
                answer = judge.lists_answer(
                    query, *seen.lists, key=sha, position_bias=bias, signal=signal
                )
                position = prompts.parse_lists(_json(answer)).position
                side = (
                    ("A" if rep == 1 else "B")
                    if position == 1
                    else ("B" if rep == 1 else "A")
                )
                answers.append(
                    analysis.Answer(cid, f"j{j}", rep, side, "A" if rep == 1 else "B")
                )
                probs.append(
                    judge.list_one_probability(
                        query, *seen.lists, position_bias=bias, signal=signal
                    )
                )
            dists.append(_decide_probs(*probs))
        for outcome in itertools.product(("A", "B", "tie"), repeat=3):
            p = math.prod(d[o] for d, o in zip(dists, outcome, strict=True))
            verdict = analysis.panel_verdict(outcome)
            if verdict in ("A", "B"):
                expect_n += p
                expect_k += p * (verdict == truth)
    section = analysis.panel_section(refs, answers, ["j0", "j1", "j2"], mode="lists")
    human = section["agreement"]["human"]
    decided = section["decided"]
    assert abs(decided["k"] - expect_n) < 3 * math.sqrt(expect_n) + 1
    expected = expect_k / expect_n
    print(
        f"panel vs simulated human: observed {human['rate']:.4f} "
        f"({human['k']}/{human['n']}), implied {expected:.4f}; decided "
        f"{decided['k']} of 400, implied {expect_n:.1f}"
    )
    se = math.sqrt(expected * (1 - expected) / human["n"])
    assert 0.6 < expected < 0.98  # a non-trivial regime
    assert abs(human["rate"] - expected) < 3 * se + 0.01
    assert human["ci"][0] <= human["rate"] <= human["ci"][1]
    # Position bias shows: each judge names List 1 in more than half its answers.
    for figures in section["per_judge"].values():
        assert figures["first_list_share"]["rate"] > 0.55


def _json(answer: dict) -> str:
    import json

    return json.dumps(answer)


def test_judge_decision_and_panel_verdict_follow_the_reference_rule():
    """Same side twice decides; 2 of 3 decided judges make the verdict; unanimous
    only when all three decide the same side."""
    assert analysis.judge_decision(["A", "A"]) == "A"
    assert analysis.judge_decision(["A", "B"]) == "tie"
    assert analysis.judge_decision(["A"]) == "tie"  # a missing answer: undecided
    assert analysis.judge_decision(["tie", "tie"]) == "tie"
    assert analysis.panel_verdict(["A", "A", "tie"]) == "A"
    assert analysis.panel_verdict(["A", "B", "tie"]) == "tie"
    assert analysis.panel_verdict(["B", "B", "B"]) == "B"
    refs = [analysis.ContestRef("1", "q", "A", 3, "A", "B", 0.3, -0.3)]
    answers = [
        analysis.Answer("1", j, rep, "A", "A" if rep == 1 else "B")
        for j in ("x", "y", "z")
        for rep in (1, 2)
    ]
    section = analysis.panel_section(refs, answers, ["x", "y", "z"], mode="lists")
    assert section["unanimous"]["k"] == 1 and section["decided"]["k"] == 1
    assert section["agreement"]["human"]["rate"] == 1.0
    assert section["agreement"]["rcp"]["all"]["rate"] == 1.0
    assert section["agreement"]["qrel"]["all"]["rate"] == 0.0
    assert section["agreement"]["main"]["rate"] == 1.0


def test_rubric_prompt_round_trip_and_parser():
    """The simulated judge reads the study's own question keys and every document
    of a rubric prompt; the parser accepts its answer and refuses gaps."""
    questions = [
        {"key": "topic", "text": "On topic?"},
        {"key": "answer", "text": "Answers it?"},
    ]
    docs = [prompts.Document("T", "x & y <b>"), prompts.Document("", "plain")]
    messages, sha = prompts.rubric_prompt("what is x", questions, docs)
    seen = read_panel_prompt(messages[0]["content"])
    assert seen.mode == "rubric" and seen.keys == ["topic", "answer"]
    assert seen.texts == ["T\n\nx & y <b>", "plain"] and seen.query == "what is x"
    answer = SimulatedJudge(3).panel_rubric_answer(
        seen.query, seen.texts, seen.keys, key=sha
    )
    parsed = prompts.parse_rubric(_json(answer), ["topic", "answer"], 2)
    assert len(parsed.answers) == 2 and set(parsed.answers[0]) == {"topic", "answer"}
    del answer["doc_2"]
    try:
        prompts.parse_rubric(_json(answer), ["topic", "answer"], 2)
    except prompts.AnswerError as exc:
        assert exc.category == "incomplete"
    else:
        raise AssertionError("a missing document must be refused")


def test_simulated_rubric_position_bias_favours_the_first_shown_document():
    """With rubric_position_bias 2, the same documents get more "yes" answers when
    shown first than when shown last; without it, about as many either way."""
    rng = np.random.default_rng(3)
    keys = ["C1", "C2", "C3", "C4", "C5"]

    def yes_first_minus_last(bias: float) -> float:
        diff = 0
        judge = SimulatedJudge(5)
        for c, query, docs, _other in _contests(150, rng):
            texts = [d.render() for d in docs]
            for order in (texts, texts[::-1]):
                ans = judge.panel_rubric_answer(
                    query, order, keys, key=f"{c}{order[0]}", position_bias=bias
                )
                first = sum(ans["doc_1"]["answers"].values())
                last = sum(ans[f"doc_{len(order)}"]["answers"].values())
                diff += first - last
        return diff / 300

    assert yes_first_minus_last(2.0) > 1.5
    assert abs(yes_first_minus_last(0.0)) < 0.4
