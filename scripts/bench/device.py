"""Accelerator case: one FunDPS posterior at 128 x 128 with an untrained full-size network.

``fundps_full``: `poisson_fixed` at 128^2 (64^2 without `--device`), the joint EDM denoiser
with the full-size UNO of the ``joint`` kind (`training.kinds.get("joint").models["full"]`,
54 M parameters, untrained, random weights: the cost, not the answer), 16 samples with 50
FunDPS steps with `--device` (2 samples, 2 steps on a CPU). The default 500 steps (999
guided evaluations, each the network's forward pass and input gradient at 128^2, for each of
16 samples) did not finish within 170 s on an H200; the shorter run's evaluations per
second give the 500-step run's time (`seconds_at_published_steps`, linear in the
evaluations). Records the wall time of one compiled ensemble, samples/s, network evaluations
per sample and the first call's time (compilation included); no baseline (nothing else runs
this network).
"""

from __future__ import annotations

import time

import jax
import jax.random as jr

from bench.common import best_time, record
from posteriorjax import nn, samplers, tasks, training


def bench_fundps_full(args):
    device = getattr(args, "device", False)
    n, num, num_steps = (128, 16, 50) if device else (64, 2, 2)
    task = tasks.get("poisson_fixed", resolution=n, num_sensors=128, noise_std=1e-4)
    x_norm, u_norm = nn.field_normalizer(task), nn.state_statistics(task, 16)
    name, options = training.kinds.get("joint").models["full"]
    model = training.build_model("joint", name, options, task, x_norm=x_norm, u_norm=u_norm, key=jr.key(0))
    s = samplers.get("fundps", task, model=model, num_steps=num_steps)
    published = samplers.get("fundps", task, model=model)  # the default (published) step count
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
    evals, published_evals = s.evaluations_per_sample, published.evaluations_per_sample
    return [
        record(
            f"fundps_full {n}x{n}",
            "samples/s",
            num / t,
            None,
            "-",
            seconds=t,
            num_samples=num,
            num_steps=num_steps,
            evals_per_sample=evals,
            evals_per_second=num * evals / t,
            published_num_steps=published.num_steps,
            seconds_at_published_steps=t * published_evals / evals,
            first_call_seconds=compile_and_first,
            network=f"{name} {options}",
        )
    ]


BENCHMARKS = {"fundps_full": bench_fundps_full}
