"""Read a study's outputs: the files of a finished sweep workdir, from Python.

    python docs/tutorials/read_outputs.py --workdir=/tmp/posteriorjax-quickstart

Any finished sweep works (the quickstart's, or the workdir of the "add a sampler" tutorial).
A workdir holds

* `config.json` (the study as run; its SHA-256 is every record's `config_hash`),
  `provenance.json` (versions, machine, plugins),
* `results.jsonl` (one verified record per configuration: task, sampler, case, seed,
  hyperparameters, metrics, counts and times) and `results.csv` (the same, flat),
* `summary.md` (the tables), `calibration.json` (coverage, TARP and MIRA per row),
  `references.json` (each task's reference: method, eps, acceptance, ESS per case),
* `samples/<task>/<label>.npz` (stored samples of the first cases, with a `.sha256` beside
  them), `references/<task>/` (the reference posterior), `figures/*.png`.

This script reads the records (`report.records.read_workdir`, which verifies every line's
digest), prints a per-row mean of the main table's metrics, the metric-specific optimum of
every swept hyperparameter (`records.optimal_hparams`), the MIRA score of every row against a
calibrated sampler's band (`records.mira_scores`: the figures' band, the calibrated mean
+- 2 sqrt(var / L); `summary.md`'s table uses the bootstrap band), and the shapes of the stored
samples.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np

METRICS = ("mean_error", "std_error", "mmd", "swd", "spectral_error", "crps")


def row_means(recs, metrics=METRICS) -> dict:
    """`{(sampler, hparams key): {metric: mean over cases and seeds}}`; NaN if any record is."""
    from posteriorjax.report import records

    out = {}
    for key, rows in records.row_groups(recs).items():
        values = {}
        for m in metrics:
            v = np.asarray([np.nan if r["metrics"].get(m) is None else r["metrics"][m] for r in rows], float)
            values[m] = float(v.mean()) if v.size and np.all(np.isfinite(v)) else math.nan
        out[key] = values
    return out


def label(hkey) -> str:
    """A row's hyperparameters as `name=value, ...` (values are float32 in the records)."""
    return ", ".join(f"{k}={v:.6g}" for k, v in hkey) or "-"


def main(workdir) -> dict:
    """Print what `workdir` holds; returns `{task: {"means", "optima", "mira", "samples"}}`."""
    from posteriorjax.report import records

    workdir = Path(workdir)
    recs, config = records.read_workdir(workdir)
    if not recs:
        raise ValueError(f"workdir: {workdir} holds no records (run a sweep there first)")
    print(f"{len(recs)} records of {sorted(config.get('tasks', {}))} in {workdir}")
    out = {}
    for (task,), task_recs in records.group(recs, "task").items():
        print(f"\n== {task}")
        means = row_means(task_recs)
        for (sampler, hkey), values in means.items():
            print(f"{sampler:>16} {label(hkey):<28} " + "  ".join(f"{m} {values[m]:.4g}" for m in METRICS))
        optima = {}
        for (sampler,), pair in records.group(task_recs, "sampler").items():
            for axis in records.varying_axes(pair):
                if len(records.axis_split(pair, axis)) == 1:  # only this hyperparameter varies
                    optima[(sampler, axis)] = records.optimal_hparams(pair, axis, METRICS)
                    best = {m: float(f"{optima[(sampler, axis)][m]:.6g}") for m in ("mean_error", "mmd")}
                    print(f"optimum of {sampler}'s {axis} per metric: {best}")
        mira = records.mira_scores(task_recs)
        for (sampler, hkey), s in mira.items():
            inside = s["low"] <= s["score"] <= s["high"]
            where = "inside" if inside else "outside"
            print(
                f"MIRA {sampler} {label(hkey)}: {s['score']:.4f}, calibrated {s['expected']:.4f} "
                f"[{s['low']:.4f}, {s['high']:.4f}] over L = {s['count']}: {where}"
            )
        samples = {}
        for path in sorted((workdir / "samples" / task).glob("*.npz")):
            with np.load(path) as stored:
                samples[path.stem] = stored["samples"].shape  # (configurations, N, C, H, W)
        if samples:
            print(f"stored samples (configurations, N, C, H, W): {samples}")
        out[task] = {"means": means, "optima": optima, "mira": mira, "samples": samples}
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", required=True, help="a finished sweep workdir")
    main(parser.parse_args().workdir)
