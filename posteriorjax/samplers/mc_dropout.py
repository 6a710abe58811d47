"""MC dropout (Gal & Ghahramani 2016): repeated stochastic passes of the direct inverse FNO.

Sample j = InverseNet(to_grid(y), mask; dropout key k_j): the observations written back on the
grid (`observation.to_grid`) and the observation mask go through an `nn.InverseNet` whose
channel-MLP dropout stays active. The spread of the ensemble is the dropout's, not a posterior
derived from a likelihood: the method is amortized (no task physics at sampling time). On Darcy
the output is projected onto {3, 12} as PosteriorBench's MC-dropout profile does
(`discrete_values`). No hyperparameters. Cost per sample: one network evaluation.
"""

from __future__ import annotations

import jax
import jax.random as jr

from posteriorjax import nn
from posteriorjax.samplers import tuned
from posteriorjax.samplers.base import AbstractSampler, register


class MCDropoutSampler(AbstractSampler):
    """Stochastic passes of a trained `nn.InverseNet` with dropout (see module doc)."""

    model: nn.InverseNet

    evaluations_per_sample = 1

    def _sample(self, key, y_obs, num_samples, hparams):
        del hparams
        cu = self.task.state_shape[0]
        y_grid = self.task.observation.to_grid(y_obs, leading=(cu,))
        mask = self.task.observation.mask
        return jax.vmap(lambda k: self.model(y_grid, mask, key=k))(jr.split(key, num_samples))


def _has_dropout(model) -> bool:
    leaves = jax.tree.leaves(model, is_leaf=lambda m: isinstance(m, nn.Dropout))
    return any(isinstance(m, nn.Dropout) and m.rate > 0 for m in leaves)


def build(task, *, model=None, discrete_values="published") -> MCDropoutSampler:
    """`model`: a trained `nn.InverseNet` (`configs/train/network.py:...,kind=inverse`), dropout > 0.

    `discrete_values`: ``"published"`` (the binary projection of the task's published profile,
    `tuned.published_discrete_values`: Darcy {3, 12}, none elsewhere), None, or a (low, high) pair.
    """
    if model is None:
        raise ValueError(f"model: mc_dropout needs a trained nn.InverseNet for {task.name!r}, got None")
    if not isinstance(model, nn.InverseNet):
        raise ValueError(f"model: expected an nn.InverseNet, got {type(model).__name__}")
    if model.x_norm.channels != task.unknown_shape[0] or model.u_norm.channels != task.state_shape[0]:
        raise ValueError(
            f"model: channels (x {model.x_norm.channels}, u {model.u_norm.channels}) do not match task "
            f"{task.name!r} (x {task.unknown_shape[0]}, u {task.state_shape[0]})"
        )
    if not _has_dropout(model):
        raise ValueError("model: the inverse network has no dropout layer; MC dropout needs dropout > 0")
    discrete_values = tuned.resolve_discrete_values(task, discrete_values)
    return MCDropoutSampler(task, {}, model, discrete_values=discrete_values)


register("mc_dropout", build, networks={"model": "inverse"})
