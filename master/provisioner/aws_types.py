"""How many GPUs an EC2 instance type has, so an aws provider need not spell out `instance_slots`.

Determined's aws provider knows its instance types' GPU counts; a config written for it names
only `instance_type`. The figures are AWS's published accelerator counts per type. A type not
listed here still needs `instance_slots` in the config (the error lists the families known);
a CPU-only type listed here offers one slot, as a GPU-less det-agent does.
"""

from __future__ import annotations

# family -> {size: GPUs}; sizes not listed in a family have one GPU.
_GPU_FAMILIES: dict[str, dict[str, int]] = {
    "p2": {"xlarge": 1, "8xlarge": 8, "16xlarge": 16},
    "p3": {"2xlarge": 1, "8xlarge": 4, "16xlarge": 8},
    "p3dn": {"24xlarge": 8},
    "p4d": {"24xlarge": 8},
    "p4de": {"24xlarge": 8},
    "p5": {"48xlarge": 8},
    "p5e": {"48xlarge": 8},
    "p5en": {"48xlarge": 8},
    "g3": {"4xlarge": 1, "8xlarge": 2, "16xlarge": 4},
    "g3s": {"xlarge": 1},
    "g4dn": {"12xlarge": 4, "metal": 8},
    "g5": {"12xlarge": 4, "24xlarge": 4, "48xlarge": 8},
    "g6": {"12xlarge": 4, "24xlarge": 4, "48xlarge": 8},
    "g6e": {"12xlarge": 4, "24xlarge": 4, "48xlarge": 8},
}
# Families without GPUs: an agent on them offers one CPU slot.
_CPU_FAMILIES = frozenset(
    {"t2", "t3", "t3a", "m5", "m5a", "m6i", "m6a", "m7i", "c5", "c5a", "c6i", "c7i", "r5", "r6i"}
)


def known_families() -> list[str]:
    return sorted(set(_GPU_FAMILIES) | _CPU_FAMILIES)


def slots_for(instance_type: str) -> int | None:
    """Slots one instance of `instance_type` offers, or None when the type is not known."""
    family, dot, size = instance_type.partition(".")
    if not dot or not size:
        return None
    if family in _CPU_FAMILIES:
        return 1
    sizes = _GPU_FAMILIES.get(family)
    if sizes is None:
        return None
    return sizes.get(size, 1)
