"""ECI sampling (Cheng et al. 2024): gradient-free flow matching with hard replacement of observed entries.

Flow matching interpolates x_t = t x_1 + (1 - t) eps (t: 0 noise -> 1 data, eps from the noise
generator) and learns the velocity v(x, t) = (E[x_1 | x_t] - x_t) / (1 - t). An EDM denoiser
gives it in closed form: x_t / t = x_1 + ((1 - t) / t) eps, so

    E[x_1 | x_t] = D(x_t / t, sigma = (1 - t) / t),

and any joint (unknown, state) `EDMDenoiser` (FNO backbone as published) serves as the
velocity field. Per time step t_n -> t_{n+1} (uniform grid on [t_0, 1]):

    repeat `mixing` times:           (the last repetition moves to t_{n+1})
        x_1 = x + (1 - t) v(x, t)                  extrapolate
        x_1[state, observed cells] = y             hard replacement (the constraint)
        x = t' x_1 + (1 - t') eps',  eps' fresh     re-interpolate (t' = t_n, then t_{n+1})

and the final x_1 (observed entries replaced) is returned. No gradients and no likelihood:
the observations are enforced exactly (in normalized state units), whatever the noise level.
Needs point observations of the state (`MaskObservation`) and a learned joint prior (the
oracle prior diffuses the unknown only, which carries no observed entries).
Published profile: 200 steps, mixing 5 (Darcy) / 1 (Poisson). No numeric hyperparameters.
Cost per sample: (steps - 1) x mixing + 1 network evaluations.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr

from posteriorjax import checks
from posteriorjax.observations import MaskObservation
from posteriorjax.samplers import guidance
from posteriorjax.samplers.base import AbstractSampler
from posteriorjax.samplers.denoisers import DiffusionPrior, build_prior

MIXING = {"darcy": 5, "poisson": 1}  # published, per PosteriorBench dataset


class ECISampler(AbstractSampler):
    """Flow matching with hard replacement (see module doc)."""

    prior: DiffusionPrior
    num_steps: int = eqx.field(static=True)
    mixing: int = eqx.field(static=True)
    t_min: float = eqx.field(static=True)

    @property
    def evaluations_per_sample(self) -> int:
        return (self.num_steps - 1) * self.mixing + 1

    def replace(self, x1: jax.Array, y_obs: jax.Array) -> jax.Array:
        """Write the normalized observations into the observed cells of the state channels."""
        cx, obs = self.prior.unknown_channels, self.task.observation
        cu = x1.shape[0] - cx
        norm = self.prior.normalizer
        mean, std = (jnp.asarray(v[cx:], x1.dtype)[:, None, None] for v in (norm.mean, norm.std))
        y_n = (obs.to_grid(y_obs.astype(x1.dtype), leading=(cu,)) - mean) * (norm.scale / std)
        return x1.at[cx:].set(jnp.where(obs.mask, y_n, x1[cx:]))

    def sample_joint(self, key, y_obs, num_samples: int) -> jax.Array:
        """Joint normalized states `(num_samples, C_x + C_u, H, W)` (observed entries exact)."""
        shape = (self.prior.channels, *self.task.unknown_shape[1:])
        ts = jnp.linspace(self.t_min, 1.0, self.num_steps + 1)
        noise = self.prior.noise

        def x1_of(x, t):
            return self.replace(self.prior.denoise(x / t, (1 - t) / t), y_obs)

        def one(k):
            k0, ks = jr.split(k)
            x = (1 - ts[0]) * noise.sample(k0, shape)

            def step(x, inputs):
                t, t_next, kk = inputs
                keys = jr.split(kk, self.mixing)

                def mix(x, inp):
                    j, km = inp
                    t_to = jnp.where(j == self.mixing - 1, t_next, t)
                    x1 = x1_of(x, t)
                    return (t_to * x1 + (1 - t_to) * noise.sample(km, shape)).astype(x.dtype), None

                x, _ = jax.lax.scan(mix, x, (jnp.arange(self.mixing), keys))
                return x, None

            x, _ = jax.lax.scan(step, x, (ts[:-2], ts[1:-1], jr.split(ks, self.num_steps - 1)))
            return x1_of(x, ts[-2])

        return jax.vmap(one)(jr.split(key, num_samples))

    def _sample(self, key, y_obs, num_samples, hparams):
        del hparams
        return jax.vmap(self.prior.unknown)(self.sample_joint(key, y_obs, num_samples))


def build(
    task, prior: str = "learned", model=None, num_steps: int = 200, mixing: int | None = None,
    t_min: float = 1e-3, noise: str = "grf",
) -> ECISampler:  # fmt: skip
    """`model`: a joint (unknown, state) `EDMDenoiser`; `task.observation` must be point values."""
    num_steps = checks.positive_int("num_steps", num_steps)
    if num_steps < 2:
        raise ValueError(f"num_steps: expected at least 2 steps, got {num_steps}")
    mixing = guidance.published(task, MIXING, "ECI", "mixing") if mixing is None else mixing
    mixing = checks.positive_int("mixing", mixing)
    if not 0 < t_min < 1:
        raise ValueError(f"t_min: expected a value in (0, 1), got {t_min!r}")
    if not isinstance(task.observation, MaskObservation):
        raise ValueError(
            f"task: ECI replaces observed entries, which needs point observations (MaskObservation); "
            f"{task.name!r} observes with {type(task.observation).__name__}"
        )
    if prior == "oracle":
        raise ValueError(
            "prior: ECI needs a learned joint (unknown, state) model; 'oracle' diffuses the unknown only"
        )
    p = build_prior(task, prior, model, joint=True, noise=noise)
    return ECISampler(task, {}, p, num_steps, mixing, float(t_min))
