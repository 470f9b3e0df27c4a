"""Config, static routes, keys file, table store and traffic tally: validation and round trips."""

from __future__ import annotations

import pydantic
import pytest

from meridian.fleet import models as fm
from router import auth, config, ratelimit, routes_file, store, testing, traffic


def test_defaults_are_valid():
    """The default config validates and uses the latency policy."""
    cfg = config.RouterConfig()
    assert cfg.policy == "latency" and cfg.retry.budget_ratio == 0.2 and cfg.health.unhealthy_threshold == 3


@pytest.mark.parametrize("data,needle", [
    ({"policy": "fastest"}, "unknown routing policy 'fastest'"),
    ({"region": "mars-1"}, "region"),
    ({"scheduler_address": "a:1", "routes_file": "x"}, "routes_file"),
    ({"lkg_store": "redis"}, "redis_url"),
    ({"api_keys_in_redis": True}, "api_keys_in_redis"),
    ({"default_rate_limit_rps": 5}, "default_rate_limit_rps: limits each API key"),
    ({"max_body_bytes": 10}, "max_body_bytes"),
    ({"retry": {"max_attempts": 0}}, "retry.max_attempts"),
    ({"policy_args": {"prefix_cache": {"cache_threshold": 2}}}, "cache_threshold"),
    ({"listen_prot": 1}, "listen_prot"),
    ({"listen_port": 9001, "metrics_port": 9000, "workers": 2}, "metrics_port: ports 9000-9001"),
    ({"metrics_port": 65535, "workers": 2}, "runs past port 65535"),
])
def test_bad_config_names_the_field(data, needle):
    """A bad setting is refused with an error naming it."""
    with pytest.raises(pydantic.ValidationError, match=needle):
        config.RouterConfig.model_validate(data)


def test_routes_file(tmp_path):
    """A static routes file becomes a RoutingTable; duplicates and bad endpoints are refused."""
    path = tmp_path / "routes.yaml"
    path.write_text("models:\n  - served_model_name: m\n    policy: round_robin\n    replicas:\n"
                    "      - {replica_id: r1, endpoint: 'http://127.0.0.1:9', region: us-east-1, cloud: aws}\n")
    t = routes_file.load(path)
    assert t.models[0].policy == "round_robin" and t.models[0].replicas[0].cloud is fm.Cloud.AWS
    path.write_text("models:\n  - served_model_name: m\n    replicas:\n      - {replica_id: r1, endpoint: 'https://x:1'}\n")
    assert routes_file.load(path).models[0].replicas[0].endpoint == "https://x:1"
    path.write_text("models:\n  - served_model_name: m\n    replicas:\n      - {replica_id: r1, endpoint: 'ftp://x:1'}\n")
    with pytest.raises(pydantic.ValidationError, match="use http:// or https://"):
        routes_file.load(path)


def test_keys_file(tmp_path):
    """Keys are stored hashed; a malformed hash is refused naming the field."""
    path = tmp_path / "keys.yaml"
    path.write_text(f"keys:\n  - {{name: a, sha256: {auth.hash_key('secret')}, rate_limit_rps: 2, models: [m]}}\n")
    keys = auth.load_keys_file(path)
    info = keys[auth.hash_key("secret")]
    assert info.name == "a" and info.allows("m") and not info.allows("other")
    path.write_text("keys:\n  - {name: a, sha256: plaintext}\n")
    with pytest.raises(pydantic.ValidationError, match="sha256"):
        auth.load_keys_file(path)


def test_local_token_bucket():
    """The in-process bucket allows a burst, then paces at the rate, with a wait time for Retry-After."""
    now = [0.0]
    buckets = ratelimit.LocalBuckets(clock=lambda: now[0])
    assert [buckets.take("k", 2.0, 2) for _ in range(2)] == [0.0, 0.0]
    assert buckets.take("k", 2.0, 2) == pytest.approx(0.5)
    now[0] += 0.5
    assert buckets.take("k", 2.0, 2) == 0.0


