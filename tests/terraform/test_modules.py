"""The Terraform under terraform/, checked offline (no provider can be downloaded here, so
`terraform init`/`validate` cannot run): every file parses, every module is laid out and documented
the same way, every declared variable is used, every module call passes only declared variables and
every required one, outputs read from a module exist, and versions are pinned.

Pinning rule enforced: each provider is pinned to one patch-level minor, `~> X.Y.Z` (patches of
X.Y only) or an exact `X.Y.Z`, and the same provider has the same pin in every module;
`required_version` has both a lower and an upper bound."""

from __future__ import annotations

import re

import pytest

from tests.terraform import hcl

MODULES = [d for d in hcl.module_dirs() if "modules" in d.relative_to(hcl.TERRAFORM).parts]
ALL = hcl.module_dirs()
PIN = re.compile(r"^(~>\s*\d+\.\d+\.\d+|=?\s*\d+\.\d+\.\d+)$")


def _id(path) -> str:
    return str(path.relative_to(hcl.TERRAFORM))


def test_every_tf_file_parses():
    """Every .tf file under terraform/ is valid HCL (python-hcl2) and there are modules to check."""
    files = sorted(hcl.TERRAFORM.rglob("*.tf"))
    assert len(files) >= 20
    for path in files:
        assert isinstance(hcl.parse(path), dict), path
    names = {d.name for d in MODULES}
    assert {"eks-gpu-cluster", "gke-gpu-cluster", "aks-gpu-cluster", "meridian-control-plane"} <= names


@pytest.mark.parametrize("directory", MODULES, ids=_id)
def test_module_layout_and_documentation(directory):
    """Each module has versions.tf, variables.tf, outputs.tf and a README whose tables name every
    input and output; every variable has a type and a description, every output a description."""
    for name in ("versions.tf", "variables.tf", "outputs.tf", "README.md"):
        assert (directory / name).exists(), f"{_id(directory)}: {name} missing"
    module = hcl.load(directory)
    readme = (directory / "README.md").read_text()
    for name, body in module.variables.items():
        assert body.get("description"), f"{_id(directory)}: variable {name} has no description"
        assert "type" in body, f"{_id(directory)}: variable {name} has no type"
        assert f"`{name}`" in readme, f"{_id(directory)}/README.md: input {name} is not documented"
    for name, body in module.outputs.items():
        assert body.get("description"), f"{_id(directory)}: output {name} has no description"
        assert f"`{name}`" in readme, f"{_id(directory)}/README.md: output {name} is not documented"
    assert "```hcl" in readme, f"{_id(directory)}/README.md: no example"


@pytest.mark.parametrize("directory", ALL, ids=_id)
def test_every_declared_variable_is_used(directory):
    """A variable no expression reads is a knob that does nothing."""
    module = hcl.load(directory)
    used = hcl.references(module.text, "var")
    unused = sorted(set(module.variables) - used)
    assert not unused, f"{_id(directory)}: variables declared but never used: {unused}"
    undeclared = sorted(used - set(module.variables))
    assert not undeclared, f"{_id(directory)}: var.{undeclared} used but not declared"


@pytest.mark.parametrize("directory", ALL, ids=_id)
def test_locals_are_declared(directory):
    """Every local.NAME read is declared in a locals block of the same module."""
    module = hcl.load(directory)
    declared = {k for entry in module.blocks.get("locals", []) for k in entry}
    missing = sorted(hcl.references(module.text, "local") - declared)
    assert not missing, f"{_id(directory)}: local.{missing} not declared"


def _calls():
    for directory in ALL:
        module = hcl.load(directory)
        for name in module.calls:
            yield pytest.param(directory, name, id=f"{_id(directory)}:{name}")


@pytest.mark.parametrize("directory, name", list(_calls()))
def test_module_calls_pass_declared_and_required_variables(directory, name):
    """A module call passes only variables the module declares, and every one without a default."""
    caller = hcl.load(directory)
    target = caller.call_target(name)
    args = set(caller.calls[name]) - hcl.META_ARGUMENTS
    unknown = sorted(args - set(target.variables))
    assert not unknown, f"{_id(directory)}: module {name} ({_id(target.path)}) has no variable(s) {unknown}"
    required = {v for v, body in target.variables.items() if "default" not in body}
    missing = sorted(required - args)
    assert not missing, f"{_id(directory)}: module {name} ({_id(target.path)}) needs {missing}"


@pytest.mark.parametrize("directory", ALL, ids=_id)
def test_outputs_read_from_modules_exist(directory):
    """Every module.NAME[...].OUTPUT read names a module call of this directory and an output it has."""
    module = hcl.load(directory)
    for call, output in re.findall(r"\bmodule\.([A-Za-z0-9_-]+)(?:\[[^\]]*\])?\.([A-Za-z0-9_-]+)", module.text):
        assert call in module.calls, f"{_id(directory)}: module.{call} is not called here"
        target = module.call_target(call)
        assert output in target.outputs, f"{_id(directory)}: module.{call}.{output}: {_id(target.path)} has no such output"


def test_provider_versions_are_pinned():
    """Providers pinned to a patch-level minor (same pin everywhere); Terraform bounded both ways."""
    pins: dict[str, set[str]] = {}
    for directory in ALL:
        for entry in hcl.load(directory).blocks.get("terraform", []):
            required_version = entry.get("required_version")
            assert required_version and ">=" in required_version and "<" in required_version.replace("<=", "<"), \
                f"{_id(directory)}: required_version {required_version!r} needs a lower and an upper bound"
            for providers in entry.get("required_providers", []):
                for name, spec in providers.items():
                    version = spec.get("version", "") if isinstance(spec, dict) else ""
                    assert PIN.match(version.strip()), \
                        f"{_id(directory)}: provider {name} version {version!r}: pin it as '~> X.Y.Z' or 'X.Y.Z'"
                    assert spec.get("source"), f"{_id(directory)}: provider {name} has no source"
                    pins.setdefault(name, set()).add(version.strip())
    assert pins, "no required_providers found"
    drift = {name: sorted(v) for name, v in pins.items() if len(v) > 1}
    assert not drift, f"one provider, several pins: {drift}"


def test_the_pin_rule_rejects_ranges():
    """The rule above refuses open ranges and minor-level pins."""
    for bad in (">= 5.0", "~> 5.82", "5.x", "", ">= 1.0, < 2.0"):
        assert not PIN.match(bad)
    for good in ("~> 5.82.0", "5.82.2", "= 5.82.2"):
        assert PIN.match(good)
