"""DeepONet (Lu et al. 2021) with a convolutional branch net.

G(x)(p) = sum_k b_{c,k}(x) t_k(p) / sqrt(basis) + beta_c for output channel c: the branch b is a
strided CNN over the input field (3x3 convolutions, stride 2, GELU) followed by a map to
`(C_out, basis)`; the trunk t is an MLP of the query point's band-limited position
features sin/cos(2 pi p), evaluated at any set of points.

Two branch heads:
  ``branch="pool"``  global average pooling of the CNN features, then a linear map. The
                     branch is approximately resolution independent but location blind.
  ``branch="conv"``  the spatial-CNN branch of PDE-OBS: the CNN features are area-averaged
                     onto a fixed `grid x grid` layout, flattened and mapped by an MLP with
                     `hidden` units, so the coefficients keep where the observations lie.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr

from posteriorjax import checks
from posteriorjax.nn.layers import check_channels, periodic_coordinates

BRANCHES = ("pool", "conv")


class DeepONet(eqx.Module):
    """`(C_in, H, W) -> (C_out, H, W)` evaluated on the input grid; `__call__(x, t=None, *, key=None)`.

    Attributes:
      width: branch CNN channels; conv_layers: stride-2 convolutions in the branch.
      basis: number of branch/trunk basis functions (the latent size).
      hidden: width of the trunk MLP and of the ``conv`` branch MLP (default `width`).
      branch: ``"pool"`` or ``"conv"`` (see the module docstring); grid: the ``conv`` layout size.
    """

    convs: tuple[eqx.nn.Conv2d, ...]
    branch_out: eqx.nn.Linear | eqx.nn.MLP
    trunk: eqx.nn.MLP
    bias: jax.Array
    in_channels: int = eqx.field(static=True)
    out_channels: int = eqx.field(static=True)
    basis: int = eqx.field(static=True)
    branch: str = eqx.field(static=True)
    grid: int = eqx.field(static=True)

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        *,
        width: int = 32,
        conv_layers: int = 3,
        basis: int = 64,
        trunk_depth: int = 3,
        hidden: int | None = None,
        branch: str = "pool",
        grid: int = 4,
        key,
    ):
        checks.in_choices("branch", branch, BRANCHES)
        checks.positive_ints(grid=grid, conv_layers=conv_layers)
        hidden = width if hidden is None else hidden
        keys = jr.split(key, conv_layers + 2)
        chans = [in_channels] + [width] * conv_layers
        self.convs = tuple(
            eqx.nn.Conv2d(chans[i], chans[i + 1], 3, stride=2, padding=1, key=keys[i])
            for i in range(conv_layers)
        )
        if branch == "pool":
            self.branch_out = eqx.nn.Linear(width, out_channels * basis, key=keys[-2])
        else:
            self.branch_out = eqx.nn.MLP(
                width * grid * grid, out_channels * basis, hidden, 2, activation=jax.nn.gelu, key=keys[-2]
            )
        self.trunk = eqx.nn.MLP(4, basis, hidden, trunk_depth, activation=jax.nn.gelu, key=keys[-1])
        self.bias = jnp.zeros((out_channels,))
        self.in_channels, self.out_channels, self.basis = in_channels, out_channels, basis
        self.branch, self.grid = branch, int(grid)

    def _coefficients(self, v: jax.Array) -> jax.Array:
        if self.branch == "pool":
            return self.branch_out(v.mean(axis=(-2, -1)))
        c, h, w = v.shape
        g = self.grid
        if h % g or w % g:
            raise ValueError(
                f"x: the branch CNN gives a {(h, w)} feature grid, not divisible by grid={g}; "
                f"expected H, W divisible by {g * 2 ** len(self.convs)}"
            )
        return self.branch_out(v.reshape(c, g, h // g, g, w // g).mean(axis=(2, 4)).reshape(-1))

    def __call__(self, x: jax.Array, t: jax.Array | None = None, *, key=None) -> jax.Array:
        del key
        check_channels(x, self.in_channels)
        if t is not None:
            raise ValueError("t: DeepONet is not noise-conditioned; expected None")
        v = x
        for conv in self.convs:
            v = jax.nn.gelu(conv(v))
        b = self._coefficients(v).reshape(self.out_channels, self.basis)
        h, w = x.shape[-2:]
        pos = periodic_coordinates((h, w), x.dtype).reshape(4, -1).T
        trunk = jax.vmap(self.trunk)(pos)  # (H W, basis)
        return (b @ trunk.T).reshape(self.out_channels, h, w) / self.basis**0.5 + self.bias[:, None, None]
