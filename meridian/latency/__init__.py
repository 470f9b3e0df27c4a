"""The latency map: RTT between client regions and cloud regions."""

from meridian.latency.map import LatencyMap, Region, UnknownRegion, default, great_circle_km

__all__ = ["LatencyMap", "Region", "UnknownRegion", "default", "great_circle_km"]
