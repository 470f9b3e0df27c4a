"""``meridian scheduler`` configuration: flags and --set map onto the validated config; mistakes are
reported with the setting named and exit 1."""

from __future__ import annotations

import argparse

import pytest

from meridian.cli import main as cli
from meridian.cli import scheduler as scheduler_cmd


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    scheduler_cmd.add_arguments(parser)
    return parser.parse_args(list(argv))


def test_flags_and_set_build_the_config():
    """Common flags and --set KEY=VALUE land in the config, typed and validated."""
    cfg = scheduler_cmd.build_config(parse("--state", "redis://127.0.0.1:6379/0", "--id", "a",
                                           "--set", "heartbeat_interval_s=2", "--set", "directives_enabled=false"))
    assert (cfg.state_url, cfg.scheduler_id, cfg.heartbeat_interval_s, cfg.directives_enabled) == \
        ("redis://127.0.0.1:6379/0", "a", 2.0, False)


@pytest.mark.parametrize("argv,needle", [
    (["--set", "heartbeat_intervl_s=2"], "did you mean 'heartbeat_interval_s'"),
    (["--set", "lease_ttl_s=1", "--set", "lease_renew_interval_s=2"], "at most half of lease_ttl_s"),
    (["--state", "mongo://db"], "state_url: 'mongo://db': use sqlite://PATH"),
    (["--set", "tick_interval_s=-1"], "tick_interval_s: Input should be greater than 0"),
    (["--set", "heartbeat_interval_s=0.4"], "heartbeat_interval_s: Input should be a valid integer"),
])
def test_bad_settings_exit_1_naming_the_setting(argv, needle, capsys, monkeypatch):
    """A bad setting stops the scheduler before it starts, with the setting and the rule in the message."""
    monkeypatch.setenv("MERIDIAN_ADMIN_TOKEN", "x")
    assert cli.main(["scheduler", *argv]) == 1
    assert needle in capsys.readouterr().err


def test_missing_admin_token_is_refused(capsys, monkeypatch, tmp_path):
    """Without an admin token the scheduler does not start (the admin API would be open)."""
    monkeypatch.delenv("MERIDIAN_ADMIN_TOKEN", raising=False)
    assert cli.main(["scheduler", "--state", f"sqlite://{tmp_path}/s.db"]) == 1
    assert "MERIDIAN_ADMIN_TOKEN" in capsys.readouterr().err


STARTER = """
apiVersion: meridian/v1
kind: CapacityPolicy
metadata: {name: default}
spec:
  clouds: [{name: aws}]
"""
APPLIED = """
apiVersion: meridian/v1
kind: CapacityPolicy
metadata: {name: default}
spec:
  clouds: [{name: aws}]
  priority_classes: [{name: critical, value: 1000}, {name: standard, value: 100}]
---
apiVersion: meridian/v1
kind: ModelDeployment
metadata: {name: chat}
spec:
  model: {source: meta-llama/Llama-3.1-8B-Instruct, served_name: chat}
  resources: {gpu_types: [L4]}
  sla: {ttft_p99_ms: 800, tpot_p99_ms: 100, client_regions: [na-east]}
  priority_class: critical
"""


