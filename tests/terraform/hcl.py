"""Reading the repository's Terraform offline with python-hcl2 (no terraform providers here): a
module directory's variables, outputs, module calls and blocks, with HCL's quoting removed."""

from __future__ import annotations

import dataclasses
import functools
import pathlib
import re
from typing import Any

import hcl2

ROOT = pathlib.Path(__file__).resolve().parents[2]
TERRAFORM = ROOT / "terraform"
META_ARGUMENTS = {"source", "version", "for_each", "count", "depends_on", "providers"}


def unquote(value: Any) -> Any:
    """python-hcl2 keeps the quotes of string literals and block labels: drop them, recursively."""
    if isinstance(value, str):
        if len(value) >= 2 and value[0] == value[-1] == '"':
            return value[1:-1]
        return value
    if isinstance(value, list):
        return [unquote(v) for v in value]
    if isinstance(value, dict):
        return {unquote(k): unquote(v) for k, v in value.items() if k != "__is_block__"}
    return value


@functools.cache
def parse(path: pathlib.Path) -> dict:
    with path.open() as fh:
        return unquote(hcl2.load(fh))


def tf_files(directory: pathlib.Path) -> list[pathlib.Path]:
    return sorted(directory.glob("*.tf"))


def module_dirs() -> list[pathlib.Path]:
    """Every directory holding .tf files: modules (nested ones too) and examples."""
    return sorted({p.parent for p in TERRAFORM.rglob("*.tf")})


@dataclasses.dataclass(frozen=True)
class Module:
    path: pathlib.Path
    variables: dict[str, dict]
    outputs: dict[str, dict]
    calls: dict[str, dict]  # module name -> arguments (source included)
    blocks: dict[str, list]  # top-level block type -> its entries
    text: str  # every .tf file, concatenated

    def call_target(self, name: str) -> Module:
        return load((self.path / self.calls[name]["source"]).resolve())


@functools.cache
def load(directory: pathlib.Path) -> Module:
    variables: dict[str, dict] = {}
    outputs: dict[str, dict] = {}
    calls: dict[str, dict] = {}
    blocks: dict[str, list] = {}
    texts = []
    for path in tf_files(directory):
        texts.append(path.read_text())
        doc = parse(path)
        for kind, entries in doc.items():
            blocks.setdefault(kind, []).extend(entries)
            for entry in entries:
                if kind == "variable":
                    variables.update(entry)
                elif kind == "output":
                    outputs.update(entry)
                elif kind == "module":
                    calls.update(entry)
    return Module(directory, variables, outputs, calls, blocks, "\n".join(texts))


def references(text: str, prefix: str) -> set[str]:
    """Names used as ``prefix.NAME`` in HCL text (e.g. var.NAME, local.NAME)."""
    return set(re.findall(rf"\b{re.escape(prefix)}\.([A-Za-z_][A-Za-z0-9_-]*)", text))


def resources(module: Module, kind: str) -> dict[str, dict]:
    """Blocks ``resource``/``data`` of one type: name -> body."""
    out: dict[str, dict] = {}
    for entry in module.blocks.get(kind, []):
        out.update(entry)
    return out


def of_type(module: Module, block: str, type_name: str) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for entry in module.blocks.get(block, []):
        out.update(entry.get(type_name, {}))
    return out
