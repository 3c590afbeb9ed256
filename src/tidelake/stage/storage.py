"""Staging storage behind one small interface.

``LocalStorage`` is the embedded default. An S3 implementation must give the same
guarantees: :meth:`Storage.put` is durable and atomic when it returns (rename after fsync
locally; a single PUT on S3), so a reader never sees a partial object.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Protocol

from tidelake.errors import StorageError


class Storage(Protocol):
    """Where staged files and manifests live. Paths are relative, ``/``-separated."""

    def put(self, path: str, data: bytes) -> None:
        """Write ``data`` at ``path`` durably and atomically (all or nothing)."""

    def get(self, path: str) -> bytes:
        """Read a whole object."""

    def list(self, prefix: str) -> list[str]:
        """Relative paths of the objects under ``prefix``, sorted."""

    def exists(self, path: str) -> bool: ...

    def delete(self, path: str) -> None:
        """Remove an object; removing a missing one is not an error."""

    def uri(self, path: str) -> str:
        """An absolute URI of ``path`` that Spark and pyarrow can open."""


class LocalStorage:
    """A directory on the local filesystem."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)

    def _abs(self, path: str) -> Path:
        p = (self.root / path).resolve()
        if self.root != p and self.root not in p.parents:
            raise StorageError(f"path escapes the storage root: {path!r}")
        return p

    def put(self, path: str, data: bytes) -> None:
        target = self._abs(path)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, target)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
            dir_fd = os.open(target.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except OSError as exc:
            raise StorageError(f"cannot write {target}: {exc}") from exc

    def get(self, path: str) -> bytes:
        try:
            return self._abs(path).read_bytes()
        except OSError as exc:
            raise StorageError(f"cannot read {self._abs(path)}: {exc}") from exc

    def list(self, prefix: str) -> list[str]:
        base = self._abs(prefix)
        if not base.exists():
            return []
        out = [
            p.relative_to(self.root).as_posix()
            for p in base.rglob("*")
            if p.is_file() and not p.name.startswith(".")
        ]
        return sorted(out)

    def exists(self, path: str) -> bool:
        return self._abs(path).exists()

    def delete(self, path: str) -> None:
        self._abs(path).unlink(missing_ok=True)

    def uri(self, path: str) -> str:
        return self._abs(path).as_uri()


def open_storage(root: str) -> Storage:
    """The storage for a configured root: a local path (or ``file://``) for now."""
    if root.startswith("file://"):
        return LocalStorage(root[len("file://") :])
    if "://" in root:
        raise StorageError(f"unsupported staging root {root!r}: only local paths so far")
    return LocalStorage(root)