async def test_file_store_round_trip(tmp_path):
    """The last-known-good table survives a save and load through the wire encoding."""
    s = store.FileStore(tmp_path / "sub" / "lkg.pb")
    assert await s.load() is None
    t = testing.table(7, {"m": [testing.replica("r1", 1234, "eu-west-1")]}, policy="random")
    await s.save(t)
    back = await s.load()
    assert back.version == 7 and back.models[0].replicas[0].endpoint == "http://127.0.0.1:1234"
    assert back.models[0].policy == "random"


def test_traffic_window_and_restore():
    """A window's tally becomes samples; an unsent report is merged into the next window."""
    acc = traffic.TrafficAccumulator(clock=lambda: 100.0)
    acc.record("m", "na-east", 10, 5, False, 20.0)
    acc.record("m", "na-east", 10, 5, True, 40.0)
    report = acc.take("r", "na-east")
    (sample,) = report.samples
    assert (sample.requests, sample.prompt_tokens, sample.completion_tokens, sample.errors) == (2, 20, 10, 1)
    assert sample.ttft_p99_ms == 40.0
    acc.restore(report)
    acc.record("m", "na-east", 1, 1, False, None)
    assert acc.take("r", "na-east").samples[0].requests == 3


def test_per_try_floor_above_cap_is_refused():
    """A per-try floor above its cap cannot be met: refused naming both settings."""
    with pytest.raises(pydantic.ValidationError, match="per_try_floor_s .* must be <= per_try_cap_s"):
        config.RouterConfig.model_validate({"retry": {"per_try_floor_s": 40, "per_try_cap_s": 30}})


def test_secrets_come_from_their_files_or_the_environment(tmp_path, monkeypatch):
    """The scheduler token and upstream key are read from their files (file over environment), or
    from MERIDIAN_ROUTER_SCHEDULER_TOKEN / MERIDIAN_UPSTREAM_API_KEY."""
    monkeypatch.setenv("MERIDIAN_ROUTER_SCHEDULER_TOKEN", "from-env")
    monkeypatch.setenv("MERIDIAN_UPSTREAM_API_KEY", "key-from-env")
    assert config.RouterConfig().scheduler_token() == "from-env"
    assert config.RouterConfig().upstream_api_key() == "key-from-env"
    token = tmp_path / "t"
    token.write_text("from-file\n")
    assert config.RouterConfig(scheduler_token_file=str(token)).scheduler_token() == "from-file"


@pytest.mark.parametrize("content,needle", [(None, "cannot read"), ("", "the file is empty"),
                                            ("a\nb", "more than one line"), ("two words", "printable ASCII")])
def test_bad_secret_file_is_refused_naming_setting_flag_and_path_not_the_value(tmp_path, content, needle):
    """A missing, empty, multi-line or header-unsafe secret file stops the router at start; the error
    names the setting, its flag and the path, and never shows the secret."""
    path = tmp_path / "key"
    if content is not None:
        path.write_text(content)
    with pytest.raises(pydantic.ValidationError, match=needle) as info:
        config.RouterConfig(upstream_api_key_file=str(path))
    text = str(info.value)
    assert "upstream_api_key_file (--upstream-api-key-file)" in text and str(path) in text
    assert content is None or not content.strip() or content not in text


def test_static_routes_carry_the_sla_targets(tmp_path):
    """ttft_p99_ms and tpot_p99_ms of a static routes file reach the routing table."""
    path = tmp_path / "routes.yaml"
    path.write_text("models:\n  - served_model_name: m\n    ttft_p99_ms: 500\n    tpot_p99_ms: 40\n"
                    "    replicas: [{replica_id: a, endpoint: 'http://127.0.0.1:1'}]\n")
    model = routes_file.load(path).models[0]
    assert (model.ttft_p99_ms, model.tpot_p99_ms) == (500, 40)
