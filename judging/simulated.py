"""A simulated OpenAI-compatible judge: a real HTTP server answering our prompts. No Django.

It reads prompts rendered by ``judging.prompts`` (documents from
``<doc id="doc_N">`` blocks, HTML-unescaped) and answers from a hidden model:

- every document has a hidden relevance r ~ N(0, 1), deterministic from the seed
  and its text (SHA-256 based, like the reference fake judge of rcp_facts §7.1);
- Stage A: score = clip(d_q * r + a_q + noise, -5, 5), where the decisiveness
  d_q (0.6 to 1.8, a 3x spread) and the offset a_q (-1 to 1) depend on the seed
  and the query text - the per-query scale calibration must undo - and the noise
  (sd 0.3) on the window and the position;
- Stage B: criterion k passes with probability sigmoid(a_k * (r - b_k)), a 2PL
  with increasing thresholds b for C1..C5 (``RUBRIC_THRESHOLDS``).

Panel prompts (``panels.prompts``: a ``<lists>`` block of two ``<list>`` elements,
or a ``<questions>`` block and ``<documents>``) are answered too: lists mode names
the list of higher quality (the DCG of sigmoid(relevance) over its documents) with
probability sigmoid(``list_signal`` * difference), except that with probability
``position_bias`` it names List 1 whatever it holds; rubric mode answers each
question like Stage B, the document's relevance shifted by up to
+/-``rubric_position_bias`` from the first shown document to the last.

Faults are injected with probability ``fault_rate`` per chat request (chosen by a
seeded request counter) or forced in order by ``fault_sequence``: HTTP 429, HTTP
500, a timeout (the server sleeps past the client's read timeout), malformed JSON,
an answer missing a document, and ``finish_reason="length"`` truncation.

Endpoints: ``GET /v1/models``, ``POST /v1/chat/completions``, ``GET /stats``,
``POST /stats/reset`` and ``POST /config`` (change options at run time). The
stats count faults injected, outcomes of finished requests, requests per prompt
SHA-256 (faulted ones included; the hash ``render_prompt`` returns), clean
answers per prompt SHA-256, requests per query and per stage, and the most
requests ever in flight at once.
"""

from __future__ import annotations

import hashlib
import html
import json
import math
import re
import threading
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from judging.prompts import PASSAGES_PLACEHOLDER, QUERY_PLACEHOLDER, template

__all__ = [
    "FAULTS",
    "PanelPrompt",
    "Prompt",
    "RUBRIC_DISCRIMINATION",
    "RUBRIC_THRESHOLDS",
    "SimulatedJudge",
    "SimulatedJudgeServer",
    "SimulatedOptions",
    "read_panel_prompt",
    "read_prompt",
    "start_simulated_judge",
]

FAULTS: tuple[str, ...] = (
    "429",
    "500",
    "timeout",
    "malformed",
    "missing_doc",
    "truncated",
)
NO_FAULT = "none"
RUBRIC_THRESHOLDS: tuple[float, ...] = (-1.5, -0.5, 0.0, 0.8, 1.8)
RUBRIC_DISCRIMINATION: tuple[float, ...] = (1.2, 1.4, 1.6, 1.8, 1.5)
DECISIVENESS_RANGE = (0.6, 1.8)
OFFSET_RANGE = 1.0
SCORE_NOISE = 0.3
# Weight of the query-word overlap in the hidden relevance (the draw itself is N(0, 1)).
LEXICAL_WEIGHT = 2.5
CHARS_PER_TOKEN = 4
DEFAULT_MODEL = "simulated"


def _unit(*parts: object) -> float:
    """A uniform number in [0, 1) from SHA-256 of the parts joined by '|'."""
    digest = hashlib.sha256("|".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def _normal(*parts: object) -> float:
    """A standard normal number (Box-Muller) from the parts."""
    u1 = max(_unit(*parts, 1), 1e-12)
    u2 = _unit(*parts, 2)
    return math.sqrt(-2 * math.log(u1)) * math.cos(2 * math.pi * u2)


def _sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x))


