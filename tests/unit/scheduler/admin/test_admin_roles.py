"""Admin roles: infrastructure principals manage CapacityPolicy, Cluster and LatencyMap; model owners
apply and delete only their own team's ModelDeployments; viewers only read. Each refusal is a 403
naming the principal and what its role may do, counted, and changes nothing."""

from __future__ import annotations

import asyncio
import hashlib
import pathlib

import pytest

from meridian.cli import main as cli
from scheduler.admin import access
from scheduler.admin import client as admin_client
from scheduler.server import auth
from tests.unit.scheduler import service_harness

ROOT = pathlib.Path(__file__).resolve().parents[4]
POLICY = (ROOT / "examples" / "capacity-policy.yaml").read_text()
CLUSTERS = (ROOT / "examples" / "clusters.yaml").read_text()
DEPLOYMENT = """
apiVersion: meridian/v1
kind: ModelDeployment
metadata: {name: %s, team: %s}
spec:
  model: {source: meta-llama/Llama-3.1-8B-Instruct, served_name: %s}
  resources: {gpus_per_replica: 1, gpu_types: [L4]}
  sla: {ttft_p99_ms: 2000, tpot_p99_ms: 200, client_regions: [na-east]}
  scaling: {min_replicas: 1, max_replicas: 4}
"""
TOKENS = {"root": "root-token-0123456789", "ops": "ops-token-0123456789", "alice": "alice-token-0123456789",
          "bob": "bob-token-0123456789", "eve": "eve-token-0123456789"}
PRINCIPALS = [
    access.Principal("root", access.Role.ADMIN),
    access.Principal("ops", access.Role.INFRA),
    access.Principal("alice", access.Role.OWNER, frozenset({"assistant"})),
    access.Principal("bob", access.Role.OWNER, frozenset({"research"})),
    access.Principal("eve", access.Role.VIEWER),
]


def dep(name: str, team: str) -> dict:
    return {"name": f"{name}.yaml", "text": DEPLOYMENT % (name, team, name)}


@pytest.fixture
async def svc(tmp_path):
    book = auth.AdminAuth(principals=[(auth.digest(TOKENS[p.name]), p) for p in PRINCIPALS])
    async with service_harness.service_factory(tmp_path, admin_auth=book) as make:
        yield await make()


def as_(svc, who: str) -> admin_client.AdminClient:
    return admin_client.AdminClient(f"http://127.0.0.1:{svc.admin_port}", TOKENS[who], env={})


async def call(fn, *args):
    return await asyncio.to_thread(fn, *args)


async def refused(fn, *args) -> admin_client.AdminError:
    with pytest.raises(admin_client.AdminError) as err:
        await call(fn, *args)
    return err.value


def forbidden(svc) -> float:
    return svc.metrics.registry.get_sample_value("meridian_scheduler_auth_failures_total",
                                                 {"surface": "admin", "reason": "forbidden"}) or 0.0


# ------------------------------------------------------------------ the decision, as data


@pytest.mark.parametrize("who,verb,kind,team,allowed", [
    ("root", "apply", "CapacityPolicy", None, True),
    ("root", "delete", "ModelDeployment", "anything", True),
    ("ops", "apply", "CapacityPolicy", None, True),
    ("ops", "apply", "Cluster", None, True),
    ("ops", "delete", "LatencyMap", None, True),
    ("ops", "apply", "ModelDeployment", "assistant", False),
    ("alice", "apply", "ModelDeployment", "assistant", True),
    ("alice", "plan", "ModelDeployment", "assistant", True),
    ("alice", "apply", "ModelDeployment", "research", False),
    ("alice", "apply", "ModelDeployment", None, False),
    ("alice", "apply", "CapacityPolicy", None, False),
    ("alice", "delete", "Cluster", None, False),
    ("eve", "read", None, None, True),
    ("eve", "plan", None, None, True),
    ("eve", "plan", "ModelDeployment", "assistant", False),
    ("eve", "apply", "ModelDeployment", "assistant", False),
    ("eve", "delete", "LatencyMap", None, False),
])
def test_authorize_is_one_pure_table(who, verb, kind, team, allowed):
    """The role table as the docs give it: one function answers every (role, verb, kind, team)."""
    principal = next(p for p in PRINCIPALS if p.name == who)
    decision = access.authorize(principal, verb, kind, team)
    assert decision.allowed is allowed
    if not allowed:
        assert principal.name in decision.reason and principal.role.value in decision.reason


# ------------------------------------------------------------------ through the API


