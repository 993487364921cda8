"""Global cap on the requests in flight per judge, across threads, processes and machines.

``limiter.acquire(judge_name, concurrency, timeout)`` is a context manager that
holds one of ``concurrency`` numbered slots while a request is in flight. Two
stores hold the slots (see ``LIMITS.md`` for why the cap holds):

- ``RedisLimiter`` - keys ``rcp:judge:{name}:slot:{i}`` taken with SET NX PX (a
  lease renewed by a background thread while held) and released by a
  compare-and-delete script that also wakes a waiting process (BLPOP on
  ``rcp:judge:{name}:freed``); a killed process frees its slots when the lease ends.

Inside a process, a finished request hands its slot to a waiting thread of the same
process without a store round trip, for up to ``handover_s`` after the slot was taken.
- ``FileLimiter`` - one lock file per slot under a directory, taken with
  ``flock(LOCK_EX | LOCK_NB)``; the kernel drops the locks of a dead process.

``LocalLimiter`` (one process only) serves tests and single-process scripts.
Only ``limiter_for_settings`` reads Django settings, and only when called.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import itertools
import logging
import os
import random
import re
import threading
import time
import uuid
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

__all__ = [
    "FileLimiter",
    "Limiter",
    "LimiterTimeout",
    "LocalLimiter",
    "RedisLimiter",
    "limiter_for_settings",
    "limiter_for_url",
]

logger = logging.getLogger(__name__)

# How often a waiting process looks for a slot freed by another process when the
# store cannot wake it (lock files). Slots freed inside the process wake a waiter at
# once, whatever this value; Redis wakes waiting processes on every release and polls
# only every WAKE_FALLBACK_S (for slots freed by an expired lease).
DEFAULT_POLL_S = 0.005
MAX_POLL_S = 0.02
WAKE_FALLBACK_S = 0.1
# A slot taken from the store passes from thread to thread of this process without
# a store round trip for this long, then goes back so other processes get a turn.
DEFAULT_HANDOVER_S = 1.0


class LimiterTimeout(TimeoutError):
    """No slot of the judge became free within the timeout."""


class Limiter(Protocol):
    """What the judge client needs: hold one of ``concurrency`` slots of a judge."""

    def acquire(
        self, judge_name: str, concurrency: int, timeout: float | None = None
    ) -> contextlib.AbstractContextManager[int]: ...


@dataclass
class _JudgeSlots:
    """Per-process bookkeeping of one judge's slots (all fields under ``lock``)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    held: dict[int, Any] = field(default_factory=dict)  # slot -> store handle
    since: dict[int, float] = field(default_factory=dict)  # slot -> taken from store
    handed: list[int] = field(default_factory=list)  # passed on, not picked up yet
    waiting: int = 0  # threads asleep on ``handover``
    polling: bool = False  # one waiting thread looks at the store
    freed: int = 0  # slots this process gave back to the store (wakes the poller)

    def __post_init__(self) -> None:
        # Waiters sleep on ``handover`` (a slot passed on, or the polling duty free);
        # the poller sleeps on ``released`` (a slot of this process back in the store).
        self.handover = threading.Condition(self.lock)
        self.released = threading.Condition(self.lock)


def _call_if_alive(method: Any) -> Any:
    """A callback that does not keep its limiter alive (fork hooks are never removed)."""
    ref = weakref.WeakMethod(method)

    def call() -> None:
        if (bound := ref()) is not None:
            bound()

    return call


