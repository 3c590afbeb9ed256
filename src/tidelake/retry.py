"""Retries, one way: tenacity, deciding by :func:`tidelake.errors.classify`.

:func:`retrying` returns a configured :class:`tenacity.Retrying`, :func:`async_retrying` a
:class:`tenacity.AsyncRetrying`. Both retry only an error :func:`~tidelake.errors.is_retryable`
calls transient (and, with ``retry_unknown=True``, one it does not know), wait with
exponential back-off plus jitter (``first_wait_s`` doubling up to ``max_wait_s``, plus up to
``first_wait_s`` of random jitter so restarted clients do not retry in step), log each retry
with structlog (``what``, ``attempt``, ``wait_s``, ``error``) and re-raise the last error
when they give up: the caller sees the library's own exception, never a ``RetryError``.

They stop after ``attempts`` attempts, or once ``deadline_s`` seconds have passed since the
first attempt (checked after a failure, like a give-up timer), or when ``stop_event`` is set
(its ``wait`` is then the sleep, so a stop request cuts a back-off short; a loop that must
end quietly on a stop checks the event before each attempt, and treats an error re-raised
while the event is set as the end); with none of the three they retry for as long as the
error is retryable. Use them as::

    for attempt in retrying("read manifest", attempts=3):
        with attempt:
            manifest = read()

    async for attempt in async_retrying("publish to the DLQ", attempts=5, first_wait_s=0.2):
        with attempt:
            await js.publish(subject, payload)

or call ``retrying(...)(fn, *args)``. ``on_retry(error, attempt, wait_s)`` runs before each
wait (the ingest reports ``retrying`` in its heartbeat from it). Tests make waits instant
with ``retrying(...).copy(wait=tenacity.wait_none())``. A loop that restarts something that
is not a call (a supervisor restarting a child process) counts its attempts and takes each
pause from :func:`backoff_s`, the same back-off.

Who retries what (unknown errors are retried only where the loop must stay up):

- ``stage/consumer.py`` DLQ publish: 5 attempts, transient only; then :class:`BusError`
  and the batch is redelivered later.
- ``capture/publisher.py`` recovery: each in-flight message until ``give_up_s``, transient
  and unknown (a stalled client, a closed connection); a terminal refusal ends it at once.
- ``lake/ingest.py`` round loop: forever, transient and unknown (a JVM error nobody
  classified), until stopped; a terminal error (a malformed manifest) ends the run.
- ``pipeline/run.py`` child restarts: forever, with :func:`backoff_s` pauses, until stopped.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypedDict

import structlog
import tenacity
from tenacity.retry import retry_base
from tenacity.stop import stop_base
from tenacity.wait import wait_base

from tidelake.errors import classify

log = structlog.get_logger(__name__)

#: What ``on_retry`` receives: the error, the attempt that failed (1-based), the wait.
OnRetry = Callable[[BaseException, int, float], None]


class _Options(TypedDict):
    """Keyword arguments shared by :class:`tenacity.Retrying` and its async twin."""

    stop: stop_base
    wait: wait_base
    retry: retry_base
    before_sleep: Callable[[tenacity.RetryCallState], None]
    reraise: bool


#: Characters of an error's text logged per retry (a JVM error's message holds a stack trace).
ERROR_CHARS = 2000


def _error_text(error: BaseException | None) -> str | None:
    if error is None:
        return None
    text = f"{type(error).__name__}: {error}"
    return text if len(text) <= ERROR_CHARS else text[: ERROR_CHARS - 1] + "…"


def _should_retry(retry_unknown: bool) -> Callable[[BaseException], bool]:
    def decide(exc: BaseException) -> bool:
        decided = classify(exc)
        return decided == "transient" or (retry_unknown and decided == "unknown")

    return decide


def _wait(first_wait_s: float, max_wait_s: float) -> wait_base:
    """Exponential back-off from ``first_wait_s``, doubling, capped at ``max_wait_s``, plus
    up to ``first_wait_s`` of jitter (built from tenacity's oldest stable wait strategies,
    so any tenacity 9 will do)."""
    return tenacity.wait_exponential(multiplier=first_wait_s, max=max_wait_s) + (
        tenacity.wait_random(0, first_wait_s)
    )


def _options(
    what: str,
    *,
    attempts: int | None,
    deadline_s: float | None,
    first_wait_s: float,
    max_wait_s: float,
    retry_unknown: bool,
    stop_event: threading.Event | None,
    on_retry: OnRetry | None,
) -> _Options:
    """Keyword arguments shared by the sync and async retrying objects."""
    if attempts is not None and attempts < 1:
        raise ValueError(f"attempts must be at least 1, not {attempts}")
    stops: list[stop_base] = []
    if attempts is not None:
        stops.append(tenacity.stop_after_attempt(attempts))
    if deadline_s is not None:
        stops.append(tenacity.stop_after_delay(deadline_s))
    if stop_event is not None:
        stops.append(tenacity.stop_when_event_set(stop_event))
    stop: stop_base = tenacity.stop_any(*stops) if stops else tenacity.stop_never

    def before_sleep(state: tenacity.RetryCallState) -> None:
        outcome = state.outcome
        error = outcome.exception() if outcome is not None else None
        wait_s = state.next_action.sleep if state.next_action is not None else 0.0
        log.warning(
            "retrying",
            what=what,
            attempt=state.attempt_number,
            wait_s=round(wait_s, 3),
            error=_error_text(error),
        )
        if on_retry is not None and error is not None:
            on_retry(error, state.attempt_number, wait_s)

    return _Options(
        stop=stop,
        wait=_wait(first_wait_s, max_wait_s),
        retry=tenacity.retry_if_exception(_should_retry(retry_unknown)),
        before_sleep=before_sleep,
        reraise=True,
    )


def backoff_s(attempt: int, *, first_wait_s: float = 1.0, max_wait_s: float = 30.0) -> float:
    """The wait after failed ``attempt`` (1-based) with the same back-off as the retriers.

    For a loop that restarts something that is not a call (a supervisor restarting a child
    process that exited): it counts the attempts, this computes the pause.
    """
    if attempt < 1:
        raise ValueError(f"attempt must be at least 1, not {attempt}")
    state = tenacity.RetryCallState(retry_object=tenacity.Retrying(), fn=None, args=(), kwargs={})
    state.attempt_number = attempt
    return float(_wait(first_wait_s, max_wait_s)(state))


def retrying(
    what: str,
    *,
    attempts: int | None = None,
    deadline_s: float | None = None,
    first_wait_s: float = 0.1,
    max_wait_s: float = 30.0,
    retry_unknown: bool = False,
    stop_event: threading.Event | None = None,
    on_retry: OnRetry | None = None,
) -> tenacity.Retrying:
    """A :class:`tenacity.Retrying` for ``what`` (named in every log line); module docstring."""
    options = _options(
        what,
        attempts=attempts,
        deadline_s=deadline_s,
        first_wait_s=first_wait_s,
        max_wait_s=max_wait_s,
        retry_unknown=retry_unknown,
        stop_event=stop_event,
        on_retry=on_retry,
    )
    if stop_event is not None:
        # A stop request ends the wait at once; the stop condition then ends the retries
        # (and the last error is re-raised: a loop that ends quietly on a stop checks it).
        event = stop_event

        def sleep(seconds: float) -> None:
            event.wait(seconds)

        return tenacity.Retrying(sleep=sleep, **options)
    return tenacity.Retrying(**options)


def async_retrying(
    what: str,
    *,
    attempts: int | None = None,
    deadline_s: float | None = None,
    first_wait_s: float = 0.1,
    max_wait_s: float = 30.0,
    retry_unknown: bool = False,
    on_retry: OnRetry | None = None,
) -> tenacity.AsyncRetrying:
    """A :class:`tenacity.AsyncRetrying` for ``what`` (waits with ``asyncio.sleep``)."""
    options = _options(
        what,
        attempts=attempts,
        deadline_s=deadline_s,
        first_wait_s=first_wait_s,
        max_wait_s=max_wait_s,
        retry_unknown=retry_unknown,
        stop_event=None,
        on_retry=on_retry,
    )
    return tenacity.AsyncRetrying(**options)
