"""Observation masks bit-identical with the public PDE-OBS mask factories (`src/pdeobs/masks.py`).

PDE-OBS draws the mask of one record from its own generator,

    seed = derive_seed(mask_seed, "mask", sample_id, protocol),
    mask = factory(shape, np.random.default_rng(seed), **kwargs),

where `derive_seed` is BLAKE2b (8-byte digest, person ``pdeobs-v1``) over
``str(mask_seed)`` followed by ``b"\\0" + str(part)`` for every part, read
little-endian modulo 2^32; `sample_id` is the record's identity string
``seed-{seed}/{pde}/{boundary}/{setting}/{regime}/{index:06d}`` and
`protocol` the resolved registered protocol name (never its arguments). The
factories below make the same NumPy calls in the same order, so a record gets
the same cells as under PDE-OBS:

  * ``random_3pct`` (and 1/5/10 pct): `count` or round(ratio H W) (Python
    rounding, clipped to [1, H W]) distinct cells by
    `rng.choice(H W, count, replace=False)`; 500 cells at 128 x 128 without
    arguments;
  * ``regular_grid``: step = spacing or round(1 / sqrt(ratio)), offsets step // 2
    or `rng.integers(step)` per axis;
  * ``block_missing``: a hole of round(H sqrt(f)) x round(W sqrt(f)) cells (or
    `block_shape`, not necessarily square) at `rng.integers` corners;
  * ``line_sensors``: `num_lines` or round(round(ratio H W) / L) lines
    (L = max(H, W), or (H + W) / 2 for ``both``); ``both`` takes ceil(n / 2)
    rows then floor(n / 2) columns, each by `rng.choice(.., replace=False)`;
  * ``boundary_sensors``: the band of width `width`; with `count`, the cells
    at `linspace(0, K - 1, count)` truncated to integers over the band's
    row-major cells (deterministic);
  * ``clustered_sensors``: `clusters` centres `rng.uniform(0, H - 1)`,
    `rng.uniform(0, W - 1)` in turn, p proportional to the Gaussian sum plus
    float64 eps, `rng.choice(H W, count, replace=False, p=p)`;
  * ``full``: every cell (PDE-OBS gives it no seed).

Views. `VIEW_PROTOCOLS` holds the nine frozen PDE-OBS views at 128 x 128
(`configs/campaign/all_pde_one_setting_10method_9x9.yaml`). `view_protocol`
scales them to other grids: the ratio views (R50, R65, R80, CL) and BL
(missing fraction 0.49) keep their arguments, the layout views (H, V, LI, BD)
are sized so that each equal-count group of the paper's Table 5
(`EQUAL_COUNT_GROUPS`: R50 = H = V = CL and BL = LI = BD) observes exactly the
same number of cells at every resolution: H and V take n / 2 lines (n^2 / 2
cells, as R50 and CL); BD takes the band width b whose count n^2 - (n - 2b)^2
is closest to the 128 x 128 fraction 8284 / 16384 (ties to the smaller), LI
4b crossed lines (2b rows, 2b columns) and BL the (n - 2b) x (n - 2b) hole
(`block_shape`, or the campaign's missing fraction 0.49 where that rounds to the
same side), all three n^2 - (n - 2b)^2 cells. This returns the campaign's 64,
64, 76, 19 and 0.49 at 128 x 128 and, for example, 540 cells for BL, LI and BD
at 32 x 32. These layouts need a square grid with an even side >= 4; any other
grid is refused (`view_protocol` raises), since their counts cannot be equal there.

Mask specs (`parse_spec`, PDE-OBS `mask_specs.py`): components separated by
``+``, each a name (a registered protocol, an alias, or a shorthand family),
then an observed percentage or a keyword list in parentheses, then a weight
``x2``/``*2``. A mixture assigns one component per record: the weight-expanded
cycle is rotated by derive_seed(mask_seed, "mask_mixture", canonical spec, pde,
boundary, setting, regime) and indexed by the record's position in its regime,
so the components' counts within a regime differ by at most one; the chosen
component's mask is seeded exactly as if it were requested alone.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

PERSON = b"pdeobs-v1"
MAIN_TRAIN_COUNT_128 = 500
# PDE-OBS family names and stored boundary per family of `posteriorjax.tasks.fields`
PDE_NAMES = {
    "darcy_field": ("darcy", "dirichlet"),
    "poisson_field": ("poisson", "dirichlet"),
    "helmholtz_field": ("helmholtz", "dirichlet"),
    "heat_field": ("heat", "periodic"),
    "reaction_diffusion_field": ("reaction_diffusion", "periodic"),
    "burgers_field": ("burgers", "periodic"),
    "navier_stokes_field": ("navier_stokes", "periodic"),
}
REGIME_NAMES = ("low", "medium", "high")
SETTING = "smooth_grf"


def derive_seed(base_seed: int, *parts: object) -> int:
    """PDE-OBS `schema.derive_seed`: BLAKE2b-64 (person ``pdeobs-v1``) of the parts, mod 2^32."""
    digest = hashlib.blake2b(digest_size=8, person=PERSON)
    digest.update(str(int(base_seed)).encode("utf-8"))
    for part in parts:
        digest.update(b"\x00")
        digest.update(str(part).encode("utf-8"))
    return int.from_bytes(digest.digest(), "little") % 2**32


def sample_id(family: str, regime: int, index: int, *, seed: int) -> str:
    """PDE-OBS identity string of record `index` of `regime` (0 low, 1 medium, 2 high) of `family`."""
    if family not in PDE_NAMES:
        raise ValueError(f"family: expected one of {tuple(PDE_NAMES)}, got {family!r}")
    if regime not in (0, 1, 2):
        raise ValueError(f"regime: expected 0, 1 or 2, got {regime!r}")
    pde, boundary = PDE_NAMES[family]
    return f"seed-{int(seed)}/{pde}/{boundary}/{SETTING}/{REGIME_NAMES[regime]}/{int(index):06d}"


# ----------------------------------------------------------------------------
# Factories (shape, rng, **kwargs) -> bool (H, W)


def _count_from_ratio(shape, ratio) -> int:
    if not 0.0 < float(ratio) <= 1.0:
        raise ValueError(f"ratio: expected a number in (0, 1], got {ratio!r}")
    total = shape[0] * shape[1]
    return min(total, max(1, int(round(np.prod(shape) * ratio))))


def _choice_mask(shape, rng, count: int, p=None) -> np.ndarray:
    total = shape[0] * shape[1]
    if not 0 <= int(count) <= total:
        raise ValueError(f"count: expected an integer in [0, {total}], got {count!r}")
    mask = np.zeros(total, dtype=bool)
    if count:
        mask[rng.choice(total, size=int(count), replace=False, p=p)] = True
    return mask.reshape(shape)


def _random(default_ratio):
    def factory(shape, rng, *, ratio=None, count=None):
        if ratio is None and count is None and default_ratio == 0.03 and tuple(shape) == (128, 128):
            count = MAIN_TRAIN_COUNT_128
        ratio = default_ratio if ratio is None else ratio
        chosen = int(count) if count is not None else _count_from_ratio(shape, ratio)
        return _choice_mask(shape, rng, chosen)

    return factory


def _regular_grid(shape, rng, *, ratio=0.03, spacing=None, random_offset=False):
    step = int(spacing or max(1, round(1.0 / np.sqrt(ratio))))
    if step < 1:
        raise ValueError(f"spacing: expected a positive integer, got {spacing!r}")
    oy = int(rng.integers(step)) if random_offset else step // 2
    ox = int(rng.integers(step)) if random_offset else step // 2
    mask = np.zeros(shape, dtype=bool)
    mask[oy::step, ox::step] = True
    if not mask.any():
        mask[shape[0] // 2, shape[1] // 2] = True
    return mask


def _block_missing(shape, rng, *, missing_fraction=0.25, block_shape=None):
    if not 0.0 < missing_fraction < 1.0:
        raise ValueError(f"missing_fraction: expected a number in (0, 1), got {missing_fraction!r}")
    if block_shape is None:
        scale = np.sqrt(missing_fraction)
        bh = max(1, min(shape[0], int(round(shape[0] * scale))))
        bw = max(1, min(shape[1], int(round(shape[1] * scale))))
    else:
        bh, bw = (int(v) for v in block_shape)
        if not (1 <= bh <= shape[0] and 1 <= bw <= shape[1]):
            raise ValueError(f"block_shape: expected a hole inside {tuple(shape)}, got {block_shape!r}")
    top = int(rng.integers(0, shape[0] - bh + 1))
    left = int(rng.integers(0, shape[1] - bw + 1))
    mask = np.ones(shape, dtype=bool)
    mask[top : top + bh, left : left + bw] = False
    return mask


def _line_sensors(shape, rng, *, ratio=0.03, num_lines=None, orientation="both"):
    if orientation not in ("horizontal", "vertical", "both"):
        raise ValueError(f"orientation: expected horizontal, vertical or both, got {orientation!r}")
    target = _count_from_ratio(shape, ratio)
    if num_lines is None:
        length = max(shape) if orientation != "both" else (shape[0] + shape[1]) / 2
        num_lines = max(1, int(round(target / length)))
    rows = {"horizontal": num_lines, "vertical": 0, "both": (num_lines + 1) // 2}[orientation]
    cols = {"horizontal": 0, "vertical": num_lines, "both": num_lines // 2}[orientation]
    if rows > shape[0] or cols > shape[1]:
        raise ValueError(f"num_lines: {num_lines} {orientation} lines do not fit a {tuple(shape)} grid")
    mask = np.zeros(shape, dtype=bool)
    if rows:
        mask[rng.choice(shape[0], rows, replace=False), :] = True
    if cols:
        mask[:, rng.choice(shape[1], cols, replace=False)] = True
    return mask


def _boundary_sensors(shape, rng, *, width=1, count=None):
    del rng
    if not 1 <= int(width) <= min(shape) // 2:
        raise ValueError(f"width: expected an integer in [1, {min(shape) // 2}], got {width!r}")
    width = int(width)
    mask = np.zeros(shape, dtype=bool)
    mask[:width, :] = mask[-width:, :] = True
    mask[:, :width] = mask[:, -width:] = True
    if count is not None:
        cells = np.flatnonzero(mask)
        take = min(int(count), len(cells))
        picked = np.zeros(mask.size, dtype=bool)
        picked[cells[np.linspace(0, len(cells) - 1, take, dtype=int)]] = True
        mask = picked.reshape(shape)
    return mask


def _clustered_sensors(shape, rng, *, ratio=0.03, count=None, clusters=4, spread=0.08):
    if clusters < 1 or spread <= 0:
        raise ValueError(f"clusters, spread: expected positive values, got {clusters!r}, {spread!r}")
    chosen = int(count) if count is not None else _count_from_ratio(shape, ratio)
    y, x = np.mgrid[0 : shape[0], 0 : shape[1]]
    weights = np.zeros(shape, dtype=np.float64)
    sigma = spread * min(shape)
    for _ in range(int(clusters)):
        cy = rng.uniform(0, shape[0] - 1)
        cx = rng.uniform(0, shape[1] - 1)
        weights += np.exp(-((y - cy) ** 2 + (x - cx) ** 2) / (2 * sigma**2))
    p = weights.ravel() + np.finfo(float).eps
    p /= p.sum()
    return _choice_mask(shape, rng, chosen, p=p)


def _full(shape, rng):
    del rng
    return np.ones(shape, dtype=bool)


FACTORIES = {
    "random_1pct": _random(0.01),
    "random_3pct": _random(0.03),
    "random_5pct": _random(0.05),
    "random_10pct": _random(0.10),
    "regular_grid": _regular_grid,
    "block_missing": _block_missing,
    "line_sensors": _line_sensors,
    "boundary_sensors": _boundary_sensors,
    "clustered_sensors": _clustered_sensors,
    "full": _full,
}
ALIASES = {
    "random1": "random_1pct", "random_1": "random_1pct", "1pct": "random_1pct",
    "random": "random_3pct", "train": "random_3pct", "random3": "random_3pct", "random_3": "random_3pct",
    "3pct": "random_3pct", "random5": "random_5pct", "random_5": "random_5pct", "5pct": "random_5pct",
    "random10": "random_10pct", "random_10": "random_10pct", "10pct": "random_10pct",
    "grid": "regular_grid", "block": "block_missing", "missing_block": "block_missing",
    "lines": "line_sensors", "line": "line_sensors", "boundary": "boundary_sensors",
    "edge": "boundary_sensors", "clustered": "clustered_sensors", "clusters": "clustered_sensors",
}  # fmt: skip


def normalize_name(name: str) -> str:
    """PDE-OBS registry spelling: lower case, runs of other characters as one underscore."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"name: expected a non-empty string, got {name!r}")
    return re.sub(r"[^a-z0-9]+", "_", name.strip().lower()).strip("_")


