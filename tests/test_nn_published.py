"""The published PosteriorBench backbones (`nn.published`): parameter counts, pieces, tiny forwards.

Each full-size count is compared with a formula transcribed in this file from the published
constructors (`training_fundps/networks.py` `SongUNO` / `UNOBlock`, `training_diffusionpde/
networks.py` `SongUNet` / `UNetBlock`, neuraloperator 1.0.2 `FNO` / `FNOBlocks` / `SpectralConv` /
`ChannelMLP`, tltorch ``ComplexTucker`` with tensorly's rank rule), complex entries counted as two
real parameters. Shapes only (`eqx.filter_eval_shape`): nothing full-size is allocated.
"""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
from scipy.optimize import brentq

from posteriorjax import nn, training
from posteriorjax.nn import ddpmpp, neuralop_fno, published

# -- the published counts, transcribed -------------------------------------------------------------


def _tensorly_tucker_rank(shape, rank):
    """tensorly `validate_tucker_rank(shape, rank=float)` (brentq root, rounding 'round')."""
    n, sq, d = np.prod(shape), sum(s**2 for s in shape), len(shape)
    f = brentq(lambda x: n * x**d + sq * x - rank * n, 0.0, max(rank, 1.0))
    return [max(int(np.round(s * f)), 1) for s in shape]


