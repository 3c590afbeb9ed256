"""Which Java the Spark driver will start, and whether Spark 3.5 runs on it.

PySpark starts ``$JAVA_HOME/bin/java`` when ``JAVA_HOME`` is set, else the ``java`` on
``PATH``; this module looks at the same one so that ``tidelake setup`` reports what the ingest
will really meet. Spark 3.5 supports Java 8, 11 and 17; tidelake is tested on 17.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

#: The Java release tidelake's Spark (3.5) is tested on.
WANTED_MAJOR = 17
#: Every release Spark 3.5 supports.
SPARK_MAJORS = frozenset({8, 11, 17})
_JVM_DIRS = (Path("/usr/lib/jvm"), Path("/usr/local/lib/jvm"), Path("/opt/java"))


@dataclass(frozen=True)
class JavaReport:
    """What ``java`` Spark would start and what to do about it."""

    java: Path | None
    major: int | None
    #: A Java 17 elsewhere on the machine, offered when the one Spark uses is not 17.
    alternative: Path | None

    @property
    def ok(self) -> bool:
        return self.major in SPARK_MAJORS

    def describe(self) -> str:
        """One line for a person: what was found and, when it will not do, what to set."""
        hint = (
            f"; set JAVA_HOME={self.alternative}"
            if self.alternative is not None
            else f"; install a Java {WANTED_MAJOR}"
            f" (Debian: apt install openjdk-{WANTED_MAJOR}-jre-headless)"
        )
        if self.java is None:
            return (
                f"no Java found (neither $JAVA_HOME/bin/java nor a java on PATH):"
                f" Spark needs Java {WANTED_MAJOR}{hint}"
            )
        if self.major is None:
            return f"{self.java} did not say its version: Spark needs Java {WANTED_MAJOR}{hint}"
        if not self.ok:
            return (
                f"{self.java} is Java {self.major}: Spark 3.5 runs on Java 8, 11 or 17"
                f" (tested on {WANTED_MAJOR}){hint}"
            )
        return f"{self.java} (Java {self.major})"


def java_major(java: Path) -> int | None:
    """The major release ``java -version`` reports (``1.8.0`` is 8), None when it will not run."""
    try:
        res = subprocess.run(
            [str(java), "-version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r'version "(\d+)(?:\.(\d+))?', res.stderr + res.stdout)
    if m is None:
        return None
    major = int(m.group(1))
    return int(m.group(2) or 0) if major == 1 else major


def spark_java(environ: Mapping[str, str] | None = None) -> Path | None:
    """The ``java`` PySpark would start (``$JAVA_HOME/bin/java``, else ``java`` on PATH)."""
    env = os.environ if environ is None else environ
    if env.get("JAVA_HOME"):
        candidate = Path(env["JAVA_HOME"]) / "bin" / "java"
        return candidate if candidate.is_file() else None
    found = shutil.which("java", path=env.get("PATH"))
    return Path(found).resolve() if found else None


def _installed_java17() -> Path | None:
    for root in _JVM_DIRS:
        for home in sorted(root.glob("*")) if root.is_dir() else []:
            java = home / "bin" / "java"
            if java.is_file() and java_major(java) == WANTED_MAJOR:
                return home
    return None


def check_java(environ: Mapping[str, str] | None = None) -> JavaReport:
    """The Java Spark would use and, when it is not one Spark runs on, a Java 17 to use."""
    java = spark_java(environ)
    major = java_major(java) if java is not None else None
    alternative = None if major in SPARK_MAJORS else _installed_java17()
    return JavaReport(java=java, major=major, alternative=alternative)


def java_at_least(minimum: int, env_var: str, environ: Mapping[str, str] | None = None) -> Path:
    """A ``java`` of release ``minimum`` or newer for a tool that needs a newer JVM than
    Spark's (Debezium Server 3.x, Trino): ``$<env_var>/bin/java``, else the newest JDK found
    under the usual JVM folders. Never made the default: Spark stays on its own Java.

    Raises ``LookupError`` naming ``env_var`` when none is found."""
    env = os.environ if environ is None else environ
    if env.get(env_var):
        homes = [Path(env[env_var])]
    else:
        homes = [
            home
            for root in _JVM_DIRS
            if root.is_dir()
            for home in sorted(root.glob("*"), reverse=True)
        ]
    for home in homes:
        java = home / "bin" / "java"
        if java.is_file() and os.access(java, os.X_OK) and (java_major(java) or 0) >= minimum:
            return java
    raise LookupError(f"no Java {minimum}+ found (set {env_var} to a JDK's home)")
