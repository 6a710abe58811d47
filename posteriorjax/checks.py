"""Validators of config values shared by the wiring layer (errors name the field, expected, given)."""

from __future__ import annotations

import numpy as np


def positive_int(name: str, value, minimum: int = 1) -> int:
    """`value` as an int, refusing a bool, a non-integer or a value below `minimum`."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name}: expected an integer >= {minimum}, got {value!r}")
    return int(value)


def as_dict(section) -> dict:
    """A config section (`ConfigDict`, mapping or None) as a plain dict (None -> {})."""
    if section is None:
        return {}
    return section.to_dict() if hasattr(section, "to_dict") else dict(section)
