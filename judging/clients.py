"""The only module that talks to a judge: one chat completion through the ``openai`` client.

No Django import (``JudgeEndpoint.from_judge`` reads a ``Judge`` row by its
attributes). What happens per call (rcp_facts §3.5, §3.7):

- the request holds one of the judge's global slots (``judging.limits``) while
  in flight, so the judge never sees more than ``concurrency`` requests;
- the replica is the one with the fewest requests in flight in this process
  (ties broken at random); a replica that failed to connect is avoided for a
  while (5 s doubling to 60 s) as long as another one is healthy;
- timeouts, connection errors and HTTP 408/409/429/5xx are retried with
  exponential backoff and full jitter, up to ``max_retries`` times, then
  ``TransientJudgeError``; the slot is given back while sleeping;
- HTTP 401/403/404 raise ``FatalJudgeError`` (wrong key, model or URL: the job
  must stop); other 4xx raise ``RefusedJudgeError`` (this request was rejected:
  the window's attempt is ``refused``).
"""

from __future__ import annotations

import json
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import openai

from judging.keyenv import api_key_env_refusal
from judging.limits import Limiter, LimiterTimeout, limiter_for_url

try:  # the HTTP library the installed openai client is built on
    import httpx2 as _http
except ImportError:  # pragma: no cover - older openai releases use httpx
    import httpx as _http  # type: ignore[no-redef]

__all__ = [
    "CallResult",
    "FatalJudgeError",
    "JudgeClient",
    "JudgeEndpoint",
    "JudgeError",
    "RefusedJudgeError",
    "ReplicaCheck",
    "TransientJudgeError",
    "check_connection",
    "replicas_in_flight",
]

logger = logging.getLogger(__name__)

PLACEHOLDER_API_KEY = "not-needed"
FATAL_STATUSES = frozenset({401, 403, 404})
TRANSIENT_STATUSES = frozenset({408, 409, 429})
PARK_MIN_S = 5.0
PARK_MAX_S = 60.0


