"""runtime/java.py: the Java Spark would start, and what ``tidelake setup`` says about it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidelake.runtime.java import check_java, java_major


def _fake_java_home(tmp_path: Path, version_line: str) -> Path:
    """A JAVA_HOME whose bin/java prints ``version_line`` as ``java -version`` does."""
    home = tmp_path / "jdk"
    (home / "bin").mkdir(parents=True)
    java = home / "bin" / "java"
    java.write_text(f"#!/bin/sh\necho '{version_line}' >&2\n")
    java.chmod(0o755)
    return home


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('openjdk version "17.0.15" 2025-04-15', 17),
        ('openjdk version "1.8.0_402"', 8),
        ('openjdk version "25" 2025-09-16', 25),
    ],
)
def test_java_major_reads_the_version_line(tmp_path: Path, line: str, expected: int) -> None:
    """``1.8`` is Java 8; newer releases give their major first."""
    assert expected == java_major(_fake_java_home(tmp_path, line) / "bin" / "java")


def test_java_home_is_the_java_spark_uses(tmp_path: Path) -> None:
    """With JAVA_HOME set, its java is the one checked (as PySpark starts it)."""
    home = _fake_java_home(tmp_path, 'openjdk version "17.0.2"')
    report = check_java({"JAVA_HOME": str(home), "PATH": ""})
    assert (home / "bin" / "java", 17, True) == (report.java, report.major, report.ok)


def test_no_java_is_said_clearly(tmp_path: Path) -> None:
    """No JAVA_HOME and no java on PATH: the message says no Java was found and that Spark
    needs Java 17."""
    report = check_java({"PATH": str(tmp_path)})
    assert (None, False) == (report.java, report.ok)
    assert report.describe().startswith("no Java found")
    assert "Spark needs Java 17" in report.describe()


def test_an_unsupported_java_is_named(tmp_path: Path) -> None:
    """Java 25 is found but refused with the releases Spark 3.5 runs on."""
    home = _fake_java_home(tmp_path, 'openjdk version "25" 2025-09-16')
    report = check_java({"JAVA_HOME": str(home)})
    assert (25, False) == (report.major, report.ok)
    assert "Spark 3.5 runs on Java 8, 11 or 17" in report.describe()


def test_java_at_least_takes_the_named_home_or_refuses_an_older_one(tmp_path: Path) -> None:
    """The environment variable's JDK is taken when new enough; an older one is refused with
    the variable named (no fall-back to an unrelated JDK behind the user's back)."""
    from tidelake.runtime.java import java_at_least

    new = _fake_java_home(tmp_path / "new", 'openjdk version "25" 2025-09-16')
    assert new / "bin" / "java" == java_at_least(24, "X_JAVA_HOME", {"X_JAVA_HOME": str(new)})
    old = _fake_java_home(tmp_path / "old", 'openjdk version "17.0.15" 2025-04-15')
    with pytest.raises(LookupError, match="X_JAVA_HOME"):
        java_at_least(24, "X_JAVA_HOME", {"X_JAVA_HOME": str(old)})
