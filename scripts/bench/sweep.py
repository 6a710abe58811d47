"""Guidance sweep as one program (`sweep.run_pair`) against the same sweep as a Python loop.

The sweep: 8 ``poisson_fixed`` cases x 16 guidance weights (log-spaced) x 32 samples per
configuration, each configuration sampled *and* scored against an exact reference (64
pathwise posterior draws per case), for two samplers: FunDPS with a tiny untrained joint FNO
denoiser (the `tiny` training config's network, 4 Heun steps) and DPS with the exact GRF
oracle denoiser (no network, 4 Heun steps: little work per configuration). Ours:
`sweep.run_pair`, all 128 configurations in one compiled, `lax.map`-batched program
(`batch_size` configurations vmapped at a time).
Baseline: a Python loop over the configurations, each one `sampler.sample` +
`metrics.suite.compute` jitted once and called per configuration with the sweep's own key
(inputs gathered beforehand), its metrics fetched to the host after each call (as a loop
that records results would). The sweep computes strictly more (TARP/MIRA calibration
statistics on top of the suite), so the ratio is conservative; the largest difference of
`mean_error` between the two runs checks they computed the same thing.

The sweep is also run with `batch_size=1` (one configuration per `lax.map` step, no
vmapping): its time shows how much of the ratio the batching itself gives.

Times exclude compilation (`wall_time_s` of the sweep's records, measured around the compiled
call; the loop after a warm-up call); the sweep's compile time is reported separately. Memory:
the growth of the process's peak resident set (`resource.getrusage(RUSAGE_SELF).ru_maxrss`)
during each phase -- a high-water mark, so a phase that stays below an earlier peak reads 0
(the loop runs first: the sweep's figure is what it needs beyond the loop's peak) -- and
XLA's temporary-buffer size of the loop's compiled per-configuration program
(`compiled.memory_analysis()`).
"""

from __future__ import annotations

import functools
import resource
import sys
import time

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from bench.common import record
from posteriorjax import nn, samplers, sweep, tasks, training
from posteriorjax.metrics import suite
from posteriorjax.reference import exact
from posteriorjax.sweep.program import config_key, expand
from posteriorjax.sweep.statistics import stream_keys

NUM_CASES, NUM_WEIGHTS, NUM_SAMPLES, NUM_REFERENCE = 8, 16, 32, 64
TINY_JOINT = dict(modes=6, width=16, layers=3, projection=32, embed_dim=32)


def _peak_rss_mib() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10  # bytes on macOS, KiB on Linux


def _setup(n: int, name: str):
    task = tasks.get("poisson_fixed", resolution=n, num_sensors=32, noise_std=1e-3)
    if name == "fundps":
        x_norm, u_norm = nn.field_normalizer(task), nn.state_statistics(task, 16)
        joint = training.build_model(
            "joint", "fno", TINY_JOINT, task, x_norm=x_norm, u_norm=u_norm, key=jr.key(0)
        )
        sampler = samplers.get("fundps", task, model=joint, num_steps=4)
    else:
        sampler = samplers.get("dps", task, prior="oracle", num_steps=4)
    cases = task.cases(0, NUM_CASES)
    ref = jnp.stack(
        [exact.sample(jr.fold_in(jr.key(1), i), task, y, NUM_REFERENCE) for i, y in enumerate(cases.y_obs)]
    )
    weights = jnp.full((NUM_CASES, NUM_REFERENCE), 1.0 / NUM_REFERENCE, ref.dtype)
    grid = expand(NUM_CASES, {"guidance": np.geomspace(10.0, 3000.0, NUM_WEIGHTS)}, [0], sampler.defaults)
    return task, sampler, cases, (ref, weights), grid


