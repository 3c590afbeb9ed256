"""Staging storage behind one small interface.

``LocalStorage`` is the embedded default; ``S3Storage`` is a prefix of an S3 bucket (AWS S3,
MinIO, any S3-compatible server) through boto3. Both give the same guarantee:
:meth:`Storage.put` is durable and atomic when it returns (locally: file, name and new
directories fsync-ed by :mod:`tidelake.runtime.durable`; a single PUT on S3, which makes an
object visible whole or not at all and answers only once it is stored), so a reader never
sees a partial object and an OS crash never takes back what a stage acked after a put.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from pathlib import Path
from typing import Any, Protocol

from tidelake.config import S3Config
from tidelake.errors import StorageError
from tidelake.runtime.durable import make_dirs, write_atomic

#: URI schemes that name S3 object storage (``s3a`` is Hadoop's, the others read it too).
S3_SCHEMES = ("s3://", "s3a://")


class Storage(Protocol):
    """Where staged files and manifests live. Paths are relative, ``/``-separated."""

    def put(self, path: str, data: bytes) -> None:
        """Write ``data`` at ``path`` durably and atomically (all or nothing)."""

    def get(self, path: str) -> bytes:
        """Read a whole object."""

    def list(self, prefix: str, start_after: str = "") -> list[str]:
        """Relative paths of the objects under ``prefix``, sorted; only those sorting after
        ``start_after`` (a relative path) when it is given: S3's ``StartAfter``, so listing
        the new tail of a prefix costs what is new, not the whole prefix."""

    def exists(self, path: str) -> bool: ...

    def delete(self, path: str) -> None:
        """Remove an object; removing a missing one is not an error."""

    def uri(self, path: str) -> str:
        """An absolute URI of ``path`` that Spark and pyarrow can open."""


class LocalStorage:
    """A directory on the local filesystem; created (durably) unless ``create`` is false: a
    reader (``status``, ``serve``) never leaves a directory behind, and every write makes the
    directories it needs anyway."""

    def __init__(self, root: str | Path, *, create: bool = True) -> None:
        self.root = Path(root).resolve()
        if create:
            make_dirs(self.root)

    def _abs(self, path: str) -> Path:
        p = (self.root / path).resolve()
        if self.root != p and self.root not in p.parents:
            raise StorageError(f"path escapes the storage root: {path!r}")
        return p

    def put(self, path: str, data: bytes) -> None:
        target = self._abs(path)
        try:
            # File, its name and any directory made for it (a new batches/<id>/) fsync-ed.
            write_atomic(target, data)
        except OSError as exc:
            raise StorageError(f"cannot write {target}: {exc}") from exc

    def overwrite(self, path: str, data: bytes) -> None:
        """Write ``data`` over an existing file's bytes, in place and not fsynced: for hints
        (a heartbeat) when :meth:`put` fails because the disk is full — a new file needs a free
        block, while a record smaller than the block the old file holds fits in it."""
        target = self._abs(path)
        try:
            with target.open("r+b") as f:
                f.write(data)
                f.truncate(len(data))
        except OSError as exc:
            raise StorageError(f"cannot overwrite {target}: {exc}") from exc

    def get(self, path: str) -> bytes:
        try:
            return self._abs(path).read_bytes()
        except OSError as exc:
            raise StorageError(f"cannot read {self._abs(path)}: {exc}") from exc

    def list(self, prefix: str, start_after: str = "") -> list[str]:
        base = self._abs(prefix)
        if not base.exists():
            return []
        out = [
            rel
            for p in base.rglob("*")
            if p.is_file()
            and not p.name.startswith(".")
            and (rel := p.relative_to(self.root).as_posix()) > start_after
        ]
        return sorted(out)

    def exists(self, path: str) -> bool:
        return self._abs(path).exists()

    def delete(self, path: str) -> None:
        target = self._abs(path)
        target.unlink(missing_ok=True)
        # A folder of a folder (``batches/<batch_id>/``) goes with its last file, or retired
        # batches would leave empty folders behind forever; a top-level folder stays, since a
        # writer may be creating a file in it right now.
        parent = target.parent
        if parent != self.root and parent.parent != self.root:
            with contextlib.suppress(OSError):  # not empty, or already gone
                parent.rmdir()

    def uri(self, path: str) -> str:
        return self._abs(path).as_uri()


def is_s3_uri(root: str) -> bool:
    """True for ``s3://bucket/...`` and ``s3a://bucket/...``."""
    return root.startswith(S3_SCHEMES)


def split_s3_uri(uri: str) -> tuple[str, str]:
    """``s3a://bucket/a/b/`` → ``("bucket", "a/b")``; raises :class:`StorageError` otherwise."""
    if not is_s3_uri(uri):
        raise StorageError(f"not an s3:// or s3a:// URI: {uri!r}")
    bucket, _, prefix = uri.split("://", 1)[1].partition("/")
    if not bucket:
        raise StorageError(f"no bucket in {uri!r}")
    return bucket, prefix.strip("/")


