"""The optional dependency groups of the ``tidelake`` distribution, and the one place that
turns a missing one into a message naming the extra to install.

``pip install tidelake`` is the command line, the bus, the stager and the API; the heavy
parts are extras (pyproject.toml ``[project.optional-dependencies]``):

- ``spark``: the lake: the ingest and every verb that writes or reads it (PySpark, and the
  JVM-free readers: hudi-rs over Arrow, DuckDB);
- ``capture``: tidelake's own MySQL/MariaDB binlog and PostgreSQL pgoutput capture;
- ``s3``: staging on S3-compatible object storage (boto3);
- ``trino``: Trino's client, for ``demo --trino`` (pipeline/trino.py);
- ``kafka``: Kafka's client, for ``capture kafka``, ``demo --kafka`` and a Kafka bus
  (``bus.kind: kafka``; docs/kafka.md);
- ``sinks``: the routes' clients (Redis, HTTP for webhooks and OpenSearch, PostgreSQL), for
  ``route run``, ``route reprocess`` and ``demo --sinks`` (docs/routes.md);
- ``tracing``: the OpenTelemetry SDK and its OTLP/HTTP exporter, for ``tracing.enabled``
  (docs/tracing.md): asked for by ``runtime/tracing.py`` when a process sets tracing up, not
  by a verb.

``cli.main`` asks :func:`check_command` before a verb runs, so a verb that needs an extra
fails at once with the ``pip install`` line, and maps a ``ModuleNotFoundError`` raised later
(a code path the table below does not foresee) with :func:`extra_for_module`.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence

from tidelake.errors import ConfigError

DISTRIBUTION = "tidelake"

#: extra -> the top-level modules it provides (what is imported, not the PyPI names).
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "spark": ("pyspark", "hudi", "pyarrow", "duckdb"),
    "capture": ("pymysql", "pymysqlreplication", "psycopg2"),
    "s3": ("boto3", "botocore"),
    "trino": ("trino",),
    "kafka": ("aiokafka",),
    "sinks": ("redis", "httpx"),
    "tracing": ("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http"),
}

#: verb -> the extras it always needs.
VERB_EXTRAS: dict[str, tuple[str, ...]] = {
    "demo": ("spark",),
    "chaos": ("spark",),
    "run": ("spark",),
    "ingest": ("spark",),
    "submit": ("spark",),
    "bench": ("spark",),
    "verify": ("spark",),
    "query": ("spark",),
    "capture": ("capture",),
}

#: (verb, sub-command) -> the extras it needs instead of the verb's own.
SUBCOMMAND_EXTRAS: dict[tuple[str, str], tuple[str, ...]] = {
    ("capture", "kafka"): ("kafka",),
    ("route", "run"): ("sinks",),
    ("route", "reprocess"): ("sinks",),
    ("source", "run"): ("capture",),
}

#: (verb, option) -> (the values that need more, None for any value; the extras they add).
OPTION_EXTRAS: dict[tuple[str, str], tuple[frozenset[str] | None, tuple[str, ...]]] = {
    ("demo", "--source"): (None, ("capture",)),
    ("demo", "--object-store"): (None, ("s3",)),
    ("demo", "--trino"): (None, ("trino",)),
    ("demo", "--kafka"): (None, ("kafka",)),
    ("demo", "--bus"): (frozenset({"kafka"}), ("kafka",)),
    ("demo", "--sinks"): (None, ("sinks", "capture")),
    ("chaos", "--source"): (frozenset({"mariadb", "debezium"}), ("capture",)),
    ("chaos", "--stage-store"): (frozenset({"s3"}), ("s3",)),
}


class MissingExtraError(ConfigError):
    """What a command needs is not installed; the message names the extra and the fix."""

    def __init__(self, extra: str, missing: Sequence[str], what: str) -> None:
        self.extra = extra
        self.missing = tuple(missing)
        # `tidelake setup` installs the spark extra (cli/setup.py): the other way in.
        also = f" (or `{DISTRIBUTION} setup`, which installs it)" if extra == "spark" else ""
        super().__init__(
            f"{what} needs the optional dependencies of {DISTRIBUTION}[{extra}] "
            f"(not installed: {', '.join(missing)}): pip install '{DISTRIBUTION}[{extra}]'{also}"
        )


def missing_modules(extra: str) -> list[str]:
    """The modules of ``extra`` that cannot be imported here."""
    return [m for m in EXTRA_MODULES[extra] if importlib.util.find_spec(m) is None]


def require(extra: str, what: str) -> None:
    """Raise :class:`MissingExtraError` when ``extra`` is not installed; ``what`` needs it."""
    missing = missing_modules(extra)
    if missing:
        raise MissingExtraError(extra, missing, what)


def extra_for_module(module: str | None) -> str | None:
    """The extra that provides ``module`` (a dotted name), None for anything else."""
    if not module:
        return None
    top = module.split(".", 1)[0]
    for extra in ("spark", "capture", "s3", "kafka"):
        if top in EXTRA_MODULES[extra]:
            return extra
    return None


def command_extras(verb: str | None, args: Sequence[str]) -> list[str]:
    """The extras the verb ``verb`` with its arguments ``args`` needs, in order."""
    if verb is None or any(a in ("--help", "-h") for a in args):
        return []  # help is readable on any install
    sub = SUBCOMMAND_EXTRAS.get((verb, args[0])) if args else None
    needed = list(sub if sub is not None else VERB_EXTRAS.get(verb, ()))
    for (v, option), (values, extras) in OPTION_EXTRAS.items():
        given = _option_value(args, option)
        if v == verb and given is not None and (values is None or given in values):
            needed += extras
    return list(dict.fromkeys(needed))


def _option_value(args: Sequence[str], option: str) -> str | None:
    for i, arg in enumerate(args):
        if arg == option:  # a flag (``--trino``) has no value: "" says it is there
            return args[i + 1] if i + 1 < len(args) else ""
        if arg.startswith(option + "="):
            return arg.split("=", 1)[1]
    return None


def check_command(verb: str | None, args: Sequence[str]) -> None:
    """Raise :class:`MissingExtraError` for the first extra ``verb`` needs and lacks."""
    for extra in command_extras(verb, args):
        require(extra, f"`{DISTRIBUTION} {verb}`")
