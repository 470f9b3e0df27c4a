"""Helpers for the fake Kubernetes cluster's tests: polling, a small real HTTP server program to run
as a container, and pod manifests that run it bound to the pod IP."""

from __future__ import annotations

import asyncio
import textwrap


async def wait_until(predicate, timeout_s: float = 10.0, interval_s: float = 0.05, what: str = "condition"):
    """Poll ``predicate`` (sync or async) until it returns a truthy value; returns it."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        await asyncio.sleep(interval_s)


SERVER = textwrap.dedent('''
    """A tiny HTTP server for fake-cluster tests: binds $BIND_HOST:$PORT, answers GET / with its pod
    name, /ready per $READY_FILE (200 when the file exists or when unset), /prestop appends to
    $PRESTOP_LOG and sleeps $PRESTOP_SLEEP_S; on SIGTERM it logs, waits $TERM_DELAY_S and exits 0
    (or ignores SIGTERM when $IGNORE_TERM=1)."""
    import http.server, os, signal, sys, time

    host = os.environ.get("BIND_HOST", "127.0.0.1")
    port = int(os.environ.get("PORT", "8080"))

    def on_term(signum, frame):
        print("event=sigterm", flush=True)
        if os.environ.get("TERM_LOG"):
            with open(os.environ["TERM_LOG"], "a") as fh:
                fh.write(f"sigterm {time.time()}\\n")
        if os.environ.get("IGNORE_TERM") == "1":
            return
        time.sleep(float(os.environ.get("TERM_DELAY_S", "0")))
        sys.exit(0)

    signal.signal(signal.SIGTERM, on_term)

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            if self.path.startswith("/ready"):
                ready_file = os.environ.get("READY_FILE")
                ok = not ready_file or os.path.exists(ready_file)
                self.send_response(200 if ok else 503)
                self.end_headers()
                return
            if self.path.startswith("/prestop"):
                with open(os.environ["PRESTOP_LOG"], "a") as fh:
                    fh.write(f"prestop {time.time()}\\n")
                time.sleep(float(os.environ.get("PRESTOP_SLEEP_S", "0")))
                self.send_response(200)
                self.end_headers()
                return
            body = (os.environ.get("POD_NAME", "?") + "\\n").encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = http.server.HTTPServer((host, port), Handler)
    print(f"event=listening host={host} port={port}", flush=True)
    server.serve_forever()
''')


def write_server(tmp_path) -> str:
    path = tmp_path / "http_server.py"
    path.write_text(SERVER)
    return str(path)


def pod_manifest(name: str, *, labels=None, image: str = "meridian/http-server:1", env=None, port: int = 8080,
                 readiness: bool = True, **spec) -> dict:
    """A pod running the test HTTP server bound to its pod IP (downward API), with a readiness probe."""
    container = {
        "name": "app", "image": image,
        "env": [{"name": "BIND_HOST", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "PORT", "value": str(port)}] + list(env or []),
        "ports": [{"name": "http", "containerPort": port}],
    }
    if readiness:
        container["readinessProbe"] = {"httpGet": {"path": "/ready", "port": "http"}, "periodSeconds": 1}
    return {"metadata": {"name": name, "labels": labels or {"app": "web"}},
            "spec": {"containers": [container], **spec}}

