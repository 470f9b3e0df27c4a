"""Readiness and health probes of an engine's HTTP port, and of the TLS relay in front of it."""

from __future__ import annotations

import asyncio
import contextlib
import ssl

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


def _handshake_only_context() -> ssl.SSLContext:
    # The relay's liveness, not its identity: the agent launched it with the certificate files it
    # configured; routers verify the certificate against their CA.
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


async def tls_answers(host: str, port: int, timeout_s: float = 2.0) -> bool:
    """True when host:port completes a TLS handshake (the relay serves HTTPS there, not plaintext
    and not a hung process)."""
    try:
        _reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port, ssl=_handshake_only_context()), timeout=timeout_s)
    except (OSError, asyncio.TimeoutError, ssl.SSLError):
        return False
    writer.close()
    with contextlib.suppress(OSError, ssl.SSLError):  # the handshake already succeeded
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
