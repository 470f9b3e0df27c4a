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
