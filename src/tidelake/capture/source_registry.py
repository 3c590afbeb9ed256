"""The sources in effect: the config's, and what operators changed at run time.

``sources`` in the config file is where sources are declared (each a REST API polled into the
bus: ``capture/rest.py``). At run time — through the API or ``tidelake source
add|pause|resume|remove`` — an operator can add a source, pause or resume one, or remove one,
without restarting the pipeline or any other source. Those changes are kept in
``<home>/sources.yaml`` (written whole, atomically), and every reader merges them over the
config, as ``route/registry.py`` does for routes:

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

from typing import Any

import yaml
from pydantic import ValidationError

from tidelake.config import SECRET_FIELDS, SOURCE_NAME, Config, SourceConfig
from tidelake.errors import ConfigError
from tidelake.runtime.durable import write_atomic

#: The registry's file, in the home.
REGISTRY_FILE = "sources.yaml"


def _no_secrets(data: Any, where: str) -> None:
    if isinstance(data, dict):
        for key, value in data.items():
            if key in SECRET_FIELDS and value is not None:
                raise ConfigError(
                    f"{where}.{key}: a source added at run time takes secrets from a file "
                    f"only: use {key}_file"
                )
            _no_secrets(value, f"{where}.{key}")


def _names(value: Any, what: str, path: object) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{path}: {what} must be a list of source names")
    return sorted(set(value))


class SourceRegistry:
    """The sources of one home: the config's, with the run-time changes over them."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.path = cfg.home.resolve() / REGISTRY_FILE

    def _read(self) -> dict[str, Any]:
        try:
            doc = yaml.safe_load(self.path.read_text()) or {}
        except FileNotFoundError:
            doc = {}
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"{self.path}: cannot read the source registry: {exc}") from exc
        if not isinstance(doc, dict):
            raise ConfigError(f"{self.path}: cannot read the source registry: not a mapping")
        added = doc.get("added") or {}
        if not isinstance(added, dict):
            raise ConfigError(f"{self.path}: added must map source names to their settings")
        return {
            "added": dict(added),
            "paused": _names(doc.get("paused"), "paused", self.path),
            "removed": _names(doc.get("removed"), "removed", self.path),
        }

    def _write(self, doc: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, yaml.safe_dump(doc, sort_keys=True).encode())

    def sources(self) -> dict[str, SourceConfig]:
        """Every source in effect, by name, with its paused state."""
        doc = self._read()
        out = {n: s for n, s in self.cfg.sources.items() if n not in doc["removed"]}
        for name, data in doc["added"].items():
            if not isinstance(name, str) or not SOURCE_NAME.fullmatch(name):
                raise ConfigError(f"{self.path}: {name!r} is not a source name")
            try:
                out[name] = SourceConfig.model_validate(data)
            except ValidationError as exc:
                raise ConfigError(f"{self.path}: source {name}: {exc}") from exc
        for name in doc["paused"]:
            if name in out:
                out[name] = out[name].model_copy(update={"paused": True})
        return out

    def get(self, name: str) -> SourceConfig:
        sources = self.sources()
        if name not in sources:
            known = ", ".join(sorted(sources)) or "none"
            raise ConfigError(f"no source named {name!r} (sources: {known})")
        return sources[name]

    # -- run-time changes

    def add(self, name: str, data: dict[str, Any]) -> SourceConfig:
        """Add a source; refused when the name is taken or the settings are not valid."""
        if not SOURCE_NAME.fullmatch(name):
            raise ConfigError(
                f"source name {name!r}: lower-case letters, digits, '-' and '_', starting with "
                "a letter"
            )
        _no_secrets(data, f"sources.{name}")
        try:
            source = SourceConfig.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(f"sources.{name}: {exc}") from exc
        doc = self._read()
        if name in self.sources():
            raise ConfigError(f"a source named {name!r} exists already")
        doc["added"][name] = source.model_dump(mode="json", exclude_defaults=True)
        doc["removed"] = [n for n in doc["removed"] if n != name]
        self._write(doc)
        return source

    def pause(self, name: str) -> None:
        self.get(name)
        doc = self._read()
        doc["paused"] = sorted({*doc["paused"], name})
        self._write(doc)

    def resume(self, name: str) -> None:
        """Resume a source paused at run time; a source the config pauses stays paused."""
        if self.cfg.sources.get(name) is not None and self.cfg.sources[name].paused:
            raise ConfigError(f"source {name} is paused in the config file (sources.{name}.paused)")
        self.get(name)
        doc = self._read()
        doc["paused"] = [n for n in doc["paused"] if n != name]
        self._write(doc)

    def remove(self, name: str) -> None:
        """Remove a source: its process exits. Its cursor file stays: a source added again
        under the same name, into the same table, resumes from it."""
        self.get(name)
        doc = self._read()
        doc["added"].pop(name, None)
        doc["paused"] = [n for n in doc["paused"] if n != name]
        if name in self.cfg.sources:
            doc["removed"] = sorted({*doc["removed"], name})
        self._write(doc)
