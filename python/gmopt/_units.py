"""Byte sizes written the way people write them: 512MiB, 1.5GB, 2e9."""

import re

_UNITS = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "gb": 1000**3,
    "t": 1000**4, "tb": 1000**4,
    "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4,
}


def parse_bytes(value, what="memory_limit"):
    """An int number of bytes from an int, a float or a string such as
    ``"512MiB"`` or ``"1.5 GB"``; ValueError for anything else or a size
    that is not positive."""
    if isinstance(value, bool):
        raise TypeError(f"{what}: expected a byte count, got a bool")
    if isinstance(value, (int, float)):
        number = float(value)
    elif isinstance(value, str):
        match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*", value)
        if not match or match.group(2).lower() not in _UNITS:
            raise ValueError(f"{what}: cannot read {value!r} as a size (e.g. 512MiB, 1.5GB)")
        number = float(match.group(1)) * _UNITS[match.group(2).lower()]
    else:
        raise TypeError(f"{what}: expected a byte count or a size string, got {type(value).__name__}")
    if number < 1:
        raise ValueError(f"{what}: must be at least one byte, got {value!r}")
    return int(number)
