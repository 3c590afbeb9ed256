"""The files users deploy with — Dockerfiles, docker-compose, Kubernetes manifests, the GitHub
Actions workflow — checked by the tools that can run here without Docker or a cluster:
hadolint, the Kubernetes OpenAPI schemas (kubernetes-validate, offline), actionlint, and
tidelake's own config loader for every config they carry."""

from __future__ import annotations

import contextlib
import copy
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tidelake.config import load_config
from tidelake.errors import ConfigError

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


#: The long-running tidelake services and what each runs (compose name, Kubernetes container).
LOOPS = {"capture": ("capture",), "stager": ("stage",), "ingest": ("ingest", "--continuous")}
#: The metrics/health port of every long-running loop (docs/metrics.md, docs/deployment.md).
METRICS_PORT = 9464


def _compose_services() -> dict[str, Any]:
    services: dict[str, Any] = yaml.safe_load((DEPLOY / "compose" / "compose.yaml").read_text())[
        "services"
    ]
    return {n: s for n, s in services.items() if n in (*LOOPS, "serve")}


def _k8s_containers() -> dict[str, dict[str, Any]]:
    """Every container of every Deployment, by container name."""
    return {
        c["name"]: c
        for d in _k8s_documents()
        if d["kind"] == "Deployment"
        for c in d["spec"]["template"]["spec"]["containers"]
    }


def _k8s_env(container: dict[str, Any]) -> dict[str, str]:
    """A container's environment: plain values, and a secret's key as ``secret:<key>``."""
    return {
        e["name"]: str(e["value"])
        if "value" in e
        else f"secret:{e['valueFrom']['secretKeyRef']['key']}"
        for e in container.get("env", [])
    }


def test_the_shipped_configs_are_valid_with_each_service_s_own_environment(
    tmp_path: Path,
) -> None:
    """Each service loads the config it ships with exactly the variables it is given — no
    token injected (issue 17: the shared config's `api.host: 0.0.0.0` demanded the API token
    of every verb, and only serve had it) — on object storage, with its secrets from the
    environment; only serve's config may listen (it has the token)."""
    configmap = next(d for d in _k8s_documents() if d["kind"] == "ConfigMap")
    k8s_config = tmp_path / "k8s.yaml"
    k8s_config.write_text(configmap["data"]["tidelake.yaml"])
    envs: list[tuple[str, Path, dict[str, str]]] = []
    for name, svc in _compose_services().items():
        env = {
            k: f"value-of-{k}" if "${" in str(v) else str(v)  # .env's values
            for k, v in svc["environment"].items()
            if k != "TIDELAKE_CONFIG"
        }
        envs.append((f"compose/{name}", DEPLOY / "compose" / "tidelake.yaml", env))
    for name, container in _k8s_containers().items():
        env = {k: f"value-of-{k}" if v.startswith("secret:") else v
               for k, v in _k8s_env(container).items() if k != "TIDELAKE_CONFIG"}  # fmt: skip
        envs.append((f"k8s/{name}", k8s_config, env))
    listening = []
    for name, path, env in envs:
        cfg = load_config(path, environ=env)
        assert (cfg.stage_root, cfg.lake_root) == ("s3://tidelake/staging", "s3a://tidelake/lake")
        assert cfg.storage.s3.resolved_credentials() == (
            "value-of-TIDELAKE_STORAGE__S3__ACCESS_KEY",
            "value-of-TIDELAKE_STORAGE__S3__SECRET_KEY",
        )
        assert cfg.lake_state_dir == Path("/var/lib/tidelake/state")
        with contextlib.suppress(ConfigError):
            cfg.api.require_token_to_listen()
            listening.append(name)
    assert ["compose/serve", "k8s/serve"] == listening


def test_only_serve_gets_the_api_token() -> None:
    """The API token reaches the one process that listens on the API, in both stacks."""
    compose = sorted(n for n, s in _compose_services().items()
                     if "TIDELAKE_API__TOKEN" in s["environment"])  # fmt: skip
    k8s = sorted(n for n, c in _k8s_containers().items() if "TIDELAKE_API__TOKEN" in _k8s_env(c))
    assert (["serve"], ["serve"]) == (compose, k8s)


