"""The sources in effect: the config's, and what operators changed at run time.

``sources`` in the config file is where sources are declared (each a REST API polled into the
bus: ``capture/rest.py``). At run time — through the API or ``tidelake source
add|pause|resume|remove`` — an operator can add a source, pause or resume one, or remove one,
without restarting the pipeline or any other source. Those changes are kept in
``<home>/sources.yaml`` (``runtime/registry.py``: written whole, atomically), and every
reader merges them over the config, as for routes:

* ``added``: name → source settings, as under ``sources.<name>`` (secrets only through
  ``token_file``: a run-time source has no environment of its own);
* ``paused``: names paused at run time (a config source with ``paused: true`` is paused too);
* ``removed``: config sources removed at run time.

A running source (``capture/source_runner.py``) reads the registry every couple of seconds:
paused, it stops polling (its cursor is kept); removed, it exits. ``tidelake run`` starts a
process for a source added and stops the one of a source removed (``pipeline/stack.py``).
A registry written badly by hand raises :class:`ConfigError` naming the file; the running
sources and the supervisor then keep going as they were.
"""

from __future__ import annotations

from tidelake.config import SOURCE_NAME, Config, SourceConfig
from tidelake.runtime.registry import Registry

#: The registry's file, in the home.
REGISTRY_FILE = "sources.yaml"


class SourceRegistry(Registry[SourceConfig]):
    """The sources of one home: the config's, with the run-time changes over them
    (``runtime/registry.py``). Removing a source leaves its cursor file: a source added again
    under the same name, into the same table, resumes from it."""

    kind, section, model, name_rule = "source", "sources", SourceConfig, SOURCE_NAME

    def __init__(self, cfg: Config) -> None:
        super().__init__(cfg.home.resolve() / REGISTRY_FILE, cfg.sources)
        self.cfg = cfg

    def sources(self) -> dict[str, SourceConfig]:
        """Every source in effect, by name, with its paused state."""
        return self.entries()
