"""In-process scheduler nodes on loopback (real gRPC, real admin HTTP, SQLite in a temp dir), shared by
the server and admin tests: the credentials they use, a node factory, and waiting for leadership."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

from scheduler import service, testing
from scheduler.server import auth

TOKENS = {"c1": "token-of-c1", "c2": "token-of-c2"}
ROUTER_TOKEN = "router-token"
ADMIN_TOKEN = "admin-token"

MakeService = Callable[..., Awaitable[service.SchedulerService]]


@contextlib.asynccontextmanager
async def service_factory(tmp_path, admin_auth: auth.AdminAuth | None = None,
                          **defaults) -> AsyncIterator[MakeService]:
    """Yields make(state_url=None, env=None, **overrides): a started node; every node is stopped on exit.
    ``defaults`` are config settings applied before each call's overrides; ``admin_auth`` replaces
    the single ``ADMIN_TOKEN`` admin."""
    made: list[service.SchedulerService] = []

    async def make(state_url: str | None = None, env: dict | None = None, **overrides) -> service.SchedulerService:
        cfg = testing.local_config(state_url or f"sqlite://{tmp_path}/state.db", scheduler_id=f"node{len(made)}",
                                   **{**defaults, **overrides})
        tokens = auth.TokenBook(auth.TokensFile({k: auth.digest(v) for k, v in TOKENS.items()},
                                                (auth.digest(ROUTER_TOKEN),)), env=env or {})
        svc = service.SchedulerService(cfg, env=env or {}, tokens=tokens,
                                       admin_auth=admin_auth or auth.AdminAuth(auth.digest(ADMIN_TOKEN)))
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
