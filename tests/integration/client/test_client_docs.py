"""The code in docs/client.md runs as written against a local router in front of an emulator:
the meridian.client example and the openai SDK configured like it."""

from __future__ import annotations

import asyncio
import pathlib
import re

import pytest

from router import testing
from tests.integration.runtime_adapter.conftest import running_emulator

DOC = pathlib.Path(__file__).resolve().parents[3] / "docs" / "client.md"
MODEL = "llama-3.1-8b"


def snippet(name: str) -> str:
    """The python block after ``<!-- snippet: name -->`` in docs/client.md."""
    match = re.search(rf"<!-- snippet: {name} -->\n```python\n(.*?)\n```", DOC.read_text(), re.DOTALL)
    assert match, f"docs/client.md has no snippet {name!r}"
    return match.group(1)


@pytest.fixture
async def router_url(make_router):
    async with running_emulator(served_model_name=MODEL, speedup=200) as emulator:
        router = await make_router(testing.table(1, {MODEL: [testing.replica("e0", emulator.port)]}),
                                   region="us-east-1", trusted_region_header="X-Meridian-Client-Region")
        yield f"http://127.0.0.1:{router.port}", router


async def test_openai_sdk_snippet(router_url):
    """The SDK snippet's client gets a reply and a stream, and its region header reaches the router."""
    url, router = router_url
    code = snippet("openai-sdk").replace("http://router:8080", url)
    scope: dict = {}
    await asyncio.to_thread(exec, code, scope)
    assert scope["reply"].choices[0].message.content and scope["text"]
    assert {region for (model, region, _r, _c) in router.metrics.requests if model == MODEL} == {"eu-west-1"}


async def test_client_usage_snippet(router_url, capsys):
    """The usage example prints the reply, the streamed text and the usage chunk."""
    url, _ = router_url
    code = snippet("client-sync").replace("http://router:8080", url)
    await asyncio.to_thread(exec, code, {})
    out = capsys.readouterr().out
    assert "'completion_tokens':" in out and len(out.splitlines()) >= 2
