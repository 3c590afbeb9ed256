"""NATS security end to end: user/password, nkey and mutual TLS against a real nats-server
configured by the test (certificates made here with openssl), each carrying a message through
a real ``tidelake stage`` process; wrong or missing credentials are refused without the
secret showing in any output."""

from __future__ import annotations

import asyncio
import os
import secrets
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nkeys
import orjson
import pytest
import yaml

from tidelake.bus.connection import connect
from tidelake.bus.provision import ensure_consumer, ensure_streams
from tidelake.bus.server import EmbeddedNats
from tidelake.config import Config, load_config
from tidelake.errors import BusError
from tidelake.runtime.storage import LocalStorage
from tidelake.stage.manifest import list_manifests, read_manifest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]


def _openssl(cwd: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _issue(cwd: Path, name: str, subject: str, extensions: str) -> None:
    """``<name>.key`` and ``<name>.pem`` signed by the test CA."""
    _openssl(cwd, "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", f"{name}.key")
    _openssl(cwd, "req", "-new", "-key", f"{name}.key", "-subj", subject, "-out", f"{name}.csr")
    (cwd / f"{name}.ext").write_text(extensions)
    _openssl(
        cwd, "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "2", "-out", f"{name}.pem", "-extfile", f"{name}.ext",
    )  # fmt: skip


@dataclass
class Pki:
    """A throw-away CA, a server certificate for 127.0.0.1 and a client certificate."""

    dir: Path

    def path(self, name: str) -> Path:
        return self.dir / name


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """Certificates made by openssl for this module only (an untrusted second CA too)."""
    d = tmp_path_factory.mktemp("pki")
    for ca in ("ca", "other-ca"):
        _openssl(d, "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", f"{ca}.key")
        _openssl(
            d, "req", "-x509", "-new", "-key", f"{ca}.key", "-subj", f"/CN=tidelake {ca}",
            "-days", "2", "-out", f"{ca}.pem",
        )  # fmt: skip
    _issue(
        d, "server", "/CN=127.0.0.1", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"
    )
    _issue(d, "client", "/CN=tidelake-client", "extendedKeyUsage=clientAuth\n")
    return Pki(d)


def _server(tmp: Path, conf: str) -> EmbeddedNats:
    """A nats-server started with ``conf`` (auth / TLS blocks) as its config file."""
    path = tmp / "nats.conf"
    path.write_text(conf)
    return EmbeddedNats(tmp / "store", extra_args=["-c", str(path)]).start()


def _config(home: Path, url: str, bus: dict[str, Any]) -> Path:
    home.mkdir(parents=True, exist_ok=True)
    path = home / "config.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "home": str(home),
                "bus": {"url": url, "connect_timeout_s": 2, **bus},
                "stage": {"max_age_s": 0.3},
            }
        )
    )
    return path


async def _publish_one(cfg: Config) -> None:
    nc = await connect(cfg.bus)
    try:
        js = nc.jetstream()
        await ensure_streams(js, cfg.bus)
        await ensure_consumer(js, cfg.bus)
        row = {"id": "1", "v": "through an authenticated connection"}
        body = {
            "id": 0, "database": "sec", "table": "t", "pkNames": ["id"], "isDdl": False,
            "type": "INSERT", "es": 1, "ts": 1, "sql": "", "sqlType": {},
            "mysqlType": {"id": "bigint", "v": "text"}, "data": [row], "old": None,
            "_tidb": {"commitTs": 1 << 18},
        }  # fmt: skip
        await js.publish("cdc.sec.t", orjson.dumps(body))
    finally:
        await nc.close()


