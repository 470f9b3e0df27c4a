"""checkov (its own virtualenv, .venv/tools/checkov, installed by `make test`: it pins a boto3 that
.venv cannot have) passes on terraform/ with no failed check, and every check skipped in a file
says why (`#checkov:skip=CKV_...:reason`). Run once per session, Terraform framework only."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from tests.terraform import hcl

CHECKOV = hcl.ROOT / ".venv" / "tools" / "checkov" / "bin" / "checkov"
SKIP = re.compile(r"#\s*checkov:skip=([A-Z0-9_]+)(?::(.*))?")


@pytest.fixture(scope="module")
def report() -> dict:
    if not CHECKOV.exists():
        pytest.fail(f"{CHECKOV} is missing: `make test` installs it (make .venv/tools/checkov/.installed-3.3.30)")
    result = subprocess.run([str(CHECKOV), "-d", str(hcl.TERRAFORM), "--framework", "terraform", "-o", "json",
                             "--quiet", "--compact", "--skip-download"], capture_output=True, text=True, timeout=600)
    assert result.stdout.strip(), result.stderr[-3000:]
    data = json.loads(result.stdout)
    reports = data if isinstance(data, list) else [data]
    assert len(reports) == 1 and reports[0]["check_type"] == "terraform", [r.get("check_type") for r in reports]
    return reports[0]


@pytest.mark.timeout(600)
def test_checkov_finds_no_failed_check(report):
    """No failed check and no parsing error over every module and the example."""
    summary = report["summary"]
    failed = [(f["check_id"], f["resource"], f["file_path"]) for f in report["results"].get("failed_checks", [])]
    assert summary["parsing_errors"] == 0
    assert failed == [], failed
    assert summary["passed"] > 100 and summary["resource_count"] > 100


def test_every_skip_carries_a_reason():
    """A skipped check names its reason in the file, next to the resource it concerns."""
    skips = []
    for path in sorted(hcl.TERRAFORM.rglob("*.tf")):
        for line in path.read_text().splitlines():
            m = SKIP.search(line)
            if m:
                skips.append((path.name, m.group(1), (m.group(2) or "").strip()))
    assert skips, "no skip at all: then this test has nothing to check (and checkov nothing to skip)"
    without = [(f, c) for f, c, reason in skips if len(reason) < 20]
    assert not without, f"skips without a reason: {without}"