def test_every_long_running_loop_has_health_probes_on_its_metrics_port() -> None:
    """Stager, capture and ingest serve /healthz on 9464 on the pod's address and Kubernetes
    probes it (startup, liveness, readiness) — compose runs the same check as a healthcheck;
    serve probes /api/health on its API port and has no metrics port (it shares the ingest's
    pod network). The ingest's health bound exceeds a long commit (inline compaction)."""
    containers = _k8s_containers()
    compose = _compose_services()
    seen = {}
    for name in LOOPS:
        container = containers[name]
        env = _k8s_env(container)
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        probes = {
            kind: (container[f"{kind}Probe"]["httpGet"]["path"],
                   ports[container[f"{kind}Probe"]["httpGet"]["port"]])
            for kind in ("startup", "liveness", "readiness")
        }  # fmt: skip
        svc = compose[name]
        seen[name] = (
            tuple(container["args"]),
            tuple(svc["command"]),
            env["TIDELAKE_METRICS__PORT"],
            env["TIDELAKE_METRICS__HOST"],
            str(svc["environment"]["TIDELAKE_METRICS__PORT"]),
            str(svc["environment"]["TIDELAKE_METRICS__HOST"]),
            set(probes.values()),
            f"http://127.0.0.1:{METRICS_PORT}/healthz" in " ".join(svc["healthcheck"]["test"]),
        )
    expected = {
        name: (verb, verb, str(METRICS_PORT), "0.0.0.0", str(METRICS_PORT), "0.0.0.0",
               {("/healthz", METRICS_PORT)}, True)
        for name, verb in LOOPS.items()
    }  # fmt: skip
    assert expected == seen
    serve = containers["serve"]
    assert "TIDELAKE_METRICS__PORT" not in _k8s_env(serve)
    assert "TIDELAKE_METRICS__PORT" not in compose["serve"]["environment"]
    for kind in ("startup", "liveness", "readiness"):
        assert {"path": "/api/health", "port": "http"} == serve[f"{kind}Probe"]["httpGet"]
    assert "http://127.0.0.1:8321/api/health" in " ".join(compose["serve"]["healthcheck"]["test"])
    # A commit of the ingest may take minutes: its bound is 15 minutes, not the default 5, in
    # both stacks, and the liveness probe adds its own failures on top.
    ingest_bounds = (
        float(_k8s_env(containers["ingest"])["TIDELAKE_METRICS__HEALTHY_WITHIN_S"]),
        float(compose["ingest"]["environment"]["TIDELAKE_METRICS__HEALTHY_WITHIN_S"]),
    )
    assert (900.0, 900.0) == ingest_bounds


def test_images_are_tagged_with_the_package_version_the_release_pushes() -> None:
    """No `:latest` that nothing builds: the manifests, the kustomization and compose's
    defaults name both images at the package version, which the release workflow pushes
    (docker/metadata-action's semver tag of a `v<version>` tag)."""
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    kustomization = yaml.safe_load((DEPLOY / "k8s" / "kustomization.yaml").read_text())
    tags = {i["name"].rsplit("/", 1)[1]: i["newTag"] for i in kustomization["images"]}
    in_manifests = {c["image"].rsplit("/", 1)[1] for c in _k8s_containers().values()}
    compose = yaml.safe_load((DEPLOY / "compose" / "compose.yaml").read_text())["services"]
    in_compose = {re.sub(r"\$\{\w+:-(.+)\}", r"\1", compose[n]["image"]) for n in (*LOOPS, "serve")}
    expected_images = {f"tidelake:{version}", f"tidelake-spark:{version}"}
    assert (
        {"tidelake": version, "tidelake-spark": version},
        expected_images,
        expected_images,
    ) == (tags, in_manifests, in_compose)
    workflow = (REPO / ".github" / "workflows" / "ci.yml").read_text()
    assert "type=semver,pattern={{version}}" in workflow
    deploy_text = "\n".join(p.read_text() for p in DEPLOY.rglob("*") if p.is_file())
    assert ":latest" not in deploy_text


def test_the_light_image_has_no_pyspark_and_the_spark_image_has_it() -> None:
    """Both images install the wheel with the extras of what they run: the tidelake image
    capture and S3 (no PySpark), the Spark image Spark and S3."""
    extras = {
        p.name: re.findall(r'pip install [^\n]*"\$\{wheel\}\[([\w,]+)\]"', p.read_text())
        for p in (DEPLOY / "docker").glob("*.Dockerfile")
    }
    assert {"tidelake.Dockerfile": ["capture,s3"], "spark.Dockerfile": ["spark,s3"]} == extras


def test_both_images_install_under_the_constraints_file() -> None:
    """Reproducible images: each copies the repository's constraints.txt and installs the
    wheel's dependencies under it (the same pins as the wheel test's clean virtualenv)."""
    assert (REPO / "constraints.txt").is_file()
    installs = {
        p.name: (
            "COPY constraints.txt /tmp/constraints.txt" in p.read_text(),
            re.findall(r'pip install [^\n]*?(-c /tmp/constraints\.txt) "\$\{wheel', p.read_text()),
        )
        for p in (DEPLOY / "docker").glob("*.Dockerfile")
    }
    expected = (True, ["-c /tmp/constraints.txt"])
    assert {"tidelake.Dockerfile": expected, "spark.Dockerfile": expected} == installs


def test_every_object_is_in_the_namespace_the_kustomization_creates_first() -> None:
    """`kubectl apply -k` creates the Namespace first and puts every object in it (the
    Secret the operator creates beforehand goes into the namespace applied on its own)."""
    kustomization = yaml.safe_load((DEPLOY / "k8s" / "kustomization.yaml").read_text())
    assert ("tidelake", "namespace.yaml") == (
        kustomization["namespace"],
        kustomization["resources"][0],
    )
    namespaces = {
        (d["kind"], d["metadata"].get("namespace"))
        for d in _k8s_documents()
        if d["kind"] not in ("Kustomization", "Namespace")
    }
    assert {"tidelake"} == {ns for _, ns in namespaces}


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