class _SlotLimiter:
    """Shared waiting logic. Subclasses claim and free one slot in their store.

    Inside a process, a thread that finishes with a slot hands it straight to a
    thread of this process waiting for one (no store round trip) for up to
    ``handover_s`` after the slot was taken from the store; after that, or with
    nobody waiting, it goes back to the store. One waiting thread per judge looks
    at the store (never while holding the process's lock) and the rest sleep until
    a slot is handed to them, so the store's load follows processes, not threads.
    """

    def __init__(
        self, *, poll_s: float = DEFAULT_POLL_S, handover_s: float = DEFAULT_HANDOVER_S
    ) -> None:
        self.poll_s = poll_s
        self.handover_s = handover_s
        self._lock = threading.Lock()
        self._judges: dict[str, _JudgeSlots] = {}
        # A forked child starts with no slots: they are the parent's to give back.
        os.register_at_fork(after_in_child=_call_if_alive(self._reset_after_fork))

    # -- store operations -------------------------------------------------------
    def _try_take(self, name: str, concurrency: int, held: set[int]) -> Any:
        """(slot, handle) of a newly claimed slot not in ``held``, or None."""
        raise NotImplementedError

    def _give_back(self, name: str, slot: int, handle: Any, concurrency: int) -> None:
        raise NotImplementedError

    def _await_release(
        self,
        name: str,
        state: _JudgeSlots,
        seen: int,
        wait: float,
        remaining: float | None,
    ) -> None:
        """Sleep up to ``wait`` s or until a slot may have come free in the store.

        This default wakes on slots given back by this process only (``seen`` is
        ``state.freed`` before the last look at the store); ``remaining`` is the
        caller's time left (None: no timeout)."""
        with state.lock:
            if state.freed == seen:
                state.released.wait(wait)

    def _after_fork(self, inherited: list[Any]) -> None:
        """Drop the store handles inherited from the parent (runs in a forked child)."""

    def _reset_after_fork(self) -> None:
        inherited = [h for state in self._judges.values() for h in state.held.values()]
        self._lock = threading.Lock()  # the parent's threads may have held it
        self._judges = {}
        self._after_fork(inherited)

    # -- waiting ---------------------------------------------------------------
    def _slots(self, name: str) -> _JudgeSlots:
        with self._lock:
            return self._judges.setdefault(name, _JudgeSlots())

    @contextlib.contextmanager
    def acquire(
        self, judge_name: str, concurrency: int, timeout: float | None = None
    ) -> Iterator[int]:
        """Hold one of ``concurrency`` slots of ``judge_name``; yields the slot number.

        Waits up to ``timeout`` seconds (None: forever), then raises LimiterTimeout.
        """
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        state = self._slots(judge_name)
        slot = self._wait_for_slot(judge_name, concurrency, timeout, state)
        try:
            yield slot
        finally:
            self._release(judge_name, concurrency, slot, state)

    def _release(
        self, name: str, concurrency: int, slot: int, state: _JudgeSlots
    ) -> None:
        with state.lock:
            if (
                len(state.handed) < state.waiting
                and slot < concurrency  # a lowered concurrency retires this slot
                and time.monotonic() - state.since[slot] < self.handover_s
            ):
                # Still ours in the store: the waiter sends its request on it.
                state.handed.append(slot)
                state.handover.notify()
                return
            handle = state.held.pop(slot)
            del state.since[slot]
        try:
            # Outside the lock: a store round trip (Redis) would otherwise hold up
            # every other thread's acquire and release in this process.
            self._give_back(name, slot, handle, concurrency)
        finally:
            with state.lock:
                state.freed += 1
                state.released.notify()  # the poller looks again at once
                if state.waiting and not state.polling:
                    state.handover.notify()  # someone must look at the store

    def _wait_for_slot(
        self, name: str, concurrency: int, timeout: float | None, state: _JudgeSlots
    ) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        poll = self.poll_s
        while True:
            with state.lock:
                while True:
                    if state.handed:
                        return state.handed.pop()
                    remaining = (
                        None if deadline is None else deadline - time.monotonic()
                    )
                    if remaining is not None and remaining <= 0:
                        raise LimiterTimeout(
                            f"no slot of judge {name!r} (concurrency {concurrency}) "
                            f"became free within {timeout:g} s"
                        )
                    if state.polling or len(state.held) >= concurrency:
                        # Another thread looks at the store, or this process holds
                        # every slot: one will be handed over or given back.
                        state.waiting += 1
                        try:
                            state.handover.wait(remaining)
                        finally:
                            state.waiting -= 1
                        continue
                    state.polling = True
                    held, seen = set(state.held), state.freed
                    break
            taken = None
            try:
                taken = self._try_take(name, concurrency, held)
                if taken is None:
                    wait = poll * random.uniform(0.5, 1.5)
                    if remaining is not None:
                        wait = min(wait, remaining)
                    self._await_release(name, state, seen, wait, remaining)
                    poll = min(poll * 1.5, MAX_POLL_S)
            finally:
                with state.lock:
                    state.polling = False
                    if taken is not None:
                        slot, handle = taken
                        state.held[slot] = handle
                        state.since[slot] = time.monotonic()
                    if state.waiting:
                        state.handover.notify()  # hand the polling duty on
            if taken is not None:
                return taken[0]


class LocalLimiter(_SlotLimiter):
    """Slots counted in this process only: for tests and single-process runs."""

    def _try_take(self, name: str, concurrency: int, held: set[int]) -> Any:
        free = [i for i in range(concurrency) if i not in held]
        return (free[0], None) if free else None

    def _give_back(self, name: str, slot: int, handle: Any, concurrency: int) -> None:
        pass


def _safe_name(name: str) -> str:
    readable = re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:60]
    return f"{readable}-{hashlib.sha256(name.encode()).hexdigest()[:12]}"


