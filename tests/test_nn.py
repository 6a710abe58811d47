"""Networks: resolution invariance of the Fourier operators, registry-wide properties, MC dropout."""

import sys

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import optax
import pytest

from posteriorjax import nn
from posteriorjax.studies.transfer import models as transfer_models

SMALL = {
    "fno": dict(modes=4, width=8, layers=2, projection=16),
    "uno": dict(modes=4, width=8, depth=2, projection=16),
    "unet": dict(channels=(8, 16), blocks=1),
    "deeponet": dict(width=8, conv_layers=2, basis=16),
    "cno": dict(width=4, depth=1, res_blocks=1),
    "transolver": dict(hidden=8, layers=1, heads=2, slices=4),
    "gnot": dict(hidden=8, layers=1, heads=2, experts=2),
}
# the PDE-OBS networks at the transfer study's tiny sizes (their forward passes take ~25 s to compile)
_TINY = {n: transfer_models.fit_config(n, {"scale": "tiny"}, forecast=True) for n in transfer_models.MODELS}
SMALL.update(
    {
        transfer_models.NETWORK[n]: dict(c.model)
        for n, c in _TINY.items()
        if transfer_models.NETWORK[n].startswith("pdeobs_")
    }
)
PDEOBS = {n for n in SMALL if n.startswith("pdeobs_")}
PLAIN = set(SMALL) - PDEOBS
SLOW_NETWORKS = {"cno", *PDEOBS}
# registered networks whose forward passes are tested with their own contracts elsewhere: the
# published PosteriorBench backbones (tests/test_nn_published.py) and FunDiff's token networks,
# which map token sets, not fields (tests/test_fundiff.py)
ELSEWHERE = {"ddpmpp", "ddpmpp_uno", "fno_pad", "fae", "dit"}


def test_every_registered_network_is_tested():
    assert set(nn.names()) == set(SMALL) | ELSEWHERE


def trig_field(key, n, channels=1, kmax=3):
    """A random real trigonometric polynomial of degree kmax sampled on x_j = j / n, `(C, n, n)`."""
    ka, kb = jr.split(key)
    k = jnp.arange(-kmax, kmax + 1)
    a = jr.normal(ka, (channels, k.size, k.size)) / (1 + k[:, None] ** 2 + k[None, :] ** 2)
    b = jr.uniform(kb, (channels, k.size, k.size)) * 2 * jnp.pi
    x = jnp.arange(n) / n
    phase = (
        2
        * jnp.pi
        * (k[:, None, None, None] * x[None, None, :, None] + k[None, :, None, None] * x[None, None, None, :])
    )
    return jnp.einsum("cpq,cpqij->cij", a, jnp.cos(phase[None] + b[..., None, None]))


def test_spectral_resample_is_exact_for_trigonometric_polynomials(key):
    f32, f64 = trig_field(key, 32), trig_field(key, 64)
    np.testing.assert_allclose(nn.spectral_resample(f32, (64, 64)), f64, atol=1e-5)
    np.testing.assert_allclose(nn.spectral_resample(f64, (32, 32)), f32, atol=1e-5)


@pytest.mark.slow
def test_fno_trained_at_32_evaluates_at_64(key):
    """Fit a band-limited periodic smoothing operator at 32 x 32, then evaluate at 64 x 64."""
    k_model, k_data = jr.split(key)
    model = nn.FNO(1, 1, modes=6, width=12, layers=2, projection=16, key=k_model)

    def target(f):  # (1 - lap / (4 pi^2 16))^-1, a smoothing Fourier multiplier
        n = f.shape[-1]
        m = jnp.fft.fftfreq(n, 1.0 / n)
        mult = 1.0 / (1.0 + (m[:, None] ** 2 + m[None, :] ** 2) / 16.0)
        return jnp.fft.ifft2(jnp.fft.fft2(f) * mult).real

    xs = jax.vmap(lambda k: trig_field(k, 32))(jr.split(k_data, 16))
    ys = jax.vmap(target)(xs)
    opt = optax.adam(3e-3)
    params, static = eqx.partition(model, eqx.is_inexact_array)

    @jax.jit
    def train(params):
        def step(carry, _):
            p, s = carry
            loss, g = jax.value_and_grad(
                lambda p: jnp.mean((jax.vmap(eqx.combine(p, static))(xs) - ys) ** 2)
            )(p)
            u, s = opt.update(g, s, p)
            return (optax.apply_updates(p, u), s), loss

        (p, _), losses = jax.lax.scan(step, (params, opt.init(params)), None, length=150)
        return p, losses

    params, losses = train(params)
    assert losses[-1] < 0.2 * losses[0]
    model = eqx.combine(params, static)
    test = trig_field(jr.fold_in(k_data, 99), 64)
    coarse = model(test[:, ::2, ::2])
    fine = model(test)
    rel = jnp.linalg.norm(fine[:, ::2, ::2] - coarse) / jnp.linalg.norm(coarse)
    assert rel < 2e-2, rel
    # the learned operator is close to the target at the finer grid too
    assert jnp.linalg.norm(fine - target(test)) / jnp.linalg.norm(target(test)) < 0.3


