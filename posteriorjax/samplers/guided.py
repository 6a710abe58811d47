"""Guided diffusion samplers as (prior, schedule, guidance) triples on the one EDM integrator.

`GuidedDiffusion` runs `diffusion.guided.guided_sample` over a Karras schedule with a tuple of
`Correction`s and a preconditioner. A correction is a small composition:

    weight_i = hparams[hparam] * schedule(sigma_i, i, N),
    L_i      = weight_i * objective(points[at], y_obs),

its objective a readout of the denoised state plus a loss (`RelativeNorm`, `MaskedMSE`,
`L2Norm`) or the PDE residual (`ResidualNorm`), its schedule one of `FunDPSScale`,
`Constant`, `LateDecay`, `LateOnly`. The samplers `dps`, `fundps`, `funddps` and
`diffusionpde` are builders that pick these pieces (see their modules); a new guided
method is one builder of the same kind.

Units. A sampler works in its profile's units: trajectory = `units` x the prior's normalized
units. The published FunDPS / Fun-DDPS / DiffusionPDE code works on data normalized to std 0.5
(`ModelNormalizer` scale 0.5, EDM sigma_data 0.5), so its sigmas, its c_i switch at sigma = 1
and its gradients w.r.t. x live there; `units = 0.5 / prior.normalizer.scale` reproduces them
for a prior of any normalization (the denoiser in trajectory units is
r D(x / r, sigma / r), exact for any denoiser). Objectives read the denoised state in the
prior's own normalized units.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from posteriorjax import checks, diffusion, nn
from posteriorjax.diffusion.guided import POINTS, guided_sample
from posteriorjax.samplers import guidance, precision, tuned
from posteriorjax.samplers.base import AbstractSampler
from posteriorjax.samplers.denoisers import DiffusionPrior


def _safe_norm(v: jax.Array) -> jax.Array:
    """||v||_2 with gradient 0 (not NaN) at v = 0 (an exactly satisfied residual)."""
    sq = jnp.sum(v**2)
    positive = sq > 0
    return jnp.where(positive, jnp.sqrt(jnp.where(positive, sq, 1.0)), 0.0)


# Losses of predicted observations y_hat (M,) against y_obs (M,).


class RelativeNorm(eqx.Module):
    """||y_hat - y|| / ||y|| (the normalized observation error; our FunDPS / DPS variants)."""

    def __call__(self, y_hat, y_obs):
        return jnp.linalg.norm(y_hat - y_obs) / (jnp.linalg.norm(y_obs) + 1e-30)


class MaskedMSE(eqx.Module):
    """sum_m (scale (y_hat_m - y_m))^2 / M: the published mask-MSE on normalized values.

    With norm(v) = (v - mean) scale_0 / std, norm(y_hat) - norm(y) = scale (y_hat - y) with
    scale = scale_0 / std (FunDPS: 0.5 / std of the state's training data; Fun-DDPS: 1 / std
    of the surrogate's output normalization). M counts the observed entries (`n_obs`).
    """

    scale: float = eqx.field(static=True)

    def __call__(self, y_hat, y_obs):
        return jnp.sum((self.scale * (y_hat - y_obs)) ** 2) / y_obs.shape[0]


class L2Norm(eqx.Module):
    """||y_hat - y||_2 in physical units (DiffusionPDE's `loss_type: l2`, not squared)."""

    def __call__(self, y_hat, y_obs):
        return _safe_norm(y_hat - y_obs)


class ObservationObjective(eqx.Module):
    """loss(readout(d), y_obs) for a denoised normalized stack d."""

    readout: guidance.Readout
    loss: eqx.Module

    def __call__(self, d, y_obs):
        return self.loss(self.readout(d), y_obs.astype(d.dtype))


class ResidualNorm(eqx.Module):
    """||R(x_hat, u_hat)||_2 / (H W): DiffusionPDE's PDE loss (the published ||r||_2 / 128^2 at 128^2).

    R is the task's discrete residual (`task.physics.residual`, in the units of the source term),
    on the denoised joint state.
    """

    readout: guidance.Readout

    def __call__(self, d, y_obs):
        del y_obs
        r = self.readout.task.physics.residual(self.readout.prior.unknown(d), self.readout.state(d))
        return _safe_norm(r) / (r.shape[-2] * r.shape[-1])


# Weight schedules: a multiplier of step i (0-based) of N at level sigma_i (trajectory units).


class FunDPSScale(eqx.Module):
    """c_i = 1 if sigma_i > 1 else sigma_i (FunDPS); 0 on the last step if `skip_last` (the
    published `if i < num_steps - 1`)."""

    skip_last: bool = eqx.field(static=True, default=False)

    def __call__(self, sigma, i, n):
        c = jnp.where(sigma > 1, 1.0, sigma)
        return jnp.where(i == n - 1, 0.0, c) if self.skip_last else c


class Constant(eqx.Module):
    """1 on every step (Fun-DDPS)."""

    def __call__(self, sigma, i, n):
        return jnp.ones_like(sigma)


class LateDecay(eqx.Module):
    """1 for i <= fraction N, then `factor` (DiffusionPDE's observation weight: 0.8, 0.1)."""

    fraction: float = eqx.field(static=True, default=0.8)
    factor: float = eqx.field(static=True, default=0.1)

    def __call__(self, sigma, i, n):
        return jnp.where(i <= self.fraction * n, 1.0, self.factor) * jnp.ones_like(sigma)


class LateOnly(eqx.Module):
    """0 for i <= fraction N, then 1 (DiffusionPDE's PDE term)."""

    fraction: float = eqx.field(static=True, default=0.8)

    def __call__(self, sigma, i, n):
        return jnp.where(i <= self.fraction * n, 0.0, 1.0) * jnp.ones_like(sigma)


class Correction(eqx.Module):
    """One guidance term: hparams[hparam] * schedule(sigma_i, i, N) * objective(points[at]).

    Attributes:
      objective: `objective(d, y_obs) -> scalar` on a denoised stack in the prior's normalized units.
      schedule: step multiplier (see above).
      hparam: name of the vmappable hyperparameter that weights it.
      at: ``"denoised"`` (D(x_i, sigma_i)) or ``"corrector"`` (D at the Heun corrector point).
    """

    objective: eqx.Module
    schedule: eqx.Module
    hparam: str = eqx.field(static=True)
    at: str = eqx.field(static=True)

    def __check_init__(self):
        checks.in_choices("at", self.at, POINTS)

    def __call__(self, points, y_obs, hparams, *, sigma, i, n):
        weight = hparams[self.hparam] * self.schedule(sigma, i, n)
        return weight * self.objective(points[self.at], y_obs)


class Identity(eqx.Module):
    """P = I: the Euclidean gradient (DPS; the published FunDPS / Fun-DDPS / DiffusionPDE updates)."""

    def __call__(self, g):
        return g


class NoiseCovariance(eqx.Module):
    """P = C_n: the gradient preconditioned by the diffusion noise covariance (our function-space
    guidance; equals `Identity` under white noise)."""

    noise: eqx.Module

    def __call__(self, g):
        return self.noise.covariance_apply(g)


class GuidedDiffusion(AbstractSampler):
    """Guided EDM sampling (module doc).

    Attributes:
      prior: the `DiffusionPrior` (oracle or learned, unknown-only or joint).
      corrections: the guidance terms, summed.
      preconditioner: `Identity` or `NoiseCovariance`.
      profile: ``"ours"`` or ``"published"`` (which detail set built it; informational).
      num_steps, sigma_min, sigma_max, rho: the Karras schedule in trajectory units (static).
      units: trajectory = units x the prior's normalized units (static).
      batch_mean: B of a batch-mean loss (DiffusionPDE's published `_field_loss`), or None: the
        samples are drawn in batches of B, the last one partial, and each sample's guidance is
        divided by the size of its own batch (`batch_divisors`); None divides by nothing (static).
      precision: ``"float32"`` or ``"float64"``, the dtype of the schedule, the state, the
        observation, the hyperparameters and the guidance gradient; the noise is drawn in float32
        and the denoiser runs in its own parameters' dtype (`samplers.precision`; static).
    """

    prior: DiffusionPrior
    corrections: tuple
    preconditioner: eqx.Module
    profile: str = eqx.field(static=True)
    num_steps: int = eqx.field(static=True)
    sigma_min: float = eqx.field(static=True)
    sigma_max: float = eqx.field(static=True)
    rho: float = eqx.field(static=True, default=7.0)
    units: float = eqx.field(static=True, default=1.0)
    batch_mean: int | None = eqx.field(static=True, default=None)
    precision: str = eqx.field(static=True, default="float32")

    def __check_init__(self):
        precision.check(self.precision)

    @property
    def evaluations_per_sample(self) -> int:
        return 2 * self.num_steps - 1

    def sample_one(self, key, y_obs, hparams, divisor=1.0) -> jax.Array:
        """One sample: the prior's normalized stack in trajectory units, before read-off; the
        guidance loss (every correction) is divided by `divisor` (its batch's size, `batch_divisors`)."""
        r, dtype = self.units, precision.state_dtype(self.precision)
        sigmas = diffusion.karras_sigmas(self.num_steps, self.sigma_min, self.sigma_max, self.rho)
        sigmas = sigmas.astype(dtype)
        shape = (self.prior.channels, *self.task.unknown_shape[1:])
        net = precision.network_dtype(self.prior.denoiser, dtype)
        y_obs = y_obs.astype(dtype)
        hparams = {k: jnp.asarray(v, dtype) for k, v in hparams.items()}

        def denoise(x, sigma):  # the network in its own dtype, as the published EDMPrecond
            return r * self.prior.denoise((x / r).astype(net), (sigma / r).astype(net)).astype(dtype)

        def loss_fn(points, sigma, i):
            # the objectives read the prior's normalized units, not the trajectory's (module doc)
            model_points = {k: v / r for k, v in points.items()}
            terms = [
                c(model_points, y_obs, hparams, sigma=sigma, i=i, n=self.num_steps) for c in self.corrections
            ]
            # a published loop differentiates its batch's mean loss: each sample's guidance gradient
            # is divided by the size of the batch it was drawn in
            return sum(terms, jnp.zeros((), points["denoised"].dtype)) / divisor

        return guided_sample(
            key,
            denoise,
            self.prior.noise,
            shape,
            sigmas=sigmas,
            loss_fn=loss_fn,
            precondition=self.preconditioner,
            noise_dtype=precision.NOISE_DTYPE,
        )

    def _sample(self, key, y_obs, num_samples, hparams):
        def one(k, divisor):
            return self.prior.unknown(self.sample_one(k, y_obs, hparams, divisor) / self.units)

        divisors = batch_divisors(num_samples, self.batch_mean)
        dtype = precision.state_dtype(self.precision)
        return jax.vmap(one)(jr.split(key, num_samples), jnp.asarray(divisors, dtype))


def batch_divisors(num_samples: int, batch_size: int | None) -> np.ndarray:
    """(num_samples,) the size of the batch each sample is drawn in, when `num_samples` samples are
    drawn in batches of `batch_size` with the last one partial (the published `generate` loop:
    ``current_batch = min(batch_size, num_samples - count)``); all ones when `batch_size` is None.

    >>> batch_divisors(12, 10).tolist()
    [10.0, 10.0, 10.0, 10.0, 10.0, 10.0, 10.0, 10.0, 10.0, 10.0, 2.0, 2.0]
    """
    num_samples = checks.positive_int("num_samples", num_samples)
    if batch_size is None:
        return np.ones(num_samples)
    batch_size = checks.positive_int("batch_size", batch_size)
    start = np.arange(num_samples) // batch_size * batch_size  # first index of each sample's batch
    return np.minimum(batch_size, num_samples - start).astype(float)


PROFILES = ("ours", "published")
PUBLISHED_DATA_SCALE = 0.5  # the published models' normalized-data std (ModelNormalizer scale)


def check_profile(profile: str, method: str) -> str:
    if profile not in PROFILES:
        raise ValueError(f"profile: {method} has profiles {PROFILES}, got {profile!r}")
    return profile


def guidance_weight(task, given, sampler: str, *, published: bool) -> float:
    """`given`, else `sampler`'s tuned ``guidance`` weight on `task` (`tuned`): the published one of
    its dataset (`published`: an error for a task without one), else ours (logged default)."""
    if given is not None:
        return float(given)
    if published:
        return float(tuned.published(task, sampler, "profile='ours', or guidance_weight")["guidance"])
    return float(tuned.ours(task, sampler)["guidance"])


def units(prior: DiffusionPrior, data_scale: float) -> float:
    """Trajectory units per normalized unit of `prior` for a profile on data of std `data_scale`."""
    return float(data_scale) / prior.normalizer.scale


def state_std(task, prior: DiffusionPrior, surrogate=None) -> float:
    """Std of the (single) state channel's training data: the surrogate's output normalization,
    else the joint prior's state channel, else `nn.state_statistics(task)` (prior draws)."""
    if task.state_shape[0] != 1:
        raise ValueError(
            f"task: the normalized MSE needs one state channel, {task.name!r} has {task.state_shape[0]}"
        )
    if surrogate is not None:
        return float(surrogate.u_norm.std[0])
    if prior.joint:
        return float(prior.normalizer.std[prior.unknown_channels])
    return float(nn.state_statistics(task).std[0])
