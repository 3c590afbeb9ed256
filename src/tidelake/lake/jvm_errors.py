"""Readable root causes of failed Spark and Hudi calls.

A JVM exception reaches Python as py4j's ``Py4JJavaError``, whose first line is the useless
"An error occurred while calling o284.save."; the reason (a Hudi config conflict, a decimal
that does not fit) sits one or more ``getCause()`` steps down a Java exception chain, below a
stack trace. PySpark turns a few JVM classes into its own exceptions
(``pyspark.errors.AnalysisException``, ``IllegalArgumentException`` …), which keep the Java
exception as ``_origin``.

:func:`describe_error` walks that chain through py4j (each step is a call on the live
``Throwable``, not a parse of a printed stack trace) and renders it on one line, the
operation first and the root cause last::

    SparkException: Job aborted due to stage failure: … | caused by: HoodieException:
    Config conflict(key  current value  existing value): / RecordKey:  b,a  a,b

Each cause keeps its first lines; the whole text is bounded, and when it must be cut, causes
in the middle go first: the root cause is what a user acts on, so it is always kept.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: Causes followed at most (a guard against cyclic chains, which Java permits).
MAX_CAUSES = 16
#: Lines of one cause's message kept (Hudi's config conflict puts the key on line 2).
LINES_PER_CAUSE = 3
#: Characters kept of one cause, and of the root cause.
CAUSE_CHARS = 400
ROOT_CHARS = 700
#: Default bound of the whole text.
MAX_CHARS = 1500
SEPARATOR = " | caused by: "
ELLIPSIS = "…"


@dataclass(frozen=True, slots=True)
class Cause:
    """One link of an exception chain: its class (simple name) and first message lines."""

    kind: str
    message: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}" if self.message else self.kind


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters (an ellipsis marks the cut)."""
    if len(text) <= limit:
        return text
    return text[: max(0, limit - len(ELLIPSIS))] + ELLIPSIS


def shorten(text: str, limit: int) -> str:
    """``text`` in at most ``limit`` characters keeping its start and its end, where a chain
    from :func:`describe_error` holds the root cause (for fields stored with a size cap)."""
    if len(text) <= limit:
        return text
    marker = f" {ELLIPSIS} "
    if limit <= len(marker) + 2:
        return clip(text, limit)
    head = (limit - len(marker)) // 3
    tail = limit - len(marker) - head
    return text[:head] + marker + text[len(text) - tail :]


def first_lines(message: str | None, lines: int = LINES_PER_CAUSE) -> str:
    """The first ``lines`` non-blank lines of ``message`` on one line (`` / `` between them),
    whitespace runs collapsed but a tab kept apart as two spaces (Hudi's config conflict is a
    tab-separated table); stops at an embedded stack trace (``\\tat …``, ``Caused by:``)."""
    kept: list[str] = []
    for line in (message or "").splitlines():
        cells = (" ".join(cell.split()) for cell in line.split("\t"))
        text = "  ".join(cell for cell in cells if cell)
        if not text:
            continue
        if (line[:1].isspace() and text.startswith(("at ", "... "))) or text.startswith(
            "Caused by:"
        ):
            break
        kept.append(text)
        if len(kept) == lines:
            break
    return " / ".join(kept)


def _own_part(message: str | None, cause_text: str | None) -> str:
    """The part of a wrapper's message that is its own: Java's ``new X(cause)`` copies
    ``cause.toString()`` into the message, Spark's job abort embeds the task's exception."""
    if not message:
        return ""
    if cause_text:
        head = cause_text.strip().split("\n", 1)[0].strip()
        at = message.find(head) if head else -1
        if at >= 0:
            return message[:at].rstrip(" :\t\n")
    return message


