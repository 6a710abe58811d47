"""Observation patterns: masks built with NumPy outside jit, wrapped as operators.

Patterns (`pattern(name, grid, *, seed, record=0, **params)`) follow PDE-OBS
(Controlled Evaluation Across Observation Patterns, `src/pdeobs/masks.py`):
masks are built with NumPy outside jit, True means observed, positions are
drawn per record and counts are exact. The generator of a record is
`np.random.default_rng(SeedSequence(seed, spawn_key=(crc32(name), record)))`,
so a mask depends only on (pattern name, parameters, seed, record) -- never on
which other patterns or records were built before it.

Factories (parameters keyword-only; defaults in brackets):

  * ``random``    -- `ratio` [0.03] or `count`; exactly round(ratio * H * W)
    distinct cells (half up, clipped to [1, H * W]).
  * ``sensors``   -- `num_sensors` distinct random cells (sparse point sensors).
  * ``grid``      -- `ratio` [0.03] or `spacing`; step = round(1 / sqrt(ratio)),
    mask[oy::step, ox::step] with offset step // 2, or uniform in [0, step) per
    axis with `random_offset=True`.
  * ``block``     -- one missing square of side `size`, or of side
    round(sqrt(ratio) * min(H, W)) for a missing fraction `ratio` [0.25], placed
    uniformly without wrapping; everything outside it is observed.
  * ``lines``     -- full rows/columns; `orientation` in horizontal / vertical /
    both [both], `num_lines` or `ratio` [0.03] (num_lines =
    round(ratio * H * W / L), L = W, H or (H + W) / 2). ``both`` takes
    ceil(n / 2) rows and floor(n / 2) columns, overlaps counted once.
    `placement="random"` [default] draws lines without replacement per record;
    `placement="even"` puts line i at floor((i + 1/2) L / n) (deterministic).
  * ``boundary``  -- the outer band of width `width` [1], 1 <= width <=
    min(H, W) // 2; with `count`, that many points evenly spaced (in row-major
    order) over the band. Deterministic.
  * ``clustered`` -- `ratio` [0.03] or `count` distinct cells drawn without
    replacement with probability proportional to a sum of `clusters` [4]
    isotropic Gaussians of std `spread` [0.08] * min(H, W) centred uniformly in
    [0, H-1] x [0, W-1] (weighted sampling by exponential races, in log space).
  * ``full``      -- every cell.
  * ``pool``      -- `AveragePool` with `factor`; ``columns`` -- `ColumnObservation`
    with `columns` (indices) or `num_columns` (evenly spaced).

Presets (the nine PDE-OBS views). On 128 x 128 they observe exactly:
R50 8192, R65 10650, R80 13107 (random); CL 8192 (clustered, 4 clusters);
H 8192 (64 rows); V 8192 (64 columns); BL 8284 (outside one 90 x 90 hole);
LI 8284 (38 rows + 38 columns); BD 8284 (boundary band of width 19).

Scaling rule at other resolutions: a preset keeps its observed fraction f
(0.50 / 0.65 / 0.80 for R50 / R65 / R80 and 0.5 for CL, H, V; 8284 / 16384 for
BL, LI, BD). Random and clustered views observe round(f * H * W) cells (half
up). Layout views take the integer layout parameter (rows, columns, number of
crossed lines, hole side, band width) whose realized count is closest to
f * H * W, ties to the smaller parameter. A resolution cannot realize a preset
when its closest layout misses f by more than `PRESET_TOLERANCE` (0.1) in
observed fraction; `pattern` then raises. Counts:

  ====  =====  ====  ===
  view  128    64    32
  ====  =====  ====  ===
  R50   8192   2048  512
  R65   10650  2662  666
  R80   13107  3277  819
  CL    8192   2048  512
  H, V  8192   2048  512   (64 / 32 / 16 lines)
  BL    8284   2071  540   (hole 90 / 45 / 22)
  LI    8284   2071  518   (38+38 / 19+19 / 10+9 lines)
  BD    8284   2160  540   (width 19 / 10 / 5)
  ====  =====  ====  ===
"""

from __future__ import annotations

import inspect
import math
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from posteriorjax import checks
from posteriorjax.grids import Grid
from posteriorjax.observations.operators import (
    AbstractObservation,
    AveragePool,
    ColumnObservation,
    MaskObservation,
)

PRESET_TOLERANCE = 0.1
"""Largest |realized - target| observed fraction for which a preset is realizable."""


def _round_half_up(x: float) -> int:
    return math.floor(x + 0.5)


# Mask factories: numpy, outside jit. Each returns (mask bool (H, W), realized dict).


