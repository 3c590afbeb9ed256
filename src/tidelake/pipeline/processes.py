"""Which tidelake verbs run as child processes, and with what environment.

Production runs one process per stage; ``run``, ``demo``, ``chaos`` and the tests do the same
here: each stage is ``python -m tidelake.cli <verb>`` with its own log file, so a crash of one
stage never takes another with it, and tests can ``kill -9`` any of them. The process itself
is a :class:`tidelake.runtime.processes.ChildProcess`; this module only says which verbs
(:func:`stage_children`) and how they are stopped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from tidelake.runtime.processes import ChildProcess, tidelake_argv

__all__ = ["STAGE_STOP_TIMEOUT_S", "StageProcess", "run_env", "stage_children", "tidelake_argv"]

#: A stage's grace after SIGTERM: it finishes its current batch (or Hudi commit) first.
STAGE_STOP_TIMEOUT_S = 60.0


def run_env(config_path: Path, home: Path, bus_url: str) -> dict[str, str]:
    """The environment that points a self-contained run's children (demo, chaos) at the
    config it wrote. ``TIDELAKE_…`` variables override a config file, so the home and the bus
    are pinned here too: a ``TIDELAKE_HOME`` left in the caller's shell would otherwise send
    the children to another directory than the one the run watches. Other ``TIDELAKE_…``
    settings (a Spark master, say) still reach them."""
    env = {"TIDELAKE_CONFIG": str(config_path), "TIDELAKE_HOME": str(home)}
    if bus_url:  # empty on a Kafka bus (bus.kafka names its servers)
        env["TIDELAKE_BUS__URL"] = bus_url
    return env


class StageProcess(ChildProcess):
    """A tidelake verb as a child process, logging to ``log_path``; stopped with SIGTERM and
    :data:`STAGE_STOP_TIMEOUT_S` of grace (the stages handle SIGTERM by finishing the batch in
    hand). Started without a readiness check: a stage's readiness is its heartbeat
    (``pipeline/stack.py`` waits for it)."""

    def __init__(
        self,
        name: str,
        argv: list[str],
        env: Mapping[str, str],
        log_path: Path,
        *,
        die_with_parent: bool = False,
    ) -> None:
        super().__init__(
            name,
            argv,
            log_path=log_path,
            env=env,
            stop_timeout_s=STAGE_STOP_TIMEOUT_S,
            die_with_parent=die_with_parent,
        )


def stager_and_ingest(
    env: Mapping[str, str],
    logs: Path,
    *,
    ingest_interval_s: float,
    die_with_parent: bool = False,
    worker: str | None = None,
) -> list[StageProcess]:
    """A stager and a continuous ingest: ``stager`` and ``ingest``, or with several workers
    (pipeline/workers.py) ``stager-<worker>`` and ``ingest-<worker>``, each its own log."""
    suffix = "" if worker is None else f"-{worker}"
    return [
        StageProcess(
            f"stager{suffix}",
            tidelake_argv("stage"),
            env,
            logs / f"stage{suffix}.log",
            die_with_parent=die_with_parent,
        ),
        StageProcess(
            f"ingest{suffix}",
            tidelake_argv("ingest", "--continuous", "--interval", str(ingest_interval_s)),
            env,
            logs / f"ingest{suffix}.log",
            die_with_parent=die_with_parent,
        ),
    ]


def stage_children(
    env: Mapping[str, str],
    logs: Path,
    *,
    capture: bool,
    ingest_interval_s: float,
    die_with_parent: bool = False,
    routes: Sequence[str] = (),
    sources: Sequence[str] = (),
) -> list[StageProcess]:
    """The stage processes of a local pipeline, in start order (the producers first):
    ``capture`` when a source database is configured, one ``source-<name>`` per REST source
    in ``sources`` (docs/rest-source.md, Managed sources), the stager, the continuous ingest,
    then one ``route-<name>`` per route in ``routes`` (docs/routes.md) (``die_with_parent``:
    each gets SIGTERM when the process that starts them dies)."""
    dies = die_with_parent
    children = [
        StageProcess(
            f"source-{name}",
            tidelake_argv("source", "run", name),
            env,
            logs / f"source-{name}.log",
            die_with_parent=dies,
        )
        for name in sources
    ]
    children += stager_and_ingest(
        env, logs, ingest_interval_s=ingest_interval_s, die_with_parent=dies
    )
    children += [
        StageProcess(
            f"route-{name}",
            tidelake_argv("route", "run", name),
            env,
            logs / f"route-{name}.log",
            die_with_parent=dies,
        )
        for name in routes
    ]
    if capture:
        # tidelake's own capture (docs/capture.md) when a source database is configured.
        children.insert(
            0,
            StageProcess(
                "capture", tidelake_argv("capture"), env, logs / "capture.log", die_with_parent=dies
            ),
        )
    return children
