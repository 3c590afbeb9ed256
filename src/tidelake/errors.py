"""Every tidelake error, and whether retrying can help: the one place that decides.

A concrete tidelake error mixes in :class:`Transient` (a retry may succeed: a server
restarting, a timeout) or :class:`Terminal` (retrying the same input fails the same way: a
malformed message, an invalid config).

:func:`classify` answers for *any* exception, ours or a library's:

- ``"transient"``: a retry may succeed (a timeout, a refused or closed connection, a server
  answering 5xx or "no responders" while it restarts, S3 throttling);
- ``"terminal"``: retrying the same input cannot succeed (a malformed manifest or message, a
  refused request, bad credentials, a missing bucket or config file);
- ``"unknown"``: nothing here knows the type (a bug, a JVM error nobody classified).

A ``BaseException`` that is not an ``Exception`` (``asyncio.CancelledError``,
``KeyboardInterrupt``, ``SystemExit``) is a request to stop, and ``"terminal"``: no loop
retries it, whatever it does with unknown errors.

:func:`is_retryable` is ``classify(exc) == "transient"``: an unknown error is *not* retried
by default, because for data the safe reading of "we do not know" is "stop and say so".
A loop whose job is to stay up (the ingest's round loop, the supervisor restarting a child,
the capture publisher's recovery) retries unknown errors too, by passing
``retry_unknown=True`` to the helpers in :mod:`tidelake.retry`; it still stops on a terminal
one. Which loop does what is listed in :mod:`tidelake.retry`.

Third-party types are decided by their class (read from the installed libraries: nats-py's
``nats/errors.py`` and ``nats/js/errors.py``, botocore's ``botocore/exceptions.py``,
pydantic's ``ValidationError``). botocore, pymysql and psycopg2 are looked up in
``sys.modules`` and never imported here: when a library is not loaded, ``exc`` cannot be one
of its exceptions, and importing this module stays cheap for every process.

JVM errors (py4j's ``Py4JJavaError``, PySpark's captured exceptions) are not decided here:
this module must not import pyspark. The lake registers a classifier with
:func:`register_classifier`, which is asked before the built-in rules; without one a JVM
error is ``"unknown"``.

A wrapper's explicit cause counts (``raise X from cause``): an unknown wrapper is decided by
its cause, and a transient tidelake error raised from a terminal cause (``StorageError``
from an S3 ``AccessDenied``) is terminal. A :class:`Terminal` marker always wins.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any, Literal

import nats.errors
import nats.js.errors
import pydantic


class TidelakeError(Exception):
    """Base of every error tidelake raises on purpose."""


class Transient:
    """Marker: the operation may succeed if retried."""


class Terminal:
    """Marker: retrying the same input cannot succeed."""


class ConfigError(TidelakeError, Terminal):
    """The configuration is invalid; the message names the field path and the reason."""


class DecodeError(TidelakeError, Terminal):
    """A message could not be decoded into change events. Goes to the dead-letter stream."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class BusError(TidelakeError, Transient):
    """NATS / JetStream is unreachable or answered with an error."""


class BusRefused(TidelakeError, Terminal):  # noqa: N818 -- named for what the caller sees
    """NATS refused the credentials or the permissions: waiting does not change that. Raised
    as the cause of a :class:`BusError`, which it makes terminal."""


class StorageError(TidelakeError, Transient):
    """Staging storage failed to read or write."""


class ManifestError(TidelakeError, Terminal):
    """A manifest is unreadable or inconsistent with its staged files."""


class IngestError(TidelakeError):
    """The ingest failed to apply a batch to Hudi."""


class TableRefused(IngestError, Terminal):  # noqa: N818 -- named for what the caller sees
    """A table cannot be written (no primary key, paused, ...); the message says why."""


#: What retrying an error may achieve; see the module docstring.
Decision = Literal["transient", "terminal", "unknown"]

#: A classifier registered by a component that knows a family of errors (the lake's JVM
#: errors): its decision, or None when ``exc`` is not one of its own.
Classifier = Callable[[BaseException], "Decision | None"]

_classifiers: list[Classifier] = []

#: Causes followed at most (a guard against cyclic chains).
_MAX_CAUSES = 8

