"""The files users deploy with — Dockerfiles, docker-compose, Kubernetes manifests, the GitHub
Actions workflow — checked by the tools that can run here without Docker or a cluster:
hadolint, the Kubernetes OpenAPI schemas (kubernetes-validate, offline), actionlint, and
tidelake's own config loader for every config they carry."""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tidelake.config import load_config

REPO = Path(__file__).resolve().parents[3]
DEPLOY = REPO / "deploy"
#: The Kubernetes version the manifests are checked against (a supported, common one).
K8S_VERSION = "1.30.0"


def _tool(name: str) -> str:
    """A linter from the venv (pip wheels) or the Go tools (scripts/gotools)."""
    for candidate in (Path(sys.executable).parent / name, REPO / ".cache" / "bin" / name):
        if candidate.is_file():
            return str(candidate)
    found = shutil.which(name)
    assert found, f"{name} not found: run scripts/setup"
    return found


def _k8s_documents() -> list[dict[str, Any]]:
    docs = []
    for path in sorted((DEPLOY / "k8s").glob("*.yaml")):
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d is not None)
    return docs


def test_dockerfiles_pass_hadolint() -> None:
    """Both images' Dockerfiles lint clean (ignores are commented in the files)."""
    dockerfiles = sorted(str(p) for p in (DEPLOY / "docker").glob("*.Dockerfile"))
    assert 2 == len(dockerfiles)
    proc = subprocess.run(
        [_tool("hadolint"), "--no-color", *dockerfiles], capture_output=True, text=True
    )
    assert (0, "") == (proc.returncode, proc.stdout.strip())


def test_workflow_passes_actionlint() -> None:
    """The GitHub Actions workflow is valid: syntax, expressions, action inputs."""
    workflows = sorted(str(p) for p in (REPO / ".github" / "workflows").glob("*.yml"))
    assert workflows
    proc = subprocess.run(
        [_tool("actionlint"), "-no-color", *workflows], capture_output=True, text=True
    )
    assert (0, "") == (proc.returncode, proc.stdout.strip())


def test_kubernetes_manifests_match_the_api_schemas() -> None:
    """Every manifest validates strictly (unknown fields refused) against Kubernetes 1.30."""
    checked = []
    for doc in _k8s_documents():
        if doc["kind"] == "Kustomization":  # kustomize's own file, not an API object
            continue
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
        checked.append(f"{doc['kind']}/{doc['metadata']['name']}")
    expected = {
        "Namespace/tidelake",
        "ConfigMap/tidelake-config",
        "Secret/tidelake-secrets",
        "PersistentVolumeClaim/tidelake-capture",
        "PersistentVolumeClaim/tidelake-ingest-state",
        "Deployment/tidelake-stager",
        "Deployment/tidelake-capture",
        "Deployment/tidelake-ingest",
        "Service/tidelake-api",
    }
    assert expected == set(checked)


def test_the_schema_check_catches_a_broken_manifest() -> None:
    """The same check refuses a misspelt field and a wrong type (it is not a no-op)."""
    deployment = next(d for d in _k8s_documents() if d["kind"] == "Deployment")
    misspelt = copy.deepcopy(deployment)
    misspelt["spec"]["replica"] = 1
    wrong_type = copy.deepcopy(deployment)
    wrong_type["spec"]["replicas"] = "one"
    for broken in (misspelt, wrong_type):
        with pytest.raises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(broken, K8S_VERSION, strict=True)


def test_kustomization_applies_every_manifest_but_the_secret_example() -> None:
    """`kubectl apply -k deploy/k8s` creates everything; secrets come from the operator."""
    kustomization = yaml.safe_load((DEPLOY / "k8s" / "kustomization.yaml").read_text())
    files = {p.name for p in (DEPLOY / "k8s").glob("*.yaml")}
    expected = files - {"kustomization.yaml", "secret.example.yaml"}
    assert expected == set(kustomization["resources"])


