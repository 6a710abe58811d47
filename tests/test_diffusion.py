"""Diffusion: preconditioning, schedules, function-space noise, samplers against closed-form GRF priors,
and a trained tiny prior against the GRF spectrum and score."""

import tempfile

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from posteriorjax import diffusion, nn, random_fields, training
from posteriorjax.training.losses import DiffusionLoss

N = 16
PRIOR = random_fields.GaussianRandomField(N, 2.0, 3.0, "cosine")
STD = float(np.sqrt(PRIOR.pointwise_variance()))
S2 = np.asarray(PRIOR.mode_std()) ** 2 / STD**2  # per-mode variance of the normalized prior
BINS = np.add.outer(np.arange(N), np.arange(N))  # |k|_1 shells of the cosine basis


def cosine(x):
    return random_fields.forward_transform(x, "cosine")


def icosine(c):
    return random_fields.inverse_transform(c, "cosine")


class ExactDenoiser(eqx.Module):
    """E[x0 | x] = Cp (Cp + sigma^2 Cn)^-1 x, x0 ~ N(0, Cp), noise N(0, sigma^2 Cn), cosine-diagonal."""

    noise_var: jax.Array
    sigma_data: float = 1.0

    def __call__(self, x, sigma, *, key=None):
        return icosine(cosine(x) * S2 / (S2 + sigma**2 * self.noise_var))


def shell_power(samples):
    """Mean per-mode power of `samples (B, 1, N, N)` in |k|_1 shells 1..7, and the prior's."""
    p = jnp.mean(cosine(samples[:, 0]) ** 2, 0)
    return np.array([p[BINS == b].mean() for b in range(1, 8)]), np.array(
        [S2[BINS == b].mean() for b in range(1, 8)]
    )


def normalized_prior(key, num):
    return jax.vmap(lambda k: PRIOR.sample(k) / STD)(jr.split(key, num))


def test_preconditioning_gives_unit_variance_inputs_and_targets(key):
    x0 = normalized_prior(key, 512)
    assert abs(float(x0.var()) - 1.0) < 0.1
    noise = diffusion.GRFNoise(2.0, 3.0, "fourier")
    for i, sigma in enumerate([0.002, 0.1, 1.0, 10.0, 80.0]):
        eps = jax.vmap(lambda k: noise.sample(k, (1, N, N)))(jr.split(jr.fold_in(key, i), 512))
        x = x0 + sigma * eps
        _, _, c_in, _ = diffusion.preconditioning(sigma)
        target = diffusion.regression_target(x0, x, sigma)
        assert abs(float((c_in * x).var()) - 1.0) < 0.1, sigma
        assert abs(float(target.var()) - 1.0) < 0.1, sigma


def test_karras_schedule(key):
    s = diffusion.karras_sigmas(18, 0.002, 80.0)
    assert s.shape == (19,) and float(s[-1]) == 0.0
    np.testing.assert_allclose([s[0], s[-2]], [80.0, 0.002], rtol=1e-5)
    assert jnp.all(jnp.diff(s) < 0)
    np.testing.assert_allclose(
        s[9], (80 ** (1 / 7) + 9 / 17 * (0.002 ** (1 / 7) - 80 ** (1 / 7))) ** 7, rtol=1e-5
    )
    with pytest.raises(ValueError, match="sigma_min"):
        diffusion.karras_sigmas(10, 1.0, 0.5)
    with pytest.raises(ValueError, match="num_steps"):
        diffusion.karras_sigmas(0, 0.1, 1.0)
    sig = diffusion.log_normal_sigma(key, (20000,))
    np.testing.assert_allclose([jnp.log(sig).mean(), jnp.log(sig).std()], [-1.2, 1.2], atol=0.03)


