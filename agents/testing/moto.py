"""moto in server mode, as a separate process on loopback: the AWS endpoint the real boto3 code
path talks to in tests and demos. ``with MotoServer() as url: ...`` starts it and always stops it."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import urllib.request

from meridian.demo import processes


class MotoServer:
    """``python -m moto.server -H host -p port`` in its own process group."""

    def __init__(self, host: str = "127.0.0.1", port: int | None = None):
        self.host = host
        self.port = port or processes.free_port()
        self._proc: subprocess.Popen | None = None
        self._log = tempfile.NamedTemporaryFile(prefix="meridian-moto-", suffix=".log", delete=False)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout_s: float = 60.0) -> str:
        # moto's server reads no real credentials, but botocore in the same environment may.
        env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
        self._proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", self.host, "-p", str(self.port)],
                                      stdout=self._log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"moto server exited with {self._proc.returncode}: {self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/moto-api/", timeout=1.0):
                    return self.url
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise TimeoutError(f"moto server not up on {self.url} after {timeout_s}s: {self.log_tail()}")

    def reset(self) -> None:
        """Forget every resource (POST /moto-api/reset)."""
        req = urllib.request.Request(f"{self.url}/moto-api/reset", method="POST", data=b"")
        with urllib.request.urlopen(req, timeout=10.0):
            pass

    def log_tail(self, n: int = 20) -> str:
        try:
            with open(self._log.name, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        self._log.close()
        try:
            os.unlink(self._log.name)
        except OSError:
            pass

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