def test_every_secret_a_pod_reads_is_in_the_secret_example() -> None:
    """A pod's secretKeyRef names a key the example Secret documents."""
    secret = next(d for d in _k8s_documents() if d["kind"] == "Secret")
    text = "\n".join(
        (DEPLOY / "k8s" / n).read_text() for n in ("stager.yaml", "capture.yaml", "ingest.yaml")
    )
    refs = set(re.findall(r"secretKeyRef: \{name: tidelake-secrets, key: ([\w-]+)\}", text))
    assert refs
    assert refs <= set(secret["stringData"])


def _env_of(secret_values: dict[str, str]) -> dict[str, str]:
    return {
        "TIDELAKE_STORAGE__S3__ACCESS_KEY": "k",
        "TIDELAKE_STORAGE__S3__SECRET_KEY": "s",
        "TIDELAKE_API__TOKEN": "t",
        **secret_values,
    }


def test_the_shipped_configs_are_valid_tidelake_configs(tmp_path: Path) -> None:
    """The compose stack's tidelake.yaml and the ConfigMap's load and validate, on object
    storage, with their secrets from the environment only."""
    configmap = next(d for d in _k8s_documents() if d["kind"] == "ConfigMap")
    k8s_config = tmp_path / "k8s.yaml"
    k8s_config.write_text(configmap["data"]["tidelake.yaml"])
    for path in (DEPLOY / "compose" / "tidelake.yaml", k8s_config):
        cfg = load_config(path, environ=_env_of({}))
        assert (cfg.stage_root, cfg.lake_root) == ("s3://tidelake/staging", "s3a://tidelake/lake")
        assert cfg.storage.s3.resolved_credentials() == ("k", "s")
        assert cfg.lake_state_dir == Path("/var/lib/tidelake/state")


def test_compose_stack_is_consistent() -> None:
    """Each service has an image, depends only on services that exist, mounts declared
    volumes, and every variable it requires is in .env.example."""
    compose_dir = DEPLOY / "compose"
    text = (compose_dir / "compose.yaml").read_text()
    compose = yaml.safe_load(text)
    services: dict[str, Any] = compose["services"]
    expected_services = {
        "nats",
        "minio",
        "minio-bucket",
        "mariadb",
        "capture",
        "stager",
        "ingest",
        "serve",
    }
    assert expected_services == set(services)
    volumes = set(compose["volumes"])
    for name, service in services.items():
        assert service.get("image"), name
        assert set(service.get("depends_on", {})) <= set(services), name
        for mount in service.get("volumes", []):
            source = mount.split(":", 1)[0]
            assert source.startswith("./") or source in volumes, (name, mount)
            if source.startswith("./"):
                assert (compose_dir / source).exists(), (name, mount)
    required = set(re.findall(r"\$\{(\w+):\?", text))
    example = dict(
        line.split("=", 1)
        for line in (compose_dir / ".env.example").read_text().splitlines()
        if line and not line.startswith("#")
    )
    assert required <= set(example)
    # The tidelake services' environment makes a valid config with the mounted file.
    env = {k: str(v) for k, v in services["serve"]["environment"].items()}
    assert env.pop("TIDELAKE_CONFIG") == "/etc/tidelake/tidelake.yaml"
    secrets = {k: "x" for k in env if k.startswith("TIDELAKE_")}
    cfg = load_config(compose_dir / "tidelake.yaml", environ=secrets)
    assert cfg.api.token is not None
    assert cfg.bus.url == "nats://nats:4222"


def test_compose_nats_server_fsyncs_every_write() -> None:
    """The compose stack's nats-server config is one the current server accepts, and it asks
    for a fsync before every acknowledgement (issue 23: the default loses acked writes)."""
    from tidelake.bus.server import nats_server_binary

    conf = DEPLOY / "compose" / "nats.conf"
    compose = yaml.safe_load((DEPLOY / "compose" / "compose.yaml").read_text())
    nats = compose["services"]["nats"]
    assert ["-c", "/etc/nats/nats.conf"] == nats["command"]
    assert "./nats.conf:/etc/nats/nats.conf:ro" in nats["volumes"]
    checked = subprocess.run(
        [nats_server_binary(), "-c", str(conf), "-t"], capture_output=True, text=True, check=False
    )
    assert 0 == checked.returncode, checked.stdout + checked.stderr
    assert re.search(r"^\s*sync_interval:\s*always\s*$", conf.read_text(), re.M)
