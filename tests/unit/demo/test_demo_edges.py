"""The demo's edge routers: one per client region, each region's traffic sent to its own."""

from __future__ import annotations

from meridian.demo import fleet, traffic


def test_each_client_region_gets_its_own_router_and_its_traffic_goes_there(tmp_path):
    """With edge regions, every region has a router URL (the first stands for status), and the
    traffic generator's client for a region talks to that region's router with its region header."""
    edges = fleet.LocalFleet(fleet.FleetConfig(workdir=tmp_path, edge_regions=("na-east", "ap-south")))
    urls = edges.router_urls
    assert list(urls) == ["na-east", "ap-south"] and len(set(urls.values())) == 2
    assert edges.router_url == urls["na-east"]
    gen = traffic.TrafficGenerator(urls, "k", ["na-east", "ap-south"], [traffic.ModelTraffic("m", 1.0)],
                                   lambda region, t: 1.0, traffic.Recorder())
    for region, url in urls.items():
        client = gen._clients[region]
        assert str(client.base_url).rstrip("/") == f"{url}/v1"
        assert client.default_headers[traffic.REGION_HEADER] == region
    one = fleet.LocalFleet(fleet.FleetConfig(workdir=tmp_path, router_region="eu-west"))
    assert list(one.router_urls) == ["eu-west"]


def test_two_local_fleets_on_one_machine_get_disjoint_replica_ports(tmp_path):
    """Each fleet claims its own block of replica ports (below the OS's ephemeral range) for as long
    as it runs, so a demo beside end-to-end tests never starts a replica on the other's port; a
    stopped fleet's block is free again."""
    import yaml  # noqa: PLC0415

    def ranges(f: fleet.LocalFleet) -> set[int]:
        docs = yaml.safe_load_all((f.workdir / "clusters.yaml").read_text())
        out = set()
        for d in docs:
            lo, hi = (int(x) for x in d["spec"]["agent"]["replica_ports"].split("-"))
            out |= set(range(lo, hi + 1))
        return out

    a = fleet.LocalFleet(fleet.FleetConfig(workdir=tmp_path / "a"))
    b = fleet.LocalFleet(fleet.FleetConfig(workdir=tmp_path / "b"))
    a.prepare()
    b.prepare()
    try:
        assert ranges(a) and ranges(b) and not ranges(a) & ranges(b)
        assert max(ranges(a) | ranges(b)) < 32768
    finally:
        base = a.ports.base
        a.stop()
        b.stop()
    c = fleet.LocalFleet(fleet.FleetConfig(workdir=tmp_path / "c"))
    c.prepare()
    try:
        assert c.ports.base <= base  # the first free block again
    finally:
        c.stop()
