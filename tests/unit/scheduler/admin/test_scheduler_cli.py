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
