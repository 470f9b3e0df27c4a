"""Address and port pools: pod IPs (the "CNI"), node InternalIPs, Service ClusterIPs, load-balancer
ingress IPs and NodePorts. Every range is inside 127.0.0.0/8, which Linux routes to ``lo`` as a
whole, so each pod can bind its own address on the same port as its neighbours."""

from __future__ import annotations

import ipaddress
import random


class IpPool:
    """Hands out addresses of ``cidr`` in order from a random starting point, skipping the first ``skip``
    host addresses and any in use; a released address is reused only after the rest of the range went
    round once (so a late packet or a lingering process never meets a new owner at once). The random
    start keeps two fake clusters on one host (parallel test runs) off each other's addresses."""

    def __init__(self, cidr: str, *, skip: int = 1, name: str = "ip", rng: random.Random | None = None):
        try:
            self.network = ipaddress.IPv4Network(cidr)
        except ValueError as exc:
            raise ValueError(f"{name} range {cidr!r} is not an IPv4 CIDR: {exc}") from None
        if not self.network.subnet_of(ipaddress.IPv4Network("127.0.0.0/8")):
            raise ValueError(f"{name} range {cidr} must lie inside 127.0.0.0/8 (loopback) so nothing leaves the host")
        if self.network.num_addresses < skip + 3:
            raise ValueError(f"{name} range {cidr} is too small")
        self.name = name
        self._first = int(self.network.network_address) + 1 + skip
        self._last = int(self.network.broadcast_address) - 1
        self._next = self._first + (rng or random.Random()).randrange(self._last - self._first + 1)
        self._used: set[int] = set()

    def allocate(self) -> str:
        size = self._last - self._first + 1
        for _ in range(size):
            candidate = self._next
            self._next = self._first if self._next >= self._last else self._next + 1
            if candidate not in self._used:
                self._used.add(candidate)
                return str(ipaddress.IPv4Address(candidate))
        raise RuntimeError(f"{self.name} range {self.network} is exhausted ({len(self._used)} in use)")

    def reserve(self, address: str) -> bool:
        """Mark ``address`` used (a caller-chosen ClusterIP); False when taken or outside the range."""
        value = int(ipaddress.IPv4Address(address))
        if not self._first <= value <= self._last or value in self._used:
            return False
        self._used.add(value)
        return True

    def contains(self, address: str) -> bool:
        try:
            return ipaddress.IPv4Address(address) in self.network
        except ValueError:
            return False

    def release(self, address: str | None) -> None:
        if address:
            try:
                self._used.discard(int(ipaddress.IPv4Address(address)))
            except ValueError:
                pass


class PortPool:
    """NodePorts (30000-32767 by default), handed out from the low end."""

    def __init__(self, low: int = 30000, high: int = 32767):
        self.low, self.high = low, high
        self._used: set[int] = set()

    def allocate(self) -> int:
        for port in range(self.low, self.high + 1):
            if port not in self._used:
                self._used.add(port)
                return port
        raise RuntimeError(f"node port range {self.low}-{self.high} is exhausted")

    def reserve(self, port: int) -> bool:
        if not self.low <= port <= self.high or port in self._used:
            return False
        self._used.add(port)
        return True

    def release(self, port: int | None) -> None:
        if port:
            self._used.discard(port)
