"""Ensemble smoother with multiple data assimilation (ES-MDA; Emerick & Reynolds 2013): two profiles.

``profile="ours"`` (default) — a textbook ES-MDA in the prior latent. The ensemble {z_j},
j = 1..N_e, starts from prior latent draws (x = transform(z), so the update acts on a Gaussian
variable even for thresholded or hierarchical priors; the latent pytree is flattened). For each
inflation coefficient alpha_i (sum_i 1 / alpha_i = 1):

    g_j = F(transform(z_j)),   d_j = y + sqrt(alpha_i) gamma Sigma^(1/2) eta_j  (perturbed observations),
    z_j <- z_j + C_zg (C_gg + alpha_i gamma^2 Sigma)^-1 (d_j - g_j),

with ensemble (co)variances C_zg = Z'^T G' / (N_e - 1), C_gg = G'^T G' / (N_e - 1) from the
anomalies Z', G', re-running the forward model F with the task's noise Sigma. The gain is formed
in the M x M observation space (Cholesky solve), never d x d. For a linear-Gaussian task the
update is the Kalman update, so as N_e -> infinity the ensemble is distributed as the exact
posterior (whatever the alphas). Hyperparameter ``noise_inflation`` gamma > 0 (1 = the task noise).

``profile="published"`` — the PosteriorBench baseline (`posteriorbench/methods/esmda.py`,
`configs/evaluations/esmda_<dataset>.yaml`): the ensemble is the *augmented* state s = [x; u] of
max(N_e, num_samples) training pairs (here: prior draws and their solutions); predictions are read
off the state (obs(u), no forward solve); the observation std is a multiple of the ensemble std of
the prior predictions, sigma_m = max(c std_j(obs(u_j))_m, 1e-6) (ddof 1; `mode: prior_std_fraction`),
fixed before the first update; each update is

    s_j <- s_j + C_sy (C_yy + diag(alpha sigma^2) + J)^-1 (y + sqrt(alpha) sigma eta_j - obs(u_j)),
    J = 1e-8 max(mean diag, 1) I (the published jitter),

and the first `num_samples` members' x are returned. N_e = 128 / 512 / 256 / 1024, alphas (2, 2) /
(1,) / (4, 4, 4, 4) / (1,), c = 10 / 100 / 2 / 1 (Darcy / Poisson / CCS / LTMI). With c = 100 the
update barely moves the prior, which is why the paper's Poisson ES-MDA row (mean 1.00, std 5.02)
is near the prior's. Hyperparameter ``obs_std_scale`` c > 0.

Cost per sample: len(alphas) forward solves (ours) or one (published, the initial states).
"""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from jax.flatten_util import ravel_pytree

from posteriorjax import checks, rng
from posteriorjax.samplers import guidance, guided, tuned
from posteriorjax.samplers.base import AbstractSampler, register


def default_alphas(num_updates: int) -> tuple[float, ...]:
    """Equal inflation alpha_i = num_updates (sum 1 / alpha_i = 1)."""
    return (float(num_updates),) * num_updates


MIN_STD = 1e-6  # the published floor of sigma_m (module doc)
JITTER = 1e-8  # the published jitter J, relative to the mean diagonal


def observation_std(predictions: jax.Array, scale) -> jax.Array:
    """The published `prior_std_fraction` observation std `(M,)` of prior predictions `(N, M)`."""
    return jnp.maximum(scale * jnp.std(predictions, axis=0, ddof=1), MIN_STD)


def augmented_update(
    state: jax.Array, predictions: jax.Array, y: jax.Array, *, std, alpha, normals
) -> jax.Array:
    """One published ES-MDA update of the augmented ensemble `state (N, D)` (module doc).

    `predictions (N, M)` are the members' observations read off the state, `normals (N, M)` the
    standard normal draws of the observation perturbation.
    """
    n = state.shape[0]
    # anomalies scaled by 1 / sqrt(N - 1): pa.T @ pa is C_yy and sa.T @ pa is C_sy
    sa = (state - state.mean(0)) / jnp.sqrt(n - 1.0)
    pa = (predictions - predictions.mean(0)) / jnp.sqrt(n - 1.0)
    system = pa.T @ pa + jnp.diag(alpha * std**2)
    system = system + JITTER * jnp.maximum(jnp.mean(jnp.diag(system)), 1.0) * jnp.eye(
        system.shape[0], dtype=system.dtype
    )
    innovation = y[None] + jnp.sqrt(alpha) * std * normals - predictions
    weights = jnp.linalg.solve(system, innovation.T)  # (M, N)
    # C_sy weights, grouped as (N, N) @ (N, D): the D x M cross-covariance is never formed
    return state + (weights.T @ pa.T) @ sa