def resolve_protocol(name: str) -> str | None:
    """The registered protocol of `name` (canonical or alias), or None."""
    key = normalize_name(name)
    key = ALIASES.get(key, key)
    return key if key in FACTORIES else None


def generate(protocol: str, shape, seed: int, **kwargs) -> np.ndarray:
    """PDE-OBS `generate_mask`: factory `protocol` with `np.random.default_rng(seed)`; bool (H, W)."""
    resolved = resolve_protocol(protocol)
    if resolved is None:
        raise ValueError(f"protocol: expected one of {tuple(FACTORIES)} or an alias, got {protocol!r}")
    shape = (int(shape[0]), int(shape[1]))
    mask = np.asarray(FACTORIES[resolved](shape, np.random.default_rng(int(seed)), **kwargs), dtype=bool)
    if mask.shape != shape:
        raise RuntimeError(f"protocol {resolved!r} returned {mask.shape}, expected {shape}")
    return mask


def record_mask(protocol: str, shape, *, mask_seed: int, identity: str, **kwargs) -> np.ndarray:
    """The mask of one record: `generate` with derive_seed(mask_seed, "mask", identity, protocol)."""
    resolved = resolve_protocol(protocol)
    if resolved is None:
        raise ValueError(f"protocol: expected one of {tuple(FACTORIES)} or an alias, got {protocol!r}")
    if resolved == "full":
        return np.ones((int(shape[0]), int(shape[1])), dtype=bool)
    return generate(resolved, shape, derive_seed(mask_seed, "mask", identity, resolved), **kwargs)


