"""A small synchronous client of the admin API, for the CLI (``meridian apply/get/delete/plan/cost``)
and scripts. Server address: ``--server`` or ``MERIDIAN_SCHEDULER_URL`` (default
http://127.0.0.1:7071); token: ``--token-file`` or ``MERIDIAN_ADMIN_TOKEN``."""

from __future__ import annotations

import json
import os
import pathlib
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence

DEFAULT_URL = "http://127.0.0.1:7071"
URL_ENV = "MERIDIAN_SCHEDULER_URL"
TOKEN_ENV = "MERIDIAN_ADMIN_TOKEN"


def expand_paths(paths: Sequence[str]) -> list[str]:
    """Paths with each directory replaced by its *.yaml and *.yml files, sorted."""
    out: list[str] = []
    for p in paths:
        path = pathlib.Path(p)
        if path.is_dir():
            out += sorted(str(f) for f in path.iterdir() if f.suffix in (".yaml", ".yml") and f.is_file())
        else:
            out.append(p)
    return out


class AdminError(RuntimeError):
    """The admin API refused or failed a request; ``status`` is the HTTP status (0: unreachable)."""

    def __init__(self, status: int, message: str, body: Mapping | None = None):
        super().__init__(message)
        self.status = status
        self.body = dict(body or {})


class AdminClient:
    def __init__(self, url: str | None = None, token: str | None = None, *, timeout_s: float = 60.0,
                 env: Mapping[str, str] | None = None):
        env = os.environ if env is None else env
        self.url = (url or env.get(URL_ENV) or DEFAULT_URL).rstrip("/")
        token = token or env.get(TOKEN_ENV)
        if not token:
            raise AdminError(0, f"no admin token: set {TOKEN_ENV} or pass --token-file")
        self._token = token.strip()
        self._timeout_s = timeout_s

    @classmethod
    def from_args(cls, server: str | None, token_file: str | None, **kw) -> AdminClient:
        token = None
        if token_file:
            try:
                token = pathlib.Path(token_file).expanduser().read_text().strip()
            except OSError as exc:
                raise AdminError(0, f"cannot read token file {token_file}: {exc.strerror or exc}") from None
        return cls(server, token, **kw)

    def _call(self, method: str, path: str, body: Mapping | None = None) -> dict:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method, headers={
            "Authorization": f"Bearer {self._token}", "Content-Type": "application/json",
            "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self._timeout_s) as resp:
                return json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                payload = json.loads(raw)
            except ValueError:
                payload = {"error": raw.decode(errors="replace")[:500]}
            raise AdminError(exc.code, payload.get("error", f"HTTP {exc.code}"), payload) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise AdminError(0, f"cannot reach the scheduler at {self.url}: {reason}") from None

    @staticmethod
    def read_files(paths: Sequence[str]) -> list[dict]:
        """File contents to send; a directory stands for its *.yaml and *.yml files, sorted."""
        out = []
        for p in expand_paths(paths):
            try:
                out.append({"name": p, "text": pathlib.Path(p).read_text()})
            except OSError as exc:
                raise AdminError(0, f"cannot read {p}: {exc.strerror or exc}") from None
        return out

    def apply(self, files: Sequence[dict]) -> dict:
        return self._call("POST", "/v1/apply", {"files": list(files)})

    def plan(self, files: Sequence[dict]) -> dict:
        return self._call("POST", "/v1/plan", {"files": list(files)})

    def list(self, kind: str | None = None) -> dict:
        query = f"?kind={urllib.parse.quote(kind)}" if kind else ""
        return self._call("GET", f"/v1/specs{query}")

    def get(self, kind: str, name: str) -> dict:
        return self._call("GET", f"/v1/specs/{urllib.parse.quote(kind)}/{urllib.parse.quote(name)}")

    def delete(self, kind: str, name: str) -> dict:
        return self._call("DELETE", f"/v1/specs/{urllib.parse.quote(kind)}/{urllib.parse.quote(name)}")

    def status(self) -> dict:
        return self._call("GET", "/v1/status")

    def cost(self, wait_floor: bool = True) -> dict:
        """The bill (``GET /v1/cost``); ``wait_floor``: wait for the cost floor's solve."""
        return self._call("GET", "/v1/cost" + ("?floor=wait" if wait_floor else ""))