def java_throwable(exc: BaseException) -> Any | None:
    """The Java ``Throwable`` behind ``exc`` (a py4j ``JavaObject``), or None.

    ``Py4JJavaError.java_exception`` is py4j's public field; PySpark 3.5's
    ``CapturedException`` (``AnalysisException``, ``IllegalArgumentException`` …) exposes its
    Java exception only as ``_origin``. Neither module is imported here: when it is not
    loaded, ``exc`` cannot be one of its exceptions.
    """
    protocol = sys.modules.get("py4j.protocol")
    if protocol is not None and isinstance(exc, protocol.Py4JJavaError):
        return exc.java_exception
    captured = sys.modules.get("pyspark.errors.exceptions.captured")
    if captured is not None and isinstance(exc, captured.CapturedException):
        return getattr(exc, "_origin", None)
    return None


def java_causes(throwable: Any) -> list[Cause]:
    """The chain of a Java ``Throwable`` through ``getCause()``, outermost first.

    A wrapper that only repeats its cause (no message of its own) is left out, unless it is
    the outermost link (it names the operation that failed).
    """
    links: list[tuple[str, str | None, str | None]] = []
    node = throwable
    while node is not None and len(links) < MAX_CAUSES:
        cls = node.getClass()
        kind = str(cls.getSimpleName() or cls.getName())
        message = node.getMessage()
        cause = node.getCause()
        cause_text = str(cause.toString()) if cause is not None else None
        links.append((kind, None if message is None else str(message), cause_text))
        node = cause
    out: list[Cause] = []
    for i, (kind, message, cause_text) in enumerate(links):
        text = first_lines(_own_part(message, cause_text))
        if not text and 0 < i < len(links) - 1:
            continue
        link = Cause(kind, text)
        if out and out[-1] == link:
            continue
        out.append(link)
    return out


def _python_text(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # a py4j error whose JVM is gone cannot print itself
        return str(getattr(exc, "errmsg", "") or type(exc).__name__)


def error_causes(exc: BaseException) -> list[Cause]:
    """``exc``'s chain: Python causes (``raise … from``) down to the first exception that
    wraps a JVM one, then that JVM chain; the root cause last."""
    out: list[Cause] = []
    seen: set[int] = set()
    node: BaseException | None = exc
    while node is not None and id(node) not in seen and len(out) < MAX_CAUSES:
        seen.add(id(node))
        throwable = java_throwable(node)
        if throwable is not None:
            try:
                return out + java_causes(throwable)
            except Exception:  # py4j failed (JVM gone): fall back to Python's text
                pass
        out.append(Cause(type(node).__name__, first_lines(_python_text(node))))
        node = node.__cause__ or (None if node.__suppress_context__ else node.__context__)
    return out


def format_causes(causes: Sequence[Cause], max_chars: int = MAX_CHARS) -> str:
    """One line, outermost first, root cause last, at most ``max_chars`` characters: causes
    in the middle are left out first (counted), then the outermost one is cut."""
    if not causes:
        return ""
    parts = [clip(str(c), CAUSE_CHARS) for c in causes[:-1]]
    root = clip(str(causes[-1]), min(ROOT_CHARS, max_chars))
    text = SEPARATOR.join([*parts, root])
    if len(text) <= max_chars:
        return text
    first, middle = (parts[0], parts[1:]) if parts else ("", [])
    kept: list[str] = []
    for part in reversed(middle):  # the causes nearest the root say the most
        dropped = len(middle) - len(kept) - 1
        marker = [f"({dropped} more)"] if dropped else []
        trial = SEPARATOR.join([first, *marker, part, *kept, root])
        if len(trial) > max_chars:
            break
        kept.insert(0, part)
    dropped = len(middle) - len(kept)
    marker = [f"({dropped} more)"] if dropped else []
    tail = SEPARATOR.join([*marker, *kept, root])
    if not first:
        return clip(tail, max_chars)
    room = max_chars - len(tail) - len(SEPARATOR)
    if room <= len(ELLIPSIS):
        return clip(root, max_chars)
    return SEPARATOR.join([clip(first, room), tail])


def describe_error(exc: BaseException, max_chars: int = MAX_CHARS) -> str:
    """What went wrong in ``exc``, root cause last, on one line of at most ``max_chars``."""
    return format_causes(error_causes(exc), max_chars) or type(exc).__name__
