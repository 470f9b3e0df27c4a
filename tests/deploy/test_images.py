"""The container images under deploy/images/: hadolint passes on every Dockerfile, and each image's
Python requirement set (the extras and constraints its Dockerfile installs, read from the file so the
test cannot drift from it) installs into a fresh virtualenv where every entry point answers --help.
Then, in the control-plane set, each component's own smaller set (docs/kubernetes.md, "Images") is
enforced on its entry point and its modules: a router never imports OR-Tools or a cloud SDK, an
agent only its cloud's SDK."""

from __future__ import annotations

import http.server
import json
import os
import pathlib
import re
import shlex
import shutil
import ssl
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence

import pytest
from packaging import markers, requirements, utils

REPO = pathlib.Path(__file__).resolve().parents[2]
IMAGES = REPO / "deploy" / "images"
DOCKERFILES = sorted(IMAGES.glob("*.Dockerfile"))
HADOLINT = pathlib.Path(sys.executable).with_name("hadolint")
# What the images copy into their build context (.dockerignore keeps everything else out).
CONTEXT = ("pyproject.toml", "README.md", "meridian", "scheduler", "router", "agents", "runtime_adapter")

# Each image: its Dockerfile and the commands its entry point offers (argv after the console script
# or interpreter; every one must answer --help with exit 0 in the image's set).
ENTRY_POINTS = {
    "control-plane": [["meridian", "scheduler", "--help"], ["meridian", "router", "--help"],
                      ["meridian", "agent", "--help"]],
    "replica": [["python", "-m", "runtime_adapter", "serve", "--help"]],
}

# The smaller builds of the control-plane image (control-plane.Dockerfile's header and
# docs/kubernetes.md list them): extras -> the entry point it runs and the packages whose modules
# must import with only that set (module prefixes left out: test helpers, other clouds' providers).
COMPONENT_SETS = {
    "router": ("router", ["router", "--help"], ["router"], ["router.testing"]),
    "scheduler": ("scheduler", ["scheduler", "--help"], ["scheduler"], ["scheduler.testing"]),
    "agent,aws,kubernetes": ("agent", ["agent", "--help"], ["agents", "runtime_adapter", "agents.providers.aws"],
                             ["agents.testing", "agents.providers.gcp", "agents.providers.azure",
                              "agents.providers.aks"]),
    "agent,gcp,kubernetes": ("agent", ["agent", "--help"], ["agents", "runtime_adapter", "agents.providers.gcp"],
                             ["agents.testing", "agents.providers.aws", "agents.providers.azure",
                              "agents.providers.aks"]),
    "agent,azure,kubernetes": ("agent", ["agent", "--help"], ["agents", "runtime_adapter", "agents.providers.azure",
                                                                "agents.providers.aks"],
                               ["agents.testing", "agents.providers.aws", "agents.providers.gcp"]),
}
# Modules that must be refused in each set (so the guard is seen to bite): they need a
# distribution the set leaves out.
REFUSED = {
    "router": ["scheduler.solver.linear", "agents.providers.aws", "agents.providers.gcp"],
    "scheduler": ["agents.providers.aws", "agents.providers.azure"],
    "agent,aws,kubernetes": ["agents.providers.gcp", "agents.providers.azure", "agents.providers.aks",
                             "scheduler.solver.linear"],
    "agent,gcp,kubernetes": ["agents.providers.aws", "agents.providers.azure", "agents.providers.aks",
                             "scheduler.solver.linear"],
    "agent,azure,kubernetes": ["agents.providers.aws", "agents.providers.gcp", "scheduler.solver.linear"],
}
# Distributions no component set may pull in, whatever the extras resolve to.
HEAVY = {"router": {"ortools", "highspy", "boto3", "botocore", "google-cloud-container", "azure-mgmt-compute",
                    "azure-identity", "kubernetes-asyncio", "numpy", "pandas"},
         "agent,aws,kubernetes": {"ortools", "highspy", "google-cloud-container", "azure-mgmt-compute",
                                  "azure-mgmt-containerservice"},
         "agent,gcp,kubernetes": {"ortools", "highspy", "boto3", "botocore", "azure-mgmt-compute",
                                  "azure-mgmt-containerservice"},
         "agent,azure,kubernetes": {"ortools", "highspy", "boto3", "botocore", "google-cloud-container"}}


