"""`meridian router`: flags map onto the config; bad settings exit 1 naming the field."""

from __future__ import annotations

import argparse
import io

from meridian.cli import main as cli_main
from router import auth, cli


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return parser.parse_args(argv)


def test_flags_become_config_overrides():
    """--listen, --scheduler and --no-health-checks land in the right config fields."""
    out = cli._overrides(parse(["--listen", "0.0.0.0:9000", "--scheduler", "s:7070", "--no-health-checks",
                                "--policy", "round_robin"]))
    assert out["listen_host"] == "0.0.0.0" and out["listen_port"] == "9000"
    assert out["scheduler_address"] == "s:7070" and out["health"] == {"enabled": False}
    assert out["policy"] == "round_robin"


def test_bad_policy_exits_1_with_the_field(capsys):
    """An unknown policy is a configuration error (exit 1) that names the policy and the valid ones."""
    assert cli.run(parse(["--policy", "fastest", "--lkg-store", "none"])) == 1
    err = capsys.readouterr().err
    assert "policy" in err and "latency" in err


def test_hash_key_prints_the_stored_form(capsys, monkeypatch):
    """--hash-key reads the key from stdin (never argv) and prints the SHA-256 hex for a keys file."""
    monkeypatch.setattr("sys.stdin", io.StringIO("sk-1\n"))
    assert cli.run(parse(["--hash-key"])) == 0
    assert capsys.readouterr().out.strip() == auth.hash_key("sk-1")


def test_hash_key_without_a_key_on_stdin_exits_1(capsys, monkeypatch):
    """--hash-key with nothing on stdin says how to give the key and exits 1."""
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert cli.run(parse(["--hash-key"])) == 1
    assert "stdin" in capsys.readouterr().err


def test_no_flag_takes_a_secret_value():
    """The secrets are given as files (or environment), never as flag values that `ps` would show."""
    flags = parse([]).__dict__
    assert "scheduler_token" not in flags and "upstream_api_key" not in flags
    out = cli._overrides(parse(["--scheduler-token-file", "/t", "--upstream-api-key-file", "/k"]))
    assert out["scheduler_token_file"] == "/t" and out["upstream_api_key_file"] == "/k"


def test_router_is_a_meridian_command():
    """`meridian router` is registered in the CLI."""
    assert cli_main.COMMANDS["router"][0] == "router.cli"