# ----------------------------------------------------------------------------
# The nine paper views

EQUAL_COUNT_GROUPS = (("R50", "H", "V", "CL"), ("BL", "LI", "BD"))  # PDE-OBS Table 5
VIEW_PROTOCOLS = {
    "R50": ("random_3pct", {"ratio": 0.50}),
    "R65": ("random_3pct", {"ratio": 0.65}),
    "R80": ("random_3pct", {"ratio": 0.80}),
    "BL": ("block_missing", {"missing_fraction": 0.49}),
    "LI": ("line_sensors", {"num_lines": 76, "orientation": "both"}),
    "H": ("line_sensors", {"num_lines": 64, "orientation": "horizontal"}),
    "V": ("line_sensors", {"num_lines": 64, "orientation": "vertical"}),
    "BD": ("boundary_sensors", {"width": 19}),
    "CL": ("clustered_sensors", {"ratio": 0.50}),
}
_LAYOUT = {"H": "num_lines", "V": "num_lines", "LI": "num_lines", "BD": "width"}


def _layout_count(view: str, value: int, shape) -> int:
    h, w = shape
    if view == "H":
        return value * w
    if view == "V":
        return value * h
    if view == "LI":
        r, c = (value + 1) // 2, value // 2
        return r * w + c * h - r * c
    return h * w - (h - 2 * value) * (w - 2 * value)


