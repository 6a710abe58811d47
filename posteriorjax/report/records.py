"""Sweep records -> analysis: grouping, hyperparameter optima, noise levels and calibration curves.

A record is one configuration of a sweep (see `sweep.run_pair`): task,
sampler, case, seed, hyperparameters and a dict of metrics; a workdir stores
them in `results.jsonl` beside its `config.json` (`load_records`,
`read_workdir`). This module turns records into the numbers the figures draw
(`figures`); the tables are `results`.

- Grouping: `group` by record fields, `row_groups` per (sampler,
  `hparams_key`) row, `axis_split` per setting of every hyperparameter but
  one, `varying_axes` (the hyperparameters that take at least two values).
- Optima: `optimal_hparams` (the metric-specific best value of one
  hyperparameter) and `noise_optima` (those optima per noise level of a base
  task, pooled over workdirs; levels by `noise_level`, base by `base_task`).
- Calibration per row: `coverage_curves` (central-interval coverage),
  `tarp_curves` (TARP expected coverage, `tarp_curve`) and `mira_scores`
  (MIRA score with its calibrated band).

Records with non-finite samples carry null metrics; they make their
(task, sampler, hparams) row NaN (as in `results.aggregate`), and NaN rows are
left out of every curve, optimum and score instead of being averaged.
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from posteriorjax.metrics import calibration, mira, registry
from posteriorjax.report import tables
from posteriorjax.sweep.store import hparams_key, read_records

# lower-is-better metrics of the curves and optima: the main table's columns and the other scores
LOWER_IS_BETTER: tuple[str, ...] = registry.RANKED
TARP_BINS = 20
_NOISE_LABEL = re.compile(r"^(?P<base>[^@]+)@noise=(?P<value>[^@]+)$")


# ----------------------------------------------------------------------------
# Reading


def load_records(path: str | Path) -> list:
    """The records of a `results.jsonl` file (`sweep.store.read_records`: the one reader)."""
    return read_records(path)


def read_workdir(workdir: str | Path) -> tuple[list[dict], dict]:
    """(records, config) of a sweep workdir: `results.jsonl` and `config.json`, each empty when missing."""
    workdir = Path(workdir)
    config_path, results_path = workdir / "config.json", workdir / "results.jsonl"
    config = json.loads(config_path.read_text()) if config_path.exists() else {}
    return (load_records(results_path) if results_path.exists() else []), config


# ----------------------------------------------------------------------------
# Grouping


def group(records: Sequence[dict], *fields: str) -> dict[tuple, list[dict]]:
    """Records per tuple of the values of `fields` (e.g. `group(records, "task")`), in first-seen order."""
    out: dict[tuple, list[dict]] = defaultdict(list)
    for r in records:
        out[tuple(r[f] for f in fields)].append(r)
    return dict(out)


def row_groups(records: Sequence[dict]) -> dict[tuple, list[dict]]:
    """Records per (sampler, `hparams_key`) row, in first-seen order."""
    out: dict[tuple, list[dict]] = {}
    for r in records:
        out.setdefault((r["sampler"], hparams_key(r["hparams"])), []).append(r)
    return out


def scalar_metrics(records: Sequence[dict], candidates: Sequence[str]) -> list[str]:
    """The `candidates` that some record holds as a scalar metric, in the order of `candidates`."""
    present = {k for r in records for k, v in r["metrics"].items() if not isinstance(v, list)}
    return [m for m in candidates if m in present]


def axis_split(records: Sequence[dict], axis: str) -> dict[tuple, list[dict]]:
    """Records split by the values of every hyperparameter except `axis` (keys: `hparams_key` without it)."""
    out: dict[tuple, list[dict]] = {}
    for r in records:
        if axis not in r["hparams"]:
            raise ValueError(
                f"records: expected hyperparameter {axis!r} in every record, got {sorted(r['hparams'])}"
            )
        out.setdefault(tuple(kv for kv in hparams_key(r["hparams"]) if kv[0] != axis), []).append(r)
    return out


def varying_axes(records: Sequence[dict]) -> list[str]:
    """Hyperparameters that take at least two values among `records`."""
    values: dict[str, set] = defaultdict(set)
    for r in records:
        for k, v in r["hparams"].items():
            values[k].add(float(np.float32(v)))
    return sorted(k for k, v in values.items() if len(v) > 1)


# ----------------------------------------------------------------------------
# Hyperparameter optima and noise levels


def optimal_hparams(records: Sequence[dict], axis: str, metrics: Sequence[str] | None = None) -> dict:
    """Metric-specific optimum of hyperparameter `axis`: `{metric: value}`.

    `records` are one (task, sampler) pair with only `axis` varying. For every
    value of `axis` the metric is averaged over its records (cases and seeds);
    a value with any non-finite record is NaN and ignored, as in
    `results.aggregate`. The optimum is the value of smallest mean (every metric
    here is lower-is-better); ties go to the smallest value; a metric with no
    finite mean maps to NaN. `metrics` defaults to the `LOWER_IS_BETTER`
    metrics present in the records.
    """
    if not records:
        raise ValueError("records: expected at least one record, got none")
    pairs = {(r["task"], r["sampler"]) for r in records}
    if len(pairs) > 1:
        raise ValueError(f"records: expected one (task, sampler) pair, got {sorted(pairs)}")
    split = axis_split(records, axis)
    if len(split) > 1:
        raise ValueError(
            f"records: expected only {axis!r} to vary, but other hyperparameters take {len(split)} "
            f"settings: {[dict(k) for k in split]}; select one setting first"
        )
    metrics = scalar_metrics(records, LOWER_IS_BETTER) if metrics is None else list(metrics)
    rows = tables.aggregate(records, metrics)
    out = {}
    for m in metrics:
        finite = [(row[m][0], float(row["hparams"][axis])) for row in rows if math.isfinite(row[m][0])]
        out[m] = min(finite)[1] if finite else math.nan
    return out


def noise_level(label: str, config: Mapping | None = None) -> float | None:
    """Observation noise std of the task entry `label`, or None when the workdir does not say.

    Rule: `config["tasks"][label]["noise_std"]` when the sweep config sets it for
    that entry; otherwise the value of a label of the form `<task>@noise=<value>`;
    otherwise None (the registry default, not recorded).
    """
    entry = ((config or {}).get("tasks") or {}).get(label) or {}
    if "noise_std" in entry:
        return float(entry["noise_std"])
    match = _NOISE_LABEL.match(label)
    if match is None:
        return None
    try:
        return float(match["value"])
    except ValueError as err:
        raise ValueError(
            f"task label {label!r}: expected <task>@noise=<float>, got {match['value']!r}"
        ) from err


def base_task(label: str) -> str:
    """The task a label names: the part before `@` (`poisson@noise=1e-3` -> `poisson`)."""
    return label.split("@", 1)[0]


def noise_optima(sources: Sequence[tuple[str, list[dict], Mapping]]) -> dict[tuple, dict[float, dict]]:
    """`{(base, sampler, axis, others): {sigma: optima}}` from `(name, records, config)` sources.

    Every task entry of every source with a `noise_level` joins its `base_task`;
    two entries of one base task at the same level are an error. Per base task
    with at least two levels, sampler, varying hyperparameter `axis` and setting
    `others` of the remaining ones (`axis_split`), `optima` is `optimal_hparams`
    at noise std `sigma`. Only keys with at least two noise levels are kept.
    """
    by_base: dict[str, dict[float, tuple[str, list[dict]]]] = defaultdict(dict)
    for name, records, config in sources:
        for (label,), recs in sorted(group(records, "task").items()):
            sigma = noise_level(label, config)
            if sigma is None:
                continue
            base = base_task(label)
            if sigma in by_base[base]:
                raise ValueError(
                    f"task {by_base[base][sigma][0]} and task {label!r} in {name}: "
                    f"same base task {base!r} and noise level {sigma}"
                )
            by_base[base][sigma] = (f"{label!r} in {name}", recs)
    table: dict[tuple, dict[float, dict]] = defaultdict(dict)
    for base, levels in sorted(by_base.items()):
        if len(levels) < 2:
            continue
        for sigma, (_, recs) in levels.items():
            for (sampler,), srecs in group(recs, "sampler").items():
                for axis in varying_axes(srecs):
                    for others, sub in axis_split(srecs, axis).items():
                        if axis in varying_axes(sub):
                            table[(base, sampler, axis, others)][sigma] = optimal_hparams(sub, axis)
    return {k: v for k, v in sorted(table.items()) if len(v) >= 2}


# ----------------------------------------------------------------------------
# Calibration per row


def tarp_curve(credibilities, num_alpha_bins: int = TARP_BINS) -> tuple[np.ndarray, np.ndarray]:
    """TARP expected coverage `(ecp, alpha)`, each `(num_alpha_bins + 1,)`, from credibilities `(L,)`.

    `calibration.expected_coverage` on a fixed [0, 1] grid: ecp_k is the
    fraction of credibilities f < alpha_k, and 1 at alpha = 1.
    """
    f = np.asarray(credibilities, np.float64).ravel()
    if f.size == 0 or not np.all(np.isfinite(f)) or np.any((f < 0) | (f > 1)):
        raise ValueError(f"credibilities: expected finite values in [0, 1], got {f}")
    if int(num_alpha_bins) < 1:
        raise ValueError(f"num_alpha_bins: expected >= 1, got {num_alpha_bins}")
    ecp, alpha = calibration.expected_coverage(jnp.asarray(f, jnp.float32), int(num_alpha_bins))
    return np.asarray(ecp, np.float64), np.asarray(alpha, np.float64)


def _finite_list(records: Sequence[dict], metric: str) -> np.ndarray | None:
    vals = [r["metrics"].get(metric) for r in records]
    if any(v is None for v in vals):
        return None
    arr = np.asarray(vals, np.float64)
    return arr if np.all(np.isfinite(arr)) else None


def coverage_curves(records: Sequence[dict], levels: Sequence[float] = calibration.DEFAULT_LEVELS) -> dict:
    """Mean empirical coverage `(K,)` over the records of each (sampler, hparams) row.

    Returns `{(sampler, hparams key): (K,)}`; rows with a null or non-finite
    coverage in any record are left out.
    """
    out = {}
    for key, recs in row_groups(records).items():
        cov = _finite_list(recs, "coverage")
        if cov is None:
            continue
        if cov.shape[1] != len(levels):
            raise ValueError(
                f"records: coverage of {key[0]} has {cov.shape[1]} levels, expected {len(levels)} (levels)"
            )
        out[key] = cov.mean(axis=0)
    return out


def tarp_curves(records: Sequence[dict], num_alpha_bins: int = TARP_BINS) -> dict:
    """`{(sampler, hparams key): (ecp, alpha)}` from the rows' per-case `tarp_credibility`."""
    out = {}
    for key, recs in row_groups(records).items():
        f = _finite_list(recs, "tarp_credibility")
        if f is not None:
            out[key] = tarp_curve(f, num_alpha_bins)
    return out


def mira_scores(records: Sequence[dict]) -> dict:
    """`{(sampler, hparams key): dict}` of MIRA scores and their calibrated band per row.

    score: mean of the per-case `mira_statistic` over the row's L records;
    expected: calibrated mean of `mira.expected_moments(N - 1)` (N the
    ensemble size); low/high: expected -+ 2 sqrt(var / L).
    """
    out = {}
    for key, recs in row_groups(records).items():
        s = _finite_list(recs, "mira_statistic")
        if s is None:
            continue
        sizes = {int(r["num_samples"]) for r in recs}
        if len(sizes) > 1:
            raise ValueError(f"records: one row of {key[0]} mixes ensemble sizes {sorted(sizes)}")
        mean, var = mira.expected_moments(sizes.pop() - 1)
        half = 2.0 * math.sqrt(var / s.size)
        out[key] = {
            "score": float(s.mean()),
            "expected": mean,
            "low": mean - half,
            "high": mean + half,
            "count": s.size,
        }
    return out
