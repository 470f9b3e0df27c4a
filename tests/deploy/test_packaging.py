"""Packaging by component: pyproject.toml's extras and constraints.txt agree, the install commands
use them, and the CLI imports a component only in the subcommand that runs it."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys
import tomllib

from packaging import requirements, utils

REPO = pathlib.Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
EXTRAS = PROJECT["optional-dependencies"]


def constraints() -> dict[str, str]:
    pins = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, sep, version = line.partition("==")
            assert sep, f"constraints.txt: {line!r} is not NAME==VERSION"
            pins[utils.canonicalize_name(name)] = version
    return pins


def all_requirements() -> list[requirements.Requirement]:
    texts = PROJECT["dependencies"] + [r for reqs in EXTRAS.values() for r in reqs]
    return [requirements.Requirement(t) for t in texts]


def test_extras_name_every_component_and_cloud():
    """Each image's part has its extra, and `all` holds every runtime extra (not test, not dev)."""
    assert {"scheduler", "router", "agent", "aws", "gcp", "azure", "kubernetes", "client", "replica", "all", "test",
            "dev"} <= set(EXTRAS)
    (everything,) = EXTRAS["all"]
    named = set(requirements.Requirement(everything).extras)
    assert named == set(EXTRAS) - {"all", "test", "dev"}


def test_core_holds_only_what_the_kernel_imports():
    """The core dependencies are the kernel's: no solver, no cloud SDK, no HTTP server in them."""
    core = {utils.canonicalize_name(requirements.Requirement(r).name) for r in PROJECT["dependencies"]}
    assert core == {"grpcio", "protobuf", "pydantic", "pyyaml", "rich"}


def test_router_and_agents_need_no_solver_and_each_cloud_its_own_sdk():
    """The router extra holds neither OR-Tools nor a cloud SDK; each cloud extra holds only that cloud's SDK."""
    def names(extra: str) -> set[str]:
        return {utils.canonicalize_name(requirements.Requirement(r).name) for r in EXTRAS[extra]}
    sdks = {"boto3", "google-cloud-container", "azure-mgmt-compute", "azure-mgmt-containerservice", "azure-identity",
                "kubernetes-asyncio"}
    assert not names("router") & (sdks | {"ortools", "highspy"})
    assert not names("agent") & (sdks | {"ortools", "highspy"})
    assert names("aws") == {"boto3"} and names("gcp") == {"google-cloud-container"}
    assert names("azure") == {"azure-mgmt-compute", "azure-mgmt-containerservice", "azure-identity"}


def test_every_pin_in_pyproject_agrees_with_constraints():
    """Every package pyproject.toml names is in constraints.txt, at the same version where it is pinned
    and inside its range where it is not (so the constraints cannot drift from the declared needs)."""
    pins = constraints()
    for req in all_requirements():
        name = utils.canonicalize_name(req.name)
        if name == "meridian":
            continue
        assert name in pins, f"{req.name} is in pyproject.toml but not in constraints.txt (run make constraints)"
        assert req.specifier.contains(pins[name], prereleases=True), \
            f"{req.name}: constraints.txt pins {pins[name]}, pyproject.toml asks {req.specifier}"
    assert "meridian" not in pins, "constraints.txt must not pin the project itself"


def test_install_commands_use_the_constraints():
    """`make test`/`make demo` install every extra under constraints.txt, and the Makefile can refresh it."""
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"pip install --quiet -e '\.\[all,test,dev\]' -c constraints\.txt", makefile)
    assert re.search(r"^constraints:", makefile, re.M) and "pip freeze --exclude meridian" in makefile


def test_cli_start_imports_no_component():
    """`meridian --help` and `meridian validate` load the kernel only: no scheduler, router, agent,
    OR-Tools or cloud SDK module is imported."""
    code = ("import sys; from meridian.cli import main; main.main(['validate', 'examples/capacity-policy.yaml']);"
            "heavy = ('scheduler', 'router', 'agents', 'runtime_adapter', 'ortools', 'boto3', 'botocore', 'azure',"
            " 'kubernetes_asyncio', 'aiohttp', 'numpy');"
            "print(sorted({m.split('.')[0] for m in sys.modules} & set(heavy)) or 'none')")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "none"
