"""GPU hardware figures and the offline instance price catalog."""

from meridian.catalog import gpus, instances
from meridian.catalog.gpus import GPUS, GpuSpec, UnknownGpuType, gpu
from meridian.catalog.instances import Catalog, InstanceOffer

__all__ = ["GPUS", "Catalog", "GpuSpec", "InstanceOffer", "UnknownGpuType", "gpu", "gpus", "instances"]