# nats-py (nats/errors.py, nats/js/errors.py). Subclasses follow their bases:
# FlushTimeoutError, DrainTimeoutError and FetchTimeoutError are TimeoutErrors,
# UnexpectedEOF is a StaleConnectionError.
_NATS_TRANSIENT: tuple[type[BaseException], ...] = (
    nats.errors.TimeoutError,
    nats.errors.NoServersError,
    nats.errors.NoRespondersError,
    nats.errors.ConnectionClosedError,
    nats.errors.StaleConnectionError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.ConnectionDrainingError,
    nats.errors.OutboundBufferLimitError,
    nats.errors.SlowConsumerError,
    # "nats: no response from stream": the publish got a 503 (the stream's leader is away).
    nats.js.errors.NoStreamResponseError,
    nats.js.errors.TooManyStalledMsgsError,
    # API answers 503 (ServiceUnavailableError) and 500 (ServerError).
    nats.js.errors.ServiceUnavailableError,
    nats.js.errors.ServerError,
)
_NATS_TERMINAL: tuple[type[BaseException], ...] = (
    nats.errors.AuthorizationError,
    nats.errors.InvalidUserCredentialsError,
    nats.errors.SecureConnRequiredError,
    nats.errors.SecureConnWantedError,
    nats.errors.SecureConnFailedError,
    nats.errors.BadSubjectError,
    nats.errors.BadHeaderError,
    nats.errors.BadSubscriptionError,
    nats.errors.BadTimeoutError,
    nats.errors.MaxPayloadError,
    nats.errors.ProtocolError,
    nats.errors.JsonParseError,
    nats.errors.NotJSMessageError,
    nats.errors.MsgAlreadyAckdError,
    # API answers 400 and 404: the same request gets the same answer.
    nats.js.errors.BadRequestError,
    nats.js.errors.NotFoundError,
)
#: JetStream API status codes a retry may get past (other 4xx codes are terminal).
_NATS_TRANSIENT_CODES = frozenset({408, 429, 500, 502, 503, 504})

# OSError subclasses that name a missing or forbidden file: the same path fails again.
_OS_TERMINAL: tuple[type[BaseException], ...] = (
    FileNotFoundError,
    PermissionError,
    IsADirectoryError,
    NotADirectoryError,
    FileExistsError,
)

# botocore's ClientError, by ``response["Error"]["Code"]`` (S3 and STS codes).
_S3_TRANSIENT_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestThrottledException",
        "TooManyRequestsException",
        "SlowDown",
        "RequestLimitExceeded",
        "RequestTimeout",
        "RequestTimeoutException",
        "RequestTimeTooSkewed",
        "InternalError",
        "ServiceUnavailable",
        "OperationAborted",
    }
)
_S3_TERMINAL_CODES = frozenset(
    {
        "AccessDenied",
        "AllAccessDisabled",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "InvalidToken",
        "NoSuchBucket",
        "NoSuchKey",
        "InvalidBucketName",
        "InvalidArgument",
        "InvalidRequest",
        "MalformedXML",
        "EntityTooLarge",
    }
)
# botocore's BotoCoreError subclasses, by class name: a missing credential or region, or a
# parameter the client refuses before sending, fails again; anything else from botocore is
# about the connection (EndpointConnectionError, ConnectTimeoutError, ReadTimeoutError,
# ConnectionClosedError, ResponseStreamingError, IncompleteReadError …).
_BOTO_TERMINAL_NAMES = frozenset(
    {
        "NoCredentialsError",
        "PartialCredentialsError",
        "NoRegionError",
        "ParamValidationError",
        "ProfileNotFound",
        "ConfigNotFound",
        "ConfigParseError",
        "UnknownServiceError",
        "InvalidRegionError",
        "UnknownEndpointError",
    }
)


def register_classifier(classifier: Classifier) -> None:
    """Add a classifier asked before the built-in rules (idempotent for the same function).

    Meant for a family of errors this module must not import: the lake registers the one
    that reads a JVM exception's cause chain (py4j, PySpark).
    """
    if classifier not in _classifiers:
        _classifiers.append(classifier)


def unregister_classifier(classifier: Classifier) -> None:
    """Remove a classifier added by :func:`register_classifier` (tests use it)."""
    if classifier in _classifiers:
        _classifiers.remove(classifier)


def _loaded(module: str) -> Any | None:
    return sys.modules.get(module)


def _classify_nats(exc: BaseException) -> Decision | None:
    if isinstance(exc, _NATS_TRANSIENT):
        return "transient"
    if isinstance(exc, _NATS_TERMINAL):
        return "terminal"
    if isinstance(exc, nats.js.errors.APIError):
        # A plain APIError carries the status of the answer (APIError.from_msg).
        code = exc.code
        if code is None:
            return None
        return "transient" if int(code) in _NATS_TRANSIENT_CODES else "terminal"
    return None


