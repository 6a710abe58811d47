import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
import scipy.stats

from posteriorjax import random_fields as rf

N = 16


@pytest.mark.parametrize("basis", rf.BASES)
def test_grf_mode_variances_match_spectrum(key, basis):
    """Empirical variance of every basis coefficient equals s_k^2 (chi-square tolerance)."""
    grf = rf.GaussianRandomField(N, 2.0, 3.0, basis)
    num = 4000
    x = rf.sample_batch(grf, key, num)[:, 0]
    c = np.asarray(rf.forward_transform(x, basis))
    emp = np.mean(np.abs(c) ** 2, axis=0)
    s2 = np.asarray(grf.mode_std()) ** 2
    active = s2 > 0
    ratio = emp[active] / s2[active]
    # each ratio is a mean of `num` unit-mean chi-square(1) (or exponential) draws: sd <= sqrt(2/num)
    assert np.all(np.abs(ratio - 1) < 6 * np.sqrt(2 / num))
    assert abs(ratio.mean() - 1) < 6 * np.sqrt(2 / num / active.sum())
    assert np.allclose(emp[~active], 0, atol=1e-10)


@pytest.mark.parametrize("basis", rf.BASES)
def test_grf_pointwise_variance_is_resolution_independent(basis):
    v = [rf.GaussianRandomField(n, 2.5, 3.0, basis).pointwise_variance() for n in (32, 64, 128)]
    assert abs(v[1] / v[2] - 1) < 0.02 and abs(v[0] / v[2] - 1) < 0.06


@pytest.mark.parametrize("basis", rf.BASES)
def test_grf_log_prob_and_score_closed_form(x64, basis):
    n = 4
    grf = rf.GaussianRandomField(n, 2.0, 3.0, basis)
    eye = jnp.eye(n * n).reshape(n * n, n, n)
    cov = np.asarray(jax.jit(jax.vmap(grf.cov_apply))(eye)).reshape(n * n, n * n)
    x = grf.sample(jr.key(1))
    expected = scipy.stats.multivariate_normal(np.zeros(n * n), cov, allow_singular=True).logpdf(
        np.asarray(x).ravel()
    )
    assert np.isclose(float(jax.jit(grf.log_prob)(x)), expected, rtol=1e-9)
    np.testing.assert_allclose(
        jax.jit(grf.score)(x), jax.jit(jax.grad(grf.log_prob))(x), rtol=1e-8, atol=1e-10
    )
    # symmetric square root: C^(1/2) C^(1/2) = C
    sq = np.asarray(jax.jit(jax.vmap(grf.sqrt_cov_apply))(eye)).reshape(n * n, n * n)
    np.testing.assert_allclose(sq @ sq, cov, atol=1e-12)


def test_grf_rejects_bad_parameters():
    with pytest.raises(ValueError, match="basis"):
        rf.GaussianRandomField(8, 2.0, 3.0, "wavelet")
    with pytest.raises(ValueError, match="tau"):
        rf.GaussianRandomField(8, 2.0, -1.0)
    with pytest.raises(ValueError, match="alpha_range"):
        rf.HierarchicalGRF(8, alpha_range=(3.0, 1.5))


def test_hierarchical_grf_hyperparameters_uniform_and_conditional(key):
    prior = rf.HierarchicalGRF(N)
    latents = jax.jit(jax.vmap(prior.latent))(jr.split(key, 2000))
    alpha, tau = jax.jit(jax.vmap(prior.hyperparameters))(latents)
    assert scipy.stats.kstest((np.asarray(alpha) - 1.5) / 1.5, "uniform").pvalue > 1e-3
    assert scipy.stats.kstest((np.asarray(tau) - 2.0) / 2.0, "uniform").pvalue > 1e-3
    # given the hyperparameters, the field is the conditional GRF applied to the same white noise
    one = jax.tree.map(lambda v: v[0], latents)
    a, t = prior.hyperparameters(one)
    np.testing.assert_allclose(
        prior.transform(one), prior.conditional(a, t).transform(one["xi"]), rtol=1e-5, atol=1e-6
    )
    # the quadrature variance matches Monte Carlo
    fields = jax.jit(jax.vmap(prior.transform))(latents)
    assert abs(float(fields.var()) / prior.pointwise_variance() - 1) < 0.1