@pytest.mark.parametrize("basis", ["fourier", "cosine", "sine"])
def test_grf_noise_unit_variance_spectrum_and_resolution_transfer(basis, key):
    noise = diffusion.GRFNoise(2.5, 3.0, basis)
    for n in (8, 16):
        eps = jax.vmap(lambda k, n=n: noise.sample(k, (2, n, n)))(jr.split(jr.fold_in(key, n), 200))
        assert eps.shape == (200, 2, n, n)
        assert abs(float(eps.var()) - 1.0) < 0.15  # few effective samples: long correlations
        coeff = random_fields.forward_transform(eps, basis)
        power = jnp.mean(jnp.abs(coeff) ** 2, axis=(0, 1))
        expected = noise.mode_std(n) ** 2
        top = expected > 0.1 * expected.max()
        np.testing.assert_allclose(power[top], expected[top], rtol=0.25)
        with jax.enable_x64(True):  # C_n has condition number ~1e7: check C_n^-1 C_n = I in float64
            v = jr.normal(key, (n, n), jnp.float64)
            np.testing.assert_allclose(
                noise.precision_apply(icosine_or(basis, v, noise.mode_std(n) ** 2)), v, atol=1e-8
            )
    # the same function-space spectrum at both resolutions (mode variances per unit area agree)
    np.testing.assert_allclose(noise.mode_std(16)[:3, :3] / 16, noise.mode_std(8)[:3, :3] / 8, rtol=0.05)
    with pytest.raises(ValueError, match="shape: expected a square field"):
        noise.sample(key, (1, 16, 8))
    with pytest.raises(ValueError, match="basis"):
        diffusion.GRFNoise(2.0, 3.0, "wavelet")


def icosine_or(basis, v, var):
    return random_fields.inverse_transform(random_fields.forward_transform(v, basis) * var, basis)


@pytest.mark.parametrize("noise_name", [pytest.param("white", marks=pytest.mark.slow), "grf"])
def test_heun_and_ode_samplers_with_the_exact_denoiser_reproduce_the_prior(noise_name, key):
    noise = diffusion.WhiteNoise() if noise_name == "white" else diffusion.GRFNoise(1.5, 3.0, "cosine")
    var = jnp.ones((N, N)) if noise_name == "white" else noise.mode_std(N) ** 2
    den = ExactDenoiser(var)
    sigmas = diffusion.karras_sigmas(40, 0.002, 80.0)
    heun = jax.jit(jax.vmap(lambda k: diffusion.sample(k, den, (1, N, N), sigmas, noise=noise)))(
        jr.split(key, 256)
    )
    got, want = shell_power(heun)
    np.testing.assert_allclose(got, want, rtol=0.15)  # sampling error <= 7 % per shell
    euler = jax.jit(
        jax.vmap(lambda k: diffusion.sample(k, den, (1, N, N), diffusion.karras_sigmas(6, 0.002, 80.0),
                                            noise=noise, method="euler"))
    )(jr.split(key, 256))  # fmt: skip
    assert np.max(np.abs(np.log(shell_power(euler)[0] / want))) > np.max(np.abs(np.log(got / want)))
    ode = jax.jit(jax.vmap(lambda k: diffusion.sample_ode(k, den, (1, N, N), noise=noise)))(
        jr.split(key, 128)
    )
    got, _ = shell_power(ode)
    np.testing.assert_allclose(got, want, rtol=0.25)
    # Tweedie: the score of the exact denoiser is the closed-form score of N(0, Cp + sigma^2 Cn)
    x = normalized_prior(key, 1)[0] + 0.7 * noise.sample(jr.fold_in(key, 1), (1, N, N))
    closed = icosine(-cosine(x) / (S2 + 0.49 * var))
    np.testing.assert_allclose(diffusion.score(den, x, 0.7, noise), closed, rtol=1e-3, atol=1e-3)
    with pytest.raises(ValueError, match="method"):
        diffusion.sample(key, den, (1, N, N), sigmas, noise=noise, method="rk4")


class _PriorSource(eqx.Module):
    batch: int = eqx.field(static=True)

    def __call__(self, key):
        return normalized_prior(key, self.batch)


