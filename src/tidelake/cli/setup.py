"""``tidelake setup``: fetch what the wheel cannot carry and say what else the lake needs.

The pinned jars (runtime/jars.txt) go into the jar cache (runtime/jars.py says which
directory), each verified against its pinned SHA-256; then the Java Spark will start and
the ``spark`` extra are checked. Exit 0 only when ``tidelake demo`` could run: every jar in
place, a Java Spark 3.5 runs on, PySpark installed; 3 when only the jars are. Registered by
:mod:`tidelake.cli`.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskID,
    TextColumn,
    TransferSpeedColumn,
)

from tidelake.cli.output import print_json
from tidelake.runtime import extras
from tidelake.runtime.jars import (
    MAVEN_CENTRAL,
    MAVEN_URL_ENV,
    Jar,
    JarFetchError,
    fetch_jar,
    jar_cache_dir,
    jar_state,
    pinned_jars,
)
from tidelake.runtime.java import check_java

err_console = Console(stderr=True)
#: Exit status when the jars are in place but Java or PySpark is missing (scripts/setup warns).
EXIT_JARS_ONLY = 3


def setup(
    s3: Annotated[
        bool,
        typer.Option("--s3", help="also the S3A jars (280 MB) for a lake on s3a:// storage"),
    ] = False,
    check: Annotated[
        bool, typer.Option("--check", help="report what is missing; fetch nothing")
    ] = False,
    jar_cache: Annotated[
        Path | None,
        typer.Option(
            help="jar directory (default: lake.spark.jar_cache, $TIDELAKE_JAR_CACHE, "
            "~/.cache/tidelake/jars)",
            show_default=False,
        ),
    ] = None,
    repository: Annotated[
        str | None,
        typer.Option(
            help=f"Maven repository URL (default ${MAVEN_URL_ENV} or Maven Central)",
            show_default=False,
        ),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option("--config", "-c", help="YAML config file (its lake.spark.jar_cache)"),
    ] = None,
    install_extras: Annotated[
        bool,
        typer.Option(
            "--install-extras/--no-install-extras",
            help="install the spark extra (PySpark, hudi-rs, DuckDB) into this Python with pip "
            "when it is missing",
        ),
    ] = True,
    json: Annotated[bool, typer.Option("--json", help="print one JSON summary line last")] = False,
) -> None:
    """Fetch the Hudi (and with --s3 the S3A) jars from Maven Central into the jar cache,
    verified by their pinned SHA-256, and check Java and PySpark.

    Idempotent: a jar already verified is not fetched again; an interrupted download resumes.
    A `pip install tidelake` without the spark extra gets it installed here (pip, this
    Python; --no-install-extras only reports it).
    Exit status: 0 ready to run the lake; 1 a jar is missing or was refused; 3 the jars are
    in place but Java or PySpark is not (each problem is named)."""
    from tidelake.cli import _load

    configured = None
    if config is not None or os.environ.get("TIDELAKE_CONFIG"):
        configured = _load(config).lake.spark.jar_cache
    cache = jar_cache_dir(jar_cache or configured).absolute()
    base = repository or os.environ.get(MAVEN_URL_ENV) or MAVEN_CENTRAL
    roles = ("core", "s3") if s3 else ("core",)
    jars = pinned_jars(roles)
    out = err_console
    out.print(f"jar cache: {escape(str(cache))}")
    results: list[dict[str, Any]] = []
    ok = True
    if check:
        for jar in jars:
            state = jar_state(jar, cache)
            ok &= state == "ok"
            out.print(f"  {_mark(state == 'ok')} {jar.filename}: {state}")
            results.append(_row(jar, state, fetched=False))
    else:
        ok = _fetch_all(jars, cache, base, out, results)
    java = check_java()
    out.print(f"  {_mark(java.ok)} java: {escape(java.describe())}")
    missing_spark = extras.missing_modules("spark")
    if missing_spark and install_extras and not check:
        missing_spark = _install_spark_extra(out)
    if missing_spark:
        out.print(
            f"  {_mark(False)} python: "
            + escape(
                f"the lake needs {extras.DISTRIBUTION}[spark] (not installed: "
                f"{', '.join(missing_spark)}): pip install '{extras.DISTRIBUTION}[spark]'"
            )
        )
    else:
        out.print(f"  {_mark(True)} python: {escape(extras.DISTRIBUTION + '[spark]')} installed")
    ready = ok and java.ok and not missing_spark
    out.print("ready: `tidelake demo` can run" if ready else "[bold red]not ready[/] (see above)")
    if json:
        print_json(
            {
                "ok": ready,
                "jar_cache": str(cache),
                "repository": base,
                "jars": results,
                "java": {
                    "path": None if java.java is None else str(java.java),
                    "major": java.major,
                    "ok": java.ok,
                    "message": java.describe(),
                },
                "missing_extras": {"spark": missing_spark} if missing_spark else {},
            }
        )
    raise typer.Exit(0 if ready else 1 if not ok else EXIT_JARS_ONLY)


def spark_requirements() -> list[str]:
    """The requirements of the installed distribution's ``spark`` extra (its metadata)."""
    from importlib.metadata import PackageNotFoundError, requires

    try:
        declared = requires(extras.DISTRIBUTION) or []
    except PackageNotFoundError:
        return []
    wanted = []
    for requirement in declared:
        spec, _, marker = requirement.partition(";")
        if re.search(r"""extra\s*==\s*["']spark["']""", marker):
            wanted.append(spec.strip())
    return wanted


