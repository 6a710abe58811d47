"""ECI sampling (Cheng et al. 2024): gradient-free flow matching with hard replacement of observed entries.

Two profiles share the mixing loop below and differ in the velocity, the noise and the t grid.

``profile="ours"`` (default). Flow matching interpolates x_t = t x_1 + (1 - t) eps (t: 0 noise
-> 1 data, eps from the noise generator) and learns the velocity v(x, t) = (E[x_1 | x_t] - x_t)
/ (1 - t). An EDM denoiser gives it in closed form: x_t / t = x_1 + ((1 - t) / t) eps, so

    E[x_1 | x_t] = D(x_t / t, sigma = (1 - t) / t),

and any joint (unknown, state) `EDMDenoiser` (FNO backbone as published) serves as the
velocity field. Per time step t_n -> t_{n+1} (uniform grid on [t_0, 1]):

    repeat `mixing` times:           (the last repetition moves to t_{n+1})
        x_1 = x + (1 - t) v(x, t)                  extrapolate
        x_1[state, observed cells] = y             hard replacement (the constraint)
        x = t' x_1 + (1 - t') eps',  eps' fresh     re-interpolate (t' = t_n, then t_{n+1})

and the final x_1 (observed entries replaced) is returned. No gradients and no likelihood:
the observations are enforced exactly (in normalized state units), whatever the noise level.
The constraint (`ECISampler.replace`, the published `SparseValueConstraint` /
`AreaAverageConstraint`): point values and well columns (`MaskObservation`,
`ColumnObservation`) overwrite the observed cells; block averages (`AveragePool`) add to each
block the difference between its observed and its current mean. Needs a learned joint prior
(the oracle prior diffuses the unknown only, which carries no observed entries).
Cost per sample: (steps - 1) x mixing + 1 network evaluations.

``profile="published"`` — `posteriorbench/methods/eci.py`, `training_eci/flow.py` (`eci_sample`),
`configs/evaluations/eci_<dataset>.yaml`: the velocity is a flow-matching network `FlowVelocity`
trained on v = x_1 - eps (kind ``flow``; published an FNO, 32 modes, 128 hidden, 6 layers, on
data of std 0.5), the base noise is the Matern nu = 1/2 GP with lengthscale 1e-3
(`diffusion.MaternNoise`, white in effect), and the t grid is t_n = n / N, n = 0 .. N - 1,
starting at 0. Each of the N steps mixes `mixing` times

        x_1 = x + (1 - t_n) v(x, t_n);  x_1[state, observed] = y;  x = t' x_1 + (1 - t') eps'

with t' = t_n on the inner mixes and t_{n+1} on the last; x at t_N = 1 is the last x_1 and is
returned. eps' is redrawn on the mixes m = 1, 2, ... (counted over the whole trajectory) with
m % resample_step == 0 and kept otherwise, starting from the initial latent x_0 itself
(`eci_sample`'s `resample_step`). 200 steps everywhere; mixing 5 (Darcy) / 1 (Poisson, CCS,
LTMI); resample_step 1 (Darcy, Poisson: fresh every mix) / 5 (CCS, LTMI).
Cost per sample: N x mixing network evaluations.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr

from posteriorjax import checks, diffusion, kinds, nn
from posteriorjax.nn import published
from posteriorjax.observations import AveragePool, ColumnObservation, MaskObservation
from posteriorjax.samplers import guided, tuned
from posteriorjax.samplers.base import AbstractSampler, register
from posteriorjax.samplers.denoisers import DiffusionPrior, build_prior

CONSTRAINED = (MaskObservation, ColumnObservation, AveragePool)  # observations `replace` handles
PUBLISHED_STEPS = 200


class FlowVelocity(eqx.Module):
    """Flow-matching velocity `v(x_t (C, H, W), t) -> (C, H, W)` over the normalized joint stack.

    Trained (`flow_matching_loss`) on x_t = t x_1 + (1 - t) eps, target x_1 - eps, t ~ U(0, 1),
    x_1 the normalized (unknown, state) stack, eps from `noise`.

    Attributes:
      net: a network `(C, H, W), t -> (C, H, W)` taking the flow time as its noise input.
      normalizer: normalizer of the (unknown, state) stack (published scale 0.5).
      noise: the base noise generator (published `diffusion.MaternNoise()`).
      unknown_channels: C_x, the leading channels that are the unknown.
    """

    net: eqx.Module
    normalizer: nn.Normalizer
    noise: eqx.Module
    unknown_channels: int = eqx.field(static=True)

    @property
    def channels(self) -> int:
        return self.normalizer.channels

    def __call__(self, x_t: jax.Array, t, *, key=None) -> jax.Array:
        return self.net(x_t, jnp.asarray(t, x_t.dtype), key=key)

    def unknown(self, x_n: jax.Array) -> jax.Array:
        """Physical unknown `(C_x, H, W)` of a normalized stack."""
        return self.normalizer.denormalize(x_n)[: self.unknown_channels]


def flow_matching_loss(model: FlowVelocity, key, x_n: jax.Array) -> jax.Array:
    """Flow-matching loss of one normalized joint example `x_n (C, H, W)` (the published `get_loss`)."""
    k_t, k_eps = jr.split(key)
    t = jr.uniform(k_t, (), x_n.dtype)
    eps = model.noise.sample(k_eps, x_n.shape).astype(x_n.dtype)
    v = model(t * x_n + (1 - t) * eps, t)
    return jnp.mean((v - (x_n - eps)) ** 2)


class FlowMatchingLoss(eqx.Module):
    """`flow_matching_loss` averaged over a batch `(B, C, H, W)` (the training loss of kind ``flow``)."""

    def __call__(self, model, key, batch):
        keys = jr.split(key, batch.shape[0])
        return jnp.mean(jax.vmap(lambda x, k: flow_matching_loss(model, k, x))(batch, keys))


class ECISampler(AbstractSampler):
    """Flow matching with hard replacement (see module doc)."""

    prior: DiffusionPrior | FlowVelocity  # FlowVelocity for the published profile
    num_steps: int = eqx.field(static=True)
    mixing: int = eqx.field(static=True)
    t_min: float = eqx.field(static=True)
    profile: str = eqx.field(static=True, default="ours")
    resample_step: int = eqx.field(static=True, default=1)

    @property
    def evaluations_per_sample(self) -> int:
        if self.profile == "published":
            return self.num_steps * self.mixing
        return (self.num_steps - 1) * self.mixing + 1

    def replace(self, x1: jax.Array, y_obs: jax.Array) -> jax.Array:
        """The hard constraint on the state channels of a normalized joint `x1 (C, H, W)`: the
        normalized observations written into the observed cells (points, columns), or each
        block shifted by (observed - current) block mean (`AveragePool`; module doc)."""
        cx, obs = self.prior.unknown_channels, self.task.observation
        cu = x1.shape[0] - cx
        norm = self.prior.normalizer
        mean, std = (jnp.asarray(v[cx:], x1.dtype)[:, None, None] for v in (norm.mean, norm.std))
        y_n = (obs.to_grid(y_obs.astype(x1.dtype), leading=(cu,)) - mean) * (norm.scale / std)
        if isinstance(obs, AveragePool):  # to_grid broadcasts each block mean over its block
            return x1.at[cx:].add(y_n - obs.to_grid(obs(x1[cx:]), leading=(cu,)))
        return x1.at[cx:].set(jnp.where(obs.mask, y_n, x1[cx:]))

    def noise_draw(self, step, mix):
        """Index of the base-noise draw used at mix `mix` of step `step` (published profile):
        draw 0 is the initial latent, a new one starts at every `resample_step`-th mix."""
        # mixes are counted from 1 over the whole trajectory (`eci_sample`), draw 0 being the latent
        return (step * self.mixing + mix + 1) // self.resample_step

    def published_step(self, x, t, t_next, noises, y_obs) -> jax.Array:
        """One published step t -> t_next of a normalized joint state `x (C, H, W)`; `noises`
        `(mixing, C, H, W)` the fresh base noise of each mix (module doc)."""

        def mix(x, inp):
            j, eps = inp
            t_to = jnp.where(j == self.mixing - 1, t_next, t)
            x1 = self.replace(x + (1 - t) * self.prior(x, t), y_obs)
            return (t_to * x1 + (1 - t_to) * eps).astype(x.dtype), None

        return jax.lax.scan(mix, x, (jnp.arange(self.mixing), noises))[0]

    def _sample_published(self, key, y_obs, num_samples: int) -> jax.Array:
        shape = (self.prior.channels, *self.task.unknown_shape[1:])
        dtype = jnp.result_type(float)
        # the grid starts at t = 0: the velocity network has no 1 / t (ours goes through D(x / t))
        ts = jnp.arange(self.num_steps + 1, dtype=dtype) / self.num_steps

        def one(k):
            def draw(j):  # base-noise draw j of this sample (draw 0: the initial latent)
                return self.prior.noise.sample(jr.fold_in(k, j), shape).astype(dtype)

            def step(x, inputs):
                n, t, t_next = inputs
                noises = jax.vmap(lambda j: draw(self.noise_draw(n, j)))(jnp.arange(self.mixing))
                return self.published_step(x, t, t_next, noises, y_obs), None

            inputs = (jnp.arange(self.num_steps), ts[:-1], ts[1:])
            return jax.lax.scan(step, draw(0), inputs)[0]

        return jax.vmap(one)(jr.split(key, num_samples))

    def sample_joint(self, key, y_obs, num_samples: int) -> jax.Array:
        """Joint normalized states `(num_samples, C_x + C_u, H, W)` (observed entries exact)."""
        if self.profile == "published":
            return self._sample_published(key, y_obs, num_samples)
        shape = (self.prior.channels, *self.task.unknown_shape[1:])
        ts = jnp.linspace(self.t_min, 1.0, self.num_steps + 1)
        noise = self.prior.noise

        def x1_of(x, t):
            return self.replace(self.prior.denoise(x / t, (1 - t) / t), y_obs)

        def one(k):
            k0, ks = jr.split(k)
            x = (1 - ts[0]) * noise.sample(k0, shape)  # x_t at t_min without its unknown t_min x_1

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

            # the steps end at t_{N-1} and the answer is the x_1 extrapolated from there: at t = 1
            # the denoiser's level (1 - t) / t would be 0
            x, _ = jax.lax.scan(step, x, (ts[:-2], ts[1:-1], jr.split(ks, self.num_steps - 1)))
            return x1_of(x, ts[-2])

        return jax.vmap(one)(jr.split(key, num_samples))

    def _sample(self, key, y_obs, num_samples, hparams):
        del hparams
        return jax.vmap(self.prior.unknown)(self.sample_joint(key, y_obs, num_samples))


def build(
    task,
    *,
    prior: str = "learned",
    model=None,
    num_steps: int = PUBLISHED_STEPS,
    mixing: int | None = None,
    t_min: float | None = None,
    noise: str | None = None,
    profile: str = "ours",
    resample_step: int | None = None,
) -> ECISampler:
    """`task.observation` must be point values, well columns or block averages (`CONSTRAINED`).
    `model`: a joint (unknown, state) `EDMDenoiser` (``profile="ours"``, with `t_min` default 1e-3
    and base `noise` default ``"grf"``) or a `FlowVelocity` (``profile="published"``: its own noise,
    t grid from 0; `t_min` and `noise` do not apply; `resample_step` default per task, 1 for a task
    without published values). Our profile draws fresh noise every mix (`resample_step` 1)."""
    guided.check_profile(profile, "eci")
    num_steps = checks.positive_int("num_steps", num_steps)
    if num_steps < 2:
        raise ValueError(f"num_steps: expected at least 2 steps, got {num_steps}")
    mixing = tuned.published(task, "eci", "mixing")["mixing"] if mixing is None else mixing
    mixing = checks.positive_int("mixing", mixing)
    if resample_step is None:
        resample_step = 1  # ours: fresh noise every mix; published: the task's dataset's value
        if profile == "published":
            resample_step = tuned.published_or_default(task, "eci")["resample_step"]
    resample_step = checks.positive_int("resample_step", resample_step)
    if profile != "published" and resample_step != 1:
        raise ValueError(f"resample_step: our ECI draws fresh noise every mix (1), got {resample_step}")
    if not isinstance(task.observation, CONSTRAINED):
        raise ValueError(
            "task: ECI constrains the observed state, which needs point values, well columns or block "
            f"averages ({', '.join(c.__name__ for c in CONSTRAINED)}); {task.name!r} observes with "
            f"{type(task.observation).__name__}"
        )
    if prior == "oracle":
        raise ValueError(
            "prior: ECI needs a learned joint (unknown, state) model; 'oracle' diffuses the unknown only"
        )
    if profile == "published":
        return _build_published(
            task,
            prior=prior,
            model=model,
            num_steps=num_steps,
            mixing=mixing,
            t_min=t_min,
            noise=noise,
            resample_step=resample_step,
        )
    t_min = 1e-3 if t_min is None else t_min
    if not 0 < t_min < 1:
        raise ValueError(f"t_min: expected a value in (0, 1), got {t_min!r}")
    p = build_prior(task, prior, model, joint=True, noise="grf" if noise is None else noise)
    return ECISampler(task, {}, p, num_steps, mixing, float(t_min))


def _build_published(task, *, prior, model, num_steps, mixing, t_min, noise, resample_step) -> ECISampler:
    if t_min is not None:
        raise ValueError(f"t_min: the published ECI t grid starts at 0 (leave t_min unset), got {t_min!r}")
    if noise is not None:
        raise ValueError(
            f"noise: the published ECI uses the FlowVelocity's noise (leave unset), got {noise!r}"
        )
    if prior != "learned":
        raise ValueError(f"prior: the published ECI needs prior='learned' and a FlowVelocity, got {prior!r}")
    if not isinstance(model, FlowVelocity):
        raise ValueError(
            f"model: the published ECI needs a trained FlowVelocity (kind 'flow'), got {type(model).__name__}"
        )
    channels = task.unknown_shape[0] + task.state_shape[0]
    if model.channels != channels or model.unknown_channels != task.unknown_shape[0]:
        raise ValueError(
            f"model: expected a joint (unknown, state) velocity of {channels} channels with "
            f"{task.unknown_shape[0]} unknown, got {model.channels} with {model.unknown_channels}"
        )
    if not isinstance(model.noise, diffusion.MaternNoise | diffusion.WhiteNoise):
        raise ValueError(
            "model: the published ECI velocity is trained with MaternNoise (or white), got "
            f"{type(model.noise).__name__}"
        )
    return ECISampler(
        task,
        {},
        model,
        num_steps,
        mixing,
        0.0,
        "published",
        resample_step,
        discrete_values=tuned.published_discrete_values(task),
    )


register("eci", build, networks={"model": "joint"})

# The published ECI velocity (`training_eci/flow.py`, `configs/training/*_eci_*.yml`): neuralop's FNO
# with 32 modes, 128 hidden channels, 6 layers, lifting / projection ratio 4, domain padding 0.1 and
# a 32-channel sinusoidal embedding of t concatenated to the input (`nn.published` "eci_velocity"),
# trained for 58594 steps on data of std 0.5 with Matern 1/2 base noise (set `diffusion.noise =
# "matern"`, `data_scale = 0.5`).
kinds.register(
    kinds.Kind(
        "flow",
        channels=lambda task: (kinds.x_channels(task) + kinds.u_channels(task),) * 2,
        example=kinds.joint_example,
        wrap=lambda net, x_norm, u_norm, cfg: FlowVelocity(
            net,
            x_norm.concat(u_norm),
            diffusion.MaternNoise() if cfg.noise is None else cfg.noise,
            x_norm.channels,
        ),
        loss=lambda task, noise, d: FlowMatchingLoss(),
        evaluate=kinds.loss_evaluation("eval_flow_matching_loss"),
        models={"tiny": kinds.TINY_DENOISER, "full": published.get("eci_velocity")},
        steps={"tiny": kinds.TINY_STEPS, "full": 58_594},
        generative=True,
        edm=True,  # rescaled to `data_scale` like the EDM kinds (published 0.5)
        observation_noise=False,  # (unknown, clean state) pairs
    )
)
