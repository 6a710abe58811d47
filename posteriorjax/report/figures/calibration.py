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
    mira_scores,
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
    """MIRA score per (sampler, hparams) row with its calibrated band (`mira_scores`).

    The grey box spans expected -+ 2 std / sqrt(L), the tick is the calibrated
    mean; rows without finite statistics are left out. With fewer conditions than
    `tables.mira_conditions_needed` (the calibration table's "too few cases" note), a
    red note on the panel says so. Size:
    clip(1.5 + 0.5 rows, 5, 24) x 4.0 inches.
    """
    scores = mira_scores(records)
    if not scores:
        raise ValueError("records: no (sampler, hparams) row has finite mira_statistic values")
    keys = sorted(scores)
    fig = style.new(min(max(1.5 + 0.5 * len(keys), 5.0), 24.0), 4.0)
    ax = style.panels(fig, 1, 1, left=0.7, bottom=1.4, top=0.35)[0, 0]
    samplers = sorted({k[0] for k in keys})
    for i, k in enumerate(keys):
        s = scores[k]
        ax.fill_between([i - 0.35, i + 0.35], s["low"], s["high"], color="0.85", lw=0)
        ax.plot([i - 0.35, i + 0.35], [s["expected"]] * 2, color="0.4", lw=0.8)
        ax.plot(i, s["score"], "o", color=f"C{samplers.index(k[0]) % 10}", ms=6)
    ax.set_xticks(
        range(len(keys)),
        [f"{k[0]}\n{tables.hparam_label(dict(k[1]))}" for k in keys],
        rotation=60,
        fontsize=6,
    )
    ax.set_xlim(-0.6, len(keys) - 0.4)
    ax.set_ylabel("MIRA score", fontsize=8)
    ax.set_title(title or "MIRA (grey: calibrated mean +- 2 std / sqrt(L))", fontsize=9)
    little_l = min(s["count"] for s in scores.values())
    n = min(int(r["num_samples"]) for r in records if r["metrics"].get("mira_statistic") is not None)
    needed = tables.mira_conditions_needed(n)
    if little_l < needed:  # the band cannot resolve the table's shift: say so on the figure
        note = (f"too few conditions: L = {little_l} < {needed}, the L a shift of "
                f"{tables.MIRA_RESOLVED_SHIFT} needs at N = {n}")  # fmt: skip
        lo, hi = ax.get_ylim()
        ax.set_ylim(lo, hi + 0.12 * (hi - lo))  # headroom: the note never covers a band
        ax.text(0.01, 0.98, note, transform=ax.transAxes, ha="left", va="top", fontsize=7, color="C3",
                gid="too_few")  # fmt: skip
    return style.save(fig, path)