def test_thresholded_grf_is_binary_with_published_moments(key):
    prior = rf.ThresholdedGRF(rf.GaussianRandomField(32, 2.0, 3.0))
    a = np.asarray(rf.sample_batch(prior, key, 500))
    assert set(np.unique(a)) == {3.0, 12.0}
    assert abs(a.mean() - 7.5) < 0.3 and abs(a.std() - 4.5) < 0.1


def test_smooth_grf_standardized_with_gaussian_filter_spectrum(key):
    prior = rf.SmoothGRF(32, 0.09)
    x = np.asarray(rf.sample_batch(prior, key, 400))[:, 0]
    np.testing.assert_allclose(x.mean(axis=(1, 2)), 0, atol=1e-5)
    np.testing.assert_allclose(x.std(axis=(1, 2)), 1, rtol=1e-4)
    power = np.mean(np.abs(np.fft.fft2(x)) ** 2, axis=0)
    m1, m2 = 1, 3  # power ratio along one axis follows exp(-4 (pi l)^2 (m1^2 - m2^2))
    expected = np.exp(-4 * (np.pi * 0.09) ** 2 * (m1**2 - m2**2))
    measured = (power[0, m1] + power[m1, 0]) / (power[0, m2] + power[m2, 0])
    assert abs(measured / expected - 1) < 0.25


def test_anisotropic_lognormal_moments_and_correlation(key):
    z = (np.arange(32) + 0.5) * 135 / 32
    x = np.cumsum(3.8 * 1.035 ** np.arange(48))
    prior = rf.AnisotropicLogNormal(z, x, fft_shape=(64, 64), length_x_range=(100.0, 200.0))
    latents = jax.jit(jax.vmap(prior.latent))(jr.split(key, 1500))
    latents["hyper"] = jnp.zeros_like(latents["hyper"])  # mean 255, std 250.5, lz 35, lx 150
    k = np.asarray(jax.jit(jax.vmap(prior.transform))(latents))
    assert k.shape == (1500, 1, 32, 48) and np.all(k > 0)
    assert abs(k.mean() / 255.0 - 1) < 0.05 and abs(k.std() / 250.5 - 1) < 0.15
    g = np.asarray(jax.jit(jax.vmap(prior.gaussian))(latents))
    assert abs(g.var() - 1) < 0.05
    lag = 8  # rows: dz = 4.22 m, so exp(-(8 dz / 35)^2)
    measured = np.mean(g[:, :-lag, 0] * g[:, lag:, 0])
    assert abs(measured - np.exp(-((lag * 135 / 32 / 35) ** 2))) < 0.05


def test_anisotropic_lognormal_rejects_unresolved_grid():
    with pytest.raises(ValueError, match="fft_shape"):
        rf.AnisotropicLogNormal(np.arange(8.0), np.arange(8.0) * 1000, fft_shape=(8, 8))


@pytest.mark.parametrize(
    "prior",
    [
        rf.GaussianRandomField(N, 2.0, 3.0),
        rf.HierarchicalGRF(N),
        rf.ThresholdedGRF(rf.GaussianRandomField(N, 2.0, 3.0)),
        rf.SmoothGRF(N),
    ],
    ids=lambda p: type(p).__name__,
)
def test_priors_jit_vmap_and_latent_roundtrip(key, prior):
    keys = jr.split(key, 3)
    batch = jax.jit(jax.vmap(prior.sample))(keys)
    assert batch.shape == (3, *prior.shape)
    loop = jnp.stack([prior.transform(prior.latent(k)) for k in keys])
    np.testing.assert_allclose(batch, loop, rtol=1e-5, atol=1e-6)
