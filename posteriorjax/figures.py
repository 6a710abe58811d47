"""Sweep figures: PNGs of samples, moments, hyperparameter curves and calibration, from a workdir.

Every figure function takes plain data (NumPy arrays or sweep records, see
`sweep.run_pair`), writes one PNG with matplotlib's Agg canvas (no pyplot, no
global state) and returns its path. `render(workdir)` reads a sweep workdir and
draws every figure whose inputs exist into `<workdir>/figures/`:

- `samples_<task>_<sampler>_case<k>.png` and `moments_<task>_<sampler>_case<k>.png`
  from `samples/<task>/<sampler>.npz` beside the task's stored reference (`sweep.store.read_reference`);
- `curves_<task>_<sampler>_<axis>.png` for every hyperparameter that takes at
  least two values (the guidance weight of a calibration study);
- `optimum_<base>_<sampler>_<axis>.png` when task entries of one base task
  (in this workdir, or in `noise_workdirs`, one sweep per noise level as the
  study configs run them) differ in their noise level (see `records.noise_level`);
- `vshape_<task>.png`, `coverage_<task>.png`, `tarp_<task>.png`, `mira_<task>.png`
  when the records hold the metrics they need (TARP: with enough conditions).

Field figures of a registered task (its options from `config.json`) are drawn in the
physical coordinates of its grid (`field_layout`): colourbars carry the channel's name
and unit (`tasks.Channel`), and what the observation sees is drawn on the tiles (point
sensors as markers, the cells a dense mask misses hatched, pooling blocks by their edges,
well columns dashed; the caption under the title says which). Colour scales of positive
values spanning two decades are logarithmic. Coefficient unknowns (the interface tasks'
`(17, 1, 1)`) get no field figures.

`report(workdir)` also rewrites the tables (`results.csv`, `calibration.json`,
`summary.md`) from `results.jsonl`; `python -m experiments.report` calls it.

The numbers drawn (grouping, optima, coverage, TARP and MIRA per row) come
from `records`, which leaves NaN rows (records with non-finite samples) out of
every curve, optimum and score instead of averaging them.
Sizes: every figure is saved at `DPI` dots per inch with the size its
docstring states (inches), so an image is `round(inches * DPI)` pixels, unless a
label would reach outside that size: then the image is saved to the tight box
around everything drawn, so no text is ever clipped. Axes whose positive values span
at least a decade are logarithmic (V-shape panels, metric curves). The TARP figure
is drawn only where every row has `results.TARP_MIN_CONDITIONS` conditions (the
calibration table shows '-' below that).
"""

from __future__ import annotations

import dataclasses
import math
import re
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib
import numpy as np
from absl import logging
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, NullLocator

from posteriorjax import results
from posteriorjax.metrics import calibration, registry
from posteriorjax.records import (
    LOWER_IS_BETTER,
    TARP_BINS,
    axis_split,
    base_task,
    coverage_curves,
    group,
    hparams_key,
    load_records,
    mira_scores,
    noise_optima,
    optimal_hparams,
    read_workdir,
    row_groups,
    scalar_metrics,
    tarp_curves,
    varying_axes,
)
from posteriorjax.sweep.store import read_reference

DPI = 100
PANEL = (3.2, 2.6)  # inches per metric panel (curves, V-shape)
SQUARE = 3.0  # inches per sampler panel (coverage, TARP)
TILE = 1.6  # inches per image tile (samples, moments)
COLORBAR = 1.2  # inches of colorbar column beside image tiles (bar, ticks, label)
TITLE = 0.65  # inches of suptitle band (title, observation caption, column titles)
PAD = 0.08  # inches of padding around an image tile
LEFT = 0.8  # inches left of image tiles (row label, y ticks, y label)
AXIS_BAND = 0.45  # inches below each channel's tiles (x ticks, x label)
SPARSE_FRACTION = 0.25  # masks observing at most this fraction of the cells are drawn as markers
OVERLAY = "observation"  # gid of the artists that draw what the observation sees
MAX_COLUMNS = 4
POSTERIOR_METRICS: tuple[str, ...] = registry.POSTERIOR
HEADERS = registry.HEADERS


# ----------------------------------------------------------------------------
# Drawing helpers


def _new(width: float, height: float) -> Figure:
    # fixed layouts in inches (no layout engine): the sizes are exact and drawing stays fast
    fig = Figure(figsize=(width, height), dpi=DPI)
    FigureCanvasAgg(fig)
    return fig


def _axes_at(fig: Figure, x: float, y: float, w: float, h: float):
    """New axes at (x, y) inches from the bottom-left corner, w x h inches."""
    width, height = fig.get_size_inches()
    return fig.add_axes((x / width, y / height, w / width, h / height))


def _panels(
    fig: Figure, nrows: int, ncols: int, *, left=0.65, right=0.2, bottom=0.5, top=None, wgap=0.7, hgap=0.8
):
    """A grid of axes `(nrows, ncols)` with margins and gaps in inches."""
    width, height = fig.get_size_inches()
    top = TITLE + 0.3 if top is None else top
    aw = (width - left - right - (ncols - 1) * wgap) / ncols
    ah = (height - bottom - top - (nrows - 1) * hgap) / nrows
    spec = dict(
        left=left / width,
        right=1 - right / width,
        bottom=bottom / height,
        top=1 - top / height,
        wspace=wgap / aw,
        hspace=hgap / ah,
    )
    return fig.subplots(nrows, ncols, squeeze=False, gridspec_kw=spec)


