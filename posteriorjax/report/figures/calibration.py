"""Calibration figures over cases: coverage curves, TARP expected coverage, MIRA scores."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from posteriorjax.metrics import calibration
from posteriorjax.report import tables
from posteriorjax.report.figures import style
from posteriorjax.report.figures.style import (
    SQUARE,
    TITLE,
)
from posteriorjax.report.records import (
    TARP_BINS,
    coverage_curves,
    tarp_curves,
)


def _per_sampler_axes(records: Sequence[dict]):
    samplers = sorted({r["sampler"] for r in records})
    nrows, ncols = style.grid_shape(len(samplers))
    fig = style.new(ncols * SQUARE, nrows * SQUARE + TITLE)
    axes = style.panels(fig, nrows, ncols, wgap=0.6, hgap=0.8).ravel()
    for ax in axes[len(samplers) :]:
        ax.set_axis_off()
    return fig, dict(zip(samplers, axes, strict=False))


def _calibration_panels(fig, panels, curves, xlabel, ylabel, title):
    for sampler, ax in panels.items():
        mine = [(k, v) for k, v in curves.items() if k[0] == sampler]
        ax.plot([0, 1], [0, 1], "k--", lw=0.8)
        for i, ((_, hkey), (x, y)) in enumerate(mine):
            ax.plot(x, y, "-", color=f"C{i % 10}", lw=1.2, label=tables.hparam_label(dict(hkey)))
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
    return style.save(fig, path)


def tarp_figure(path, records: Sequence[dict], num_alpha_bins: int = TARP_BINS, *, title=""):
    """TARP expected coverage against credibility level per sampler (`tarp_curves`), diagonal dashed.

    Size: (ncols SQUARE) x (nrows SQUARE + TITLE) inches, one panel per sampler.
    """
    curves = {k: (a, e) for k, (e, a) in tarp_curves(records, num_alpha_bins).items()}
    fig, panels = _per_sampler_axes(records)
    _calibration_panels(fig, panels, curves, "credibility level", "expected coverage", title)
    return style.save(fig, path)


def mira_figure(path, records: Sequence[dict], *, title=""):
    """MIRA score per (task, sampler, hparams) row with the calibration table's band.

    The band is the one `tables.calibration_table` prints, from the same
    function (`tables.calibration_rows`, same bootstrap draws): the grey box
    spans the calibrated mean -+ 2 bootstrap standard errors of the row's score
    (`mira_se_boot`, the MIRA paper's uncertainty), the solid tick is the
    calibrated mean, and the dashed ticks mark -+ 2 single-region standard
    errors sqrt(Var / L) (`mira_se`, wider: drawn for comparison, labelled as
    such). A score outside the grey box is drawn as a filled marker with a
    dagger where the table has one (`tables.mira_flagged`: from
    `tables.MIRA_FLAG_MIN_CONDITIONS` conditions); rows without finite statistics are left out. With
    fewer conditions than `tables.mira_conditions_needed` (the table's "too few
    cases" note), a red note on the panel says so. Size: clip(1.5 + 0.5 rows,
    5, 24) x 4.0 inches.
    """
    sizes: dict[tuple, set] = {}
    for r in records:
        if r["metrics"].get("mira_statistic") is not None:
            sizes.setdefault((r["task"], r["sampler"]), set()).add(int(r["num_samples"]))
    for (_, sampler), n_set in sizes.items():
        if len(n_set) > 1:
            raise ValueError(f"records: one row of {sampler} mixes ensemble sizes {sorted(n_set)}")
    rows = [r for r in tables.calibration_rows(records) if np.isfinite(r["mira"])]
    if not rows:
        raise ValueError("records: no (sampler, hparams) row has finite mira_statistic values")
    rows.sort(key=lambda r: (r["task"], *tables.row_order(r)))
    fig = style.new(min(max(1.5 + 0.5 * len(rows), 5.0), 24.0), 4.0)
    ax = style.panels(fig, 1, 1, left=0.7, bottom=1.4, top=0.35)[0, 0]
    samplers = sorted({r["sampler"] for r in rows})
    several_tasks = len({r["task"] for r in rows}) > 1
    for i, r in enumerate(rows):
        mean, boot, single = r["mira_expected"], 2 * r["mira_se_boot"], 2 * r["mira_se"]
        first = i == 0
        ax.fill_between(
            [i - 0.35, i + 0.35],
            mean - boot,
            mean + boot,
            color="0.85",
            lw=0,
            gid="mira_band",
            label="calibrated mean ± 2 bootstrap se" if first else None,
        )
        ax.plot([i - 0.35, i + 0.35], [mean] * 2, color="0.4", lw=0.8)
        for sign in (-1, 1):
            label = "± 2 single-region se" if first and sign < 0 else None
            ax.plot(
                [i - 0.35, i + 0.35],
                [mean + sign * single] * 2,
                "--",
                color="0.55",
                lw=0.7,
                gid="mira_single_region",
                label=label,
            )
        outside = tables.mira_flagged(r)  # the table's dagger
        color = f"C{samplers.index(r['sampler']) % 10}"
        ax.plot(i, r["mira"], "o", color=color, ms=6, mfc=color if outside else "white", gid="mira_score")
        if outside:
            ax.annotate(
                "†", (i, r["mira"]), xytext=(5, 0), textcoords="offset points", fontsize=8, va="center"
            )
    labels = [
        (f"{r['task']}\n" if several_tasks else "") + f"{r['sampler']}\n{tables.hparam_label(r['hparams'])}"
        for r in rows
    ]
    ax.set_xticks(range(len(rows)), labels, rotation=60, fontsize=6)
    ax.set_xlim(-0.6, len(rows) - 0.4)
    ax.set_ylabel("MIRA score", fontsize=8)
    ax.set_title(title or "MIRA against a calibrated sampler's band", fontsize=9)
    ax.legend(fontsize=6, loc="best")
    little_l = min(r["num_conditions"] for r in rows)
    n = min(r["num_samples"] for r in rows)
    needed = tables.mira_conditions_needed(n)
    if little_l < needed:  # the band cannot resolve the table's shift: say so on the figure
        note = (
            f"too few conditions: L = {little_l} < {needed}, the L needed to resolve a shift of "
            f"{tables.MIRA_RESOLVED_SHIFT} at N = {n}"
        )
        lo, hi = ax.get_ylim()
        ax.set_ylim(lo, hi + 0.12 * (hi - lo))  # headroom: the note never covers a band
        ax.text(
            0.01,
            0.98,
            note,
            transform=ax.transAxes,
            ha="left",
            va="top",
            fontsize=7,
            color="C3",
            gid="too_few",
        )
    return style.save(fig, path)
