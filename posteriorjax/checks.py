"""Argument checks shared by the package.

Each check returns the checked value (converted where it says so) or raises
ValueError in the house format ``"<name>: expected <what>, got <value>"``.
Static checks (`positive_int`, `positive`, `in_choices`) need concrete Python or
NumPy values; `positive_scalar` also accepts a traced value, and then carries the
check as a run-time check (`error_if`, from `posteriorjax.deferred`: `eqx.error_if`, or an
output of the program when it is wrapped in `deferred.functionalize`, as the sweep's is).

The ensemble checks of the metrics (`ensemble`, `finite`, `same_event_shape`,
`weights`): shape checks are static and always run; value checks run eagerly as
ValueError when the arrays are concrete; when traced, weight checks become
run-time checks (`error_if`), while non-finite *samples* are never an error
under tracing: the metrics return NaN (`nan_if_nonfinite`, `count_nonfinite`),
so a diverged sampler inside a sweep yields a record that says so instead of
aborting the sweep.
"""

from __future__ import annotations

import math
from collections.abc import Collection

import jax
import jax.numpy as jnp
import numpy as np

from posteriorjax.deferred import CheckFailed, error_if  # noqa: F401  (the package's run-time check)


def is_traced(*values) -> bool:
    """True if any argument is a JAX tracer (we are inside jit/vmap/grad)."""
    return any(isinstance(v, jax.core.Tracer) for v in values)


def positive_int(name: str, value) -> int:
    """`value` as an int: a Python or NumPy integer >= 1 (bools are not integers here)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ValueError(f"{name}: expected a positive integer, got {value!r}")
    return int(value)


def integer_at_least(name: str, value, minimum: int) -> int:
    """`value` as an int: a Python or NumPy integer >= `minimum` (bools are not integers here)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise ValueError(f"{name}: expected an integer >= {minimum}, got {value!r}")
    return int(value)


