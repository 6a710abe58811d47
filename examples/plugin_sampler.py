"""An out-of-tree sampler and task in one user file, registered without editing the package.

    python -m experiments.sweep --plugins=examples.plugin_sampler \\
        --config=configs/plugin_example.py --workdir=/tmp/plugin-example
    python -m experiments.report --plugins=examples.plugin_sampler --workdir=/tmp/plugin-example

Importing this module registers

* the sampler ``tempered_is``: self-normalized importance sampling with the prior as proposal
  and a tempered likelihood, resampled multinomially. Draw `num_proposals` prior fields
  x_k, weight them w_k proportional to p(y_obs | x_k)^temperature, and return `num_samples`
  draws from the weighted set. temperature = 1 targets the posterior (consistent as
  num_proposals grows), 0 returns prior draws. It is a baseline: its effective sample size
  collapses when the likelihood is sharp relative to the prior, as in most benchmark tasks.
* the task ``poisson_fixed_sparse``: `poisson_fixed` with 8 sensors and noise std 1e-2 (a
  variant built from the package's builder with other defaults), on which it is usable.

Check both with `posteriorjax.testing.check_sampler("tempered_is", task)` and
`posteriorjax.testing.check_task(task)`.
"""

from __future__ import annotations

import functools

import equinox as eqx
import jax
import jax.random as jr

from posteriorjax import checks, samplers, tasks
from posteriorjax.samplers import AbstractSampler
from posteriorjax.tasks import poisson


class TemperedImportanceSampler(AbstractSampler):
    """Prior-proposal importance resampling; hyperparameter `temperature` (>= 0, default 1).

    Attributes:
      num_proposals: number of prior proposals per call (static; memory ~ num_proposals fields).
    """

    num_proposals: int = eqx.field(static=True)

    def _sample(self, key, y_obs, num_samples, hparams):
        k_prop, k_pick = jr.split(key)
        xs = jax.vmap(self.task.prior.sample)(jr.split(k_prop, self.num_proposals))  # (K, C, H, W)
        log_lik = jax.vmap(lambda x: self.task.log_likelihood(x, y_obs))(xs)  # (K,)
        picks = jr.categorical(k_pick, hparams["temperature"] * log_lik, shape=(num_samples,))
        return xs[picks]


def build(task, num_proposals: int = 1024) -> TemperedImportanceSampler:
    """`samplers.get("tempered_is", task, num_proposals=K)`."""
    num_proposals = checks.positive_int("num_proposals", num_proposals)
    return TemperedImportanceSampler(task, {"temperature": 1.0}, num_proposals)


samplers.register("tempered_is", build)
tasks.register(
    "poisson_fixed_sparse",
    functools.partial(poisson.build_fixed, "poisson_fixed_sparse", num_sensors=8, noise_std=1e-2),
)
