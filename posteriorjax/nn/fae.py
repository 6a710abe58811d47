"""The FunDiff function autoencoder (Wang et al. 2025, as in PosteriorBench `training_fundiff/models.py`).

Encoder `(C_in, H, W) -> z (num_latents, emb_dim)`:
  1. patch embedding: a `patch_size` x `patch_size` convolution of stride `patch_size` (Glorot-
     uniform kernel over its `(p, p, C_in, emb_dim)` shape, zero bias), tokens row-major over the
     `(H/p, W/p)` patch grid;
  2. plus the fixed 2-D sine-cosine position embedding of the `grid_size / p` patch grid,
     bilinearly resized to `(H/p, W/p)` (so inputs at other resolutions are encoded);
  3. a Perceiver block: `num_latents` learned latent tokens (init N(0, 0.01^2)) updated by two
     cross-attention blocks (MLP ratio 1) reading the patch tokens, then a LayerNorm;
  4. a LayerNorm, `depth` self-attention blocks (MLP ratio `mlp_ratio`), a final LayerNorm.

Decoder `(z (L, emb_dim), coords (N, 2) in [0, 1]^2) -> (N, out_dim)`, each coordinate decoded on
its own (attention is per query token, so N queries at once equal N one-query decodes):
  1. optional periodic embedding (cos 2 pi x, sin 2 pi x per axis), then random Fourier features
     [cos(x B), sin(x B)], B `(2, dec_emb_dim / 2)` ~ N(0, fourier_freq^2), learned;
  2. the latent tokens through a dense to `dec_emb_dim`;
  3. `dec_depth` cross-attention blocks (query: the coordinate token; keys: the latent tokens);
  4. a LayerNorm and an MLP of `num_mlp_layers` GELU layers of width `dec_emb_dim` and a dense
     to `out_dim` (LeCun init).
All LayerNorms have eps 1e-5. `FunctionAutoencoder` pairs the two with the `nn` call convention
`(C_in, H, W) -> (C_out, H, W)` (decode on the cell-corner grid `linspace(0, 1, H) x linspace(0, 1, W)`,
the published `make_coord_grid`).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr

from posteriorjax.nn.transformer import CrossAttnBlock, Dense, LayerNorm, sincos_2d

EPS = 1e-5


def _pair(value, name: str) -> tuple[int, int]:
    pair = (value, value) if isinstance(value, int) else tuple(int(v) for v in value)
    if len(pair) != 2 or min(pair) < 1:
        raise ValueError(f"{name}: expected a positive int or a pair of them, got {value!r}")
    return pair


def grid_coords(height: int, width: int) -> jax.Array:
    """`(H * W, 2)` query coordinates (y, x) of the grid, row-major, corners at 0 and 1."""
    yy, xx = jnp.meshgrid(jnp.linspace(0.0, 1.0, height), jnp.linspace(0.0, 1.0, width), indexing="ij")
    return jnp.stack([yy.reshape(-1), xx.reshape(-1)], axis=-1)


class Encoder(eqx.Module):
    """`(C_in, H, W) -> (num_latents, emb_dim)` (see module doc)."""

    patch_kernel: jax.Array  # (p, p, C_in, emb_dim)
    patch_bias: jax.Array
    latents: jax.Array
    perceiver: list
    perceiver_norm: LayerNorm
    norm: LayerNorm
    blocks: list
    final_norm: LayerNorm
    patch_size: tuple[int, int] = eqx.field(static=True)
    grid_size: tuple[int, int] = eqx.field(static=True)

    def __init__(
        self, in_channels, *, patch_size, grid_size, emb_dim, num_latents, depth, num_heads, mlp_ratio, key
    ):
        self.patch_size, self.grid_size = _pair(patch_size, "patch_size"), _pair(grid_size, "grid_size")
        if any(g % p for g, p in zip(self.grid_size, self.patch_size, strict=True)):
            raise ValueError(f"grid_size: {self.grid_size} is not divisible by patch_size {self.patch_size}")
        kp, kl, kc, kb = jr.split(key, 4)
        shape = (*self.patch_size, int(in_channels), int(emb_dim))
        self.patch_kernel = jax.nn.initializers.xavier_uniform()(kp, shape, jnp.float32)
        self.patch_bias = jnp.zeros((emb_dim,), jnp.float32)
        self.latents = 0.01 * jr.normal(kl, (num_latents, emb_dim), jnp.float32)
        self.perceiver = [CrossAttnBlock(emb_dim, num_heads, 1, key=k, eps=EPS) for k in jr.split(kc, 2)]
        self.perceiver_norm = LayerNorm(emb_dim, EPS)
        self.norm = LayerNorm(emb_dim, EPS)
        self.blocks = [
            CrossAttnBlock(emb_dim, num_heads, mlp_ratio, key=k, eps=EPS, cross=False)
            for k in jr.split(kb, depth)
        ]
        self.final_norm = LayerNorm(emb_dim, EPS)

    @property
    def latent_shape(self) -> tuple[int, int]:
        return tuple(self.latents.shape)

    def __call__(self, x: jax.Array) -> jax.Array:
        (ph, pw), (c, h, w) = self.patch_size, x.shape
        if x.ndim != 3 or c != self.patch_kernel.shape[2] or h % ph or w % pw:
            raise ValueError(
                f"x: expected ({self.patch_kernel.shape[2]}, H, W) with H, W divisible by the patch "
                f"size {self.patch_size}, got {x.shape}"
            )
        patches = x.reshape(c, h // ph, ph, w // pw, pw)
        tokens = jnp.einsum("cyawb,abcd->ywd", patches, self.patch_kernel.astype(x.dtype))
        gh, gw = self.grid_size[0] // ph, self.grid_size[1] // pw
        pos = sincos_2d(tokens.shape[-1], (gh, gw)).reshape(gh, gw, -1)
        pos = jax.image.resize(pos, (h // ph, w // pw, pos.shape[-1]), method="bilinear")
        tokens = tokens + self.patch_bias.astype(x.dtype) + pos.astype(x.dtype)
        tokens = tokens.reshape(-1, tokens.shape[-1])
        z = self.latents.astype(x.dtype)
        for block in self.perceiver:
            z = block(z, tokens)
        z = self.norm(self.perceiver_norm(z))
        for block in self.blocks:
            z = block(z)
        return self.final_norm(z)


class Decoder(eqx.Module):
    """`(z (L, latent_dim), coords (N, 2)) -> (N, out_dim)` (see module doc)."""

    fourier: jax.Array  # (2 or 4, dec_emb_dim / 2)
    latent_proj: Dense
    blocks: list
    norm: LayerNorm
    hidden: list
    head: Dense
    period: bool = eqx.field(static=True)

    def __init__(
        self,
        latent_dim,
        out_dim,
        *,
        fourier_freq,
        period,
        dec_depth,
        dec_num_heads,
        dec_emb_dim,
        mlp_ratio,
        num_mlp_layers,
        key,
    ):
        if dec_emb_dim % 2:
            raise ValueError(f"dec_emb_dim: expected an even width, got {dec_emb_dim}")
        kf, kz, kb, kh, ko = jr.split(key, 5)
        self.period = bool(period)
        coord_dim = 4 if self.period else 2
        self.fourier = fourier_freq * jr.normal(kf, (coord_dim, dec_emb_dim // 2), jnp.float32)
        self.latent_proj = Dense(latent_dim, dec_emb_dim, key=kz)
        self.blocks = [
            CrossAttnBlock(dec_emb_dim, dec_num_heads, mlp_ratio, key=k, eps=EPS)
            for k in jr.split(kb, dec_depth)
        ]
        self.norm = LayerNorm(dec_emb_dim, EPS)
        self.hidden = [
            Dense(dec_emb_dim, dec_emb_dim, key=k, init="xavier") for k in jr.split(kh, num_mlp_layers)
        ]
        self.head = Dense(dec_emb_dim, out_dim, key=ko)

    def __call__(self, z: jax.Array, coords: jax.Array) -> jax.Array:
        if coords.ndim != 2 or coords.shape[-1] != 2:
            raise ValueError(f"coords: expected (N, 2) query coordinates, got {coords.shape}")
        coords = coords.astype(z.dtype)
        if self.period:
            angle = 2 * jnp.pi * coords
            coords = jnp.stack(
                [jnp.cos(angle[:, 0]), jnp.sin(angle[:, 0]), jnp.cos(angle[:, 1]), jnp.sin(angle[:, 1])],
                axis=-1,
            )
        proj = coords @ self.fourier.astype(z.dtype)
        q = jnp.concatenate([jnp.cos(proj), jnp.sin(proj)], axis=-1)
        kv = self.latent_proj(z)
        for block in self.blocks:
            q = block(q, kv)
        q = self.norm(q)
        for layer in self.hidden:
            q = jax.nn.gelu(layer(q))
        return self.head(q)


class FunctionAutoencoder(eqx.Module):
    """Encoder + coordinate-query decoder; `net(x (C_in, H, W)) -> (C_out, H, W)` decodes on the grid.

    Options (published full size, `configs/training/*_fundiff_*_fae.yml`): patch_size 16,
    grid_size 128, emb_dim 256, num_latents 64, depth 8, num_heads 8, mlp_ratio 2,
    fourier_freq 10, period False, dec_depth 4, dec_num_heads 8, dec_emb_dim 256,
    dec_mlp_ratio 2, num_mlp_layers 2.
    """

    encoder: Encoder
    decoder: Decoder

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        *,
        key,
        patch_size,
        grid_size,
        emb_dim,
        num_latents,
        depth,
        num_heads,
        mlp_ratio,
        fourier_freq,
        period,
        dec_depth,
        dec_num_heads,
        dec_emb_dim,
        dec_mlp_ratio,
        num_mlp_layers,
    ):
        ke, kd = jr.split(key)
        self.encoder = Encoder(
            in_channels,
            patch_size=patch_size,
            grid_size=grid_size,
            emb_dim=emb_dim,
            num_latents=num_latents,
            depth=depth,
            num_heads=num_heads,
            mlp_ratio=mlp_ratio,
            key=ke,
        )
        self.decoder = Decoder(
            emb_dim,
            out_channels,
            fourier_freq=fourier_freq,
            period=period,
            dec_depth=dec_depth,
            dec_num_heads=dec_num_heads,
            dec_emb_dim=dec_emb_dim,
            mlp_ratio=dec_mlp_ratio,
            num_mlp_layers=num_mlp_layers,
            key=kd,
        )

    @property
    def latent_shape(self) -> tuple[int, int]:
        """(num_latents, emb_dim) of the latent token set."""
        return self.encoder.latent_shape

    def encode(self, x: jax.Array) -> jax.Array:
        return self.encoder(x)

    def decode(self, z: jax.Array, coords: jax.Array) -> jax.Array:
        return self.decoder(z, coords)

    def decode_grid(self, z: jax.Array, height: int, width: int) -> jax.Array:
        """`(C_out, H, W)`: the decoder at every grid point."""
        return self.decode(z, grid_coords(height, width)).T.reshape(-1, height, width)

    def __call__(self, x: jax.Array, t=None, *, key=None) -> jax.Array:
        return self.decode_grid(self.encode(x), *x.shape[-2:])
