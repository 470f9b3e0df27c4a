"""Default figures of the simulator and the built-in scenario ("default"), with where they come from.

The default scenario replays the example specs (``examples/*.yaml``: three deployments, the
capacity policy, nine clusters on AWS, GCP and Azure) over one day:
- traffic: each deployment's clients follow their local day (peak mid-afternoon, a quarter of the
  peak at night); the request mix is each spec's ``workload``;
- two spikes (chat traffic from New York triples for half an hour; London doubles for 20 minutes);
- spot: the clusters' own background preemption rate (5% per node-hour in the examples) plus three
  correlated waves in different clouds (GPU spot capacity is lost in bursts within a region, e.g.
  SkyServe, EuroSys 2025, Fig. 2);
- stock-outs: L40S spot in eu-west-1, L4 spot in us-central1 and on-demand H100 in us-east-1 cannot
  grow for four hours each;
- a one-hour outage of us-east-1 at 16:00 UTC (11:00 in New York).
Node provisioning takes three minutes (the Cluster specs' 10 s is the live demo's figure)."""

from __future__ import annotations

import pathlib

TICK_S = 60.0
CONTROL_INTERVAL_S = 180.0
WARMUP_MIN = 60.0
SAMPLES_PER_STREAM = 8
PROVISIONING_DELAY_S = 180.0
COLD_START_BASE_S = 60.0
COLD_START_S_PER_GIB = 1.5
SPOT_NOTICE_S = {"aws": 120.0, "gcp": 30.0, "azure": 30.0, "local": 120.0}

# Standard time (no daylight saving) of each client metro in meridian/data/regions.csv, plus the
# examples' extra za-south.
CLIENT_UTC_OFFSETS_H = {
    "na-east": -5.0, "na-central": -6.0, "na-west": -8.0, "sa-east": -3.0, "eu-west": 0.0, "eu-central": 1.0,
    "ap-northeast": 9.0, "ap-southeast": 8.0, "ap-south": 5.5, "oceania": 10.0, "za-south": 2.0,
}

DEFAULT_SPECS = ("deployments.yaml", "capacity-policy.yaml", "clusters.yaml", "latency-overrides.yaml")

DEFAULT_SCENARIO: dict = {
    "name": "default",
    "description": "One day of the example fleet: diurnal traffic in five client regions, two spikes, "
                   "spot preemption waves in three clouds, three stock-outs and a one-hour us-east-1 outage.",
    "specs": list(DEFAULT_SPECS),
    "hours": 24.0,
    "start_utc_hour": 0.0,
    "seed": 7,
    "traffic": [
        {"deployment": "chat-8b", "peak_local_hour": 14.0, "trough_share": 0.25,
         "peak_rps": {"na-east": 4.0, "na-west": 2.0, "eu-west": 3.5, "ap-northeast": 2.0, "ap-south": 1.5}},
        {"deployment": "reasoning-70b", "peak_local_hour": 15.0, "trough_share": 0.2,
         "peak_rps": {"na-east": 2.0, "eu-west": 1.5}},
        {"deployment": "embed", "peak_local_hour": 13.0, "trough_share": 0.3,
         "peak_rps": {"na-east": 30.0, "eu-west": 25.0, "ap-northeast": 15.0}},
    ],
    "spikes": [
        {"at_h": 15.0, "duration_min": 30.0, "multiplier": 3.0, "deployment": "chat-8b", "client_region": "na-east"},
        {"at_h": 9.5, "duration_min": 20.0, "multiplier": 2.0, "client_region": "eu-west"},
    ],
    "spot": {
        "waves": [
            {"at_h": 4.5, "region": "eu-west-1", "share": 0.7},
            {"at_h": 11.0, "region": "us-central1", "share": 0.6},
            {"at_h": 19.5, "region": "japaneast", "share": 0.7},
        ],
    },
    "stock_outs": [
        {"at_h": 7.0, "duration_h": 4.0, "cluster": "aws-euw1", "pool": "l40s-spot"},
        {"at_h": 12.0, "duration_h": 4.0, "cluster": "gcp-usc1", "pool": "l4-spot"},
        {"at_h": 14.0, "duration_h": 4.0, "cluster": "aws-use1", "pool": "h100-od"},
    ],
    "outages": [
        {"at_h": 16.0, "duration_h": 1.0, "region": "us-east-1"},
    ],
}


def examples_dir() -> pathlib.Path:
    """Where the example specs live (the repository's ``examples/``)."""
    return pathlib.Path(__file__).resolve().parents[2] / "examples"
