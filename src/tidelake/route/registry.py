"""The routes in effect: the config's, and what operators changed at run time.

``routes`` in the config file is where routes are declared. At run time — through the API or
``tidelake route add|pause|resume|remove`` — an operator can add a route, pause or resume one,
or remove one, without restarting the pipeline or any other route. Those changes are kept in
``<home>/routes.yaml`` (written whole, atomically), and every reader merges them over the
config:

* ``added``: name → route settings, as under ``routes.<name>`` (secrets only through
  ``password_file``/``signing_key_file``: a run-time route has no environment of its own);
* ``paused``: names paused at run time (a config route with ``paused: true`` is paused too);
* ``removed``: config routes removed at run time.

A running route (``route/runner.py``) reads the registry between batches: paused, it stops
fetching (its consumer keeps its place); removed, it exits. ``tidelake run`` starts a process
for a route added and stops the one of a route removed (``pipeline/stack.py``).
"""

from __future__ import annotations

from typing import Any

import yaml
from pydantic import ValidationError

from tidelake.config import ROUTE_NAME, SECRET_FIELDS, Config, RouteConfig
from tidelake.errors import ConfigError
from tidelake.runtime.durable import write_atomic

#: The registry's file, in the home.
REGISTRY_FILE = "routes.yaml"


def _no_secrets(data: Any, where: str) -> None:
    if isinstance(data, dict):
        for key, value in data.items():
            if key in SECRET_FIELDS and value is not None:
                raise ConfigError(
                    f"{where}.{key}: a route added at run time takes secrets from a file "
                    f"only: use {key}_file"
                )
            _no_secrets(value, f"{where}.{key}")


class RouteRegistry:
    """The routes of one home: the config's, with the run-time changes over them."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.path = cfg.home.resolve() / REGISTRY_FILE

    def _read(self) -> dict[str, Any]:
        try:
            doc = yaml.safe_load(self.path.read_text()) or {}
        except FileNotFoundError:
            doc = {}
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"{self.path}: cannot read the route registry: {exc}") from exc
        return {
            "added": dict(doc.get("added") or {}),
            "paused": sorted(set(doc.get("paused") or [])),
            "removed": sorted(set(doc.get("removed") or [])),
        }

    def _write(self, doc: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, yaml.safe_dump(doc, sort_keys=True).encode())

    def routes(self) -> dict[str, RouteConfig]:
        """Every route in effect, by name, with its paused state."""
        doc = self._read()
        out = {n: r for n, r in self.cfg.routes.items() if n not in doc["removed"]}
        for name, data in doc["added"].items():
            try:
                out[name] = RouteConfig.model_validate(data)
            except ValidationError as exc:
                raise ConfigError(f"{self.path}: route {name}: {exc}") from exc
        for name in doc["paused"]:
            if name in out:
                out[name] = out[name].model_copy(update={"paused": True})
        return out

    def get(self, name: str) -> RouteConfig:
        routes = self.routes()
        if name not in routes:
            known = ", ".join(sorted(routes)) or "none"
            raise ConfigError(f"no route named {name!r} (routes: {known})")
        return routes[name]

    # -- run-time changes

    def add(self, name: str, data: dict[str, Any]) -> RouteConfig:
        """Add a route; refused when the name is taken or the settings are not valid."""
        if not ROUTE_NAME.fullmatch(name):
            raise ConfigError(
                f"route name {name!r}: lower-case letters, digits, '-' and '_', starting with "
                "a letter"
            )
        _no_secrets(data, f"routes.{name}")
        try:
            route = RouteConfig.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(f"routes.{name}: {exc}") from exc
        doc = self._read()
        if name in self.routes():
            raise ConfigError(f"a route named {name!r} exists already")
        doc["added"][name] = route.model_dump(mode="json", exclude_defaults=True)
        doc["removed"] = [n for n in doc["removed"] if n != name]
        self._write(doc)
        return route

    def pause(self, name: str) -> None:
        self.get(name)
        doc = self._read()
        doc["paused"] = sorted({*doc["paused"], name})
        self._write(doc)

    def resume(self, name: str) -> None:
        """Resume a route paused at run time; a route the config pauses stays paused."""
        if self.cfg.routes.get(name) is not None and self.cfg.routes[name].paused:
            raise ConfigError(f"route {name} is paused in the config file (routes.{name}.paused)")
        self.get(name)
        doc = self._read()
        doc["paused"] = [n for n in doc["paused"] if n != name]
        self._write(doc)

    def remove(self, name: str) -> None:
        self.get(name)
        doc = self._read()
        doc["added"].pop(name, None)
        doc["paused"] = [n for n in doc["paused"] if n != name]
        if name in self.cfg.routes:
            doc["removed"] = sorted({*doc["removed"], name})
        self._write(doc)
