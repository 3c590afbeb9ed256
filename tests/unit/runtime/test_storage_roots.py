"""Storage roots and the storage.s3 section: what is accepted, what is refused and why."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidelake.config import load_config
from tidelake.errors import ConfigError, StorageError
from tidelake.runtime.storage import LocalStorage, S3Storage, open_storage, split_s3_uri


def test_s3_uris_split_into_bucket_and_prefix() -> None:
    """s3:// and s3a:// name a bucket and a prefix without surrounding slashes."""
    expected = [("bkt", "a/b"), ("bkt", ""), ("bkt", "x")]
    assert expected == [split_s3_uri(u) for u in ("s3a://bkt/a/b/", "s3://bkt", "s3://bkt/x")]
    with pytest.raises(StorageError, match="no bucket"):
        split_s3_uri("s3:///prefix")


def test_open_storage_picks_the_implementation_by_root(tmp_path: Path) -> None:
    """Local paths and file:// are LocalStorage, s3:// and s3a:// S3Storage, others refused."""
    assert isinstance(open_storage(str(tmp_path / "a")), LocalStorage)
    assert isinstance(open_storage(f"file://{tmp_path / 'b'}"), LocalStorage)
    assert isinstance(open_storage("s3://bkt/staging"), S3Storage)
    assert isinstance(open_storage("s3a://bkt/staging"), S3Storage)
    with pytest.raises(StorageError, match="unsupported storage root"):
        open_storage("gs://bkt/staging")


def test_s3_keys_are_refused_in_the_config_file(tmp_path: Path) -> None:
    """A key in the YAML file is an error that names the environment variable to use."""
    path = tmp_path / "c.yaml"
    path.write_text("storage:\n  s3:\n    secret_key: oops\n")
    with pytest.raises(ConfigError, match="TIDELAKE_STORAGE__S3__SECRET_KEY"):
        load_config(path, environ={})


def test_s3_keys_come_in_pairs_and_endpoints_are_urls(tmp_path: Path) -> None:
    """One key without the other, or an endpoint without a scheme, is a config error."""
    home = {"TIDELAKE_HOME": str(tmp_path)}
    with pytest.raises(ConfigError, match=r"storage\.s3: .*both access_key and secret_key"):
        load_config(None, environ={**home, "TIDELAKE_STORAGE__S3__ACCESS_KEY": "id"})
    with pytest.raises(ConfigError, match="http:// or https://"):
        load_config(None, environ={**home, "TIDELAKE_STORAGE__S3__ENDPOINT": "minio:9000"})


def test_s3_keys_from_files(tmp_path: Path) -> None:
    """access_key_file / secret_key_file (mounted secrets) resolve to the pair."""
    (tmp_path / "id").write_text("AKID\n")
    (tmp_path / "secret").write_text("shh\n")
    cfg = load_config(
        None,
        environ={
            "TIDELAKE_HOME": str(tmp_path),
            "TIDELAKE_STORAGE__S3__ACCESS_KEY_FILE": str(tmp_path / "id"),
            "TIDELAKE_STORAGE__S3__SECRET_KEY_FILE": str(tmp_path / "secret"),
        },
    )
    assert ("AKID", "shh") == cfg.storage.s3.resolved_credentials()