def _spectral_conv(cin, cout, n_modes, rank=1.0):
    """neuralop `SpectralConv`: complex weight (cin, cout, n1, n2 // 2 + 1), dense or ComplexTucker; bias."""
    shape = (cin, cout, n_modes[0], n_modes[1] // 2 + 1)
    if rank < 1.0:
        r = _tensorly_tucker_rank(shape, rank)
        entries = np.prod(r) + sum(s * q for s, q in zip(shape, r, strict=True))
    else:
        entries = np.prod(shape)
    return 2 * int(entries) + cout


def _linear(i, o, bias=True):
    return i * o + (o if bias else 0)


def _conv(i, o, k):
    return i * o * k * k + o


def _block(cin, cout, emb, *, updown=False, attention=False, modes=None, rank=1.0):
    """`UNetBlock` / `UNOBlock` with the ddpmpp block_kwargs (resample_proj, no adaptive scale)."""
    p = 2 * cin + _linear(emb, cout) + 2 * cout
    if modes is None:
        p += _conv(cin, cout, 3) + _conv(cout, cout, 3)
    else:
        p += _spectral_conv(cin, cout, modes, rank) + _spectral_conv(cout, cout, modes, rank)
    if cout != cin or updown:
        p += _conv(cin, cout, 1)
    if attention:
        p += 2 * cout + _conv(cout, 3 * cout, 1) + _conv(cout, cout, 1)
    return p


def _song(cin, cout_ch, res, mc, mult, nb, attn, *, uno=False, fmult=1.0, rank=1.0, augment_dim=0):
    """`SongUNet` / `SongUNO` (`channel_mult_emb` 4, `channel_mult_noise` 1, standard encoder / decoder)."""
    emb = 4 * mc
    p = _linear(mc, emb) + _linear(emb, emb) + _linear(augment_dim, mc, bias=False)

    def modes(r):
        return (int(r * fmult), int(r * fmult)) if uno else None

    c, skips = mc, [mc]
    p += _conv(cin + 2, mc, 1) if uno else _conv(cin, mc, 3)
    for level, m in enumerate(mult):
        r = res >> level
        if level:
            p += _block(c, c, emb, updown=True, modes=modes(r), rank=rank)
            skips.append(c)
        for _ in range(nb):
            p += _block(c, mc * m, emb, attention=r in attn, modes=modes(r), rank=rank)
            c = mc * m
            skips.append(c)
    for level, m in reversed(list(enumerate(mult))):
        r = res >> level
        if level == len(mult) - 1:
            p += _block(c, c, emb, attention=True, modes=modes(r), rank=rank)
            p += _block(c, c, emb, modes=modes(r), rank=rank)
        else:
            p += _block(c, c, emb, updown=True, modes=modes(r), rank=rank)
        for idx in range(nb + 1):
            att = idx == nb and r in attn
            p += _block(c + skips.pop(), mc * m, emb, attention=att, modes=modes(r), rank=rank)
            c = mc * m
    return p + 2 * c + (_conv(c, cout_ch, 1) if uno else _conv(c, cout_ch, 3))


def _neuralop_fno(cin, cout, modes, hidden, layers, lifting_ratio=2, projection_ratio=2, expansion=0.5):
    """neuralop 1.0.2 `FNO` (grid embedding, ChannelMLP lifting / projection, linear + soft-gating skips)."""
    lin, lift, proj = cin + 2, lifting_ratio * hidden, projection_ratio * hidden
    p = _linear(lin, lift) + _linear(lift, hidden) if lift else _linear(lin, hidden)
    h = round(hidden * expansion)
    per_layer = (
        _spectral_conv(hidden, hidden, (modes, modes)) + hidden * hidden  # spectral (+ bias), linear skip
        + _linear(hidden, h) + _linear(h, hidden) + hidden  # channel MLP, soft gate
    )  # fmt: skip
    return p + layers * per_layer + _linear(hidden, proj) + _linear(proj, cout)


# (published entry, in, out (Poisson), the published count)
PUBLISHED_COUNTS = {
    "fundps_prior": (2, 2, _song(2, 2, 64, 64, (1, 2, 4, 4), 4, (16,), uno=True, fmult=0.5, rank=0.1)),
    "diffusionpde_prior": (2, 2, _song(2, 2, 128, 128, (2, 2, 2), 4, (16,), augment_dim=9)),
    "funddps_surrogate": (1, 1, _neuralop_fno(1, 1, 16, 48, 4, projection_ratio=1)),
    "ddis_surrogate": (1, 1, _neuralop_fno(1, 1, 64, 64, 4)),
    "eci_velocity": (2, 2, _neuralop_fno(2 + 32, 2, 32, 128, 6, lifting_ratio=4, projection_ratio=4)),
    "mc_dropout_inverse": (2, 1, _neuralop_fno(2, 1, 32, 128, 6, lifting_ratio=2, projection_ratio=1)),
}


def _count(tree) -> int:
    leaves = jax.tree.leaves(tree)
    return sum(math.prod(x.shape) for x in leaves if isinstance(x, jax.ShapeDtypeStruct) or eqx.is_array(x))


@pytest.mark.parametrize("name", sorted(PUBLISHED_COUNTS))
def test_full_size_parameter_counts_equal_the_published(name):
    cin, cout, expected = PUBLISHED_COUNTS[name]
    model, options = published.get(name)
    net = eqx.filter_eval_shape(
        lambda: nn.get(model, jr.key(0), in_channels=cin, out_channels=cout, **options)
    )
    got = _count(net)
    assert abs(got - expected) <= 0.01 * expected, (name, got, expected)
    if name == "diffusionpde_prior":  # all but the unused 9 -> 128 augmentation-label map
        assert got == expected - 9 * 128
    else:
        assert got == expected, (name, got, expected)


def test_fundps_prior_is_the_configs_54m_network():
    """`configs/training/poisson_fundps_128_finetune.yml`: 'the stage-1 54M-parameter architecture'."""
    assert round(PUBLISHED_COUNTS["fundps_prior"][2] / 1e6) == 54


def test_kinds_use_the_published_full_backbones():
    kinds = training.kinds
    uno = published.get("fundps_prior")
    assert kinds.get("prior").models["full"] == kinds.get("joint").models["full"] == uno
    assert kinds.get("surrogate").models["full"] == published.get("funddps_surrogate")
    assert kinds.get("inverse").models["full"] == published.get("mc_dropout_inverse")
    assert kinds.get("flow").models["full"] == published.get("eci_velocity")


# -- pieces against transcriptions ------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape, rank", [((64, 64, 32, 17), 0.1), ((256, 256, 8, 5), 0.1), ((16, 16, 8, 5), 0.3)]
)
def test_tucker_rank_is_tensorlys(shape, rank):
    assert list(ddpmpp.tucker_rank(shape, rank)) == _tensorly_tucker_rank(shape, rank)


