"""The Redis password from a file (``MERIDIAN_REDIS_PASSWORD_FILE``), so a mounted Secret need not
pass through the environment: against a real redis-server that requires a password (its config on
stdin, so the password is on no argv either)."""

from __future__ import annotations

import asyncio

import pytest
import redis.exceptions

from meridian import redisconn
from tests.conftest import running_redis

PASSWORD = "s3cret-for-the-test"


@pytest.fixture
def guarded_redis():
    with running_redis(f"requirepass {PASSWORD}\n") as url:
        yield url


async def _ping(url: str, env: dict[str, str]) -> bool:
    client = redisconn.connect(url, timeout_s=1.0, retries=0, env=env)
    try:
        return bool(await client.ping())
    finally:
        await client.aclose()


def test_the_password_file_is_read_and_wins_over_the_environment(guarded_redis, tmp_path):
    secret = tmp_path / "password"
    secret.write_text(PASSWORD + "\n")
    assert asyncio.run(_ping(guarded_redis, {"MERIDIAN_REDIS_PASSWORD_FILE": str(secret)}))
    # The file wins over a stale value in the environment.
    assert asyncio.run(_ping(guarded_redis, {"MERIDIAN_REDIS_PASSWORD_FILE": str(secret),
                                             "MERIDIAN_REDIS_PASSWORD": "stale"}))
    assert asyncio.run(_ping(guarded_redis, {"MERIDIAN_REDIS_PASSWORD": PASSWORD}))
    with pytest.raises(redis.exceptions.AuthenticationError):
        asyncio.run(_ping(guarded_redis, {}))


@pytest.mark.parametrize(("content", "words"), [(None, "cannot read"), ("", "the file is empty"),
                                                 ("a\nb\n", "more than one line")])
def test_a_bad_password_file_names_the_variable_and_path_never_a_value(tmp_path, content, words):
    secret = tmp_path / "password"
    if content is not None:
        secret.write_text(content)
    with pytest.raises(redisconn.SecretFileError) as exc:
        redisconn.connect("redis://127.0.0.1:1/0", env={"MERIDIAN_REDIS_PASSWORD_FILE": str(secret)})
    message = str(exc.value)
    assert message.startswith(f"MERIDIAN_REDIS_PASSWORD_FILE={secret}: {words}")
    assert "a\nb" not in message and "\nb" not in message
