"""Reading rendered Kubernetes objects (`kubectl kustomize` output): the workloads and their
containers, what volume backs a path a program is pointed at, the config files those programs
read, and the transport rules every overlay keeps: TLS on each hop that can cross a network (the
scheduler's gRPC port and admin API, the routers' client listener, routers and agents verifying the
scheduler), every certificate and key a file from a Secret, and Redis requiring a password that each
of its clients gets from the same Secret. tests/deploy checks the overlays as they are,
tests/terraform as Terraform renders them."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import yaml

WORKLOADS = ("Deployment", "StatefulSet", "DaemonSet")
# redis-server's password, given on its standard input by the shell: `requirepass "$VAR"`.
REQUIREPASS = re.compile(r"requirepass[^\n]*?\$\{?(?P<var>[A-Za-z_][A-Za-z0-9_]*)")
REDIS_PASSWORD_ENV = "MERIDIAN_REDIS_PASSWORD"


def render(directory: Path) -> list[dict]:
    """The objects `kubectl kustomize DIRECTORY` renders."""
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl is not installed: `make test` needs Debian's kubectl (its kustomize renders the overlays)"
    result = subprocess.run([kubectl, "kustomize", str(directory)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, f"kustomize {directory}: {result.stderr}"
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def by_kind(objects: list[dict], kind: str) -> list[dict]:
    return [o for o in objects if o["kind"] == kind]


def find(objects: list[dict], kind: str, name: str) -> dict | None:
    return next((o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name), None)


def matches(selector: dict, labels: dict) -> bool:
    """Whether a matchLabels selector selects these labels."""
    return all(labels.get(k) == v for k, v in selector.items())


def containers(objects: list[dict]):
    """(workload, pod spec, container) of every container, init containers included."""
    for obj in objects:
        if obj["kind"] in WORKLOADS:
            pod = obj["spec"]["template"]["spec"]
            for c in pod.get("initContainers", []) + pod["containers"]:
                yield obj, pod, c


def program(c: dict) -> str:
    """What a container runs: `meridian`'s subcommand (scheduler, router, agent) or the executable."""
    argv = c.get("command", []) + c.get("args", [])
    if any("redis-server" in a for a in argv):
        return "redis-server"
    return argv[0] if argv else ""


def flags(c: dict) -> dict[str, str]:
    """--flag=value arguments of a container."""
    out = {}
    for arg in c.get("command", []) + c.get("args", []):
        flag, sep, value = arg.partition("=")
        if sep and flag.startswith("--"):
            out[flag] = value
    return out


def backing(pod: dict, c: dict, path: str) -> tuple[dict | None, str | None]:
    """(volume, key) a file path lies on: the longest mount that holds it; key None for the mount itself."""
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    for m in sorted(c.get("volumeMounts", []), key=lambda m: -len(m["mountPath"])):
        mount = m["mountPath"].rstrip("/")
        if path == mount:
            return volumes.get(m["name"]), None
        if path.startswith(mount + "/"):
            return volumes.get(m["name"]), path[len(mount) + 1:]
    return None, None


def config(objects: list[dict], pod: dict, c: dict, path: str) -> dict | None:
    """The YAML document at ``path`` when it lies on a mounted ConfigMap of ``objects``."""
    volume, key = backing(pod, c, path)
    if not volume or not key or "configMap" not in volume:
        return None
    cm = find(objects, "ConfigMap", volume["configMap"]["name"])
    if cm is None or key not in cm.get("data", {}):
        return None
    doc = yaml.safe_load(cm["data"][key])
    return doc if isinstance(doc, dict) else None


def secret_key(ref: dict) -> tuple[str, str]:
    return ref["name"], ref["key"]


def env_secret(c: dict, name: str) -> dict | None:
    """The secretKeyRef an env variable of ``c`` is taken from, None if it is not one."""
    for env in c.get("env", []):
        if env["name"] == name:
            return env.get("valueFrom", {}).get("secretKeyRef")
    return None


def _on_secret(pod: dict, c: dict, path: str, what: str, expect_key: str | None = None) -> list[str]:
    volume, key = backing(pod, c, path)
    if volume is None or "secret" not in volume:
        return [f"{what}: {path} is not on a Secret volume (mounts: {[m['mountPath'] for m in c.get('volumeMounts', [])]})"]
    if expect_key and key != expect_key:
        return [f"{what}: {path} is key {key!r} of Secret {volume['secret']['secretName']}, expected {expect_key!r}"]
    return []


