"""In-process scheduler nodes on loopback (real gRPC, real admin HTTP, SQLite in a temp dir)."""

from __future__ import annotations

import pytest

from scheduler import service, testing
from scheduler.server import auth

TOKENS = {"c1": "token-of-c1", "c2": "token-of-c2"}
ROUTER_TOKEN = "router-token"
ADMIN_TOKEN = "admin-token"


@pytest.fixture
async def make_service(tmp_path):
    made: list[service.SchedulerService] = []

    async def make(state_url: str | None = None, env: dict | None = None, **overrides) -> service.SchedulerService:
        # The gRPC edge is under test here, not the reconciler: shadow mode (no directives), no grace.
        overrides = {"directives_enabled": False, "adopt_grace_s": 0.0, **overrides}
        cfg = testing.local_config(state_url or f"sqlite://{tmp_path}/state.db", scheduler_id=f"node{len(made)}",
                                   **overrides)
        tokens = auth.TokenBook(auth.TokensFile({k: auth.digest(v) for k, v in TOKENS.items()},
                                                (auth.digest(ROUTER_TOKEN),)), env=env or {})
        svc = service.SchedulerService(cfg, env=env or {}, tokens=tokens,
                                       admin_auth=auth.AdminAuth(auth.digest(ADMIN_TOKEN)))
        await svc.start()
        made.append(svc)
        return svc

    try:
        yield make
    finally:
        for svc in reversed(made):
            await svc.stop(grace_s=0.5)


async def leading(svc: service.SchedulerService) -> service.SchedulerService:
    await testing.wait_for(lambda: svc.token > 0, what=f"{svc.config.scheduler_id} leading")
    return svc
