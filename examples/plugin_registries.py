"""An out-of-tree metric, network kind and reference method in one user file.

    python -m experiments.sweep --plugins=examples.plugin_registries --config=... --workdir=...

Importing this module registers, with the calls the package makes beside its own entries,

* the metric ``mean_abs_bias``: mean_x |mean_samples(x) - mean_reference(x)|, the pointwise
  distance of the two ensemble means (reference weighted), lower is better. The suite records it
  for every case from then on (`metrics.suite.compute`);
* the network kind ``prior_wide``: the ``prior`` kind (an EDM denoiser over the normalized
  unknown) with a wider tiny FNO backbone (width 32 instead of 16). A sweep's network spec can
  name it (``networks={"model": "prior_wide"}``) and `training.config(task, "prior_wide",
  "tiny")` gives its training config;
* the reference method ``prior_draws``: `num_samples` prior draws per case, uniform weights. A
  deliberately wrong reference (the prior, not the posterior): the floor a sampler that ignores
  the data reaches, for sanity checks of a metric or a sweep.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from posteriorjax import training
from posteriorjax.metrics import registry as metrics
from posteriorjax.reference import registry as references


def mean_abs_bias(c: metrics.Inputs) -> jax.Array:
    """mean_x |mean_samples(x) - mean_reference(x)| of one case (samples `(N, ...)`, reference `(M, ...)`)."""
    reference_mean = jnp.average(c.reference, axis=0, weights=c.weights)
    return jnp.mean(jnp.abs(jnp.mean(c.samples, axis=0) - reference_mean))


metrics.register(metrics.Metric("mean_abs_bias", mean_abs_bias, "Mean |bias|"))

_PRIOR = training.kinds.get("prior")
training.kinds.register(
    dataclasses.replace(
        _PRIOR,
        name="prior_wide",
        models={**_PRIOR.models, "tiny": ("fno", {**_PRIOR.models["tiny"][1], "width": 32})},
    )
)


def prior_draws(task, cases, spec, key, *, workdir, pool_key, progress):
    """`spec["num_samples"]` prior draws per case (case i from `fold_in(key, i)`), uniform weights."""
    num = int(spec["num_samples"])
    draw = jax.vmap(task.prior.sample)
    samples = np.stack([np.asarray(draw(jr.split(jr.fold_in(key, i), num))) for i in range(len(cases.y_obs))])
    weights = np.full(samples.shape[:2], 1.0 / num, samples.dtype)
    return samples, weights, [{} for _ in range(samples.shape[0])]


references.register(
    "prior_draws",
    references.Method(prior_draws, "prior draws, ignoring the data (a floor)", ("num_samples",)),
)
