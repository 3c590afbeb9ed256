"""A private MinIO server: the S3-compatible object store of ``demo --object-store minio``
and of the object-storage tests.

MinIO is a Go program; ``scripts/gotools`` (run by ``scripts/setup``) builds a pinned
version from the Go module proxy into ``<repo>/.cache/bin/minio``. The server listens on
127.0.0.1 only, on a free port, with its data directory and a fresh random root user and
password per start. Its credentials reach tidelake's processes only through the environment
(``TIDELAKE_STORAGE__S3__ACCESS_KEY`` / ``…SECRET_KEY``), never through a config file.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from pathlib import Path
from types import TracebackType
from typing import Any

import structlog

from tidelake.config import S3Config
from tidelake.errors import TidelakeError, Transient
from tidelake.runtime.processes import ChildProcess, ProcessError, free_port, http_ok
from tidelake.runtime.storage import s3_client

log = structlog.get_logger(__name__)

#: Overrides where the MinIO binary is looked for first.
MINIO_BIN_ENV = "TIDELAKE_MINIO_BIN"


class ObjectStoreError(TidelakeError, Transient):
    """The private MinIO server could not be found, started or reached."""


def _repo_bin_dir() -> Path | None:
    """``<repo>/.cache/bin`` of the checkout this module runs from (editable install)."""
    for parent in Path(__file__).resolve().parents:
        if (parent / "scripts" / "gotools").is_file() and (parent / "pyproject.toml").is_file():
            return parent / ".cache" / "bin"
    return None


def minio_binary(environ: dict[str, str] | None = None) -> str:
    """``$TIDELAKE_MINIO_BIN``, ``<repo>/.cache/bin/minio``, or ``minio`` on the PATH."""
    env = os.environ if environ is None else environ
    candidates = [env.get(MINIO_BIN_ENV, "")]
    repo = _repo_bin_dir()
    if repo is not None:
        candidates.append(str(repo / "minio"))
    for c in candidates:
        if c and os.access(c, os.X_OK):
            return c
    found = shutil.which("minio")
    if found is None:
        raise ObjectStoreError("minio not found: run scripts/setup (scripts/gotools builds it)")
    return found


class MinioServer:
    """``minio server`` as a child process on 127.0.0.1 with its own data directory."""

    def __init__(self, data_dir: Path, port: int = 0, startup_timeout_s: float = 60.0) -> None:
        self.data_dir = data_dir
        self._requested_port = port
        self._port: int | None = None
        self.startup_timeout_s = startup_timeout_s
        self.access_key = "tl" + secrets.token_hex(8)
        self.secret_key = secrets.token_urlsafe(24)
        self._process: ChildProcess | None = None

    @property
    def port(self) -> int:
        if self._port is None:
            raise ObjectStoreError("the MinIO server has not been started")
        return self._port

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir.parent / f"{self.data_dir.name}.log"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def s3_config(self) -> S3Config:
        """``storage.s3`` pointing at this server, credentials included (for this process)."""
        from pydantic import SecretStr

        return S3Config(
            endpoint=self.endpoint,
            path_style=True,
            access_key=SecretStr(self.access_key),
            secret_key=SecretStr(self.secret_key),
        )

    def settings(self) -> dict[str, object]:
        """The non-secret ``storage.s3`` settings of a config file pointing at this server."""
        return {"endpoint": self.endpoint, "path_style": True, "region": "us-east-1"}

    def credentials_env(self) -> dict[str, str]:
        """The environment that hands the credentials to a tidelake process."""
        return {
            "TIDELAKE_STORAGE__S3__ACCESS_KEY": self.access_key,
            "TIDELAKE_STORAGE__S3__SECRET_KEY": self.secret_key,
        }

    def start(self) -> MinioServer:
        binary = minio_binary()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._port = self._requested_port or free_port()
        console = free_port()
        env = {
            "MINIO_ROOT_USER": self.access_key,
            "MINIO_ROOT_PASSWORD": self.secret_key,
            "MINIO_BROWSER": "off",
            "MINIO_UPDATE": "off",
        }
        argv = [
            binary,
            "server",
            "--quiet",
            "--address",
            f"127.0.0.1:{self._port}",
            "--console-address",
            f"127.0.0.1:{console}",
            str(self.data_dir),
        ]
        self._process = ChildProcess(
            "minio",
            argv,
            log_path=self.log_path,
            env=env,
            ready=http_ok(f"{self.endpoint}/minio/health/ready"),
            startup_timeout_s=self.startup_timeout_s,
            stop_timeout_s=15.0,
        )
        try:
            self._process.start()
        except ProcessError as exc:
            raise ObjectStoreError(str(exc)) from None
        log.info("minio started", endpoint=self.endpoint, pid=self.pid)
        return self

    def create_bucket(self, name: str) -> None:
        """Create ``name`` (idempotent)."""
        client = s3_client(self.s3_config())
        with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
            client.create_bucket(Bucket=name)

    def stop(self, timeout_s: float = 15.0) -> None:
        if self._process is not None:
            self._process.stop(timeout_s)

    def log_tail(self, lines: int = 20) -> str:
        return self._process.log_tail(lines) if self._process is not None else ""

    def __enter__(self) -> MinioServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


#: The bucket of the demo's private MinIO: staging and lake are two prefixes in it.
DEMO_BUCKET = "tidelake"


class DemoObjectStore:
    """``demo --object-store minio``: a private MinIO holding the staging area and the lake."""

    def __init__(self, home: Path) -> None:
        self.server = MinioServer(home / "minio")

    def start(self) -> DemoObjectStore:
        self.server.start()
        self.server.create_bucket(DEMO_BUCKET)
        return self

    def stop(self) -> None:
        self.server.stop()

    def file_settings(self) -> dict[str, Any]:
        """What the demo's config file says (no secrets: those go by :meth:`env`)."""
        return {
            "storage": {"s3": self.server.settings()},
            "stage": {"root": f"s3://{DEMO_BUCKET}/staging"},
            "lake": {"root": f"s3a://{DEMO_BUCKET}/lake"},
        }

    def env(self) -> dict[str, str]:
        return self.server.credentials_env()


def start_object_store(kind: str | None, home: Path) -> DemoObjectStore | None:
    """The demo's object store for ``--object-store`` (None: local directories)."""
    if kind is None:
        return None
    if kind != "minio":
        raise ObjectStoreError(f"--object-store takes minio, not {kind!r}")
    return DemoObjectStore(home).start()