def _train_prior(steps, noise, width=16):
    net = nn.FNO(1, 1, modes=8, width=width, layers=2, embed_dim=32, projection=32, key=jr.key(0))
    den = diffusion.EDMDenoiser(net, nn.Normalizer([0.0], [STD]))
    cfg = training.TrainConfig(
        num_steps=steps, batch_size=16, learning_rate=3e-3, warmup_steps=10, ema_decay=0.9,
        log_every=steps, eval_every=steps, checkpoint_every=steps, progress=False,
    )  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        _, ema, _ = training.fit(den, DiffusionLoss(noise), _PriorSource(16), cfg, tmp)
    return ema


def _check_trained(model, noise, key, *, spectrum_tol, score_ratio):
    var = noise.mode_std(N) ** 2
    exact = ExactDenoiser(var)
    sigmas = diffusion.karras_sigmas(12, 0.01, 20.0)
    samples = jax.jit(jax.vmap(lambda k: diffusion.sample(k, model, (1, N, N), sigmas, noise=noise)))(
        jr.split(key, 96)
    )
    got, want = shell_power(samples)
    log_ratio = np.abs(np.log(got / want))
    assert np.max(log_ratio[:4]) < np.log(spectrum_tol), (got, want)  # shells 1-4: > 90 % of the variance
    assert np.max(log_ratio) < np.log(2.5), (got, want)
    # score error in the noise metric ||C_n^(1/2) (s - s*)|| / ||C_n^(1/2) s*||,
    # against that of the untrained (c_skip-only) denoiser
    x0 = normalized_prior(jr.fold_in(key, 1), 64)
    eps = jax.vmap(lambda k: noise.sample(k, (1, N, N)))(jr.split(jr.fold_in(key, 2), 64))

    def err(den, sigma):
        x = x0 + sigma * eps
        s = jax.vmap(lambda v: diffusion.score(den, v, sigma, noise))(x)
        s_true = jax.vmap(lambda v: diffusion.score(exact, v, sigma, noise))(x)
        whiten = lambda v: icosine(cosine(v) * jnp.sqrt(var))  # noqa: E731
        return float(jnp.linalg.norm(whiten(s - s_true)) / jnp.linalg.norm(whiten(s_true)))

    c_skip_only = lambda x, sigma, key=None: diffusion.preconditioning(sigma)[0] * x  # noqa: E731
    for sigma in (0.3, 1.0):  # where the c_skip-only denoiser is far from the exact one
        assert err(model, sigma) < score_ratio * err(c_skip_only, sigma), sigma
    assert err(model, 3.0) < 0.2  # at large sigma both are close to the exact denoiser


def test_trained_tiny_prior_matches_grf_spectrum_and_score_cheap(key):
    noise = diffusion.GRFNoise(1.5, 3.0, "cosine")
    _check_trained(_train_prior(150, noise), noise, key, spectrum_tol=2.5, score_ratio=0.85)


@pytest.mark.slow
def test_trained_tiny_prior_matches_grf_spectrum_and_score(key):
    noise = diffusion.GRFNoise(1.5, 3.0, "cosine")
    _check_trained(_train_prior(1500, noise, width=24), noise, key, spectrum_tol=1.5, score_ratio=0.7)


def test_denoiser_errors(key):
    den = diffusion.EDMDenoiser(nn.FNO(2, 2, modes=4, width=4, layers=1, embed_dim=8, key=key),
                                nn.Normalizer([0.0, 1.0], [1.0, 2.0]))  # fmt: skip
    assert den(jnp.zeros((2, 16, 16)), 1.0).shape == (2, 16, 16)
    with pytest.raises(ValueError, match="x: expected a normalized field"):
        den(jnp.zeros((1, 16, 16)), 1.0)
    with pytest.raises(ValueError, match="x0: expected a batch"):
        diffusion.dsm_loss(den, key, jnp.zeros((2, 16, 16)), noise=diffusion.WhiteNoise())
