"""FunDiff as published: parameter counts, networks, losses and sampling against NumPy transcriptions
of the published code (PosteriorBench `training_fundiff/models.py`, `train.py`, `methods/fundiff.py`)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from posteriorjax import nn, samplers, tasks, training
from posteriorjax.files import parameter_digest
from posteriorjax.samplers import fundiff

FAE = fundiff.FAE
DIT = fundiff.DIT


# -- the published architecture, written out from the published configs --------------------------


def _fae_count(c_in, c_out, patch_size, grid_size, emb_dim, num_latents, depth, num_heads, mlp_ratio,
               fourier_freq, period, dec_depth, dec_num_heads, dec_emb_dim, dec_mlp_ratio,
               num_mlp_layers):  # fmt: skip
    """Parameters of the published Encoder + Decoder (Flax: Dense kernel + bias, LayerNorm scale + bias)."""
    d, e = emb_dim, dec_emb_dim
    ln = lambda w: 2 * w  # noqa: E731
    mha = lambda w: 4 * (w * w + w)  # noqa: E731  query, key, value, out (qkv_features = w)
    mlp = lambda w, r: w * (w * r) + w * r + (w * r) * w + w  # noqa: E731
    block = lambda w, r, cross: ln(w) * (2 if cross else 1) + mha(w) + ln(w) + mlp(w, r)  # noqa: E731
    encoder = (patch_size**2 * c_in * d + d) + num_latents * d + 2 * block(d, 1, True) + ln(d)  # perceiver
    encoder += ln(d) + depth * block(d, mlp_ratio, False) + ln(d)
    decoder = (4 if period else 2) * e // 2 + (d * e + e) + dec_depth * block(e, dec_mlp_ratio, True) + ln(e)
    decoder += num_mlp_layers * (e * e + e) + e * c_out + c_out
    return encoder + decoder


def _dit_count(d_in, d_out, emb_dim, depth, num_heads, mlp_ratio):
    e, hidden = emb_dim, int(emb_dim * mlp_ratio)
    embed = 2 * (d_in * e + e) + (256 * e + e) + (e * e + e)  # x, c, timestep MLP (256 frequencies)
    block = (e * 6 * e + 6 * e) + 4 * (e * e + e) + (e * hidden + hidden + hidden * e + e)
    return embed + depth * block + 2 * e + (e * d_out + d_out)


def _count(model):
    return sum(x.size for x in jax.tree.leaves(eqx.filter(model, eqx.is_inexact_array)))


def test_full_size_parameter_counts_match_the_published_configuration():
    """Poisson (f from phi): target FAE 1 -> 1 channel, condition FAE 2 -> 1, DiT 256 -> 256."""
    key = jr.key(0)
    for c_in in (1, 2):
        fae = nn.get("fae", key, in_channels=c_in, out_channels=1, **FAE["full"])
        assert _count(fae) == _fae_count(c_in, 1, **FAE["full"])
    assert fae.latent_shape == (64, 256)
    dit = nn.get("dit", key, in_channels=256, out_channels=256, **DIT["full"])
    assert _count(dit) == _dit_count(256, 256, **DIT["full"])


# -- NumPy transcription of the published modules (float64) ---------------------------------------


def _a(x):
    return np.asarray(x, np.float64)


def _gelu(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def _ln(x, eps, p=None):
    y = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps)
    return y if p is None else y * _a(p.scale) + _a(p.bias)


def _dense(p, x):
    return x @ _a(p.weight) + _a(p.bias)


def _mha(p, q, kv):
    h = p.num_heads
    split = lambda x: x.reshape(x.shape[0], h, -1).transpose(1, 0, 2)  # noqa: E731
    qh, kh, vh = split(_dense(p.query, q)), split(_dense(p.key, kv)), split(_dense(p.value, kv))
    logits = qh @ kh.transpose(0, 2, 1) / np.sqrt(qh.shape[-1])
    w = np.exp(logits - logits.max(-1, keepdims=True))
    w /= w.sum(-1, keepdims=True)
    return _dense(p.out, (w @ vh).transpose(1, 0, 2).reshape(q.shape[0], -1))


def _mlp(p, x):
    return _dense(p.fc2, _gelu(_dense(p.fc1, x)))


def _cross(p, q, kv, eps=1e-5):  # CrossAttnBlock; SelfAttnBlock when p.norm_kv is None
    qn = _ln(q, eps, p.norm_q)
    x = _mha(p.attn, qn, qn if p.norm_kv is None else _ln(kv, eps, p.norm_kv)) + q
    return x + _mlp(p.mlp, _ln(x, eps, p.norm_mlp))


def _sincos(dim, pos):
    omega = 1.0 / 10000 ** (np.arange(dim // 2) / (dim / 2.0))
    out = np.outer(np.reshape(pos, -1), omega)
    return np.concatenate([np.sin(out), np.cos(out)], axis=1)


def _encoder(p, x):  # Encoder.__call__ on (C, H, W) (published NHWC, batch of one)
    k = _a(p.patch_kernel)
    ph, pw, c, d = k.shape
    gh, gw = x.shape[1] // ph, x.shape[2] // pw
    tokens = np.zeros((gh, gw, d))
    for i in range(gh):
        for j in range(gw):
            patch = x[:, i * ph : (i + 1) * ph, j * pw : (j + 1) * pw].transpose(1, 2, 0)
            tokens[i, j] = np.einsum("abc,abcd->d", patch, k) + _a(p.patch_bias)
    rows, cols = np.meshgrid(np.arange(p.grid_size[0] // ph), np.arange(p.grid_size[1] // pw), indexing="ij")
    pos = np.concatenate([_sincos(d // 2, rows), _sincos(d // 2, cols)], axis=1)
    pos = pos.reshape(p.grid_size[0] // ph, p.grid_size[1] // pw, d)
    pos = _a(jax.image.resize(jnp.asarray(pos), (gh, gw, d), method="bilinear"))  # the published call
    x = (tokens + pos).reshape(-1, d)
    z = _a(p.latents)
    for block in p.perceiver:
        z = _cross(block, z, x)
    z = _ln(_ln(z, 1e-5, p.perceiver_norm), 1e-5, p.norm)
    for block in p.blocks:
        z = _cross(block, z, None)
    return _ln(z, 1e-5, p.final_norm)


def _decoder(p, z, coords):  # decode_at_coords: one coordinate at a time
    out = []
    kv = _dense(p.latent_proj, z)
    for coord in coords:
        y = coord @ _a(p.fourier)
        q = np.concatenate([np.cos(y), np.sin(y)])[None]
        for block in p.blocks:
            q = _cross(block, q, kv)
        q = _ln(q, 1e-5, p.norm)
        for layer in p.hidden:
            q = _gelu(_dense(layer, q))
        out.append(_dense(p.head, q)[0])
    return np.stack(out)


def _dit(p, x, t, c):
    half = 128
    freqs = np.exp(-np.log(10000) * np.arange(half) / half)
    temb = np.concatenate([np.cos(t * freqs), np.sin(t * freqs)])
    temb = _dense(p.time2, _silu(_dense(p.time1, temb)))
    h = _dense(p.embed, x) + _sincos(p.emb_dim, np.arange(x.shape[0])) + _dense(p.embed_condition, c)
    for b in p.blocks:
        shift1, scale1, gate1, shift2, scale2, gate2 = np.split(_dense(b.modulation, _gelu(temb)), 6)
        xm = _ln(h, 1e-6) * (1 + scale1) + shift1
        h = h + gate1 * _mha(b.attn, xm, xm)
        xm = _ln(h, 1e-6) * (1 + scale2) + shift2
        h = h + gate2 * _mlp(b.mlp, xm)
    return _dense(p.head, _ln(h, 1e-6, p.norm))


def _silu(x):
    return x / (1 + np.exp(-x))


def _coords(h, w):
    yy, xx = np.meshgrid(np.linspace(0, 1, h), np.linspace(0, 1, w), indexing="ij")
    return np.stack([yy.reshape(-1), xx.reshape(-1)], -1)


def _randomized(model, key, scale=0.3):
    """Every parameter redrawn (the zero-initialized adaLN modulation too), in float64."""
    params, static = eqx.partition(model, eqx.is_inexact_array)
    leaves, treedef = jax.tree.flatten(params)
    keys = jr.split(key, len(leaves))
    leaves = [scale * jr.normal(k, x.shape, jnp.float64) for k, x in zip(keys, leaves, strict=True)]
    return eqx.combine(jax.tree.unflatten(treedef, leaves), static)


@pytest.fixture(scope="module")
def tiny():
    """Tiny target / condition FAEs (16 x 16 Poisson) and a DiT, every weight random, float64."""
    with jax.enable_x64(True):
        task = tasks.get("poisson_fixed", resolution=16)
        x_norm, u_norm = nn.field_normalizer(task), nn.Normalizer((0.01,), (0.2,))
        opts = {**FAE["tiny"], "depth": 1, "num_latents": 4, "emb_dim": 16, "dec_emb_dim": 16}
        k = jr.split(jr.key(0), 6)
        tnet = _randomized(nn.get("fae", k[0], in_channels=1, out_channels=1, **opts), k[1])
        cnet = _randomized(nn.get("fae", k[2], in_channels=2, out_channels=1, **opts), k[3])
        target = fundiff.TargetAutoencoder(tnet, fundiff.scaled(x_norm))
        condition = fundiff.ConditionAutoencoder(cnet, fundiff.scaled(u_norm))
        dnet = nn.get("dit", k[4], in_channels=16, out_channels=16, **{**DIT["tiny"], "emb_dim": 16})
        digests = parameter_digest(target), parameter_digest(condition)
        model = fundiff.LatentFlow(_randomized(dnet, k[5]), *digests)
    return task, target, condition, model


def test_networks_equal_the_transcription(tiny, x64):
    task, target, condition, model = tiny
    x = _a(jr.normal(jr.key(1), (2, 16, 16)))
    z = _a(condition.encode(jnp.asarray(x)))
    np.testing.assert_allclose(z, _encoder(condition.net.encoder, x), rtol=1e-6, atol=1e-9)
    x_low = x[:, ::4, ::4]  # an input at a lower resolution: the position embedding resized
    np.testing.assert_allclose(condition.encode(jnp.asarray(x_low)), _encoder(condition.net.encoder, x_low),
                               rtol=1e-6, atol=1e-9)  # fmt: skip
    coords = _coords(16, 16)[::37]
    np.testing.assert_allclose(target.decode(jnp.asarray(z), jnp.asarray(coords)),
                               _decoder(target.net.decoder, z, coords), rtol=1e-6, atol=1e-9)  # fmt: skip
    c = _a(jr.normal(jr.key(2), z.shape))
    np.testing.assert_allclose(model(jnp.asarray(z), 0.35, jnp.asarray(c)), _dit(model.net, z, 0.35, c),
                               rtol=1e-6, atol=1e-9)  # fmt: skip


def test_sampling_equals_the_published_euler_steps(tiny, x64):
    """`FunDiffAdapter.generate` + `sample_ode`: condition grid, z_c, z0 ~ N(0, I), Euler, decode,
    denormalize."""
    task, target, condition, model = tiny
    sampler = samplers.get("fundiff", task, model=model, target=target, condition=condition, num_steps=2)
    y = task.simulate(jr.key(3), task.prior.sample(jr.key(4)))
    key, n = jr.key(5), 2
    out = sampler.sample(key, y, n, sampler.hparams())
    obs, (mean,), (std,) = task.observation, condition.u_norm.mean, condition.u_norm.std
    m = np.asarray(obs.mask, np.float64)
    grid = _a(obs.to_grid(y))
    cond = np.stack([m * (grid - mean) * (0.5 / std), m])
    zc = _encoder(condition.net.encoder, cond)
    z = _a(jr.normal(key, (n, *zc.shape), jnp.float64))
    for i in range(2):  # sample_ode: t = i / N, z <- z + v dt
        z = z + np.stack([_dit(model.net, zi, i / 2, zc) for zi in z]) * 0.5
    xm, xs = target.x_norm.mean[0], target.x_norm.std[0]
    expect = np.stack([_decoder(target.net.decoder, zi, _coords(16, 16)).T.reshape(1, 16, 16) for zi in z])
    np.testing.assert_allclose(out, expect * (xs / 0.5) + xm, rtol=1e-6, atol=1e-9)
    assert sampler.defaults == {} and sampler.evaluations_per_sample == 2


def test_published_loss_forms(tiny, x64):
    task, target, condition, model = tiny
    key = jr.key(6)
    x = jr.normal(jr.key(7), (3, 1, 16, 16), jnp.float64)
    loss = fundiff.AutoencoderLoss((1, 2, 4))(target, key, (x, x))
    k_factor, k_points = jr.split(key)  # one factor and one query set per batch (published train loop)
    f = (1, 2, 4)[int(jr.randint(k_factor, (), 0, 3))]
    idx = np.asarray(jr.choice(k_points, 256, (64,), replace=False))  # H W / 4 queries, no replacement
    xn = _a(x)
    values = xn.reshape(3, 1, 256)[:, :, idx].transpose(0, 2, 1)
    pred = np.stack([_decoder(target.net.decoder, _encoder(target.net.encoder, xi[:, ::f, ::f]),
                              _coords(16, 16)[idx]) for xi in xn])  # fmt: skip
    np.testing.assert_allclose(loss, np.mean((pred - values) ** 2), rtol=1e-6)

    z1, zc = jr.normal(jr.key(8), (2, 3, 4, 16), jnp.float64)
    loss = fundiff.RectifiedFlowLoss()(model, key, (z1, zc))
    k_noise, k_t = jr.split(key)
    z0 = _a(jr.normal(k_noise, z1.shape, jnp.float64))
    t = _a(jr.uniform(k_t, (3, 1, 1), jnp.float64))
    zt = t * _a(z1) + (1 - t) * z0
    v = np.stack([_dit(model.net, zt[i], t[i, 0, 0], _a(zc)[i]) for i in range(3)])
    np.testing.assert_allclose(loss, np.mean((v - (_a(z1) - z0)) ** 2), rtol=1e-6)


def test_training_condition_is_the_published_masked_grid():
    """Random `count` sensors per example on the noise-free state (point masks); [m u_n, m]."""
    task = tasks.get("poisson_fixed", resolution=16)
    u_n = jr.normal(jr.key(0), task.state_shape)
    c1, c2 = (fundiff.training_condition(task, u_n, jr.key(k)) for k in (1, 2))
    assert c1.shape == (2, 16, 16) and int(c1[1].sum()) == task.observation.count
    np.testing.assert_array_equal(c1[0], np.where(c1[1] > 0, u_n[0], 0.0))
    assert not np.array_equal(c1[1], c2[1])


def test_build_errors(tiny, x64):
    task, target, condition, model = tiny
    with pytest.raises(ValueError, match="model: fundiff needs a trained LatentFlow"):
        fundiff.build(task, target=target, condition=condition)
    with pytest.raises(ValueError, match="not the autoencoders the model"):
        fundiff.build(task, model=model, target=target, condition=eqx.tree_at(
            lambda c: c.net.encoder.latents, condition, condition.net.encoder.latents + 1))  # fmt: skip
    with pytest.raises(ValueError, match="discrete_values"):
        fundiff.build(task, model=model, target=target, condition=condition, discrete_values="round")


@pytest.mark.slow
def test_three_networks_train_through_the_sweep_and_sample(tmp_path):
    """`sweep.networks.network` trains the DiT's frozen inputs first (shared with the sampler's target
    and condition options), records their workdirs in its config.json, and the sampler draws."""
    from posteriorjax.sweep import networks

    options = {"resolution": 8, "num_sensors": 6}

    def get(kind):
        spec = networks.parse_spec("networks", kind, "tiny", "poisson_fixed")
        return networks.network(tmp_path, "poisson_fixed", options, spec, "tiny", num_steps=2, progress=False)

    model = get("fundiff_dit")
    target, condition = get("fundiff_fae_target"), get("fundiff_fae_condition")  # loaded, not retrained
    directory = next((tmp_path / "networks" / "poisson_fixed").glob("fundiff_dit-*"))
    assert "fundiff_fae_target-" in (directory / "config.json").read_text()
    assert isinstance(training.trained(directory), fundiff.LatentFlow)  # reloads through config.inputs
    task = tasks.get("poisson_fixed", **options)
    sampler = samplers.get("fundiff", task, model=model, target=target, condition=condition)
    y = task.simulate(jr.key(0), task.prior.sample(jr.key(1)))
    out = sampler.sample(jr.key(2), y, 3, {})
    assert out.shape == (3, *task.unknown_shape) and np.isfinite(out).all()