def _save(fig: Figure, path: str | Path) -> Path:
    """PNG at the figure's size, or at the tight box around its artists where text would be clipped."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tight = fig.get_tightbbox(fig.canvas.get_renderer())  # inches
    width, height = fig.get_size_inches()
    tol = 0.5 / DPI
    clipped = tight.x0 < -tol or tight.y0 < -tol or tight.x1 > width + tol or tight.y1 > height + tol
    extra = {"bbox_inches": "tight", "pad_inches": 0.05} if clipped else {}
    fig.savefig(path, dpi=DPI, format="png", **extra)
    return path


def _log_if_decades(ax, which: str, values, decades: float = 1.0) -> bool:
    """Log scale on axis `which` when the finite values are all > 0 and span >= `decades` decades."""
    v = np.asarray(values, np.float64)
    v = v[np.isfinite(v)]
    if v.size < 2 or np.any(v <= 0) or math.log10(v.max() / v.min()) < decades:
        return False
    (ax.set_xscale if which == "x" else ax.set_yscale)("log")
    return True


def _grid_shape(n: int, max_columns: int = MAX_COLUMNS) -> tuple[int, int]:
    ncols = min(n, max_columns)
    return -(-n // ncols), ncols


def _positions(values: np.ndarray) -> tuple[np.ndarray, str, float | None]:
    """Plot positions of axis values: log where all are >= 0 with one > 0; 0 drawn at the left edge.

    Returns (positions, scale, zero position or None).
    """
    v = np.asarray(values, np.float64)
    pos = v[v > 0]
    if v.size == 0 or np.any(v < 0) or pos.size == 0:
        return v, "linear", None
    if not np.any(v == 0):
        return v, "log", None
    lo, hi = pos.min(), pos.max()
    zero = lo / 10 ** max(0.5, 0.1 * math.log10(hi / lo))
    return np.where(v == 0, zero, v), "log", zero


def _set_axis(ax, which: str, scale: str, zero: float | None, values: np.ndarray) -> None:
    setter = ax.set_xscale if which == "x" else ax.set_yscale
    axis = ax.xaxis if which == "x" else ax.yaxis
    setter(scale)
    if scale != "log":
        return
    values = np.asarray(values)
    pos = values[values > (0 if zero is None else zero)]
    decades = 10.0 ** np.arange(math.floor(math.log10(pos.min())), math.ceil(math.log10(pos.max())) + 1)
    ticks = [d for d in decades if pos.min() / 1.0001 <= d <= pos.max() * 1.0001]
    if len(ticks) < 2:  # less than a decade: label the values themselves (default minor labels collide)
        ticks = np.unique(pos).tolist() if np.unique(pos).size <= 8 else np.geomspace(pos.min(), pos.max(), 5)
    ticks = ticks if zero is None else [zero, *ticks]
    axis.set_major_locator(FixedLocator(ticks))
    axis.set_minor_locator(NullLocator())
    axis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda x, _: "0" if x == zero else f"{x:g}"))
    if zero is not None:
        line = ax.axvline if which == "x" else ax.axhline
        line(math.sqrt(zero * pos.min()), color="0.8", lw=0.8, ls=":")


def _cmap(name: str):
    return matplotlib.colormaps[name].with_extremes(bad="0.75")


def _limits(*arrays) -> tuple[float, float]:
    vals = np.concatenate([np.asarray(a, np.float64).ravel() for a in arrays if a is not None])
    vals = vals[np.isfinite(vals)]
    if vals.size == 0:
        return 0.0, 1.0
    lo, hi = float(vals.min()), float(vals.max())
    if hi <= lo:
        pad = max(abs(lo), 1.0) * 1e-6
        return lo - pad, hi + pad
    return lo, hi


def _check_fields(name: str, array, ndim: int = 4) -> np.ndarray:
    a = np.asarray(array)
    if a.ndim != ndim:
        raise ValueError(
            f"{name}: expected {ndim} dims ({'(N, C, H, W)' if ndim == 4 else '(C, H, W)'}), got {a.shape}"
        )
    return a


def _weights(ref_weights, m: int) -> np.ndarray:
    if ref_weights is None:
        return np.full(m, 1.0 / m)
    w = np.asarray(ref_weights, np.float64)
    if w.shape != (m,) or np.any(w < 0) or not math.isclose(w.sum(), 1.0, rel_tol=1e-4):
        detail = f"shape {w.shape}" if w.shape != (m,) else f"min {w.min():.3g}, sum {w.sum():.6g}"
        raise ValueError(f"ref_weights: expected ({m},) non-negative weights summing to 1, got {detail}")
    return w


def _nonfinite_note(x: np.ndarray) -> str:
    bad = int(np.sum(~np.all(np.isfinite(x.reshape(x.shape[0], -1)), axis=1)))
    return f" ({bad}/{x.shape[0]} members non-finite)" if bad else ""


def representative_members(weights: np.ndarray, k: int) -> np.ndarray:
    """Indices of k members by systematic resampling of `weights (M,)` (deterministic, u = 1/2)."""
    cdf = np.cumsum(weights)
    return np.minimum(np.searchsorted(cdf, (np.arange(k) + 0.5) / k), weights.size - 1)


# ----------------------------------------------------------------------------
# Field figures


@dataclasses.dataclass(frozen=True)
class FieldLayout:
    """How to draw a task's `(C, H, W)` fields: labels, physical coordinates and what is observed.

    Attributes:
      channels: `(name, unit)` per channel (`tasks.Channel`).
      x_edges `(W + 1,)`, y_edges `(H + 1,)`: cell edges in physical coordinates.
      x_label, y_label: axis labels with units.
      x_log: logarithmic x axis (the geometrically graded radial grid of CCS).
      y_down: y grows downward (depth).
      points: `(K, 2)` (x, y) centres of sparse observed cells (point sensors), or None.
      mask: bool `(H, W)` of a dense set of observed cells (the others hatched), or None.
      blocks: `(x_edges, y_edges)` of average-pooling blocks, or None.
      columns: `(k,)` x centres of observed columns (well logs), or None.
      caption: what the overlay shows, e.g. ``"o: 128 point sensors of the state"``.
    """

    channels: tuple[tuple[str, str], ...]
    x_edges: np.ndarray
    y_edges: np.ndarray
    x_label: str = "x"
    y_label: str = "y"
    x_log: bool = False
    y_down: bool = False
    points: np.ndarray | None = None
    mask: np.ndarray | None = None
    blocks: tuple[np.ndarray, np.ndarray] | None = None
    columns: np.ndarray | None = None
    caption: str = ""

    @property
    def shape(self) -> tuple[int, int]:
        return (self.y_edges.size - 1, self.x_edges.size - 1)

    def check(self, shape) -> None:
        """ValueError unless fields of `shape (C, H, W)` match the channels and the grid."""
        if (len(self.channels), *self.shape) != tuple(shape):
            raise ValueError(
                f"layout: expected fields of shape ({len(self.channels)}, {self.shape[0]}, {self.shape[1]}) "
                f"(its channels and grid), got {tuple(shape)}"
            )


def _centres(edges: np.ndarray, log: bool) -> np.ndarray:
    return np.sqrt(edges[:-1] * edges[1:]) if log else 0.5 * (edges[:-1] + edges[1:])


def field_layout(task) -> FieldLayout | None:
    """The `FieldLayout` of a task's unknown, or None when the unknown is not a field on its grid.

    Coordinates: a `grids.Grid` draws cell `[i, j]` centred on its point (x_j, y_i) in units of
    the domain side; a radial grid (CCS, `physics.co2.RadialGrid`) draws the radial faces in m on
    a log axis and depth in m downward. The overlay is the task's observation of the state
    (same grid as the unknown): point sensors as markers, the unobserved cells of dense masks
    hatched, pooling blocks
    as their edges, well columns as vertical lines. Coefficient unknowns (`(17, 1, 1)` of the
    interface tasks) have no field layout.
    """
    grid, shape = task.grid, tuple(task.unknown_shape)
    if tuple(grid.shape) != shape[1:]:
        return None
    channels = tuple((c.name, c.unit) for c in task.channels) or tuple(
        (f"channel {c}", "?") for c in range(shape[0])
    )
    if hasattr(grid, "faces") and hasattr(grid, "dz"):  # radial (r, z) grid
        x_edges, y_edges = np.asarray(grid.faces(), np.float64), np.arange(grid.nz + 1) * grid.dz
        geometry = dict(x_label="r [m]", y_label="depth [m]", x_log=True, y_down=True)
    elif hasattr(grid, "points"):
        p, h = grid.points(), grid.spacing
        x_edges = y_edges = np.concatenate([p - 0.5 * h, p[-1:] + 0.5 * h])
        geometry = {}
    else:
        x_edges, y_edges = np.arange(shape[2] + 1.0), np.arange(shape[1] + 1.0)
        geometry = dict(x_label="column", y_label="row")
    xc, yc = _centres(x_edges, geometry.get("x_log", False)), _centres(y_edges, False)
    overlay = _observation_overlay(task.observation, xc, yc, x_edges, y_edges)
    return FieldLayout(channels, x_edges, y_edges, **geometry, **overlay)


def _observation_overlay(observation, xc, yc, x_edges, y_edges) -> dict:
    from posteriorjax.observations import AveragePool, ColumnObservation

    inner = observation
    while hasattr(inner, "inner"):  # an operator applied to one frame of the state
        inner = inner.inner
    if isinstance(inner, AveragePool):
        s = inner.factor
        if s == 1:
            return dict(caption="every cell of the state observed")
        rows, cols = inner.shape[0] // s, inner.shape[1] // s
        return dict(
            blocks=(x_edges[::s], y_edges[::s]), caption=f"lines: {rows} x {cols} blocks averaged (state)"
        )
    if isinstance(inner, ColumnObservation):
        cols = np.asarray(inner.columns)
        return dict(columns=xc[cols], caption=f"dashed: {cols.size} observed well columns (state)")
    mask = np.asarray(observation.mask, bool)
    count = int(mask.sum())
    if mask.all():
        return dict(caption="every cell of the state observed")
    if count <= SPARSE_FRACTION * mask.size:
        i, j = np.nonzero(mask)
        return dict(points=np.stack([xc[j], yc[i]], axis=1), caption=f"o: {count} point sensors of the state")
    missed = f"{1 - mask.mean():.0%}"
    return dict(mask=mask, caption=f"hatched: cells the observation misses ({missed} of the state)")


def _overlay(ax, layout: FieldLayout) -> None:
    """Draw what the observation sees on `ax` (artists tagged with gid `OVERLAY`)."""
    style = dict(color="white", alpha=0.9, gid=OVERLAY)
    if layout.points is not None:
        ax.plot(*layout.points.T, "o", ms=2.5, mfc="white", mec="black", mew=0.4, ls="none", gid=OVERLAY)
    if layout.columns is not None:
        for x in layout.columns:
            ax.axvline(x, lw=1.0, ls="--", **style)
    if layout.blocks is not None:
        (xb, yb), (x0, x1), (y0, y1) = layout.blocks, layout.x_edges[[0, -1]], layout.y_edges[[0, -1]]
        ax.vlines(xb[1:-1], y0, y1, lw=0.4, **style)
        ax.hlines(yb[1:-1], x0, x1, lw=0.4, **style)
    if layout.mask is not None:  # hatch the unobserved cells (contour of the 0/1 field: cell edges)
        xc, yc = _centres(layout.x_edges, layout.x_log), _centres(layout.y_edges, False)
        with matplotlib.rc_context({"hatch.color": "white", "hatch.linewidth": 0.6}):
            hatch = ax.contourf(xc, yc, (~layout.mask).astype(float), levels=[0.5, 1.5], colors="none",
                                hatches=["////"])  # fmt: skip
        hatch.set_gid(OVERLAY)


def _image(ax, field, vmin, vmax, cmap="viridis", layout: FieldLayout | None = None):
    """One field tile without ticks (`_ticks` adds them): in grid indices, or in physical coordinates."""
    field = np.asarray(field, np.float64)
    # positive values spanning two decades or more (log-normal permeability): a log colour scale
    log = vmin > 0 and math.log10(vmax / vmin) >= 2
    scale = dict(norm=matplotlib.colors.LogNorm(vmin, vmax)) if log else dict(vmin=vmin, vmax=vmax)
    if layout is None:
        image = ax.imshow(field, origin="lower", cmap=_cmap(cmap), **scale)
    else:
        values = np.ma.masked_invalid(field)
        image = ax.pcolormesh(layout.x_edges, layout.y_edges, values, cmap=_cmap(cmap), **scale)
        image.set_rasterized(True)
        if layout.x_log:
            ax.set_xscale("log")
        ax.set_xlim(layout.x_edges[0], layout.x_edges[-1])
        ax.set_ylim(*(layout.y_edges[[-1, 0]] if layout.y_down else layout.y_edges[[0, -1]]))
    ax.set_xticks([])
    ax.set_yticks([])
    ax.xaxis.set_minor_locator(NullLocator())
    return image


def _ticks(ax, layout: FieldLayout | None, *, x: bool, y: bool) -> None:
    """Physical-coordinate ticks and axis labels on the bottom (`x`) / left (`y`) tiles."""
    if layout is None:
        return
    if x:
        ax.xaxis.set_major_locator(_inner_ticks(layout.x_edges, layout.x_log))
        ax.set_xlabel(layout.x_label, fontsize=7, labelpad=1)
    if y:
        ax.yaxis.set_major_locator(_inner_ticks(layout.y_edges, False))
        ax.set_ylabel(layout.y_label, fontsize=7, labelpad=1)
    ax.tick_params(labelsize=6, length=2, pad=1)


def _inner_ticks(edges: np.ndarray, log: bool):
    """Ticks inside the edges, clear of them (labels of neighbouring tiles never touch): at most 4
    round values, or decades (every other one where more would crowd a tile) on a log axis."""
    lo, hi = (math.log10(edges[0]), math.log10(edges[-1])) if log else (edges[0], edges[-1])
    margin = 0.05 * (hi - lo)
    if log:
        first, last = math.ceil(lo + margin), math.floor(hi - margin)
        values = 10.0 ** np.arange(first, last + 1, max(1, math.ceil((last - first + 1) / 4)))
    else:
        values = matplotlib.ticker.MaxNLocator(nbins=4, steps=[1, 2.5, 5, 10]).tick_values(lo, hi)
        values = values[(values >= min(lo, hi) + abs(margin)) & (values <= max(lo, hi) - abs(margin))]
    return FixedLocator(values)


def _channels(layout: FieldLayout | None, channels: int) -> list[tuple[str, str | None]]:
    """`(name, unit or None)` per channel."""
    return list(layout.channels) if layout is not None else [(f"channel {c}", None) for c in range(channels)]


def _label(name: str, unit: str | None, width: int | None = None) -> str:
    """``"name [unit]"``, wrapped into lines of at most `width` characters."""
    text = name if unit is None else f"{name} [{unit}]"
    return text if width is None else "\n".join(textwrap.wrap(text, width))


def _tile_grid(fig, height: float, x0: Sequence[float], rows: int):
    """Axes `(rows, len(x0))` of TILE-inch tiles below the title band, a channel's pair of rows
    followed by an `AXIS_BAND` for its x ticks; `x0` are the columns' left edges (inches)."""

    def bottom(i):
        return height - TITLE - (i + 1) * TILE - (i // 2) * AXIS_BAND

    return np.asarray(
        [[_axes_at(fig, x + PAD, bottom(i) + PAD, *[TILE - 2 * PAD] * 2) for x in x0] for i in range(rows)]
    ), bottom


def _row_label(fig, ax, text: str) -> None:
    """Row name in the left margin, beside the row of `ax` (left of its y ticks and label)."""
    fig.text(
        0.12 / fig.get_size_inches()[0], ax.get_position().y0 + 0.5 * ax.get_position().height, text,
        rotation=90, ha="center", va="center", fontsize=8,
    )  # fmt: skip


def _colorbar(fig, image, x: float, y: float, height: float, label: str):
    cbar = fig.colorbar(image, cax=_axes_at(fig, x, y, 0.13, height))
    cbar.ax.tick_params(labelsize=6)
    cbar.set_label(label, fontsize=7)
    return cbar


def _field_title(fig, title: str, layout: FieldLayout | None) -> None:
    fig.suptitle(title, fontsize=9, y=1 - 0.08 / fig.get_size_inches()[1], va="top")
    if layout is not None and layout.caption:
        fig.text(0.5, 1 - 0.3 / fig.get_size_inches()[1], layout.caption, ha="center", va="top", fontsize=7)


def samples_figure(
    path,
    samples,
    ref_samples,
    ref_weights=None,
    *,
    truth=None,
    num_members: int = 4,
    title: str = "",
    layout: FieldLayout | None = None,
) -> Path:
    """Reference members beside sampler members, two rows per channel, shared colour scale per channel.

    `samples (N, C, H, W)`, `ref_samples (M, C, H, W)`, `ref_weights (M,)` or
    None (uniform), `truth (C, H, W)` (an extra first column) or None. The
    reference row shows `representative_members` of the weighted ensemble,
    the sampler row its first members; non-finite values are grey. With a
    `layout` (`field_layout(task)`), tiles are drawn in physical coordinates
    (ticks on the first tile of each row), colourbars carry the channel's name
    and unit, and the observation is drawn on the truth tile (the first
    reference tile without truth). Size: (LEFT + k TILE + COLORBAR) x
    (C (2 TILE + AXIS_BAND) + TITLE) inches, k = members (+ 1 with truth).
    """
    x, y = _check_fields("samples", samples), _check_fields("ref_samples", ref_samples)
    if x.shape[1:] != y.shape[1:]:
        raise ValueError(f"samples: expected member shape {y.shape[1:]} (the reference's), got {x.shape[1:]}")
    if layout is not None:
        layout.check(x.shape[1:])
    w = _weights(ref_weights, y.shape[0])
    t = None if truth is None else _check_fields("truth", truth, ndim=3)
    k = min(num_members, x.shape[0], y.shape[0])
    ref = y[representative_members(w, k)]
    ncols, channels = k + (t is not None), x.shape[1]
    height = channels * (2 * TILE + AXIS_BAND) + TITLE
    fig = _new(LEFT + ncols * TILE + COLORBAR, height)
    axes, bottom = _tile_grid(fig, height, [LEFT + j * TILE for j in range(ncols)], 2 * channels)
    labels = [_label(*ch) for ch in _channels(layout, channels)]
    off = int(t is not None)
    for c in range(channels):
        vmin, vmax = _limits(ref[:, c], x[:k, c], None if t is None else t[c])
        row_ref, row_smp = axes[2 * c], axes[2 * c + 1]
        if t is not None:
            _image(row_ref[0], t[c], vmin, vmax, layout=layout)
            row_smp[0].set_axis_off()
            if c == 0:
                row_ref[0].set_title("truth", fontsize=8)
        for j in range(k):
            im = _image(row_ref[off + j], ref[j, c], vmin, vmax, layout=layout)
            _image(row_smp[off + j], x[j, c], vmin, vmax, layout=layout)
        if layout is not None:
            _overlay(row_ref[0], layout)
        _ticks(row_ref[0], layout, x=bool(off), y=True)  # the truth tile (the cell below it is empty)
        _ticks(row_smp[off], layout, x=True, y=True)
        _row_label(fig, row_ref[0], "reference")
        _row_label(fig, row_smp[off], "sampler")
        _colorbar(fig, im, LEFT + ncols * TILE + 0.05, bottom(2 * c + 1) + PAD, 2 * TILE - 2 * PAD, labels[c])
    if k:
        axes[0, off].set_title("reference members", fontsize=8, loc="left")
    _field_title(fig, title + _nonfinite_note(x), layout)
    return _save(fig, path)


def moments_figure(
    path, samples, ref_samples, ref_weights=None, *, title: str = "", layout: FieldLayout | None = None
) -> Path:
    """Posterior mean and std maps: reference, sampler and sampler - reference, per channel.

    `samples (N, C, H, W)` (equal weights), `ref_samples (M, C, H, W)` with
    `ref_weights (M,)` or None. Std is the (weighted) population std (ddof 0)
    of both ensembles. Mean and std each share a colour scale between
    reference and sampler; the differences use a symmetric diverging scale.
    With a `layout`, tiles are in physical coordinates, colourbars carry the
    channel's name and unit (ticks on the first column), and the observation is
    drawn on every tile (the std maps shrink where it sees). Size: (LEFT + 3 TILE + 2 COLORBAR) x
    (C (2 TILE + AXIS_BAND) + TITLE) inches.
    """
    x, y = _check_fields("samples", samples), _check_fields("ref_samples", ref_samples)
    if x.shape[1:] != y.shape[1:]:
        raise ValueError(f"samples: expected member shape {y.shape[1:]} (the reference's), got {x.shape[1:]}")
    if layout is not None:
        layout.check(x.shape[1:])
    w = _weights(ref_weights, y.shape[0])
    yf = y.astype(np.float64)
    r_mean = np.tensordot(w, yf, axes=1)
    r_std = np.sqrt(np.tensordot(w, (yf - r_mean) ** 2, axes=1))
    with np.errstate(invalid="ignore", over="ignore"):
        s_mean = x.astype(np.float64).mean(axis=0)
        s_std = x.astype(np.float64).std(axis=0)
    channels = x.shape[1]
    height = channels * (2 * TILE + AXIS_BAND) + TITLE
    fig = _new(LEFT + 3 * TILE + 2 * COLORBAR, height)
    x0 = (LEFT, LEFT + TILE, LEFT + 2 * TILE + COLORBAR)  # left edge of the three columns
    axes, bottom = _tile_grid(fig, height, x0, 2 * channels)
    names = _channels(layout, channels)
    for c in range(channels):
        for i, (name, ref_m, smp_m) in enumerate((("mean", r_mean, s_mean), ("std", r_std, s_std))):
            row = axes[2 * c + i]
            vmin, vmax = _limits(ref_m[c], smp_m[c])
            im = _image(row[0], ref_m[c], vmin, vmax, layout=layout)
            _image(row[1], smp_m[c], vmin, vmax, layout=layout)
            diff = smp_m[c] - ref_m[c]
            lim = _limits(np.abs(diff))[1]
            im_d = _image(row[2], diff, -lim, lim, cmap="RdBu_r", layout=layout)
            for ax in row:
                if layout is not None:
                    _overlay(ax, layout)
            _ticks(row[0], layout, x=i == 1, y=True)
            _row_label(fig, row[0], name)
            y0 = bottom(2 * c + i) + PAD
            channel, unit = names[c]
            bar = (y0, TILE - 2 * PAD)
            _colorbar(fig, im, x0[1] + TILE + 0.02, *bar, _label(f"{name} of {channel}", unit, 24))
            _colorbar(fig, im_d, x0[2] + TILE + 0.02, *bar, _label(f"{name} difference", unit, 24))
    for j, name in enumerate(("reference", "sampler", "sampler - reference")):
        axes[0, j].set_title(name, fontsize=8)
    _field_title(fig, title + _nonfinite_note(x), layout)
    return _save(fig, path)


# ----------------------------------------------------------------------------
# Record figures


def curves_figure(
    path, records: Sequence[dict], axis: str, metrics: Sequence[str] | None = None, *, title=""
):
    """Every metric against hyperparameter `axis`: mean +- std over cases, the optimum starred.

    `records` are one (task, sampler) pair; one line per setting of the other
    hyperparameters. x is logarithmic when every value is >= 0 (a value 0 sits
    at the left edge, labelled 0), y where the means span a decade. The star marks
    `optimal_hparams` of the line; an x on the bottom edge marks a value whose row
    holds a non-finite record.
    Size: (ncols PANEL[0]) x (nrows PANEL[1] + TITLE) inches, one panel per metric,
    at most MAX_COLUMNS columns.
    """
    metrics = scalar_metrics(records, LOWER_IS_BETTER) if metrics is None else list(metrics)
    if not metrics:
        raise ValueError("metrics: expected at least one metric present in the records, got none")
    split = axis_split(records, axis)
    nrows, ncols = _grid_shape(len(metrics))
    fig = _new(ncols * PANEL[0], nrows * PANEL[1] + TITLE)
    axes = _panels(fig, nrows, ncols).ravel()
    all_values = np.unique([float(np.float32(r["hparams"][axis])) for r in records])
    _, scale, zero = _positions(all_values)
    for ax, m in zip(axes, metrics, strict=False):
        for i, (others, recs) in enumerate(split.items()):
            rows = sorted(results.aggregate(recs, [m]), key=lambda row: row["hparams"][axis])
            v = np.asarray([row["hparams"][axis] for row in rows], np.float64)
            mean = np.asarray([row[m][0] for row in rows])
            std = np.asarray([row[m][1] for row in rows])
            xpos = np.where(v == 0, zero, v) if zero is not None else v
            color = f"C{i % 10}"
            label = results.hparam_label(dict(others)) if len(split) > 1 else None
            ax.plot(xpos, mean, "o-", color=color, ms=3, lw=1.2, label=label)
            ax.fill_between(xpos, mean - std, mean + std, color=color, alpha=0.2, lw=0)
            bad = ~np.isfinite(mean)
            if bad.any():  # rows with a non-finite record: an x at the bottom edge
                ax.plot(xpos[bad], np.full(bad.sum(), 0.04), "x", color=color, ms=6, mew=1.5,
                        transform=ax.get_xaxis_transform(), clip_on=False)  # fmt: skip
            best = optimal_hparams(recs, axis, [m])[m]
            if math.isfinite(best):
                j = int(np.argmin(np.abs(v - best)))
                ax.plot(xpos[j], mean[j], "*", color=color, ms=13, mec="k", mew=0.6, zorder=5)
                if len(split) == 1:
                    ax.set_title(f"{HEADERS.get(m, m)}  (opt {axis}={best:g})", fontsize=8)
        if len(split) > 1:
            ax.set_title(HEADERS.get(m, m), fontsize=8)
        shown = np.where(all_values == 0, zero or 0.0, all_values)
        _set_axis(ax, "x", scale, zero, shown)
        if scale == "log":
            ax.set_xlim(shown.min() / 1.5, shown.max() * 1.5)
        elif shown.max() > shown.min():
            pad = 0.05 * (shown.max() - shown.min())
            ax.set_xlim(shown.min() - pad, shown.max() + pad)
        means = [row[m][0] for recs in split.values() for row in results.aggregate(recs, [m])]
        _log_if_decades(ax, "y", means)
        ax.set_xlabel(axis, fontsize=8)
        ax.set_ylabel(HEADERS.get(m, m), fontsize=8)
        ax.tick_params(labelsize=7)
    if len(split) > 1:
        axes[0].legend(fontsize=6)
    for ax in axes[len(metrics) :]:
        ax.set_axis_off()
    fig.suptitle(title, fontsize=9)
    return _save(fig, path)


def optimum_figure(path, optima: Mapping[float, Mapping[str, float]], *, axis: str = "guidance", title=""):
    """Optimal `axis` value against inverse noise variance 1 / sigma^2, one line per metric.

    `optima` maps a noise std sigma to `optimal_hparams(...)` at that level.
    Both axes logarithmic (an optimum of 0 sits at the bottom edge, labelled 0).
    Size: 5.0 x 3.6 inches.
    """
    sigmas = np.asarray(sorted(optima), np.float64)
    if sigmas.size < 2 or np.any(sigmas <= 0):
        raise ValueError(f"optima: expected at least two positive noise levels, got {sigmas.tolist()}")
    metrics = sorted({m for o in optima.values() for m in o}, key=lambda m: (m not in LOWER_IS_BETTER, m))
    fig = _new(5.0, 3.6)
    ax = _panels(fig, 1, 1, left=0.8, top=0.35)[0, 0]
    inv = 1.0 / sigmas**2
    table = np.asarray([[optima[s].get(m, math.nan) for s in sigmas] for m in metrics], np.float64)
    finite = table[np.isfinite(table)]
    _, scale, zero = _positions(finite)
    for i, m in enumerate(metrics):
        y = table[i] if zero is None else np.where(table[i] == 0, zero, table[i])
        # markers and dashes vary too: metrics often share an optimum, and their lines coincide
        style = dict(marker="osd^v<>ph*"[i % 10], ls=("-", "--", ":", "-.")[i % 4], ms=5 - 0.3 * (i % 4))
        ax.plot(inv, y, color=f"C{i % 10}", lw=1.2, label=HEADERS.get(m, m), **style)
    ax.set_xscale("log")
    _set_axis(ax, "y", scale, zero, finite if zero is None else np.where(finite == 0, zero, finite))
    ax.set_xlabel(r"$1/\sigma^2$")
    ax.set_ylabel(f"optimal {axis}")
    ax.legend(fontsize=6, ncols=2)
    ax.set_title(title, fontsize=9)
    return _save(fig, path)


def vshape_figure(
    path, records: Sequence[dict], metrics=POSTERIOR_METRICS, *, pointwise="rel_l2_mean", title=""
):
    """Pointwise error against each posterior metric, one point per (sampler, hparams) row.

    Over-case means (`results.aggregate`); points of one sampler are joined in
    the order of its hyperparameter values; an axis is logarithmic where its values
    span a decade (one outlier would otherwise flatten the rest). Size: (ncols PANEL[0]) x
    (nrows PANEL[1] + TITLE) inches, one panel per metric present.
    """
    metrics = scalar_metrics(records, metrics)
    if not metrics:
        raise ValueError("metrics: none of the posterior metrics is present in the records")
    rows = results.aggregate(records, [pointwise, *metrics])
    samplers = sorted({row["sampler"] for row in rows})
    nrows, ncols = _grid_shape(len(metrics))
    fig = _new(ncols * PANEL[0], nrows * PANEL[1] + TITLE)
    axes = _panels(fig, nrows, ncols).ravel()
    for ax, m in zip(axes, metrics, strict=False):
        for i, s in enumerate(samplers):
            mine = sorted(
                (row for row in rows if row["sampler"] == s), key=lambda row: hparams_key(row["hparams"])
            )
            px = np.asarray([row[pointwise][0] for row in mine])
            py = np.asarray([row[m][0] for row in mine])
            ok = np.isfinite(px) & np.isfinite(py)
            ax.plot(px[ok], py[ok], "o-", color=f"C{i % 10}", ms=4, lw=0.8, label=s)
        _log_if_decades(ax, "x", [row[pointwise][0] for row in rows])
        _log_if_decades(ax, "y", [row[m][0] for row in rows])
        ax.set_xlabel(HEADERS.get(pointwise, pointwise), fontsize=8)
        ax.set_ylabel(HEADERS.get(m, m), fontsize=8)
        ax.tick_params(labelsize=7)
    axes[0].legend(fontsize=6)
    for ax in axes[len(metrics) :]:
        ax.set_axis_off()
    fig.suptitle(title, fontsize=9)
    return _save(fig, path)


def _per_sampler_axes(records: Sequence[dict]):
    samplers = sorted({r["sampler"] for r in records})
    nrows, ncols = _grid_shape(len(samplers))
    fig = _new(ncols * SQUARE, nrows * SQUARE + TITLE)
    axes = _panels(fig, nrows, ncols, wgap=0.6, hgap=0.8).ravel()
    for ax in axes[len(samplers) :]:
        ax.set_axis_off()
    return fig, dict(zip(samplers, axes, strict=False))


def _calibration_panels(fig, panels, curves, xlabel, ylabel, title):
    for sampler, ax in panels.items():
        mine = [(k, v) for k, v in curves.items() if k[0] == sampler]
        ax.plot([0, 1], [0, 1], "k--", lw=0.8)
        for i, ((_, hkey), (x, y)) in enumerate(mine):
            ax.plot(x, y, "-", color=f"C{i % 10}", lw=1.2, label=results.hparam_label(dict(hkey)))
        if not mine:
            ax.text(0.5, 0.5, "no finite row", ha="center", va="center", fontsize=8, transform=ax.transAxes)
        elif len(mine) <= 8 and any(k[1] for k, _ in mine):
            ax.legend(fontsize=6)
        ax.set(xlim=(0, 1), ylim=(0, 1), aspect="equal")
        ax.set_title(sampler, fontsize=8)
        ax.set_xlabel(xlabel, fontsize=8)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.tick_params(labelsize=7)
    fig.suptitle(title, fontsize=9)


def coverage_figure(path, records: Sequence[dict], levels=calibration.DEFAULT_LEVELS, *, title=""):
    """Empirical against nominal central-interval coverage per sampler (`coverage_curves`), diagonal dashed.

    Size: (ncols SQUARE) x (nrows SQUARE + TITLE) inches, one panel per sampler.
    """
    levels = np.asarray(levels, np.float64)
    curves = {k: (levels, v) for k, v in coverage_curves(records, levels).items()}
    fig, panels = _per_sampler_axes(records)
    _calibration_panels(fig, panels, curves, "nominal level", "empirical coverage", title)
    return _save(fig, path)


def tarp_figure(path, records: Sequence[dict], num_alpha_bins: int = TARP_BINS, *, title=""):
    """TARP expected coverage against credibility level per sampler (`tarp_curves`), diagonal dashed.

    Size: (ncols SQUARE) x (nrows SQUARE + TITLE) inches, one panel per sampler.
    """
    curves = {k: (a, e) for k, (e, a) in tarp_curves(records, num_alpha_bins).items()}
    fig, panels = _per_sampler_axes(records)
    _calibration_panels(fig, panels, curves, "credibility level", "expected coverage", title)
    return _save(fig, path)


def mira_figure(path, records: Sequence[dict], *, title=""):
    """MIRA score per (sampler, hparams) row with its calibrated band (`mira_scores`).

    The grey box spans expected -+ 2 std / sqrt(L), the tick is the calibrated
    mean; rows without finite statistics are left out. With fewer conditions than
    `results.mira_conditions_needed` (the calibration table's "too few cases" note), a
    red note on the panel says so. Size:
    clip(1.5 + 0.5 rows, 5, 24) x 4.0 inches.
    """
    scores = mira_scores(records)
    if not scores:
        raise ValueError("records: no (sampler, hparams) row has finite mira_statistic values")
    keys = sorted(scores)
    fig = _new(min(max(1.5 + 0.5 * len(keys), 5.0), 24.0), 4.0)
    ax = _panels(fig, 1, 1, left=0.7, bottom=1.4, top=0.35)[0, 0]
    samplers = sorted({k[0] for k in keys})
    for i, k in enumerate(keys):
        s = scores[k]
        ax.fill_between([i - 0.35, i + 0.35], s["low"], s["high"], color="0.85", lw=0)
        ax.plot([i - 0.35, i + 0.35], [s["expected"]] * 2, color="0.4", lw=0.8)
        ax.plot(i, s["score"], "o", color=f"C{samplers.index(k[0]) % 10}", ms=6)
    ax.set_xticks(
        range(len(keys)),
        [f"{k[0]}\n{results.hparam_label(dict(k[1]))}" for k in keys],
        rotation=60,
        fontsize=6,
    )
    ax.set_xlim(-0.6, len(keys) - 0.4)
    ax.set_ylabel("MIRA score", fontsize=8)
    ax.set_title(title or "MIRA (grey: calibrated mean +- 2 std / sqrt(L))", fontsize=9)
    little_l = min(s["count"] for s in scores.values())
    n = min(int(r["num_samples"]) for r in records if r["metrics"].get("mira_statistic") is not None)
    needed = results.mira_conditions_needed(n)
    if little_l < needed:  # the band cannot resolve the table's shift: say so on the figure
        note = (f"too few conditions: L = {little_l} < {needed}, the L a shift of "
                f"{results.MIRA_RESOLVED_SHIFT} needs at N = {n}")  # fmt: skip
        lo, hi = ax.get_ylim()
        ax.set_ylim(lo, hi + 0.12 * (hi - lo))  # headroom: the note never covers a band
        ax.text(0.01, 0.98, note, transform=ax.transAxes, ha="left", va="top", fontsize=7, color="C3",
                gid="too_few")  # fmt: skip
    return _save(fig, path)


# ----------------------------------------------------------------------------
# Workdir -> figures


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._=+-]+", "_", text)


