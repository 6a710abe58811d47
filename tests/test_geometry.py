"""Observation geometry: closed forms, invariances and the area/AUROC identities; the second-order
transport scheme behind the interface transport task (convergence order, bounds, derivatives)."""

import itertools

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from posteriorjax.grids import Grid
from posteriorjax.metrics import geometry as geo
from posteriorjax.physics import advection_diffusion as ad


def test_sum_map_has_one_retained_direction_and_the_null_direction(x64):
    g = geo.analyze(lambda c: jnp.array([c[0] + c[1]]), jnp.zeros(2), noise_cov=1.0)
    np.testing.assert_allclose(g.singular_values, [np.sqrt(2), 0.0], atol=1e-12)
    assert g.retained.tolist() == [True, False]
    null = g.V[:, 1] * np.sign(g.V[0, 1])
    np.testing.assert_allclose(null, np.array([1.0, -1.0]) / np.sqrt(2), atol=1e-12)
    assert g.rank == 1


def test_more_unknowns_than_observations_gives_zero_singular_values(x64):
    rng = np.random.default_rng(0)
    p, m = 4, 9
    a = rng.standard_normal((p, m))
    g = geo.analyze(lambda c: jnp.tanh(jnp.asarray(a) @ c), jnp.asarray(rng.standard_normal(m)) * 0.1,
                    noise_cov=0.3)  # fmt: skip
    assert np.sum(g.singular_values == 0.0) >= m - p
    assert g.V.shape == (m, m)
    np.testing.assert_allclose(g.V.T @ g.V, np.eye(m), atol=1e-12)
    # the zero directions span the exact null space of J
    np.testing.assert_allclose(g.jacobian @ g.V[:, g.singular_values == 0], 0.0, atol=1e-10)


def test_uniform_noise_scaling_leaves_the_partition_unchanged(x64):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((6, 6)) @ np.diag(np.logspace(0, -2, 6))
    cov = np.diag(rng.uniform(0.5, 2.0, 6))
    fn = lambda c: jnp.asarray(a) @ c  # noqa: E731
    g1 = geo.analyze(fn, jnp.zeros(6), noise_cov=cov)
    g2 = geo.analyze(fn, jnp.zeros(6), noise_cov=100.0 * cov)
    np.testing.assert_array_equal(g1.retained, g2.retained)
    np.testing.assert_allclose(g1.normalized, g2.normalized, rtol=1e-10)
    np.testing.assert_allclose(g1.singular_values, 10.0 * g2.singular_values, rtol=1e-10)


def test_metric_and_correlated_noise_whiten_the_jacobian(x64):
    rng = np.random.default_rng(2)
    a = rng.standard_normal((3, 5))
    l_noise = np.tril(rng.standard_normal((3, 3))) + 3 * np.eye(3)
    l_metric = np.tril(rng.standard_normal((5, 5))) + 3 * np.eye(5)
    cov, metric = l_noise @ l_noise.T, l_metric @ l_metric.T
    g = geo.from_jacobian(a, noise_cov=cov, metric=metric)
    # singular values of Sigma^-1/2 A G^-1/2 are the generalized ones: eig(A G^-1 A^T, Sigma)
    lam = np.sort(np.linalg.eigvals(np.linalg.solve(cov, a @ np.linalg.solve(metric, a.T))).real)[::-1]
    np.testing.assert_allclose(g.singular_values[:3], np.sqrt(lam), rtol=1e-9)
    np.testing.assert_allclose(g.metric_sqrt @ g.metric_sqrt, metric, rtol=1e-10)


def test_jacfwd_agrees_with_finite_differences_and_chunking(x64):
    def fn(c):
        return jnp.stack([jnp.sin(c[0]) * c[1], c[2] ** 3 + c[0], jnp.exp(0.3 * c[1] - c[2])])

    c0 = jnp.array([0.3, -0.7, 0.5])
    report = geo.finite_difference_check(fn, c0)
    err = report["relative_error"]
    assert min(err) < 1e-7
    assert err[0] / err[2] == pytest.approx(100.0, rel=0.05)  # O(h^2) truncation: h 1e-2 -> 1e-3
    np.testing.assert_allclose(geo.jacobian(fn, c0, chunk_size=2), geo.jacobian(fn, c0), rtol=1e-14)


