"""Evaluating a module's HCL expressions offline, with Terraform's own semantics: the references a
module makes are replaced by values (a string variable by the marker ``<var.NAME>``, any other
variable by its default or the value the example passes it; a resource, data source or module
attribute by the marker ``<TYPE.NAME.attr>``; a local by its own expression) and the result is
evaluated by ``terraform console`` in an empty directory (no provider needed). A value holding a
``<`` marker is one Terraform only knows at apply time, or one the caller chooses."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
import tempfile
from typing import Any

from tests.terraform import hcl

IDENT = r"[A-Za-z_][A-Za-z0-9_-]*"
# An attribute chain after a reference: .name, [0], ["key"], [p.name].
CHAIN = r"(?:\.[A-Za-z_][A-Za-z0-9_-]*|\[[^\]\[]*\])*"
EXAMPLE = hcl.TERRAFORM / "examples" / "three-clouds"


def is_marker(value: Any) -> bool:
    return isinstance(value, str) and "<" in value


def _interpolation_end(text: str, start: int) -> int:
    """Index just past the ``}`` closing the ``${`` at ``start``."""
    depth, j = 0, start + 1
    while j < len(text):
        depth += text[j] == "{"
        depth -= text[j] == "}"
        j += 1
        if depth == 0:
            return j
    raise ValueError(f"unbalanced interpolation in {text!r}")


def _string(text: str) -> str:
    """A python-hcl2 string (its quotes removed, its ``${...}`` kept) as an HCL expression."""
    if text.startswith("${") and _interpolation_end(text, 0) == len(text):
        return "(" + text[2:-1] + ")"
    out, i = [], 0
    while i < len(text):
        if text.startswith("${", i):
            j = _interpolation_end(text, i)
            out.append(text[i:j])
            i = j
        else:
            out.append({"\\": "\\\\", '"': '\\"', "\n": "\\n"}.get(text[i], text[i]))
            i += 1
    return '"' + "".join(out) + '"'


@dataclasses.dataclass
class Scope:
    """One module: its locals, resources and variable values, as HCL expression text."""

    module: hcl.Module
    variables: dict[str, str]  # name -> HCL expression of its value
    extra: dict[str, str] = dataclasses.field(default_factory=dict)  # e.g. patches.key in a dynamic block

    def __post_init__(self):
        self.locals = {k: v for entry in self.module.blocks.get("locals", []) for k, v in entry.items()}
        self.objects: dict[str, dict] = {}  # "TYPE.NAME" / "data.TYPE.NAME" -> body
        for block in ("resource", "data"):
            for entry in self.module.blocks.get(block, []):
                for type_name, named in entry.items():
                    for name, body in named.items():
                        key = f"{type_name}.{name}" if block == "resource" else f"data.{type_name}.{name}"
                        self.objects[key] = body

    def hcl(self, value: Any, depth: int = 0) -> str:
        """A python-hcl2 value as an HCL expression with this module's references resolved."""
        if depth > 40:
            raise RecursionError("locals refer to each other too deeply")
        if isinstance(value, dict):
            items = ", ".join(f"{json.dumps(k)} = {self.hcl(v, depth)}" for k, v in value.items())
            return "{" + items + "}"
        if isinstance(value, list):
            return "[" + ", ".join(self.hcl(v, depth) for v in value) + "]"
        if isinstance(value, bool):
            return "true" if value else "false"
        if value is None:
            return "null"
        if isinstance(value, (int, float)):
            return repr(value)
        return self.resolve(_string(str(value)), depth)

    def resolve(self, expr: str, depth: int = 0) -> str:
        # Each replacement is set aside behind a token until the end, so that no later pattern
        # matches inside a value already put in (a marker names a reference too).
        table: list[str] = []

        def keep(text: str) -> str:
            table.append(text)
            return f"\x00{len(table) - 1}\x00"

        for name, text in self.extra.items():
            expr = re.sub(rf"\b{re.escape(name)}\b", lambda _m, t=text: keep(t), expr)
        expr = re.sub(rf"\bvar\.({IDENT})", lambda m: keep("(" + self.variables[m.group(1)] + ")"), expr)
        expr = re.sub(rf"\blocal\.({IDENT})",
                      lambda m: keep("(" + self.hcl(self.locals[m.group(1)], depth + 1) + ")"), expr)
        expr = re.sub(r"\bpath\.(module|root|cwd)\b", lambda m: keep(json.dumps(f"<path.{m.group(1)}>")), expr)

        def reference(m: re.Match) -> str:
            ref, base = m.group(0), m.group(1)
            body = self.objects.get(base)
            # kubernetes_*.NAME.metadata[0].name is the name the resource was given.
            if body is not None and ref == f"{base}.metadata[0].name" and "metadata" in body:
                return keep("(" + self.hcl(body["metadata"][0]["name"], depth + 1) + ")")
            return keep(json.dumps(f"<{ref}>"))

        names = sorted(self.objects, key=len, reverse=True)
        if names:
            pattern = r"\b(" + "|".join(re.escape(n) for n in names) + r")(?![A-Za-z0-9_-])" + CHAIN
            expr = re.sub(pattern, reference, expr)
        expr = re.sub(rf"\bmodule\.{IDENT}{CHAIN}", lambda m: keep(json.dumps(f"<{m.group(0)}>")), expr)
        return re.sub("\x00(\\d+)\x00", lambda m: table[int(m.group(1))], expr)


def console(expressions: list[str]) -> list[Any]:
    """Evaluate HCL expressions with ``terraform console`` (one run: a tuple of them), as JSON values."""
    terraform = shutil.which("terraform")
    assert terraform, "terraform is not installed: tests/terraform evaluate the modules' expressions with it"
    with tempfile.TemporaryDirectory() as empty:
        # Fed without a terminal, the console prints only the value of its last line: one line.
        line = "jsonencode([" + ", ".join(expressions) + "])\n"
        result = subprocess.run([terraform, "console"], input=line, capture_output=True, text=True, cwd=empty,
                                timeout=120)
    printed = [text for text in result.stdout.splitlines() if text.strip()]
    assert result.returncode == 0 and len(printed) == 1, f"terraform console: {result.stdout[-2000:]}{result.stderr[-3000:]}"
    return json.loads(json.loads(printed[0]))


def example_call(module: hcl.Module) -> dict | None:
    """The first call of this module in the example (its arguments), if any."""
    example = hcl.load(EXAMPLE)
    for args in example.calls.values():
        if (EXAMPLE / args["source"]).resolve() == module.path.resolve():
            return args
    return None


def scope(module: hcl.Module, overrides: dict[str, str] | None = None) -> Scope:
    """A module with its variables set: each to its default, else (a string, or one the example does
    not pass) to the marker ``<var.NAME>``, else to the example's value (its own references markers);
    ``overrides`` sets string variables."""
    example = hcl.load(EXAMPLE)
    call = example_call(module) or {}
    outer = Scope(example, {name: json.dumps(f"<var.{name}>") for name in example.variables})
    values: dict[str, str] = {}
    for name, body in module.variables.items():
        if "default" in body:
            values[name] = Scope(module, {}).hcl(body["default"])
        elif str(body.get("type", "")) in ("string", "${string}") or name not in call:
            values[name] = json.dumps(f"<var.{name}>")
        else:
            values[name] = outer.hcl(call[name])
    values.update({name: json.dumps(value) for name, value in (overrides or {}).items()})
    return Scope(module, values)


def choices(module: hcl.Module) -> dict[str, list[str]]:
    """String variables a validation limits to a list (``contains([...], var.NAME)``): name -> values."""
    out = {}
    for name, body in module.variables.items():
        for rule in body.get("validation", []):
            m = re.search(r"contains\(\[([^\]]*)\],\s*var\." + re.escape(name) + r"\)", str(rule.get("condition", "")))
            if m:
                out[name] = json.loads("[" + m.group(1) + "]")
    return out
