"""Add a metric: its function, its registry entry, the checks the registry test runs.

    python docs/tutorials/add_a_metric.py

The metric: the log spread ratio, log(mean pointwise std of the samples / mean pointwise std of
the reference posterior), both weighted population stds (ddof 0). It is 0 for an ensemble as
wide as the reference, negative for an over-confident (too narrow) one and positive for an
under-confident one, so unlike `std_error` (a relative L2 norm of the difference) it says
which way the spread is wrong. Its direction is a target value, 0.

Every metric of the suite is one `registry.Metric` entry: a name, a function of one case
(`registry.Inputs`: the ensemble, the reference posterior and its weights, the truth, ...),
what it needs, the smallest ensembles it is defined for, its direction and a header. In the
package the edit is one `register(Metric(...))` in `posteriorjax/metrics/registry.py` (its
function beside the others, in `metrics/posterior.py` for a metric against the reference) and,
to show it in the reports, its name in `TABLE` or `RANKED` (lower-is-better scores only);
`tests/test_metrics_registry.py` then checks it on the fixed pair used below. Out of tree, a
plugin module makes the same `registry.register` call when `posteriorjax.plugins.load` imports
it. This script builds the entry, runs those checks, and shows what `suite.compute` records
once the entry is registered (it registers it for the duration of the script and removes it
after; the package is not edited).
"""

from __future__ import annotations

import numpy as np


def log_spread_ratio(samples, reference, weights=None):
    """log(mean_x std_samples(x) / mean_x std_reference(x)); samples `(N, ...)`, reference `(M, ...)`.

    `weights (M,)`: reference weights summing to 1 (None = uniform). Pure JAX, jit/vmap-able.
    """
    import jax.numpy as jnp

    from posteriorjax.metrics import posterior

    n, m = samples.shape[0], reference.shape[0]
    w_ref = jnp.full((m,), 1.0 / m, reference.dtype) if weights is None else weights
    _, std = posterior.weighted_moments(samples, jnp.full((n,), 1.0 / n, samples.dtype))
    _, std_ref = posterior.weighted_moments(reference, w_ref)
    return jnp.log(jnp.mean(std) / jnp.mean(std_ref))


def entry():
    """The registry entry: needs the reference only, two members each, target 0."""
    from posteriorjax.metrics import registry

    return registry.Metric(
        "log_spread_ratio",
        lambda c: log_spread_ratio(c.samples, c.reference, c.weights),
        "log spread ratio",
        min_samples=2,
        min_reference=2,
        better="target",
        target=0.0,
    )


def check(metric) -> dict:
    """The checks of `tests/test_metrics_registry.py` on the fixed pair it uses.

    The suite on a reference against itself (`good`) and on 0.5 x reference + 4 (`bad`: shifted
    and narrowed); the metric is finite on both, has a header that is not its name, and `good`
    is nearer the target than `bad`. Returns both values.
    """
    import jax.numpy as jnp

    from posteriorjax.metrics import registry

    rng = np.random.default_rng(0)
    ref = jnp.asarray(1.0 + rng.normal(size=(32, 1, 8, 8)), jnp.float32)
    truth = jnp.asarray(1.0 + rng.normal(size=(1, 8, 8)), jnp.float32)
    good = metric.fn(registry.Inputs(ref, ref, ref, truth=truth))
    bad = metric.fn(registry.Inputs(0.5 * ref + 4.0, 0.5 * ref + 4.0, ref, truth=truth))
    good, bad = float(good), float(bad)
    assert metric.header and metric.header != metric.name
    assert np.isfinite(good) and np.isfinite(bad)
    assert abs(good - metric.target) < abs(bad - metric.target)
    return {"good": good, "bad": bad}


def in_the_suite(metric) -> dict:
    """`suite.compute` with `metric` registered: what a sweep would record."""
    import jax.numpy as jnp

    from posteriorjax.metrics import registry, suite

    rng = np.random.default_rng(1)
    reference = jnp.asarray(rng.normal(size=(64, 1, 8, 8)), jnp.float32)
    narrow = jnp.asarray(0.5 * rng.normal(size=(32, 1, 8, 8)), jnp.float32)
    registry.register(metric)  # what the one call in registry.py (or in a plugin) does
    try:
        out = suite.evaluate(narrow, reference)
    finally:
        registry.REGISTRY.unregister(metric.name)
    return {k: out[k] for k in ("std_error", metric.name)}


def main() -> dict:
    metric = entry()
    values = check(metric)
    print(
        f"{metric.name}: reference against itself {values['good']:.3g}, against a shifted copy "
        f"at half the spread {values['bad']:.3g} (log 0.5 = {np.log(0.5):.3g})"
    )
    recorded = in_the_suite(metric)
    print(f"suite.evaluate, an ensemble half as wide as the reference: {recorded}")
    return {**values, **recorded}


if __name__ == "__main__":
    main()