def _tls_pair(pod: dict, c: dict, cert: str | None, key: str | None, what: str) -> list[str]:
    """A certificate and its key: both set, both from one kubernetes.io/tls-shaped Secret (tls.crt, tls.key)."""
    if not cert or not key:
        return [f"{what}: certificate {cert!r} and key {key!r}: TLS needs both"]
    problems = _on_secret(pod, c, cert, what, "tls.crt") + _on_secret(pod, c, key, what, "tls.key")
    secrets = {backing(pod, c, path)[0]["secret"]["secretName"] for path in (cert, key)} if not problems else set()
    if len(secrets) > 1:
        problems.append(f"{what}: {cert} and {key} are on different Secrets ({sorted(secrets)})")
    return problems


def _https_probes(c: dict, port_names: set, what: str) -> list[str]:
    problems = []
    for probe in ("readinessProbe", "livenessProbe"):
        http = c.get(probe, {}).get("httpGet")
        if http and http["port"] in port_names and http.get("scheme") != "HTTPS":
            problems.append(f"{what}: {probe} on the TLS port {http['port']} is plain HTTP (scheme: HTTPS)")
    return problems


def _ports(c: dict, number: int | None) -> set:
    return {p for port in c.get("ports", []) if port["containerPort"] == number for p in (port.get("name"), number)} - {None}


def scheduler_tls_problems(objects: list[dict]) -> list[str]:
    """Each scheduler serves gRPC and its admin API over TLS from Secret files, probed over HTTPS."""
    problems = []
    for obj, pod, c in containers(objects):
        if program(c) != "scheduler":
            continue
        what = f"{obj['kind']}/{obj['metadata']['name']}/{c['name']}"
        f = flags(c)
        problems += _tls_pair(pod, c, f.get("--tls-cert-file"), f.get("--tls-key-file"), f"{what} gRPC")
        problems += _tls_pair(pod, c, f.get("--admin-tls-cert-file"), f.get("--admin-tls-key-file"), f"{what} admin API")
        if f.get("--tls-client-ca-file"):
            problems += _on_secret(pod, c, f["--tls-client-ca-file"], f"{what} client CA")
        admin_port = int(f.get("--admin-address", ":7071").rpartition(":")[2])
        problems += _https_probes(c, _ports(c, admin_port), what)
    return problems


def router_tls_problems(objects: list[dict]) -> list[str]:
    """Each router serves its clients over HTTPS and verifies the scheduler, from Secret files."""
    problems = []
    for obj, pod, c in containers(objects):
        if program(c) != "router":
            continue
        what = f"{obj['kind']}/{obj['metadata']['name']}/{c['name']}"
        settings = router_settings(objects, pod, c)
        if not settings:
            problems.append(f"{what}: its --config is not a mounted ConfigMap file")
        problems += _tls_pair(pod, c, settings.get("tls_cert_file"), settings.get("tls_key_file"),
                              f"{what} client listener")
        if settings.get("scheduler_address"):
            ca = settings.get("scheduler_tls_ca_file")
            problems += _on_secret(pod, c, ca, f"{what} scheduler CA") if ca else \
                [f"{what}: reaches the scheduler without TLS (no scheduler_tls_ca_file)"]
            problems += _pinned_name(settings["scheduler_address"], settings.get("scheduler_tls_server_name"),
                                     f"{what} scheduler_tls_server_name")
        if settings.get("scheduler_tls_cert_file") or settings.get("scheduler_tls_key_file"):
            problems += _tls_pair(pod, c, settings.get("scheduler_tls_cert_file"),
                                  settings.get("scheduler_tls_key_file"), f"{what} client certificate to the scheduler")
        problems += _https_probes(c, _ports(c, settings.get("listen_port")), what)
    return problems


def agent_tls_problems(objects: list[dict]) -> list[str]:
    """Each agent's Cluster spec verifies the scheduler with a CA from a Secret file."""
    problems = []
    for obj, pod, c in containers(objects):
        if program(c) != "agent":
            continue
        what = f"{obj['kind']}/{obj['metadata']['name']}/{c['name']}"
        cluster = config(objects, pod, c, flags(c).get("--cluster", "")) or {}
        tls = ((cluster.get("spec") or {}).get("scheduler") or {}).get("tls") or {}
        problems += _on_secret(pod, c, tls["ca_file"], f"{what} scheduler CA") if tls.get("ca_file") else \
            [f"{what}: its Cluster spec reaches the scheduler without TLS (no scheduler.tls.ca_file)"]
        address = ((cluster.get("spec") or {}).get("scheduler") or {}).get("address", "")
        problems += _pinned_name(address, tls.get("server_name"), f"{what} scheduler.tls.server_name")
        if tls.get("cert_file") or tls.get("key_file"):
            problems += _tls_pair(pod, c, tls.get("cert_file"), tls.get("key_file"),
                                  f"{what} client certificate to the scheduler")
    return problems


