"""meridian.client is part of the kernel: it imports no component."""

from __future__ import annotations

import ast
import pathlib

import meridian.client

COMPONENTS = {"scheduler", "router", "agents", "runtime_adapter"}


def test_client_imports_no_component():
    """No module of meridian/client imports scheduler, router, agents or runtime_adapter."""
    root = pathlib.Path(meridian.client.__file__).parent
    offenders = []
    for path in sorted(root.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] in COMPONENTS]
    assert not offenders
    assert len(list(root.glob("*.py"))) >= 10


def test_public_face():
    """Everything in __all__ exists."""
    assert all(hasattr(meridian.client, name) for name in meridian.client.__all__)