def _criteria_params(k: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    if k == len(RUBRIC_THRESHOLDS):
        return RUBRIC_THRESHOLDS, RUBRIC_DISCRIMINATION
    lo, hi = RUBRIC_THRESHOLDS[0], RUBRIC_THRESHOLDS[-1]
    thresholds = tuple(lo + (hi - lo) * i / max(k - 1, 1) for i in range(k))
    return thresholds, (1.5,) * k


class SimulatedJudge:
    """The hidden relevance model and the answers it gives; pure and deterministic."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def relevance(self, text: str, query: str = "") -> float:
        """Hidden relevance of a document (its stripped, unescaped text).

        A seeded draw from the text, plus - when the query is given - a lexical term:
        the share of the query's words (4+ letters) found in the text, so documents
        written to answer a query (as in the demo benchmark) are judged relevant.
        """
        base = _normal(self.seed, "relevance", text.strip())
        if not query:
            return base
        terms = {w for w in re.findall(r"[a-z0-9]+", query.lower()) if len(w) >= 4}
        if not terms:
            return base
        found = sum(1 for w in terms if w in text.lower())
        return base + LEXICAL_WEIGHT * found / len(terms)

    def decisiveness(self, query: str) -> float:
        """How far apart this query's Stage A scores are spread (0.6 to 1.8)."""
        lo, hi = DECISIVENESS_RANGE
        return lo * (hi / lo) ** _unit(self.seed, "decisiveness", query)

    def offset(self, query: str) -> float:
        return OFFSET_RANGE * (2 * _unit(self.seed, "offset", query) - 1)

    @staticmethod
    def _window_key(texts: list[str]) -> str:
        return hashlib.sha256("\x1e".join(texts).encode()).hexdigest()

    def tournament_scores(self, query: str, texts: list[str]) -> list[float]:
        """Stage A scores in prompt order, on the -5..5 logit scale."""
        d, a, key = (
            self.decisiveness(query),
            self.offset(query),
            self._window_key(texts),
        )
        return [
            round(
                min(
                    5.0,
                    max(
                        -5.0,
                        d * self.relevance(t, query)
                        + a
                        + SCORE_NOISE * _normal(self.seed, "noise", key, i),
                    ),
                ),
                2,
            )
            for i, t in enumerate(texts)
        ]

    def rubric_answers(
        self, texts: list[str], n_criteria: int = 5, query: str = ""
    ) -> list[tuple[int, ...]]:
        """Stage B verdicts (0/1 per criterion) in prompt order."""
        thresholds, discrimination = _criteria_params(n_criteria)
        key = self._window_key(texts)
        answers = []
        for i, t in enumerate(texts):
            r = self.relevance(t, query)
            answers.append(
                tuple(
                    int(_unit(self.seed, "rubric", key, i, k) < _sigmoid(g * (r - b)))
                    for k, (b, g) in enumerate(
                        zip(thresholds, discrimination, strict=True)
                    )
                )
            )
        return answers

    def tournament_answer(self, query: str, texts: list[str]) -> dict[str, Any]:
        scores = self.tournament_scores(query, texts)
        order = sorted(range(len(texts)), key=lambda i: (-scores[i], i))
        return {
            "reasoning": "Ordered by how directly each document serves the query.",
            "ranking": [f"doc_{i + 1}" for i in order],
            "scores": {f"doc_{i + 1}": s for i, s in enumerate(scores)},
        }

    def rubric_answer(
        self, texts: list[str], n_criteria: int = 5, query: str = ""
    ) -> dict[str, Any]:
        return {
            f"doc_{i + 1}": {
                "reasoning": "Judged against each criterion on its own.",
                "criteria": {f"C{k + 1}": v for k, v in enumerate(verdicts)},
            }
            for i, verdicts in enumerate(self.rubric_answers(texts, n_criteria, query))
        }

    # -- panel prompts ----------------------------------------------------------
    def list_quality(self, query: str, texts: list[str]) -> float:
        """DCG of sigmoid(hidden relevance) over a ranked list (rank 1 first)."""
        return sum(
            _sigmoid(self.relevance(t, query)) / math.log2(i + 2)
            for i, t in enumerate(texts)
        )

    def list_one_probability(
        self,
        query: str,
        list_1: list[str],
        list_2: list[str],
        *,
        position_bias: float = 0.0,
        signal: float = 8.0,
    ) -> float:
        """P(the judge names List 1): bias, else a logistic of the quality gap."""
        gap = self.list_quality(query, list_1) - self.list_quality(query, list_2)
        return position_bias + (1 - position_bias) * _sigmoid(signal * gap)

    def lists_answer(
        self,
        query: str,
        list_1: list[str],
        list_2: list[str],
        *,
        key: str,
        position_bias: float = 0.0,
        signal: float = 8.0,
    ) -> dict[str, Any]:
        """A lists-mode answer; ``key`` (the prompt hash) seeds the draw."""
        p = self.list_one_probability(
            query, list_1, list_2, position_bias=position_bias, signal=signal
        )
        better = 1 if _unit(self.seed, "panel-lists", key) < p else 2
        return {
            "reasoning": "Compared the usefulness of both lists, top first.",
            "better": f"List {better}",
        }

    def panel_rubric_answer(
        self,
        query: str,
        texts: list[str],
        keys: list[str],
        *,
        key: str,
        position_bias: float = 0.0,
    ) -> dict[str, Any]:
        """A rubric-mode answer: question k passes with sigmoid(a_k (r' - b_k)),
        r' = relevance + position_bias * (1 - 2 i / (n - 1)) for the i-th shown."""
        thresholds, discrimination = _criteria_params(len(keys))
        n = len(texts)
        out = {}
        for i, t in enumerate(texts):
            shift = position_bias * (1 - 2 * i / (n - 1)) if n > 1 else 0.0
            r = self.relevance(t, query) + shift
            out[f"doc_{i + 1}"] = {
                "reasoning": "Judged against each question on its own.",
                "answers": {
                    k: _unit(self.seed, "panel-rubric", key, i, j)
                    < _sigmoid(g * (r - b))
                    for j, (k, b, g) in enumerate(
                        zip(keys, thresholds, discrimination, strict=True)
                    )
                },
            }
        return out


# ---------------------------------------------------------------------------
# Reading our prompts
# ---------------------------------------------------------------------------

_DOCUMENTS = re.compile(r"<documents>\n.*\n</documents>", re.S)
_DOC = re.compile(r'<doc id="doc_(\d+)">\n(.*?)\n</doc>', re.S)
_CRITERION = re.compile(r"\bC(\d+)\b")


def _query_markers(stage: str) -> tuple[str, str]:
    """(text just before the query, text between the query and the documents)."""
    tpl = template(stage)  # type: ignore[arg-type]
    q, p = tpl.index(QUERY_PLACEHOLDER), tpl.index(PASSAGES_PLACEHOLDER)
    before = tpl[:q].rsplit("\n\n", 1)[-1]
    return before, tpl[q + len(QUERY_PLACEHOLDER) : p]


_MARKERS = {stage: _query_markers(stage) for stage in ("tournament", "rubric")}


@dataclass(frozen=True)
class Prompt:
    stage: str
    query: str
    texts: list[str]
    n_criteria: int


def read_prompt(text: str, response_format: Any = None) -> Prompt | None:
    """Stage, query, document texts and criteria count of one of our prompts (None if not ours)."""
    block = _DOCUMENTS.search(text)
    if block is None:
        return None
    texts = [html.unescape(body) for _, body in _DOC.findall(block.group(0))]
    outside = text[: block.start()] + text[block.end() :]
    labels = [int(k) for k in _CRITERION.findall(outside)]
    name = ""
    if isinstance(response_format, dict):
        name = str((response_format.get("json_schema") or {}).get("name", ""))
    if "rubric" in name or "tournament" in name:
        stage = "rubric" if "rubric" in name else "tournament"
    else:
        stage = "rubric" if labels else "tournament"
    before, between = _MARKERS[stage]
    end = text.find(between + "<documents>")
    start = text.rfind(before, 0, end) if end >= 0 else -1
    query = text[start + len(before) : end] if start >= 0 else ""
    return Prompt(stage, query, texts, max(labels) if labels else 5)


_LIST_BLOCK = re.compile(r'<list id="list_(\d)">\n(.*?)\n</list>', re.S)
_ANY_DOC = re.compile(r'<doc id="[^"]+">\n(.*?)\n</doc>', re.S)
_QUESTION = re.compile(r'<question id="([^"]+)">')
_PANEL_QUERY = re.compile(r"## Query\n(.*?)\n\n## (?:Lists|Documents)\n", re.S)


@dataclass(frozen=True)
class PanelPrompt:
    """A panel prompt: ``lists`` (two lists of texts) or ``rubric`` (texts, keys)."""

    mode: str
    query: str
    lists: tuple[list[str], ...] = ()
    texts: list[str] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)