class JudgeError(Exception):
    """A call to a judge that produced no answer."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        base_url: str = "",
        retries: int = 0,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.base_url = base_url
        self.retries = retries


class TransientJudgeError(JudgeError):
    """The endpoint kept failing (timeouts, connection errors, 408/429/5xx) after every retry."""


class FatalJudgeError(JudgeError):
    """The endpoint refuses us for good (401/403/404): wrong key, model or URL. Stop the job."""


class RefusedJudgeError(TransientJudgeError):
    """The endpoint rejected this request (e.g. 400, 413, 422); not retried here.

    A TransientJudgeError subclass because callers treat both alike: the window's
    attempt is ``refused`` and the window is asked again, up to its attempt limit.
    """


@dataclass(frozen=True)
class JudgeEndpoint:
    """Everything needed to call a judge, free of Django (pickles into worker processes)."""

    name: str
    base_urls: tuple[str, ...]
    model: str
    api_key_env: str = ""
    max_output_tokens: int = 2048
    temperature: float | None = None
    timeout_s: float = 120.0
    decoding: str = "json_schema"
    extra_body: Mapping[str, Any] = field(default_factory=dict)
    concurrency: int = 8

    def __post_init__(self) -> None:
        if not self.base_urls:
            raise ValueError(f"judge {self.name!r} has no base URL")
        if self.concurrency < 1:
            raise ValueError(f"judge {self.name!r} needs a concurrency of at least 1")

    @classmethod
    def from_judge(cls, judge: Any) -> JudgeEndpoint:
        """The endpoint of a ``judging.models.Judge`` row."""
        return cls(
            name=judge.name,
            base_urls=tuple(u.rstrip("/") for u in judge.base_urls or ()),
            model=judge.model,
            api_key_env=judge.api_key_env or "",
            max_output_tokens=judge.max_output_tokens,
            temperature=judge.temperature,
            timeout_s=judge.timeout_s,
            decoding=judge.decoding,
            extra_body=dict(judge.extra_body or {}),
            concurrency=judge.concurrency,
        )

    @property
    def api_key(self) -> str:
        """The key from the environment, or a placeholder for local servers without one.

        Raises FatalJudgeError if ``api_key_env`` is not a variable declared for judge
        keys (``judging.keyenv``): the platform's own secrets are never sent.
        """
        refusal = api_key_env_refusal(self.api_key_env)
        if refusal is not None:
            raise FatalJudgeError(
                f"judge {self.name!r}: refusing to send its key: {refusal}"
            )
        return (
            os.environ.get(self.api_key_env) if self.api_key_env else None
        ) or PLACEHOLDER_API_KEY


@dataclass(frozen=True)
class CallResult:
    """One answered call: the answer text and what it cost."""

    text: str
    finish_reason: str | None
    input_tokens: int
    output_tokens: int
    latency_ms: float
    retries: int
    base_url: str


# ---------------------------------------------------------------------------
# Per-process state shared by every JudgeClient: HTTP clients and replica load
# ---------------------------------------------------------------------------

_STATE_LOCK = threading.Lock()
_OPENAI_CLIENTS: dict[tuple[Any, ...], openai.OpenAI] = {}
_IN_FLIGHT: dict[str, int] = {}
_PARKED: dict[str, tuple[float, float]] = {}  # url -> (until, last park length)


def _openai_client(
    base_url: str, api_key: str, timeout_s: float, pool: int
) -> openai.OpenAI:
    # Keyed by pid: connections inherited through fork belong to the parent.
    key = (os.getpid(), base_url, api_key, timeout_s, pool)
    with _STATE_LOCK:
        client = _OPENAI_CLIENTS.get(key)
        if client is None:
            http_client = openai.DefaultHttpxClient(
                timeout=_http.Timeout(timeout_s, connect=min(timeout_s, 10.0)),
                limits=_http.Limits(
                    max_connections=None, max_keepalive_connections=pool
                ),
            )
            client = openai.OpenAI(
                base_url=base_url,
                api_key=api_key,
                max_retries=0,  # retries are ours: backoff with jitter, slot released
                timeout=timeout_s,
                http_client=http_client,
            )
            _OPENAI_CLIENTS[key] = client
        return client


def _pick_replica(urls: Sequence[str], rng: random.Random) -> str:
    """Least-in-flight among replicas not parked (all parked: the one freed soonest)."""
    with _STATE_LOCK:
        now = time.monotonic()
        healthy = [u for u in urls if _PARKED.get(u, (0.0, 0.0))[0] <= now]
        if healthy:
            least = min(_IN_FLIGHT.get(u, 0) for u in healthy)
            url = rng.choice([u for u in healthy if _IN_FLIGHT.get(u, 0) == least])
        else:
            url = min(urls, key=lambda u: _PARKED[u][0])
        _IN_FLIGHT[url] = _IN_FLIGHT.get(url, 0) + 1
        return url


def _done_with_replica(url: str, *, reachable: bool) -> None:
    with _STATE_LOCK:
        _IN_FLIGHT[url] -= 1
        if reachable:
            _PARKED.pop(url, None)
        else:
            _, last = _PARKED.get(url, (0.0, 0.0))
            length = min(max(last * 2, PARK_MIN_S), PARK_MAX_S)
            _PARKED[url] = (time.monotonic() + length, length)


def replicas_in_flight() -> dict[str, int]:
    """Requests in flight per base URL in this process (for diagnostics and tests)."""
    with _STATE_LOCK:
        return dict(_IN_FLIGHT)


def chat_body(
    endpoint: JudgeEndpoint,
    messages: Sequence[Mapping[str, Any]],
    *,
    max_tokens: int,
    response_format: Mapping[str, Any] | None = None,
) -> bytes:
    """A chat completion request as JSON bytes, serialized once per window.

    It is sent with the official client's ``post("/chat/completions", content=...)``
    (its transport, timeouts and HTTP errors as ``openai`` exceptions). The typed
    ``chat.completions.create`` walks the messages and the schema through its
    typed-dict transform and builds pydantic models of each answer: 0.8 ms of client
    CPU per call against 0.45 ms this way (``perf/bench_judging.py``, 2026-12-01).
    """
    body: dict[str, Any] = {
        "model": endpoint.model,
        "messages": list(messages),
        "max_completion_tokens": max_tokens,
    }
    if endpoint.temperature is not None:  # otherwise the server's default, as the paper
        body["temperature"] = endpoint.temperature
    body.update(endpoint.extra_body or {})  # as the client's ``extra_body`` merges
    if response_format is not None:
        body["response_format"] = response_format
    return json.dumps(body, ensure_ascii=False).encode()


# ---------------------------------------------------------------------------
# The client
# ---------------------------------------------------------------------------


class JudgeClient:
    """Calls one judge; safe to share between threads.

    ``limiter`` caps requests in flight across processes (default: this process
    only - pass ``judging.limits.limiter_for_settings()`` in workers).
    """

    def __init__(
        self,
        endpoint: JudgeEndpoint,
        limiter: Limiter | None = None,
        *,
        max_retries: int = 6,
        backoff_base_s: float = 0.5,
        backoff_cap_s: float = 30.0,
        acquire_timeout_s: float | None = None,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.limiter = limiter if limiter is not None else limiter_for_url("memory://")
        self.max_retries = max_retries
        self.backoff_base_s = backoff_base_s
        self.backoff_cap_s = backoff_cap_s
        self.acquire_timeout_s = acquire_timeout_s
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._clients = {
            url: _openai_client(
                url, endpoint.api_key, endpoint.timeout_s, endpoint.concurrency
            )
            for url in endpoint.base_urls
        }

    def _request(
        self, messages: Sequence[Mapping[str, Any]], response_format: Any
    ) -> bytes:
        ep = self.endpoint
        return chat_body(
            ep,
            messages,
            max_tokens=ep.max_output_tokens,
            response_format=response_format if ep.decoding == "json_schema" else None,
        )

    def backoff_s(self, retry: int) -> float:
        """Full jitter: uniform in [0, min(cap, base * 2**retry)]."""
        return self._rng.uniform(
            0, min(self.backoff_cap_s, self.backoff_base_s * 2**retry)
        )

    def complete(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        response_format: Mapping[str, Any] | None = None,
    ) -> CallResult:
        """Ask the judge once (retrying transport failures); return its answer and usage.

        ``response_format`` is sent only when the endpoint decodes with a JSON
        schema. Raises FatalJudgeError, RefusedJudgeError or TransientJudgeError.
        """
        ep = self.endpoint
        body = self._request(messages, response_format)
        retries = 0
        while True:
            failure = self._attempt(body, retries)
            if isinstance(failure, CallResult):
                return failure
            if retries >= self.max_retries:
                raise TransientJudgeError(
                    f"judge {ep.name!r} failed {retries + 1} times; last: {failure}",
                    status=failure.status,
                    base_url=failure.base_url,
                    retries=retries,
                ) from failure
            delay = self.backoff_s(retries)
            if failure.retry_after_s is not None:
                delay = max(delay, min(failure.retry_after_s, self.backoff_cap_s))
            logger.info(
                "judge %s: %s; retry %d in %.2f s", ep.name, failure, retries + 1, delay
            )
            self._sleep(delay)
            retries += 1

    def _attempt(self, body: bytes, retries: int) -> CallResult | _Retry:
        ep, url = self.endpoint, ""
        try:
            slot = self.limiter.acquire(
                ep.name, ep.concurrency, timeout=self.acquire_timeout_s
            )
            with slot:  # held for the HTTP exchange only; the answer is read after
                url = _pick_replica(ep.base_urls, self._rng)
                reachable = True
                started = time.perf_counter()
                try:
                    response = self._clients[url].post(
                        "/chat/completions", content=body, cast_to=_http.Response
                    )
                except openai.APIConnectionError:  # includes timeouts
                    reachable = False
                    raise
                finally:
                    _done_with_replica(url, reachable=reachable)
                latency_ms = (time.perf_counter() - started) * 1000
            return _result(response.json(), latency_ms, retries, url)
        except LimiterTimeout as error:
            return _Retry(str(error))
        except openai.APITimeoutError:
            return _Retry(f"timeout after {ep.timeout_s:g} s at {url}", base_url=url)
        except openai.APIConnectionError as error:
            return _Retry(f"connection error at {url}: {error}", base_url=url)
        except openai.APIStatusError as error:
            return self._status_failure(error, url, retries)
        except (openai.APIResponseValidationError, ValueError) as error:
            # A 200 whose body is not a chat completion (proxy page, torn body).
            return _Retry(f"unreadable response from {url}: {error}", base_url=url)

    def _status_failure(
        self, error: openai.APIStatusError, url: str, retries: int
    ) -> _Retry:
        ep, status = self.endpoint, error.status_code
        detail = _error_message(error)
        if status in FATAL_STATUSES:
            what = {401: "unauthorized", 403: "forbidden", 404: "not found"}[status]
            hint = (
                f"check the API key in ${ep.api_key_env}"
                if status in (401, 403) and ep.api_key_env
                else "check the API key (none is configured)"
                if status in (401, 403)
                else "check the base URL (it usually ends in /v1) and the model name"
            )
            raise FatalJudgeError(
                f"judge {ep.name!r}: HTTP {status} ({what}) from "
                f"{url}/chat/completions for model {ep.model!r}: {detail}; {hint}",
                status=status,
                base_url=url,
                retries=retries,
            )
        if status in TRANSIENT_STATUSES or status >= 500:
            return _Retry(
                f"HTTP {status} from {url}: {detail}",
                status=status,
                base_url=url,
                retry_after_s=_retry_after(error),
            )
        raise RefusedJudgeError(
            f"judge {ep.name!r}: HTTP {status} from {url} refused the request: {detail}",
            status=status,
            base_url=url,
            retries=retries,
        )


class _Retry(Exception):
    """A failed attempt worth retrying (never raised to callers)."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        base_url: str = "",
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.base_url = base_url
        self.retry_after_s = retry_after_s


