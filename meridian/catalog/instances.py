"""The offline GPU instance catalog: one row per (cloud, instance type, region) with GPU type,
count, memory and on-demand and spot prices. Loaded from ``meridian/data/gpu_catalog.csv`` (its
header says where the figures come from) and used wherever a cloud API does not give prices."""

from __future__ import annotations

import csv
import dataclasses
import functools
import io
import pathlib

_DATA = pathlib.Path(__file__).resolve().parent.parent / "data" / "gpu_catalog.csv"


@dataclasses.dataclass(frozen=True)
class InstanceOffer:
    cloud: str
    instance_type: str
    region: str
    gpu_type: str
    gpu_count: int
    gpu_memory_gib: int
    vcpus: int
    memory_gib: int
    price_per_hour_usd: float
    spot_price_per_hour_usd: float


class Catalog:
    """An immutable, indexed set of offers."""

    def __init__(self, offers: list[InstanceOffer]):
        self._offers = tuple(offers)
        self._by_key = {(o.cloud, o.instance_type, o.region): o for o in offers}

    @property
    def offers(self) -> tuple[InstanceOffer, ...]:
        return self._offers

    def lookup(self, cloud: str, instance_type: str, region: str) -> InstanceOffer | None:
        return self._by_key.get((cloud, instance_type, region))

    def instance_types(self, cloud: str | None = None) -> list[str]:
        return sorted({o.instance_type for o in self._offers if cloud in (None, o.cloud)})

    def by_instance_type(self, cloud: str, instance_type: str) -> list[InstanceOffer]:
        return [o for o in self._offers if o.cloud == cloud and o.instance_type == instance_type]

    def regions(self, cloud: str | None = None) -> list[str]:
        return sorted({o.region for o in self._offers if cloud in (None, o.cloud)})

    def gpu_types(self) -> list[str]:
        return sorted({o.gpu_type for o in self._offers})


def parse(text: str) -> Catalog:
    """Parse catalog CSV text; lines starting with '#' are the header comment."""
    body = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    offers = []
    for row in csv.DictReader(io.StringIO(body)):
        offers.append(
            InstanceOffer(
                cloud=row["cloud"],
                instance_type=row["instance_type"],
                region=row["region"],
                gpu_type=row["gpu_type"],
                gpu_count=int(row["gpu_count"]),
                gpu_memory_gib=int(row["gpu_memory_gib"]),
                vcpus=int(row["vcpus"]),
                memory_gib=int(row["memory_gib"]),
                price_per_hour_usd=float(row["price_per_hour_usd"]),
                spot_price_per_hour_usd=float(row["spot_price_per_hour_usd"]),
            )
        )
    return Catalog(offers)


@functools.cache
def default() -> Catalog:
    """The catalog shipped with Meridian."""
    return parse(_DATA.read_text())