def test_appending_observation_rows_never_reduces_the_exact_rank(x64):
    rng = np.random.default_rng(3)
    m = 8
    rows = rng.standard_normal((6, m)) * np.logspace(0, -6, 6)[:, None]
    ranks = [geo.from_jacobian(rows[:p], noise_cov=1.0).rank for p in range(1, 7)]
    assert ranks == sorted(ranks) and ranks[-1] == 6
    # ...while the relative effective rank can drop (normalization by s_1)
    g0 = geo.from_jacobian(np.diag([1.0, 0.1]), noise_cov=1.0)
    g1 = geo.from_jacobian(np.array([[1.0, 0.0], [0.0, 0.1], [100.0, 0.0]]), noise_cov=1.0)
    assert (g0.num_retained, g1.num_retained) == (2, 1) and g1.rank == 2


def _brute_force_yield(u, hit):
    """Average of the claimed-hit curve over every ordering consistent with `u` (ties permuted)."""
    m = len(u)
    curves = []
    for perm in itertools.permutations(range(m)):
        ranks = np.asarray(perm)
        if all(u[ranks[i]] >= u[ranks[i + 1]] for i in range(m - 1)):
            curves.append(np.concatenate([[0], np.cumsum(hit[ranks])]))
    return np.mean(curves, axis=0)


def test_linear_posterior_nrmse_closed_forms():
    """y = c_1 + e, e ~ N(0, s^2): the observed direction's NRMSE is s / sqrt(1 + s^2) (unit prior),
    the null direction's 1 under an independent prior and sqrt(1 - rho^2 / (1 + s^2)) under a prior
    with correlation rho; a Monte Carlo posterior mean gives the same."""
    s2, rho = 0.25, 0.8
    g = geo.from_jacobian(np.array([[1.0, 0.0]]), noise_cov=s2)
    np.testing.assert_allclose(np.abs(g.V), np.eye(2), atol=1e-15)
    np.testing.assert_allclose(geo.linear_posterior_nrmse(g, 1.0, s2), [np.sqrt(s2 / (1 + s2)), 1.0])
    prior = np.array([[1.0, rho], [rho, 1.0]])
    expect = [np.sqrt(s2 / (1 + s2)), np.sqrt(1 - rho**2 / (1 + s2))]
    np.testing.assert_allclose(geo.linear_posterior_nrmse(g, prior, s2), expect, rtol=1e-12)
    rng = np.random.default_rng(0)
    c = rng.multivariate_normal(np.zeros(2), prior, size=200_000)
    y = c[:, 0] + np.sqrt(s2) * rng.standard_normal(len(c))
    mean = np.outer(y / (1 + s2), [1.0, rho])  # E[c | y] = P J^T (J P J^T + s^2)^-1 y
    d_mean, d_true = geo.project(g, mean), geo.project(g, c)
    np.testing.assert_allclose(geo.directional_nrmse(d_mean, d_true), expect, rtol=1e-2)
    with pytest.raises(ValueError, match="prior_cov"):
        geo.linear_posterior_nrmse(g, np.ones(3), s2)


def test_ties_are_averaged_over_orderings():
    u = np.array([0.5, 0.2, 0.5, 0.5, 0.1, 0.2])
    hit = np.array([True, False, False, True, False, True])
    retained = hit | np.array([False, True, False, False, False, False])
    sel = geo.selection(u, retained, hit)
    np.testing.assert_allclose(sel.recovery_yield * 6, _brute_force_yield(u, hit), rtol=1e-12)
    np.testing.assert_allclose(sel.abstention, 1 - _brute_force_yield(u, ~retained) / 2, rtol=1e-12)


