"""The analyses of PosteriorBench's studies beyond the main table, from sweep records.

- The V-shape (PosteriorBench Sec. 4.3, Fig. 4): `vshape_points` takes a main-table workdir's
  records and gives one point per (task, sampler, hyperparameter setting) row: the over-case
  mean and standard error of the pointwise relative L2 error against one reference sample
  (`POINTWISE`, the registry's ``rel_l2_one_reference``) and of each posterior metric;
  `vshape_table` writes them, `figures.curves.vshape_points_figure` draws them.
- Guidance calibration across noise levels (Sec. 4.6, Fig. 7, App. D.1): `noise_optima_se`
  takes one sweep per noise level and gives, per (task, sampler, axis) and metric, the optimum
  lambda*_m(sigma) = argmin over the axis of the over-case mean, its across-case standard error
  (bootstrap over cases: the standard deviation of the argmin over case resamples) and the
  metric's mean and standard error at the optimum; `optima_table` writes them with, per metric,
  the Spearman rank correlation of the optimum with 1 / sigma^2 (the claim "the optimum grows
  with the inverse noise variance").
- `study_table`: over-case mean +- standard error per row for a fixed list of metrics (Tables 3
  and 4: the prior-range and training-resolution studies).

Standard errors are std (ddof 1) / sqrt(n) over the cases and seeds of a row.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from scipy import stats

from posteriorjax.metrics import registry
from posteriorjax.report import records as rec
from posteriorjax.report import tables
from posteriorjax.report.figures import curves
from posteriorjax.sweep import store

# the pointwise error of Fig. 4 / Table 3: relative L2 against one reference sample
POINTWISE = "rel_l2_one_reference"
# the five posterior metrics of PosteriorBench (Table 2's columns)
POSTERIOR = registry.POSTERIOR
BOOTSTRAP = 1000


def _values(records: Sequence[dict], metric: str) -> np.ndarray:
    """The metric of each record `(n,)` (NaN where missing or null)."""
    return np.asarray([np.nan if r["metrics"].get(metric) is None else r["metrics"][metric] for r in records])


def mean_se(values) -> tuple[float, float]:
    """(mean, standard error std(ddof 1) / sqrt(n)) of `values`; NaN if any is non-finite, se 0 for n = 1."""
    v = np.asarray(values, np.float64).ravel()
    if v.size == 0 or not np.all(np.isfinite(v)):
        return math.nan, math.nan
    return float(v.mean()), float(v.std(ddof=1) / math.sqrt(v.size)) if v.size > 1 else 0.0


def _require(records: Sequence[dict], metrics: Sequence[str], what: str) -> None:
    present = {k for r in records for k in r["metrics"]}
    missing = [m for m in metrics if m not in present]
    if missing:
        raise ValueError(
            f"records: {what} needs metric(s) {missing}, which no record holds (records scored before the "
            f"metric existed: rerun the sweep into a fresh workdir); present: {sorted(present)}"
        )


def study_rows(records: Sequence[dict], metrics: Sequence[str]) -> list[dict]:
    """One dict per (task, sampler, hparams) row: task, sampler, hparams, count, metric: (mean, se)."""
    if not records:
        raise ValueError("records: expected at least one record, got none")
    _require(records, metrics, "this table")
    rows = []
    for (task, sampler, hparams), recs in _row_groups(records).items():
        row = {"task": task, "sampler": sampler, "hparams": dict(hparams), "count": len(recs)}
        row.update({m: mean_se(_values(recs, m)) for m in metrics})
        rows.append(row)
    return rows


def _row_groups(records: Sequence[dict]) -> dict[tuple, list[dict]]:
    out: dict[tuple, list[dict]] = {}
    for r in records:
        out.setdefault((r["task"], r["sampler"], rec.hparams_key(r["hparams"])), []).append(r)
    return out


def _fmt(pair) -> str:
    mean, se = pair
    return "NaN" if not math.isfinite(mean) else f"{mean:.4f} ± {se:.4f}"


def study_table(rows: Sequence[dict], metrics: Sequence[str]) -> str:
    """A Markdown table: task, sampler, setting, n, then `mean ± se` per metric."""
    head = ["task", "sampler", "setting", "n", *(registry.HEADERS.get(m, m) for m in metrics)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [row["task"], row["sampler"], tables.hparam_label(row["hparams"]) or "—", str(row["count"])]
        lines.append("| " + " | ".join(cells + [_fmt(row[m]) for m in metrics]) + " |")
    return "\n".join(lines)


# ----------------------------------------------------------------------------
# The V-shape (Fig. 4)


def vshape_points(records: Sequence[dict], metrics: Sequence[str] = POSTERIOR, pointwise: str = POINTWISE):
    """One point per main-table row: `study_rows` with the pointwise metric first.

    `pointwise`: ``rel_l2_one_reference`` (the paper's: against one reference sample) or another
    recorded metric, e.g. ``rel_l2_samples`` (against the true field).
    """
    return study_rows(records, [pointwise, *metrics])


def vshape_table(
    points: Sequence[dict], metrics: Sequence[str] = POSTERIOR, pointwise: str = POINTWISE
) -> str:
    """`study_table` of the V-shape points, then per metric the Spearman rank correlation with the
    pointwise error over the points of the low and the high half of the pointwise axis (split at its
    median): a V shows as a negative low-half and a positive high-half correlation."""
    lines = [study_table(points, [pointwise, *metrics]), ""]
    x = np.asarray([p[pointwise][0] for p in points])
    lines += ["| metric | Spearman (low half) | Spearman (high half) | points |", "|---|---|---|---|"]
    for m in metrics:
        y = np.asarray([p[m][0] for p in points])
        ok = np.isfinite(x) & np.isfinite(y)
        xs, ys = x[ok], y[ok]
        low = xs <= np.median(xs) if xs.size else np.zeros(0, bool)
        cells = [_spearman_cell(xs[low], ys[low]), _spearman_cell(xs[~low], ys[~low])]
        lines.append(f"| {registry.HEADERS.get(m, m)} | {cells[0]} | {cells[1]} | {int(ok.sum())} |")
    return "\n".join(lines)


def spearman(x, y) -> float:
    """Spearman rank correlation of `x` and `y` (scipy; ties share ranks); NaN below 3 points or constant."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    if x.size != y.size:
        raise ValueError(f"x, y: expected the same length, got {x.size} and {y.size}")
    if x.size < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return math.nan
    return float(stats.spearmanr(x, y).statistic)


def _spearman_cell(x, y) -> str:
    rho = spearman(x, y)
    return "—" if math.isnan(rho) else f"{rho:+.2f}"


# ----------------------------------------------------------------------------
# Guidance optima across noise levels (Fig. 7)


def _cases(records: Sequence[dict]) -> list:
    return sorted({(r["case"], r.get("seed", 0)) for r in records})


def optimum_se(
    records: Sequence[dict], axis: str, metric: str, *, num_bootstrap: int = BOOTSTRAP, seed: int = 0
) -> dict:
    """The optimum of `axis` for `metric` with its across-case standard error.

    `records`: one (task, sampler) pair in which only `axis` varies. Per axis value the metric is
    averaged over the (case, seed) units; `optimum` = the value of the smallest mean
    (`records.optimal_hparams`: ties to the smaller value, a value with a non-finite record
    ignored). `optimum_se`: the standard deviation of that argmin over `num_bootstrap` resamples of
    the units with replacement (numpy `default_rng(seed)`); `value`, `value_se`: the metric's mean
    and standard error at the optimum. NaN where no value is finite.
    """
    best = rec.optimal_hparams(records, axis, [metric])[metric]
    units = _cases(records)
    grid = sorted({float(np.float32(r["hparams"][axis])) for r in records})
    # table[u, g]: the metric of unit u at axis value g (NaN where missing)
    index = {u: i for i, u in enumerate(units)}
    table = np.full((len(units), len(grid)), np.nan)
    for r in records:
        v = r["metrics"].get(metric)
        table[index[(r["case"], r.get("seed", 0))], grid.index(float(np.float32(r["hparams"][axis])))] = (
            np.nan if v is None else v
        )
    out = {
        "optimum": best,
        "optimum_se": math.nan,
        "value": math.nan,
        "value_se": math.nan,
        "count": len(units),
    }
    if not math.isfinite(best):
        return out
    out["value"], out["value_se"] = mean_se(table[:, grid.index(float(np.float32(best)))])
    usable = np.all(np.isfinite(table), axis=0)
    if len(units) > 1 and usable.any():
        rng = np.random.default_rng(seed)
        idx = rng.integers(0, len(units), size=(int(num_bootstrap), len(units)))
        means = np.where(usable, table[idx].mean(axis=1), np.inf)  # (B, G)
        picks = np.asarray(grid)[np.argmin(means, axis=1)]  # argmin: first (smallest) value on ties
        out["optimum_se"] = float(picks.std(ddof=1))
    return out


def noise_optima_se(
    sources: Sequence[tuple[str, list[dict], Mapping]], metrics: Sequence[str] = POSTERIOR, **kwargs
) -> dict[tuple, dict[float, dict[str, dict]]]:
    """`{(base task, sampler, axis, others): {sigma: {metric: optimum_se(...)}}}`, one sweep per noise level.

    `sources`: `(name, records, config)` per workdir; each task entry's noise level is
    `records.noise_level` (the config's `noise_std`), its base task `records.base_task`; `others`
    is the setting of the other hyperparameters (`records.axis_split`). Keys with fewer than two
    noise levels, and hyperparameters that do not vary, are left out; two
    entries of one base task at one level are an error (`records.noise_optima`'s rule).
    """
    rec.noise_optima(sources)  # validates the levels (same checks, same errors)
    by_level: dict[tuple, dict[float, list[dict]]] = {}
    for _, records, config in sources:
        for (label,), recs in sorted(rec.group(records, "task").items()):
            sigma = rec.noise_level(label, config)
            if sigma is None:
                continue
            for (sampler,), srecs in rec.group(recs, "sampler").items():
                for axis in rec.varying_axes(srecs):
                    for others, sub in rec.axis_split(srecs, axis).items():
                        if axis in rec.varying_axes(sub):
                            key = (rec.base_task(label), sampler, axis, others)
                            by_level.setdefault(key, {})[sigma] = sub
    out = {}
    for key, levels in sorted(by_level.items()):
        if len(levels) < 2:
            continue
        present = rec.scalar_metrics([r for rs in levels.values() for r in rs], metrics)
        out[key] = {
            sigma: {m: optimum_se(recs, key[2], m, **kwargs) for m in present}
            for sigma, recs in sorted(levels.items())
        }
    return out


def optima_table(optima: Mapping[float, Mapping[str, dict]], axis: str = "guidance") -> str:
    """Markdown: one row per noise level sigma (1 / sigma^2 beside it), per metric `optimum ± se`;
    a last row with each metric's Spearman correlation of the optimum with 1 / sigma^2."""
    sigmas = sorted(optima)
    metrics = list(dict.fromkeys(m for s in sigmas for m in optima[s]))
    head = ["sigma", "1/sigma^2", *(f"{registry.HEADERS.get(m, m)}: {axis}*" for m in metrics)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in sigmas:
        cells = [f"{s:g}", f"{1 / s**2:.3g}"]
        for m in metrics:
            o = optima[s].get(m)
            cells.append("—" if o is None or not math.isfinite(o["optimum"]) else _optimum_cell(o))
        lines.append("| " + " | ".join(cells) + " |")
    trend = []
    for m in metrics:
        pts = [(1 / s**2, optima[s][m]["optimum"]) for s in sigmas if m in optima[s]]
        trend.append(_spearman_cell(*zip(*pts, strict=True)) if pts else "—")
    lines.append("| Spearman vs 1/sigma^2 | | " + " | ".join(trend) + " |")
    return "\n".join(lines)


def _optimum_cell(o: Mapping) -> str:
    se = "" if not math.isfinite(o["optimum_se"]) else f" ± {o['optimum_se']:.3g}"
    return f"{o['optimum']:g}{se}"


# ----------------------------------------------------------------------------
# One report per study


# {study: (what it reads, the metrics of its table)}; "sweeps": every subfolder holding a
# results.jsonl (one sweep per noise level), "workdir": one sweep workdir
STUDIES: dict[str, tuple[str, tuple[str, ...]]] = {
    "pointwise_vs_distributional": ("workdir", (POINTWISE, *POSTERIOR)),  # a main-table workdir
    "guidance_calibration": ("sweeps", POSTERIOR),
    "noise_levels": ("sweeps", POSTERIOR),
    "ood_prior_range": ("workdir", (POINTWISE, *POSTERIOR)),  # Table 3's columns
    "resolution": ("workdir", POSTERIOR),  # Table 4's columns
}


def sweep_dirs(root) -> list[Path]:
    """The sweep workdirs under `root` (its subfolders holding a results.jsonl), sorted by name."""
    root = Path(root)
    dirs = sorted(p.parent for p in root.glob("*/results.jsonl"))
    if not dirs:
        raise FileNotFoundError(
            f"workdir: expected subfolders of {root} holding results.jsonl (one sweep each)"
        )
    return dirs


def _verified(workdir: Path) -> tuple[list[dict], dict]:
    problems = store.verify_workdir(workdir)
    if problems:
        raise ValueError(
            f"workdir: {workdir} fails verification ({len(problems)} problem(s)):\n  " + "\n  ".join(problems)
        )
    records, config = rec.read_workdir(workdir)
    if not records:
        raise FileNotFoundError(f"workdir: {workdir} holds no records (run its sweep first)")
    return records, config


def parts_records(workdirs: Sequence) -> tuple[list[dict], list[str]]:
    """The records of a main table run in parts (one workdir per part, each verified): a (task,
    sampler, hparams) row comes from the first workdir that holds it, and a part's copy of a row
    already read (e.g. the ``prior`` row every part runs) is left out with a note saying so."""
    if not workdirs:
        raise ValueError("workdir: expected at least one main-table workdir, got none")
    records: list[dict] = []
    notes: list[str] = []
    owner: dict[tuple, Path] = {}
    for workdir in map(Path, workdirs):
        for key, recs in _row_groups(_verified(workdir)[0]).items():
            if key in owner:
                task, sampler, hparams = key
                label = tables.hparam_label(dict(hparams)) or "-"
                notes.append(f"{task} / {sampler} ({label}): also in {workdir}, taken from {owner[key]}")
                continue
            owner[key] = workdir
            records += recs
    return records, notes


def report(study: str, workdir, out=None, *, pointwise: str = POINTWISE) -> tuple[str, list[Path]]:
    """The table (Markdown) and figures of `study` from its workdir(s); both written under `out`.

    ``pointwise_vs_distributional``: `workdir` is a main-table workdir, or a sequence of them (a
    table run in parts: `parts_records`; `out` defaults to the first); the V-shape points
    (`vshape_points`, `pointwise` on x), their table and `vshape.png`. ``guidance_calibration``,
    ``noise_levels``: `workdir` holds one sweep per noise level (`sweep_dirs`); per (task,
    sampler, axis) the optima table (`noise_optima_se`, `optima_table`) and
    `optimum_<task>_<sampler>_<axis>.png`. ``ood_prior_range``, ``resolution``: `study_table` of
    the workdir with the paper's columns (`STUDIES`). `out` defaults to `workdir`; the Markdown
    goes to `<out>/<study>.md`. Nothing is recomputed.
    """
    if study not in STUDIES:
        raise ValueError(f"study: expected one of {sorted(STUDIES)}, got {study!r}")
    workdirs = [Path(w) for w in ([workdir] if isinstance(workdir, str | Path) else workdir)]
    if study != "pointwise_vs_distributional" and len(workdirs) != 1:
        raise ValueError(f"workdir: {study} reads one workdir, got {len(workdirs)}: {workdirs}")
    workdir = workdirs[0]
    out = workdir if out is None else Path(out)
    out.mkdir(parents=True, exist_ok=True)
    kind, metrics = STUDIES[study]
    paths: list[Path] = []
    if kind == "sweeps":
        sources = [(str(d), *_verified(d)) for d in sweep_dirs(workdir)]
        optima = noise_optima_se(sources, metrics)
        if not optima:
            raise ValueError(
                f"workdir: the sweeps under {workdir} hold no sampler whose hyperparameter varies at two or "
                "more noise levels (each sweep's config must set its task's noise_std)"
            )
        parts = [f"# {study}: optimal hyperparameter per metric and noise level", ""]
        for (task, sampler, axis, others), levels in optima.items():
            setting = tables.hparam_label(dict(others))
            parts += [f"## {task} / {sampler}: optimal {axis}" + (f" ({setting})" if others else ""), ""]
            parts += [optima_table(levels, axis), ""]
            name = "_".join(["optimum", task, sampler, axis, *(f"{k}={v:g}" for k, v in others)])
            values = {s: {m: o["optimum"] for m, o in per.items()} for s, per in levels.items()}
            title = f"{task} / {sampler}: optimal {axis} per metric"
            paths.append(curves.optimum_figure(out / f"{name}.png", values, axis=axis, title=title))
        parts.append(
            "optimum = argmin of the over-case mean; ± its bootstrap standard error over cases "
            f"({BOOTSTRAP} resamples); the last row: Spearman rank correlation of the optimum with 1/sigma^2."
        )
    else:
        if study == "pointwise_vs_distributional":
            records, notes = parts_records(workdirs)
            metrics = (pointwise, *POSTERIOR)
            points = vshape_points(records, POSTERIOR, pointwise)
            title = f"pointwise ({registry.HEADERS.get(pointwise, pointwise)}) vs posterior metrics"
            paths.append(
                curves.vshape_points_figure(out / "vshape.png", points, pointwise=pointwise, title=title)
            )
            parts = [
                f"# {study}: one point per main-table row",
                "",
                vshape_table(points, POSTERIOR, pointwise),
            ]
            if len(workdirs) > 1:
                parts += ["", "Read from " + ", ".join(map(str, workdirs)) + "."]
                parts += [f"- {note}" for note in notes]
        else:
            records, _ = _verified(workdir)
            parts = [f"# {study}", "", study_table(study_rows(records, metrics), metrics)]
        parts += ["", "mean ± standard error (std / sqrt(n)) over the n cases and seeds of each row."]
    text = "\n".join(parts) + "\n"
    (out / f"{study}.md").write_text(text)
    return text, paths
