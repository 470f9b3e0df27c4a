"""A leader cut off from the store stops acting before its lease could lapse."""

from __future__ import annotations

from scheduler import clock as clock_mod
from scheduler import state
from scheduler.state import base, election


class Unreachable(state.SqliteStore):
    """The SQLite store, except that renewals fail as if the network to the store were down."""

    down = False

    async def renew_lease(self, holder: str, token: int, ttl_s: float) -> bool:
        if self.down:
            raise base.StateError("connection refused")
        return await super().renew_lease(holder, token, ttl_s)


async def test_leader_that_cannot_renew_stops_leading_before_the_lease_lapses():
    """Renewals failing, the leader keeps its term only for 80% of the TTL since its last renewal
    (is_leader turns false on its own), and its next round steps it down."""
    clock = clock_mod.ManualClock(1000.0)
    store = Unreachable(":memory:", clock=clock)
    deposed = []

    async def on_deposed(lease):
        deposed.append(lease.token)

    errors: list[str] = []
    elector = election.LeaderElector(store, "a", ttl_s=10.0, renew_interval_s=2.0, poll_interval_s=1.0, clock=clock,
                                     on_deposed=on_deposed, on_error=errors.append)
    try:
        await elector.step()
        assert elector.is_leader
        term = elector.token
        store.down = True
        clock.advance(2.0)
        await elector.step()  # a failed renewal alone does not depose
        assert elector.is_leader and deposed == []
        assert errors == ["lease_renew"]  # counted (errors_total{where="lease_renew"}), not only logged
        clock.advance(6.1)  # 8.1 s since the last good renewal: beyond 80% of the 10 s TTL
        assert not elector.is_leader and elector.token == 0
        await elector.step()
        assert deposed == [term]
    finally:
        await store.close()