def _classify_botocore(exc: BaseException) -> Decision | None:
    exceptions = _loaded("botocore.exceptions")
    if exceptions is None:
        return None
    if isinstance(exc, exceptions.ClientError):
        response = exc.response if isinstance(exc.response, dict) else {}
        code = str(response.get("Error", {}).get("Code", ""))
        if code in _S3_TRANSIENT_CODES:
            return "transient"
        if code in _S3_TERMINAL_CODES:
            return "terminal"
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if isinstance(status, int):
            return "transient" if status >= 500 or status in (408, 429) else "terminal"
        return None
    if isinstance(exc, exceptions.BotoCoreError):
        return "terminal" if type(exc).__name__ in _BOTO_TERMINAL_NAMES else "transient"
    return None


def _classify_kafka(exc: BaseException) -> Decision | None:
    """Kafka's client marks each of its errors retriable or not (``KafkaError.retriable``):
    a broker down or restarting, a leader moving, a timeout are; an authorization failure
    or a record too large is not."""
    errors = _loaded("aiokafka.errors")
    if errors is None or not isinstance(exc, errors.KafkaError):
        return None
    if isinstance(exc, errors.KafkaTimeoutError):  # not marked retriable, yet it is
        return "transient"
    return "transient" if getattr(exc, "retriable", False) else "terminal"


def _classify_databases(exc: BaseException) -> Decision | None:
    """A lost or refused connection to a source database (the capture wraps most of them
    into ``SourceUnavailableError``; a read from an open stream raises them as they are)."""
    pymysql_err = _loaded("pymysql.err")
    if pymysql_err is not None and isinstance(exc, pymysql_err.OperationalError):
        return "transient"
    psycopg2 = _loaded("psycopg2")
    if psycopg2 is not None and isinstance(exc, psycopg2.OperationalError):
        return "transient"
    return None


def _classify_one(exc: BaseException) -> Decision | None:
    """The decision for ``exc`` itself, ignoring its cause; None when unknown."""
    if not isinstance(exc, Exception):
        # A cancellation, KeyboardInterrupt or SystemExit is a request to stop: never retried.
        return "terminal"
    for classifier in _classifiers:
        decided = classifier(exc)
        if decided is not None:
            return decided
    if isinstance(exc, Terminal):
        return "terminal"
    if isinstance(exc, Transient):
        return "transient"
    # Before OSError: nats.errors.TimeoutError is an asyncio.TimeoutError, which is the
    # builtin TimeoutError, an OSError.
    decided = (
        _classify_nats(exc)
        or _classify_botocore(exc)
        or _classify_kafka(exc)
        or _classify_databases(exc)
    )
    if decided is not None:
        return decided
    # Malformed state: orjson.JSONDecodeError is a json.JSONDecodeError; reading it again
    # reads the same bytes.
    if isinstance(exc, (json.JSONDecodeError, UnicodeError, pydantic.ValidationError)):
        return "terminal"
    if isinstance(exc, _OS_TERMINAL):
        return "terminal"
    if isinstance(exc, (OSError, ConnectionError, TimeoutError)):
        return "transient"
    return None


def classify(exc: BaseException) -> Decision:
    """``"transient"``, ``"terminal"`` or ``"unknown"`` for any exception (module docstring).

    Registered classifiers first, then the tidelake markers, then the known third-party
    types; an unknown error is decided by its explicit cause (``raise … from cause``), and
    a transient one raised from a terminal cause is terminal.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    first: Decision | None = None
    while current is not None and id(current) not in seen and len(seen) < _MAX_CAUSES:
        seen.add(id(current))
        decided = _classify_one(current)
        if decided == "terminal":
            return "terminal"
        if first is None:
            first = decided
        if decided == "transient" and isinstance(current, Transient):
            # Our own transient wrapper: only a terminal cause below it overrides it.
            current = current.__cause__
            continue
        if decided is not None:
            return first or decided
        current = current.__cause__
    return first or "unknown"


def is_retryable(exc: BaseException) -> bool:
    """True when retrying may help (:func:`classify` says ``"transient"``)."""
    return classify(exc) == "transient"


def is_terminal(exc: BaseException) -> bool:
    """True when retrying the same input cannot help (:func:`classify` says ``"terminal"``)."""
    return classify(exc) == "terminal"