# --- reading a Dockerfile -----------------------------------------------------------------------

def instructions(path: pathlib.Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per instruction, continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        word, _, rest = line.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def arg_defaults(path: pathlib.Path) -> dict[str, str]:
    """ARG NAME=default, as the Dockerfile declares them (quotes removed)."""
    defaults: dict[str, str] = {}
    for word, rest in instructions(path):
        if word == "ARG" and "=" in rest:
            name, _, value = rest.partition("=")
            defaults[name.strip()] = value.strip().strip('"')
    return defaults


INSTALL = re.compile(r'pip install -c (?P<constraints>\S+) "\$\(ls (?P<wheels>\S+)/meridian-\*\.whl\)\[(?P<extras>[^\]]+)\]"')


def install_line(path: pathlib.Path) -> tuple[str, str]:
    """The image's one install of the project: (extras, repository file the -c constraints come from)."""
    found = [m for word, rest in instructions(path) if word == "RUN" for m in INSTALL.finditer(rest)]
    assert len(found) == 1, f"{path.name}: expected one `pip install -c FILE \"$(ls DIR/meridian-*.whl)[EXTRAS]\"`"
    match = found[0]
    extras = match["extras"]
    for name, value in arg_defaults(path).items():
        extras = extras.replace("${" + name + "}", value)
    assert "$" not in extras, f"{path.name}: extras {extras!r} use an ARG without a default"
    return extras, copied_from(path, match["constraints"])


def copied_from(path: pathlib.Path, target: str) -> str:
    """The repository file that a COPY (from the build context) puts at ``target``."""
    workdir = "/"
    for word, rest in instructions(path):
        if word == "WORKDIR":
            workdir = rest
        if word == "COPY" and "--from=" not in rest:
            *sources, dest = shlex.split(rest)
            dest_dir = dest if dest.startswith("/") else os.path.join(workdir, dest)
            for source in sources:
                placed = os.path.join(dest_dir, os.path.basename(source)) if dest.endswith("/") else dest_dir
                wanted = target if target.startswith("/") else os.path.join(workdir, target)
                if os.path.normpath(placed) == os.path.normpath(wanted):
                    return source
    raise AssertionError(f"{path.name}: no COPY from the build context puts a file at {target}")


# --- virtualenvs --------------------------------------------------------------------------------

def venv_python(venv: pathlib.Path) -> pathlib.Path:
    return venv / "bin" / "python"


def start_install(venv: pathlib.Path, wheel: pathlib.Path, extras: str, constraints: pathlib.Path,
                  log: pathlib.Path) -> subprocess.Popen:
    """A fresh virtualenv without pip (this interpreter's pip installs into it: no ensurepip), then
    the wheel with ``extras`` under ``constraints``; bytecode is not compiled (it changes no set)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    cmd = [sys.executable, "-m", "pip", "--python", str(venv_python(venv)), "install", "--no-compile",
           "--disable-pip-version-check", "--no-input", "--progress-bar", "off",
           "-c", str(constraints), f"{wheel}[{extras}]"]
    return subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT)


def build_wheel(out: pathlib.Path) -> pathlib.Path:
    """The project's wheel, built from a copy of exactly the images' build context."""
    src = out / "src"
    for name in CONTEXT:
        origin = REPO / name
        if origin.is_dir():
            shutil.copytree(origin, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            src.mkdir(parents=True, exist_ok=True)
            shutil.copy2(origin, src / name)
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--disable-pip-version-check", "-q",
           "--wheel-dir", str(out / "wheels"), str(src)]
    try:  # this venv's setuptools builds it when it is recent enough (pyproject: setuptools>=77)
        import setuptools
        if int(setuptools.__version__.split(".")[0]) >= 77:
            cmd.insert(4, "--no-build-isolation")
    except ImportError:
        pass
    subprocess.run(cmd, check=True, capture_output=True)
    (wheel,) = (out / "wheels").glob("meridian-*.whl")
    return wheel


@pytest.fixture(scope="module")
def image_venvs() -> Iterator[dict[str, pathlib.Path]]:
    """image name -> a fresh virtualenv holding exactly that image's requirement set (installed in
    parallel, one virtualenv per image)."""
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="meridian-images-"))
    try:
        wheel = build_wheel(tmp)
        procs = {}
        for name in ENTRY_POINTS:
            dockerfile = IMAGES / f"{name}.Dockerfile"
            extras, constraints = install_line(dockerfile)
            procs[name] = (start_install(tmp / name, wheel, extras, REPO / constraints, tmp / f"{name}.log"),
                           tmp / f"{name}.log")
        for name, (proc, log) in procs.items():
            assert proc.wait(timeout=900) == 0, f"installing the {name} image's set failed:\n{log.read_text()[-4000:]}"
        yield {name: tmp / name for name in ENTRY_POINTS}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run_entry(venv: pathlib.Path, argv: Sequence[str]) -> subprocess.CompletedProcess:
    exe = venv_python(venv) if argv[0] == "python" else venv / "bin" / argv[0]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    # Run outside the repository so that its source tree cannot stand in for the installed wheel.
    return subprocess.run([str(exe), *argv[1:]], capture_output=True, text=True, timeout=120, env=env,
                          cwd=tempfile.gettempdir())


# --- the closure of a set of extras (from the venv's installed metadata) ------------------------

def installed(site: pathlib.Path) -> dict[str, object]:
    import importlib.metadata as md
    return {utils.canonicalize_name(d.metadata["Name"]): d for d in md.distributions(path=[str(site)])}


def closure(dists: Mapping[str, object], root: str, extras: set[str]) -> set[str]:
    """Every distribution ``root[extras]`` requires, transitively, with markers evaluated here."""
    seen: set[tuple[str, frozenset[str]]] = set()
    out: set[str] = set()
    todo = [(utils.canonicalize_name(root), frozenset(extras))]
    while todo:
        name, wanted = todo.pop()
        if (name, wanted) in seen:
            continue
        seen.add((name, wanted))
        out.add(name)
        for text in dists[name].requires or []:  # type: ignore[attr-defined]
            req = requirements.Requirement(text)
            if req.marker is not None and not any(
                    req.marker.evaluate({"extra": e}) for e in (wanted | {""})):
                continue
            todo.append((utils.canonicalize_name(req.name), frozenset(req.extras)))
    return out


GUARD = r"""
import importlib, importlib.abc, importlib.machinery, importlib.metadata as md, json, os, pkgutil, sys
forbidden, packages, skip, argv, refused = json.loads(sys.argv[1])
owner = {}
for dist in md.distributions():
    name = dist.metadata["Name"]
    if name.lower().replace("_", "-").replace(".", "-") in forbidden:
        for f in dist.files or []:
            owner[os.path.realpath(dist.locate_file(f))] = name

