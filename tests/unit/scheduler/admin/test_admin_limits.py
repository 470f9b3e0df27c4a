"""Hostile admin API input: every over-limit body or spec file gets a 4xx JSON answer naming the
limit, stores nothing, and takes bounded time (none expands in memory)."""

from __future__ import annotations

import json
import time

import aiohttp
import pytest
from tests.unit.scheduler.service_harness import ADMIN_TOKEN

from meridian.spec import loader
from scheduler.admin import api

HEADERS = {"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": "application/json"}
LAUGHS = "a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(
    f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True))


async def post(svc, body: bytes) -> tuple[int, dict]:
    url = f"http://127.0.0.1:{svc.admin_port}/v1/apply"
    async with aiohttp.ClientSession() as session, session.post(url, data=body, headers=HEADERS) as resp:
        return resp.status, await resp.json(content_type=None)


def files(*texts: str) -> bytes:
    return json.dumps({"files": [{"name": f"f{i}.yaml", "text": t} for i, t in enumerate(texts)]}).encode()


def refusals(svc, limit: str) -> float:
    return svc.metrics.registry.get_sample_value("meridian_scheduler_limit_refusals_total",
                                                 {"surface": "admin", "limit": limit}) or 0.0


async def test_a_body_over_the_size_limit_is_413(make_service):
    """A body larger than the admin API accepts is refused with 413 naming the limit, and counted."""
    svc = await make_service()
    status, body = await post(svc, files("x" * (api.MAX_BODY_BYTES + 1)))
    assert status == 413 and str(api.MAX_BODY_BYTES) in body["error"]
    assert refusals(svc, "body_bytes") == 1


async def test_too_many_files_and_deep_json_are_400(make_service):
    """More files than allowed, and JSON nested past what the parser takes, are clear 400s."""
    svc = await make_service()
    status, body = await post(svc, files(*["a: 1"] * (api.MAX_FILES + 1)))
    assert status == 400 and f"at most {api.MAX_FILES}" in body["error"] and refusals(svc, "files") == 1
    status, body = await post(svc, b"[" * 200_000 + b"]" * 200_000)
    assert status == 400 and "nested too deeply" in body["error"]


@pytest.mark.parametrize("text,needle", [
    (LAUGHS, "expands to more than"),
    ("&a [*a]", "refers to a node that contains it"),
    ("[" * 100_000, f"nesting deeper than {loader.MAX_DEPTH} levels"),
    ("---\na: 1\n" * (loader.MAX_DOCUMENTS + 1), f"more than {loader.MAX_DOCUMENTS} documents"),
    ("# pad\n" * (loader.MAX_FILE_BYTES // 6 + 1), f"at most {loader.MAX_FILE_BYTES} bytes"),
    ("".join(f"k{i}: &x{i} 1\nv{i}: *x{i}\n" for i in range(loader.MAX_ALIASES + 1)),
     f"more than {loader.MAX_ALIASES} aliases"),
])
async def test_hostile_yaml_is_422_naming_the_file_and_limit(make_service, text, needle):
    """A billion-laughs file, a recursive alias, deep nesting, too many documents, an oversized file
    and too many aliases each come back as one issue on that file; nothing is stored, quickly."""
    svc = await make_service()
    started = time.monotonic()
    status, body = await post(svc, files(text))
    assert time.monotonic() - started < 20
    assert status == 422, body
    assert [i["file"] for i in body["issues"]] == ["f0.yaml"] and needle in body["issues"][0]["message"]
    assert await svc.spec_store.generation() == 0
