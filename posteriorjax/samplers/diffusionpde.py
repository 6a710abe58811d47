"""DiffusionPDE (Huang et al. 2024): joint (unknown, state) grid prior, observation + PDE-residual guidance.

N Heun steps of the probability-flow ODE over a Karras schedule (`guidance.guided_sample`);
after step i the gradient (through the denoiser) of

    i <  0.8 N:  zeta_obs L_obs
    i >= 0.8 N:  0.1 zeta_obs L_obs + zeta_pde L_pde

is subtracted (the published weight schedule: observation weight to 0.1x and PDE guidance on
for the last 20% of the steps), with

    L_obs = ||obs(u_hat) - y|| / ||y||,   L_pde = ||R(x_hat, u_hat)|| / ||R(x_hat, 0)||,

(x_hat, u_hat) the denoised joint state in physical units and R the task's discrete PDE
residual (`task.physics.residual`). Both losses are made dimensionless by a reference norm,
so the weights transfer across tasks. The published backbone is a U-Net on the grid
(`nn.UNet`, white noise); any joint `EDMDenoiser` works. In oracle mode the state is the exact
physics of the denoised unknown, so R = 0 and only the observation term acts.
Hyperparameters: ``guidance`` zeta_obs >= 0, ``pde_weight`` zeta_pde >= 0. Published
profile: 2000 steps. Cost per sample: 2N - 1 denoiser evaluations and N backward passes.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr

from posteriorjax.samplers import guidance
from posteriorjax.samplers.base import AbstractSampler
from posteriorjax.samplers.denoisers import DiffusionPrior, build_prior

GUIDANCE = {"darcy": 4000.0, "poisson": 1600.0, "default": 1600.0}
PDE_FRACTION = 0.8


class DiffusionPDESampler(AbstractSampler):
    """Joint-prior sampling with observation and PDE-residual guidance (see module doc)."""

    prior: DiffusionPrior
    readout: guidance.Readout
    num_steps: int = eqx.field(static=True)
    sigma_min: float = eqx.field(static=True)
    sigma_max: float = eqx.field(static=True)

    @property
    def evaluations_per_sample(self) -> int:
        return 2 * self.num_steps - 1

    def _sample(self, key, y_obs, num_samples, hparams):
        zeta_obs, zeta_pde = hparams["guidance"], hparams["pde_weight"]
        sigmas = guidance.schedule(self.num_steps, self.sigma_min, self.sigma_max)
        shape = (self.prior.channels, *self.task.unknown_shape[1:])
        switch = int(PDE_FRACTION * self.num_steps)
        physics = self.task.physics

        def loss_fn(d, sigma, i):
            del sigma
            u = self.readout.state(d)
            x = self.prior.unknown(d)
            obs = guidance.relative_error(self.task.observation(u), y_obs.astype(d.dtype))
            scale = jnp.linalg.norm(physics.residual(x, jnp.zeros_like(u))) + 1e-30
            pde = jnp.linalg.norm(physics.residual(x, u)) / jax.lax.stop_gradient(scale)
            late = i >= switch
            return jnp.where(late, 0.1 * zeta_obs * obs + zeta_pde * pde, zeta_obs * obs)

        def one(k):
            return self.prior.unknown(guidance.guided_sample(k, self.prior, shape, sigmas, loss_fn))

        return jax.vmap(one)(jr.split(key, num_samples))


def build(
    task, prior: str = "learned", model=None, num_steps: int = 2000, sigma_min: float = 0.002,
    sigma_max: float = 80.0, noise: str = "white", guidance_weight: float | None = None,
    pde_weight: float = 100.0,
) -> DiffusionPDESampler:  # fmt: skip
    """`model`: a joint (unknown, state) `EDMDenoiser` (U-Net in the published method)."""
    guidance.check_positive_int("num_steps", num_steps)
    p = build_prior(task, prior, model, joint=True, noise=noise)
    readout = guidance.build_readout(task, p, "joint")
    weight = guidance.task_default(task, GUIDANCE) if guidance_weight is None else float(guidance_weight)
    defaults = {"guidance": weight, "pde_weight": float(pde_weight)}
    return DiffusionPDESampler(task, defaults, p, readout, num_steps, float(sigma_min), float(sigma_max))
