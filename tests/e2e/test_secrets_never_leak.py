"""No secret appears in any output of a run. A scheduler and two agents (emulator replicas) run as
processes, a router in this process with an API key; the run is driven through good and bad
credentials of every kind (admin, viewer, cluster, router, API key; the replicas require a key of
their own, from the Cluster spec, which the router sends), and then every output is
searched for every secret: the processes' logs (engines' included), their command lines, the
router's log, /metrics of the scheduler, the router and the agents, the status pages, and the
bodies of every refusal. Tokens are stored hashed in the scheduler's tokens file."""

from __future__ import annotations

import asyncio
import hashlib
import io
import logging
import pathlib
import secrets
import time

import aiohttp
import openai
import pytest
import yaml

from meridian.demo import fleet as fleet_mod
from router import app as router_app
from router import auth as router_auth
from router import config as router_config
from scheduler import testing

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]
SPECS = pathlib.Path(__file__).parent / "specs"


def sha(token: str) -> str:
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


async def fetch(session: aiohttp.ClientSession, method: str, url: str, **kw) -> tuple[int, str]:
    async with session.request(method, url, timeout=aiohttp.ClientTimeout(total=30), **kw) as resp:
        return resp.status, await resp.text()


async def test_no_secret_in_any_output(tmp_path):
    """Every secret of the run (admin, viewer, cluster and router tokens, the client API key, and the
    wrong guesses made with them) is absent from logs, command lines, metrics, status pages and
    error bodies, while each credential still works where it should and is refused where not."""
    # Every agent's replicas require an API key (the spec names its file); the router sends it.
    replica_key = "rk-" + secrets.token_urlsafe(24)
    replica_key_file = tmp_path / "replica-api-key"
    replica_key_file.write_text(replica_key)
    cluster_docs = [d for d in yaml.safe_load_all((SPECS / "clusters.yaml").read_text()) if d]
    for doc in cluster_docs:
        doc["spec"]["replicas"] = {"api_key_file": str(replica_key_file)}
    cluster_file = tmp_path / "clusters.yaml"
    cluster_file.write_text(yaml.safe_dump_all(cluster_docs))
    fleet = fleet_mod.LocalFleet(fleet_mod.FleetConfig(
        workdir=tmp_path / "run", spec_files=(SPECS / "fleet.yaml",), cluster_file=cluster_file,
        clusters=("aws-use1", "gcp-usc1"), provisioning_delay_s=1.0,
        scheduler_settings=("heartbeat_interval_s=1", "adopt_grace_s=2")))
    fleet.prepare()
    viewer_token = secrets.token_urlsafe(24)
    api_key = "sk-" + secrets.token_urlsafe(24)
    cluster_tokens = {n: (fleet.workdir / "tokens" / f"{n}.token").read_text() for n in fleet.cluster_docs}
    # The scheduler's tokens file holds digests only, and names a viewer beside the admin.
    (fleet.workdir / "scheduler-tokens.yaml").write_text(yaml.safe_dump({
        "clusters": {n: sha(t) for n, t in cluster_tokens.items()}, "routers": [sha(fleet.router_token)],
        "admins": [{"name": "dashboard", "token": sha(viewer_token), "role": "viewer"}]}))
    router_token_file = tmp_path / "router.token"  # the router reads its secrets from files only
    router_token_file.write_text(fleet.router_token)
    router_token_file.chmod(0o600)
    keys_file = tmp_path / "keys.yaml"
    keys_file.write_text(yaml.safe_dump({"keys": [{"name": "team-a", "sha256": router_auth.hash_key(api_key)}]}))
    wrong = {"admin": fleet.admin_token[::-1], "api_key": api_key[:-4] + "XXXX", "cluster": "c-" + secrets.token_hex(8)}
    the_secrets = {"admin token": fleet.admin_token, "viewer token": viewer_token, "router token": fleet.router_token,
                   "API key": api_key, "replica API key": replica_key, **{f"cluster token {n}": t for n, t in cluster_tokens.items()},
                   **{f"wrong {k}": v for k, v in wrong.items()}}

    router_log = io.StringIO()
    handler = logging.StreamHandler(router_log)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s %(message)s"))
    logging.getLogger().addHandler(handler)
    outputs: dict[str, str] = {}
    router = None
    try:
        await fleet.start_scheduler()
        async with aiohttp.ClientSession() as session:
            applied = await fleet.apply(session, [SPECS / "fleet.yaml", fleet.workdir / "clusters.yaml"])
            assert applied["status"] == 200, applied
            await fleet.start_agents()
            cfg = router_config.RouterConfig(
                listen_port=0, region="na-east", scheduler_address=f"127.0.0.1:{fleet.grpc_port}",
                scheduler_token_file=str(router_token_file), api_keys_file=str(keys_file),
                lkg_path=str(tmp_path / "lkg.json"), trusted_region_header=fleet_mod.REGION_HEADER,
                upstream_api_key_file=str(replica_key_file))
            router = router_app.Router(cfg)
            await router.start()
            base = f"http://127.0.0.1:{router.port}"

            client = openai.AsyncOpenAI(base_url=f"{base}/v1", api_key=api_key, max_retries=0, timeout=60)
            deadline = time.monotonic() + 150
            while True:  # until a replica is routable and answers through the router with the key
                try:
                    answer = await client.chat.completions.create(
                        model="chat", messages=[{"role": "user", "content": "hi"}], max_tokens=4)
                    break
                except (openai.APIStatusError, openai.APIConnectionError):
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(1.0)
            assert answer.choices
            # The replica itself refuses a request that does not carry its key.
            replica = next(iter(router.state.endpoints.values()))
            status, body = await fetch(session, "GET", replica.url + "/v1/models")
            assert status == 401, body

            # Refusals, each answered without echoing what was presented.
            bad = openai.AsyncOpenAI(base_url=f"{base}/v1", api_key=wrong["api_key"], max_retries=0, timeout=30)
            with pytest.raises(openai.AuthenticationError) as err:
                await bad.chat.completions.create(model="chat", messages=[{"role": "user", "content": "x"}])
            outputs["router 401"] = str(err.value.body)
            for who, token in (("admin", wrong["admin"]), ("viewer", viewer_token)):
                status, body = await fetch(session, "POST", f"{fleet.admin_url}/v1/apply",
                                           json={"files": [{"name": "p.yaml", "text": (SPECS / "fleet.yaml").read_text()}]},
                                           headers={"Authorization": f"Bearer {token}"})
                assert status == (401 if who == "admin" else 403), body
                outputs[f"admin {who} refusal"] = body
            status, body = await fetch(session, "GET", f"{fleet.admin_url}/v1/status",
                                       headers={"Authorization": f"Bearer {viewer_token}"})
            assert status == 200
            outputs["scheduler status"] = body
            for cluster, token in (("gcp-usc1", cluster_tokens["aws-use1"]), ("aws-use1", wrong["cluster"])):
                with pytest.raises(testing.Refused) as refused:
                    await testing.FakeAgent([f"127.0.0.1:{fleet.grpc_port}"], cluster, token).connect()
                outputs[f"agent refusal {cluster}"] = refused.value.details

            for name, url in [("scheduler metrics", f"{fleet.admin_url}/metrics"), ("router metrics", f"{base}/metrics"),
                              ("router status", f"{base}/router/status"), ("router models", f"{base}/v1/models")]:
                outputs[name] = (await fetch(session, "GET", url,
                                             headers={"Authorization": f"Bearer {api_key}"}))[1]
            for name, port in fleet.agent_ports.items():
                for path in ("/metrics", "/status"):
                    status, body = await fetch(session, "GET", f"http://127.0.0.1:{port}{path}")
                    if status == 200:
                        outputs[f"agent {name} {path}"] = body
            for child in fleet.procs.children.values():
                outputs[f"cmdline {child.name}"] = pathlib.Path(f"/proc/{child.proc.pid}/cmdline").read_bytes().decode(
                    errors="replace").replace("\0", " ")
    finally:
        if router is not None:
            await router.stop()
        logging.getLogger().removeHandler(handler)
        await asyncio.to_thread(fleet.stop)

    outputs["router log"] = router_log.getvalue()
    for path in sorted(fleet.workdir.rglob("*.log")):  # scheduler, agents and every engine's log
        outputs[f"log {path.relative_to(fleet.workdir)}"] = path.read_text(errors="replace")
    assert any("event=admin_forbidden" in v for v in outputs.values())  # the run did log its refusals
    assert any(k.startswith("log agents/") or "replica" in k for k in outputs)
    leaks = [(what, where) for what, secret in the_secrets.items() for where, text in outputs.items() if secret in text]
    assert leaks == [], f"secrets found in outputs: {leaks}"
