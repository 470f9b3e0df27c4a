"""Network round-trip times between client regions and cloud regions.

The default table is computed from each region's metro coordinates (``meridian/data/regions.csv``):
RTT = 2 ms + great-circle km / 75, i.e. light in fibre at ~200 km/ms, a 1.3 route factor, there and
back. Measured figures for single pairs override it through ``LatencyMap`` specs. The router (to pick
the nearest replica), the solver (to check latency SLAs), the demo (to delay traffic) and the
simulator all read the same map."""

from __future__ import annotations

import csv
import dataclasses
import functools
import io
import math
import pathlib
from collections.abc import Iterable, Mapping

_DATA = pathlib.Path(__file__).resolve().parent.parent / "data" / "regions.csv"
BASE_RTT_MS = 2.0
KM_PER_RTT_MS = 75.0


@dataclasses.dataclass(frozen=True)
class Region:
    name: str
    kind: str  # "cloud" or "client"
    cloud: str  # "" for client regions
    latitude: float
    longitude: float
    metro: str = ""


def great_circle_km(a: Region, b: Region) -> float:
    lat1, lon1, lat2, lon2 = map(math.radians, (a.latitude, a.longitude, b.latitude, b.longitude))
    h = math.sin((lat2 - lat1) / 2) ** 2 + math.cos(lat1) * math.cos(lat2) * math.sin((lon2 - lon1) / 2) ** 2
    return 2 * 6371.0 * math.asin(math.sqrt(h))


class UnknownRegion(KeyError):
    """Raised for a region name the map does not know."""


class LatencyMap:
    """RTT lookups between any two known places (client or cloud regions), symmetric."""

    def __init__(self, regions: Iterable[Region], overrides: Mapping[tuple[str, str], float] | None = None):
        self._regions = {r.name: r for r in regions}
        self._overrides: dict[tuple[str, str], float] = {}
        for (a, b), rtt_ms in (overrides or {}).items():
            self._overrides[(a, b)] = rtt_ms
            self._overrides[(b, a)] = rtt_ms
        self._cache: dict[tuple[str, str], float] = {}

    @property
    def regions(self) -> Mapping[str, Region]:
        return self._regions

    def cloud_regions(self, cloud: str | None = None) -> list[str]:
        return sorted(r.name for r in self._regions.values() if r.kind == "cloud" and cloud in (None, r.cloud))

    def client_regions(self) -> list[str]:
        return sorted(r.name for r in self._regions.values() if r.kind == "client")

    def __contains__(self, name: object) -> bool:
        return name in self._regions

    def region(self, name: str) -> Region:
        try:
            return self._regions[name]
        except KeyError:
            raise UnknownRegion(f"unknown region {name!r}") from None

    def rtt_ms(self, a: str, b: str) -> float:
        """Round-trip time in milliseconds between places ``a`` and ``b``."""
        key = (a, b)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        if key in self._overrides:
            value = self._overrides[key]
        elif a == b:
            value = 1.0
        else:
            value = round(BASE_RTT_MS + great_circle_km(self.region(a), self.region(b)) / KM_PER_RTT_MS, 1)
        self._cache[key] = value
        return value

    def with_overrides(
        self, regions: Iterable[Region] = (), overrides: Mapping[tuple[str, str], float] | None = None
    ) -> LatencyMap:
        """A new map with extra regions and pair overrides layered on this one."""
        merged = dict(self._regions)
        merged.update({r.name: r for r in regions})
        pairs = dict(self._overrides)
        for (a, b), v in (overrides or {}).items():
            pairs[(a, b)] = v
            pairs[(b, a)] = v
        return LatencyMap(merged.values(), pairs)


def parse_regions(text: str) -> list[Region]:
    body = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    return [
        Region(
            name=row["name"],
            kind=row["kind"],
            cloud=row["cloud"],
            latitude=float(row["latitude"]),
            longitude=float(row["longitude"]),
            metro=row["metro"],
        )
        for row in csv.DictReader(io.StringIO(body))
    ]


@functools.cache
def default() -> LatencyMap:
    """The map shipped with Meridian (real AWS, GCP and Azure regions and client metros)."""
    return LatencyMap(parse_regions(_DATA.read_text()))