@pytest.mark.slow  # the FNO test covers resolution independence in the default suite
def test_uno_is_resolution_independent(key):
    model = nn.UNO(1, 2, modes=4, width=8, depth=2, projection=16, key=key)
    test = trig_field(jr.fold_in(key, 1), 64, kmax=2)
    coarse, fine = model(test[:, ::2, ::2]), model(test)
    assert fine.shape == (2, 64, 64)
    assert jnp.linalg.norm(fine[:, ::2, ::2] - coarse) / jnp.linalg.norm(coarse) < 2e-2


# CNO's compile alone is ~30 s; its shapes, jit, vmap and grad are also covered by test_nn_operators
@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW_NETWORKS else n for n in sorted(SMALL)]
)
def test_registry_networks_shapes_jit_vmap(name, key):
    k_model, k_x = jr.split(key)
    net = nn.get(name, k_model, in_channels=2, out_channels=3, **SMALL[name])
    x = jr.normal(k_x, (4, 2, 16, 16))
    eager = net(x[0])
    assert eager.shape == (3, 16, 16) and eager.dtype == jnp.float32
    batched = eqx.filter_jit(lambda m, v: jax.vmap(m)(v))(net, x)
    np.testing.assert_allclose(batched[0], eager, rtol=1e-4, atol=1e-5)
    assert jnp.all(jnp.isfinite(batched))
    with pytest.raises(ValueError, match="x: expected a field" if name in PLAIN else r"^x: .*expected"):
        net(x[0, :1])
    # noise-conditioned variants accept t, the others reject it (the PDE-OBS networks have no t)
    if name != "deeponet" and name in PLAIN:
        cond = nn.get(name, k_model, in_channels=2, out_channels=2, embed_dim=8, **SMALL[name])
        a, b = cond(x[0], jnp.array(-0.5)), cond(x[0], jnp.array(0.5))
        assert a.shape == (2, 16, 16)
        with pytest.raises(ValueError, match="t: expected a noise level"):
            cond(x[0])
        if name != "unet":  # the U-Net output layer starts at zero
            assert not jnp.allclose(a, b)
    with pytest.raises(ValueError, match="t:"):
        net(x[0], jnp.array(0.0))


def test_bad_network_arguments(key):
    with pytest.raises(ValueError, match="name: unknown network"):
        nn.get("transformer", key, in_channels=1, out_channels=1)
    with pytest.raises(ValueError, match="options: invalid options"):
        nn.get("fno", key, in_channels=1, out_channels=1, nonsense=3)
    fno = nn.FNO(1, 1, modes=8, width=4, layers=1, key=key)
    with pytest.raises(ValueError, match="resolves fewer Fourier modes"):
        fno(jnp.zeros((1, 8, 8)))
    uno = nn.UNO(1, 1, modes=2, width=4, depth=2, key=key)
    with pytest.raises(ValueError, match="divisible by 2\\^depth"):
        uno(jnp.zeros((1, 18, 18)))
    with pytest.raises(ValueError, match="rate"):
        nn.Dropout(1.0)