def _stage_once(config_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TIDELAKE_")}
    return subprocess.run(
        [sys.executable, "-m", "tidelake.cli", "stage", "--once", "--config", str(config_path)],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=REPO,
    )


def _staged_rows(cfg: Config) -> int:
    storage = LocalStorage(cfg.stage_root)
    return sum(read_manifest(storage, p).staged for p in list_manifests(storage))


def _carries_a_message(config_path: Path, env: dict[str, str]) -> None:
    """Publish with the config's credentials, stage with a real stager process, see it staged."""
    cfg = load_config(config_path, environ=env)
    asyncio.run(_publish_one(cfg))
    proc = _stage_once(config_path, env)
    assert 0 == proc.returncode, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert 1 == _staged_rows(cfg)


def _refused(config_path: Path, env: dict[str, str], secret: str | None = None) -> None:
    """The client cannot connect; the stager exits 1 naming a bus error, never the secret."""
    cfg = load_config(config_path, environ=env)
    with pytest.raises(BusError):
        asyncio.run(_publish_one(cfg))
    proc = _stage_once(config_path, env)
    assert 1 == proc.returncode
    assert "bus error" in proc.stderr
    if secret is not None:
        assert secret not in proc.stdout + proc.stderr


def test_user_and_password_from_the_environment(tmp_path: Path) -> None:
    """A server requiring user/password: the password from TIDELAKE_BUS__AUTH__PASSWORD
    carries a message through the stager; a wrong one is refused and never printed."""
    password = secrets.token_urlsafe(24)
    server = _server(tmp_path, f'authorization {{ user: tidelake, password: "{password}" }}\n')
    try:
        config_path = _config(tmp_path / "home", server.url, {"auth": {"user": "tidelake"}})
        _carries_a_message(config_path, {"TIDELAKE_BUS__AUTH__PASSWORD": password})
        wrong = secrets.token_urlsafe(24)
        _refused(config_path, {"TIDELAKE_BUS__AUTH__PASSWORD": wrong}, wrong)
    finally:
        server.stop()


def test_a_password_in_the_config_file_is_refused(tmp_path: Path) -> None:
    """Secrets are never read from the YAML file: config check names the env variable."""
    path = _config(tmp_path, "nats://127.0.0.1:4222", {"auth": {"user": "u", "password": "pw"}})
    proc = subprocess.run(
        [sys.executable, "-m", "tidelake.cli", "config", "check", str(path)],
        capture_output=True, text=True, timeout=60, check=False, cwd=REPO,
    )  # fmt: skip
    assert 2 == proc.returncode
    assert "TIDELAKE_BUS__AUTH__PASSWORD" in " ".join(proc.stderr.split())


def test_nkey_authentication(tmp_path: Path) -> None:
    """A server that knows only a user nkey's public key: the seed file authenticates;
    another seed is refused."""
    seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
    public = nkeys.from_seed(bytearray(seed)).public_key.decode()
    server = _server(tmp_path, f'authorization {{ users = [ {{ nkey: "{public}" }} ] }}\n')
    try:
        seed_file = tmp_path / "user.nk"
        seed_file.write_bytes(seed)
        seed_file.chmod(0o600)
        config_path = _config(
            tmp_path / "home", server.url, {"auth": {"nkey_seed_file": str(seed_file)}}
        )
        _carries_a_message(config_path, {})
        other = tmp_path / "other.nk"
        other.write_bytes(nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER))
        other_config = _config(
            tmp_path / "home2", server.url, {"auth": {"nkey_seed_file": str(other)}}
        )
        _refused(other_config, {}, seed.decode())
    finally:
        server.stop()


def test_mutual_tls_with_certificates_made_by_the_test(tmp_path: Path, pki: Pki) -> None:
    """A server requiring TLS and a client certificate from the test CA: with the CA and the
    client certificate a message goes through; without the client certificate, or trusting
    another CA, the connection is refused."""
    conf = f"""
tls {{
  cert_file: "{pki.path("server.pem")}"
  key_file: "{pki.path("server.key")}"
  ca_file: "{pki.path("ca.pem")}"
  verify: true
  timeout: 5
}}
"""
    server = _server(tmp_path, conf)
    try:
        full = {
            "ca_file": str(pki.path("ca.pem")),
            "cert_file": str(pki.path("client.pem")),
            "key_file": str(pki.path("client.key")),
        }
        config_path = _config(tmp_path / "home", server.url, {"tls": full})
        _carries_a_message(config_path, {})
        no_client_cert = _config(
            tmp_path / "home2", server.url, {"tls": {"ca_file": str(pki.path("ca.pem"))}}
        )
        _refused(no_client_cert, {})
        wrong_ca = _config(
            tmp_path / "home3",
            server.url,
            {"tls": {**full, "ca_file": str(pki.path("other-ca.pem"))}},
        )
        _refused(wrong_ca, {})
    finally:
        server.stop()
