"""Per-GPU-type hardware figures (datasheets; dense BF16, approximate).

These feed the capacity model (meridian.capacity), which the emulator, the autoscaler, the solver
and the simulator all read, so the four agree on what a replica can serve."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class GpuSpec:
    """One GPU type. Units are in the field names."""

    name: str
    memory_gib: float
    bandwidth_gb_per_s: float
    bf16_tflops: float
    # Supports FP8 tensor cores (Hopper, Ada): FP8 weights halve bytes and double peak FLOP/s.
    fp8: bool


_GPUS = (
    GpuSpec("B200", 180, 8000, 2250, True),
    GpuSpec("H200", 141, 4800, 989, True),
    GpuSpec("H100", 80, 3350, 989, True),
    GpuSpec("H100-NVL", 94, 3900, 835, True),
    GpuSpec("A100-80GB", 80, 2039, 312, False),
    GpuSpec("A100-40GB", 40, 1555, 312, False),
    GpuSpec("L40S", 48, 864, 362, True),
    GpuSpec("A10G", 24, 600, 70, False),
    GpuSpec("A10", 24, 600, 125, False),
    GpuSpec("L4", 24, 300, 121, True),
    GpuSpec("T4", 16, 320, 65, False),
)

GPUS: dict[str, GpuSpec] = {g.name: g for g in _GPUS}


class UnknownGpuType(KeyError):
    """Raised for a GPU type name the catalog does not know."""


def gpu(name: str) -> GpuSpec:
    """The spec of GPU type ``name`` (catalog spelling, e.g. "A100-80GB")."""
    try:
        return GPUS[name]
    except KeyError:
        raise UnknownGpuType(f"unknown GPU type {name!r}; known: {', '.join(sorted(GPUS))}") from None


def names() -> list[str]:
    """All known GPU type names, sorted."""
    return sorted(GPUS)