def test_mc_dropout_varies_eval_mode_does_not(key):
    net = nn.FNO(2, 1, modes=4, width=8, layers=2, dropout=0.3, projection=16, key=key)
    x = jr.normal(jr.fold_in(key, 1), (2, 16, 16))
    a, b = net(x), net(x)
    np.testing.assert_array_equal(a, b)
    s1, s2 = net(x, key=jr.fold_in(key, 2)), net(x, key=jr.fold_in(key, 3))
    assert jnp.linalg.norm(s1 - s2) > 1e-3 * jnp.linalg.norm(s1)
    np.testing.assert_array_equal(s1, net(x, key=jr.fold_in(key, 2)))  # reproducible per key
    # the inverse network: MC samples around the deterministic prediction
    inv = nn.InverseNet(net, nn.Normalizer([7.5], [4.5]), nn.Normalizer([0.0], [0.01]))
    mask = jnp.zeros((16, 16), bool).at[::4, ::4].set(True)
    y = 0.01 * jr.normal(jr.fold_in(key, 4), (1, 16, 16))
    samples = jax.vmap(lambda k: inv(y, mask, key=k))(jr.split(key, 8))
    assert samples.shape == (8, 1, 16, 16) and float(samples.std(0).mean()) > 0
    np.testing.assert_array_equal(inv(y, mask), inv(y, mask))
    with pytest.raises(ValueError, match="mask: expected shape"):
        inv(y, mask[:8])


def test_normalizer_round_trip_and_errors(key):
    norm = nn.Normalizer([1.0, -2.0], [2.0, 0.5])
    z = jr.normal(key, (3, 2, 4, 4))
    np.testing.assert_allclose(norm.denormalize(norm.normalize(z)), z, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(norm.normalize(z)[:, 0], (z[:, 0] - 1.0) / 2.0, rtol=1e-6)
    with pytest.raises(ValueError, match="z: expected 2 channels"):
        norm.normalize(z[:, :1])
    with pytest.raises(ValueError, match="std"):
        nn.Normalizer([0.0], [0.0])


def test_flax_linen_adapter_matches_module(key):
    linen = pytest.importorskip("flax.linen")

    class Net(linen.Module):
        @linen.compact
        def __call__(self, x, deterministic=True):
            h = linen.Conv(8, (3, 3))(jnp.moveaxis(x, 0, -1))
            h = linen.Dropout(0.5, deterministic=deterministic)(jax.nn.gelu(h))
            return jnp.moveaxis(linen.Conv(1, (1, 1))(h), -1, 0)

    x = jr.normal(key, (2, 8, 8))
    module = Net()
    variables = module.init(jr.fold_in(key, 1), x)
    wrapped = nn.from_linen(module, variables)
    np.testing.assert_allclose(wrapped(x), module.apply(variables, x), rtol=1e-6)
    # usable as an Equinox model: jit, vmap, gradients w.r.t. the Flax parameters
    out = eqx.filter_jit(lambda m, v: jax.vmap(m)(v))(wrapped, jnp.stack([x, 2 * x]))
    np.testing.assert_allclose(out[1], module.apply(variables, 2 * x), rtol=1e-5, atol=1e-6)
    grads = eqx.filter_grad(lambda m: jnp.sum(m(x) ** 2))(wrapped)
    ref = jax.grad(lambda v: jnp.sum(module.apply(v, x) ** 2))(variables)
    for g, r in zip(jax.tree.leaves(grads.variables), jax.tree.leaves(ref), strict=True):
        np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-7)
    # dropout stream: a key makes it stochastic
    dk = jr.fold_in(key, 2)
    np.testing.assert_allclose(
        wrapped(x, False, key=dk), module.apply(variables, x, False, rngs={"dropout": dk}), rtol=1e-6
    )
    with pytest.raises(ValueError, match="module: expected a flax.linen.Module"):
        nn.from_linen(object(), variables)


def test_flax_adapter_without_flax_names_the_extra(monkeypatch):
    for name in ("flax", "flax.linen", "flax.nnx"):  # as if flax were not installed
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(ImportError, match=r"pip install 'posteriorjax\[flax\]'"):
        nn.from_linen(object())
    with pytest.raises(ImportError, match="needs flax"):
        nn.from_nnx(object())


def test_flax_nnx_adapter_matches_module(key):
    nnx = pytest.importorskip("flax.nnx")
    model = nnx.Sequential(
        nnx.Linear(4, 8, rngs=nnx.Rngs(0)), jax.nn.tanh, nnx.Linear(8, 2, rngs=nnx.Rngs(1))
    )
    x = jr.normal(key, (4,))
    wrapped = nn.from_nnx(model)
    np.testing.assert_allclose(wrapped(x), model(x), rtol=1e-6)
    np.testing.assert_allclose(eqx.filter_jit(lambda m, v: m(v))(wrapped, x), model(x), rtol=1e-6)
