"""float32 against float64 integration of the published FunDPS, Fun-DDPS and DDIS loops.

    python scripts/precision.py --seeds=6 --json=/tmp/precision.json

The published loops integrate in float64, ours in float32. On `poisson_fixed` at 32 x 32 (the
medium grid; linear-Gaussian, so the exact posterior is the reference) each published profile runs
with the exact prior score (`prior="oracle"`, the exact forward model: no network, so only the
arithmetic differs) at the medium step counts, from the same keys in float32 and in float64 (the
task and the sampler built under `jax.enable_x64`; one observation, drawn in float64, given to
both). The draws are not paired (a float64 run draws its noise in float64, other numbers from the
same key), so a difference of the metrics is read against the Monte Carlo error of that
difference. The guidance weight is the
published one, and where that diverges at this size the best of a half-decade grid below it (the
smallest mean + std error of float64 seed 0). Per sampler it prints the metrics of both, their
difference between the means over `--seeds` seeds, and its Monte Carlo error (the standard
deviations of the metric over seeds, sqrt(sd32^2 + sd64^2) / sqrt(seeds)); `one_run_mc_error` is
the float32 standard deviation over seeds (the error of one run's value).
"""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from absl import app, flags

from posteriorjax import samplers, tasks
from posteriorjax.metrics import posterior as pm
from posteriorjax.reference import exact

flags.DEFINE_integer("seeds", 6, "Sampler seeds per precision.")
flags.DEFINE_integer("num_samples", 64, "Samples per run (the medium table's).")
flags.DEFINE_integer("resolution", 32, "Grid size.")
flags.DEFINE_string("json", None, "Write the rows here.")
FLAGS = flags.FLAGS

ROWS = (  # (sampler, options, the hyperparameter that weights the observation)
    ("fundps", {"num_steps": 100}, "guidance"),
    ("funddps", {"num_steps": 100, "forward": "exact"}, "guidance"),
    ("ddis", {"num_steps": 100, "forward": "exact"}, "weight"),
)
FACTORS = 10.0 ** -np.arange(0.0, 4.01, 0.5)  # the grid below the published weight
METRICS = ("mean_error", "std_error", "mmd", "swd")


def scores(xs, ref):
    xs = np.asarray(xs, np.float64)
    return {
        "mean_error": float(pm.mean_error(xs, ref)),
        "std_error": float(pm.std_error(xs, ref)),
        "mmd": float(pm.mmd(xs, ref)),
        "swd": float(pm.sliced_wasserstein(xs, ref)),
    }


def draws(name, options, hparam, weights, seeds, n, x64, y_obs):
    """{weight: [samples per seed]} of the published profile of `name` in float64 (x64) or float32,
    and the dtype it integrated in; weights None: the published one."""
    with jax.enable_x64(x64):
        task = tasks.get("poisson_fixed", resolution=FLAGS.resolution)
        y = jnp.asarray(y_obs, jnp.float64 if x64 else jnp.float32)
        s = samplers.get(name, task, prior="oracle", profile="published", **options)
        weights = (float(s.hparams()[hparam]),) if weights is None else weights
        run = jax.jit(lambda k, w: s.sample(k, y, n, s.hparams(**{hparam: w})))
        out = {w: [np.asarray(run(jr.key(seed), w), np.float64) for seed in seeds] for w in weights}
        dtype = str(run(jr.key(0), weights[0]).dtype)
    return out, dtype


def main(argv):
    del argv
    n, seeds = FLAGS.num_samples, range(FLAGS.seeds)
    with jax.enable_x64(True):
        task = tasks.get("poisson_fixed", resolution=FLAGS.resolution)
        y = task.cases(7, 1).y_obs[0]
        ref = np.asarray(exact.sample(jr.key(99), task, y, 1000), np.float64)
        y = np.asarray(y, np.float64)
    rows = []
    for name, options, hparam in ROWS:
        ((published, run64),) = draws(name, options, hparam, None, [0], n, True, y)[0].items()
        weight = published
        if not scores(run64[0], ref)["mean_error"] < 1.0:  # diverged: the best of the grid below it
            grid, _ = draws(name, options, hparam, tuple(published * FACTORS), [0], n, True, y)
            finite = {w: scores(x[0], ref) for w, x in grid.items() if np.isfinite(x[0]).all()}
            weight = min(finite, key=lambda w: finite[w]["mean_error"] + finite[w]["std_error"])
        x32, d32 = draws(name, options, hparam, (weight,), seeds, n, False, y)
        x64, d64 = draws(name, options, hparam, (weight,), seeds, n, True, y)
        x32, x64 = x32[weight], x64[weight]
        s32 = [scores(x, ref) for x in x32]
        s64 = [scores(x, ref) for x in x64]
        row = {"sampler": name, "dtypes": [d32, d64], "published_weight": published, "weight": weight}
        for m in METRICS:
            a, b = np.array([s[m] for s in s32]), np.array([s[m] for s in s64])
            row[m] = {
                "fp32": float(a.mean()),
                "fp64": float(b.mean()),
                "diff": float(a.mean() - b.mean()),
                "diff_mc_error": float(np.sqrt((a.var(ddof=1) + b.var(ddof=1)) / len(a))),
                "one_run_mc_error": float(a.std(ddof=1)),
            }
        rows.append(row)
        print(json.dumps(row), flush=True)
    if FLAGS.json:
        with open(FLAGS.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    app.run(main)