def _result(data: Any, latency_ms: float, retries: int, url: str) -> CallResult:
    """The answer and usage of a chat completion's JSON body; ValueError if the body
    is not one (a proxy's page, a torn body)."""
    if not isinstance(data, dict) or not isinstance(data.get("choices") or [], list):
        raise ValueError("the body is not a chat completion object")
    choice = (data.get("choices") or [None])[0]
    choice = choice if isinstance(choice, dict) else {}
    message = choice.get("message")
    text = message.get("content") if isinstance(message, dict) else None
    usage = data.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    finish = choice.get("finish_reason")
    return CallResult(
        text=text if isinstance(text, str) else "",
        finish_reason=finish if isinstance(finish, str) else None,
        input_tokens=_count(usage.get("prompt_tokens")),
        output_tokens=_count(usage.get("completion_tokens")),
        latency_ms=latency_ms,
        retries=retries,
        base_url=url,
    )


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _error_message(error: openai.APIStatusError) -> str:
    body = error.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])[:500]
        if isinstance(inner, str):
            return inner[:500]
    return str(error.message)[:500]


def _retry_after(error: openai.APIStatusError) -> float | None:
    value = error.response.headers.get("retry-after") if error.response else None
    try:
        return max(float(value), 0.0) if value is not None else None
    except ValueError:
        return None  # an HTTP date: fall back to our own backoff


