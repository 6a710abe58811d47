"""Sort-free metric paths give the sorted paths' values: pairwise CRPS and coverage by counting."""

import functools

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from posteriorjax.metrics import calibration, scoring


def _ensembles(key, n):
    """A continuous ensemble and a tie-heavy binary one (Darcy's {3, 12} projection), with truths."""
    k1, k2 = jr.split(key)
    x = jr.normal(k1, (n, 6, 6))
    t = 1.3 * jr.normal(k2, (6, 6))
    xb, tb = jnp.where(x > 0.3, 12.0, 3.0), jnp.where(t > 0.0, 12.0, 3.0)
    return [(x, t), (xb, tb), (x, x[0]), (xb, xb[1])]


@pytest.mark.parametrize("n", [pytest.param(2, marks=pytest.mark.slow), 40])
def test_coverage_by_counting_equals_sorted_quantile_intervals(key, n):
    x, t = (jnp.stack(v) for v in zip(*_ensembles(jr.fold_in(key, n), n), strict=True))
    counted = jax.vmap(lambda s, y: calibration.coverage(s, y, method="count"))(x, t)
    sorted_ = jax.vmap(lambda s, y: calibration.coverage(s, y, method="sort"))(x, t)
    np.testing.assert_array_equal(np.delete(counted, 2, 0), np.delete(sorted_, 2, 0))
    # case 2, truth = a member: jnp.interp evaluates q(p_k) on the segment to its left as
    # x_(k-1) + (x_(k) - x_(k-1)), which can round below x_(k) and drop the boundary
    # element; counting keeps it (the exact answer), so it may only count more
    assert np.all(np.asarray(counted[2]) >= np.asarray(sorted_[2]))
    assert float(jnp.max(counted[2] - sorted_[2])) <= 2.0 / t[2].size


@pytest.mark.parametrize("n", [pytest.param(5, marks=pytest.mark.slow), 40])
def test_pairwise_crps_equals_sorted_crps(key, n, monkeypatch):
    monkeypatch.setattr(scoring, "PAIRWISE_BLOCK", 64)  # 144 elements: two full blocks and a padded one
    # CRPS is per element: the four ensembles side by side are one call
    x, t = (jnp.concatenate(v, axis=-1) for v in zip(*_ensembles(jr.fold_in(key, n), n), strict=True))
    w = jr.uniform(jr.fold_in(key, 99), (n,)) + 0.1
    options = [(None, "standard"), (w / w.sum(), "standard"), (None, "fair")]
    for weights, est in options:
        pair = scoring.crps(x, t, weights, estimator=est, method="pairwise")
        ref = scoring.crps(x, t, weights, estimator=est, method="sort")
        np.testing.assert_allclose(pair, ref, rtol=1e-5, atol=1e-5 * float(jnp.max(jnp.abs(x))))


def test_sort_free_methods_reject_bad_options(key):
    x, t = _ensembles(key, 4)[0]
    with pytest.raises(ValueError, match="method"):
        scoring.crps(x, t, method="quick")
    with pytest.raises(ValueError, match="method"):
        calibration.coverage(x, t, method="rank")
    with pytest.raises(ValueError, match="equal weights"):
        calibration.coverage(x, t, weights=jnp.full((4,), 0.25), method="count")


SPECIAL = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 1e-45, -1e-45, 3.4e38, -3.4e38, 1.0, 0.0]


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_integer_key_sort_is_jnp_sort(key, dtype):
    from posteriorjax.metrics import ordering

    x = jnp.concatenate([jr.normal(key, (5, 37)), jnp.asarray(SPECIAL * 3)[:37].reshape(1, 37)]).astype(dtype)
    keys = ordering.sortable_keys(x)
    back = ordering.from_keys(keys, dtype)
    np.testing.assert_array_equal(jnp.isnan(back), jnp.isnan(x))
    assert bool(jnp.all((back == x) | jnp.isnan(x)))
    for axis in (0, 1, -1):
        got, ref = ordering.sort(x, axis), jnp.sort(x, axis=axis)
        same = (got == ref) | (jnp.isnan(got) & jnp.isnan(ref))  # -0.0 and denormals compare equal
        assert bool(jnp.all(same)), axis
    with pytest.raises(TypeError, match="floating"):
        ordering.sortable_keys(jnp.arange(3))