def read_panel_prompt(text: str) -> PanelPrompt | None:
    """Mode, query and documents of a ``panels.prompts`` prompt (None if not one)."""
    query_match = _PANEL_QUERY.search(text)
    query = query_match.group(1) if query_match else ""  # sent unescaped
    if "<lists>" in text:
        lists = {
            int(n): [html.unescape(b) for b in _ANY_DOC.findall(body)]
            for n, body in _LIST_BLOCK.findall(text)
        }
        if set(lists) != {1, 2}:
            return None
        return PanelPrompt("lists", query, lists=(lists[1], lists[2]))
    if "<questions>" in text:
        block = _DOCUMENTS.search(text)
        if block is None:
            return None
        texts = [html.unescape(b) for _, b in _DOC.findall(block.group(0))]
        keys = [html.unescape(k) for k in _QUESTION.findall(text)]
        return PanelPrompt("rubric", query, texts=texts, keys=keys)
    return None


# ---------------------------------------------------------------------------
# The HTTP server
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class SimulatedOptions:
    """How the simulated judge behaves. ``hang_s`` None: the client's read timeout + 1 s."""

    seed: int = 0
    latency_ms: float = 0.0
    fault_rate: float = 0.0
    faults: tuple[str, ...] = FAULTS
    fault_sequence: tuple[str, ...] = ()
    hang_s: float | None = None
    api_key: str | None = None
    model: str | None = None
    # Panel prompts only (see the module docstring); defaults: an unbiased judge.
    position_bias: float = 0.0
    list_signal: float = 8.0
    rubric_position_bias: float = 0.0
    keep_prompts: bool = False  # tests: keep every chat prompt's text (prompt_texts)

    def __post_init__(self) -> None:
        if not 0.0 <= self.position_bias <= 1.0:
            raise ValueError("position_bias must be between 0 and 1")
        unknown = set(self.faults) - set(FAULTS)
        unknown |= set(self.fault_sequence) - set(FAULTS) - {NO_FAULT}
        if unknown:
            raise ValueError(f"unknown faults {sorted(unknown)}; known: {FAULTS}")
        if not 0.0 <= self.fault_rate <= 1.0:
            raise ValueError("fault_rate must be between 0 and 1")


