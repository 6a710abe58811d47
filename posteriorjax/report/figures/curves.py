"""Metric curves over a hyperparameter axis, optima over noise levels, and V-shape panels."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from posteriorjax.report import tables
from posteriorjax.report.figures import style
from posteriorjax.report.figures.style import (
    HEADERS,
    PANEL,
    POSTERIOR_METRICS,
    TITLE,
)
from posteriorjax.report.records import (
    LOWER_IS_BETTER,
    axis_split,
    hparams_key,
    optimal_hparams,
    scalar_metrics,
)


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
    nrows, ncols = style.grid_shape(len(metrics))
    fig = style.new(ncols * PANEL[0], nrows * PANEL[1] + TITLE)
    axes = style.panels(fig, nrows, ncols).ravel()
    all_values = np.unique([float(np.float32(r["hparams"][axis])) for r in records])
    _, scale, zero = style.positions(all_values)
    for ax, m in zip(axes, metrics, strict=False):
        for i, (others, recs) in enumerate(split.items()):
            rows = sorted(tables.aggregate(recs, [m]), key=lambda row: row["hparams"][axis])
            v = np.asarray([row["hparams"][axis] for row in rows], np.float64)
            mean = np.asarray([row[m][0] for row in rows])
            std = np.asarray([row[m][1] for row in rows])
            xpos = np.where(v == 0, zero, v) if zero is not None else v
            color = f"C{i % 10}"
            label = tables.hparam_label(dict(others)) if len(split) > 1 else None
            ax.plot(xpos, mean, "o-", color=color, ms=3, lw=1.2, label=label)
            ax.fill_between(xpos, mean - std, mean + std, color=color, alpha=0.2, lw=0)
            bad = ~np.isfinite(mean)
            if bad.any():  # rows with a non-finite record: an x at the bottom edge
                ax.plot(
                    xpos[bad],
                    np.full(bad.sum(), 0.04),
                    "x",
                    color=color,
                    ms=6,
                    mew=1.5,
                    transform=ax.get_xaxis_transform(),
                    clip_on=False,
                )
            best = optimal_hparams(recs, axis, [m])[m]
            if math.isfinite(best):
                j = int(np.argmin(np.abs(v - best)))
                ax.plot(xpos[j], mean[j], "*", color=color, ms=13, mec="k", mew=0.6, zorder=5)
                if len(split) == 1:
                    ax.set_title(f"{HEADERS.get(m, m)}  (opt {axis}={best:g})", fontsize=8)
        if len(split) > 1:
            ax.set_title(HEADERS.get(m, m), fontsize=8)
        shown = np.where(all_values == 0, zero or 0.0, all_values)
        style.set_axis(ax, "x", scale, zero, shown)
        if scale == "log":
            ax.set_xlim(shown.min() / 1.5, shown.max() * 1.5)
        elif shown.max() > shown.min():
            pad = 0.05 * (shown.max() - shown.min())
            ax.set_xlim(shown.min() - pad, shown.max() + pad)
        means = [row[m][0] for recs in split.values() for row in tables.aggregate(recs, [m])]
        style.log_if_decades(ax, "y", means)
        ax.set_xlabel(axis, fontsize=8)
        ax.set_ylabel(HEADERS.get(m, m), fontsize=8)
        ax.tick_params(labelsize=7)
    if len(split) > 1:
        axes[0].legend(fontsize=6)
    for ax in axes[len(metrics) :]:
        ax.set_axis_off()
    fig.suptitle(title, fontsize=9)
    return style.save(fig, path)


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
    fig = style.new(5.0, 3.6)
    ax = style.panels(fig, 1, 1, left=0.8, top=0.35)[0, 0]
    inv = 1.0 / sigmas**2
    table = np.asarray([[optima[s].get(m, math.nan) for s in sigmas] for m in metrics], np.float64)
    finite = table[np.isfinite(table)]
    _, scale, zero = style.positions(finite)
    for i, m in enumerate(metrics):
        y = table[i] if zero is None else np.where(table[i] == 0, zero, table[i])
        # markers and dashes vary too: metrics often share an optimum, and their lines coincide
        marks = dict(marker="osd^v<>ph*"[i % 10], ls=("-", "--", ":", "-.")[i % 4], ms=5 - 0.3 * (i % 4))
        ax.plot(inv, y, color=f"C{i % 10}", lw=1.2, label=HEADERS.get(m, m), **marks)
    ax.set_xscale("log")
    style.set_axis(ax, "y", scale, zero, finite if zero is None else np.where(finite == 0, zero, finite))
    ax.set_xlabel(r"$1/\sigma^2$")
    ax.set_ylabel(f"optimal {axis}")
    ax.legend(fontsize=6, ncols=2)
    ax.set_title(title, fontsize=9)
    return style.save(fig, path)


def vshape_figure(
    path, records: Sequence[dict], metrics=POSTERIOR_METRICS, *, pointwise="rel_l2_mean", title=""
):
    """Pointwise error against each posterior metric, one point per (sampler, hparams) row.

    Over-case means (`tables.aggregate`); points of one sampler are joined in
    the order of its hyperparameter values; an axis is logarithmic where its values
    span a decade (one outlier would otherwise flatten the rest). Size: (ncols PANEL[0]) x
    (nrows PANEL[1] + TITLE) inches, one panel per metric present.
    """
    metrics = scalar_metrics(records, metrics)
    if not metrics:
        raise ValueError("metrics: none of the posterior metrics is present in the records")
    rows = tables.aggregate(records, [pointwise, *metrics])
    samplers = sorted({row["sampler"] for row in rows})
    nrows, ncols = style.grid_shape(len(metrics))
    fig = style.new(ncols * PANEL[0], nrows * PANEL[1] + TITLE)
    axes = style.panels(fig, nrows, ncols).ravel()
    for ax, m in zip(axes, metrics, strict=False):
        for i, s in enumerate(samplers):
            mine = sorted(
                (row for row in rows if row["sampler"] == s), key=lambda row: hparams_key(row["hparams"])
            )
            px = np.asarray([row[pointwise][0] for row in mine])
            py = np.asarray([row[m][0] for row in mine])
            ok = np.isfinite(px) & np.isfinite(py)
            ax.plot(px[ok], py[ok], "o-", color=f"C{i % 10}", ms=4, lw=0.8, label=s)
        style.log_if_decades(ax, "x", [row[pointwise][0] for row in rows])
        style.log_if_decades(ax, "y", [row[m][0] for row in rows])
        ax.set_xlabel(HEADERS.get(pointwise, pointwise), fontsize=8)
        ax.set_ylabel(HEADERS.get(m, m), fontsize=8)
        ax.tick_params(labelsize=7)
    axes[0].legend(fontsize=6)
    for ax in axes[len(metrics) :]:
        ax.set_axis_off()
    fig.suptitle(title, fontsize=9)
    return style.save(fig, path)


def calibration_choice_figure(path, result: Mapping):
    """A calibration stage's choice (`sweep.calibrate`): each posterior metric's validation curve
    over the calibrated hyperparameter, then the rule's score, the chosen value dashed.

    `result`: a `calibration/<task>/<label>.json`. Every panel spans the whole grid on one x axis
    (logarithmic when the grid is >= 0 with a positive value, as `curves_figure`; a 0 at the left
    edge); y is logarithmic where a curve's finite values span a decade (a diverged value then
    leaves the rest readable); an x on the bottom edge marks a grid value whose mean is non-finite.
    Size: (ncols PANEL[0]) x (nrows PANEL[1] + TITLE) inches, one panel per metric and one for the
    score, at most MAX_COLUMNS columns.
    """
    grid = np.asarray(result["values"], np.float64)
    names = [m for m in POSTERIOR_METRICS if m in result["curve"]]
    curves = [*(result["curve"][m] for m in names), result["score"]]
    titles = [*(HEADERS.get(m, m) for m in names), f"score ({result['rule']})"]
    nrows, ncols = style.grid_shape(len(curves))
    fig = style.new(ncols * PANEL[0], nrows * PANEL[1] + TITLE)
    axes = style.panels(fig, nrows, ncols).ravel()
    xpos, scale, zero = style.positions(grid)
    chosen = float(result["chosen"])
    for ax, y, name in zip(axes, curves, titles, strict=False):
        y = np.asarray(y, np.float64)
        ax.plot(xpos, y, "o-", ms=3, lw=1.2)
        bad = ~np.isfinite(y)
        if bad.any():
            ax.plot(
                xpos[bad],
                np.full(bad.sum(), 0.04),
                "x",
                color="C3",
                ms=6,
                mew=1.5,
                transform=ax.get_xaxis_transform(),
                clip_on=False,
            )
        ax.axvline(zero if chosen == 0 and zero is not None else chosen, color="k", ls="--", lw=0.8)
        style.set_axis(ax, "x", scale, zero, xpos)
        if scale == "log":
            ax.set_xlim(xpos.min() / 1.5, xpos.max() * 1.5)
        style.log_if_decades(ax, "y", y)
        ax.set_title(name, fontsize=8)
        ax.set_xlabel(result["hparam"], fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in axes[len(curves) :]:
        ax.set_axis_off()
    fig.suptitle(
        f"{result['task']} / {result['sampler']}: chosen {result['hparam']} = {result['chosen']:g}",
        fontsize=9,
    )
    return style.save(fig, path)


def vshape_points_figure(
    path, points: Sequence[Mapping], metrics=POSTERIOR_METRICS, *, pointwise: str, title=""
):
    """The paper's V-shape (PosteriorBench Fig. 4): one point per (task, sampler) row of a main table.

    `points`: `report.studies.vshape_points` (per row the over-case mean and standard error of
    `pointwise` and of each metric). One panel per metric: the pointwise error (x) against the
    metric (y), colour per sampler, marker per task, standard errors as bars; no lines (points of
    different tasks are not a curve). An axis is logarithmic where its values span a decade.
    Size: (ncols PANEL[0]) x (nrows PANEL[1] + TITLE) inches, one panel per metric present.
    """
    metrics = [m for m in metrics if any(math.isfinite(p[m][0]) for p in points if m in p)]
    if not metrics:
        raise ValueError("metrics: none of the posterior metrics is finite in the points")
    samplers = sorted({p["sampler"] for p in points})
    tasks = sorted({p["task"] for p in points})
    nrows, ncols = style.grid_shape(len(metrics))
    fig = style.new(ncols * PANEL[0], nrows * PANEL[1] + TITLE)
    axes = style.panels(fig, nrows, ncols).ravel()
    for ax, m in zip(axes, metrics, strict=False):
        for p in points:
            (x, dx), (y, dy) = p[pointwise], p[m]
            if not (math.isfinite(x) and math.isfinite(y)):
                continue
            color = f"C{samplers.index(p['sampler']) % 10}"
            marker = "osD^v<>ph*"[tasks.index(p["task"]) % 10]
            ax.errorbar(x, y, xerr=dx, yerr=dy, fmt=marker, color=color, ms=5, lw=0.8, capsize=2)
        style.log_if_decades(ax, "x", [p[pointwise][0] for p in points])
        style.log_if_decades(ax, "y", [p[m][0] for p in points])
        ax.set_xlabel(HEADERS.get(pointwise, pointwise), fontsize=8)
        ax.set_ylabel(HEADERS.get(m, m), fontsize=8)
        ax.tick_params(labelsize=7)
    handles = [axes[0].plot([], [], "o", color=f"C{i % 10}", label=s)[0] for i, s in enumerate(samplers)]
    handles += [
        axes[0].plot([], [], "osD^v<>ph*"[i % 10], color="0.4", label=t)[0] for i, t in enumerate(tasks)
    ]
    axes[0].legend(handles=handles, fontsize=6)
    for ax in axes[len(metrics) :]:
        ax.set_axis_off()
    fig.suptitle(title, fontsize=9)
    return style.save(fig, path)