def test_embeddings_equal_the_transcriptions():
    t = 0.37
    # EDM PositionalEmbedding(endpoint=True): cat[cos, sin], then SongUNet's swap -> [sin, cos]
    f = (1 / 10000) ** (np.arange(64) / 63)
    edm = np.concatenate([np.cos(t * f), np.sin(t * f)]).reshape(2, -1)[::-1].reshape(-1)
    np.testing.assert_allclose(ddpmpp.positional_embedding(t, 128), edm, rtol=1e-5, atol=1e-6)
    # ECI get_time_embedding: t * 2000, scale log(2000) / (half - 1), [sin, cos]
    w = np.exp(-np.arange(16) * np.log(2000) / 15)
    eci = np.concatenate([np.sin(t * 2000 * w), np.cos(t * 2000 * w)])
    np.testing.assert_allclose(neuralop_fno.time_embedding(t, 32), eci, rtol=1e-4, atol=1e-4)


def test_spectral_conv_equals_the_neuralop_forward():
    """Dense `TuckerSpectralConv` = neuralop 1.0.2 `SpectralConv.forward` at equal resolution (NumPy):
    rfftn(norm='forward'), fftshift along H, the centred n1 x (n2 // 2 + 1) block contracted, irfftn."""
    conv = ddpmpp.TuckerSpectralConv(3, 2, (6, 6), 1.0, key=jr.key(0))
    x = np.asarray(jr.normal(jr.key(1), (3, 12, 10)), np.float64)
    wgt = np.asarray(conv.weight(), np.complex128)
    f = np.fft.fftshift(np.fft.rfft2(x, norm="forward"), axes=-2)
    start = (12 - 6) // 2
    out = np.zeros((2, 12, 6), np.complex128)
    out[:, start : start + 6, :4] = np.einsum("ioyx,iyx->oyx", wgt, f[:, start : start + 6, :4])
    ref = np.fft.irfft2(np.fft.fftshift(out, axes=-2), s=(12, 10), norm="forward")
    ref += np.asarray(conv.bias)[:, None, None]
    np.testing.assert_allclose(conv(jnp.asarray(x, jnp.float32)), ref, rtol=1e-4, atol=1e-5)


# -- tiny forwards ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(published.TINY))
def test_tiny_backbones_are_finite_with_the_right_shape(name):
    cin, cout, _ = PUBLISHED_COUNTS[name]
    model, options = published.get(name, "tiny")
    net = nn.get(model, jr.key(0), in_channels=cin, out_channels=cout, **options)
    x = jr.normal(jr.key(1), (3, cin, 16, 16))
    conditioned = name.endswith("prior") or name == "eci_velocity"
    t = jnp.full((3,), 0.3) if conditioned else None

    @eqx.filter_jit
    def forward(net, x, t, key):
        keys = jr.split(key, x.shape[0])
        if t is None:
            return jax.vmap(lambda xi, k: net(xi, key=k))(x, keys)
        return jax.vmap(lambda xi, ti, k: net(xi, ti, key=k))(x, t, keys)

    y = forward(net, x, t, jr.key(2))
    assert y.shape == (3, cout, 16, 16) and bool(jnp.all(jnp.isfinite(y)))
    with pytest.raises(ValueError, match="t:"):
        net(x[0], None if conditioned else jnp.asarray(0.3))


def test_medium_scale_shrinks_the_published_backbones_by_one_rule():
    """Grid-tied sizes x 32/128, widths / 4, depths and ratios kept (`published.SCALE_RULES`)."""
    assert published.get("fundps_prior", "medium") == (
        "ddpmpp_uno",
        dict(model_channels=16, channel_mult=(1, 2, 4, 4), num_blocks=4, attn_resolutions=(4,),
             dropout=0.13, fmult=0.5, rank=0.1, resolution=16),
    )  # fmt: skip
    assert published.get("ddis_surrogate", "medium") == ("fno_pad", dict(modes=16, width=16, layers=4))
    name, options = published.get("eci_velocity", "medium")
    assert (options["modes"], options["width"], options["layers"], options["time_channels"]) == (8, 32, 6, 8)
    assert options["lifting_ratio"] == options["projection_ratio"] == 4
    assert training.kinds.get("prior").models["medium"] == published.get("fundps_prior", "medium")
    assert training.config("darcy", "prior", "medium").task_options.resolution == 32
    with pytest.raises(ValueError, match="scale"):
        published.get("fundps_prior", "large")
