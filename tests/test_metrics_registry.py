"""Registry-wide checks: every metric the suite emits is registered, and every entry computes,
has a header and points the right way on a known pair (the reference against itself scores better
than a shifted, narrowed copy of it)."""

import jax.numpy as jnp
import numpy as np
import pytest

from posteriorjax.metrics import registry, suite
from posteriorjax.report import records, tables

N, SHAPE = 32, (1, 8, 8)


def forward(x):
    return x[0, 2, 1:7]


def valid(x):
    return jnp.all(x > -10.0)


@pytest.fixture(scope="module")
def scored():
    """The suite on the reference itself (`good`) and on 0.5 x reference + 4 (`bad`), all inputs given."""
    rng = np.random.default_rng(0)
    ref = jnp.asarray(1.0 + rng.normal(size=(N, *SHAPE)), jnp.float32)
    truth = jnp.asarray(1.0 + rng.normal(size=SHAPE), jnp.float32)
    options = dict(forward=forward, y_obs=forward(truth), noise_std=0.1, valid=valid)
    good = suite.compute(ref, ref, None, truth, **options)
    bad = suite.compute(0.5 * ref + 4.0, ref, None, truth, **options)
    return {k: np.asarray(v) for k, v in good.items()}, {k: np.asarray(v) for k, v in bad.items()}


def test_the_suite_emits_exactly_the_registry(scored):
    good, bad = scored
    assert set(good) == set(registry.METRICS) == set(bad)


@pytest.mark.parametrize("metric", registry.REGISTRY.values(), ids=lambda m: m.name)
def test_every_metric_computes_has_a_header_and_its_direction_holds(scored, metric):
    good, bad = scored
    assert metric.header and metric.header != metric.name
    for out in (good, bad):
        assert np.all(np.isfinite(out[metric.name])), metric.name
    if metric.better == "lower":
        assert good[metric.name] < bad[metric.name]
    elif metric.better == "target":
        assert abs(good[metric.name] - metric.target) < abs(bad[metric.name] - metric.target)


def test_applicability_follows_needs_and_sizes():
    one = jnp.zeros((1, *SHAPE))
    names = {m.name for m in registry.applicable(registry.Inputs(one, one, one))}
    assert names == {
        m.name
        for m in registry.REGISTRY.values()
        if m.needs <= {"reference"} and m.min_samples == 1 and m.min_reference == 1
    }
    v = jnp.zeros((4, 3))
    names = {m.name for m in registry.applicable(registry.Inputs(v, v, v, truth=v[0]))}
    assert "swd" in names and "crps_fair" in names
    assert not names & {"spectral_error", "obs_misfit", "num_invalid"}


def test_reports_take_their_metrics_from_the_registry():
    assert [k for k, _ in tables.TABLE_METRICS] == list(registry.TABLE)
    assert records.LOWER_IS_BETTER == registry.RANKED
    assert registry.RANKED[: len(registry.TABLE)] == registry.TABLE
    assert all(registry.METRICS[k].better == "lower" for k in registry.RANKED)
    assert registry.POSTERIOR == ("mean_error", "std_error", "mmd", "swd", "spectral_error")


def test_entries_reject_unknown_needs_and_directions():
    with pytest.raises(ValueError, match="needs: expected a subset"):
        registry.Metric("x", len, "X", frozenset({"oracle"}))
    with pytest.raises(ValueError, match="better: expected one of"):
        registry.Metric("x", len, "X", better="higher")
    with pytest.raises(ValueError, match="target: expected a value"):
        registry.Metric("x", len, "X", better="target")