def test_crc_auc_equals_hit_auroc_and_d_matches_geometric_auroc(key):
    for i in range(20):
        k1, k2, k3 = jr.split(jr.fold_in(key, i), 3)
        m = 17
        u = np.round(np.asarray(jr.uniform(k1, (m,))), 1)  # rounding makes ties
        retained = np.array(jr.uniform(k2, (m,)) < 0.6)
        retained[0], retained[1] = True, False
        hit = retained & np.asarray(jr.uniform(k3, (m,)) < 0.7)
        hit[0] = True
        sel = geo.selection(u, retained, hit)
        a = geo.auroc(u, hit)
        if sel.crc_auc.defined:
            assert sel.crc_auc.value == pytest.approx(a.value, abs=1e-12)
        r = retained.sum()
        expected = (r / m) * (sel.geometric_auroc.value - 0.5)
        assert sel.excess_abstention.value == pytest.approx(expected, abs=1e-12)


def test_random_confidence_matches_random_reference_in_expectation():
    retained = np.array([True] * 5 + [False] * 4)
    hit = retained & (np.arange(9) % 2 == 0)
    sel = geo.selection(np.zeros(9), retained, hit)  # all tied = uniformly random ordering
    np.testing.assert_allclose(sel.recovery_yield, sel.recovery_yield_random, atol=1e-12)
    np.testing.assert_allclose(sel.abstention, sel.abstention_random, atol=1e-12)
    assert sel.crc_auc.value == pytest.approx(0.5) and sel.excess_abstention.value == pytest.approx(0.0)


def test_oracle_gating_and_claim_everything():
    g = geo.from_jacobian(np.diag([1.0, 0.5, 0.2, 1e-3, 0.0]), noise_cov=1.0)
    truth = np.random.default_rng(0).standard_normal((200, 5))
    pred = truth.copy()
    pred[:, 3:] = 0.0  # perfect on the retained directions, the mean elsewhere
    e = geo.directional_nrmse(geo.project(g, pred), geo.project(g, truth))
    h = geo.hits(g, e)
    assert h.tolist() == [True, True, True, False, False]
    assert geo.scrs(g.retained, g.retained, h).value == 1.0
    assert geo.scrs(np.ones(5, bool), g.retained, h).value == 0.0
    oracle = geo.selection(g.retained.astype(float), g.retained, h)
    assert oracle.geometric_auroc.value == 1.0 and oracle.crc_auc.value == 1.0
    # a budget inside a tied group claims fractionally
    np.testing.assert_allclose(geo.claims_at(g.retained.astype(float), 4), [1, 1, 1, 0.5, 0.5])


def test_undefined_scores_carry_a_reason():
    retained = np.array([True, True, False])
    sel = geo.selection(np.array([3.0, 2.0, 1.0]), retained, np.zeros(3, bool))
    assert not sel.crc_auc.defined and "no recovered" in sel.crc_auc.reason
    sel = geo.selection(np.array([3.0, 2.0, 1.0]), np.ones(3, bool), np.ones(3, bool))
    assert sel.geometric_auroc.value is None and sel.abstention is None
    assert "undefined" in f"{sel.excess_abstention}"
    assert geo.scrs(np.zeros(3), np.zeros(3, bool), np.zeros(3, bool)).value is None


def test_std_ratios_of_the_exact_linear_gaussian_posterior(key, x64):
    """Prior N(0, I), y = A c + N(0, s^2 I): in the V basis Cov_post = diag(1 / (1 + s_i^2))."""
    rng = np.random.default_rng(4)
    m, p, n = 6, 3, 20000
    a = rng.standard_normal((p, m)) * np.array([3.0, 1.0, 0.05])[:, None]
    cov = 0.25
    g = geo.from_jacobian(a, noise_cov=cov)
    post_cov = np.linalg.inv(np.eye(m) + a.T @ a / cov)
    k1, k2 = jr.split(key)
    prior = np.asarray(jr.normal(k1, (n, m)))
    post = np.asarray(jr.normal(k2, (n, m))) @ np.linalg.cholesky(post_cov).T
    out = geo.std_ratios(g, post, prior)
    expected = 1.0 / np.sqrt(1.0 + g.singular_values**2)
    np.testing.assert_allclose(out["ratio"], expected, rtol=0.03)  # ~4 sigma for n = 2e4
    assert out["retained"].value < 0.5 and out["below_threshold"].value == pytest.approx(1.0, abs=0.05)


