"""The generated gRPC stubs in meridian/v1 must match the .proto sources."""

from __future__ import annotations

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[3]


def _generate(out: pathlib.Path, proto_root: pathlib.Path) -> None:
    # grpc_tools must not share a process with ortools (see docs/architecture.md), so run protoc
    # as a subprocess.
    protos = sorted(str(p.relative_to(proto_root)) for p in (proto_root / "meridian" / "v1").glob("*.proto"))
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{proto_root}", f"--python_out={out}",
         f"--grpc_python_out={out}", f"--pyi_out={out}", *protos],
        check=True, cwd=proto_root, capture_output=True,
    )


def _generated_files(root: pathlib.Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted((root / "meridian" / "v1").glob("*_pb2*.py*"))}


def test_committed_stubs_match_protos(tmp_path):
    """Regenerating from proto/ yields exactly the committed stubs (run `make stubs` after editing a .proto)."""
    _generate(tmp_path, ROOT / "proto")
    fresh = _generated_files(tmp_path)
    committed = _generated_files(ROOT)
    assert fresh.keys() == committed.keys(), "stub files differ from the .proto set: run `make stubs`"
    stale = [name for name in fresh if fresh[name] != committed[name]]
    assert not stale, f"stubs out of date with proto/: {stale}; run `make stubs`"


def test_drift_is_detected(tmp_path):
    """A changed .proto produces different stubs, so the comparison above can fail."""
    proto_copy = tmp_path / "proto"
    (proto_copy / "meridian" / "v1").mkdir(parents=True)
    for src in (ROOT / "proto" / "meridian" / "v1").glob("*.proto"):
        (proto_copy / "meridian" / "v1" / src.name).write_text(src.read_text())
    target = proto_copy / "meridian" / "v1" / "routing.proto"
    target.write_text(target.read_text().replace("message TrafficReportAck {", "message TrafficReportAck {\n  string note = 9;"))
    out = tmp_path / "out"
    out.mkdir()
    _generate(out, proto_copy)
    assert _generated_files(out)["routing_pb2.py"] != _generated_files(ROOT)["routing_pb2.py"]


def test_proto_is_not_a_python_package():
    """proto/ holds .proto sources only; the module name `proto` belongs to proto-plus."""
    assert not (ROOT / "proto" / "__init__.py").exists()
    import proto  # proto-plus, installed by google-cloud-container

    assert "proto_plus" in repr(proto.__spec__.origin).replace("-", "_") or hasattr(proto, "Message")