def _chosen_setting(stored: list[tuple], records: Sequence[dict]) -> tuple:
    """The stored hyperparameter setting of smallest over-case `mean_error` (else the first stored)."""
    means = {
        hparams_key(row["hparams"]): row["mean_error"][0]
        for row in results.aggregate(records, ["mean_error"])
    }
    finite = [(means[k], i) for i, k in enumerate(stored) if k in means and math.isfinite(means[k])]
    return stored[min(finite)[1]] if finite else stored[0]


def task_layout(label: str, config: Mapping) -> FieldLayout | None:
    """`field_layout` of the sweep task entry `label`, built from the workdir's `config["tasks"]`.

    None when the entry names no registered task (`records.base_task`) or its task has
    no field layout; a registered task that no longer builds from the recorded options
    is logged as a warning and drawn without a layout.
    """
    from posteriorjax import tasks

    name = base_task(label)
    if name not in tasks.names():
        return None
    options = ((config.get("tasks") or {}).get(label)) or {}
    try:
        return field_layout(tasks.get(name, **options))
    except (TypeError, ValueError) as err:
        logging.warning("figures: task %r does not build from %s (%s); fields drawn without labels", label,
                        options, err)  # fmt: skip
        return None


def _render_fields(workdir: Path, records: Sequence[dict], config: Mapping, out: Path) -> list[Path]:
    sample_root, paths = workdir / "samples", []
    if not sample_root.is_dir():
        return paths
    for task_dir in sorted(p for p in sample_root.iterdir() if p.is_dir()):
        task = task_dir.name
        ref = read_reference(workdir, task)
        files = sorted(task_dir.glob("*.npz"))
        if not files or ref is None:
            continue
        ref_samples, ref_weights, x_true = ref["ref_samples"], ref["ref_weights"], ref["x_true"]
        if ref_samples.shape[-2:] == (1, 1):  # coefficient vectors (interface tasks), not images
            continue
        layout = task_layout(task, config)
        for file in files:
            label = file.stem
            with np.load(file) as data:
                samples, case = data["samples"], np.asarray(data["case"]).astype(int)
                hp = {k[len("hparam_") :]: np.asarray(data[k]) for k in data.files if k.startswith("hparam_")}
            if samples.shape[0] == 0:
                continue
            stored = [hparams_key({n: v[i] for n, v in hp.items()}) for i in range(samples.shape[0])]
            chosen = _chosen_setting(
                stored, [r for r in records if (r["task"], r["sampler"]) == (task, label)]
            )
            first: dict[int, int] = {}
            for i, (c, k) in enumerate(zip(case.tolist(), stored, strict=True)):
                if k == chosen:
                    first.setdefault(c, i)
            for c, i in sorted(first.items()):
                if not 0 <= c < ref_samples.shape[0]:
                    raise ValueError(
                        f"{file}: case {c} has no reference of task {task!r} ({ref_samples.shape[0]} cases)"
                    )
                title = f"{task} / {label} / case {c} ({results.hparam_label(dict(chosen))})"
                stem = f"{_slug(task)}_{_slug(label)}_case{c}.png"
                paths.append(
                    samples_figure(
                        out / f"samples_{stem}",
                        samples[i],
                        ref_samples[c],
                        ref_weights[c],
                        truth=x_true[c],
                        title=title,
                        layout=layout,
                    )
                )
                paths.append(
                    moments_figure(
                        out / f"moments_{stem}",
                        samples[i],
                        ref_samples[c],
                        ref_weights[c],
                        title=title,
                        layout=layout,
                    )
                )
    return paths


