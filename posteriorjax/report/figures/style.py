"""Figure style: sizes in inches, the DPI, and the drawing helpers every figure module shares
(fixed layouts on an Agg canvas, log axes over decades, colour limits, saving without clipping)."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, NullLocator

from posteriorjax.metrics import registry

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


def new(width: float, height: float) -> Figure:
    # fixed layouts in inches (no layout engine): the sizes are exact and drawing stays fast
    fig = Figure(figsize=(width, height), dpi=DPI)
    FigureCanvasAgg(fig)
    return fig


def axes_at(fig: Figure, x: float, y: float, w: float, h: float):
    """New axes at (x, y) inches from the bottom-left corner, w x h inches."""
    width, height = fig.get_size_inches()
    return fig.add_axes((x / width, y / height, w / width, h / height))


def panels(
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


def save(fig: Figure, path: str | Path) -> Path:
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


def log_if_decades(ax, which: str, values, decades: float = 1.0) -> bool:
    """Log scale on axis `which` when the finite values are all > 0 and span >= `decades` decades."""
    v = np.asarray(values, np.float64)
    v = v[np.isfinite(v)]
    if v.size < 2 or np.any(v <= 0) or math.log10(v.max() / v.min()) < decades:
        return False
    (ax.set_xscale if which == "x" else ax.set_yscale)("log")
    return True


def grid_shape(n: int, max_columns: int = MAX_COLUMNS) -> tuple[int, int]:
    ncols = min(n, max_columns)
    return -(-n // ncols), ncols


def positions(values: np.ndarray) -> tuple[np.ndarray, str, float | None]:
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


def set_axis(ax, which: str, scale: str, zero: float | None, values: np.ndarray) -> None:
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


def cmap(name: str):
    return matplotlib.colormaps[name].with_extremes(bad="0.75")


def limits(*arrays) -> tuple[float, float]:
    vals = np.concatenate([np.asarray(a, np.float64).ravel() for a in arrays if a is not None])
    vals = vals[np.isfinite(vals)]
    if vals.size == 0:
        return 0.0, 1.0
    lo, hi = float(vals.min()), float(vals.max())
    if hi <= lo:
        pad = max(abs(lo), 1.0) * 1e-6
        return lo - pad, hi + pad
    return lo, hi


def check_fields(name: str, array, ndim: int = 4) -> np.ndarray:
    a = np.asarray(array)
    if a.ndim != ndim:
        raise ValueError(
            f"{name}: expected {ndim} dims ({'(N, C, H, W)' if ndim == 4 else '(C, H, W)'}), got {a.shape}"
        )
    return a


def weights(ref_weights, m: int) -> np.ndarray:
    if ref_weights is None:
        return np.full(m, 1.0 / m)
    w = np.asarray(ref_weights, np.float64)
    if w.shape != (m,) or np.any(w < 0) or not math.isclose(w.sum(), 1.0, rel_tol=1e-4):
        detail = f"shape {w.shape}" if w.shape != (m,) else f"min {w.min():.3g}, sum {w.sum():.6g}"
        raise ValueError(f"ref_weights: expected ({m},) non-negative weights summing to 1, got {detail}")
    return w


def nonfinite_note(x: np.ndarray) -> str:
    bad = int(np.sum(~np.all(np.isfinite(x.reshape(x.shape[0], -1)), axis=1)))
    return f" ({bad}/{x.shape[0]} members non-finite)" if bad else ""


def representative_members(weights: np.ndarray, k: int) -> np.ndarray:
    """Indices of k members by systematic resampling of `weights (M,)` (deterministic, u = 1/2)."""
    cdf = np.cumsum(weights)
    return np.minimum(np.searchsorted(cdf, (np.arange(k) + 0.5) / k), weights.size - 1)