def _install_spark_extra(out: Console) -> list[str]:
    """``pip install`` the spark extra's requirements into this Python (pip's own output is
    the progress; ``PIP_*`` settings such as ``PIP_CONSTRAINT`` apply); returns what is
    still missing afterwards."""
    requirements = spark_requirements()
    if not requirements or importlib.util.find_spec("pip") is None:
        out.print("  [bold red]!![/] cannot install the spark extra here (no pip in this Python)")
        return extras.missing_modules("spark")
    out.print(
        "  .. python: installing "
        + escape(f"{extras.DISTRIBUTION}[spark] into {sys.prefix}: {' '.join(requirements)}"),
        soft_wrap=True,
    )
    argv = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", *requirements]
    if subprocess.run(argv, stdout=sys.stderr, check=False).returncode != 0:
        out.print("  [bold red]!![/] pip could not install the spark extra (its output above)")
    importlib.invalidate_caches()
    return extras.missing_modules("spark")


def _mark(good: bool) -> str:
    return "[green]ok[/]" if good else "[bold red]!![/]"


def _row(jar: Jar, state: str, *, fetched: bool, error: str | None = None) -> dict[str, Any]:
    return {
        "coordinate": jar.coordinate,
        "file": jar.filename,
        "sha256": jar.sha256,
        "state": state,
        "fetched": fetched,
        "error": error,
    }


def _fetch_all(
    jars: list[Jar], cache: Path, base: str, out: Console, results: list[dict[str, Any]]
) -> bool:
    """Fetch each jar with a byte progress bar; False when any could not be made whole."""
    ok = True
    with Progress(
        TextColumn("  {task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        console=out,
        transient=True,
        # A pipe or a log gets the start and end lines below, not a redrawn bar.
        disable=not out.is_terminal,
    ) as progress:
        tasks: dict[str, TaskID] = {}

        def report(jar: Jar, done: int, total: int | None) -> None:
            if jar.filename not in tasks:
                tasks[jar.filename] = progress.add_task(jar.filename, total=total)
                size = "" if total is None else f" ({total / 1e6:.1f} MB)"
                resumed = f", resuming at {done / 1e6:.1f} MB" if done else ""
                progress.console.print(
                    f"  .. {jar.filename}{size}: fetching {escape(jar.url(base))}{resumed}",
                    soft_wrap=True,
                )
            progress.update(tasks[jar.filename], completed=done, total=total)

        for jar in jars:
            try:
                fetched = fetch_jar(jar, cache, repository=base, progress=report)
            except JarFetchError as exc:
                ok = False
                progress.console.print(f"  {_mark(False)} {escape(str(exc))}", soft_wrap=True)
                results.append(_row(jar, jar_state(jar, cache), fetched=False, error=str(exc)))
                continue
            how = "fetched, SHA-256 verified" if fetched else "already there, SHA-256 verified"
            progress.console.print(f"  {_mark(True)} {jar.filename}: {how}")
            results.append(_row(jar, "ok", fetched=fetched))
    return ok


def register(app: typer.Typer) -> None:
    """Add ``setup`` to the ``tidelake`` command line."""
    app.command("setup")(setup)