def _integer(value, name: str, lo: int, hi: int | None = None) -> int:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, np.integer))
        or value < lo
        or (hi is not None and value > hi)
    ):
        bound = f"[{lo}, {hi}]" if hi is not None else f">= {lo}"
        raise ValueError(f"{name}: expected an integer in {bound}, got {value!r}")
    return int(value)


def _fraction(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)) or not 0 < value <= 1:
        raise ValueError(f"{name}: expected a number in (0, 1], got {value!r}")
    return float(value)


def _count_from(ratio, count, total: int, count_name: str = "count") -> int:
    if count is not None:
        if ratio is not None:
            raise ValueError(f"ratio, {count_name}: give one of them, not both")
        return _integer(count, count_name, 1, total)
    ratio = _fraction(0.03 if ratio is None else ratio, "ratio")
    return min(max(_round_half_up(ratio * total), 1), total)


def _from_indices(shape, flat) -> np.ndarray:
    mask = np.zeros(shape[0] * shape[1], dtype=bool)
    mask[np.asarray(flat)] = True
    return mask.reshape(shape)


def _random(rng, shape, *, ratio=None, count=None):
    total = shape[0] * shape[1]
    count = _count_from(ratio, count, total)
    return _from_indices(shape, rng.permutation(total)[:count]), {}


def _sensors(rng, shape, *, num_sensors):
    total = shape[0] * shape[1]
    num_sensors = _integer(num_sensors, "num_sensors", 1, total)
    return _from_indices(shape, rng.permutation(total)[:num_sensors]), {}