class FileLimiter(_SlotLimiter):
    """Slots as lock files under ``directory``, for all processes of one machine.

    A slot is held by ``flock(LOCK_EX | LOCK_NB)`` on its own open file
    description; the kernel releases it when the holder closes it or dies.
    """

    def __init__(
        self,
        directory: str | Path,
        *,
        poll_s: float = DEFAULT_POLL_S,
        handover_s: float = DEFAULT_HANDOVER_S,
    ):
        super().__init__(poll_s=poll_s, handover_s=handover_s)
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)

    def slot_path(self, name: str, slot: int) -> Path:
        return self.directory / f"{_safe_name(name)}.slot{slot}.lock"

    def _try_take(self, name: str, concurrency: int, held: set[int]) -> Any:
        start = random.randrange(concurrency)
        for k in range(concurrency):
            slot = (start + k) % concurrency
            if slot in held:
                continue
            # A fresh open per try: a lock taken twice through one description
            # would not conflict, so descriptions are never shared between slots.
            fd = os.open(self.slot_path(name, slot), os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            except BaseException:
                os.close(fd)
                raise
            return slot, fd
        return None

    def _give_back(self, name: str, slot: int, handle: Any, concurrency: int) -> None:
        os.close(handle)  # closing the only descriptor releases the lock

    def _after_fork(self, inherited: list[Any]) -> None:
        # A child's copy of a descriptor would keep the parent's lock alive after
        # the parent gives the slot back.
        for fd in inherited:
            with contextlib.suppress(OSError):
                os.close(fd)


# Compare-and-set scripts: a slot is only renewed or freed by the token that took it.
_CLAIM = """
local n = tonumber(ARGV[2])
local start = tonumber(ARGV[5])
for k = 0, n - 1 do
  local slot = (start + k) % n
  if redis.call('SET', ARGV[1] .. slot, ARGV[3], 'NX', 'PX', ARGV[4]) then
    return slot
  end
end
return -1
"""
_RENEW = """
local lost = {}
for i, key in ipairs(KEYS) do
  if redis.call('GET', key) == ARGV[i + 1] then
    redis.call('PEXPIRE', key, ARGV[1])
  else
    lost[#lost + 1] = key
  end
end
return lost
"""
# Freeing a slot also pushes onto the judge's wake list, where waiting processes
# block (BLPOP): the longest waiting one is woken at once instead of polling. The
# list keeps at most one entry per slot and expires, so signals nobody waited for
# cost a later waiter a few extra looks at most.
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('LPUSH', KEYS[2], 1)
  redis.call('LTRIM', KEYS[2], 0, tonumber(ARGV[2]) - 1)
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
  return 1
end
return 0
"""


class RedisLimiter(_SlotLimiter):
    """Slots as Redis keys ``{prefix}:{name}:slot:{i}``, for any number of machines.

    A slot is a key set with NX and a lease of ``lease_s``; a daemon thread
    renews the leases of held slots every ``lease_s / 3``. Release deletes the
    key only if it still holds our token, and pushes onto ``{prefix}:{name}:freed``,
    on which one waiting thread per process blocks (BLPOP, up to ``wake_s``, the
    fallback for slots freed by an expired lease). A killed holder's slot frees
    itself when its lease runs out.
    """

    def __init__(
        self,
        url: str,
        *,
        lease_s: float = 15.0,
        prefix: str = "rcp:judge",
        poll_s: float = DEFAULT_POLL_S,
        wake_s: float = WAKE_FALLBACK_S,
        handover_s: float = DEFAULT_HANDOVER_S,
    ) -> None:
        import redis  # imported here so file-only deployments need no Redis client

        super().__init__(poll_s=poll_s, handover_s=handover_s)
        self.url = url
        self.prefix = prefix
        self.lease_ms = int(lease_s * 1000)
        self.wake_s = wake_s
        self._redis = redis.Redis.from_url(url)
        self._claim_script = self._redis.register_script(_CLAIM)
        self._renew_script = self._redis.register_script(_RENEW)
        self._release_script = self._redis.register_script(_RELEASE)
        self._tokens: dict[str, str] = {}  # key -> token
        self._tokens_lock = threading.Lock()
        self._renewer: threading.Thread | None = None
        self._new_tokens()

    def key_prefix(self, name: str) -> str:
        return f"{self.prefix}:{name}:slot:"

    def wake_key(self, name: str) -> str:
        return f"{self.prefix}:{name}:freed"

    def _new_tokens(self) -> None:
        # Unique per acquisition: this process's random prefix and a counter.
        self._token_prefix = f"{os.getpid()}:{uuid.uuid4().hex}:"
        self._token_count = itertools.count()

    def _after_fork(self, inherited: list[Any]) -> None:
        # The parent keeps renewing and releasing its own slots.
        self._tokens_lock = threading.Lock()
        self._tokens = {}
        self._renewer = None
        self._new_tokens()

    def _try_take(self, name: str, concurrency: int, held: set[int]) -> Any:
        token = f"{self._token_prefix}{next(self._token_count)}"
        slot = int(
            self._claim_script(
                args=[
                    self.key_prefix(name),
                    concurrency,
                    token,
                    self.lease_ms,
                    random.randrange(concurrency),
                ]
            )
        )
        if slot < 0:
            return None
        key = f"{self.key_prefix(name)}{slot}"
        with self._tokens_lock:
            self._tokens[key] = token
            self._start_renewer()
        return slot, (key, token)

    def _give_back(self, name: str, slot: int, handle: Any, concurrency: int) -> None:
        key, token = handle
        with self._tokens_lock:
            self._tokens.pop(key, None)
        try:
            self._release_script(
                keys=[key, self.wake_key(name)],
                args=[token, concurrency, self.lease_ms],
            )
        except Exception:  # the lease frees the slot anyway; don't fail the call
            logger.warning("could not release judge slot %s", key, exc_info=True)

    def _await_release(
        self,
        name: str,
        state: _JudgeSlots,
        seen: int,
        wait: float,
        remaining: float | None,
    ) -> None:
        # Every release, here or in any other process, pushes onto the wake list.
        timeout = self.wake_s if remaining is None else min(self.wake_s, remaining)
        try:
            # At least 10 ms: Redis reads a timeout below 1 ms as "block forever".
            self._redis.blpop([self.wake_key(name)], timeout=max(timeout, 0.01))
        except Exception:  # Redis unreachable: the next look at the store says so
            logger.warning(
                "could not wait on judge %s's wake list", name, exc_info=True
            )
            super()._await_release(name, state, seen, wait, remaining)

    def _start_renewer(self) -> None:
        if self._renewer is None or not self._renewer.is_alive():
            self._renewer = threading.Thread(
                target=self._renew_forever, name="judge-slot-renewer", daemon=True
            )
            self._renewer.start()

    def _renew_forever(self) -> None:
        interval = self.lease_ms / 3000
        while True:
            time.sleep(interval)
            with self._tokens_lock:
                held = list(self._tokens.items())
            if not held:
                continue
            try:
                # One script for every slot held: compare-and-PEXPIRE each key.
                lost = self._renew_script(
                    keys=[key for key, _ in held],
                    args=[self.lease_ms, *(token for _, token in held)],
                )
            except Exception:
                logger.warning("could not renew judge slots", exc_info=True)
                continue
            for key in lost:
                with self._tokens_lock:
                    still_held = key.decode() in self._tokens
                if still_held:
                    # Our lease ran out (e.g. the process was frozen longer than the
                    # lease): the cap may have been exceeded for a moment.
                    logger.warning("lost the lease of judge slot %s", key.decode())


# ---------------------------------------------------------------------------
# Choosing a limiter
# ---------------------------------------------------------------------------

_BY_URL: dict[str, Limiter] = {}
_BY_URL_LOCK = threading.Lock()


def limiter_for_url(url: str) -> Limiter:
    """The process-wide limiter for ``redis://…``, ``rediss://…``, ``file:///dir`` or ``memory://``."""
    with _BY_URL_LOCK:
        if url not in _BY_URL:
            if url.startswith(("redis://", "rediss://", "unix://")):
                _BY_URL[url] = RedisLimiter(url)
            elif url.startswith("file://"):
                _BY_URL[url] = FileLimiter(url.removeprefix("file://"))
            elif url.startswith("memory://"):
                _BY_URL[url] = LocalLimiter()
            else:
                raise ValueError(f"unsupported judge limiter URL {url!r}")
        return _BY_URL[url]


def limiter_for_settings() -> Limiter:
    """The limiter this deployment uses, chosen from settings or the environment.

    ``JUDGE_LIMITER_URL`` wins; else a ``redis://`` Celery broker is shared by all
    workers, so slots live there; else lock files under ``VAR_DIR/judge-slots``
    (one machine: the embedded default).
    """
    from django.conf import settings

    url = getattr(settings, "JUDGE_LIMITER_URL", None) or os.environ.get(
        "JUDGE_LIMITER_URL"
    )
    if not url:
        broker = getattr(settings, "CELERY_BROKER_URL", "") or ""
        if broker.startswith(("redis://", "rediss://")):
            url = broker
        else:
            base = getattr(settings, "VAR_DIR", None) or Path.cwd() / "var"
            url = f"file://{Path(base) / 'judge-slots'}"
    return limiter_for_url(url)
