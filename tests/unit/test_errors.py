"""The error model: one decision (transient, terminal, unknown) for any exception, and the
retry helpers that act on it (src/tidelake/errors.py, src/tidelake/retry.py).

Every exception below is built from the installed library's own class: nats-py
(``nats/errors.py``, ``nats/js/errors.py``), botocore (``botocore/exceptions.py``), pydantic,
orjson, pymysql and psycopg2.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable

import aiokafka.errors
import botocore.exceptions
import nats.errors
import nats.js.errors
import orjson
import psycopg2
import pydantic
import pymysql.err
import pytest
import tenacity

from tidelake.capture.runner import CaptureError, SourceUnavailableError
from tidelake.errors import (
    BusError,
    ConfigError,
    Decision,
    DecodeError,
    IngestError,
    ManifestError,
    StorageError,
    TableRefused,
    classify,
    is_retryable,
    is_terminal,
    register_classifier,
    unregister_classifier,
)
from tidelake.retry import async_retrying, backoff_s, retrying


def client_error(code: str, status: int = 400) -> botocore.exceptions.ClientError:
    """A botocore ClientError as an S3 call raises it."""
    response = {
        "Error": {"Code": code, "Message": code},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return botocore.exceptions.ClientError(response, "PutObject")


def validation_error() -> pydantic.ValidationError:
    """A real pydantic ValidationError."""

    class Model(pydantic.BaseModel):
        n: int

    try:
        Model.model_validate({"n": "not a number"})
    except pydantic.ValidationError as exc:
        return exc
    raise AssertionError("pydantic accepted a string for an int")


def orjson_error() -> orjson.JSONDecodeError:
    """A real orjson decode error (a truncated manifest)."""
    try:
        orjson.loads(b'{"batch_id": ')
    except orjson.JSONDecodeError as exc:
        return exc
    raise AssertionError("orjson parsed a truncated document")


def caused(exc: BaseException, cause: BaseException) -> BaseException:
    """``exc`` as raised by ``raise exc from cause``."""
    exc.__cause__ = cause
    return exc


TABLE: list[tuple[str, Callable[[], BaseException], Decision]] = [
    # tidelake's own errors, by marker
    ("BusError", lambda: BusError("down"), "transient"),
    ("StorageError", lambda: StorageError("cannot write"), "transient"),
    ("SourceUnavailableError", lambda: SourceUnavailableError("db down"), "transient"),
    ("ConfigError", lambda: ConfigError("bad"), "terminal"),
    ("DecodeError", lambda: DecodeError("bad json"), "terminal"),
    ("ManifestError", lambda: ManifestError("truncated"), "terminal"),
    ("TableRefused", lambda: TableRefused("no key"), "terminal"),
    ("CaptureError", lambda: CaptureError("binlog gone"), "terminal"),
    ("IngestError (no marker)", lambda: IngestError("failed"), "unknown"),
    # nats-py core (nats/errors.py)
    ("nats TimeoutError", nats.errors.TimeoutError, "transient"),
    ("nats FlushTimeoutError", nats.errors.FlushTimeoutError, "transient"),
    ("nats NoServersError", nats.errors.NoServersError, "transient"),
    ("nats NoRespondersError", nats.errors.NoRespondersError, "transient"),
    ("nats ConnectionClosedError", nats.errors.ConnectionClosedError, "transient"),
    ("nats UnexpectedEOF", nats.errors.UnexpectedEOF, "transient"),
    ("nats OutboundBufferLimitError", nats.errors.OutboundBufferLimitError, "transient"),
    ("nats AuthorizationError", nats.errors.AuthorizationError, "terminal"),
    ("nats MaxPayloadError", nats.errors.MaxPayloadError, "terminal"),
    ("nats BadSubjectError", nats.errors.BadSubjectError, "terminal"),
    ("nats Error (base)", nats.errors.Error, "unknown"),
    # JetStream (nats/js/errors.py)
    ("js NoStreamResponseError", nats.js.errors.NoStreamResponseError, "transient"),
    ("js FetchTimeoutError", nats.js.errors.FetchTimeoutError, "transient"),
    (
        "js ServiceUnavailableError",
        lambda: nats.js.errors.ServiceUnavailableError(code=503),
        "transient",
    ),
    ("js ServerError", lambda: nats.js.errors.ServerError(code=500), "transient"),
    ("js BadRequestError", lambda: nats.js.errors.BadRequestError(code=400), "terminal"),
    ("js NotFoundError", lambda: nats.js.errors.NotFoundError(code=404), "terminal"),
    ("js APIError 408", lambda: nats.js.errors.APIError(code=408), "transient"),
    ("js APIError 409", lambda: nats.js.errors.APIError(code=409), "terminal"),
    ("js APIError without code", nats.js.errors.APIError, "unknown"),
    # the OS
    ("ConnectionRefusedError", ConnectionRefusedError, "transient"),
    ("ConnectionResetError", ConnectionResetError, "transient"),
    ("TimeoutError", TimeoutError, "transient"),
    ("OSError", lambda: OSError(5, "I/O error"), "transient"),
    ("FileNotFoundError", lambda: FileNotFoundError("tidelake.toml"), "terminal"),
    ("PermissionError", lambda: PermissionError("tidelake.toml"), "terminal"),
    # botocore (botocore/exceptions.py)
    ("S3 SlowDown", lambda: client_error("SlowDown", 503), "transient"),
    ("S3 Throttling", lambda: client_error("Throttling", 400), "transient"),
    ("S3 RequestTimeout", lambda: client_error("RequestTimeout", 400), "transient"),
    ("S3 InternalError", lambda: client_error("InternalError", 500), "transient"),
    ("S3 unknown code, 502", lambda: client_error("Whatever", 502), "transient"),
    ("S3 AccessDenied", lambda: client_error("AccessDenied", 403), "terminal"),
    ("S3 NoSuchBucket", lambda: client_error("NoSuchBucket", 404), "terminal"),
    ("S3 InvalidAccessKeyId", lambda: client_error("InvalidAccessKeyId", 403), "terminal"),
    (
        "EndpointConnectionError",
        lambda: botocore.exceptions.EndpointConnectionError(endpoint_url="http://s3"),
        "transient",
    ),
    (
        "ReadTimeoutError",
        lambda: botocore.exceptions.ReadTimeoutError(endpoint_url="http://s3"),
        "transient",
    ),
    ("NoCredentialsError", botocore.exceptions.NoCredentialsError, "terminal"),
    # source databases
    ("pymysql OperationalError", lambda: pymysql.err.OperationalError(2013, "lost"), "transient"),
    ("psycopg2 OperationalError", lambda: psycopg2.OperationalError("gone"), "transient"),
    # malformed state
    ("orjson JSONDecodeError", orjson_error, "terminal"),
    ("json JSONDecodeError", lambda: json.JSONDecodeError("bad", "{", 1), "terminal"),
    ("UnicodeDecodeError", lambda: UnicodeDecodeError("utf-8", b"\xff", 0, 1, "bad"), "terminal"),
    ("pydantic ValidationError", validation_error, "terminal"),
    # a request to stop is never retried
    ("CancelledError", asyncio.CancelledError, "terminal"),
    ("KeyboardInterrupt", KeyboardInterrupt, "terminal"),
    # unknown: a bug
    ("RuntimeError", lambda: RuntimeError("bug"), "unknown"),
    ("KeyError", lambda: KeyError("k"), "unknown"),
    # Kafka's client marks its errors retriable or not (its timeout is retriable all the same)
    ("aiokafka KafkaConnectionError", lambda: aiokafka.errors.KafkaConnectionError(), "transient"),
    ("aiokafka KafkaTimeoutError", aiokafka.errors.KafkaTimeoutError, "transient"),
    ("aiokafka NotLeaderForPartition", aiokafka.errors.NotLeaderForPartitionError, "transient"),
    (
        "aiokafka TopicAuthorizationFailed",
        aiokafka.errors.TopicAuthorizationFailedError,
        "terminal",
    ),
    # a cause decides what its wrapper does not
    (
        "RuntimeError from ConnectionResetError",
        lambda: caused(RuntimeError("x"), ConnectionResetError()),
        "transient",
    ),
    (
        "StorageError from S3 AccessDenied",
        lambda: caused(StorageError("cannot write"), client_error("AccessDenied", 403)),
        "terminal",
    ),
    (
        "BusError from NoServersError",
        lambda: caused(BusError("cannot connect"), nats.errors.NoServersError()),
        "transient",
    ),
    (
        "ManifestError from OSError",
        lambda: caused(ManifestError("unreadable"), OSError("io")),
        "terminal",
    ),
]


@pytest.mark.parametrize(
    ("make", "expected"), [(m, e) for _, m, e in TABLE], ids=[n for n, _, _ in TABLE]
)
def test_classify(make: Callable[[], BaseException], expected: Decision) -> None:
    """Each known exception type gets the documented decision."""
    exc = make()
    assert (expected, expected == "transient", expected == "terminal") == (
        classify(exc),
        is_retryable(exc),
        is_terminal(exc),
    )


def test_cyclic_cause_chain_ends() -> None:
    """A cause chain that loops back is followed once, not forever."""
    a, b = RuntimeError("a"), RuntimeError("b")
    a.__cause__, b.__cause__ = b, a
    assert "unknown" == classify(a)


def test_registered_classifier_is_asked_first() -> None:
    """A registered classifier (the lake's JVM one) decides the errors it knows."""

    class JavaError(Exception):
        """Stands for py4j's Py4JJavaError."""

    def jvm(exc: BaseException) -> Decision | None:
        return "transient" if isinstance(exc, JavaError) else None

    register_classifier(jvm)
    try:
        assert ("transient", "unknown") == (classify(JavaError()), classify(RuntimeError()))
    finally:
        unregister_classifier(jvm)
    assert "unknown" == classify(JavaError())


def failing(errors: list[BaseException], result: str = "done") -> Callable[[], str]:
    """A call raising ``errors`` one by one, then returning ``result``; counts its calls."""
    calls: list[int] = []

    def call() -> str:
        calls.append(1)
        if errors:
            raise errors.pop(0)
        return result

    call.calls = calls  # type: ignore[attr-defined]
    return call


def test_retries_transient_until_success() -> None:
    """Transient errors are retried; the call's result is returned."""
    call = failing([BusError("down"), nats.errors.TimeoutError()])
    result = retrying("test", attempts=5).copy(wait=tenacity.wait_none())(call)
    assert ("done", 3) == (result, len(call.calls))  # type: ignore[attr-defined]


def test_terminal_is_not_retried() -> None:
    """A terminal error is raised at the first attempt, as itself."""
    call = failing([ManifestError("truncated")])
    with pytest.raises(ManifestError, match="truncated"):
        retrying("test", attempts=5).copy(wait=tenacity.wait_none())(call)
    assert 1 == len(call.calls)  # type: ignore[attr-defined]


def test_unknown_is_retried_only_when_asked() -> None:
    """An unknown error stops a default retrying, and is retried with retry_unknown."""
    strict = failing([RuntimeError("bug")])
    with pytest.raises(RuntimeError):
        retrying("test", attempts=5).copy(wait=tenacity.wait_none())(strict)
    lenient = failing([RuntimeError("bug")])
    result = retrying("test", attempts=5, retry_unknown=True).copy(wait=tenacity.wait_none())(
        lenient
    )
    assert (1, "done", 2) == (len(strict.calls), result, len(lenient.calls))  # type: ignore[attr-defined]


def test_reraises_the_last_error_after_the_attempts() -> None:
    """Out of attempts: the last error itself is raised, not tenacity's RetryError."""
    call = failing([BusError("first"), BusError("second"), BusError("third"), BusError("4th")])
    with pytest.raises(BusError, match="third"):
        retrying("test", attempts=3).copy(wait=tenacity.wait_none())(call)
    assert 3 == len(call.calls)  # type: ignore[attr-defined]


def test_waits_grow_and_are_reported() -> None:
    """Waits start at first_wait_s, double up to max_wait_s, plus up to first_wait_s of
    jitter; each one is handed to on_retry with its attempt number."""
    seen: list[tuple[str, int, float]] = []
    call = failing([BusError("a"), BusError("b"), BusError("c")])
    retrier = retrying(
        "test",
        attempts=4,
        first_wait_s=1.0,
        max_wait_s=3.0,
        on_retry=lambda exc, attempt, wait: seen.append((str(exc), attempt, wait)),
    ).copy(sleep=lambda _s: None)
    retrier(call)
    assert [("a", 1), ("b", 2), ("c", 3)] == [(e, n) for e, n, _ in seen]
    floors = [1.0, 2.0, 3.0]
    assert [True] * 3 == [f <= w <= f + 1.0 for f, (_, _, w) in zip(floors, seen, strict=True)]


def test_deadline_stops_retrying() -> None:
    """With deadline_s the retries stop once the deadline has passed."""
    call = failing([BusError(str(i)) for i in range(1000)])
    with pytest.raises(BusError):
        retrying("test", deadline_s=0.05).copy(wait=tenacity.wait_fixed(0.01))(call)
    assert 2 <= len(call.calls) < 1000  # type: ignore[attr-defined]


def test_stop_event_cuts_a_wait_short() -> None:
    """A stop request ends a long back-off at once; a loop that checks the event before
    each attempt then leaves without calling again (the ingest's round loop does so)."""
    stop = threading.Event()
    call = failing([BusError("down")] * 3)
    # The stop comes as the retrier enters its 30-s wait after the first failure (on_retry
    # runs just before the wait, after the stop was checked), whatever the machine's load.
    retrier = retrying("test", stop_event=stop, first_wait_s=30.0, on_retry=lambda *_: stop.set())
    for attempt in retrier:
        if stop.is_set():
            break
        with attempt:
            call()
    assert (True, 1) == (stop.is_set(), len(call.calls))  # type: ignore[attr-defined]


def test_stop_event_reraises_the_last_error() -> None:
    """Called as a function, a stopped retrier raises the last error after the attempt that
    follows the cut wait."""
    stop = threading.Event()
    call = failing([BusError("down")] * 3)
    # The stop comes as the retrier enters its 30-s wait after the first failure (on_retry
    # runs just before the wait): a timer could fire before the stop check on a loaded
    # machine, and the retrier would then rightly give up after one attempt.
    retrier = retrying("test", stop_event=stop, first_wait_s=30.0, on_retry=lambda *_: stop.set())
    with pytest.raises(BusError, match="down"):
        retrier(call)
    assert 2 == len(call.calls)  # type: ignore[attr-defined]


def test_attempts_must_be_positive() -> None:
    """Zero attempts is a caller's mistake, refused when the retrier is built."""
    with pytest.raises(ValueError, match="at least 1"):
        retrying("test", attempts=0)


def test_async_retrying_retries_transient_and_reraises_terminal() -> None:
    """The async twin retries a transient error, then raises a terminal one as itself."""
    calls: list[str] = []

    async def body() -> None:
        async for attempt in async_retrying("test", attempts=5).copy(wait=tenacity.wait_none()):
            with attempt:
                calls.append("call")
                if len(calls) == 1:
                    raise nats.js.errors.NoStreamResponseError
                raise nats.js.errors.BadRequestError(code=400)

    with pytest.raises(nats.js.errors.BadRequestError):
        asyncio.run(body())
    assert ["call", "call"] == calls


def test_backoff_s_doubles_with_jitter_up_to_the_cap() -> None:
    """backoff_s gives a supervisor the retriers' pauses: first_wait_s doubling up to
    max_wait_s, plus up to first_wait_s of jitter."""
    waits = [backoff_s(n, first_wait_s=1.0, max_wait_s=10.0) for n in range(1, 7)]
    floors = [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert [True] * 6 == [f <= w <= f + 1.0 for f, w in zip(floors, waits, strict=True)]
    with pytest.raises(ValueError, match="at least 1"):
        backoff_s(0)


def test_cancellation_is_not_retried_even_with_retry_unknown() -> None:
    """A cancelled task stops at once, even in a loop that retries unknown errors."""
    calls: list[int] = []

    async def body() -> None:
        async for attempt in async_retrying("test", retry_unknown=True).copy(
            wait=tenacity.wait_none()
        ):
            with attempt:
                calls.append(1)
                raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(body())
    assert [1] == calls


def test_a_bus_refusal_is_terminal_though_bus_errors_are_transient() -> None:
    """Wrong credentials or a refused TLS identity must not be waited out like an outage:
    a BusError raised from BusRefused is terminal (the stager then exits 1, naming it)."""
    from tidelake.errors import BusRefused

    def refused() -> BusError:
        try:
            raise BusError("NATS refused the connection") from BusRefused("Authorization Violation")
        except BusError as exc:
            return exc

    assert ("terminal", "transient") == (classify(refused()), classify(BusError("down")))