def test_integer_key_paths_equal_the_argsort_paths(key):
    """W1 (quantile form), the median, equal-weight quantiles and the sorted CRPS
    against the `jnp.sort`/`argsort` paths."""
    from posteriorjax.metrics import ordering, posterior

    k1, k2 = jr.split(key)
    u, v = jr.normal(k1, (60,)), 1.3 * jr.normal(k2, (20,)) + 0.2
    ub, vb = jnp.where(u > 0.3, 12.0, 3.0), jnp.where(v > 0.0, 12.0, 3.0)  # ties
    x, t = _ensembles(key, 40)[0]
    probs = jnp.asarray([0.05, 0.5, 0.95, 0.0, 1.0])
    a, b = jr.dirichlet(k1, jnp.ones(60)), jr.dirichlet(k2, jnp.ones(20))

    @jax.jit  # traced once per setting of the flag
    def run(u, v, ub, vb, x, t):
        weighted = [  # the counting form (n + m <= COUNTING_MAX_SIZE), sizes not multiples
            posterior.wasserstein_1d(*args)
            for args in ((u, v, a, b), (v, u, b, a), (ub, vb, a, b), (u[:37], v, None, b), (ub[:37], vb))
        ]
        return (
            [posterior.wasserstein_1d(a, b) for a, b in ((u, v), (v, u), (ub, vb), (u, u + 1.7))]
            + weighted
            + [ordering.median(u), ordering.median(u[:59]), ordering.median(ub)],
            calibration.weighted_quantiles(x, probs),
            scoring.crps(x, t, method="sort"),
            scoring.crps(x, t, estimator="fair", method="sort"),
        )

    fast = run(u, v, ub, vb, x, t)
    with ordering.integer_keys(False):  # traced afresh: the jitted helpers' caches are cleared
        ref = run(u, v, ub, vb, x, t)
    np.testing.assert_allclose(fast[0], ref[0], rtol=1e-6, atol=1e-6)
    assert float(fast[0][3]) == pytest.approx(1.7, rel=1e-6)
    np.testing.assert_array_equal(fast[1], ref[1])  # same sorted values, same interpolation
    np.testing.assert_allclose(fast[2], ref[2], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(fast[3], ref[3], rtol=1e-5, atol=1e-6)


def test_integer_key_paths_differentiate_as_the_argsort_paths(key):
    from posteriorjax.metrics import ordering, posterior

    k1, k2 = jr.split(key)
    u, v = jr.normal(k1, (40,)), jr.normal(k2, (20,)) + 0.3
    x, t = _ensembles(key, 12)[0]
    a = jr.dirichlet(k1, jnp.ones(40))

    def loss(u, x):
        weighted = posterior.wasserstein_1d(u, v, a)  # the counting form
        return posterior.wasserstein_1d(u, v) + weighted + jnp.sum(scoring.crps(x, t, method="sort"))

    fast = jax.grad(loss, argnums=(0, 1))(u, x)
    with ordering.integer_keys(False):
        ref = jax.grad(loss, argnums=(0, 1))(u, x)
    for a, b in zip(fast, ref, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def _bits(a):
    a = np.asarray(a)
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


@pytest.fixture
def network_everywhere(monkeypatch):
    """`method="auto"` takes the sorting network at every size (JAX's caches cleared around)."""
    from posteriorjax.metrics import ordering

    jax.clear_caches()
    for name in ("NETWORK_MIN_COLUMNS", "NETWORK_MIN_SEQUENCE", "NETWORK_MIN_PAYLOAD"):
        monkeypatch.setattr(ordering, name, 0)
    monkeypatch.setattr(ordering, "NETWORK_ROWS", 16)  # short sequences span columns too
    yield
    jax.clear_caches()


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, jnp.float16])
def test_network_sort_is_the_key_sort_bit_for_bit(key, dtype, monkeypatch):
    """Every stage kind (rows, columns, mirrors, padding of a non-power-of-two length)."""
    from posteriorjax.metrics import ordering

    monkeypatch.setattr(ordering, "NETWORK_ROWS", 16)  # 259 values: 17 columns of 16
    x = jnp.concatenate([jr.normal(key, (6, 37)), jnp.asarray(SPECIAL * 3)[:37].reshape(1, 37)]).astype(dtype)
    x = x.at[2].set(jnp.round(x[2]))  # ties
    for values, axis in ((x.ravel(), 0), (x, 0), (x, 1), (x.reshape(7, 1, 37), 2), (x[:1, :8], 1)):
        got = jax.jit(functools.partial(ordering.sort, axis=axis, method="network"))(values)
        keys = jax.jit(functools.partial(ordering.sort, axis=axis, method="keys"))(values)
        np.testing.assert_array_equal(_bits(got), _bits(keys))
        ref = jnp.sort(values, axis=axis)
        assert bool(jnp.all((got == ref) | (jnp.isnan(got) & jnp.isnan(ref)))), (values.shape, axis)
    with pytest.raises(ValueError, match="method"):
        ordering.sort(x, method="fast")