def _grid(rng, shape, *, ratio=None, spacing=None, random_offset=False):
    if spacing is not None:
        if ratio is not None:
            raise ValueError("ratio, spacing: give one of them, not both")
        step = _integer(spacing, "spacing", 1)
    else:
        step = max(1, _round_half_up(1.0 / math.sqrt(_fraction(0.03 if ratio is None else ratio, "ratio"))))
    oy, ox = (int(o) for o in rng.integers(0, step, size=2)) if random_offset else (step // 2, step // 2)
    mask = np.zeros(shape, dtype=bool)
    mask[oy::step, ox::step] = True
    if not mask.any():
        raise ValueError(f"spacing: step {step} leaves no observed cell on a {shape} grid")
    return mask, {"spacing": step}


def _block(rng, shape, *, ratio=None, size=None):
    h, w = shape
    if size is not None:
        if ratio is not None:
            raise ValueError("ratio, size: give one of them, not both")
        side = _integer(size, "size", 1, min(h, w))
    else:
        side = _round_half_up(math.sqrt(_fraction(0.25 if ratio is None else ratio, "ratio")) * min(h, w))
        side = min(max(side, 1), min(h, w))
    if side * side >= h * w:
        raise ValueError(f"size: a {side} x {side} hole leaves no observed cell on a {shape} grid")
    top, left = int(rng.integers(0, h - side + 1)), int(rng.integers(0, w - side + 1))
    mask = np.ones(shape, dtype=bool)
    mask[top : top + side, left : left + side] = False
    return mask, {"hole": side}


def _positions(rng, length: int, n: int, placement: str) -> np.ndarray:
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    if placement == "even":
        return np.floor((np.arange(n) + 0.5) * length / n).astype(np.int64)
    return np.sort(rng.permutation(length)[:n])


def _lines(rng, shape, *, orientation="both", num_lines=None, ratio=None, placement="random"):
    h, w = shape
    if orientation not in ("horizontal", "vertical", "both"):
        raise ValueError(f"orientation: expected 'horizontal', 'vertical' or 'both', got {orientation!r}")
    if placement not in ("random", "even"):
        raise ValueError(f"placement: expected 'random' or 'even', got {placement!r}")
    if num_lines is not None:
        if ratio is not None:
            raise ValueError("ratio, num_lines: give one of them, not both")
        n = _integer(num_lines, "num_lines", 1)
    else:
        length = {"horizontal": w, "vertical": h, "both": (h + w) / 2}[orientation]
        n = max(1, _round_half_up(_fraction(0.03 if ratio is None else ratio, "ratio") * h * w / length))
    rows, cols = {"horizontal": (n, 0), "vertical": (0, n), "both": ((n + 1) // 2, n // 2)}[orientation]
    if rows > h or cols > w:
        raise ValueError(
            f"num_lines: {n} {orientation} lines need {rows} rows and {cols} columns on a {shape} grid"
        )
    mask = np.zeros(shape, dtype=bool)
    mask[_positions(rng, h, rows, placement), :] = True
    mask[:, _positions(rng, w, cols, placement)] = True
    return mask, {"rows": rows, "columns": cols}


def _band(shape, width: int) -> np.ndarray:
    i = np.arange(shape[0])[:, None]
    j = np.arange(shape[1])[None, :]
    dist = np.minimum(np.minimum(i, shape[0] - 1 - i), np.minimum(j, shape[1] - 1 - j))
    return dist < width


def _boundary(rng, shape, *, width=1, count=None):
    width = _integer(width, "width", 1, min(shape) // 2)
    band = _band(shape, width)
    if count is None:
        return band, {"width": width}
    cells = np.flatnonzero(band)
    count = _integer(count, "count", 1, cells.size)
    picks = np.floor(np.linspace(0, cells.size - 1, count) + 0.5).astype(np.int64)
    return _from_indices(shape, cells[picks]), {"width": width}


def _clustered(rng, shape, *, ratio=None, count=None, clusters=4, spread=0.08):
    h, w = shape
    count = _count_from(ratio, count, h * w)
    clusters = _integer(clusters, "clusters", 1)
    spread = checks.positive("spread", spread)
    centres = rng.uniform(0.0, 1.0, size=(clusters, 2)) * np.array([h - 1, w - 1])
    sigma = spread * min(h, w)
    y, x = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    d2 = (y[None] - centres[:, 0, None, None]) ** 2 + (x[None] - centres[:, 1, None, None]) ** 2
    log_p = np.logaddexp.reduce(-d2 / (2.0 * sigma**2), axis=0).ravel()
    keys = np.log(rng.exponential(size=h * w)) - log_p
    return _from_indices(shape, np.argsort(keys, kind="stable")[:count]), {"clusters": clusters}


def _full(rng, shape):
    return np.ones(shape, dtype=bool), {}


_FACTORIES = {
    "random": _random,
    "sensors": _sensors,
    "grid": _grid,
    "block": _block,
    "lines": _lines,
    "boundary": _boundary,
    "clustered": _clustered,
    "full": _full,
}
_OPERATORS = ("pool", "columns")

_BAND_FRACTION = 8284 / 16384
# preset -> (factory, fixed params, target observed fraction, layout parameter or None)
_PRESETS = {
    "R50": ("random", {}, 0.50, None),
    "R65": ("random", {}, 0.65, None),
    "R80": ("random", {}, 0.80, None),
    "CL": ("clustered", {}, 0.50, None),
    "H": ("lines", {"orientation": "horizontal"}, 0.5, "num_lines"),
    "V": ("lines", {"orientation": "vertical"}, 0.5, "num_lines"),
    "BL": ("block", {}, _BAND_FRACTION, "size"),
    "LI": ("lines", {"orientation": "both"}, _BAND_FRACTION, "num_lines"),
    "BD": ("boundary", {}, _BAND_FRACTION, "width"),
}


def names() -> list[str]:
    """Valid pattern names: factories, operators and presets."""
    return [*_FACTORIES, *_OPERATORS, *_PRESETS]


def _layout_counts(name: str, shape) -> list[tuple[int, int]]:
    """Admissible `(parameter, realized count)` pairs of a layout preset, ascending."""
    h, w = shape
    if name == "H":
        return [(k, k * w) for k in range(1, h + 1)]
    if name == "V":
        return [(k, k * h) for k in range(1, w + 1)]
    if name == "LI":
        out = []
        for k in range(1, h + w + 1):
            r, c = (k + 1) // 2, k // 2
            if r <= h and c <= w:
                out.append((k, r * w + c * h - r * c))
        return out
    if name == "BL":
        return [(s, h * w - s * s) for s in range(1, min(h, w) + 1) if s * s < h * w]
    return [(b, h * w - (h - 2 * b) * (w - 2 * b)) for b in range(1, min(h, w) // 2 + 1)]


def _preset_params(name: str, shape) -> tuple[str, dict]:
    factory, fixed, fraction, layout = _PRESETS[name]
    total = shape[0] * shape[1]
    target = fraction * total
    if layout is None:
        count = min(max(_round_half_up(target), 1), total)
        params = {**fixed, "count": count}
    else:
        candidates = _layout_counts(name, shape)
        if not candidates:
            raise ValueError(f"grid: pattern {name!r} has no admissible layout on a {shape} grid")
        value, count = min(candidates, key=lambda pc: abs(pc[1] - target))
        params = {**fixed, layout: value}
    if abs(count / total - fraction) > PRESET_TOLERANCE:
        raise ValueError(
            f"grid: pattern {name!r} cannot be realized on a {shape} grid: the closest layout "
            f"({params}) observes {count / total:.3f} of the cells, target {fraction:.3f} "
            f"(tolerance {PRESET_TOLERANCE})"
        )
    return factory, params


# ----------------------------------------------------------------------------
# Public entry points


def _rng(seed: int, record: int, name: str) -> np.random.Generator:
    """Generator of one record: SeedSequence(seed, spawn_key=(crc32(name), record))."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(zlib.crc32(name.encode()), record)))


def _freeze(value) -> Any:
    """Hashable form of a parameter value (static metadata)."""
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, np.generic):
        return value.item()
    return value


def _check_params(name: str, allowed: Sequence[str], params: dict) -> None:
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise ValueError(
            f"params: pattern {name!r} takes {list(allowed) or 'no parameters'}, got unknown {unknown}"
        )


def pattern(name: str, grid: Grid, *, seed: int, record: int = 0, **params) -> AbstractObservation:
    """Observation operator of pattern `name` on `grid` for one record.

    Args:
      name: a factory, operator or preset name (see module doc, `names()`).
      grid: `posteriorjax.grids.Grid`; masks are `grid.shape = (n, n)`.
      seed: dataset seed, an integer in [0, 2**32).
      record: record index, an integer in [0, 2**31); positions are drawn per
        record from SeedSequence(seed, spawn_key=(crc32(name), record)).
      **params: factory parameters (presets take none).

    Returns:
      A `MaskObservation` (factories, presets), `AveragePool` (``pool``) or
      `ColumnObservation` (``columns``). Deterministic in (name, params, seed,
      record).
    """
    if not isinstance(name, str) or name not in names():
        raise ValueError(f"name: unknown pattern {name!r}; valid names: {', '.join(names())}")
    if not isinstance(grid, Grid):
        raise ValueError(f"grid: expected a posteriorjax.grids.Grid, got {type(grid).__name__}")
    seed = _integer(seed, "seed", 0, 2**32 - 1)
    record = _integer(record, "record", 0, 2**31 - 1)
    shape = grid.shape
    if name == "pool":
        _check_params(name, ["factor"], params)
        if "factor" not in params:
            raise ValueError("factor: pattern 'pool' needs a pooling factor")
        return AveragePool(shape, params["factor"])
    if name == "columns":
        unknown = sorted(set(params) - {"columns", "num_columns"})
        if unknown or ("columns" in params) == ("num_columns" in params):
            raise ValueError(
                f"params: pattern 'columns' takes exactly one of columns, num_columns; got {params}"
            )
        if "num_columns" in params:
            k = _integer(params["num_columns"], "num_columns", 1, shape[1])
            return ColumnObservation(shape, _positions(None, shape[1], k, "even"))
        return ColumnObservation(shape, params["columns"])
    if name in _PRESETS:
        if params:
            raise ValueError(f"params: preset {name!r} takes no parameters, got {sorted(params)}")
        factory, params = _preset_params(name, shape)
    else:
        factory = name
    fn = _FACTORIES[factory]
    _check_params(name, list(inspect.signature(fn).parameters)[2:], params)
    mask, realized = fn(_rng(seed, record, name), shape, **params)
    return MaskObservation(
        mask,
        name=name,
        params=_freeze(params),
        realized=_freeze({"count": int(mask.sum()), **realized}),
        seed=seed,
        record=record,
    )


def point_sensors(grid: Grid, num_sensors: int, *, seed: int, record: int = 0) -> MaskObservation:
    """`num_sensors` distinct random point sensors (the ``sensors`` pattern)."""
    return pattern("sensors", grid, seed=seed, record=record, num_sensors=num_sensors)


def mixture(
    names: Sequence[str | tuple[str, dict]],
    grid: Grid,
    *,
    seed: int,
    record: int = 0,
    weights: Sequence[float] | None = None,
) -> AbstractObservation:
    """Pattern of one record of a deterministic mixture.

    The entry (a name, or `(name, params)`) is drawn with probabilities
    `weights` (uniform by default) from SeedSequence(seed, spawn_key=
    (crc32("mixture"), record)); its positions are then those of
    `pattern(name, grid, seed=seed, record=record, **params)`.
    """
    entries = [(e, {}) if isinstance(e, str) else tuple(e) for e in names]
    if not entries or any(len(e) != 2 or not isinstance(e[1], dict) for e in entries):
        raise ValueError(
            f"names: expected a non-empty sequence of names or (name, params) pairs, got {names!r}"
        )
    w = np.ones(len(entries)) if weights is None else np.asarray(weights, dtype=np.float64)
    if w.shape != (len(entries),) or not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        raise ValueError(
            f"weights: expected {len(entries)} finite weights >= 0 with a positive sum, got {weights!r}"
        )
    seed = _integer(seed, "seed", 0, 2**32 - 1)
    record = _integer(record, "record", 0, 2**31 - 1)
    u = _rng(seed, record, "mixture").random()
    index = min(int(np.searchsorted(np.cumsum(w) / w.sum(), u, side="right")), len(entries) - 1)
    name, params = entries[index]
    return pattern(name, grid, seed=seed, record=record, **params)