@pytest.mark.parametrize("tau", [0.0, 1.0, -0.1, 2.0, "0.1"])
def test_bad_tau(tau):
    with pytest.raises(ValueError, match="tau"):
        geo.from_jacobian(np.eye(2), noise_cov=1.0, tau=tau)


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(noise_cov=np.array([[1.0, 0.0], [0.0, 0.0]])), "noise_cov"),
        (dict(noise_cov=np.array([[1.0, 2.0], [2.0, 1.0]])), "noise_cov"),
        (dict(noise_cov=np.array([[1.0, 0.5], [0.0, 1.0]])), "noise_cov"),
        (dict(noise_cov=np.array([1.0, -1.0])), "noise_cov"),
        (dict(noise_cov=1.0, metric=np.zeros((2, 2))), "metric"),
        (dict(noise_cov=1.0, metric=np.ones(3)), "metric"),
    ],
)
def test_bad_covariances(kwargs, name):
    with pytest.raises(ValueError, match=name):
        geo.from_jacobian(np.eye(2), **kwargs)


def test_bad_confidence():
    retained, hit = np.array([True, False, True]), np.array([True, False, False])
    with pytest.raises(ValueError, match="confidence: expected shape"):
        geo.selection(np.ones(4), retained, hit)
    with pytest.raises(ValueError, match="confidence: expected finite"):
        geo.selection(np.array([1.0, np.nan, 0.0]), retained, hit)
    with pytest.raises(ValueError, match="hit"):
        geo.selection(np.ones(3), retained, np.array([False, True, False]))


# ----------------------------------------------------------------------------
# The transport scheme of interface_transport


def _nodes(grid):
    x = (np.arange(grid.n) + 1) * grid.spacing
    return np.meshgrid(x, x)  # [y, x]


def _gaussian(grid, centre, var, amplitude=1.0):
    xx, yy = _nodes(grid)
    return amplitude * np.exp(-((xx - centre[0]) ** 2 + (yy - centre[1]) ** 2) / (2 * var))


def _transport_error(n, scheme, b=(1.0, 0.3), kappa=1e-3, t=0.3, var0=0.06**2):
    """RMS error against the free-space solution: the bump translated by b t, variance var0 + 2 kappa t
    (the boundary, >= 0.35 away, contributes < 1e-5)."""
    grid = Grid(n)
    velocity = ad.uniform_velocity(grid, *b)
    steps = int(np.ceil(t / ad.stable_dt(velocity, grid, scheme)))
    u0 = jnp.asarray(_gaussian(grid, (0.35, 0.4), var0))
    u = ad.solve_transient(u0, velocity, kappa, grid, t_final=t, num_steps=steps, scheme=scheme)[-1]
    var = var0 + 2 * kappa * t
    exact = _gaussian(grid, (0.35 + b[0] * t, 0.4 + b[1] * t), var, var0 / var)
    return float(np.sqrt(np.mean((np.asarray(u) - exact) ** 2)))


def test_muscl_transport_converges_at_second_order(x64):
    ns = np.array([31, 63, 127])
    errors = np.array([_transport_error(int(n), "muscl") for n in ns])
    order = np.polyfit(np.log(1.0 / (ns + 1)), np.log(errors), 1)[0]
    local = np.log2(errors[:-1] / errors[1:])
    # measured 1.65 and 2.00 (van Albada clipping at the bump's peak costs a little on coarse grids)
    assert order > 1.7 and local[-1] > 1.85, (errors, local)
    # first-order upwind is 2.6x less accurate on the 64-point grid already
    assert _transport_error(63, "upwind") > 2 * errors[1]


