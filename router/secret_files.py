"""The router's secrets (its scheduler token, the replicas' API key) from a file or the environment,
never from a command-line value (``ps`` shows those to every user of the machine).

Each secret has a ``--...-file`` flag (``*_file`` setting) and an environment variable; the file
wins when both are given. The file holds the secret alone (surrounding whitespace, a trailing
newline, is stripped). Problems name the setting, its flag and the path, never the value."""

from __future__ import annotations

import dataclasses
import os
import pathlib
from collections.abc import Mapping

__all__ = ["SCHEDULER_TOKEN", "UPSTREAM_API_KEY", "Secret", "SecretFileError"]


class SecretFileError(ValueError):
    """A secret file is missing, unreadable or empty; the message names the setting and the path."""


@dataclasses.dataclass(frozen=True)
class Secret:
    setting: str  # the config key of the file path
    flag: str
    env: str

    def read(self, path: str, environ: Mapping[str, str] | None = None) -> str:
        """The secret: from ``path`` when set, else from the environment variable ("" when neither)."""
        if path:
            resolved = pathlib.Path(path).expanduser()
            try:
                value = resolved.read_text(encoding="utf-8").strip()
            except (OSError, UnicodeDecodeError) as exc:
                reason = getattr(exc, "strerror", None) or str(exc)
                raise SecretFileError(f"{self.setting} ({self.flag}) {path}: cannot read: {reason}") from None
            if not value:
                raise SecretFileError(f"{self.setting} ({self.flag}) {path}: the file is empty; put the secret in it")
            if "\n" in value:
                raise SecretFileError(f"{self.setting} ({self.flag}) {path}: more than one line; the file must hold "
                                      f"the secret alone")
            return value
        return (os.environ if environ is None else environ).get(self.env, "").strip()


SCHEDULER_TOKEN = Secret("scheduler_token_file", "--scheduler-token-file", "MERIDIAN_ROUTER_SCHEDULER_TOKEN")
UPSTREAM_API_KEY = Secret("upstream_api_key_file", "--upstream-api-key-file", "MERIDIAN_UPSTREAM_API_KEY")