def view_protocol(view: str, shape) -> tuple[str, dict]:
    """`(protocol, kwargs)` of paper view `view` on a grid of `shape` (see module doc)."""
    if view not in VIEW_PROTOCOLS:
        raise ValueError(f"view: expected one of {tuple(VIEW_PROTOCOLS)}, got {view!r}")
    protocol, kwargs = VIEW_PROTOCOLS[view]
    kwargs = dict(kwargs)
    if view in ("H", "V", "BL", "LI", "BD"):
        h, w = int(shape[0]), int(shape[1])
        if h != w or h % 2 or h < 4:
            raise ValueError(
                f"shape: view {view} belongs to an equal-count group ({EQUAL_COUNT_GROUPS}), whose "
                f"counts can be equal only on a square grid with an even side >= 4, got {tuple(shape)}"
            )
        if view in ("H", "V"):
            kwargs["num_lines"] = h // 2  # h^2 / 2 cells, as R50 and CL
            return protocol, kwargs
        band = _closest_band(h)
        if view == "BD":
            kwargs["width"] = band
        elif view == "LI":
            kwargs["num_lines"] = 4 * band  # 2 band rows + 2 band columns: n^2 - (n - 2 band)^2 cells
        elif max(1, round(h * math.sqrt(kwargs["missing_fraction"]))) != h - 2 * band:
            kwargs = {"block_shape": (h - 2 * band, h - 2 * band)}  # the hole the band leaves inside
    return protocol, kwargs


