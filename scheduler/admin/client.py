"""A small synchronous client of the admin API, for the CLI (``meridian apply/get/delete/plan/cost``)
and scripts. Server address: ``--server`` or ``MERIDIAN_SCHEDULER_URL`` (default
http://127.0.0.1:7071); token: ``--token-file`` or ``MERIDIAN_ADMIN_TOKEN``. For an ``https://``
server the certificate is verified against ``--ca-file`` / ``MERIDIAN_SCHEDULER_CA_FILE`` (else
the system's trust store). Plain HTTP to a host other than loopback works but sets ``warning`` (the
CLI prints it): the token would cross the network in the clear."""

from __future__ import annotations

import ipaddress
import json
import os
import pathlib
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence

from meridian.spec.loader import expand_paths

DEFAULT_URL = "http://127.0.0.1:7071"
URL_ENV = "MERIDIAN_SCHEDULER_URL"
TOKEN_ENV = "MERIDIAN_ADMIN_TOKEN"
CA_ENV = "MERIDIAN_SCHEDULER_CA_FILE"


class AdminError(RuntimeError):
    """The admin API refused or failed a request; ``status`` is the HTTP status (0: unreachable)."""

    def __init__(self, status: int, message: str, body: Mapping | None = None):
        super().__init__(message)
        self.status = status
        self.body = dict(body or {})


def _is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class AdminClient:
    def __init__(self, url: str | None = None, token: str | None = None, *, timeout_s: float = 60.0,
                 env: Mapping[str, str] | None = None, ca_file: str | None = None):
        env = os.environ if env is None else env
        self.url = (url or env.get(URL_ENV) or DEFAULT_URL).rstrip("/")
        token = token or env.get(TOKEN_ENV)
        if not token:
            raise AdminError(0, f"no admin token: set {TOKEN_ENV} or pass --token-file")
        self._token = token.strip()
        self._timeout_s = timeout_s
        parsed = urllib.parse.urlsplit(self.url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise AdminError(0, f"scheduler URL {self.url!r}: use http://HOST:PORT or https://HOST:PORT")
        self.warning = ""
        if parsed.scheme == "http" and not _is_loopback(parsed.hostname):
            self.warning = (f"{self.url} is plain http to another host: the admin token crosses the network in the "
                            "clear; serve the admin API with --admin-tls-cert-file and use https://")
        self._ssl: ssl.SSLContext | None = None
        ca_file = ca_file or env.get(CA_ENV)
        if parsed.scheme == "https":
            try:
                self._ssl = ssl.create_default_context(cafile=os.path.expanduser(ca_file) if ca_file else None)
            except (OSError, ssl.SSLError) as exc:
                raise AdminError(0, f"CA file {ca_file} (--ca-file / {CA_ENV}): cannot use it: "
                                    f"{getattr(exc, 'strerror', None) or exc}") from None

    @classmethod
    def from_args(cls, server: str | None, token_file: str | None, ca_file: str | None = None, **kw) -> AdminClient:
        token = None
        if token_file:
            try:
                token = pathlib.Path(token_file).expanduser().read_text().strip()
            except OSError as exc:
                raise AdminError(0, f"cannot read token file {token_file}: {exc.strerror or exc}") from None
        return cls(server, token, ca_file=ca_file, **kw)

    def _call(self, method: str, path: str, body: Mapping | None = None) -> dict:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method, headers={
            "Authorization": f"Bearer {self._token}", "Content-Type": "application/json",
            "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self._timeout_s, context=self._ssl) as resp:
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

    def apply(self, files: Sequence[dict], *, allow_unmet_sla: bool = False) -> dict:
        """Apply ``files``; ``allow_unmet_sla`` accepts an SLA no declared capacity can meet."""
        body: dict = {"files": list(files)}
        if allow_unmet_sla:
            body["allow_unmet_sla"] = True
        return self._call("POST", "/v1/apply", body)

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

    def whoami(self) -> dict:
        return self._call("GET", "/v1/whoami")

    def cost(self, wait_floor: bool = True) -> dict:
        """The bill (``GET /v1/cost``); ``wait_floor``: wait for the cost floor's solve."""
        return self._call("GET", "/v1/cost" + ("?floor=wait" if wait_floor else ""))
