"""Readiness and health probes of an engine's HTTP port."""

from __future__ import annotations

import asyncio
import contextlib

import aiohttp


async def port_open(host: str, port: int, timeout_s: float = 1.0) -> bool:
    """True when a TCP connection to host:port succeeds (SGLang keeps the port closed while loading)."""
    try:
        _reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout=timeout_s)
    except (OSError, asyncio.TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError):  # the probe already succeeded; a reset on close is fine
        await writer.wait_closed()
    return True


async def http_status(session: aiohttp.ClientSession, url: str, *, timeout_s: float,
                      api_key: str | None = None) -> tuple[int | None, str]:
    """The status of GET ``url`` (None when no answer) and a short reason for logs."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    try:
        async with session.get(url, headers=headers, timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            await resp.read()
            return resp.status, f"GET {url} -> {resp.status}"
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
        return None, f"GET {url} failed: {type(exc).__name__} {exc}"
