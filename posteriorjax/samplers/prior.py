"""The prior as a (data-blind) sampler: the lower bound every method must beat."""

from __future__ import annotations

import jax
import jax.random as jr

from posteriorjax.samplers.base import AbstractSampler, register
from posteriorjax.tasks.base import Task


class PriorSampler(AbstractSampler):
    """Draws `num_samples` prior fields and ignores `y_obs`: the score of knowing nothing."""

    def _sample(self, key, y_obs, num_samples, hparams):
        del y_obs, hparams
        return jax.vmap(self.task.prior.sample)(jr.split(key, num_samples))


def build(task: Task) -> PriorSampler:
    return PriorSampler(task, {})


register("prior", build)