async def test_infra_manages_policies_and_clusters_but_not_deployments(svc):
    """An infra principal applies the CapacityPolicy and Clusters; a ModelDeployment from it is a 403
    that names its role and stores nothing."""
    ops = as_(svc, "ops")
    done = await call(ops.apply, [{"name": "policy.yaml", "text": POLICY}, {"name": "clusters.yaml", "text": CLUSTERS}])
    assert {a["kind"] for a in done["applied"]} == {"CapacityPolicy", "Cluster"}
    err = await refused(ops.apply, [dep("chat", "assistant")])
    assert err.status == 403 and err.body["role"] == "infra" and "CapacityPolicy" in err.body["may"]
    assert await svc.spec_store.get("ModelDeployment", "chat") is None


async def test_model_owner_applying_a_policy_is_refused(svc):
    """A model owner's CapacityPolicy (valid as it is) is refused with 403, before and regardless of
    validation, and counted; the stored policy is untouched."""
    await call(as_(svc, "ops").apply, [{"name": "policy.yaml", "text": POLICY}])
    before = await svc.spec_store.get("CapacityPolicy", "default")
    err = await refused(as_(svc, "alice").apply, [{"name": "policy.yaml", "text": POLICY}])
    assert err.status == 403
    assert "'alice' (role owner, teams assistant) may not apply CapacityPolicy" in str(err)
    assert err.body["may"].startswith("read everything; apply, delete and plan ModelDeployments of team(s) assistant")
    assert await svc.spec_store.get("CapacityPolicy", "default") == before
    assert forbidden(svc) == 1
    err = await refused(as_(svc, "alice").delete, "policy", "default")
    assert err.status == 403 and forbidden(svc) == 2


async def test_model_owner_manages_only_its_own_teams_deployments(svc):
    """An owner applies and deletes its team's deployment; another team's deployment can be neither
    applied, taken over by re-applying its name under one's own team, nor deleted."""
    alice, bob = as_(svc, "alice"), as_(svc, "bob")
    await call(alice.apply, [dep("chat", "assistant")])
    await call(bob.apply, [dep("study", "research")])
    err = await refused(alice.apply, [dep("paper", "research")])
    assert err.status == 403 and "of team 'research'" in str(err)
    err = await refused(alice.apply, [dep("study", "assistant")])  # same name as bob's: a takeover
    assert err.status == 403 and "the stored ModelDeployment/study is team 'research'" in str(err)
    err = await refused(alice.delete, "deployment", "study")
    assert err.status == 403
    stored = await svc.spec_store.get("ModelDeployment", "study")
    assert stored is not None and '"team":"research"' in stored.body
    err = await refused(alice.apply, [dep("chat", "assistant"), dep("paper", "research")])
    assert err.status == 403 and err.body["refused"] == [err.body["refused"][0]]  # only the foreign one named
    assert await svc.spec_store.get("ModelDeployment", "paper") is None  # all or nothing
    assert (await call(alice.delete, "deployment", "chat"))["deleted"]["name"] == "chat"
    assert forbidden(svc) == 4


async def test_owner_deployment_without_team_is_refused(svc):
    """A deployment with no metadata.team cannot come from a model owner (it would belong to nobody)."""
    text = (DEPLOYMENT % ("x", "t", "x")).replace(", team: t", "")
    err = await refused(as_(svc, "alice").apply, [{"name": "x.yaml", "text": text}])
    assert err.status == 403 and "without metadata.team" in str(err)


async def test_viewer_reads_everything_and_changes_nothing(svc):
    """The viewer (the dashboard's role) lists, gets, reads status and whoami; apply, delete and plans
    of new documents are refused."""
    await call(as_(svc, "root").apply, [{"name": "policy.yaml", "text": POLICY}, dep("chat", "assistant")])
    eve = as_(svc, "eve")
    assert len((await call(eve.list))["items"]) == 2
    assert (await call(eve.get, "deployment", "chat"))["name"] == "chat"
    assert "leader" in await call(eve.status)
    me = await call(eve.whoami)
    assert me == {"name": "eve", "role": "viewer", "teams": [], "may": access.may(PRINCIPALS[4])}
    for fn, args in ((eve.apply, ([dep("y", "assistant")],)), (eve.delete, ("deployment", "chat")),
                     (eve.plan, ([dep("y", "assistant")],))):
        err = await refused(fn, *args)
        assert err.status == 403 and "viewers only read" in str(err)
    assert await svc.spec_store.get("ModelDeployment", "y") is None


async def test_wrong_token_is_401_not_403(svc):
    """An unknown token is refused as unauthenticated (401), counted apart from forbidden actions."""
    err = await refused(admin_client.AdminClient(f"http://127.0.0.1:{svc.admin_port}", "nope", env={}).list)
    assert err.status == 401
    assert svc.metrics.registry.get_sample_value("meridian_scheduler_auth_failures_total",
                                                 {"surface": "admin", "reason": "bad_token"}) == 1