class ESMDASampler(AbstractSampler):
    """ES-MDA ensemble (see module doc)."""

    alphas: tuple[float, ...]
    ensemble_size: int | None
    profile: str = eqx.field(static=True, default="ours")

    @property
    def evaluations_per_sample(self) -> int:
        return len(self.alphas) + 1 if self.profile == "ours" else 1

    check_domain = guidance.positive_domain(("noise_inflation", "obs_std_scale"))

    def _sample(self, key, y_obs, num_samples, hparams):
        size = num_samples if self.ensemble_size is None else self.ensemble_size
        if self.profile == "published":
            return self._sample_published(key, y_obs, num_samples, max(size, num_samples), hparams)
        if size < num_samples or size < 2:
            raise ValueError(f"ensemble_size: expected >= max(num_samples={num_samples}, 2), got {size}")
        task = self.task
        k_init, k_obs = jr.split(key)
        latents = jax.vmap(task.prior.latent)(jr.split(k_init, size))
        unravel = ravel_pytree(task.prior.latent(k_init))[1]  # only the latent's structure is used
        flat = jax.vmap(lambda z: ravel_pytree(z)[0])(latents)
        y = y_obs.astype(flat.dtype)
        std = jnp.broadcast_to(task.noise.std, y.shape).astype(flat.dtype) * hparams["noise_inflation"]

        def predict(z):
            return task.forward(task.prior.transform(unravel(z)))

        def update(z, inputs):
            alpha, k = inputs
            g = jax.vmap(predict)(z)
            d = y + jnp.sqrt(alpha) * std * rng.normal(k, g.shape, g.dtype)
            za, ga = z - z.mean(0), g - g.mean(0)
            # diag(alpha std^2) > 0 keeps c_gg positive definite even with fewer members than
            # observations (rank(ga) < M), so Cholesky needs no jitter here
            c_gg = ga.T @ ga / (size - 1) + jnp.diag(alpha * std**2)
            w = jax.scipy.linalg.cho_solve(jax.scipy.linalg.cho_factor(c_gg), (d - g).T)  # (M, N)
            # C_zg w with C_zg = za.T ga / (N - 1), grouped so that no d x M matrix is formed
            return z + (za.T @ (ga @ w) / (size - 1)).T, None

        alphas = jnp.asarray(self.alphas, flat.dtype)
        z, _ = jax.lax.scan(update, flat, (alphas, jr.split(k_obs, len(self.alphas))))
        return jax.vmap(lambda v: task.prior.transform(unravel(v)))(z[:num_samples])

    def _sample_published(self, key, y_obs, num_samples, size, hparams):
        task = self.task
        if size < 2:
            raise ValueError(f"ensemble_size: expected at least 2 members, got {size}")
        k_init, k_obs = jr.split(key)
        x = jax.vmap(task.prior.sample)(jr.split(k_init, size))
        u = jax.vmap(task.physics)(x)
        cx = x.shape[1]
        state = jnp.concatenate([x, u], axis=1).reshape(size, -1)
        shape = (cx + u.shape[1], *x.shape[2:])

        def predict(s):
            return jax.vmap(lambda v: task.observation(v.reshape(shape)[cx:]))(s)

        y = y_obs.astype(state.dtype)
        std = observation_std(predict(state), hparams["obs_std_scale"]).astype(state.dtype)

        def update(s, inputs):
            alpha, k = inputs
            pred = predict(s)
            normals = rng.normal(k, pred.shape, s.dtype)
            return augmented_update(s, pred, y, std=std, alpha=alpha, normals=normals), None

        alphas = jnp.asarray(self.alphas, state.dtype)
        state, _ = jax.lax.scan(update, state, (alphas, jr.split(k_obs, len(self.alphas))))
        return state[:num_samples].reshape(num_samples, *shape)[:, :cx]


def build(task, *, ensemble_size: int | None = None, alphas=None, profile: str = "ours") -> ESMDASampler:
    """Unset `ensemble_size` / `alphas` take the profile's values: published per task (module doc);
    ours: `num_samples` members and the published alphas of the task's dataset ((1,) elsewhere)."""
    guided.check_profile(profile, "esmda")
    if ensemble_size is not None:
        ensemble_size = checks.positive_int("ensemble_size", ensemble_size)
        if ensemble_size < 2:
            raise ValueError(f"ensemble_size: expected at least 2 members, got {ensemble_size}")
    if profile == "published":
        values = tuned.published(task, "esmda", "profile='ours'")
        ensemble_size = values["ensemble_size"] if ensemble_size is None else ensemble_size
        alphas = values["alphas"] if alphas is None else alphas
        defaults = {"obs_std_scale": values["obs_std_scale"]}
    else:
        if alphas is None:
            alphas = tuned.published_or_default(task, "esmda")["alphas"]
        defaults = {"noise_inflation": 1.0}
    alphas = tuple(float(a) for a in alphas)
    if not alphas or not all(a > 0 and math.isfinite(a) for a in alphas):
        raise ValueError(f"alphas: expected a non-empty sequence of positive numbers, got {alphas}")
    if not math.isclose(sum(1.0 / a for a in alphas), 1.0, rel_tol=1e-6):
        raise ValueError(f"alphas: expected sum(1 / alpha_i) = 1, got {sum(1.0 / a for a in alphas):.6g}")
    return ESMDASampler(
        task,
        defaults,
        alphas,
        ensemble_size,
        profile,
        discrete_values=tuned.profile_discrete_values(task, profile),
    )


register("esmda", build)
