"""The bill per hour of a fleet at one moment, and how it splits.

Rules (one place for them; the scheduler's ``GET /v1/cost``, ``meridian cost``, the demo and the
simulator all call ``bill``):
- The bill is node-hours x price, as the clouds bill: every node of a pool, running or still
  provisioning, at its pool's price (``prices.Price``: a reserved commitment's price up to its
  nodes, the on-demand price beyond). Idle GPUs on a paid node are billed like busy ones.
- A replica's share is the GPUs it holds x its pool's price per GPU (the pool's bill over its
  GPUs, so a pool billed at two prices shares one mean price per GPU). The pool's idle remainder
  is its bill less its replicas' shares: shares + idle = bill, pool by pool. Replicas holding more
  GPUs than the pool reports (a report racing a node's removal) split the pool's bill among them
  and leave no idle remainder.
- A replica whose pool is not in the inventory has no price: it is listed in ``unpriced``, not
  billed (the cloud bills its node, which the scheduler does not know).

Pure: typed values in, a frozen ``Bill`` out. ``group`` gives the bill by model, team, cloud,
tier, region, cluster or GPU type."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from meridian.cost import prices

# The dimensions a bill groups by: those of the replica's owner, and those of the pool.
OWNER_DIMS = ("model", "deployment", "team")
POOL_DIMS = ("cloud", "tier", "region", "cluster", "gpu_type")
DIMS = OWNER_DIMS + POOL_DIMS


@dataclasses.dataclass(frozen=True, order=True)
class Where:
    """A pool's identity: ``key`` is ``cluster/pool``."""

    key: str
    cluster: str
    cloud: str
    region: str
    pool: str
    gpu_type: str
    tier: str


@dataclasses.dataclass(frozen=True, order=True)
class Owner:
    """Whose replicas they are: the served model, its deployment and the deployment's team ("" when
    the deployment names none)."""

    model: str
    deployment: str
    team: str = ""


@dataclasses.dataclass(frozen=True)
class Pool:
    """A pool as billed now: ``nodes`` running or provisioning, ``gpus_per_node`` each."""

    where: Where
    gpus_per_node: int
    nodes: int
    price: prices.Price
    nodes_pending: int = 0  # of ``nodes``, those still provisioning (billed from the order)
    instance_type: str = ""

    def __post_init__(self) -> None:
        if self.nodes < 0 or self.gpus_per_node < 0:
            raise ValueError(f"pool {self.where.key}: nodes and gpus_per_node must be >= 0")

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node


@dataclasses.dataclass(frozen=True)
class Replica:
    replica_id: str
    pool_key: str
    gpus: int
    owner: Owner


@dataclasses.dataclass(frozen=True)
class Part:
    """A piece of a bill: what ``owner``'s replicas on one pool hold (``owner`` None: the pool's idle
    GPUs). ``replicas`` and ``gpus`` are counts in a bill of the moment and replica-hours and GPU-hours
    over a window; ``usd`` is $/h in a bill of the moment and $ over a window."""

    where: Where
    owner: Owner | None
    replicas: float
    gpus: float
    usd: float

    def key(self, dim: str) -> str | None:
        """This part's value of ``dim`` (None: an idle part, for an owner's dimension)."""
        if dim in OWNER_DIMS:
            return None if self.owner is None else getattr(self.owner, dim)
        if dim in POOL_DIMS:
            return getattr(self.where, dim)
        raise ValueError(f"unknown dimension {dim!r}; one of {', '.join(DIMS)}")


@dataclasses.dataclass(frozen=True)
class PoolLine:
    """One pool's bill: ``usd`` ($/h) for ``gpus`` GPUs, ``gpus_held`` of them by replicas."""

    pool: Pool
    usd: float
    gpus: int
    gpus_held: int
    usd_per_gpu: float
    idle_gpus: int
    idle_usd: float