# ------------------------------------------------------------------ token files


def sha(token: str) -> str:
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


def test_admin_token_file_is_one_token_or_a_list_of_principals(tmp_path):
    """A bare token file still means one admin; a YAML ``admins`` list names principals with roles."""
    bare = tmp_path / "admin.token"
    bare.write_text("plain-admin-token\n")
    book = auth.AdminAuth.load(token_file=str(bare), env={})
    assert book.identify("Bearer plain-admin-token") == access.Principal("admin", access.Role.ADMIN)
    roles = tmp_path / "admins.yaml"
    roles.write_text(f"admins:\n  - {{name: alice, token: '{sha('a' * 24)}', role: owner, teams: [assistant]}}\n"
                     f"  - {{name: eve, token: '{sha('e' * 24)}', role: viewer}}\n")
    book = auth.AdminAuth.load(token_file=str(roles), env={"MERIDIAN_ADMIN_TOKEN": "ignored-when-a-file-is-given"})
    assert book.identify(f"Bearer {'a' * 24}").teams == frozenset({"assistant"})
    assert book.identify(f"Bearer {'e' * 24}").role is access.Role.VIEWER
    assert book.identify("Bearer ignored-when-a-file-is-given") is None and book.identify(None) is None


def test_tokens_file_admins_join_the_environment_admin(tmp_path):
    """The tokens file's ``admins`` list adds principals beside MERIDIAN_ADMIN_TOKEN's admin."""
    path = tmp_path / "tokens.yaml"
    path.write_text(f"clusters: {{c1: '{sha('c')}'}}\nadmins: [{{name: ops, token: '{sha('o' * 24)}', role: infra}}]\n")
    book = auth.AdminAuth.load(env={"MERIDIAN_ADMIN_TOKEN": "env-admin"}, tokens_file=auth.TokensFile.load(str(path)))
    assert [p.name for p in book.principals] == ["admin", "ops"]
    assert book.identify(f"Bearer {'o' * 24}").role is access.Role.INFRA


@pytest.mark.parametrize("entry,needle", [
    ("{name: a, token: plain-token, role: admin}", "store the token's digest"),
    ("{name: a, token: 'sha256:00', role: admin}", "64 hex digits"),
    ("{name: a, token: '%s', role: root}", "is not a role; one of admin, infra, owner, viewer"),
    ("{name: a, token: '%s', role: owner}", "an owner needs the team(s)"),
    ("{name: a, token: '%s', role: infra, teams: [x]}", "only the owner role is scoped to teams"),
    ("{name: 'a b', token: '%s', role: viewer}", "admins.0.name"),
    ("{name: a, token: '%s', role: viewer, password: x}", "unknown field(s) 'password'"),
])
def test_bad_admin_entries_fail_at_start_naming_the_field(tmp_path, entry, needle):
    """Each malformed admins entry stops the scheduler at start with the file, entry and field."""
    path = tmp_path / "admins.yaml"
    path.write_text("admins:\n  - " + (entry % sha("x" * 24) if "%s" in entry else entry) + "\n")
    with pytest.raises(auth.CredentialError, match="admins.0") as err:
        auth.AdminAuth.load(token_file=str(path), env={})
    assert needle in str(err.value) and str(path) in str(err.value)


def test_two_principals_may_not_share_a_name_or_a_token():
    """Duplicate names or tokens are refused: each principal is told apart in logs and decisions."""
    p = access.Principal("a", access.Role.VIEWER)
    with pytest.raises(auth.CredentialError, match="same token"):
        auth.AdminAuth(principals=[(auth.digest("t"), p), (auth.digest("t"), access.Principal("b", p.role))])
    with pytest.raises(auth.CredentialError, match="appear more than once"):
        auth.AdminAuth(principals=[(auth.digest("t"), p), (auth.digest("u"), p)])


def test_token_hash_prints_the_stored_form_from_stdin(monkeypatch, capsys, tmp_path):
    """``meridian token hash`` reads the token from stdin (never argv) and prints sha256:<hex>, which
    the scheduler then accepts; ``token new`` makes a 43-character random token."""
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO("s3cret-token-value-12345\n"))
    assert cli.main(["token", "hash"]) == 0
    stored = capsys.readouterr().out.strip()
    assert stored == sha("s3cret-token-value-12345")
    assert auth.AdminAuth(auth.parse_secret(stored, "t")).check("Bearer s3cret-token-value-12345")
    assert cli.main(["token", "new"]) == 0 and cli.main(["token", "new"]) == 0
    first, second = capsys.readouterr().out.split()
    assert len(first) == 43 and first != second