def _closest_band(n: int) -> int:
    """Band width b whose count n^2 - (n - 2b)^2 is closest to the 128 x 128 fraction 8284 / 16384."""
    fraction = _layout_count("BD", VIEW_PROTOCOLS["BD"][1]["width"], (128, 128)) / 128**2
    return min(range(1, n // 2 + 1), key=lambda b: abs(_layout_count("BD", b, (n, n)) - fraction * n * n))


def view_counts(shape) -> dict[str, int]:
    """Observed cells of each of the nine views on a grid of `shape` (every record realizes them)."""
    return {
        v: int(generate(p, shape, 0, **kw).sum())
        for v in VIEW_PROTOCOLS
        for p, kw in [view_protocol(v, shape)]
    }


# ----------------------------------------------------------------------------
# Mask specs and deterministic mixtures

SHORTHAND = {
    "uniform": ("random_3pct", {}), "random": ("random_3pct", {}), "rand": ("random_3pct", {}),
    "u": ("random_3pct", {}), "sensor": ("clustered_sensors", {}), "sensors": ("clustered_sensors", {}),
    "cluster": ("clustered_sensors", {}), "clusters": ("clustered_sensors", {}),
    "clustered": ("clustered_sensors", {}), "block": ("block_missing", {}), "blocks": ("block_missing", {}),
    "missing": ("block_missing", {}), "grid": ("regular_grid", {}), "regular": ("regular_grid", {}),
    "boundary": ("boundary_sensors", {}), "edge": ("boundary_sensors", {}), "band": ("boundary_sensors", {}),
    "line": ("line_sensors", {"orientation": "both"}), "lines": ("line_sensors", {"orientation": "both"}),
    "hline": ("line_sensors", {"orientation": "horizontal"}),
    "hlines": ("line_sensors", {"orientation": "horizontal"}),
    "horizontal": ("line_sensors", {"orientation": "horizontal"}),
    "vline": ("line_sensors", {"orientation": "vertical"}),
    "vlines": ("line_sensors", {"orientation": "vertical"}),
    "vertical": ("line_sensors", {"orientation": "vertical"}), "full": ("full", {}),
}  # fmt: skip
_PERCENT = {
    "random_1pct": "ratio", "random_3pct": "ratio", "random_5pct": "ratio", "random_10pct": "ratio",
    "regular_grid": "ratio", "clustered_sensors": "ratio", "block_missing": "missing_fraction",
    "boundary_sensors": "width", "line_sensors": "num_lines",
}  # fmt: skip
_COMPONENT = re.compile(
    r"^\s*(?P<name>[A-Za-z][A-Za-z0-9_\-]*)\s*(?:\((?P<kwargs>[^()]*)\))?"
    r"\s*(?P<percent>\d+(?:\.\d+)?)?\s*%?\s*(?:[xX*]\s*(?P<weight>\d+))?\s*$"
)
_TRAILING = re.compile(r"^(?P<name>[A-Za-z][A-Za-z_\-]*?)(?P<percent>\d+(?:\.\d+)?)$")


def _format(value) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (tuple, list)):
        return "x".join(_format(v) for v in value)
    return str(value)


def _boundary_width(shape, fraction: float) -> int:
    h, w = shape
    best, err = 1, math.inf
    for k in range(1, max(1, min(shape) // 2) + 1):
        e = abs(1.0 - (h - 2 * k) * (w - 2 * k) / (h * w) - fraction)
        if e < err:
            best, err = k, e
    return best


def _line_count(shape, fraction: float, orientation: str) -> int:
    h, w = shape
    if orientation == "horizontal":
        return max(1, min(h, int(round(fraction * h))))
    if orientation == "vertical":
        return max(1, min(w, int(round(fraction * w))))
    best, err = 1, math.inf
    for k in range(1, h + w + 1):
        r, c = (k + 1) // 2, k // 2
        if r > h or c > w:
            break
        e = abs(1.0 - (1.0 - r / h) * (1.0 - c / w) - fraction)
        if e < err:
            best, err = k, e
    return best


@dataclasses.dataclass(frozen=True)
class Component:
    """One resolved spec component: protocol, sorted keyword arguments, observed percent, weight."""

    protocol: str
    kwargs: tuple = ()
    percent: float | None = None
    weight: int = 1

    def canonical_text(self) -> str:
        head = self.protocol
        if self.kwargs:
            head += "(" + ", ".join(f"{k}={_format(v)}" for k, v in self.kwargs) + ")"
        if self.percent is not None:
            head += f" {self.percent:g}"
        return head + (f" x{self.weight}" if self.weight != 1 else "")

    def resolved_kwargs(self, shape) -> dict:
        """Keyword arguments of the factory on `shape` (an observed percentage converted)."""
        kwargs = dict(self.kwargs)
        if self.percent is None or self.protocol == "full":
            return kwargs
        f = self.percent / 100.0
        name = _PERCENT[self.protocol]
        if name == "ratio":
            kwargs["ratio"] = f
        elif name == "missing_fraction":
            kwargs["missing_fraction"] = 1.0 - f
        elif name == "width":
            kwargs["width"] = _boundary_width(shape, f)
        else:
            kwargs["num_lines"] = _line_count(shape, f, str(kwargs.get("orientation", "both")))
        return kwargs

    def mask(self, shape, *, mask_seed: int, identity: str) -> np.ndarray:
        return record_mask(
            self.protocol, shape, mask_seed=mask_seed, identity=identity, **self.resolved_kwargs(shape)
        )


@dataclasses.dataclass(frozen=True)
class Spec:
    """A parsed mask spec: components and their weight-expanded selection cycle."""

    components: tuple[Component, ...]

    @property
    def cycle(self) -> tuple[int, ...]:
        return tuple(i for i, c in enumerate(self.components) for _ in range(c.weight))

    @property
    def is_mixture(self) -> bool:
        return len(self.cycle) > 1

    def canonical_text(self) -> str:
        return " + ".join(c.canonical_text() for c in self.components)

    def select(self, *, mask_seed: int, stratum: Sequence[object], position: int) -> int:
        """Component index of the record at `position` of its stratum (pde, boundary, setting, regime)."""
        offset = derive_seed(mask_seed, "mask_mixture", self.canonical_text(), *stratum)
        return self.cycle[(int(position) + int(offset)) % len(self.cycle)]


def _parse_kwargs(text: str) -> dict:
    out = {}
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        if "=" not in item:
            raise ValueError(f"spec: keyword argument {item!r} must be written key=value")
        key, value = (s.strip() for s in item.split("=", 1))
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise ValueError(f"spec: invalid keyword name {key!r}")
        try:
            parsed: Any = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            parsed = value
        out[key] = tuple(parsed) if isinstance(parsed, (list, tuple)) else parsed
    return out


def _component(text: str) -> Component:
    match = _COMPONENT.match(text)
    if not match:
        raise ValueError(f"spec: cannot parse mask component {text.strip()!r}")
    name, percent, kwargs_text = match.group("name"), match.group("percent"), match.group("kwargs")
    weight = int(match.group("weight") or 1)
    if percent is None and kwargs_text is None:
        trailing = _TRAILING.match(name)
        if trailing and resolve_protocol(name) is None and normalize_name(name) not in SHORTHAND:
            name, percent = trailing.group("name"), trailing.group("percent")
    key = normalize_name(name)
    if key in SHORTHAND:
        protocol, implied = SHORTHAND[key]
    else:
        protocol, implied = resolve_protocol(name), {}
        if protocol is None:
            raise ValueError(
                f"spec: unknown mask protocol or shorthand {name!r}; expected one of "
                f"{tuple(FACTORIES)} or {tuple(sorted(SHORTHAND))}"
            )
    explicit = _parse_kwargs(kwargs_text) if kwargs_text else {}
    value = None
    if percent is not None:
        value = float(percent)
        if protocol not in _PERCENT:
            raise ValueError(f"spec: protocol {protocol!r} does not take an observed percentage")
        clash = {_PERCENT[protocol], "count", "spacing", "block_shape"} & set(explicit)
        if clash:
            raise ValueError(f"spec: component {name!r} sets {sorted(clash)} and a percentage; give one")
        if not 0.0 < value <= 100.0 or (protocol == "block_missing" and value >= 100.0):
            raise ValueError(f"spec: observed percentage of {name!r} must lie in (0, 100), got {value:g}")
    if weight < 1:
        raise ValueError(f"spec: component weights must be positive integers, got {weight}")
    return Component(protocol, tuple(sorted({**implied, **explicit}.items())), value, weight)


def parse_spec(text: str) -> Spec:
    """Parse a mask spec such as ``"line 30 + random 20"`` or ``"uniform 1 x2 + block 50"``."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"spec: expected a non-empty mask spec string, got {text!r}")
    parts, depth, current = [], 0, []
    for ch in text:
        depth += (ch == "(") - (ch == ")")
        if depth < 0:
            raise ValueError(f"spec: unbalanced parentheses in {text!r}")
        if ch == "+" and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    if depth:
        raise ValueError(f"spec: unbalanced parentheses in {text!r}")
    components = tuple(_component(p) for p in [*parts, "".join(current)])
    ids = [dataclasses.replace(c, weight=1).canonical_text() for c in components]
    if len(set(ids)) != len(ids):
        raise ValueError(f"spec: duplicate component in {text!r}; use a weight (x2) instead")
    return Spec(components)


def views_spec(views: Sequence[str], shape) -> Spec:
    """The equal-weight mixture of paper views `views` (in that order) with their arguments on `shape`."""
    return Spec(
        tuple(Component(p, tuple(sorted(kw.items()))) for p, kw in (view_protocol(v, shape) for v in views))
    )