@dataclasses.dataclass(frozen=True)
class Bill:
    pools: tuple[PoolLine, ...]
    parts: tuple[Part, ...]
    unpriced: tuple[Replica, ...] = ()

    @property
    def usd(self) -> float:
        """The bill, $/h: every node of every pool at its price."""
        return sum(line.usd for line in self.pools)

    @property
    def shares_usd(self) -> float:
        return sum(p.usd for p in self.parts if p.owner is not None)

    @property
    def idle_usd(self) -> float:
        return sum(p.usd for p in self.parts if p.owner is None)

    @property
    def nodes(self) -> int:
        return sum(line.pool.nodes for line in self.pools)

    @property
    def gpus(self) -> int:
        return sum(line.gpus for line in self.pools)

    @property
    def gpus_held(self) -> int:
        return sum(line.gpus_held for line in self.pools)


def bill(pools: Iterable[Pool], replicas: Iterable[Replica]) -> Bill:
    """The bill of these pools per hour, with each owner's share per pool and each pool's idle part."""
    by_key: dict[str, Pool] = {}
    for p in pools:
        if p.where.key in by_key:
            raise ValueError(f"pool {p.where.key} is listed twice")
        by_key[p.where.key] = p
    held: dict[str, dict[Owner, list[int]]] = {}
    unpriced = []
    for r in replicas:
        if r.pool_key not in by_key:
            unpriced.append(r)
            continue
        acc = held.setdefault(r.pool_key, {}).setdefault(r.owner, [0, 0])
        acc[0] += 1
        acc[1] += max(0, r.gpus)
    lines, parts = [], []
    for key in sorted(by_key):
        p = by_key[key]
        usd = p.price.usd_per_hour(p.nodes)
        owners = held.get(key, {})
        gpus_held = sum(g for _, g in owners.values())
        per_gpu = usd / max(p.gpus, gpus_held) if max(p.gpus, gpus_held) > 0 else 0.0
        shares = 0.0
        for owner in sorted(owners):
            n, g = owners[owner]
            share = g * per_gpu
            shares += share
            parts.append(Part(p.where, owner, n, g, share))
        idle_gpus = max(0, p.gpus - gpus_held)
        idle_usd = usd - shares  # the remainder, so that shares + idle is the pool's bill
        if abs(idle_usd) <= 1e-9 * max(1.0, usd):
            idle_usd = 0.0
        if idle_gpus or idle_usd:
            parts.append(Part(p.where, None, 0, idle_gpus, idle_usd))
        lines.append(PoolLine(p, usd, p.gpus, gpus_held, per_gpu, idle_gpus, idle_usd))
    return Bill(tuple(lines), tuple(parts), tuple(unpriced))


@dataclasses.dataclass(frozen=True)
class Row:
    """A bill grouped by one dimension: ``usd`` = ``shares_usd`` + ``idle_usd`` for the value ``key``
    of a pool's dimension; an owner's dimension has no idle part (the idle GPUs are nobody's: they
    are the bill's ``idle_usd``, apart)."""

    key: str
    usd: float
    shares_usd: float
    idle_usd: float
    replicas: float
    gpus: float
    idle_gpus: float


def group(parts: Sequence[Part], dim: str) -> list[Row]:
    """``parts`` summed by ``dim`` (one of ``DIMS``), largest first. For an owner's dimension the
    idle parts are left out: add the bill's idle to the rows to get the bill."""
    acc: dict[str, list[float]] = {}
    for p in parts:
        key = p.key(dim)
        if key is None:
            continue
        a = acc.setdefault(key, [0.0] * 6)
        a[0] += p.usd
        if p.owner is None:
            a[2] += p.usd
            a[5] += p.gpus
        else:
            a[1] += p.usd
            a[3] += p.replicas
        a[4] += p.gpus
    rows = [Row(k, a[0], a[1], a[2], a[3], a[4], a[5]) for k, a in acc.items()]
    return sorted(rows, key=lambda r: (-r.usd, r.key))
