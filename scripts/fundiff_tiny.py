"""FunDiff (published, `samplers.fundiff`), tiny, on `poisson_fixed` 16 x 16 against the exact posterior.

    PYTHONPATH=. python scripts/fundiff_tiny.py --steps=1000 --workdir=/tmp/fundiff_tiny

Trains the three FunDiff networks in order (`configs/train/network.py` tiny configs: target FAE,
condition FAE, then the DiT on their frozen encoders; `--steps` each), samples one case with the
published 20 Euler steps and prints, as JSON lines, each stage's time and final losses, then the
posterior mean / std errors (`metrics.posterior`) of FunDiff, of the exact sampler (Monte Carlo
floor) and of the prior against 256 exact posterior draws.
"""

import json
import time
from pathlib import Path

import jax.random as jr
from absl import app, flags

from posteriorjax import samplers, training
from posteriorjax.metrics import posterior as pm
from posteriorjax.reference import exact

FLAGS = flags.FLAGS
flags.DEFINE_integer("steps", 300, "Training steps of each network.")
flags.DEFINE_float("learning_rate", 1e-3, "Peak learning rate (published 1e-3; the tiny configs take 3e-3).")
flags.DEFINE_integer("num_samples", 256, "Samples per sampler (and exact reference draws).")
flags.DEFINE_string("workdir", "/tmp/fundiff_tiny", "Where the three training runs go (resumed).")


def train(kind, workdir, **inputs):
    config = training.config("poisson_fixed", kind, "tiny")
    config.train.update(num_steps=FLAGS.steps, learning_rate=FLAGS.learning_rate, progress=False)
    for role, path in inputs.items():
        config.inputs[role] = str(path)
    start = time.time()
    _, ema, setup = training.run(config, workdir)
    last = json.loads((Path(workdir) / "metrics.jsonl").read_text().splitlines()[-1])
    print(json.dumps({"kind": kind, "seconds": round(time.time() - start, 1), **last}), flush=True)
    return ema, setup.task


def main(argv):
    del argv
    root = Path(FLAGS.workdir)
    target, _ = train("fundiff_fae_target", root / "target")
    condition, _ = train("fundiff_fae_condition", root / "condition")
    model, task = train("fundiff_dit", root / "dit", target=root / "target", condition=root / "condition")
    y = task.cases(7, 1).y_obs[0]
    n = FLAGS.num_samples
    ref = exact.sample(jr.key(99), task, y, n)
    sampler = samplers.get("fundiff", task, model=model, target=target, condition=condition)
    start = time.time()
    xs = sampler.sample(jr.key(1), y, n, sampler.hparams()).block_until_ready()
    rows = {
        "fundiff": (xs, {"sampling_seconds_with_compile": round(time.time() - start, 1)}),
        "exact": (samplers.get("exact", task).sample(jr.key(2), y, n, {}), {}),
        "prior": (samplers.get("prior", task).sample(jr.key(3), y, n, {}), {}),
    }
    for name, (xs, extra) in rows.items():
        errors = {"mean_error": float(pm.mean_error(xs, ref)), "std_error": float(pm.std_error(xs, ref))}
        print(json.dumps({"sampler": name, **errors, **extra}), flush=True)


if __name__ == "__main__":
    app.run(main)
