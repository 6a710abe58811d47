"""Accelerator case: one FunDPS posterior at 128 x 128 with an untrained full-size network.

``fundps_full``: `poisson_fixed` at 128^2 (64^2 without `--device`), the joint EDM denoiser
with the full-size UNO of the ``joint`` kind (`training.kinds.get("joint").models["full"]`, untrained,
random weights: the cost, not the answer), FunDPS at its published number of steps with
`--device` (a few steps on a CPU, where the full run would take hours). Records the wall
time of one compiled ensemble, samples/s, network evaluations per sample and the compile
time; no baseline (nothing else runs this network).
"""

from __future__ import annotations

import time

import jax
import jax.random as jr

from bench.common import best_time, record
from posteriorjax import nn, samplers, tasks, training


def bench_fundps_full(args):
    device = getattr(args, "device", False)
    n, num = (128, 16) if device else (64, 2)
    task = tasks.get("poisson_fixed", resolution=n, num_sensors=128, noise_std=1e-4)
    x_norm, u_norm = nn.field_normalizer(task), nn.state_statistics(task, 16)
    name, options = training.kinds.get("joint").models["full"]
    model = training.build_model("joint", name, options, task, x_norm, u_norm, jr.key(0))
    steps = {} if device else {"num_steps": 2}
    s = samplers.get("fundps", task, model=model, **steps)
    h = s.hparams()
    y = task.cases(0, 1).y_obs[0]

    # sample() compiles itself with the network as an argument; an outer jit closing over the
    # sampler would make its weights constants, which XLA then spends minutes constant-folding
    def run(k):
        return s.sample(k, y, num, h)

    start = time.perf_counter()
    jax.block_until_ready(run(jr.key(1)))
    compile_and_first = time.perf_counter() - start
    t = best_time(run, jr.key(2), repeats=1, warmup=0)
    evals = getattr(s, "evaluations_per_sample", None)
    return [
        record(
            f"fundps_full {n}x{n}",
            "samples/s",
            num / t,
            None,
            "-",
            seconds=t,
            num_samples=num,
            evals_per_sample=evals,
            first_call_seconds=compile_and_first,
            network=f"{name} {options}",
        )  # fmt: skip
    ]


BENCHMARKS = {"fundps_full": bench_fundps_full}