def _loop(task, sampler, cases, reference, grid, seed: int):
    """The per-configuration program (jitted once) and a function running the whole loop."""
    ref, weights = reference
    stream = stream_keys(seed)["sampler"]

    @jax.jit
    def one(key, y, ref_c, w_c, truth, hparams):
        samples = sampler.sample(key, y, NUM_SAMPLES, hparams)
        return suite.compute(
            samples,
            ref_c,
            w_c,
            truth,
            evaluation_field=task.evaluation_field,
            field_stats=task.field_stats,
            forward=task.forward,
            y_obs=y,
            noise_std=task.noise_std,
        )

    def args(i):
        c = int(grid.case[i])
        key = config_key(stream, c, int(grid.seed[i]))
        hp = {k: jnp.asarray(v[i]) for k, v in grid.hparams.items()}
        return key, cases.y_obs[c], ref[c], weights[c], cases.x_true[c], hp

    # per-configuration inputs are gathered before timing: the loop times the calls alone
    inputs = jax.block_until_ready([args(i) for i in range(grid.size)])

    def run():
        return [jax.device_get(one(*a)) for a in inputs]

    return one, args, run


SAMPLERS = {
    "fundps": "fundps (tiny untrained joint FNO, 4 Heun steps)",
    "dps_oracle": "dps (exact GRF oracle denoiser, 4 Heun steps)",
}


def bench_sweep(args):
    n, batch = (64, 32) if args.device else (16, 16)
    return [_bench_one(name, n, batch) for name in SAMPLERS]


def _bench_one(name: str, n: int, batch: int) -> dict:
    task, sampler, cases, reference, grid = _setup(n, name)
    seed = 0

    one, loop_args, loop = _loop(task, sampler, cases, reference, grid, seed)
    compiled = one.lower(*loop_args(0)).compile()
    analysis = compiled.memory_analysis()
    loop_temp_mib = None if analysis is None else analysis.temp_size_in_bytes / 2**20
    jax.block_until_ready(one(*loop_args(0)))  # warm-up
    rss0 = _peak_rss_mib()
    t0 = time.perf_counter()
    loop_out = loop()
    t_loop = time.perf_counter() - t0
    rss_loop = _peak_rss_mib()

    # the sweep's program over the whole grid in one chunk; `batch_size` configurations per step
    run_pair = functools.partial(
        sweep.run_pair,
        task,
        sampler,
        cases,
        reference,
        grid,
        num_samples=NUM_SAMPLES,
        seed=seed,
        chunk_size=grid.size,
    )
    t0 = time.perf_counter()
    records = run_pair(batch_size=batch)
    t_total = time.perf_counter() - t0
    rss_sweep = _peak_rss_mib()
    t_sweep = sum(r["wall_time_s"] for r in records)
    compile_s = records[0]["compile_time_s"]

    # the same program with one configuration per lax.map step: what vmapping itself buys
    unbatched = run_pair(batch_size=1)
    t_unbatched = sum(r["wall_time_s"] for r in unbatched)

    by_id = {r["config_id"]: r for r in records}
    ids = grid.ids()
    diff = max(
        abs(float(loop_out[i]["mean_error"]) - float(by_id[ids[i]]["metrics"]["mean_error"]))
        for i in range(grid.size)
    )
    config = dict(
        sampler=SAMPLERS[name],
        resolution=n,
        cases=NUM_CASES,
        guidance_weights=NUM_WEIGHTS,
        samples_per_config=NUM_SAMPLES,
        reference_samples=NUM_REFERENCE,
        batch_size=batch,
        sweep_seconds=t_sweep,
        sweep_compile_seconds=compile_s,
        sweep_total_seconds=t_total,
        sweep_unbatched_seconds=t_unbatched,
        loop_seconds=t_loop,
        loop_peak_rss_growth_mib=rss_loop - rss0,
        sweep_peak_rss_growth_mib=rss_sweep - rss_loop,
        loop_xla_temp_mib=loop_temp_mib,
        max_mean_error_difference=diff,
        devices=len(jax.devices()),
    )
    return record(
        f"sweep_guidance_{name}_{n}",
        "configs/s",
        grid.size / t_sweep,
        grid.size / t_loop,
        "Python loop of jitted sample + suite.compute",
        **config,
    )


BENCHMARKS = {"sweep": bench_sweep}
