"""The simulated judge: a real OpenAI-compatible server answering our prompts (issue 3, item 10).

Every call goes over HTTP through the ``openai`` client (``judging.clients``).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
from collections import Counter

import httpx
import openai
import pytest
from django.core.management import CommandError, call_command

from judging import parsing, prompts
from judging.clients import JudgeClient, JudgeEndpoint
from judging.simulated import (
    FAULTS,
    RUBRIC_THRESHOLDS,
    SimulatedJudge,
    read_prompt,
    start_simulated_judge,
)
from tests.conftest import REPO

QUERY = 'why do "tides" rise & fall <twice> a day?'


def _texts(prefix: str, n: int = 10) -> list[str]:
    return [f"{prefix} passage {i}: the moon's pull & <sun> effects" for i in range(n)]


@pytest.fixture
def simulated():
    server, _thread, url = start_simulated_judge(seed=7)
    yield server, url
    server.stop()


def _client(url: str, **endpoint) -> JudgeClient:
    endpoint = {"name": "sim", "base_urls": (url,), "model": "m", **endpoint}
    return JudgeClient(JudgeEndpoint(**endpoint), backoff_base_s=0.01)


def _ask(client: JudgeClient, stage: str, query: str, texts: list[str]):
    messages, sha = prompts.render_prompt(stage, query, texts)
    call = client.complete(
        messages, response_format=prompts.response_format(stage, len(texts))
    )
    parse = parsing.parse_tournament if stage == "tournament" else parsing.parse_rubric
    return parse(call.text, len(texts), finish_reason=call.finish_reason), call, sha


def test_answers_of_both_stages_parse_valid(simulated):
    """Stage A and Stage B answers are complete, valid answers for windows of any size."""
    server, url = simulated
    client = _client(url)
    for size in (1, 4, 10):
        texts = _texts(f"w{size}", size)
        result, call, _ = _ask(client, "tournament", QUERY, texts)
        assert result.valid and len(result.scores) == size
        assert all(-5 <= s <= 5 for s in result.scores)
        assert sorted(result.ranking) == list(range(size))
        assert call.finish_reason == "stop" and call.retries == 0
        assert call.input_tokens > 0 and call.output_tokens > 0
        result, _, _ = _ask(client, "rubric", QUERY, texts)
        assert result.valid and len(result.answers) == size
        assert all(len(a) == 5 and set(a) <= {0, 1} for a in result.answers)
    assert server.stats()["stages"] == {"tournament": 3, "rubric": 3}


def test_read_prompt_recovers_stage_query_and_unescaped_documents():
    """The server reads exactly what prompts.py rendered: query as given, documents unescaped."""
    texts = _texts("read", 3)
    for stage in ("tournament", "rubric"):
        messages, _ = prompts.render_prompt(stage, QUERY, texts)
        prompt = read_prompt(messages[0]["content"])
        assert (prompt.stage, prompt.query, prompt.texts) == (stage, QUERY, texts)
        assert prompt.n_criteria == 5
    assert read_prompt("hello, no documents here") is None


def test_stage_a_scores_rise_with_hidden_relevance(simulated):
    """Within a query, a document of higher hidden relevance gets a higher Stage A score."""
    _server, url = simulated
    client, judge = _client(url), SimulatedJudge(seed=7)
    relevance, scores = [], []
    for w in range(4):
        texts = _texts(f"relevance-{w}")
        result, _, _ = _ask(client, "tournament", QUERY, texts)
        relevance += [judge.relevance(t) for t in texts]
        scores += list(result.scores)
    assert statistics.correlation(relevance, scores) > 0.85


def test_decisiveness_spreads_stage_a_scores_differently_per_query(simulated):
    """Decisiveness is fixed per query, spans about 3x, and scales the score spread."""
    _server, url = simulated
    judge = SimulatedJudge(seed=7)
    values = [judge.decisiveness(f"query {i}") for i in range(200)]
    assert 0.6 <= min(values) and max(values) <= 1.8 and max(values) / min(values) > 2.5
    assert judge.decisiveness("query 3") == SimulatedJudge(7).decisiveness("query 3")
    assert judge.decisiveness("query 3") != SimulatedJudge(8).decisiveness("query 3")

    queries = sorted((f"query {i}" for i in range(200)), key=judge.decisiveness)
    flat, sharp = queries[0], queries[-1]
    texts, client = _texts("spread"), _client(url)
    spread = {
        q: statistics.pstdev(_ask(client, "tournament", q, texts)[0].scores)
        for q in (flat, sharp)
    }
    assert spread[sharp] > 1.8 * spread[flat]


def test_rubric_follows_a_2pl_with_increasing_thresholds():
    """C1 passes most often and C5 least; more relevant documents pass more criteria."""
    judge = SimulatedJudge(seed=3)
    texts = _texts("rubric", 400)
    answers = judge.rubric_answers(texts)
    rates = [sum(a[k] for a in answers) / len(answers) for k in range(5)]
    assert rates == sorted(rates, reverse=True) and rates[0] > 0.6 > 0.2 > rates[4]
    passed = [sum(a) for a in answers]
    relevance = [judge.relevance(t) for t in texts]
    assert statistics.correlation(relevance, passed) > 0.6
    assert len(RUBRIC_THRESHOLDS) == 5


def test_faults_are_seeded_and_each_kind_occurs():
    """The same seed gives the same fault for the n-th request; every kind is drawn."""
    first, _, _ = start_simulated_judge(seed=11, fault_rate=0.5)
    second, _, _ = start_simulated_judge(seed=11, fault_rate=0.5)
    try:
        draws = [first.next_fault() for _ in range(600)]
        assert draws == [second.next_fault() for _ in range(600)]
        counts = Counter(draws)
        assert set(counts) == {*FAULTS, "none"}
        assert 0.4 < counts["none"] / 600 < 0.6
    finally:
        first.stop()
        second.stop()


def test_stats_count_prompts_and_reset(simulated):
    """/stats counts requests per prompt hash (the hash render_prompt returns); reset clears them."""
    server, url = simulated
    client = _client(url)
    _, _, sha = _ask(client, "rubric", "q stats", _texts("stats", 3))
    _ask(client, "rubric", "q stats", _texts("stats", 3))
    base = url.removesuffix("/v1")
    stats = httpx.get(f"{base}/stats").json()
    assert stats["prompts"] == {sha: 2} and stats["answered"] == {sha: 2}
    assert stats["queries"] == {"q stats": 2} and stats["outcomes"] == {"ok": 2}
    assert stats["max_in_flight"] == 1 and stats["in_flight"] == 0
    assert httpx.post(f"{base}/stats/reset").json()["chat_requests"] == 0
    assert server.stats()["prompts"] == {}


def test_models_endpoint_and_runtime_config(simulated):
    """GET /v1/models lists the served model; POST /config changes options live."""
    server, url = simulated
    models = openai.OpenAI(base_url=url, api_key="x").models.list()
    assert [m.id for m in models.data] == ["simulated"]
    base = url.removesuffix("/v1")
    reply = httpx.post(f"{base}/config", json={"model": "judge-x", "latency_ms": 5})
    assert reply.json()["model"] == "judge-x" and server.options.latency_ms == 5
    assert httpx.post(f"{base}/config", json={"faults": ["nope"]}).status_code == 400


def test_command_rejects_unknown_faults():
    """simulated_judge refuses a fault name it does not know."""
    with pytest.raises(CommandError, match="unknown faults"):
        call_command("simulated_judge", "--faults", "429,explode")


def test_command_serves_until_stopped():
    """`manage.py simulated_judge` prints its URL and answers /v1/models."""
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "simulated_judge", "--port", "0", "--seed", "5"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        url = line.split(" at ", 1)[1].split(" ", 1)[0]
        assert httpx.get(f"{url}/models").json()["data"][0]["id"] == "simulated"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
