"""Metric suite throughput against the implementations a user would otherwise call.

For N = M = 100 member ensembles at 64 x 64 and 128 x 128 (single channel):
  * whole suite (`metrics.suite.compute`: moments, MMD, SWD, spectra, CRPS,
    energy score, coverage) vs the sum of the three baselines below;
  * sliced Wasserstein on the same 128 directions vs `ot.sliced_wasserstein_distance`;
  * per-pixel CRPS vs `properscoring.crps_ensemble`;
  * MMD (median bandwidth, V-statistic) vs a NumPy implementation of the
    published definition (float64, Gram form).
  * the whole suite again against itself as it was before the sort-free paths
    (`metrics/suite_vs_sort`: sorted CRPS and coverage, `jnp.sort`/`argsort` everywhere:
    `scoring.PAIRWISE_MAX_MEMBERS = 0`, `calibration.COVERAGE_BY_COUNTING = False` and
    `ordering.INTEGER_KEYS = False` while it compiles);
  * the SWD against itself with the weights carried by XLA's `argsort` (`metrics/swd_vs_argsort`:
    `posterior.COUNTING_MAX_SIZE = 0` and `ordering.NETWORK_MIN_PAYLOAD` out of reach while it
    compiles);
  * the suite without the pooled marginal metrics (`metrics/suite_without_pooled`: marginal
    W1, histogram ratio and variance ratio left out of `registry.REGISTRY` while it
    compiles) against the whole suite: what their one sort of N x H x W values costs.
  * the sorting network (`ordering`, ``method="network"``) on those sorts against `lax.sort`
    (`metrics/sort_network_*`, `metrics/argsort_network_swd`).
Throughput unit: cases (or sorts) per second (higher is better); ratio = ours / baseline.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from bench.common import best_time, best_times_interleaved, record


def _numpy_mmd(x, y, wx, wy):
    x, y = x.reshape(len(x), -1), y.reshape(len(y), -1)

    def d2(a, b):
        return np.maximum((a * a).sum(1)[:, None] + (b * b).sum(1)[None] - 2 * a @ b.T, 0)

    dxy = d2(x, y)
    med = np.median(dxy)
    med = med if med > 0 else 1.0

    def k(d):
        return sum(np.exp(-d / (s * med)) for s in (0.2, 0.5, 1.0, 2.0, 5.0)) / 5

    m2 = wx @ k(d2(x, x)) @ wx + wy @ k(d2(y, y)) @ wy - 2 * wx @ k(dxy) @ wy
    return np.sqrt(max(m2, 0.0))


def run(args) -> list[dict]:
    sizes = (64, 128, 256) if getattr(args, "device", False) else (64, 128)
    records = []
    for h in sizes:
        records += _one_size(h)
    return records


def _one_size(h: int, n: int = 100, m: int = 100) -> list[dict]:
    import ot
    import properscoring

    from posteriorjax.metrics import posterior, registry, scoring, suite

    k1, k2 = jr.split(jr.key(h))
    x = jr.normal(k1, (n, 1, h, h))
    y = jr.normal(k2, (m, 1, h, h)) * 1.1 + 0.1
    w = jnp.full((m,), 1.0 / m)
    truth = y[0]
    xn, yn, wn = np.asarray(x, np.float64), np.asarray(y, np.float64), np.asarray(w, np.float64)
    dirs = posterior.grf_directions((h, h), 128)
    stats = (0.0, 1.0)
    cfg = {"N": n, "M": m, "H": h, "W": h}

    def pot():
        return ot.sliced_wasserstein_distance(
            xn.reshape(n, -1),
            yn.reshape(m, -1),
            np.full(n, 1 / n),
            wn,
            p=1,
            projections=dirs.reshape(128, -1).T,
        )

    obs, fct = np.asarray(truth, np.float64)[0], np.moveaxis(xn[:, 0], 0, -1)

    def ps():
        return properscoring.crps_ensemble(obs, fct).mean()

    def npmmd():
        return _numpy_mmd(xn, yn, np.full(n, 1 / n), wn)

    # the baselines first, apart from the JAX programs: interleaved with them, NumPy's BLAS
    # threads (which spin on after a call) take the cores from XLA's
    t_pot, t_ps, t_np = best_time(pot, repeats=3), best_time(ps, repeats=3), best_time(npmmd, repeats=3)

    swd = jax.jit(lambda a, b, c: posterior.sliced_wasserstein(a, b, c, field_stats=stats, directions=dirs))
    crps = jax.jit(lambda a, t: jnp.mean(scoring.crps(a, t)))
    mmd = jax.jit(posterior.mmd)

    # both suites compiled alike (the directions a constant of the program, as in the sweep's),
    # so neither side pays `suite.compute`'s eager dispatch (`eqx.filter_jit` converting the
    # 128 float64 directions on every call, ~4 MB)
    from posteriorjax.metrics import calibration, ordering

    saved = scoring.PAIRWISE_MAX_MEMBERS, calibration.COVERAGE_BY_COUNTING
    try:  # compiled now, with the sorted paths baked in (traced afresh: `integer_keys` clears caches)
        scoring.PAIRWISE_MAX_MEMBERS, calibration.COVERAGE_BY_COUNTING = 0, False
        with ordering.integer_keys(False):
            sorted_suite = jax.jit(functools.partial(suite._compute, field_stats=stats, directions=dirs))
            sorted_suite = sorted_suite.lower(x, y, w, truth).compile()
    finally:
        scoring.PAIRWISE_MAX_MEMBERS, calibration.COVERAGE_BY_COUNTING = saved
    full = jax.jit(functools.partial(suite._compute, field_stats=stats, directions=dirs))
    full = full.lower(x, y, w, truth).compile()
    pooled = {"marginal_w1", "histogram_ratio_error", "variance_ratio"}
    saved_entries = registry.REGISTRY.items()
    try:
        for name in pooled:
            registry.REGISTRY.unregister(name)
        unpooled = jax.jit(functools.partial(suite._compute, field_stats=stats, directions=dirs))
        unpooled = unpooled.lower(x, y, w, truth).compile()
    finally:  # the registry as it was, in its order
        for name, _ in saved_entries:
            registry.REGISTRY.unregister(name)
        for name, metric in saved_entries:
            registry.REGISTRY.register(name, metric)
    saved_sizes = posterior.COUNTING_MAX_SIZE, ordering.NETWORK_MIN_PAYLOAD
    try:  # `_sliced_wasserstein` is jitted: traced afresh with the flags set, and again after
        jax.clear_caches()
        posterior.COUNTING_MAX_SIZE, ordering.NETWORK_MIN_PAYLOAD = 0, 1 << 62
        swd_argsort = swd.lower(x, y, w).compile()
    finally:
        posterior.COUNTING_MAX_SIZE, ordering.NETWORK_MIN_PAYLOAD = saved_sizes
        jax.clear_caches()
    swd_ours = swd.lower(x, y, w).compile()
    got, ref = full(x, y, w, truth), sorted_suite(x, y, w, truth)
    pairs = [(np.asarray(got[k]), np.asarray(ref[k])) for k in got]
    # on the CPU the two suites agree to float32 rounding; elsewhere the largest relative
    # difference is recorded (reductions there may run in another order), not asserted
    cfg["max_relative_difference_vs_sorted"] = max(
        float(np.max(np.abs(a - b) / (np.abs(b) + 1e-6))) for a, b in pairs
    )
    if jax.default_backend() == "cpu":
        for a, b in pairs:
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)

    t_swd, t_swd_argsort = best_times_interleaved([swd_ours, swd_argsort], x, y, w, repeats=5)
    t_crps = best_time(crps, x, truth, repeats=3)
    t_mmd = best_time(mmd, x, y, w, repeats=3)
    t_suite, t_sorted, t_unpooled = best_times_interleaved(
        [full, sorted_suite, unpooled], x, y, w, truth, repeats=5
    )
    base = "POT SWD + properscoring CRPS + NumPy MMD"
    return _sort_records(h, n, x, truth) + [
        record(f"metrics/suite {h}x{h}", "cases/s", 1 / t_suite, 1 / (t_pot + t_ps + t_np), base, **cfg),
        record(
            f"metrics/suite_vs_sort {h}x{h}",
            "cases/s",
            1 / t_suite,
            1 / t_sorted,
            "same suite before the sort-free paths",
            **cfg,
        ),
        record(
            f"metrics/suite_without_pooled {h}x{h}",
            "cases/s",
            1 / t_unpooled,
            1 / t_suite,
            "the whole suite (pooled marginal W1, histogram and variance ratios included)",
            **cfg,
        ),
        record(
            f"metrics/swd {h}x{h}", "cases/s", 1 / t_swd, 1 / t_pot, "ot.sliced_wasserstein_distance", **cfg
        ),
        record(
            f"metrics/swd_vs_argsort {h}x{h}",
            "cases/s",
            1 / t_swd,
            1 / t_swd_argsort,
            "same SWD, weights carried by XLA's argsort",
            **cfg,
        ),
        record(
            f"metrics/crps {h}x{h}", "cases/s", 1 / t_crps, 1 / t_ps, "properscoring.crps_ensemble", **cfg
        ),
        record(f"metrics/mmd {h}x{h}", "cases/s", 1 / t_mmd, 1 / t_np, "NumPy MMD (float64)", **cfg),
    ]


def _sort_records(h: int, n: int, x, truth) -> list[dict]:
    """The sorting network (`ordering`, ``method="network"``) against `lax.sort` of the same keys.

    On the suite's own sorts: every member value of one case pooled (the marginal W1), the
    members of each pixel (CRPS and the quantiles) and, with indices as payload, the SWD's 128
    merged projections of 2 N values.
    """
    from posteriorjax.metrics import ordering

    pooled = x.reshape(-1)
    members = x.reshape(n, -1)
    projections = (
        jnp.concatenate([members[:, :128].T, members[:, 128:256].T], axis=1) + truth.reshape(-1)[:128, None]
    )
    cases = [  # name, sorting function, values, what they are, baseline, whether it returns indices
        (f"metrics/sort_network_pooled {h}x{h}", ordering.sort, pooled, "pooled values",
         "lax.sort of the integer keys", False),
        (f"metrics/sort_network_members {h}x{h}", functools.partial(ordering.sort, axis=0), members,
         "members per pixel", "lax.sort of the integer keys (minor axis)", False),
        (f"metrics/argsort_network_swd {h}x{h}", functools.partial(ordering.argsort, axis=1), projections,
         "SWD projections", "jnp.argsort", True),
    ]  # fmt: skip
    records = []
    for name, fn, values, what, baseline, indices in cases:
        network = jax.jit(functools.partial(fn, method="network")).lower(values).compile()
        keys = jax.jit(functools.partial(fn, method="keys")).lower(values).compile()
        a, b = network(values), keys(values)
        if indices:
            a, b = jnp.take_along_axis(values, a, axis=1), jnp.take_along_axis(values, b, axis=1)
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        t_network, t_keys = best_times_interleaved([network, keys], values, repeats=5)
        records.append(
            record(
                name, "sorts/s", 1 / t_network, 1 / t_keys, baseline, shape=list(values.shape), values=what
            )
        )
    return records


BENCHMARKS = {"metrics": run}
