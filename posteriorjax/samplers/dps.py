"""Diffusion posterior sampling on fields: ``dps`` (white noise) and ``fundps`` (function space, joint prior).

Both run N Heun steps of the probability-flow ODE over a Karras schedule (`guidance.guided_sample`)
and after each step subtract

    lambda c_i grad_{x_i} ||obs(u_hat(x0_hat)) - y|| / ||y||,     c_i = 1 if sigma_i > 1 else sigma_i,

the normalized observation error of the denoised state (FunDPS, Yao et al. 2025, Alg. 1; the
norm form of DPS, Chung et al. 2023).

* ``fundps``: the prior is over the joint (unknown, state) stack and the noise is a GRF
  (function-space diffusion); u_hat is the denoised state channel. In oracle mode the state is
  the exact physics of the denoised unknown (`denoisers` module doc).
* ``dps``: the prior is over the unknown only, white noise, and u_hat = physics(x0_hat) with the
  exact forward map.

Hyperparameters: ``guidance`` (lambda >= 0). Defaults follow the published evaluation
profile (FunDPS: lambda = 4000 Darcy / 1600 Poisson, 500 steps). Cost per sample: 2N - 1
denoiser evaluations and N backward passes through denoiser and forward map.
"""

from __future__ import annotations

import jax
import jax.random as jr

from posteriorjax.samplers import guidance
from posteriorjax.samplers.base import AbstractSampler
from posteriorjax.samplers.denoisers import DiffusionPrior, build_prior

GUIDANCE = {"darcy": 4000.0, "poisson": 1600.0, "default": 1600.0}


class GuidedDiffusion(AbstractSampler):
    """Guided EDM sampling with a weighted normalized observation loss (see module doc).

    Attributes:
      prior: the `DiffusionPrior` (oracle or learned, unknown-only or joint).
      readout: `guidance.Readout`, predicted observations of a denoised stack.
      num_steps, sigma_min, sigma_max: the Karras schedule (static).
    """

    prior: DiffusionPrior
    readout: guidance.Readout
    num_steps: int
    sigma_min: float
    sigma_max: float

    @property
    def evaluations_per_sample(self) -> int:
        return 2 * self.num_steps - 1

    def _sample(self, key, y_obs, num_samples, hparams):
        weight = hparams["guidance"]
        sigmas = guidance.schedule(self.num_steps, self.sigma_min, self.sigma_max)
        shape = (self.prior.channels, *self.task.unknown_shape[1:])

        def loss_fn(d, sigma, i):
            del i
            err = guidance.relative_error(self.readout(d), y_obs.astype(d.dtype))
            return weight * guidance.guidance_scale(sigma) * err

        def one(k):
            return self.prior.unknown(guidance.guided_sample(k, self.prior, shape, sigmas, loss_fn))

        return jax.vmap(one)(jr.split(key, num_samples))


def _build(task, *, joint, noise, forward, prior, model, surrogate, num_steps, sigma_min, sigma_max, weight):
    guidance.check_positive_int("num_steps", num_steps)
    p = build_prior(task, prior, model, joint=joint, noise=noise)
    readout = guidance.build_readout(task, p, forward, surrogate)
    defaults = {"guidance": guidance.task_default(task, GUIDANCE) if weight is None else float(weight)}
    return GuidedDiffusion(task, defaults, p, readout, num_steps, float(sigma_min), float(sigma_max))


def build_fundps(
    task, prior: str = "learned", model=None, num_steps: int = 500, sigma_min: float = 0.002,
    sigma_max: float = 80.0, guidance_weight: float | None = None,
) -> GuidedDiffusion:  # fmt: skip
    """FunDPS: joint (unknown, state) EDM prior with GRF noise; `model` a joint `EDMDenoiser`."""
    return _build(
        task, joint=True, noise="grf", forward="joint", prior=prior, model=model, surrogate=None,
        num_steps=num_steps, sigma_min=sigma_min, sigma_max=sigma_max, weight=guidance_weight,
    )  # fmt: skip


def build_dps(
    task, prior: str = "learned", model=None, num_steps: int = 500, sigma_min: float = 0.002,
    sigma_max: float = 80.0, guidance_weight: float | None = None, noise: str = "white",
) -> GuidedDiffusion:  # fmt: skip
    """DPS: unknown-only EDM prior, exact forward map in the loss.

    `noise` must be the noise the prior was trained with: ``"white"`` (the published DPS) or
    ``"grf"`` (the networks of `configs/train/common.py`, trained with GRF noise).
    """
    return _build(
        task, joint=False, noise=noise, forward="exact", prior=prior, model=model, surrogate=None,
        num_steps=num_steps, sigma_min=sigma_min, sigma_max=sigma_max, weight=guidance_weight,
    )  # fmt: skip
