"""Sweep figures: PNGs of samples, moments, hyperparameter curves and calibration, from a workdir.

One module per section: `style` (sizes, drawing helpers), `fields`, `curves`, `calibration`,
`render` (workdir -> figures).

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

`report.stage.write(workdir)` writes the tables (`results.csv`, `calibration.json`,
`summary.md`) from `results.jsonl`, then these figures; `python -m experiments.report` and the
sweep's entry point call it.

`vshape_points_figure` (the paper's V-shape: one point per main-table row, pointwise error against
one reference sample) is drawn by `report.studies.report` (`python -m experiments.studies`), not
by `render`.

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

from posteriorjax.report.figures import style
from posteriorjax.report.figures.calibration import coverage_figure, mira_figure, tarp_figure
from posteriorjax.report.figures.curves import (
    calibration_choice_figure,
    curves_figure,
    optimum_figure,
    vshape_figure,
    vshape_points_figure,
)
from posteriorjax.report.figures.fields import FieldLayout, field_layout, moments_figure, samples_figure
from posteriorjax.report.figures.render import render, task_layout
from posteriorjax.report.figures.style import (
    AXIS_BAND,
    COLORBAR,
    DPI,
    HEADERS,
    LEFT,
    MAX_COLUMNS,
    OVERLAY,
    PAD,
    PANEL,
    POSTERIOR_METRICS,
    SPARSE_FRACTION,
    SQUARE,
    TILE,
    TITLE,
    representative_members,
)

__all__ = [
    "AXIS_BAND",
    "COLORBAR",
    "DPI",
    "FieldLayout",
    "HEADERS",
    "LEFT",
    "MAX_COLUMNS",
    "OVERLAY",
    "PAD",
    "PANEL",
    "POSTERIOR_METRICS",
    "SPARSE_FRACTION",
    "SQUARE",
    "TILE",
    "TITLE",
    "calibration_choice_figure",
    "coverage_figure",
    "curves_figure",
    "field_layout",
    "mira_figure",
    "moments_figure",
    "optimum_figure",
    "render",
    "representative_members",
    "samples_figure",
    "style",
    "tarp_figure",
    "task_layout",
    "vshape_figure",
    "vshape_points_figure",
]
