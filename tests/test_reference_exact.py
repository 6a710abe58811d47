"""Exact Gaussian posteriors against dense linear algebra, and pathwise samples against the closed form."""

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from posteriorjax import tasks
from posteriorjax.reference import exact

N = 8


def _dense(task, y):
    e = jnp.eye(N * N).reshape(N * N, 1, N, N)
    a = np.asarray(jax.vmap(task.forward)(e)).T
    c = np.asarray(jax.vmap(task.prior.cov_apply)(e)).reshape(N * N, N * N)
    s = a @ c @ a.T + np.diag(np.asarray(task.noise.variance(len(y))))
    k = c @ a.T @ np.linalg.inv(s)
    return k @ np.asarray(y), c - k @ a @ c


@pytest.fixture(scope="module")
def problem():
    with jax.enable_x64(True):
        task = tasks.get("poisson_fixed", resolution=N, num_sensors=6, noise_std=1e-3)
        y = task.cases(0, 1).y_obs[0]
        mean, cov = _dense(task, y)
        yield task, y, mean, cov


def test_closed_form_matches_dense(problem, x64):
    task, y, mean, cov = problem
    m, s = exact.posterior(task, y)
    np.testing.assert_allclose(m.ravel(), mean, rtol=1e-8, atol=1e-10 * np.abs(mean).max())
    np.testing.assert_allclose(s.ravel(), np.sqrt(np.diag(cov)), rtol=1e-8)
    e = jnp.eye(N * N).reshape(N * N, 1, N, N)
    prior_cov = np.asarray(jax.vmap(task.prior.cov_apply)(e)).reshape(N * N, N * N)
    np.testing.assert_allclose(
        exact.prior_pointwise_variance(task.prior).ravel(), np.diag(prior_cov), rtol=1e-10
    )


def test_pathwise_samples_match_closed_form(problem, key, x64):
    task, y, mean, cov = problem
    num = 4000
    x = np.asarray(exact.sample(key, task, y, num)).reshape(num, -1)
    sd = np.sqrt(np.diag(cov))
    # mean within 5 Monte Carlo standard errors, pointwise
    assert np.all(np.abs(x.mean(0) - mean) < 5 * sd / np.sqrt(num))
    # covariance: Frobenius error relative to ||cov|| below the MC scale (~ sqrt(2 / num) * few)
    emp = np.cov(x.T)
    assert np.linalg.norm(emp - cov) / np.linalg.norm(cov) < 6 * np.sqrt(2.0 / num)


def test_misfit_spectrum_matches_dense(problem, x64):
    task, y, _, cov = problem
    e = jnp.eye(N * N).reshape(N * N, 1, N, N)
    a = np.asarray(jax.vmap(task.forward)(e)).T
    c = np.asarray(jax.vmap(task.prior.cov_apply)(e)).reshape(N * N, N * N)
    lam = exact.misfit_spectrum(task)
    dense = np.sort(np.linalg.eigvalsh(a @ c @ a.T / 1e-6))[::-1]
    np.testing.assert_allclose(lam, dense, rtol=1e-8, atol=1e-8 * dense[0])
    # posterior covariance trace in the whitened latent: N - sum_k lambda_k / (1 + lambda_k)
    vals, vecs = np.linalg.eigh(c)
    c_inv_half = vecs @ np.diag(np.where(vals > 1e-12 * vals.max(), vals, np.inf) ** -0.5) @ vecs.T
    rank = int(np.sum(vals > 1e-12 * vals.max()))
    whitened = np.trace(c_inv_half @ cov @ c_inv_half)
    assert whitened == pytest.approx(rank - np.sum(lam / (1 + lam)), rel=1e-6)


def test_kl_from_prior_matches_dense(problem, x64):
    task, y, _, _ = problem
    e = jnp.eye(N * N).reshape(N * N, 1, N, N)
    a = np.asarray(jax.vmap(task.forward)(e)).T
    vals, vecs = np.linalg.eigh(np.asarray(jax.vmap(task.prior.cov_apply)(e)).reshape(N * N, N * N))
    half = vecs @ np.diag(np.sqrt(np.maximum(vals, 0.0))) @ vecs.T  # C^(1/2), no inverse of C needed
    g = a @ half / 1e-3  # whitened latent -> noise-whitened data
    post_prec = np.eye(N * N) + g.T @ g  # information form, independent of the M x M route
    w = np.linalg.solve(post_prec, g.T @ (np.asarray(y) / 1e-3))  # whitened posterior mean
    p = np.linalg.inv(post_prec)
    dense = 0.5 * (np.trace(p) - N * N - np.linalg.slogdet(p)[1] + w @ w)
    assert exact.condition(task, y).kl_from_prior() == pytest.approx(dense, rel=1e-6)


def test_hierarchical_degenerate_ranges_equal_fixed(problem, x64):
    task, y, _, _ = problem
    fixed_mean, fixed_std = exact.posterior(task, y)
    hier = tasks.get("poisson", resolution=N, num_sensors=6, noise_std=1e-3, alpha_range=(2.0, 2.0 + 1e-9),
                     tau_range=(3.0, 3.0 + 1e-9))  # fmt: skip
    m, s = exact.posterior(hier, y, num_nodes=2)
    np.testing.assert_allclose(m, fixed_mean, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(s, fixed_std, rtol=1e-6)


def test_hierarchical_mixture_weights_follow_evidence(problem, x64):
    task, y, _, _ = problem
    hier = tasks.get("poisson", resolution=N, num_sensors=6, noise_std=1e-3)
    post = exact.condition_hierarchical(hier, y, num_nodes=3)
    assert post.weights.shape == (9,) and abs(post.weights.sum() - 1) < 1e-12
    # each node's log-evidence is the dense Gaussian marginal likelihood log N(y; 0, A C A^T + Sigma)
    comp, (alpha, tau) = post.components[4], post.nodes[4]
    fixed = tasks.get("poisson_fixed", resolution=N, num_sensors=6, noise_std=1e-3, alpha=alpha, tau=tau)
    e = jnp.eye(N * N).reshape(N * N, 1, N, N)
    a = np.asarray(jax.vmap(fixed.forward)(e)).T
    c = np.asarray(jax.vmap(fixed.prior.cov_apply)(e)).reshape(N * N, N * N)
    s = a @ c @ a.T + 1e-6 * np.eye(6)
    yv = np.asarray(y)
    dense = -0.5 * yv @ np.linalg.solve(s, yv) - 0.5 * np.linalg.slogdet(2 * np.pi * s)[1]
    assert comp.log_evidence == pytest.approx(dense, rel=1e-9)
    assert np.all(post.std > 0)


def test_rejects_nonlinear_or_non_gaussian(problem):
    task, y, _, _ = problem
    darcy = tasks.get("darcy", resolution=N, num_sensors=6)
    with pytest.raises(ValueError, match="task"):
        exact.posterior(darcy, darcy.cases(0, 1).y_obs[0])
    with pytest.raises(ValueError, match="y_obs"):
        exact.posterior(task, np.zeros(3))
    with pytest.raises(ValueError, match="num"):
        exact.sample(jr.key(0), task, y, 0)