def test_network_argsort_is_a_sorting_permutation(key, monkeypatch):
    from posteriorjax.metrics import ordering

    monkeypatch.setattr(ordering, "NETWORK_ROWS", 16)
    x = jnp.round(4 * jr.normal(key, (7, 37)))  # many ties
    for values, axis in ((x.ravel(), 0), (x, 0), (x, 1)):
        order = jax.jit(functools.partial(ordering.argsort, axis=axis, method="network"))(values)
        assert order.dtype == jnp.int32
        np.testing.assert_array_equal(jnp.take_along_axis(values, order, axis), jnp.sort(values, axis=axis))
        iota = jax.lax.broadcasted_iota(jnp.int32, values.shape, axis)
        np.testing.assert_array_equal(jnp.sort(order, axis=axis), iota)


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="the network is a CPU path")
def test_auto_method_takes_the_network_for_large_cpu_sorts():
    from posteriorjax.metrics import ordering

    assert ordering.uses_network(100, 4096) and not ordering.uses_network(32, 1024)
    assert ordering.uses_network(409_600, 1) and not ordering.uses_network(100_000, 1)
    assert ordering.uses_network(200, 128, payload=True) and not ordering.uses_network(96, 128, payload=True)
    assert "stablehlo.sort" not in jax.jit(ordering.sort).lower(jnp.zeros(1 << 17)).as_text()
    assert "stablehlo.sort" in jax.jit(ordering.sort).lower(jnp.zeros(1000)).as_text()


def test_weighted_w1_through_the_network_is_scipys_and_differentiates_alike(key, network_everywhere):
    import scipy.stats

    from posteriorjax.metrics import posterior

    k1, k2, k3 = jr.split(key, 3)
    u, v = jr.normal(k1, (60,)), jnp.round(1.3 * jr.normal(k2, (20,)) + 0.2)
    a, b = jr.dirichlet(k3, jnp.ones(60)), jnp.full((20,), 0.05)
    got = posterior.wasserstein_1d(u, v, a, b)
    ref = scipy.stats.wasserstein_distance(*(np.asarray(z, np.float64) for z in (u, v, a, b)))
    assert float(got) == pytest.approx(ref, rel=1e-5)
    grad = jax.grad(lambda s: posterior.wasserstein_1d(s, v, a, b))(u)
    step = 1e-3 * jnp.sign(grad)  # W1 is linear in u between order changes: d W1 = grad . step
    moved = posterior.wasserstein_1d(u + step, v, a, b) - got
    assert float(moved) == pytest.approx(float(grad @ step), rel=1e-2)


def test_suite_values_do_not_depend_on_the_sorting_method(key, network_everywhere):
    """The whole suite with the network at every size against `lax.sort` of the keys everywhere."""
    from posteriorjax.metrics import ordering, suite

    k1, k2 = jr.split(key)
    x, y = jr.normal(k1, (12, 1, 8, 8)), 1.1 * jr.normal(k2, (10, 1, 8, 8)) + 0.1
    w = jr.dirichlet(k2, jnp.ones(10))
    kwargs = {"field_stats": (0.0, 1.0)}
    got = suite.compute(x, y, w, y[0], **kwargs)
    jax.clear_caches()
    with pytest.MonkeyPatch.context() as patch:
        for name in ("NETWORK_MIN_COLUMNS", "NETWORK_MIN_SEQUENCE", "NETWORK_MIN_PAYLOAD"):
            patch.setattr(ordering, name, 1 << 62)
        ref = suite.compute(x, y, w, y[0], **kwargs)
    assert set(got) == set(ref)
    for name in got:
        np.testing.assert_allclose(
            np.asarray(got[name]), np.asarray(ref[name]), rtol=2e-6, atol=1e-7, err_msg=name
        )