_client_lock = threading.Lock()


@functools.lru_cache(maxsize=8)
def _s3_client(
    endpoint: str | None,
    region: str,
    path_style: bool,
    credentials: tuple[str, str] | None,
    max_attempts: int,
) -> Any:
    import boto3
    from botocore.config import Config as BotoConfig

    config = BotoConfig(
        region_name=region,
        s3={"addressing_style": "path" if path_style else "virtual"},
        retries={"max_attempts": max_attempts, "mode": "standard"},
        connect_timeout=5,
        read_timeout=60,
        max_pool_connections=16,
    )
    key, secret = credentials if credentials else (None, None)
    with _client_lock:  # boto3 sessions are not thread-safe; the clients they make are
        session = boto3.session.Session()
        return session.client(
            "s3",
            endpoint_url=endpoint,
            aws_access_key_id=key,
            aws_secret_access_key=secret,
            config=config,
        )


def s3_client(s3: S3Config) -> Any:
    """A boto3 S3 client for ``s3`` (one per distinct setting, shared by threads).

    Without configured keys, boto3's standard credential chain applies (environment,
    profiles, web identity, container and instance roles).
    """
    return _s3_client(
        s3.endpoint, s3.region, s3.path_style, s3.resolved_credentials(), s3.max_attempts
    )


class S3Storage:
    """A prefix of an S3 bucket: ``s3://bucket/prefix`` (``s3a://`` accepted)."""

    def __init__(self, root: str, s3: S3Config | None = None) -> None:
        self.bucket, self.prefix = split_s3_uri(root)
        self.s3 = s3 if s3 is not None else S3Config()
        self._client = s3_client(self.s3)

    def _key(self, path: str) -> str:
        parts = [p for p in path.split("/") if p]
        if path.startswith("/") or any(p in (".", "..") for p in parts):
            raise StorageError(f"path escapes the storage root: {path!r}")
        return "/".join([self.prefix, *parts] if self.prefix else parts)

    def _fail(self, verb: str, path: str, exc: Exception) -> StorageError:
        return StorageError(f"cannot {verb} s3://{self.bucket}/{self._key(path)}: {exc}")

    def put(self, path: str, data: bytes) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self._client.put_object(Bucket=self.bucket, Key=self._key(path), Body=data)
        except (BotoCoreError, ClientError) as exc:
            raise self._fail("write", path, exc) from exc

    def get(self, path: str) -> bytes:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            body = self._client.get_object(Bucket=self.bucket, Key=self._key(path))["Body"]
            try:
                data: bytes = body.read()
            finally:
                body.close()
            return data
        except (BotoCoreError, ClientError) as exc:
            raise self._fail("read", path, exc) from exc

    def list(self, prefix: str, start_after: str = "") -> list[str]:
        from botocore.exceptions import BotoCoreError, ClientError

        base = self._key(prefix)
        root = f"{self.prefix}/" if self.prefix else ""
        out = []
        extra = {"StartAfter": self._key(start_after)} if start_after else {}
        try:
            pages = self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=f"{base}/" if base else "", **extra
            )
            for page in pages:
                for obj in page.get("Contents", ()):
                    key: str = obj["Key"]
                    name = key.rsplit("/", 1)[-1]
                    # Hidden names are temporary files on a filesystem: skipped alike here.
                    if key.startswith(root) and name and not name.startswith("."):
                        out.append(key[len(root) :])
        except (BotoCoreError, ClientError) as exc:
            raise self._fail("list", prefix, exc) from exc
        return sorted(out)

    def exists(self, path: str) -> bool:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self._client.head_object(Bucket=self.bucket, Key=self._key(path))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return False
            raise self._fail("stat", path, exc) from exc
        except BotoCoreError as exc:
            raise self._fail("stat", path, exc) from exc
        return True

    def delete(self, path: str) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:  # S3 deletes are idempotent: a missing key is not an error
            self._client.delete_object(Bucket=self.bucket, Key=self._key(path))
        except (BotoCoreError, ClientError) as exc:
            raise self._fail("delete", path, exc) from exc

    def uri(self, path: str) -> str:
        return f"s3://{self.bucket}/{self._key(path)}"


def open_storage(root: str, s3: S3Config | None = None, *, create: bool = True) -> Storage:
    """The storage for a configured root: a local path, ``file://``, ``s3://`` or ``s3a://``.

    ``s3`` (the config's ``storage.s3``) configures object storage; it is ignored for local
    roots. ``create=False``: a local root is not created (readers).
    """
    if root.startswith("file://"):
        return LocalStorage(root[len("file://") :], create=create)
    if is_s3_uri(root):
        return S3Storage(root, s3)
    if "://" in root:
        raise StorageError(
            f"unsupported storage root {root!r}: a local path, s3://bucket/prefix or s3a://..."
        )
    return LocalStorage(root, create=create)
