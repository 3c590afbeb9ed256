"""The routes in effect: the config's, and what operators changed at run time.

``routes`` in the config file is where routes are declared. At run time — through the API or
``tidelake route add|pause|resume|remove`` — an operator can add a route, pause or resume one,
or remove one, without restarting the pipeline or any other route. Those changes are kept in
``<home>/routes.yaml`` (``runtime/registry.py``: written whole, atomically), and every reader
merges them over the config:

* ``added``: name → route settings, as under ``routes.<name>`` (secrets only through
  ``password_file``/``signing_key_file``: a run-time route has no environment of its own);
* ``paused``: names paused at run time (a config route with ``paused: true`` is paused too);
* ``removed``: config routes removed at run time.

A running route (``route/runner.py``) reads the registry between batches: paused, it stops
fetching (its consumer keeps its place); removed, it exits. ``tidelake run`` starts a process
for a route added and stops the one of a route removed (``pipeline/stack.py``).
"""

from __future__ import annotations

from tidelake.config import ROUTE_NAME, Config, RouteConfig
from tidelake.runtime.registry import Registry

#: The registry's file, in the home.
REGISTRY_FILE = "routes.yaml"


class RouteRegistry(Registry[RouteConfig]):
    """The routes of one home: the config's, with the run-time changes over them
    (``runtime/registry.py``)."""

    kind, section, model, name_rule = "route", "routes", RouteConfig, ROUTE_NAME

    def __init__(self, cfg: Config) -> None:
        super().__init__(cfg.home.resolve() / REGISTRY_FILE, cfg.routes)
        self.cfg = cfg

    def routes(self) -> dict[str, RouteConfig]:
        """Every route in effect, by name, with its paused state."""
        return self.entries()
