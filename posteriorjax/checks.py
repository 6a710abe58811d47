"""Argument checks shared by the package.

Each check returns the checked value (converted where it says so) or raises
ValueError in the house format ``"<name>: expected <what>, got <value>"``.
Static checks (`positive_int`, `positive`, `in_choices`) need concrete Python or
NumPy values; `positive_scalar` also accepts a traced value, and then carries the
check as an `eqx.error_if` runtime error. Checks of ensembles and weights for the
metrics are `metrics._checks`.
"""

from __future__ import annotations

import math
from collections.abc import Collection

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np


def is_traced(*values) -> bool:
    """True if any argument is a JAX tracer (we are inside jit/vmap/grad)."""
    return any(isinstance(v, jax.core.Tracer) for v in values)


def positive_int(name: str, value) -> int:
    """`value` as an int: a Python or NumPy integer >= 1 (bools are not integers here)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ValueError(f"{name}: expected a positive integer, got {value!r}")
    return int(value)


def positive(name: str, value, *, allow_zero: bool = False) -> float:
    """`value` as a float: a static finite number > 0 (>= 0 with `allow_zero`).

    Python and NumPy reals and concrete 0-d arrays pass; bools, strings, other
    objects and non-finite values do not, and a traced value is a TypeError (a
    static check cannot see it: use `positive_scalar`).
    """
    if is_traced(value):
        raise TypeError(f"{name}: expected a static number, got a traced value (it cannot be checked here)")
    try:
        v = math.nan if isinstance(value, bool | str) else float(value)
    except (TypeError, ValueError):
        v = math.nan
    if not (math.isfinite(v) and (v >= 0 if allow_zero else v > 0)):
        raise ValueError(f"{name}: expected a finite number {'>= 0' if allow_zero else '> 0'}, got {value!r}")
    return v


def positive_scalar(name: str, value, dtype, *, allow_zero: bool = False) -> jax.Array:
    """`value` as a scalar array of `dtype`, finite and > 0 (>= 0 with `allow_zero`).

    Concrete values raise ValueError; traced ones carry the check as an
    `eqx.error_if` (so a vmapped sweep over the value stays checked).
    """
    value = jnp.asarray(value, dtype=dtype)
    if value.ndim != 0:
        raise ValueError(f"{name}: expected a scalar (vmap for a sweep), got shape {value.shape}")
    what = f"{name}: expected a finite value {'>= 0' if allow_zero else '> 0'}"
    if is_traced(value):
        bad = ~jnp.isfinite(value) | ((value < 0) if allow_zero else (value <= 0))
        return eqx.error_if(value, bad, what)
    v = float(np.asarray(value))
    if not (math.isfinite(v) and (v >= 0 if allow_zero else v > 0)):
        raise ValueError(f"{what}, got {v!r}")
    return value


def in_choices(name: str, value, choices: Collection):
    """`value`, checked to be one of `choices` (shown as given: pass a sorted list for a dict)."""
    try:
        ok = value in choices
    except TypeError:  # an unhashable value is in no set or dict
        ok = False
    if not ok:
        raise ValueError(f"{name}: expected one of {choices}, got {value!r}")
    return value