class Guard(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.origin and os.path.realpath(spec.origin) in owner:
            raise ModuleNotFoundError(f"{fullname} comes from {owner[os.path.realpath(spec.origin)]}, "
                                      "which this set does not hold")
        return None

sys.meta_path.insert(0, Guard())
from meridian.cli import main as cli_main
code = cli_main.main(argv)
imported = []
for pkg in packages:
    mod = importlib.import_module(pkg)
    imported.append(pkg)
    for info in pkgutil.walk_packages(getattr(mod, "__path__", []), pkg + "."):
        if info.name.endswith("__main__") or any(info.name == s or info.name.startswith(s + ".") for s in skip):
            continue
        importlib.import_module(info.name)
        imported.append(info.name)
refusals = {}
for name in refused:
    try:
        importlib.import_module(name)
        refusals[name] = ""
    except ModuleNotFoundError as exc:
        refusals[name] = str(exc)
print(json.dumps({"exit": code, "imported": imported, "refused": refusals}))
"""


# --- tests --------------------------------------------------------------------------------------

def test_every_image_has_a_dockerfile_and_an_entry_point_table():
    """deploy/images holds exactly the two images this test knows the entry points of."""
    assert {p.name.removesuffix(".Dockerfile") for p in DOCKERFILES} == set(ENTRY_POINTS)


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_hadolint_passes(dockerfile):
    """hadolint (every rule, style level included) finds nothing; an ignore needs its reason on the line before."""
    result = subprocess.run([str(HADOLINT), "--failure-threshold", "style", "--no-color", str(dockerfile)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = dockerfile.read_text().splitlines()
    for i, line in enumerate(lines):
        if "hadolint ignore" in line:
            assert i > 0 and lines[i - 1].startswith("#") and len(lines[i - 1]) > 20, \
                f"{dockerfile.name}:{i + 1}: an ignored rule needs a comment saying why on the line before"


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_images_are_pinned_non_root_and_never_hold_weights(dockerfile):
    """Every base is an exact tag (no latest, no floating major), the last USER is numeric and not
    root, the project installs under constraints.txt, and no model weights are copied in."""
    steps = instructions(dockerfile)
    defaults = arg_defaults(dockerfile)
    for word, rest in steps:
        if word == "FROM":
            image = rest.split()[0]
            image = re.sub(r"\$\{(\w+)\}", lambda m: defaults.get(m[1], m[0]), image)
            if image in {a for w, r in steps if w == "FROM" for a in r.split()[2:3]}:
                continue  # a stage name
            assert ":" in image and not image.endswith(":latest"), f"{dockerfile.name}: base {image!r} is not pinned"
            tag = image.rsplit(":", 1)[1]
            assert re.search(r"\d+\.\d+\.\d+", tag), f"{dockerfile.name}: base tag {tag!r} is not an exact version"
    users = [rest for word, rest in steps if word == "USER"]
    assert users and re.fullmatch(r"[1-9]\d*(:\d+)?", users[-1]), f"{dockerfile.name}: last USER {users[-1:]}"
    assert install_line(dockerfile)[1] == "constraints.txt"
    copies = " ".join(rest for word, rest in steps if word in ("COPY", "ADD"))
    assert not re.search(r"\.(safetensors|bin|gguf|pt)\b|models?/", copies), f"{dockerfile.name}: copies weights"
    assert any(word == "HEALTHCHECK" for word, _ in steps), f"{dockerfile.name}: no HEALTHCHECK"


def test_replica_image_is_the_pinned_sglang_release():
    """The replica image starts from the official SGLang image at exactly 0.5.23 and runs the adapter."""
    dockerfile = IMAGES / "replica.Dockerfile"
    assert arg_defaults(dockerfile)["SGLANG_IMAGE"].startswith("lmsysorg/sglang:v0.5.23")
    entry = [rest for word, rest in instructions(dockerfile) if word in ("ENTRYPOINT", "CMD")]
    assert json.loads(entry[0]) + json.loads(entry[1]) == ["python3", "-m", "runtime_adapter", "serve"]
    assert install_line(dockerfile)[0] == "replica"


def test_dockerignore_keeps_the_context_to_what_the_images_copy():
    """The build context holds the packaged sources and metadata only (no .venv, tests or .git)."""
    lines = [ln for ln in (REPO / ".dockerignore").read_text().splitlines() if ln and not ln.startswith("#")]
    assert lines[0] == "*", "the first rule must exclude everything"
    kept = {ln[1:].rstrip("/") for ln in lines if ln.startswith("!")}
    assert kept == set(CONTEXT) | {"constraints.txt"}


@pytest.mark.timeout(1200)
@pytest.mark.parametrize("image,argv", [(img, argv) for img, cmds in ENTRY_POINTS.items() for argv in cmds],
                         ids=lambda v: v if isinstance(v, str) else " ".join(v[1:]))
def test_entry_point_answers_help_in_a_fresh_venv_with_the_images_set(image_venvs, image, argv):
    """Installed alone (the image's extras, constraints.txt), each entry point starts and prints its usage."""
    result = run_entry(image_venvs[image], argv)
    assert result.returncode == 0, f"{' '.join(argv)} in the {image} set:\n{result.stdout}\n{result.stderr}"
    assert "usage:" in (result.stdout + result.stderr).lower()


@pytest.mark.timeout(1200)
@pytest.mark.parametrize("extras", list(COMPONENT_SETS))
def test_component_runs_on_its_own_set(image_venvs, extras):
    """A component's entry point and every one of its modules import with only its extras' closure:
    a module of a distribution outside it (OR-Tools for a router, boto3 for a GCP agent) is refused."""
    venv = image_venvs["control-plane"]
    (site,) = (venv / "lib").glob("python3*/site-packages")
    dists = installed(site)
    allowed = closure(dists, "meridian", set(extras.split(",")))
    assert not allowed & HEAVY.get(extras, set()), f"[{extras}] pulls in {sorted(allowed & HEAVY[extras])}"
    forbidden = sorted(set(dists) - allowed)
    _name, argv, packages, skip = COMPONENT_SETS[extras]
    payload = json.dumps([forbidden, packages, skip, argv, REFUSED[extras]])
    result = subprocess.run([str(venv_python(venv)), "-c", GUARD, payload],
                            capture_output=True, text=True, timeout=300, cwd=tempfile.gettempdir())
    assert result.returncode == 0, f"[{extras}] (outside it: {forbidden}):\n{result.stderr[-3000:]}"
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["exit"] == 0
    assert len(report["imported"]) > 5
    for module, error in report["refused"].items():
        assert "which this set does not hold" in error, f"[{extras}]: {module} imported, yet it needs a left-out package"


def test_closure_follows_extras_and_markers():
    """The closure used above includes an extra's own extras and leaves out what a marker excludes."""
    class D:
        def __init__(self, requires):
            self.requires = requires
    dists = {"meridian": D(['a==1; extra == "x"', 'meridian[y]; extra == "x"', 'b==1; extra == "y"',
                            'c==1; extra == "z"', 'd==1; python_version < "3"']),
             "a": D(["e[f]"]), "b": D([]), "c": D([]), "d": D([]), "e": D(['g; extra == "f"', 'h; extra == "k"']),
             "g": D([]), "h": D([])}
    assert closure(dists, "meridian", {"x"}) == {"meridian", "a", "b", "e", "g"}
    assert markers.Marker('extra == "x"').evaluate({"extra": "x"})


def _healthcheck_argv(dockerfile: pathlib.Path) -> list[str]:
    rest = next(r for w, r in instructions(dockerfile) if w == "HEALTHCHECK")
    return json.loads(rest.split(" CMD ", 1)[1])


def test_the_control_plane_healthcheck_works_with_tls_on_the_admin_port(tmp_path):
    """The image's HEALTHCHECK command, run as Docker runs it: 0 against a plain /healthz, 0 over
    HTTPS with MERIDIAN_HEALTHCHECK_CA_FILE naming the CA, not 0 without it or with another CA."""
    from tests.integration import tls_certs  # noqa: PLC0415

    pki = tls_certs.make(tmp_path / "pki")
    cert, key = tls_certs.server_for(pki, ("127.0.0.1", "localhost"), tmp_path / "pki", "admin")

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200 if self.path == "/healthz" else 404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            return

    def serve(tls: bool) -> http.server.ThreadingHTTPServer:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Health)
        if tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(cert, key)
            server.socket = ctx.wrap_socket(server.socket, server_side=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server

    argv = [sys.executable, *_healthcheck_argv(IMAGES / "control-plane.Dockerfile")[1:]]

    def check(url: str, **env: str) -> int:
        full = {k: v for k, v in os.environ.items() if not k.startswith("MERIDIAN_HEALTHCHECK")}
        full.update(MERIDIAN_HEALTHCHECK_URL=url, **env)
        return subprocess.run(argv, env=full, capture_output=True, timeout=30).returncode

    plain, secure = serve(False), serve(True)
    try:
        assert check(f"http://127.0.0.1:{plain.server_port}/healthz") == 0
        url = f"https://127.0.0.1:{secure.server_port}/healthz"
        assert check(url, MERIDIAN_HEALTHCHECK_CA_FILE=pki.ca) == 0
        assert check(url) != 0
        assert check(url, MERIDIAN_HEALTHCHECK_CA_FILE=pki.other_ca) != 0
    finally:
        plain.shutdown()
        secure.shutdown()
