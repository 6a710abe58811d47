"""Networks in physical units: per-channel normalization, the forward surrogate and the inverse network.

Networks train on normalized fields z_c -> (z_c - mean_c) / std_c. The unknown's statistics
come from the task (`task.field_stats`); the state's are not stored on a task and are
estimated once from `num_draws` prior draws solved with the task physics, drawn from
`jax.random.key(seed)` (`state_statistics`), then kept in the model as static floats.

  * `Surrogate`:  x (C_x, H, W) -> u (C_u, H, W), an operator regressor of the physics.
  * `InverseNet`: (observations on the grid (C_u, H, W), mask (H, W)) -> x (C_x, H, W); its
    input is [mask * normalized values, mask]. With dropout, passing a `key` at inference gives
    MC-dropout samples; `key=None` is the deterministic (eval-mode) prediction.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr

from posteriorjax import checks


class Normalizer(eqx.Module):
    """Per-channel affine normalization z -> scale (z - mean) / std on `(..., C, H, W)` fields.

    `scale` is the std of the normalized data: 1 here by default, 0.5 in the published
    FunDPS / DiffusionPDE models (`ModelNormalizer` scale 0.5 with EDM sigma_data = 0.5).
    """

    mean: tuple[float, ...] = eqx.field(static=True, converter=lambda v: tuple(float(t) for t in v))
    std: tuple[float, ...] = eqx.field(static=True, converter=lambda v: tuple(float(t) for t in v))
    scale: float = eqx.field(static=True, default=1.0, converter=float)

    def __check_init__(self):
        if len(self.mean) != len(self.std) or not self.mean:
            raise ValueError(f"mean, std: expected equal non-zero lengths, got {self.mean}, {self.std}")
        if not all(s > 0 for s in self.std):
            raise ValueError(f"std: expected positive per-channel stds, got {self.std}")
        checks.positive("scale", self.scale)  # the normalized data's std

    @property
    def channels(self) -> int:
        return len(self.mean)

    def _arrays(self, dtype):
        shape = (-1, 1, 1)
        return jnp.asarray(self.mean, dtype).reshape(shape), jnp.asarray(self.std, dtype).reshape(shape)

    def _check(self, z, name):
        if z.ndim < 3 or z.shape[-3] != self.channels:
            raise ValueError(f"{name}: expected {self.channels} channels at axis -3, got shape {z.shape}")

    def normalize(self, z: jax.Array) -> jax.Array:
        self._check(z, "z")
        m, s = self._arrays(z.dtype)
        return (z - m) * (self.scale / s)

    def denormalize(self, x: jax.Array) -> jax.Array:
        self._check(x, "x")
        m, s = self._arrays(x.dtype)
        return x * (s / self.scale) + m

    def concat(self, other: Normalizer) -> Normalizer:
        """The normalizer of the channel stack [self; other] (joint (unknown, state) fields)."""
        if self.scale != other.scale:
            raise ValueError(f"other: expected the same scale {self.scale}, got {other.scale}")
        return Normalizer(self.mean + other.mean, self.std + other.std, self.scale)

    def rescaled(self, scale: float) -> Normalizer:
        """The same statistics with normalized-data std `scale`."""
        return Normalizer(self.mean, self.std, scale)


def field_normalizer(task) -> Normalizer:
    """Normalizer of the task's unknown from `task.field_stats`, broadcast over its channels."""
    mean, std = task.field_stats
    c = task.unknown_shape[0]
    return Normalizer((mean,) * c, (std,) * c)


def state_statistics(task, num_draws: int = 256, seed: int = 0, chunk: int = 32) -> Normalizer:
    """Per-channel mean and std of the state u = solve(x), x ~ prior, from `num_draws` draws.

    Draw i uses `fold_in(key(seed), i)`; the estimate is pooled over draws and grid points.
    """
    if not isinstance(num_draws, int) or num_draws < 2:
        raise ValueError(f"num_draws: expected an integer >= 2, got {num_draws!r}")
    base = jr.key(seed)

    def one(i):
        u = task.physics(task.prior.sample(jr.fold_in(base, i)))
        return u.mean(axis=(-2, -1)), (u**2).mean(axis=(-2, -1))

    m1, m2 = jax.jit(lambda idx: jax.lax.map(one, idx, batch_size=chunk))(jnp.arange(num_draws))
    mean = m1.astype(jnp.float64 if m1.dtype == jnp.float64 else jnp.float32).mean(0)
    var = jnp.maximum(m2.mean(0) - mean**2, 0.0)
    std = jnp.sqrt(var)
    if not bool(jnp.all(std > 0)):
        raise ValueError(f"task: state channels with zero variance over {num_draws} prior draws: std={std}")
    return Normalizer([float(v) for v in mean], [float(v) for v in std])


def _check_field(z, channels: int, shape: tuple[int, int] | None, name: str):
    if z.ndim != 3 or z.shape[0] != channels or (shape is not None and z.shape[-2:] != shape):
        expected = f"({channels}, H, W)" if shape is None else f"({channels}, {shape[0]}, {shape[1]})"
        raise ValueError(f"{name}: expected a field {expected}, got shape {z.shape}")


class Surrogate(eqx.Module):
    """Learned forward map `x (C_x, H, W) -> u (C_u, H, W)` in physical units."""

    net: eqx.Module
    x_norm: Normalizer
    u_norm: Normalizer

    def __call__(self, x: jax.Array, *, key=None) -> jax.Array:
        _check_field(x, self.x_norm.channels, None, "x")
        return self.u_norm.denormalize(self.net(self.x_norm.normalize(x), key=key))

    def normalized(self, x_n: jax.Array, *, key=None) -> jax.Array:
        """The network on normalized units (what the training loss sees)."""
        return self.net(x_n, key=key)


class InverseNet(eqx.Module):
    """Direct inverse `(y_grid (C_u, H, W), mask (H, W)) -> x (C_x, H, W)` in physical units."""

    net: eqx.Module
    x_norm: Normalizer
    u_norm: Normalizer

    def inputs(self, y_grid: jax.Array, mask: jax.Array) -> jax.Array:
        """Network input `(C_u + 1, H, W)`: [mask * normalized observations, mask]."""
        _check_field(y_grid, self.u_norm.channels, None, "y_grid")
        if mask.shape != y_grid.shape[-2:]:
            raise ValueError(f"mask: expected shape {y_grid.shape[-2:]}, got {mask.shape}")
        m = mask.astype(y_grid.dtype)
        return jnp.concatenate([m * self.u_norm.normalize(y_grid), m[None]])

    def normalized(self, y_grid: jax.Array, mask: jax.Array, *, key=None) -> jax.Array:
        return self.net(self.inputs(y_grid, mask), key=key)

    def __call__(self, y_grid: jax.Array, mask: jax.Array, *, key=None) -> jax.Array:
        return self.x_norm.denormalize(self.normalized(y_grid, mask, key=key))