def test_muscl_adds_no_extrema_and_is_differentiable(x64):
    grid = Grid(31)
    xx, yy = _nodes(grid)
    square = jnp.asarray(((abs(xx - 0.35) < 0.15) & (abs(yy - 0.4) < 0.15)).astype(float))
    velocity = ad.uniform_velocity(grid, -0.7, 0.4)
    steps = int(np.ceil(0.3 / ad.stable_dt(velocity, grid, "muscl")))
    u = ad.solve_transient(square, velocity, 1e-3, grid, t_final=0.3, num_steps=steps, scheme="muscl")
    assert float(u.min()) > -1e-12 and float(u.max()) < 1.0

    def sensor_sum(shift):
        u0 = jnp.exp(-((xx - 0.35 - shift) ** 2 + (yy - 0.4) ** 2) / (2 * 0.06**2))
        b = ad.uniform_velocity(grid, 1.0, 0.3)
        u = ad.solve_transient(u0, b, 1e-3, grid, t_final=0.3, num_steps=26, scheme="muscl")
        return u[-1][10:20, 20].sum()

    h = 1e-6
    fd = (sensor_sum(0.01 + h) - sensor_sum(0.01 - h)) / (2 * h)
    assert float(jax.jacfwd(sensor_sum)(0.01)) == pytest.approx(float(fd), rel=1e-6)
    with pytest.raises(ValueError, match="muscl stability limit"):  # within the upwind limit
        ad.solve_transient(
            square, velocity, 1e-3, grid, t_final=0.3, num_steps=steps // 2 + 1, scheme="muscl"
        )
    with pytest.raises(ValueError, match="scheme"):
        ad.solve_transient(square, velocity, 1e-3, grid, t_final=0.3, num_steps=steps, scheme="weno")


def test_conformal_tables_score_rankings_against_the_geometric_reference():
    from types import SimpleNamespace

    from posteriorjax.studies.geometry import study

    m, r = 17, 12
    retained = np.arange(m) < r
    g = SimpleNamespace(retained=retained, num_retained=r, num_below=m - r)
    hit = retained.copy()
    oracle = geo.selection(retained.astype(float), retained, hit)  # retained ranked first
    reverse = geo.selection(-retained.astype(float), retained, hit)  # below-threshold first
    items = [("Flooding M12", "mlp", "id", None, None, oracle, g)] * 2
    items += [
        ("Flooding M12", "gru", "id", None, None, reverse, g),
        ("Flooding M12", "gru", "ood", None, None, oracle, g),
    ]
    t5, t6, t7, out = study.conformal_tables(items, budgets=(10, 14, 16))
    d_geo = r / (2 * m)
    assert out["Flooding M12 / mlp"]["geometric_auroc"] == [1.0, 1.0]
    np.testing.assert_allclose(out["Flooding M12 / mlp"]["excess_abstention"], [d_geo] * 2)
    assert out["Flooding M12 / gru"]["geometric_auroc"] == [0.0]  # the OOD item is left out
    np.testing.assert_allclose(out["Flooding M12 / gru"]["excess_abstention"], [-d_geo])
    # oracle ranking: Z(j) = 1 while only retained directions are claimed, then (m - j) / (m - r)
    z = out["Flooding M12 / mlp"]["budget_abstention"]
    np.testing.assert_allclose([z["10"][0], z["14"][0], z["16"][0]], [1.0, 3 / 5, 1 / 5])
    assert "| Flooding M12 | mlp | 12 / 5 | 12.0 | 0.353 ± 0.000 | 0.353 | 1.00 | 0.063 (0.18) |" in t6
    assert "0.589" in t5 and "0.600 (0.176)" in t7
