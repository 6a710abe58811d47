"""DeepONet (Lu et al. 2021) with a convolutional branch net.

G(x)(p) = sum_k b_{c,k}(x) t_k(p) + beta_c for output channel c: the branch b is a
strided CNN over the input field followed by global average pooling and a linear map to
`(C_out, basis)`; the trunk t is an MLP of the query point's band-limited position
features sin/cos(2 pi p). Global pooling makes the branch approximately resolution
independent; the trunk is evaluated at any set of points.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr

from posteriorjax.nn.layers import _check_channels, periodic_coordinates


class DeepONet(eqx.Module):
    """`(C_in, H, W) -> (C_out, H, W)` evaluated on the input grid; `__call__(x, t=None, *, key=None)`."""

    convs: tuple[eqx.nn.Conv2d, ...]
    branch_out: eqx.nn.Linear
    trunk: eqx.nn.MLP
    bias: jax.Array
    in_channels: int = eqx.field(static=True)
    out_channels: int = eqx.field(static=True)
    basis: int = eqx.field(static=True)

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        *,
        width: int = 32,
        conv_layers: int = 3,
        basis: int = 64,
        trunk_depth: int = 3,
        key,
    ):
        keys = jr.split(key, conv_layers + 2)
        chans = [in_channels] + [width] * conv_layers
        self.convs = tuple(
            eqx.nn.Conv2d(chans[i], chans[i + 1], 3, stride=2, padding=1, key=keys[i])
            for i in range(conv_layers)
        )
        self.branch_out = eqx.nn.Linear(width, out_channels * basis, key=keys[-2])
        self.trunk = eqx.nn.MLP(4, basis, width, trunk_depth, activation=jax.nn.gelu, key=keys[-1])
        self.bias = jnp.zeros((out_channels,))
        self.in_channels, self.out_channels, self.basis = in_channels, out_channels, basis

    def __call__(self, x: jax.Array, t: jax.Array | None = None, *, key=None) -> jax.Array:
        del key
        _check_channels(x, self.in_channels)
        if t is not None:
            raise ValueError("t: DeepONet is not noise-conditioned; expected None")
        v = x
        for conv in self.convs:
            v = jax.nn.gelu(conv(v))
        b = self.branch_out(v.mean(axis=(-2, -1))).reshape(self.out_channels, self.basis)
        h, w = x.shape[-2:]
        pos = periodic_coordinates((h, w), x.dtype).reshape(4, -1).T
        trunk = jax.vmap(self.trunk)(pos)  # (H W, basis)
        return (b @ trunk.T).reshape(self.out_channels, h, w) / self.basis**0.5 + self.bias[:, None, None]