def _pinned_name(address: str, server_name: str | None, what: str) -> list[str]:
    """A scheduler client verifies every scheduler against the host it dials: the scheduler
    advertises its pod IP (base/scheduler), so a standby's redirect names an address the certificate
    cannot; without the pinned name the redirected link fails verification and falls back late."""
    host = re.sub(r":[0-9]+$", "", address)
    if server_name != host:
        return [f"{what} is {server_name!r}, not the host of the scheduler address {address!r}"]
    return []


def router_settings(objects: list[dict], pod: dict, c: dict) -> dict:
    """A router's settings as it reads them: its --config file, each --flag overriding its setting."""
    f = flags(c)
    settings = dict(config(objects, pod, c, f.get("--config", "")) or {})
    settings.update({flag[2:].replace("-", "_"): value for flag, value in f.items() if flag != "--config"})
    return settings


def redis_auth_problems(objects: list[dict]) -> list[str]:
    """A Redis here requires a password from a Secret (its probe authenticating with it), and every
    Redis client gets MERIDIAN_REDIS_PASSWORD from that same Secret key."""
    problems: list[str] = []
    redis_auth: set[tuple[str, str]] = set()
    for obj, _pod, c in containers(objects):
        if program(c) != "redis-server":
            continue
        what = f"{obj['kind']}/{obj['metadata']['name']}/{c['name']}"
        m = REQUIREPASS.search("\n".join(c.get("command", []) + c.get("args", [])))
        ref = env_secret(c, m.group("var")) if m else None
        if ref is None:
            problems.append(f"{what}: redis-server requires no password taken from a Secret "
                            "(expected `requirepass \"$VAR\"` with VAR from a secretKeyRef)")
            continue
        if ref.get("optional"):
            problems.append(f"{what}: its password Secret is optional: without it Redis would take no password")
        redis_auth.add(secret_key(ref))
        probe = " ".join(c.get("readinessProbe", {}).get("exec", {}).get("command", []))
        if "redis-cli" in probe and env_secret(c, "REDISCLI_AUTH") != ref:
            problems.append(f"{what}: its redis-cli probe does not authenticate (REDISCLI_AUTH from {secret_key(ref)})")
    for obj, pod, c in containers(objects):
        if not _uses_redis(objects, pod, c):
            continue
        what = f"{obj['kind']}/{obj['metadata']['name']}/{c['name']}"
        ref = env_secret(c, REDIS_PASSWORD_ENV)
        if ref is None:
            problems.append(f"{what}: a Redis client without {REDIS_PASSWORD_ENV} from a Secret")
        elif redis_auth and secret_key(ref) not in redis_auth:
            problems.append(f"{what}: {REDIS_PASSWORD_ENV} from {secret_key(ref)}, Redis requires {sorted(redis_auth)}")
        elif redis_auth and ref.get("optional"):
            problems.append(f"{what}: {REDIS_PASSWORD_ENV} is optional though this Redis requires it")
    return problems


def transport_problems(objects: list[dict]) -> list[str]:
    """Every way the rendered objects break the transport rules (module docstring); [] when none."""
    return (scheduler_tls_problems(objects) + router_tls_problems(objects) + agent_tls_problems(objects)
            + redis_auth_problems(objects))


def _uses_redis(objects: list[dict], pod: dict, c: dict) -> bool:
    """Whether a container is a client of Redis: a Redis URL in its env (a literal, or from a
    Secret), its --state, or a router's redis_url setting."""
    if program(c) == "redis-server":
        return False
    if program(c) == "router" and router_settings(objects, pod, c).get("redis_url"):
        return True
    for env in c.get("env", []):
        if env["name"] in ("MERIDIAN_STATE_URL", REDIS_PASSWORD_ENV):
            value = env.get("value")
            if value is None or value.startswith(("redis", "unix")):
                return True
    state = flags(c).get("--state", "")
    return state.startswith(("redis", "rediss"))
