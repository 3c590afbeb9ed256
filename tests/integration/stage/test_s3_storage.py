"""S3Storage on a real MinIO server keeps the contract LocalStorage keeps."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import SecretStr

from tidelake.config import S3Config
from tidelake.errors import StorageError
from tidelake.pipeline.object_store import MinioServer
from tidelake.runtime.storage import LocalStorage, S3Storage, Storage, open_storage
from tidelake.stage.manifest import Manifest, list_manifests, read_manifest, write_manifest

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def minio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MinioServer]:
    """A real MinIO server on 127.0.0.1 with one bucket, for the module."""
    with MinioServer(tmp_path_factory.mktemp("minio") / "data") as server:
        server.create_bucket("staging")
        yield server


def _exercise(storage: Storage) -> list[object]:
    """The same calls on any storage; returns what each observed."""
    storage.put("batches/b1/shop.orders.jsonl", b'{"a":1}\n')
    storage.put("batches/b1/shop.items.jsonl", b"")
    storage.put("manifests/0001.json", b"{}")
    storage.put("manifests/0001.json", b'{"v":2}')  # overwrite: whole new object
    storage.put("_tidelake/.half-written.tmp", b"x")  # hidden: never listed
    observed: list[object] = [
        storage.list(""),
        storage.list("batches"),
        storage.list("nothing-here"),
        storage.get("manifests/0001.json"),
        storage.exists("batches/b1/shop.items.jsonl"),
        storage.exists("batches/b1/missing.jsonl"),
    ]
    storage.delete("manifests/0001.json")
    storage.delete("manifests/0001.json")  # deleting a missing object is not an error
    observed.append(storage.list("manifests"))
    return observed


def test_s3_storage_behaves_like_local_storage(minio: MinioServer, tmp_path: Path) -> None:
    """put/get/list/exists/delete observe the same on MinIO as on a local directory."""
    s3 = open_storage("s3://staging/run1/", minio.s3_config())
    assert isinstance(s3, S3Storage)
    expected = _exercise(LocalStorage(tmp_path / "local"))
    assert expected == _exercise(s3)
    assert "s3://staging/run1/a/b.json" == s3.uri("a/b.json")


def test_manifests_round_trip_through_s3(minio: MinioServer) -> None:
    """A manifest written to S3 is listed in stream order and read back equal."""
    storage = open_storage("s3a://staging/run2", minio.s3_config())
    later = Manifest("b2", 11, 20, 2, ())
    earlier = Manifest("b1", 1, 10, 1, ())
    for manifest in (later, earlier):
        write_manifest(storage, manifest)
    assert [earlier.name, later.name] == list_manifests(storage)
    assert [later.name] == list_manifests(storage, after_seq=10)
    assert earlier == read_manifest(storage, earlier.name)


def test_paths_outside_the_root_are_refused(minio: MinioServer) -> None:
    """A relative path cannot climb out of the storage prefix."""
    storage = open_storage("s3://staging/run3", minio.s3_config())
    with pytest.raises(StorageError, match="escapes the storage root"):
        storage.put("../other/x", b"")


def test_wrong_credentials_fail_as_a_storage_error_without_the_secret(
    minio: MinioServer,
) -> None:
    """A refused request is a StorageError naming the object, never the secret key."""
    wrong = S3Config(
        endpoint=minio.endpoint,
        path_style=True,
        access_key=SecretStr(minio.access_key),
        secret_key=SecretStr("not-the-secret-key"),
        max_attempts=1,
    )
    storage = open_storage("s3://staging/run4", wrong)
    with pytest.raises(StorageError, match=re.escape("s3://staging/run4/manifests/x.json")) as info:
        storage.put("manifests/x.json", b"{}")
    assert "not-the-secret-key" not in str(info.value)
    assert "SignatureDoesNotMatch" in str(info.value)
