"""``fundiff``: FunDiff (Wang et al. 2025) as published by PosteriorBench (`methods/fundiff.py`,
`training_fundiff/`): two function autoencoders and a latent conditional rectified flow.

Three networks, trained in order (`training.kinds`: ``fundiff_fae_target``,
``fundiff_fae_condition``, then ``fundiff_dit`` on the latents of the two frozen encoders):

  * target FAE (`TargetAutoencoder`): x_n = 0.5 (x - mean) / std (data std 0.5, published
    `scale`) -> z (L, D) -> x_n at query points. Loss (`AutoencoderLoss`): per step one input
    downsampling factor f from (1, 2, 4) (the encoder reads x_n[:, ::f, ::f]) and one set of
    n = H W / 4 grid points drawn without replacement for the whole batch (4096 of 128^2), then
    mean over (batch, points, channels) of (decoder(z, coords) - x_n(coords))^2.
  * condition FAE (`ConditionAutoencoder`): the masked observation grid c = [m * u_n, m]
    (u_n the state normalized to std 0.5, m the sensor mask) -> z_c -> the *full* u_n at query
    points; same loss with f = 1. In training m is `count` sensors drawn at random per example
    (published ``sparse_points``: `random_sparse_condition`) for point-mask observations and the
    task's own mask otherwise (columns, area averages broadcast on their blocks), on noise-free u.
  * DiT (`LatentFlow`, `nn.DiT`): rectified flow between z_0 ~ N(0, I) and z_1 = E_target(x_n),
    z_t = t z_1 + (1 - t) z_0, t ~ U(0, 1) per example; loss mean (v(z_t, t, E_cond(c)) - (z_1 - z_0))^2
    (`RectifiedFlowLoss`).

Sampling (`FunDiffSampler`): c from the observed y (normalized, at the mask), z_c = E_cond(c),
z_0 ~ N(0, I) of shape (L, D), `num_steps` (published 20; CCS 100) explicit Euler steps
z <- z + v(z, i / N, z_c) / N, i = 0..N-1, decode z at every grid point, denormalize, and for
Darcy project onto the binary values {3, 12} at the midpoint (published `discrete_values`).
No hyperparameter: the published method has no guidance weight or temperature.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr

from posteriorjax import checks, files, kinds, nn, rng
from posteriorjax.nn.fae import grid_coords
from posteriorjax.observations.operators import MaskObservation
from posteriorjax.samplers import tuned
from posteriorjax.samplers.base import AbstractSampler, register

DATA_SCALE = 0.5  # published target / condition normalization `scale`
QUERY_FRACTION = 0.25  # 4096 query points of a 128 x 128 grid
TARGET_DOWNSAMPLING = (1, 2, 4)  # published `input_downsample_factors` of the target FAE
CONDITION_DOWNSAMPLING = (1,)


class TargetAutoencoder(eqx.Module):
    """The target FAE: `encode(x_n (C_x, H, W)) -> (L, D)`, `decode(z, coords (N, 2)) -> (N, C_x)`."""

    net: nn.FunctionAutoencoder
    x_norm: nn.Normalizer  # std DATA_SCALE

    def encode(self, x_n):
        return self.net.encode(x_n)

    def decode(self, z, coords):
        return self.net.decode(z, coords)

    def __call__(self, x):
        """Reconstruction of a physical field `x (C_x, H, W)`."""
        return self.x_norm.denormalize(self.net(self.x_norm.normalize(x)))


class ConditionAutoencoder(eqx.Module):
    """The condition FAE: `encode(c (C_u + 1, H, W)) -> (L, D)`; decodes the full normalized state."""

    net: nn.FunctionAutoencoder
    u_norm: nn.Normalizer  # std DATA_SCALE

    def condition(self, y_grid, mask):
        """`(C_u + 1, H, W)`: [mask * normalized values on the grid, mask] (published masked grid)."""
        if y_grid.ndim != 3 or y_grid.shape[0] != self.u_norm.channels or mask.shape != y_grid.shape[-2:]:
            raise ValueError(
                f"y_grid, mask: expected ({self.u_norm.channels}, H, W) and (H, W), got {y_grid.shape}, "
                f"{mask.shape}"
            )
        m = mask.astype(y_grid.dtype)
        return jnp.concatenate([m * self.u_norm.normalize(y_grid), m[None]])

    def encode(self, c):
        return self.net.encode(c)

    def decode(self, z, coords):
        return self.net.decode(z, coords)


class LatentFlow(eqx.Module):
    """The DiT velocity over latents, with the digests of the autoencoders it was trained on."""

    net: nn.DiT
    target_digest: str = eqx.field(static=True)
    condition_digest: str = eqx.field(static=True)

    def __call__(self, z, t, z_condition):
        return self.net(z, t, z_condition)


def scaled(norm: nn.Normalizer) -> nn.Normalizer:
    return nn.Normalizer(norm.mean, norm.std, DATA_SCALE)


# -- training examples (`training.kinds`) -------------------------------------------------------


def training_condition(task, u_n, key):
    """The published training condition of a normalized noise-free state `u_n (C_u, H, W)`."""
    obs = task.observation
    h, w = task.state_shape[1:]
    if isinstance(obs, MaskObservation):  # `random_sparse_condition`: `count` random sensors
        idx = jr.choice(key, h * w, (obs.count,), replace=False)
        mask = jnp.zeros((h * w,), bool).at[idx].set(True).reshape(h, w)
        values = u_n
    else:  # fixed columns (`column_sparse_condition`) or block averages (`area_average_repeat`)
        mask = obs.mask
        values = obs.to_grid(obs(u_n), leading=(u_n.shape[0],))
    m = mask.astype(u_n.dtype)
    return jnp.concatenate([m * values, m[None]])


def _target_example(task, x_norm, u_norm, key):
    """(encoder input, decoder target): the normalized unknown twice (downsampled in the loss)."""
    x_n = scaled(x_norm).normalize(task.prior.sample(jr.split(key)[0]))
    return x_n, x_n


def _condition_example(task, x_norm, u_norm, key):
    """(masked condition grid, full normalized state)."""
    k_prior, k_mask = jr.split(key)
    u_n = scaled(u_norm).normalize(task.physics(task.prior.sample(k_prior)))
    return training_condition(task, u_n, k_mask), u_n


def _dit_example(task, x_norm, u_norm, key, *, target, condition):
    """(z_1, z_c): latents of the frozen encoders for one prior draw (normalizers theirs)."""
    k_prior, k_mask = jr.split(key)
    x = task.prior.sample(k_prior)
    u_n = condition.u_norm.normalize(task.physics(x))
    z1 = target.encode(target.x_norm.normalize(x))
    return z1, condition.encode(training_condition(task, u_n, k_mask))


# -- losses ---------------------------------------------------------------------------------------


class AutoencoderLoss(eqx.Module):
    """Published FAE loss on a batch (inputs (B, C_in, H, W), targets (B, C, H, W)); see module doc."""

    downsampling: tuple[int, ...] = eqx.field(static=True)
    query_fraction: float = eqx.field(static=True, default=QUERY_FRACTION)

    def __call__(self, model, key, batch):
        inputs, targets = batch
        b, c, h, w = targets.shape
        n = max(1, round(self.query_fraction * h * w))
        k_factor, k_points = jr.split(key)
        idx = jr.choice(k_points, h * w, (n,), replace=False)
        coords = grid_coords(h, w)[idx].astype(targets.dtype)
        values = jnp.moveaxis(targets.reshape(b, c, h * w)[:, :, idx], 1, 2)  # (B, n, C)

        def at(f):
            def loss(inputs):
                z = jax.vmap(model.net.encode)(inputs[:, :, ::f, ::f])
                return jnp.mean((jax.vmap(model.net.decode, (0, None))(z, coords) - values) ** 2)

            return loss

        branches = [at(f) for f in self.downsampling]
        if len(branches) == 1:
            return branches[0](inputs)
        return jax.lax.switch(jr.randint(k_factor, (), 0, len(branches)), branches, inputs)


class RectifiedFlowLoss(eqx.Module):
    """Published rectified-flow loss on a batch of latent pairs (z_1, z_c), each (B, L, D)."""

    def __call__(self, model, key, batch):
        z1, zc = batch
        k_noise, k_t = jr.split(key)
        z0 = rng.normal(k_noise, z1.shape, z1.dtype)
        t = jr.uniform(k_t, (z1.shape[0], 1, 1), z1.dtype)
        z_t = t * z1 + (1 - t) * z0
        v = jax.vmap(model)(z_t, t.reshape(-1), zc)
        return jnp.mean((v - (z1 - z0)) ** 2)


# -- the sampler ----------------------------------------------------------------------------------


class FunDiffSampler(AbstractSampler):
    """Euler integration of the latent flow from N(0, I), decoded on the grid (module doc)."""

    model: LatentFlow
    target: TargetAutoencoder
    condition: ConditionAutoencoder
    num_steps: int = eqx.field(static=True)

    @property
    def evaluations_per_sample(self) -> int:
        return self.num_steps

    def _sample(self, key, y_obs, num_samples, hparams):
        obs, dtype = self.task.observation, jnp.result_type(float)
        cond = self.condition.condition(
            obs.to_grid(y_obs.astype(dtype), leading=(self.condition.u_norm.channels,)), obs.mask
        )
        zc = self.condition.encode(cond)
        velocity = jax.vmap(self.model, (0, None, None))
        dt = 1.0 / self.num_steps

        def step(z, i):
            return z + velocity(z, i * dt, zc) * dt, None

        z0 = rng.normal(key, (num_samples, *zc.shape), dtype)
        z, _ = jax.lax.scan(step, z0, jnp.arange(self.num_steps, dtype=dtype))
        h, w = self.task.unknown_shape[1:]
        return jax.vmap(lambda zi: self.target.x_norm.denormalize(self.target.net.decode_grid(zi, h, w)))(z)


def build(
    task,
    *,
    model=None,
    target=None,
    condition=None,
    num_steps: int | None = None,
    discrete_values="published",
) -> FunDiffSampler:
    """`model`: a trained `LatentFlow` (kind ``fundiff_dit``); `target`, `condition`: the trained
    ``fundiff_fae_target`` / ``fundiff_fae_condition`` autoencoders it was trained on.

    `num_steps`: default the task's published value (`tuned`; 20, logged, elsewhere).

    `discrete_values`: ``"published"`` (the binary projection of the task's published profile,
    `tuned.published_discrete_values`: Darcy {3, 12}, none elsewhere), None, or a (low, high) pair
    (`AbstractSampler.discrete_values`).
    """
    if num_steps is None:
        num_steps = tuned.published_or_default(task, "fundiff")["num_steps"]
    num_steps = checks.positive_int("num_steps", num_steps)
    for name, value, cls in (
        ("model", model, LatentFlow),
        ("target", target, TargetAutoencoder),
        ("condition", condition, ConditionAutoencoder),
    ):
        if not isinstance(value, cls):
            raise ValueError(f"{name}: fundiff needs a trained {cls.__name__}, got {type(value).__name__}")
    cx, cu = task.unknown_shape[0], task.state_shape[0]
    if target.x_norm.channels != cx or condition.u_norm.channels != cu:
        raise ValueError(
            f"target, condition: channels (x {target.x_norm.channels}, u {condition.u_norm.channels}) do "
            f"not match task {task.name!r} (x {cx}, u {cu})"
        )
    digests = (files.parameter_digest(target), files.parameter_digest(condition))
    if digests != (model.target_digest, model.condition_digest):
        raise ValueError("target, condition: not the autoencoders the model (the DiT) was trained on")
    return FunDiffSampler(
        task,
        {},
        model,
        target,
        condition,
        num_steps,
        discrete_values=tuned.resolve_discrete_values(task, discrete_values),
    )


register(
    "fundiff",
    build,
    networks={"target": "fundiff_fae_target", "condition": "fundiff_fae_condition", "model": "fundiff_dit"},
)


# -- the network kinds (PosteriorBench `configs/training/*_fundiff_*.yml`) ----------------------
# Function autoencoders at full size as published; tiny: patch 2 at 16 x 16 (the same 8 x 8 patch
# grid as 16 at 128), widths and depths cut down. The DiT trains on latents of the frozen encoders.
FAE = {
    "full": dict(patch_size=16, grid_size=128, emb_dim=256, num_latents=64, depth=8, num_heads=8,
                 mlp_ratio=2, fourier_freq=10.0, period=False, dec_depth=4, dec_num_heads=8,
                 dec_emb_dim=256, dec_mlp_ratio=2, num_mlp_layers=2),
    "tiny": dict(patch_size=2, grid_size=16, emb_dim=32, num_latents=16, depth=2, num_heads=4,
                 mlp_ratio=2, fourier_freq=10.0, period=False, dec_depth=1, dec_num_heads=4,
                 dec_emb_dim=32, dec_mlp_ratio=2, num_mlp_layers=2),
}  # fmt: skip
DIT = {
    "full": dict(emb_dim=384, depth=16, num_heads=8, mlp_ratio=2.0),
    "tiny": dict(emb_dim=48, depth=2, num_heads=4, mlp_ratio=2.0),
}


def _fae_kind(name: str, channels, example, wrap, downsampling, uses_state: bool) -> kinds.Kind:
    return kinds.Kind(
        name,
        channels=channels,
        example=example,
        wrap=wrap,
        loss=lambda task, noise, d: AutoencoderLoss(downsampling),
        evaluate=kinds.loss_evaluation("eval_reconstruction_mse"),
        models={scale: ("fae", options) for scale, options in FAE.items()},
        steps={"tiny": kinds.TINY_STEPS, "full": 100_000},
        uses_state=uses_state,
        observation_noise=False,  # clean fields of the prior and the physics
    )


def _dit_channels(task, *, target, condition):
    if target.net.latent_shape != condition.net.latent_shape:
        raise ValueError(
            f"inputs: the target and condition latents must have one shape (the DiT adds them token by "
            f"token), got {target.net.latent_shape} and {condition.net.latent_shape}"
        )
    return (target.net.latent_shape[1],) * 2


kinds.register(
    _fae_kind(
        "fundiff_fae_target",
        channels=lambda task: (kinds.x_channels(task), kinds.x_channels(task)),
        example=_target_example,
        wrap=lambda net, x_norm, u_norm, cfg: TargetAutoencoder(net, scaled(x_norm)),
        downsampling=TARGET_DOWNSAMPLING,
        uses_state=False,
    )
)
kinds.register(
    _fae_kind(
        "fundiff_fae_condition",
        channels=lambda task: (kinds.u_channels(task) + 1, kinds.u_channels(task)),
        example=_condition_example,
        wrap=lambda net, x_norm, u_norm, cfg: ConditionAutoencoder(net, scaled(u_norm)),
        downsampling=CONDITION_DOWNSAMPLING,
        uses_state=True,
    )
)
kinds.register(
    kinds.Kind(
        "fundiff_dit",
        channels=_dit_channels,
        example=_dit_example,
        wrap=lambda net, x_norm, u_norm, cfg: LatentFlow(
            net, files.parameter_digest(cfg.inputs["target"]), files.parameter_digest(cfg.inputs["condition"])
        ),
        loss=lambda task, noise, d: RectifiedFlowLoss(),
        evaluate=kinds.loss_evaluation("eval_flow_matching_loss"),
        models={scale: ("dit", options) for scale, options in DIT.items()},
        steps={"tiny": kinds.TINY_STEPS, "full": 117_188},  # published learning rate 1e-3 and no EMA: not
        # `generative` (learning rate 1e-3, EMA 0.999 at full scale)
        uses_state=True,
        observation_noise=False,  # latents of clean fields
        inputs={"target": "fundiff_fae_target", "condition": "fundiff_fae_condition"},
    )
)
