"""Decoupled annealing posterior sampling (``ddis``; DAPS-style, Zhang et al. 2025) on fields.

Annealing levels sigma_0 > ... > sigma_{N-1} (Karras, rho = 7) and sigma_N = 0. At level i, from x_i:

1. clean estimate x0_hat = ODE(x_i): a short probability-flow solve from sigma_i to 0;
2. `langevin_steps` Langevin steps on U(x) = prior term + likelihood term, started at x0_hat;
3. re-noising x_{i+1} = x + sigma_{i+1} xi, xi from the diffusion noise (the last level returns x).

G (in the likelihood) is the learned surrogate (``forward="surrogate"``) or the exact physics
(``"exact"``). Two profiles:

``profile="published"`` — the PosteriorBench code (`posteriorbench/methods/ddis.py`,
`configs/evaluations/ddis_<dataset>.yaml`), detail by detail:
  * trajectory in the published units (data std 0.5); RBF-kernel noise (`diffusion.RBFNoise`) for
    the initial latent, the Langevin noise and the re-noising; annealing sigma 10 -> 0.01, rho 7,
    200 levels (Darcy) / 100 (Poisson, CCS, LTMI);
  * x0_hat by 5 Heun steps (Euler last) on a rho = 7 sub-schedule from sigma_i to sigma_min 0.001, then 0;
  * Langevin x <- x - lr grad U + eta sqrt(2 lr) xi_RBF, unpreconditioned, on
        U(x) = ||x - x0_hat||^2 / (2 sigma_i^2) + w MSE / (2 tau^2),
    MSE = sum_obs (s (G(x) - y) / std_u)^2 / n_obs (the surrogate's output normalization at the
    observation scale s: 1.0 Darcy / CCS / LTMI, 0.5 Poisson), tau = 1e-3;
  * lr_i = lr (1 + (i / N) (0.01 - 1)) (linear decay to 1 %, `lr_rho` = 1);
  * Darcy 10 steps, lr 1e-4, eta 0.1, w 10; Poisson 35, 7e-5, 0.25, 2; CCS 20, 1e-4, 0.1, 0.4;
    LTMI 20, 1e-4, 0.1, 3.
  The step is gradient descent in per-pixel coordinates, stable only while lr lambda_max < 2 (H
  the likelihood's Hessian); lambda_max scales as h^2, so the published values, tuned at 128^2,
  diverge on coarse grids (docs/samplers.md: "Why the published Poisson weight is non-finite").

``profile="ours"`` (default) — our preconditioned variant: the same skeleton in unit-std units with
GRF noise, x0_hat by `ode_steps` Euler steps on a geometric schedule to `sigma_min`, and Langevin
preconditioned by the noise covariance on U(x) = ||x - x0_hat||^2_{C_n^-1} / (2 sigma_i^2) +
w ||obs(G(x)) - y||^2 / (2 tau^2) (physical units):
    x <- x - eta_i C_n grad U + sqrt(2 eta_i) C_n^(1/2) xi,  eta_i = eta (1 - (1 - 0.01) i / (N - 1)).

``precision``: ``"float64"`` integrates as `posteriorbench/methods/ddis.py` does
(`DDISAdapter._sample_batch`, `_reverse_diffusion`, `_langevin_dynamics`): float64 annealing and
ODE schedules, state, Heun and Langevin arithmetic and gradient; every noise draw (initial latent,
Langevin, re-noising) in float32 and cast; the prior network in float32 (EDMPrecond casts x and
sigma, the loop casts D back), the surrogate on the state cast to float32. ``"float32"``: all of
it in float32. `samplers.precision` has the rule and the default.

Hyperparameters: ``step_size`` (lr / eta) > 0, ``tau`` > 0, ``weight`` w >= 0, and for the
published profile ``temperature`` (its eta) >= 0. Cost per sample: N (ode_steps denoiser
evaluations + langevin_steps forward and backward passes of G).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr

from posteriorjax import checks, diffusion
from posteriorjax.samplers import guidance, guided, tuned
from posteriorjax.samplers import precision as precisions
from posteriorjax.samplers.base import AbstractSampler, register
from posteriorjax.samplers.denoisers import DiffusionPrior, build_prior

LR_MIN_RATIO = 0.01
# every published profile (configs/evaluations/ddis_<dataset>.yaml); per-dataset values: `tuned`
PUBLISHED_SCHEDULE = {
    "sigma_min": 0.01,
    "sigma_max": 10.0,
    "ode_steps": 5,
    "ode_sigma_min": 0.001,
    "tau": 1e-3,
}


class SquaredError(eqx.Module):
    """||y_hat - y||^2 in physical units (our variant's likelihood, before 1 / (2 tau^2))."""

    def __call__(self, y_hat, y_obs):
        return jnp.sum((y_hat - y_obs) ** 2)


class DDISSampler(AbstractSampler):
    """Decoupled annealing (see module doc).

    Attributes:
      prior, readout: the diffusion prior and the forward readout G.
      misfit: `ObservationObjective` (published: `MaskedMSE`; ours: `SquaredError`).
      profile: ``"ours"`` or ``"published"`` (selects the clean estimate, step rule and lr decay).
      num_steps, ode_steps, langevin_steps, sigma_min, sigma_max, ode_sigma_min: schedules (static).
      units: trajectory = units x the prior's normalized units.
      precision: ``"float32"`` or ``"float64"``: the dtype of the schedules, the state, the
        observation, the hyperparameters and the Langevin gradient; the noise is drawn in float32
        and the denoiser and surrogate run in their own parameters' dtype (`samplers.precision`).
    """

    prior: DiffusionPrior
    readout: guidance.Readout
    misfit: eqx.Module
    profile: str = eqx.field(static=True)
    num_steps: int = eqx.field(static=True)
    ode_steps: int = eqx.field(static=True)
    langevin_steps: int = eqx.field(static=True)
    sigma_min: float = eqx.field(static=True)
    sigma_max: float = eqx.field(static=True)
    ode_sigma_min: float = eqx.field(static=True)
    units: float = eqx.field(static=True, default=1.0)
    precision: str = eqx.field(static=True, default="float32")

    def __check_init__(self):
        precisions.check(self.precision)

    check_domain = guidance.positive_domain(("step_size", "tau"))

    @property
    def evaluations_per_sample(self) -> int:
        return self.num_steps * self.ode_steps

    def denoise(self, x, sigma):
        """The prior's denoiser in trajectory units, evaluated in its own parameters' dtype (the
        published EDMPrecond casts x and sigma to float32) and cast back to the state's."""
        r, net = self.units, precisions.network_dtype(self.prior.denoiser, x.dtype)
        return r * self.prior.denoise((x / r).astype(net), (sigma / r).astype(net)).astype(x.dtype)

    def clean(self, x, sigma):
        """x0_hat = ODE(x) from `sigma` (traced) to 0 (module doc: Heun on a Karras sub-schedule
        (published) or Euler on a geometric one (ours))."""
        k = self.ode_steps
        frac = jnp.arange(k) / max(k - 1, 1)
        lo = jnp.minimum(self.ode_sigma_min, sigma)  # a level below ode_sigma_min still descends
        if self.profile == "published":
            levels = (sigma ** (1 / 7) + frac * (lo ** (1 / 7) - sigma ** (1 / 7))) ** 7
            step = diffusion.heun_step
        else:
            levels, step = sigma ** (1 - frac) * lo**frac, diffusion.euler_step
        levels = jnp.concatenate([levels, jnp.zeros(1, levels.dtype)]).astype(x.dtype)

        def body(x, pair):
            return step(self.denoise, x, pair[0], pair[1]), None

        x, _ = jax.lax.scan(body, x, (levels[:-1], levels[1:]))
        return x

    def step_size_at(self, i, hparams):
        """The Langevin step of annealing level i (module doc)."""
        lr = hparams["step_size"]
        n = self.num_steps
        if self.profile == "published":
            # i / N as published: the last level (i = N - 1) stops just above LR_MIN_RATIO
            return lr * (1 + (i / n) * (LR_MIN_RATIO - 1))
        return lr * (1 - (1 - LR_MIN_RATIO) * i / max(n - 1, 1))  # reaches LR_MIN_RATIO at the last

    def langevin_step(self, z, x0_hat, sigma, *, lr, xi, y_obs, hparams):
        """One Langevin step from z with the noise draw `xi` (the diffusion noise's, unit scale)."""
        w, tau = hparams["weight"], hparams["tau"]

        def likelihood(v):
            return w * self.misfit(v / self.units, y_obs) / (2 * tau**2)

        if self.profile == "published":
            grad = (z - x0_hat) / sigma**2 + jax.grad(likelihood)(z)
            return z - lr * grad + hparams["temperature"] * jnp.sqrt(2 * lr) * xi
        # C_n grad U: the prior term's C_n^-1 cancels, so only the likelihood gradient is
        # preconditioned; xi, a draw of the diffusion noise, already has covariance C_n
        drift = -(z - x0_hat) / sigma**2 - self.prior.noise.covariance_apply(jax.grad(likelihood)(z))
        return z + lr * drift + jnp.sqrt(2 * lr) * xi

    def _sample(self, key, y_obs, num_samples, hparams):
        dtype = precisions.state_dtype(self.precision)
        sigmas = diffusion.karras_sigmas(self.num_steps, self.sigma_min, self.sigma_max).astype(dtype)
        shape = (self.prior.channels, *self.task.unknown_shape[1:])
        y_obs = y_obs.astype(dtype)
        hparams = {k: jnp.asarray(v, dtype) for k, v in hparams.items()}

        def draw(k):  # the noise in float32 (as published), cast to the state's dtype
            return self.prior.noise.sample(k, shape, precisions.NOISE_DTYPE).astype(dtype)

        def one(k):
            k0, kr = jr.split(k)
            x = sigmas[0] * draw(k0)

            def level(x, inputs):
                sigma, sigma_next, i, kl = inputs
                x0_hat = self.clean(x, sigma)
                lr = self.step_size_at(i, hparams).astype(x.dtype)

                def langevin(z, kk):
                    xi = draw(kk)
                    return self.langevin_step(
                        z, x0_hat, sigma, lr=lr, xi=xi, y_obs=y_obs, hparams=hparams
                    ).astype(x.dtype), None

                k_lan, k_noise = jr.split(kl)
                z, _ = jax.lax.scan(langevin, x0_hat, jr.split(k_lan, self.langevin_steps))
                x_next = z + sigma_next * draw(k_noise)  # sigma_N = 0: the last level returns z
                return x_next.astype(x.dtype), None

            inputs = (sigmas[:-1], sigmas[1:], jnp.arange(self.num_steps), jr.split(kr, self.num_steps))
            x, _ = jax.lax.scan(level, x, inputs)
            return self.prior.unknown(x / self.units)

        return jax.vmap(one)(jr.split(key, num_samples))


def build(
    task,
    *,
    prior: str = "learned",
    model=None,
    surrogate=None,
    forward: str = "surrogate",
    profile: str = "ours",
    num_steps: int | None = None,
    ode_steps: int | None = None,
    langevin_steps: int | None = None,
    sigma_min: float | None = None,
    sigma_max: float | None = None,
    step_size: float | None = None,
    tau: float | None = None,
    weight: float | None = None,
    temperature: float | None = None,
    noise: str | None = None,
    precision: str | None = None,
) -> DDISSampler:
    """`model`: unknown-only `EDMDenoiser` (or ``prior="oracle"``); `surrogate`: `nn.Surrogate`;
    `precision` (``"float32"`` | ``"float64"``; default `samplers.precision.PUBLISHED` published,
    float32 ours).

    Unset options take the profile's values: published per task (module doc), ours 200 / 100
    levels (Darcy / others), 5 ODE steps to sigma_min 0.01, 100 Langevin steps, sigma_max 80,
    step 1e-4, tau 1e-3, weight 1, GRF noise. `noise` must be the noise the prior was trained with.
    """
    guided.check_profile(profile, "ddis")
    precision = precisions.resolve(precision, profile, "ddis")
    if forward not in ("surrogate", "exact"):
        raise ValueError(f"forward: expected 'surrogate' or 'exact', got {forward!r}")
    published = profile == "published"
    given = dict(
        num_steps=num_steps,
        langevin_steps=langevin_steps,
        step_size=step_size,
        weight=weight,
        temperature=temperature,
    )
    if published:
        values = {**PUBLISHED_SCHEDULE, "obs_scale": 1.0}
        if tuned.dataset(task) is not None or None in given.values():
            values.update(tuned.published(task, "ddis", "profile='ours', or every Langevin option"))
    else:
        if temperature is not None:
            raise ValueError("temperature: only the published profile has a Langevin temperature (eta)")
        values = {
            "num_steps": tuned.ours(task, "ddis")["num_steps"] if num_steps is None else num_steps,
            "langevin_steps": 100,
            "step_size": 1e-4,
            "weight": 1.0,
            "sigma_min": 0.01,
            "sigma_max": 80.0,
            "ode_steps": 5,
            "tau": 1e-3,
        }
    options = dict(given, ode_steps=ode_steps, sigma_min=sigma_min, sigma_max=sigma_max, tau=tau)
    values.update({k: v for k, v in options.items() if v is not None})
    if not published:
        values["ode_sigma_min"] = values["sigma_min"]  # ours: the clean estimate stops at sigma_min
    for name in ("num_steps", "ode_steps", "langevin_steps"):
        checks.positive_int(name, values[name])
    p = build_prior(task, prior, model, joint=False, noise=noise or ("rbf" if published else "grf"))
    readout = guidance.build_readout(task, p, forward, surrogate)
    if published:
        loss = guided.MaskedMSE(values["obs_scale"] / guided.state_std(task, p, readout.surrogate))
    else:
        loss = SquaredError()
    defaults = {k: float(values[k]) for k in ("step_size", "tau", "weight")}
    if published:
        defaults["temperature"] = float(values["temperature"])
    data_scale = guided.PUBLISHED_DATA_SCALE if published else 1.0
    return DDISSampler(
        task,
        defaults,
        p,
        readout,
        guided.ObservationObjective(readout, loss),
        profile,
        values["num_steps"],
        values["ode_steps"],
        values["langevin_steps"],
        float(values["sigma_min"]),
        float(values["sigma_max"]),
        float(values["ode_sigma_min"]),
        units=guided.units(p, data_scale),
        precision=precision,
        discrete_values=tuned.profile_discrete_values(task, profile),
    )


register("ddis", build, networks={"model": "prior", "surrogate": "surrogate"})