def positive_ints(**values) -> None:
    """`positive_int` of every keyword argument (name = value), in order."""
    for name, value in values.items():
        positive_int(name, value)


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

    Concrete values raise ValueError; traced ones carry the check as a run-time
    `error_if` (so a vmapped sweep over the value stays checked).
    """
    value = jnp.asarray(value, dtype=dtype)
    if value.ndim != 0:
        raise ValueError(f"{name}: expected a scalar (vmap for a sweep), got shape {value.shape}")
    what = f"{name}: expected a finite value {'>= 0' if allow_zero else '> 0'}"
    if is_traced(value):
        bad = ~jnp.isfinite(value) | ((value < 0) if allow_zero else (value <= 0))
        return error_if(value, bad, what, value=value)
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


def open_unit(name: str, value) -> float:
    """`value` as a float: a static finite number strictly inside (0, 1) (a probability level)."""
    v = positive(name, value)
    if not v < 1:
        raise ValueError(f"{name}: expected a number in (0, 1), got {value!r}")
    return v


def optional_positive_int(name: str, value) -> int | None:
    """None, or `positive_int(name, value)`."""
    return None if value is None else positive_int(name, value)


def ordered(names: str, low, high, *, positive_values: bool = False) -> tuple[float, float]:
    """`(low, high)` as floats: finite with low < high (and low > 0 with `positive_values`).

    `names` is how the error names the pair, e.g. ``"low, high"``.
    """
    lo, hi = (
        positive(names, v, allow_zero=True) if positive_values else _finite_float(names, v)
        for v in (low, high)
    )
    if not lo < hi or (positive_values and lo <= 0):
        what = "0 < low < high" if positive_values else "low < high"
        raise ValueError(f"{names}: expected {what}, got {low!r}, {high!r}")
    return lo, hi


def _finite_float(name: str, value) -> float:
    try:
        v = math.nan if isinstance(value, bool | str) else float(value)
    except (TypeError, ValueError):
        v = math.nan
    if not math.isfinite(v):
        raise ValueError(f"{name}: expected a finite number, got {value!r}")
    return v


def real_scalar(name: str, value):
    """Raise TypeError unless `value` is one real number: a Python/NumPy real or a 0-d real array.

    Traced scalars pass (their values are checked elsewhere); strings, bools, lists,
    tuples, vectors and complex or non-numeric arrays do not. Returns `value`.
    """
    if isinstance(value, bool | str | bytes | list | tuple | dict | set) or value is None:
        raise TypeError(f"{name}: expected a real scalar, got {type(value).__name__} {value!r}")
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is None:
        if not isinstance(value, int | float | np.integer | np.floating):
            raise TypeError(f"{name}: expected a real scalar, got {type(value).__name__} {value!r}")
        return value
    if tuple(shape) != ():
        raise TypeError(
            f"{name}: expected a real scalar (vmap for a sweep), got an array of shape {tuple(shape)}"
        )
    if not (np.issubdtype(dtype, np.integer) or np.issubdtype(dtype, np.floating)) or dtype == np.bool_:
        raise TypeError(f"{name}: expected a real scalar, got an array of dtype {dtype}")
    return value


def path_component(name: str, value) -> str:
    """`value`, checked to be a safe single file-name component.

    Non-empty, no path separators (``/``, ``\\``), not ``.``/``..``, not absolute,
    no NUL or control characters: labels and task names become file names under
    a workdir, so none may point outside it.
    """
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name}: expected a non-empty string usable as a file name, got {value!r}")
    bad = (
        "/" in value
        or "\\" in value
        or value in (".", "..")
        or value.startswith("~")
        or any(ord(c) < 32 for c in value)
        or ":" in value
    )
    if bad:
        raise ValueError(
            f"{name}: expected a plain file-name component (no path separators, '..', '~', ':' or "
            f"control characters), got {value!r}"
        )
    return value


# ----------------------------------------------------------------------------
# Ensembles and weights (the metrics)

WEIGHT_SUM_TOL = 1e-4


def ensemble(x, name: str, *, min_size: int = 1, min_ndim: int = 2):
    """Validate an ensemble `(N, ...)` and return it as a floating JAX array."""
    x = jnp.asarray(x)
    if x.ndim < min_ndim:
        raise ValueError(
            f"{name}: expected an ensemble with at least {min_ndim} axes (N, ...), got shape {x.shape}"
        )
    if not jnp.issubdtype(x.dtype, jnp.floating):
        x = x.astype(jnp.result_type(float))
    if x.shape[0] < min_size:
        raise ValueError(f"{name}: expected at least {min_size} members, got {x.shape[0]} (shape {x.shape})")
    return x


def finite(x, name: str) -> None:
    """Raise ValueError if a concrete `x` contains NaN or inf (no-op when traced)."""
    if is_traced(x):
        return
    bad = int(np.size(x) - np.count_nonzero(np.isfinite(np.asarray(x))))
    if bad:
        raise ValueError(f"{name}: expected finite values, got {bad} non-finite entries of {np.size(x)}")


def same_event_shape(a, b, name_a: str, name_b: str) -> None:
    """Raise unless `a (N, ...)` and `b (M, ...)` share their trailing (event) shape."""
    if a.shape[1:] != b.shape[1:]:
        raise ValueError(
            f"{name_b}: expected members of shape {a.shape[1:]} (matching {name_a} {a.shape}), "
            f"got {b.shape[1:]} "
            f"(shape {b.shape})"
        )


def weights(w, size: int, name: str, dtype):
    """Validate weights `(size,)`: >= 0, finite, summing to 1 within `WEIGHT_SUM_TOL`.

    Returns uniform weights when `w` is None, else `w / w.sum()` (a no-op up to
    round-off for valid weights, as in the published code). Eager arrays raise
    ValueError; traced arrays carry a run-time `error_if` check.
    """
    if w is None:
        return jnp.full((size,), 1.0 / size, dtype)
    w = jnp.asarray(w, dtype)
    if w.shape != (size,):
        raise ValueError(f"{name}: expected shape ({size},), got {w.shape}")
    total = jnp.sum(w)
    if is_traced(w):
        bad = ~jnp.all(jnp.isfinite(w)) | jnp.any(w < 0) | (jnp.abs(total - 1) > WEIGHT_SUM_TOL)
        w = error_if(w, bad, f"{name}: weights must be finite, >= 0 and sum to 1")
    else:
        wn = np.asarray(w, np.float64)
        if not np.all(np.isfinite(wn)):
            raise ValueError(
                f"{name}: expected finite weights, got {np.count_nonzero(~np.isfinite(wn))} non-finite"
            )
        if np.any(wn < 0):
            raise ValueError(f"{name}: expected weights >= 0, got minimum {wn.min():.3g}")
        if abs(wn.sum() - 1.0) > WEIGHT_SUM_TOL:
            raise ValueError(
                f"{name}: expected weights summing to 1 (tolerance {WEIGHT_SUM_TOL}), got {wn.sum():.6g}"
            )
    return w / total


def count_nonfinite(x) -> jnp.ndarray:
    """Number of ensemble members `x (N, ...)` containing any NaN or inf."""
    return jnp.sum(~jnp.all(jnp.isfinite(x.reshape(x.shape[0], -1)), axis=1))


def nan_if_nonfinite(value, *arrays):
    """`value` (any pytree of arrays) or NaN where any of `arrays` holds a non-finite entry.

    Guards against statistics that would otherwise hide a NaN (a median
    bandwidth reset to 1, a `where` on a comparison with NaN).
    """
    ok = jnp.all(jnp.stack([jnp.all(jnp.isfinite(a)) for a in arrays]))
    return jax.tree.map(lambda v: jnp.where(ok, v, jnp.nan), value)


def as_dict(section) -> dict:
    """A config section (`ConfigDict`, mapping or None) as a plain dict (None -> {})."""
    if section is None:
        return {}
    return section.to_dict() if hasattr(section, "to_dict") else dict(section)
