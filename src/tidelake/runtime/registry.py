"""Run-time changes to a set of named things the config declares (routes, sources).

The config file declares them (``routes.<name>``, ``sources.<name>``). At run time — through
the API or the CLI's ``add|pause|resume|remove`` — an operator can add one, pause or resume
one, or remove one, without restarting the pipeline or any other. Those changes are kept in a
YAML file of the home (``routes.yaml``, ``sources.yaml``; written whole, atomically), which
every reader merges over the config:

* ``added``: name → settings, as under ``<section>.<name>`` (secrets only through their
  ``*_file`` fields: a thing added at run time has no environment of its own);
* ``paused``: names paused at run time (one the config pauses is paused too);
* ``removed``: config entries removed at run time.

A file written badly by hand raises :class:`ConfigError` naming it; the running processes
and the supervisor then keep going as they were. ``route/registry.py`` and
``capture/source_registry.py`` are this for routes and sources.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Generic, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from tidelake.config import SECRET_FIELDS
from tidelake.errors import ConfigError
from tidelake.runtime.durable import write_atomic

#: One entry's settings: a pydantic model with a ``paused`` field.
_M = TypeVar("_M", bound=BaseModel)


class Registry(Generic[_M]):
    """The entries of one kind in one home: the config's, with the run-time changes over
    them. ``kind`` names them in messages (``route``), ``section`` is the config's key
    (``routes``)."""

    kind: str
    section: str
    model: Any  # the pydantic model of one entry
    name_rule: re.Pattern[str]

    def __init__(self, path: Path, declared: Mapping[str, _M]) -> None:
        self.path = path
        self.declared = declared

    def _names(self, value: Any, field: str) -> list[str]:
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{self.path}: {field} must be a list of {self.kind} names")
        return sorted(set(value))

    def _read(self) -> dict[str, Any]:
        what = f"cannot read the {self.kind} registry"
        try:
            doc = yaml.safe_load(self.path.read_text()) or {}
        except FileNotFoundError:
            doc = {}
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"{self.path}: {what}: {exc}") from exc
        if not isinstance(doc, dict):
            raise ConfigError(f"{self.path}: {what}: not a mapping")
        added = doc.get("added") or {}
        if not isinstance(added, dict):
            raise ConfigError(f"{self.path}: added must map {self.kind} names to their settings")
        return {
            "added": dict(added),
            "paused": self._names(doc.get("paused"), "paused"),
            "removed": self._names(doc.get("removed"), "removed"),
        }

    def _write(self, doc: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, yaml.safe_dump(doc, sort_keys=True).encode())

    def _no_secrets(self, data: Any, where: str) -> None:
        if isinstance(data, dict):
            for key, value in data.items():
                if key in SECRET_FIELDS and value is not None:
                    raise ConfigError(
                        f"{where}.{key}: a {self.kind} added at run time takes secrets from a "
                        f"file only: use {key}_file"
                    )
                self._no_secrets(value, f"{where}.{key}")

    def entries(self) -> dict[str, _M]:
        """Every entry in effect, by name, with its paused state."""
        doc = self._read()
        out = {n: e for n, e in self.declared.items() if n not in doc["removed"]}
        for name, data in doc["added"].items():
            if not isinstance(name, str) or not self.name_rule.fullmatch(name):
                raise ConfigError(f"{self.path}: {name!r} is not a {self.kind} name")
            try:
                out[name] = self.model.model_validate(data)
            except ValidationError as exc:
                raise ConfigError(f"{self.path}: {self.kind} {name}: {exc}") from exc
        for name in doc["paused"]:
            if name in out:
                out[name] = out[name].model_copy(update={"paused": True})
        return out

    def get(self, name: str) -> _M:
        entries = self.entries()
        if name not in entries:
            known = ", ".join(sorted(entries)) or "none"
            raise ConfigError(f"no {self.kind} named {name!r} ({self.section}: {known})")
        return entries[name]

    # -- run-time changes

    def add(self, name: str, data: dict[str, Any]) -> _M:
        """Add an entry; refused when the name is taken or the settings are not valid."""
        if not self.name_rule.fullmatch(name):
            raise ConfigError(
                f"{self.kind} name {name!r}: lower-case letters, digits, '-' and '_', starting "
                "with a letter"
            )
        self._no_secrets(data, f"{self.section}.{name}")
        try:
            entry: _M = self.model.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(f"{self.section}.{name}: {exc}") from exc
        doc = self._read()
        if name in self.entries():
            raise ConfigError(f"a {self.kind} named {name!r} exists already")
        doc["added"][name] = entry.model_dump(mode="json", exclude_defaults=True)
        doc["removed"] = [n for n in doc["removed"] if n != name]
        self._write(doc)
        return entry

    def pause(self, name: str) -> None:
        self.get(name)
        doc = self._read()
        doc["paused"] = sorted({*doc["paused"], name})
        self._write(doc)

    def resume(self, name: str) -> None:
        """Resume an entry paused at run time; one the config pauses stays paused."""
        declared = self.declared.get(name)
        if declared is not None and getattr(declared, "paused", False):
            raise ConfigError(
                f"{self.kind} {name} is paused in the config file ({self.section}.{name}.paused)"
            )
        self.get(name)
        doc = self._read()
        doc["paused"] = [n for n in doc["paused"] if n != name]
        self._write(doc)

    def remove(self, name: str) -> None:
        self.get(name)
        doc = self._read()
        doc["added"].pop(name, None)
        doc["paused"] = [n for n in doc["paused"] if n != name]
        if name in self.declared:
            doc["removed"] = sorted({*doc["removed"], name})
        self._write(doc)
