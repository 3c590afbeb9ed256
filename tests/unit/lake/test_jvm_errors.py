"""Root-cause chains of failed JVM calls (lake/jvm_errors.py): walking, trimming, bounding.

The chain is walked through py4j on a live ``Throwable``; here a small stand-in answers the
same four calls (``getClass().getSimpleName()/getName()``, ``getMessage()``, ``getCause()``,
``toString()``), so the logic of our own that turns a chain into one readable line is tested
without a JVM. tests/integration/lake/test_write_errors.py runs it on real Spark and Hudi
failures.
"""

from __future__ import annotations

from dataclasses import dataclass

from py4j.protocol import Py4JJavaError

from tidelake.lake.jvm_errors import (
    MAX_CHARS,
    SEPARATOR,
    Cause,
    describe_error,
    error_causes,
    first_lines,
    format_causes,
    java_causes,
    shorten,
)


@dataclass
class _Class:
    name: str

    def getSimpleName(self) -> str:  # noqa: N802 -- the Java method's name
        return self.name.rsplit(".", 1)[-1]

    def getName(self) -> str:  # noqa: N802
        return self.name


@dataclass
class _Throwable:
    """What py4j hands back for a ``java.lang.Throwable``: the calls the walk makes."""

    name: str
    message: str | None
    cause: _Throwable | None = None
    _target_id: str = "o1"  # py4j's JavaObject field, read by Py4JJavaError's constructor

    def getClass(self) -> _Class:  # noqa: N802
        return _Class(self.name)

    def getMessage(self) -> str | None:  # noqa: N802
        return self.message

    def getCause(self) -> _Throwable | None:  # noqa: N802
        return self.cause

    def toString(self) -> str:  # noqa: N802
        return f"{self.name}: {self.message}" if self.message is not None else self.name


def _wrapping(name: str, cause: _Throwable) -> _Throwable:
    """``new X(cause)`` in Java: the message is the cause's toString()."""
    return _Throwable(name, cause.toString(), cause)


def test_a_py4j_error_is_described_by_its_java_chain_root_cause_last() -> None:
    """A ``Py4JJavaError`` is replaced by its Java chain: the operation first, the root
    cause last with its second line (where Hudi names the conflicting key)."""
    root = _Throwable(
        "org.apache.hudi.exception.HoodieException",
        "Config conflict(key\tcurrent value\texisting value):\nRecordKey:\tb,a\ta,b\n",
    )
    top = _Throwable("org.apache.spark.SparkException", "Writing job failed.", root)
    exc = Py4JJavaError("An error occurred while calling o284.save.\n", top)

    expected = (
        "SparkException: Writing job failed."
        + SEPARATOR
        + "HoodieException: Config conflict(key  current value  existing value): / "
        "RecordKey:  b,a  a,b"
    )
    assert expected == describe_error(exc)


def test_pure_wrappers_are_left_out_but_the_outermost_is_kept() -> None:
    """``new X(cause)`` wrappers between the outermost exception and the root add nothing;
    the outermost one stays (it names what failed) even when it only wraps."""
    root = _Throwable("java.lang.ArithmeticException", "Decimal precision 14 exceeds max 10")
    chain = _wrapping(
        "org.apache.hudi.exception.HoodieUpsertException",
        _wrapping("org.apache.hudi.exception.HoodieException", root),
    )

    expected = [
        Cause("HoodieUpsertException", ""),
        Cause("ArithmeticException", "Decimal precision 14 exceeds max 10"),
    ]
    assert expected == java_causes(chain)


def test_a_message_embedding_its_cause_keeps_only_its_own_part() -> None:
    """Spark's job abort copies the task's exception and stack into its message: the copy
    is cut, the task's exception appears once, as the next cause."""
    root = _Throwable("java.lang.IllegalStateException", "Duplicate key 7")
    abort = _Throwable(
        "org.apache.spark.SparkException",
        "Job aborted due to stage failure: Task 0 in stage 3.0 failed 1 times, most recent "
        "failure: Lost task 0.0 in stage 3.0 (TID 3) (localhost executor driver): "
        "java.lang.IllegalStateException: Duplicate key 7\n\tat a.b.C.d(C.java:1)\n",
        root,
    )

    expected = [
        Cause(
            "SparkException",
            "Job aborted due to stage failure: Task 0 in stage 3.0 failed 1 times, most recent "
            "failure: Lost task 0.0 in stage 3.0 (TID 3) (localhost executor driver)",
        ),
        Cause("IllegalStateException", "Duplicate key 7"),
    ]
    assert expected == java_causes(abort)


def test_first_lines_stop_at_an_embedded_stack_trace() -> None:
    """Blank lines are skipped, spaces collapsed, a tab kept as two spaces, and ``\\tat`` /
    ``Caused by:`` end the message."""
    message = "first  part\n\n second\tline \n\tat org.x.Y.z(Y.java:3)\nCaused by: e\n"
    expected = "first part / second  line"
    assert expected == first_lines(message)


def test_first_lines_keep_at_most_three_lines() -> None:
    """A long message keeps its first three lines."""
    expected = "1 / 2 / 3"
    assert expected == first_lines("1\n2\n3\n4\n5")


def test_a_cyclic_java_chain_ends() -> None:
    """Java permits a cycle through ``initCause``; the walk stops after a bounded number."""
    a = _Throwable("x.A", "a")
    b = _Throwable("x.B", "b", a)
    a.cause = b

    causes = java_causes(a)
    expected = [Cause("A", "a"), Cause("B", "b")]
    assert expected == causes[:2]
    assert 16 >= len(causes)


def test_python_chains_are_followed_through_raise_from() -> None:
    """A Python error raised ``from`` another lists both, the root last."""
    try:
        try:
            int("x1")
        except ValueError as inner:
            raise RuntimeError("the batch could not be typed") from inner
    except RuntimeError as exc:
        causes = error_causes(exc)

    expected = [
        Cause("RuntimeError", "the batch could not be typed"),
        Cause("ValueError", "invalid literal for int() with base 10: 'x1'"),
    ]
    assert expected == causes


def test_a_long_chain_leaves_out_middle_causes_and_keeps_the_root() -> None:
    """Over the bound, causes in the middle go first (counted), the root cause stays whole."""
    causes = [Cause("Top", "t" * 300), *(Cause(f"Mid{i}", "m" * 300) for i in range(8))]
    causes.append(Cause("Root", "the real reason"))

    text = format_causes(causes, max_chars=1000)
    assert len(text) <= 1000
    assert text.startswith("Top: ttt")
    assert text.endswith(SEPARATOR + "Root: the real reason")
    assert "more)" in text


def test_a_long_first_cause_is_cut_before_the_root() -> None:
    """When the outermost cause alone is over the bound, it is the one cut."""
    causes = [Cause("Top", "t" * 5000), Cause("Root", "why")]

    text = format_causes(causes, max_chars=200)
    expected_end = SEPARATOR + "Root: why"
    assert (True, 200) == (text.endswith(expected_end), len(text))


def test_the_default_bound_holds() -> None:
    """Every rendering fits :data:`MAX_CHARS`."""
    causes = [Cause(f"C{i}", "x" * 2000) for i in range(20)]
    assert MAX_CHARS >= len(format_causes(causes))


def test_shorten_keeps_start_and_end() -> None:
    """``shorten`` (for fields stored with a size cap) keeps where the root cause is."""
    text = "table t: the Hudi write failed: " + "x" * 1000 + " | caused by: Root: why"
    short = shorten(text, 200)
    assert (200, True, True) == (
        len(short),
        short.startswith("table t: the Hudi"),
        short.endswith("Root: why"),
    )