def render(workdir: str | Path, *, noise_workdirs: Sequence[str | Path] = ()) -> list[Path]:
    """Draw every figure whose inputs exist in `workdir` into `<workdir>/figures/`; return their paths.

    Reads `results.jsonl`, `config.json`, `samples/<task>/<sampler>.npz` and
    the stored references (`sweep.store.read_reference`), each only if present. Sample and moment figures
    show, per stored case, the stored hyperparameter setting with the smallest
    over-case `mean_error` (the main table's first column; the first stored
    setting when no record is finite). The optimum-vs-noise figures pool the
    task entries of `workdir` and of `noise_workdirs` (sweeps of the same study
    run at other noise levels, one workdir per level), each entry's noise
    level read with `records.noise_level` from its own workdir's config
    (`records.noise_optima`).
    """
    workdir = Path(workdir)
    out = workdir / "figures"
    records, config = read_workdir(workdir)
    sources = [(str(workdir), records, config)]
    for extra in noise_workdirs:
        extra = Path(extra)
        if not (extra / "results.jsonl").is_file():
            raise FileNotFoundError(f"noise_workdirs: {extra} holds no results.jsonl")
        sources.append((str(extra), *read_workdir(extra)))
    noise = noise_optima(sources)  # validated before anything is drawn
    paths = _render_fields(workdir, records, config, out)
    for (task,), trecs in sorted(group(records, "task").items()):
        t = _slug(task)
        for (sampler,), srecs in sorted(group(trecs, "sampler").items()):
            if not scalar_metrics(srecs, LOWER_IS_BETTER):
                continue
            for axis in varying_axes(srecs):
                name = f"curves_{t}_{_slug(sampler)}_{_slug(axis)}.png"
                paths.append(curves_figure(out / name, srecs, axis, title=f"{task} / {sampler}"))
        if (
            len(row_groups(trecs)) >= 2
            and scalar_metrics(trecs, ["rel_l2_mean"])
            and scalar_metrics(trecs, POSTERIOR_METRICS)
        ):
            paths.append(
                vshape_figure(out / f"vshape_{t}.png", trecs, title=f"{task}: pointwise vs posterior")
            )
        if any(isinstance(r["metrics"].get("coverage"), list) for r in trecs):
            paths.append(coverage_figure(out / f"coverage_{t}.png", trecs, title=f"{task}: coverage"))
        curves, rows = tarp_curves(trecs), row_groups(trecs)
        if curves and all(len(rows[k]) >= results.TARP_MIN_CONDITIONS for k in curves):
            paths.append(tarp_figure(out / f"tarp_{t}.png", trecs, title=f"{task}: TARP expected coverage"))
        if mira_scores(trecs):
            paths.append(mira_figure(out / f"mira_{t}.png", trecs, title=f"{task}: MIRA"))
    for (base, sampler, axis, others), optima in noise.items():
        setting = results.hparam_label(dict(others))
        suffix = f"_{_slug(setting)}" if others else ""
        name = f"optimum_{_slug(base)}_{_slug(sampler)}_{_slug(axis)}{suffix}.png"
        title = f"{base} / {sampler}: optimal {axis} per metric" + (f" ({setting})" if others else "")
        paths.append(optimum_figure(out / name, optima, axis=axis, title=title))
    return paths


def report(workdir: str | Path, *, noise_workdirs: Sequence[str | Path] = ()) -> tuple[str, list[Path]]:
    """Re-render the tables and every figure of `workdir` from its `results.jsonl`.

    Writes `results.csv`, `calibration.json` and `summary.md` (the main table and
    the "Calibration over cases" table: `results.write_tables`, as `sweep.run`
    does), then `render`. Returns (the Markdown summary, the figure paths). A
    workdir without records is an error.
    """
    workdir = Path(workdir)
    path = workdir / "results.jsonl"
    if not path.is_file():
        raise FileNotFoundError(
            f"workdir: expected a sweep workdir holding results.jsonl, but {path} does not exist "
            "(run `python -m experiments.sweep --config=... --workdir=DIR` first)"
        )
    records = load_records(path)
    if not records:
        raise ValueError(f"workdir: {path} holds no records")
    summary = results.write_tables(workdir, records)
    return summary, render(workdir, noise_workdirs=noise_workdirs)