# ---------------------------------------------------------------------------
# Connection test (the judge form's "Test connection" button)
# ---------------------------------------------------------------------------

TEST_PROMPT = "Reply with the single word OK."


@dataclass(frozen=True)
class ReplicaCheck:
    """What one base URL answered: its models, and one tiny completion."""

    base_url: str
    models: tuple[str, ...] = ()
    model_listed: bool = False
    answer: str = ""
    latency_ms: float = 0.0
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error


def check_connection(
    endpoint: JudgeEndpoint, limiter: Limiter | None = None, *, timeout_s: float = 20.0
) -> list[ReplicaCheck]:
    """Call each replica's ``/models`` and ask one tiny completion, with the official
    client, exactly as a job would (same key, model, decoding options, a slot of the
    judge's concurrency). Never raises for what the endpoint does: each replica's
    error is reported in words. FatalJudgeError if the key variable is refused."""
    api_key = endpoint.api_key  # refuses a platform secret before anything is sent
    limiter = limiter if limiter is not None else limiter_for_url("memory://")
    timeout = min(endpoint.timeout_s, timeout_s)
    return [
        _check_replica(endpoint, url, api_key, limiter, timeout)
        for url in endpoint.base_urls
    ]


def _check_replica(
    endpoint: JudgeEndpoint, url: str, api_key: str, limiter: Limiter, timeout: float
) -> ReplicaCheck:
    client = openai.OpenAI(
        base_url=url, api_key=api_key, max_retries=0, timeout=timeout
    )
    models: tuple[str, ...] = ()
    try:
        with client:
            try:
                models = tuple(m.id for m in client.models.list())
            except openai.APIError as error:
                return ReplicaCheck(url, error=f"GET {url}/models: {_describe(error)}")
            body = chat_body(
                endpoint,
                [{"role": "user", "content": TEST_PROMPT}],
                max_tokens=16,
            )
            with limiter.acquire(endpoint.name, endpoint.concurrency, timeout=timeout):
                started = time.perf_counter()
                response = client.post(
                    "/chat/completions", content=body, cast_to=_http.Response
                )
                latency_ms = (time.perf_counter() - started) * 1000
            result = _result(response.json(), latency_ms, 0, url)
    except LimiterTimeout as error:
        return ReplicaCheck(url, models, endpoint.model in models, error=str(error))
    except openai.APIError as error:
        return ReplicaCheck(
            url,
            models,
            endpoint.model in models,
            error=f"POST {url}/chat/completions: {_describe(error)}",
        )
    except ValueError as error:
        return ReplicaCheck(
            url,
            models,
            endpoint.model in models,
            error=f"POST {url}/chat/completions: unreadable answer: {error}",
        )
    return ReplicaCheck(
        url,
        models,
        endpoint.model in models,
        answer=result.text[:500],
        latency_ms=latency_ms,
    )


def _describe(error: openai.APIError) -> str:
    if isinstance(error, openai.APITimeoutError):
        return "timed out"
    if isinstance(error, openai.APIConnectionError):
        cause = error.__cause__ or error
        return f"cannot connect ({type(cause).__name__}: {cause})"
    if isinstance(error, openai.APIStatusError):
        return f"HTTP {error.status_code}: {_error_message(error)}"
    return f"{type(error).__name__}: {error}"
