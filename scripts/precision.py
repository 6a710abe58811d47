"""float32 against float64 integration of the published FunDPS, Fun-DDPS and DDIS loops.

    nice -n 15 python scripts/precision.py --seeds=5 --json=FILE
    nice -n 15 python scripts/precision.py --rows=fundps_learned \\
        --network=results/networks/medium_ema_from_init/poisson_fixed/joint-dfe8f0899275 --seeds=5

The published loops integrate in float64 (`samplers.precision`). On `poisson_fixed` at 32 x 32 (the
medium grid; linear-Gaussian, so the exact posterior is the reference: 1000 pathwise-conditioned
draws) each published profile runs at the medium step count (100; DDIS 100 annealing levels, its
35 Langevin and 5 ODE steps kept) with 64 samples, once with ``precision="float32"`` and once with
``"float64"`` (inside `precision.scope`), from the same keys: both draw the same float32 noise, and
the prior (the oracle twin's exact Gaussian denoiser, or the trained joint prior of `--network`)
runs in float32 in both, as a trained network does, so the runs differ by the integration's
arithmetic only. The sampler, the task and the observation (case 7, float32) are built as a
sweep builds them; the exact forward map stands in for the surrogates (the oracle twin of
`report.split`). The guidance weight is the published one where it does not diverge at this size,
else the best of a half-decade grid below it (smallest mean + std error of one float64 run).

Per row it prints the largest difference of paired samples, max |x32 - x64| / max |x64| over
seeds, and per metric (the five posterior metrics, computed in float64) the means over seeds of
float32 and float64, the mean of the paired differences float32 - float64 and its standard error, and the
metric's Monte Carlo error: the standard deviation of the float64 metric over seeds (what one run
at 64 samples can resolve). The rule of `samplers.precision.PUBLISHED`: float64 by default where a
difference exceeds that Monte Carlo error.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from absl import app, flags

from posteriorjax import samplers, tasks
from posteriorjax.metrics import posterior as pm
from posteriorjax.reference import exact
from posteriorjax.samplers import precision
from posteriorjax.training.run import trained

flags.DEFINE_list("rows", ["fundps", "funddps", "ddis"], "Rows to run (ROWS keys).")
flags.DEFINE_integer("seeds", 5, "Sampler seeds (paired runs per precision).")
flags.DEFINE_integer("num_samples", 64, "Samples per run (the medium table's).")
flags.DEFINE_integer("resolution", 32, "Grid size.")
flags.DEFINE_integer("case", 7, "Case index of the observation.")
flags.DEFINE_string("network", None, "Trained joint prior directory (row fundps_learned).")
flags.DEFINE_string("json", None, "Write the rows here.")
FLAGS = flags.FLAGS

ROWS = {  # name: (sampler, options, the hyperparameter that weights the observation)
    "fundps": ("fundps", {"num_steps": 100, "prior": "oracle"}, "guidance"),
    "funddps": ("funddps", {"num_steps": 100, "prior": "oracle", "forward": "exact"}, "guidance"),
    "ddis": ("ddis", {"num_steps": 100, "prior": "oracle", "forward": "exact"}, "weight"),
    "fundps_learned": ("fundps", {"num_steps": 100, "prior": "learned"}, "guidance"),
}
FACTORS = 10.0 ** -np.arange(0.0, 2.01, 0.5)  # the grid below the published weight
METRICS = ("mean_error", "std_error", "mmd", "swd", "spectral_error")


def scores(xs, ref) -> dict:
    """The five posterior metrics of `xs` against `ref`, computed in float64."""
    with jax.enable_x64(True):
        xs, ref = jnp.asarray(xs, jnp.float64), jnp.asarray(ref, jnp.float64)
        return {
            "mean_error": float(pm.mean_error(xs, ref)),
            "std_error": float(pm.std_error(xs, ref)),
            "mmd": float(pm.mmd(xs, ref)),
            "swd": float(pm.sliced_wasserstein(xs, ref)),
            "spectral_error": float(pm.spectral_error(xs, ref)),
        }


def runner(task, name, options, hparam, prec, y):
    """run(seed, weight) -> samples (float64 array) of the published profile at `prec`."""
    s = samplers.get(name, task, profile="published", precision=prec, **options)
    fn = jax.jit(lambda k, w: s.sample(k, y, FLAGS.num_samples, s.hparams(**{hparam: w})))

    def run(seed, weight):  # compiled once per precision (traced inside the scope)
        with precision.scope(s):
            return np.asarray(fn(jr.key(seed), jnp.float32(weight)), np.float64)

    return s, run


def main(argv):
    del argv
    task = tasks.get("poisson_fixed", resolution=FLAGS.resolution)
    y = task.cases(FLAGS.case, 1).y_obs[0]  # float32, as a sweep gives it
    with jax.enable_x64(True):
        task64 = tasks.get("poisson_fixed", resolution=FLAGS.resolution)
        ref = np.asarray(exact.sample(jr.key(99), task64, jnp.asarray(y, jnp.float64), 1000), np.float64)
    rows = []
    for row in FLAGS.rows:
        name, options, hparam = ROWS[row]
        options = dict(options)
        if options["prior"] == "learned":
            with tempfile.TemporaryDirectory() as tmp:  # loading may write: never in the source
                copy = Path(tmp) / "net"
                shutil.copytree(FLAGS.network, copy)
                options["model"] = trained(copy)
        s32, run32 = runner(task, name, options, hparam, "float32", y)
        _, run64 = runner(task, name, options, hparam, "float64", y)
        published = float(s32.defaults[hparam])
        weight, t0 = published, time.perf_counter()
        first = scores(run64(0, published), ref)
        if not first["mean_error"] < 1.0:  # diverged at this size: the best of the grid below
            grid = {}
            for w in published * FACTORS[1:]:
                xs = run64(0, w)
                if np.isfinite(xs).all():
                    grid[float(w)] = scores(xs, ref)
            weight = min(grid, key=lambda w: grid[w]["mean_error"] + grid[w]["std_error"])
        t_select = time.perf_counter() - t0
        s32, s64, sample_diff, seconds = [], [], [], {"float32": [], "float64": []}
        for seed in range(FLAGS.seeds):
            t0 = time.perf_counter()
            x64 = run64(seed, weight)
            t1 = time.perf_counter()
            x32 = run32(seed, weight)
            seconds["float64"].append(t1 - t0)
            seconds["float32"].append(time.perf_counter() - t1)
            s32.append(scores(x32, ref))
            s64.append(scores(x64, ref))
            sample_diff.append(float(np.abs(x32 - x64).max() / np.abs(x64).max()))
        out = {
            "row": row,
            "published_weight": published,
            "weight": weight,
            "seeds": FLAGS.seeds,
            "num_samples": FLAGS.num_samples,
            "seconds_per_run": {k: float(np.median(v)) for k, v in seconds.items()},  # median: no compile
            "seconds_weight_selection": t_select,
            "max_sample_rel_diff": max(sample_diff),
        }
        for m in METRICS:
            a, b = np.array([x[m] for x in s32]), np.array([x[m] for x in s64])
            d = a - b
            out[m] = {
                "float32": float(a.mean()),
                "float64": float(b.mean()),
                "diff": float(d.mean()),
                "diff_se": float(d.std(ddof=1) / np.sqrt(len(d))),
                "mc_error": float(b.std(ddof=1)),
            }
        out["exceeds"] = [m for m in METRICS if abs(out[m]["diff"]) > out[m]["mc_error"]]
        rows.append(out)
        print(json.dumps(out), flush=True)
    if FLAGS.json:
        Path(FLAGS.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    app.run(main)
