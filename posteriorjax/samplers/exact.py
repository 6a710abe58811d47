"""The exact posterior of a linear-Gaussian task as a sampler (the upper bound of every table).

For a fixed GRF prior N(0, C), an affine forward map F(x) = A x + b and noise N(0, Sigma), draws
come from pathwise conditioning (Matheron's rule, `reference.exact`):

    x = x0 + V L^-T L^-1 (y - b - A x0 - eta0),   x0 ~ N(0, C), eta0 ~ N(0, Sigma),

with V = C A^T `(M, C, H, W)` and L the Cholesky factor of S = A C A^T + Sigma. Everything
that does not depend on `y_obs` (V, L^-1, b) is computed once when the sampler is built
(M adjoint and M forward solves, float64 M x M algebra), so `_sample` is pure, jit- and
vmap-able over cases, and costs one forward solve per draw. No hyperparameters.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from posteriorjax import random_fields
from posteriorjax.reference import exact
from posteriorjax.samplers.base import AbstractSampler, register


class ExactSampler(AbstractSampler):
    """Exact posterior draws (see module doc). Attributes: `gain` = V L^-T `(M, C, H, W)`,
    `l_inv` = L^-1 `(M, M)`."""

    gain: jax.Array
    l_inv: jax.Array

    evaluations_per_sample = 0

    def _sample(self, key, y_obs, num_samples, hparams):
        del hparams
        task, dtype = self.task, self.gain.dtype

        def one(k):
            k_x, k_eta = jr.split(k)
            x0 = task.prior.sample(k_x).astype(dtype)
            r = y_obs.astype(dtype) - task.forward(x0) - task.noise.sample(k_eta, y_obs.shape).astype(dtype)
            return x0 + jnp.tensordot(self.l_inv @ r, self.gain, axes=1)

        return jax.vmap(one)(jr.split(key, num_samples))


def build(task) -> ExactSampler:
    """Exact sampler of a linear task with a fixed-hyperparameter GRF prior (ValueError otherwise)."""
    if not isinstance(task.prior, random_fields.GaussianRandomField):
        raise ValueError(
            "task: 'exact' needs a fixed-hyperparameter GaussianRandomField prior, "
            f"got {type(task.prior).__name__}"
        )
    exact.check_linear(task)
    offset, at = exact.adjoint_rows(task)
    v, gram = exact.gram_matrix(task, at, offset, task.prior.mode_std().astype(at.dtype), task.prior.basis)
    gram = np.asarray(gram, np.float64)
    m = gram.shape[0]
    chol = np.linalg.cholesky(0.5 * (gram + gram.T) + np.diag(np.asarray(task.noise.variance(m), np.float64)))
    l_inv = np.linalg.solve(chol, np.eye(m))
    gain = (np.asarray(v, np.float64).reshape(m, -1).T @ l_inv.T).T.reshape(v.shape)
    dtype = at.dtype
    return ExactSampler(task, {}, jnp.asarray(gain, dtype), jnp.asarray(l_inv, dtype))


register("exact", build)
