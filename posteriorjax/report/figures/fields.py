"""Field figures: samples and moments of a sampler beside the reference, in the physical
coordinates of the task's grid with what its observation sees drawn on the tiles."""

from __future__ import annotations

import dataclasses
import math
import textwrap
from collections.abc import Sequence
from pathlib import Path

import matplotlib
import numpy as np
from matplotlib.ticker import FixedLocator, NullLocator

from posteriorjax.observations import AveragePool, ColumnObservation
from posteriorjax.report.figures import style
from posteriorjax.report.figures.style import (
    AXIS_BAND,
    COLORBAR,
    LEFT,
    OVERLAY,
    PAD,
    SPARSE_FRACTION,
    TILE,
    TITLE,
    representative_members,
)


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
            hatch = ax.contourf(
                xc, yc, (~layout.mask).astype(float), levels=[0.5, 1.5], colors="none", hatches=["////"]
            )
        hatch.set_gid(OVERLAY)


def _image(ax, field, vmin, vmax, cmap="viridis", layout: FieldLayout | None = None):
    """One field tile without ticks (`_ticks` adds them): in grid indices, or in physical coordinates."""
    field = np.asarray(field, np.float64)
    # positive values spanning two decades or more (log-normal permeability): a log colour scale
    log = vmin > 0 and math.log10(vmax / vmin) >= 2
    scale = dict(norm=matplotlib.colors.LogNorm(vmin, vmax)) if log else dict(vmin=vmin, vmax=vmax)
    if layout is None:
        image = ax.imshow(field, origin="lower", cmap=style.cmap(cmap), **scale)
    else:
        values = np.ma.masked_invalid(field)
        image = ax.pcolormesh(layout.x_edges, layout.y_edges, values, cmap=style.cmap(cmap), **scale)
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
        [
            [style.axes_at(fig, x + PAD, bottom(i) + PAD, *[TILE - 2 * PAD] * 2) for x in x0]
            for i in range(rows)
        ]
    ), bottom


def _row_label(fig, ax, text: str) -> None:
    """Row name in the left margin, beside the row of `ax` (left of its y ticks and label)."""
    fig.text(
        0.12 / fig.get_size_inches()[0],
        ax.get_position().y0 + 0.5 * ax.get_position().height,
        text,
        rotation=90,
        ha="center",
        va="center",
        fontsize=8,
    )


def _colorbar(fig, image, x: float, y: float, height: float, label: str):
    cbar = fig.colorbar(image, cax=style.axes_at(fig, x, y, 0.13, height))
    cbar.ax.tick_params(labelsize=6)
    cbar.set_label(label, fontsize=7)
    return cbar


def _field_title(fig, title: str, layout: FieldLayout | None) -> None:
    fig.suptitle(title, fontsize=9, y=1 - 0.08 / fig.get_size_inches()[1], va="top")
    if layout is not None and layout.caption:
        fig.text(0.5, 1 - 0.3 / fig.get_size_inches()[1], layout.caption, ha="center", va="top", fontsize=7)


def _ensembles(samples, ref_samples, ref_weights, layout):
    """(samples (N, C, H, W), reference (M, C, H, W), its weights (M,)), checked against each other
    and against `layout`."""
    x, y = style.check_fields("samples", samples), style.check_fields("ref_samples", ref_samples)
    if x.shape[1:] != y.shape[1:]:
        raise ValueError(f"samples: expected member shape {y.shape[1:]} (the reference's), got {x.shape[1:]}")
    if layout is not None:
        layout.check(x.shape[1:])
    w = style.weights(ref_weights, y.shape[0])
    return x, y, w


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
    x, y, w = _ensembles(samples, ref_samples, ref_weights, layout)
    t = None if truth is None else style.check_fields("truth", truth, ndim=3)
    k = min(num_members, x.shape[0], y.shape[0])
    ref = y[representative_members(w, k)]
    ncols, channels = k + (t is not None), x.shape[1]
    height = channels * (2 * TILE + AXIS_BAND) + TITLE
    fig = style.new(LEFT + ncols * TILE + COLORBAR, height)
    axes, bottom = _tile_grid(fig, height, [LEFT + j * TILE for j in range(ncols)], 2 * channels)
    labels = [_label(*ch) for ch in _channels(layout, channels)]
    off = int(t is not None)
    for c in range(channels):
        vmin, vmax = style.limits(ref[:, c], x[:k, c], None if t is None else t[c])
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
    _field_title(fig, title + style.nonfinite_note(x), layout)
    return style.save(fig, path)


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
    x, y, w = _ensembles(samples, ref_samples, ref_weights, layout)
    yf = y.astype(np.float64)
    r_mean = np.tensordot(w, yf, axes=1)
    r_std = np.sqrt(np.tensordot(w, (yf - r_mean) ** 2, axes=1))
    with np.errstate(invalid="ignore", over="ignore"):
        s_mean = x.astype(np.float64).mean(axis=0)
        s_std = x.astype(np.float64).std(axis=0)
    channels = x.shape[1]
    height = channels * (2 * TILE + AXIS_BAND) + TITLE
    fig = style.new(LEFT + 3 * TILE + 2 * COLORBAR, height)
    x0 = (LEFT, LEFT + TILE, LEFT + 2 * TILE + COLORBAR)  # left edge of the three columns
    axes, bottom = _tile_grid(fig, height, x0, 2 * channels)
    names = _channels(layout, channels)
    for c in range(channels):
        for i, (name, ref_m, smp_m) in enumerate((("mean", r_mean, s_mean), ("std", r_std, s_std))):
            row = axes[2 * c + i]
            vmin, vmax = style.limits(ref_m[c], smp_m[c])
            im = _image(row[0], ref_m[c], vmin, vmax, layout=layout)
            _image(row[1], smp_m[c], vmin, vmax, layout=layout)
            diff = smp_m[c] - ref_m[c]
            lim = style.limits(np.abs(diff))[1]
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
    _field_title(fig, title + style.nonfinite_note(x), layout)
    return style.save(fig, path)