async def test_apply_missing_seeds_once_and_keeps_what_was_applied_since(tmp_path, capsys):
    """The manifests start the scheduler with a starter policy (--apply-missing): the first start
    stores it; an operator then applies a policy of the same name with more priority classes and a
    deployment using one. A restart must keep that policy: with --apply the starter replaced it on
    every start, and here the deployment's class no longer existed, so the scheduler exited
    (a crash loop in Kubernetes)."""
    from scheduler import service  # noqa: PLC0415
    from scheduler.admin import specs as admin_specs  # noqa: PLC0415
    from scheduler.server import auth  # noqa: PLC0415

    def node() -> service.SchedulerService:
        return service.SchedulerService(cfg, env={}, tokens=auth.TokenBook(auth.TokensFile({}, ()), env={}),
                                        admin_auth=auth.AdminAuth(auth.digest("admin-token")))

    starter = tmp_path / "starter"
    starter.mkdir()
    (starter / "policy.yaml").write_text(STARTER)
    cfg = scheduler_cmd.build_config(parse("--state", f"sqlite://{tmp_path}/state.db"))

    svc = node()
    assert await scheduler_cmd.apply_at_start(svc, [], [str(starter)])
    assert [s.name for s in await svc.spec_store.all()] == ["default"]
    proposal = admin_specs.propose(await svc.spec_store.all(), [("applied.yaml", APPLIED)])
    await svc.spec_store.apply(proposal.submitted, 0.0)
    await svc.store.close()

    svc = node()  # a restart, same store
    assert await scheduler_cmd.apply_at_start(svc, [], [str(starter)])
    stored = {s.name: s.body for s in await svc.spec_store.all()}
    assert set(stored) == {"default", "chat"} and "critical" in stored["default"]
    assert not await scheduler_cmd.apply_at_start(svc, [str(starter)])  # --apply: the old behaviour, refused
    assert "unknown priority class 'critical'" in capsys.readouterr().err
    await svc.store.close()


async def test_apply_missing_seeds_kinds_the_store_has_none_of_and_skips_seeds_that_do_not_fit(tmp_path, caplog):
    """A store with a policy of another name keeps it (a seeded 'default' would become the policy in
    use and fail the stored deployments: the crash loop again); a seed of a kind the store lacks is
    applied; a seed that does not validate with the store is logged at its own file's line and
    skipped, and the scheduler starts."""
    from scheduler import service  # noqa: PLC0415
    from scheduler.admin import specs as admin_specs  # noqa: PLC0415
    from scheduler.server import auth  # noqa: PLC0415

    cfg = scheduler_cmd.build_config(parse("--state", f"sqlite://{tmp_path}/state.db"))
    svc = service.SchedulerService(cfg, env={}, tokens=auth.TokenBook(auth.TokensFile({}, ()), env={}),
                                   admin_auth=auth.AdminAuth(auth.digest("admin-token")))
    applied = APPLIED.replace("metadata: {name: default}", "metadata: {name: prod}")
    await svc.spec_store.apply(admin_specs.propose([], [("applied.yaml", applied)]).submitted, 0.0)
    seeds = tmp_path / "seeds"
    seeds.mkdir()
    (seeds / "policy.yaml").write_text(STARTER)
    latency = "apiVersion: meridian/v1\nkind: LatencyMap\nmetadata: {name: extra}\nspec:\n  regions: []\n"
    (seeds / "latency.yaml").write_text(latency)
    assert await scheduler_cmd.apply_at_start(svc, [], [str(seeds)])
    assert sorted((s.kind, s.name) for s in await svc.spec_store.all()) == [
        ("CapacityPolicy", "prod"), ("LatencyMap", "extra"), ("ModelDeployment", "chat")]

    # A seed that cannot join the stored set: logged with its own line, skipped, not fatal.
    bad = STARTER + "---\n" + APPLIED.split("---\n")[1].replace("name: chat", "name: chat2").replace(
        "critical", "crtical")
    (seeds / "policy.yaml").write_text(bad)
    (seeds / "latency.yaml").unlink()
    await svc.spec_store.delete("ModelDeployment", "chat")
    with caplog.at_level("WARNING"):
        assert await scheduler_cmd.apply_at_start(svc, [], [str(seeds)])
    line = bad.splitlines().index("  priority_class: crtical") + 1
    assert f"policy.yaml:{line}: spec.priority_class: unknown priority class 'crtical'" in caplog.text
    assert "event=seed_specs_skipped" in caplog.text
    assert ("ModelDeployment", "chat2") not in {(s.kind, s.name) for s in await svc.spec_store.all()}
    await svc.store.close()