@dataclass
class _Counters:
    requests: int = 0
    chat_requests: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    faults: Counter[str] = field(default_factory=Counter)
    stages: Counter[str] = field(default_factory=Counter)
    prompts: Counter[str] = field(default_factory=Counter)
    answered: Counter[str] = field(default_factory=Counter)
    queries: Counter[str] = field(default_factory=Counter)

    def as_json(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "chat_requests": self.chat_requests,
            "in_flight": self.in_flight,
            "max_in_flight": self.max_in_flight,
            "outcomes": dict(self.outcomes),
            "faults": dict(self.faults),
            "stages": dict(self.stages),
            "prompts": dict(self.prompts),
            "answered": dict(self.answered),
            "queries": dict(self.queries),
        }


class SimulatedJudgeServer(ThreadingHTTPServer):
    """A thread per connection; keep-alive connections serve many requests each."""

    daemon_threads = True
    block_on_close = False
    request_queue_size = 1024
    allow_reuse_address = True

    def __init__(
        self, address: tuple[str, int], options: SimulatedOptions | None = None
    ) -> None:
        super().__init__(address, _Handler)
        self.options = options or SimulatedOptions()
        self.judge = SimulatedJudge(self.options.seed)
        self.lock = threading.Lock()
        self.counters = _Counters()
        self.fault_counter = 0
        self.stopping = threading.Event()
        self.prompt_texts: list[str] = []

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/v1"

    def configure(self, **changes: Any) -> SimulatedOptions:
        """Change options at run time (a new seed restarts the fault counter)."""
        for key in ("faults", "fault_sequence"):
            if key in changes:
                changes[key] = tuple(changes[key])
        with self.lock:
            self.options = replace(self.options, **changes)
            self.judge = SimulatedJudge(self.options.seed)
            if "seed" in changes or "fault_sequence" in changes:
                self.fault_counter = 0
            return self.options

    def stats(self) -> dict[str, Any]:
        with self.lock:
            return self.counters.as_json()

    def reset_stats(self) -> None:
        with self.lock:
            in_flight = self.counters.in_flight
            self.counters = _Counters(in_flight=in_flight, max_in_flight=in_flight)

    def next_fault(self) -> str:
        """The fault for the next chat request: forced sequence first, then seeded draws."""
        with self.lock:
            n, opts = self.fault_counter, self.options
            self.fault_counter += 1
        fault = NO_FAULT
        if n < len(opts.fault_sequence):
            fault = opts.fault_sequence[n]
        elif opts.faults and _unit(opts.seed, "fault", n) < opts.fault_rate:
            fault = opts.faults[
                int(_unit(opts.seed, "fault-kind", n) * len(opts.faults))
            ]
        if fault != NO_FAULT:
            with self.lock:
                self.counters.faults[fault] += 1
        return fault

    def stop(self) -> None:
        self.stopping.set()  # wakes requests sleeping in latency or a timeout fault
        self.shutdown()
        self.server_close()


