"""Each tidelake service of the shipped deployments, as its container would run it, mapped to
this machine so the deploy start test (test_deploy_start.py) can run it without Docker.

A :class:`Service` is read from the deployment files themselves, never restated here:

* **compose** (``deploy/compose/compose.yaml``): the service's ``command`` after its image's
  ``ENTRYPOINT``; the image's ``ENV`` then the service's ``environment`` with ``${VAR:?…}``,
  ``${VAR:-default}`` and ``${VAR}`` interpolated from ``.env.example`` (the values a user
  copies to ``.env``); its bind mounts and named volumes; its ``healthcheck``.
* **kubernetes**: the Deployments of the kustomization *as rendered* by a real kustomize
  (``kustomize build`` from ``.cache/bin``, built by scripts/gotools, else ``kubectl
  kustomize``): each container's ``args`` after its image's ``ENTRYPOINT``; the image's
  ``ENV`` then the container's ``env`` with ``secretKeyRef`` values from
  ``secret.example.yaml``; its ``volumeMounts`` (a ConfigMap's keys become files); its
  ``startupProbe``/``livenessProbe``/``readinessProbe``.

:func:`localise` then maps what only exists inside a container to this machine, and nothing
else: every absolute container path to a directory of the test (a volume shared by two
containers maps to one directory; ``/opt/tidelake/jars``, baked into the Spark image, to the
checkout's jar cache); the hosts of the stack (``nats``, ``minio``, ``mariadb``, their
Kubernetes service names) to the servers the test started on 127.0.0.1; a container port a
process listens on to a free local port (two containers' 9464 would collide on one host);
and the all-addresses bind ``0.0.0.0`` to ``127.0.0.2`` — a loopback address here, yet not
one the API token rule exempts (it exempts 127.0.0.1, localhost and ::1 only), so the rule
is exercised as in the container. The config file is the shipped one with those values
replaced; every other setting is as shipped.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tidelake.runtime.extras import EXTRA_MODULES

REPO = Path(__file__).resolve().parents[3]
#: The address the test binds where a container binds all addresses (module docstring).
ALL_ADDRESSES_HERE = "127.0.0.2"
#: The images, by the name the files give them, and the Dockerfile that builds each.
DOCKERFILES = {"tidelake": "tidelake.Dockerfile", "tidelake-spark": "spark.Dockerfile"}
#: Container paths baked into an image that this checkout holds elsewhere.
BAKED_PATHS = {"/opt/tidelake/jars": REPO / ".cache" / "jars"}


@dataclass(frozen=True)
class Probe:
    """How the platform checks a service: an HTTP GET (Kubernetes) or a command (compose)."""

    kind: str  # "startup", "liveness", "readiness" or "healthcheck"
    port: int | None = None
    path: str | None = None
    command: tuple[str, ...] = ()


@dataclass(frozen=True)
class Mount:
    """A volume at ``path`` in the container; ``volume`` names what is shared between
    containers (same volume, same local directory); ``files`` is a ConfigMap's content or,
    for a compose bind mount, the source file."""

    path: str
    volume: str
    files: Mapping[str, str] = field(default_factory=dict)
    source: Path | None = None


@dataclass(frozen=True)
class Service:
    """One long-running tidelake container of a deployment."""

    stack: str  # "compose" or "k8s"
    name: str
    image: str  # tidelake or tidelake-spark
    tag: str
    extras: tuple[str, ...]  # the tidelake extras the image installs
    argv: tuple[str, ...]
    env: Mapping[str, str]
    workdir: str
    mounts: tuple[Mount, ...]
    probes: tuple[Probe, ...]
    ports: Mapping[str, int] = field(default_factory=dict)  # named container ports


# --- images ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Image:
    extras: tuple[str, ...]  # of the tidelake wheel the image installs
    entrypoint: tuple[str, ...]
    env: Mapping[str, str]
    workdir: str
    home: str


def read_image(dockerfile: Path) -> Image:
    """The runtime stage (the last FROM) of a Dockerfile: ENTRYPOINT, ENV, WORKDIR, and the
    home directory of the user it creates (the container's ``$HOME``)."""
    text = dockerfile.read_text().replace("\\\n", " ")
    stage = text.rsplit("\nFROM ", 1)[1]
    entrypoint: tuple[str, ...] = ()
    env: dict[str, str] = {}
    workdir = "/"
    for line in stage.splitlines():
        word, _, rest = line.strip().partition(" ")
        if word == "ENTRYPOINT":
            entrypoint = tuple(yaml.safe_load(rest))
        elif word == "ENV":
            for key, value in re.findall(r"(\w+)=(\S+)", rest):
                env[key] = value
        elif word == "WORKDIR":
            workdir = rest.strip()
    home = re.search(r"useradd [^&]*--home-dir (\S+)", stage)
    assert home, f"{dockerfile}: the runtime user's home is not found"
    # The wheel installed with `"${wheel}[a,b]"`; without extras, none of them.
    extras = re.search(r'pip install [^\n]*"\$\{wheel\}\[([\w,]+)\]"', stage)
    names = tuple(extras.group(1).split(",")) if extras else ()
    return Image(names, entrypoint, env, workdir, home.group(1))


def _image_of(reference: str) -> tuple[str, str]:
    """``ghcr.io/OWNER/tidelake-spark:0.1.0`` → ("tidelake-spark", "0.1.0")."""
    name, _, tag = reference.rpartition(":")
    return name.rsplit("/", 1)[-1], tag


# --- compose -----------------------------------------------------------------------------------


def _interpolate(value: str, variables: Mapping[str, str]) -> str:
    """Compose's interpolation of ``${VAR}``, ``${VAR:-default}``, ``${VAR:?message}``; a
    required variable that is missing fails, as ``docker compose`` does."""

    def one(match: re.Match[str]) -> str:
        name, op, arg = match.group(1), match.group(2), match.group(3)
        if variables.get(name):
            return variables[name]
        if op == ":?":
            raise AssertionError(f"${{{name}}} is required: {arg}")
        return arg if op == ":-" else ""

    out = re.sub(r"\$\{(\w+)(?:(:\?|:-)([^}]*))?\}", one, value)
    return out.replace("$$", "$")


def env_example(compose_dir: Path) -> dict[str, str]:
    """``.env.example``: what a user copies to ``.env``."""
    return dict(
        line.split("=", 1)
        for line in (compose_dir / ".env.example").read_text().splitlines()
        if line and not line.startswith("#")
    )


def compose_services(deploy: Path, names: tuple[str, ...]) -> list[Service]:
    """The tidelake services ``names`` of ``deploy/compose/compose.yaml``."""
    compose_dir = deploy / "compose"
    compose = yaml.safe_load((compose_dir / "compose.yaml").read_text())
    variables = env_example(compose_dir)
    out = []
    for name in names:
        svc = compose["services"][name]
        image_name, tag = _image_of(_interpolate(svc["image"], variables))
        image = read_image(deploy / "docker" / DOCKERFILES[image_name])
        env = {"HOME": image.home, **image.env}
        env.update({k: _interpolate(str(v), variables) for k, v in svc["environment"].items()})
        mounts = []
        for spec in svc.get("volumes", []):
            source, target = spec.split(":")[:2]
            if source.startswith("./"):
                mounts.append(Mount(target, f"bind:{source}", source=compose_dir / source))
            else:
                mounts.append(Mount(target, source))
        probes = []
        if "healthcheck" in svc:
            test = svc["healthcheck"]["test"]
            assert test[0] == "CMD", test
            probes.append(Probe("healthcheck", command=tuple(test[1:])))
        argv = (*(svc.get("entrypoint") or image.entrypoint), *svc["command"])
        out.append(
            Service(
                "compose",
                name,
                image_name,
                tag,
                image.extras,
                argv,
                env,
                image.workdir,
                tuple(mounts),
                tuple(probes),
            )
        )
    return out


# --- kubernetes --------------------------------------------------------------------------------


def kustomize_build(k8s_dir: Path) -> list[dict[str, Any]]:
    """The kustomization rendered by a real kustomize (the objects ``apply -k`` creates)."""
    standalone = REPO / ".cache" / "bin" / "kustomize"
    if standalone.is_file():
        argv = [str(standalone), "build", str(k8s_dir)]
    elif shutil.which("kubectl"):
        argv = ["kubectl", "kustomize", str(k8s_dir)]
    else:
        raise AssertionError("no kustomize: run scripts/setup (scripts/gotools builds it)")
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def _k8s_env(entries: list[dict[str, Any]], secret: Mapping[str, str]) -> dict[str, str]:
    env = {}
    for entry in entries:
        if "value" in entry:
            env[entry["name"]] = str(entry["value"])
        else:
            ref = entry["valueFrom"]["secretKeyRef"]
            assert ref["name"] == "tidelake-secrets", ref
            env[entry["name"]] = secret[ref["key"]]
    return env


def _k8s_probes(container: dict[str, Any], ports: Mapping[str, int]) -> tuple[Probe, ...]:
    probes = []
    for kind in ("startup", "liveness", "readiness"):
        spec = container.get(f"{kind}Probe")
        if spec is None:
            continue
        get = spec["httpGet"]
        port = get["port"]
        probes.append(Probe(kind, ports[port] if isinstance(port, str) else port, get["path"]))
    return tuple(probes)


def k8s_services(deploy: Path) -> list[Service]:
    """Every container of every Deployment of the rendered kustomization."""
    objects = kustomize_build(deploy / "k8s")
    secret_doc = yaml.safe_load((deploy / "k8s" / "secret.example.yaml").read_text())
    secret = secret_doc["stringData"]
    configmaps = {o["metadata"]["name"]: o["data"] for o in objects if o["kind"] == "ConfigMap"}
    out = []
    for obj in objects:
        if obj["kind"] != "Deployment":
            continue
        pod = obj["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in pod["volumes"]}
        for container in pod["containers"]:
            image_name, tag = _image_of(container["image"])
            image = read_image(deploy / "docker" / DOCKERFILES[image_name])
            env = {"HOME": image.home, **image.env, **_k8s_env(container.get("env", []), secret)}
            mounts = []
            for m in container.get("volumeMounts", []):
                vol = volumes[m["name"]]
                if "configMap" in vol:
                    name = vol["configMap"]["name"]
                    mounts.append(Mount(m["mountPath"], f"configmap:{name}", configmaps[name]))
                elif "persistentVolumeClaim" in vol:
                    mounts.append(Mount(m["mountPath"], vol["persistentVolumeClaim"]["claimName"]))
                else:  # an emptyDir: the pod's own
                    mounts.append(Mount(m["mountPath"], f"{obj['metadata']['name']}:{m['name']}"))
            ports = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
            argv = (*(container.get("command") or image.entrypoint), *container["args"])
            out.append(
                Service(
                    "k8s",
                    f"{obj['metadata']['name']}/{container['name']}",
                    image_name,
                    tag,
                    image.extras,
                    argv,
                    env,
                    container.get("workingDir", image.workdir),
                    tuple(mounts),
                    _k8s_probes(container, ports),
                    ports,
                )
            )
    return out


# --- this machine ------------------------------------------------------------------------------


@dataclass
class Local:
    """A :class:`Service` made runnable here: argv, a clean environment, a working directory,
    the URLs of its probes."""

    service: Service
    argv: list[str]
    env: dict[str, str]
    cwd: Path
    probes: list[tuple[str, str | tuple[str, ...]]]  # (kind, URL or command)
    config: Path | None


def _map_path(path: str, mounts: Mapping[str, Path], rootfs: Path) -> Path:
    for prefix in sorted(mounts, key=len, reverse=True):
        if path == prefix or path.startswith(prefix.rstrip("/") + "/"):
            return mounts[prefix] / path[len(prefix) :].lstrip("/")
    return rootfs / path.lstrip("/")


def _map_hosts(text: str, hosts: Mapping[str, str]) -> str:
    """``scheme://name:port`` of the stack → the local server; anything else is left."""

    def one(match: re.Match[str]) -> str:
        where = match.group(2)
        return match.group(1) + hosts.get(where, where)

    return re.sub(r"(\w+://(?:[^@/\s]+@)?)([\w.-]+:\d+)", one, text)


def _map_value(
    value: Any, mounts: Mapping[str, Path], rootfs: Path, hosts: Mapping[str, str]
) -> Any:
    if isinstance(value, dict):
        return {k: _map_value(v, mounts, rootfs, hosts) for k, v in value.items()}
    if isinstance(value, list):
        return [_map_value(v, mounts, rootfs, hosts) for v in value]
    if isinstance(value, str):
        if value == "0.0.0.0":
            return ALL_ADDRESSES_HERE
        if value.startswith("/"):
            return str(_map_path(value, mounts, rootfs))
        return _map_hosts(value, hosts)
    return value


def localise(
    service: Service,
    root: Path,
    hosts: Mapping[str, str],
    listen: Mapping[int, int],
    shared: dict[str, Path],
) -> Local:
    """``service`` with its paths under ``root``, its stack hosts per ``hosts``
    (``"nats:4222"`` → ``"127.0.0.1:PORT"``) and its listening container ports per
    ``listen`` (9464 → a free port). ``shared`` maps volume names to directories across the
    services of one stack (filled here)."""
    rootfs = root / service.name.replace("/", "_")
    mounts: dict[str, Path] = {}
    for path in BAKED_PATHS:
        mounts[path] = BAKED_PATHS[path]
    for mount in service.mounts:
        if mount.source is not None or mount.files:  # files: written below, once mapped
            continue
        target = shared.setdefault(mount.volume, root / "volumes" / mount.volume.replace(":", "_"))
        target.mkdir(parents=True, exist_ok=True)
        mounts[mount.path] = target
    config: Path | None = None
    env = dict(service.env)
    config_path = env.get("TIDELAKE_CONFIG")
    for mount in service.mounts:
        files = dict(mount.files)
        if mount.source is not None:
            files = {"": mount.source.read_text()}
        for name, text in files.items():
            container_path = f"{mount.path}/{name}" if name else mount.path
            data = yaml.safe_load(text)
            mapped = _map_value(data, mounts, rootfs, hosts)
            mapped = _map_ports(mapped, listen)
            local = rootfs / "files" / container_path.lstrip("/")
            local.parent.mkdir(parents=True, exist_ok=True)
            local.write_text(yaml.safe_dump(mapped, sort_keys=False))
            if container_path == config_path:
                config = local
            if mount.source is not None:
                mounts[mount.path] = local
            else:
                mounts[mount.path] = local.parent
    local_env = {}
    for key, value in env.items():
        if key == "TIDELAKE_CONFIG" and config is not None:
            local_env[key] = str(config)
        elif value.isdigit() and int(value) in listen and key.endswith("__PORT"):
            local_env[key] = str(listen[int(value)])
        else:
            local_env[key] = str(_map_value(value, mounts, rootfs, hosts))
    # The image's PATH finds `tidelake`, python and java; here the venv's and the system's.
    local_env["PATH"] = f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin"
    # The image has only its extras installed: the others' modules fail to import here too.
    paths = [str(_image_site(root, service))]
    if os.environ.get("PYTHONPATH"):  # the image installs the package; here it may be this
        paths.append(os.environ["PYTHONPATH"])  # import path (another checkout)
    local_env["PYTHONPATH"] = os.pathsep.join(paths)
    for path in (local_env["HOME"], _map_path(service.workdir, mounts, rootfs)):
        Path(path).mkdir(parents=True, exist_ok=True)
    argv = list(service.argv)
    assert argv[0] == "tidelake", argv
    argv[0] = str(Path(sys.executable).parent / "tidelake")
    probes: list[tuple[str, str | tuple[str, ...]]] = []
    for probe in service.probes:
        if probe.command:
            command = tuple(_map_ports_in_text(c, listen) for c in probe.command)
            if command[0] == "python":  # the image's interpreter: the venv's here
                command = (sys.executable, *command[1:])
            probes.append((probe.kind, command))
        else:
            assert probe.port is not None
            assert probe.path is not None
            port = listen[probe.port]
            probes.append((probe.kind, f"http://{ALL_ADDRESSES_HERE}:{port}{probe.path}"))
    return Local(
        service, argv, local_env, _map_path(service.workdir, mounts, rootfs), probes, config
    )


#: A ``sitecustomize`` that makes the modules of the extras an image lacks unimportable.
_SITECUSTOMIZE = """\
# Written by tests/integration/deploy/deploykit.py: modules this image does not install are
# not found (importing them raises ModuleNotFoundError, importlib.util.find_spec gives None).
import importlib.machinery, sys

BLOCKED = {blocked!r}


class _ImageFinder(importlib.machinery.PathFinder):
    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            return None
        return super().find_spec(name, path, target)


sys.meta_path[:] = [
    _ImageFinder if f is importlib.machinery.PathFinder else f for f in sys.meta_path
]
"""


def blocked_modules(service: Service) -> list[str]:
    """The modules of the tidelake extras the service's image does not install (the light
    image: PySpark, hudi-rs, Arrow, DuckDB)."""
    return sorted(m for e, ms in EXTRA_MODULES.items() if e not in service.extras for m in ms)


def _image_site(root: Path, service: Service) -> Path:
    """A directory whose ``sitecustomize`` makes :func:`blocked_modules` unimportable."""
    site = root / "image-site" / service.image
    site.mkdir(parents=True, exist_ok=True)
    text = _SITECUSTOMIZE.format(blocked=tuple(blocked_modules(service)))
    (site / "sitecustomize.py").write_text(text)
    return site


def _map_ports(data: Any, listen: Mapping[int, int]) -> Any:
    """``api.port`` / ``metrics.port`` of the config → their local ports."""
    if isinstance(data, dict):
        return {
            k: (listen.get(v, v) if k == "port" and isinstance(v, int) else _map_ports(v, listen))
            for k, v in data.items()
        }
    return data


def _map_ports_in_text(text: str, listen: Mapping[int, int]) -> str:
    """``http://127.0.0.1:9464/healthz`` in a healthcheck → the local address and port."""

    def one(match: re.Match[str]) -> str:
        port = int(match.group(2))
        return f"{ALL_ADDRESSES_HERE}:{listen.get(port, port)}"

    return re.sub(r"(127\.0\.0\.1|localhost):(\d+)", one, text)
