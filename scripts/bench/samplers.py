"""Posterior samplers at 64 x 64 with tiny untrained networks: samples/s and network evaluations per sample.

Ours: `sampler.sample` of a vmapped ensemble (jit); baseline: the same sampler drawing one
sample per call in a Python loop (jit), so the ratio is the gain from batching. Step counts
are cut to a few steps so the CPU run stays short; `evals/sample` is reported both for the
benchmarked configuration and for the published profile (`published_evals`), so relative
costs are visible. Tiny networks: the `tiny` training configs (FNO 6 modes, width 16).
"""

from __future__ import annotations

import jax
import jax.random as jr

from bench.common import best_time, record
from posteriorjax import nn, samplers, tasks, training

TINY = dict(modes=6, width=16, layers=3, projection=32)


def _setup(n: int):
    task = tasks.get("poisson_fixed", resolution=n, num_sensors=128, noise_std=1e-4)
    x_norm, u_norm = nn.field_normalizer(task), nn.state_statistics(task, 16)

    def build(kind, **extra):
        return training.build_model(
            kind, "fno", {**TINY, **extra}, task, x_norm=x_norm, u_norm=u_norm, key=jr.key(0)
        )

    m = {
        "joint": build("joint", embed_dim=32),
        "prior": build("prior", embed_dim=32),
        "surrogate": build("surrogate"),
        "inverse": build("inverse", dropout=0.1),
        "flow_fno": build("flow_fno", embed_dim=32),
    }
    steps = 4
    configs = {
        "exact": {},
        "pcn": dict(burn_in=steps, num_steps=steps),
        "esmda": {},
        "dps": dict(model=m["prior"], num_steps=steps),
        "fundps": dict(model=m["joint"], num_steps=steps),
        "funddps": dict(model=m["prior"], surrogate=m["surrogate"], num_steps=steps),
        "ddis": dict(model=m["prior"], surrogate=m["surrogate"], num_steps=steps, langevin_steps=steps),
        "diffusionpde": dict(model=m["joint"], num_steps=steps),
        "eci": dict(model=m["joint"], num_steps=steps),
        "mc_dropout": dict(model=m["inverse"]),
        "flow_fno": dict(model=m["flow_fno"], num_steps=steps),
    }
    published = {
        k: {kk: v for kk, v in c.items() if kk in ("model", "surrogate")} for k, c in configs.items()
    }
    return task, configs, published


def _evals(s) -> int | None:
    return getattr(s, "evaluations_per_sample", None)


def bench_samplers(args):
    n, num = (128, 64) if args.device else (64, 16)
    task, configs, published = _setup(n)
    y = task.cases(0, 1).y_obs[0]
    records = []
    for name, config in configs.items():
        s = samplers.get(name, task, **config)
        h = s.hparams()
        batched = jax.jit(lambda k, s=s, h=h: s.sample(k, y, num, h))
        single = jax.jit(lambda k, s=s, h=h: s.sample(k, y, 1, h))
        keys = jr.split(jr.key(1), num)
        t_ours = best_time(batched, jr.key(0), repeats=2)
        # an ensemble method has no one-sample loop: no baseline for ES-MDA
        loop = lambda ks, f=single: [f(k) for k in ks]  # noqa: E731
        t_loop = None if name == "esmda" else best_time(loop, keys, repeats=1)
        full = samplers.get(name, task, **published[name])
        records.append(
            record(
                f"sampler_{name}_{n}",
                "samples/s",
                num / t_ours,
                None if t_loop is None else num / t_loop,
                "per-sample Python loop (jit)",
                evals_per_sample=_evals(s),
                published_evals=_evals(full),
                num_samples=num,
                resolution=n,
            )
        )
    return records


BENCHMARKS = {"samplers": bench_samplers}
