"""A fast LLM-shaped streaming backend for the router bench: raw asyncio (uvloop) HTTP/1.1 with
keep-alive; every POST gets a chunked SSE response of ``--chunks`` chat.completion.chunk events,
each written separately (optionally ``--token-delay-ms`` apart), then ``data: [DONE]``.

Written without a framework so the backend, not the proxy under test, is rarely the bottleneck.
``python -m bench.router.sse_backend --port N``"""

from __future__ import annotations

import argparse
import asyncio

import uvloop

HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n")


MODEL_INFO = b'{"model_path":"m","served_model_name":"m-stream","is_generation":true}'


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def events(n: int) -> list[bytes]:
    base = b'{"id":"bench","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,'
    out = [_chunk(b"data: " + base + b'"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n')]
    for i in range(n - 2):
        out.append(_chunk(b"data: " + base + b'"delta":{"content":"tok%d "},"finish_reason":null}]}\n\n' % i))
    out.append(_chunk(b"data: " + base + b'"delta":{},"finish_reason":"stop"}]}\n\n'))
    out.append(_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
    return out


class Backend(asyncio.Protocol):
    def __init__(self, chunks: list[bytes], delay_s: float):
        self.chunks = chunks
        self.delay_s = delay_s
        self.buf = b""
        self.transport = None

    def connection_made(self, transport):
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].lower()
            i = head.find(b"content-length:")
            length = int(head[i + 15:].split(b"\r\n", 1)[0]) if i >= 0 else 0
            if len(self.buf) < end + 4 + length:
                return
            self.buf = self.buf[end + 4 + length:]
            if head.startswith(b"get"):  # health and model-info probes (sglang-router asks at start)
                self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d"
                                     b"\r\n\r\n%s" % (len(MODEL_INFO), MODEL_INFO))
                continue
            if self.delay_s:
                asyncio.ensure_future(self._paced())
            else:
                write = self.transport.write
                write(HEAD)
                for c in self.chunks:
                    write(c)

    async def _paced(self) -> None:
        self.transport.write(HEAD)
        for c in self.chunks:
            await asyncio.sleep(self.delay_s)
            if self.transport.is_closing():
                return
            self.transport.write(c)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--chunks", type=int, default=16)
    parser.add_argument("--token-delay-ms", type=float, default=0.0)
    args = parser.parse_args()

    async def serve() -> None:
        loop = asyncio.get_running_loop()
        chunks = events(args.chunks)
        server = await loop.create_server(lambda: Backend(chunks, args.token_delay_ms / 1000), "127.0.0.1",
                                          args.port, backlog=2048)
        async with server:
            await server.serve_forever()

    uvloop.run(serve())


if __name__ == "__main__":
    main()