def _approx_tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: the openai client reuses connections
    disable_nagle_algorithm = True
    server: SimulatedJudgeServer
    abandoned = False  # the client has timed out: no longer counted in flight

    def log_message(self, format: str, *args: Any) -> None:
        pass  # one line per request would dominate a benchmark's CPU

    # -- plumbing ---------------------------------------------------------------
    def _send_json(
        self, status: int, payload: Any, headers: dict[str, str] | None = None
    ) -> None:
        body = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up (e.g. its timeout)

    def _error(self, status: int, message: str, kind: str) -> None:
        self._send_json(status, self._error_body(status, message, kind))

    def _read_json(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        return json.loads(raw or b"{}")

    def _count(self) -> None:
        with self.server.lock:
            self.server.counters.requests += 1

    # -- routes -------------------------------------------------------------------
    def do_GET(self) -> None:
        self._count()
        path = self.path.split("?", 1)[0].rstrip("/")
        if path in ("/v1/models", "/models"):
            name = self.server.options.model or DEFAULT_MODEL
            self._send_json(
                200,
                {
                    "object": "list",
                    "data": [
                        {
                            "id": name,
                            "object": "model",
                            "created": 0,
                            "owned_by": "rcp-simulated",
                        }
                    ],
                },
            )
        elif path == "/stats":
            self._send_json(200, self.server.stats())
        elif path in ("/health", "/v1/health"):
            self._send_json(200, {"status": "ok"})
        else:
            self._error(404, f"no route {self.path}", "not_found")

    def do_POST(self) -> None:
        self._count()
        path = self.path.split("?", 1)[0].rstrip("/")
        try:
            payload = self._read_json()
        except ValueError:
            self._error(400, "the request body is not JSON", "invalid_request_error")
            return
        if path in ("/v1/chat/completions", "/chat/completions"):
            self._chat(payload)
        elif path == "/stats/reset":
            self.server.reset_stats()
            self._send_json(200, self.server.stats())
        elif path == "/config":
            try:
                options = self.server.configure(**payload)
            except (TypeError, ValueError) as error:
                self._error(400, str(error), "invalid_request_error")
                return
            self._send_json(200, asdict(options))
        else:
            self._error(404, f"no route {self.path}", "not_found")

    def _chat(self, payload: dict[str, Any]) -> None:
        server = self.server
        with server.lock:
            counters = server.counters
            counters.chat_requests += 1
            counters.in_flight += 1
            counters.max_in_flight = max(counters.max_in_flight, counters.in_flight)
        self.abandoned = False
        outcome, status, body, digest = "error", 500, None, None
        try:
            outcome, status, body, digest = self._answer(payload)
        finally:
            # Counted before the reply leaves: once a client has its answer (and
            # frees its slot), this request no longer counts as in flight.
            with server.lock:
                if not self.abandoned:
                    server.counters.in_flight -= 1
                server.counters.outcomes[outcome] += 1
                if outcome == "ok" and digest is not None:
                    server.counters.answered[digest] += 1
        if body is None:
            self.close_connection = True  # stopping: no reply
        else:
            self._send_json(status, body)

    @staticmethod
    def _error_body(status: int, message: str, kind: str) -> dict[str, Any]:
        return {"error": {"message": message, "type": kind, "code": status}}

    def _answer(
        self, payload: dict[str, Any]
    ) -> tuple[str, int, dict[str, Any] | None, str | None]:
        """(outcome, HTTP status, reply body or None for no reply, prompt SHA-256)."""
        server, opts = self.server, self.server.options
        if opts.api_key is not None:
            if self.headers.get("Authorization", "") != f"Bearer {opts.api_key}":
                message = "Incorrect API key provided."
                return "401", 401, self._error_body(401, message, "auth_error"), None
        model = payload.get("model", "")
        if opts.model is not None and model != opts.model:
            message = f"The model `{model}` does not exist."
            return "404", 404, self._error_body(404, message, "NotFoundError"), None
        if payload.get("stream"):
            message = "streaming is not supported"
            return "400", 400, self._error_body(400, message, "invalid_request"), None
        messages = payload.get("messages") or []
        text = _message_text(messages[-1]) if messages else ""
        panel = read_panel_prompt(text)
        prompt = (
            None
            if panel is not None
            else read_prompt(text, payload.get("response_format"))
        )
        digest = hashlib.sha256(text.strip().encode()).hexdigest()
        with server.lock:
            server.counters.prompts[digest] += 1
            if opts.keep_prompts:
                server.prompt_texts.append(text)
            if prompt is not None:
                server.counters.stages[prompt.stage] += 1
                server.counters.queries[prompt.query] += 1
            if panel is not None:
                server.counters.stages[f"panel_{panel.mode}"] += 1
                server.counters.queries[panel.query] += 1

        fault = server.next_fault()
        if opts.latency_ms > 0 and server.stopping.wait(opts.latency_ms / 1000):
            return "stopped", 0, None, digest
        if fault == "429":
            message = "Rate limit reached; slow down."
            return fault, 429, self._error_body(429, message, "rate_limit"), digest
        if fault == "500":
            message = "The engine hit an internal error."
            return fault, 500, self._error_body(500, message, "server_error"), digest
        if fault == "timeout" and self._hang(opts.hang_s):
            return "stopped", 0, None, digest

        if panel is not None:
            content, finish = self._panel_content(panel, digest, fault)
        else:
            content, finish = self._content(prompt, fault)
        prompt_tokens, completion_tokens = _approx_tokens(text), _approx_tokens(content)
        body = {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model or DEFAULT_MODEL,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": finish,
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }
        return ("ok" if fault == NO_FAULT else fault), 200, body, digest

    def _hang(self, hang_s: float | None) -> bool:
        """Sleep past the client's read timeout; True if the server is stopping.

        Once the client must have given up, the request stops counting as in
        flight (slightly early rather than late, so a client that respects its
        concurrency is never seen above it).
        """
        server = self.server
        header = self.headers.get("x-stainless-read-timeout")
        client_timeout = float(header) if header else None
        if hang_s is None:
            hang_s = client_timeout + 1.0 if client_timeout is not None else 30.0
        if client_timeout is not None and client_timeout < hang_s:
            early = max(client_timeout - 0.05, 0.0)
            if server.stopping.wait(early):
                return True
            with server.lock:
                server.counters.in_flight -= 1
                self.abandoned = True
            hang_s -= early
        return server.stopping.wait(hang_s)

    def _content(self, prompt: Prompt | None, fault: str) -> tuple[str, str]:
        judge = self.server.judge
        if prompt is None:
            return "I can only judge documents given in <doc> elements.", "stop"
        if prompt.stage == "tournament":
            answer = judge.tournament_answer(prompt.query, prompt.texts)
            if fault == "missing_doc" and prompt.texts:
                last = f"doc_{len(prompt.texts)}"
                answer["ranking"].remove(last)
                del answer["scores"][last]
        else:
            answer = judge.rubric_answer(prompt.texts, prompt.n_criteria, prompt.query)
            if fault == "missing_doc" and prompt.texts:
                del answer[f"doc_{len(prompt.texts)}"]
        content = json.dumps(answer)
        if fault == "malformed":
            return content[:-1] + ",}", "stop"  # a trailing comma: not JSON
        if fault == "truncated":
            return content[: len(content) * 3 // 5], "length"
        return content, "stop"

    def _panel_content(
        self, panel: PanelPrompt, digest: str, fault: str
    ) -> tuple[str, str]:
        judge, opts = self.server.judge, self.server.options
        if panel.mode == "lists":
            answer = judge.lists_answer(
                panel.query,
                panel.lists[0],
                panel.lists[1],
                key=digest,
                position_bias=opts.position_bias,
                signal=opts.list_signal,
            )
            if fault == "missing_doc":
                del answer["better"]
        else:
            answer = judge.panel_rubric_answer(
                panel.query,
                panel.texts,
                panel.keys,
                key=digest,
                position_bias=opts.rubric_position_bias,
            )
            if fault == "missing_doc" and panel.texts:
                del answer[f"doc_{len(panel.texts)}"]
        content = json.dumps(answer)
        if fault == "malformed":
            return content[:-1] + ",}", "stop"
        if fault == "truncated":
            return content[: len(content) * 3 // 5], "length"
        return content, "stop"


def _message_text(message: dict[str, Any]) -> str:
    content = message.get("content") or ""
    if isinstance(content, list):  # content parts: keep the text ones
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content)


def start_simulated_judge(
    port: int = 0, host: str = "127.0.0.1", **options: Any
) -> tuple[SimulatedJudgeServer, threading.Thread, str]:
    """Serve a simulated judge from a daemon thread; port 0 picks a free port.

    Returns (server, thread, base URL ending in /v1); call ``server.stop()`` when done.
    """
    for key in ("faults", "fault_sequence"):
        if key in options:
            options[key] = tuple(options[key])
    server = SimulatedJudgeServer((host, port), SimulatedOptions(**options))
    thread = threading.Thread(
        target=server.serve_forever,
        kwargs={"poll_interval": 0.1},
        name=f"simulated-judge-{server.server_address[1]}",
        daemon=True,
    )
    thread.start()
    return server, thread, server.url
