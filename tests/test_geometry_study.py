"""The geometry study's learned section: every random stream is keyed by a configuration's name."""

import json

import jax.numpy as jnp
import jax.random as jr
import numpy as np

from configs import geometry as geometry_config
from posteriorjax.metrics import geometry as geo
from posteriorjax.studies import estimators as est
from posteriorjax.studies.geometry import study
from posteriorjax.training import health


def _config(configurations, estimators):
    config = geometry_config.get_config("tiny")
    lc = config.learned
    lc.configurations = configurations
    lc.estimators = estimators
    lc.num_train, lc.num_calibration, lc.num_test = 24, 12, 12
    lc.num_seeds, lc.num_members, lc.num_steps, lc.batch_size = 1, 2, 30, 8
    return config


def test_a_subset_of_configurations_and_families_equals_the_full_run_bit_for_bit():
    full = _config(
        (
            ("Battery M0", "interface_potential", 0, (("num_sensors", 0),)),
            ("Flooding M12", "interface_transport", 12),
        ),
        ("mlp", "gru"),
    )
    subset = _config((("Flooding M12", "interface_transport", 12),), ("gru",))
    *_, whole = study.learned(full)
    *_, part = study.learned(subset)
    dump = lambda r: json.dumps(r, sort_keys=True, default=repr)  # noqa: E731
    assert dump(part["Flooding M12"]["gru"]) == dump(whole["Flooding M12"]["gru"])
    assert dump(part["Flooding M12"]["ridge"]) == dump(whole["Flooding M12"]["ridge"])
    # and the configurations really differ from each other (not one stream reused)
    assert dump(whole["Battery M0"]["gru"]) != dump(whole["Flooding M12"]["gru"])


def test_run_problem_flags_untrained_and_constant_ensembles():
    rng = np.random.default_rng(0)
    true = rng.standard_normal((50, 17))
    assert est.run_problem([None, None], true + 0.1 * rng.standard_normal(true.shape), true) is None
    # an untrained member: its loss never moved
    flat = health.training_problem(np.full(30, 0.9))
    assert est.run_problem([None, flat], true, true) == f"member 1: {flat}"
    assert flat.startswith("stayed at its initial loss")
    # a constant predictor: the prior mean for every test sample
    constant = np.broadcast_to(true.mean(axis=0), true.shape)
    assert est.run_problem([None], constant, true).startswith("near-constant prediction")
    # one identified direction out of 17 predicted, the rest constant: still a valid ensemble
    partial = np.zeros_like(true)
    partial[:, 0] = true[:, 0]
    assert est.run_problem([None], partial, true) is None


def test_invalid_seeds_leave_the_learned_tables(monkeypatch):
    real = est.run_configuration

    def gru_fails(*args, **kwargs):
        out = real(*args, **kwargs)
        for run in out["gru"]["runs"]:
            run["problem"] = "near-constant prediction: median prediction spread ratio 0 < 0.01"
        return out

    monkeypatch.setattr(est, "run_configuration", gru_fails)
    config = _config((("Flooding M12", "interface_transport", 12),), ("mlp", "gru"))
    t3, t4, *_, results = study.learned(config)
    assert "| Flooding M12 | gru | 13 / 4 | 0 / 1 |" + " invalid |" * 8 in t3
    assert "| Flooding M12 | mlp | 13 / 4 | 1 / 1 |" in t3
    assert "| Flooding M12 | **macro-average** (valid families) | 13 / 4 | 1 / 2 families |" in t3
    assert results["invalid"] == [
        "- Flooding M12 / gru: seed 0: near-constant prediction: median prediction spread ratio 0 < 0.01"
    ]
    assert "nrmse" not in results["Flooding M12"]["gru"]
    # Table 4 counts the (configuration, family, split) combinations of valid runs only: mlp's two;
    # the raw readings have no operating point and are ranked only
    rows = {line.split("|")[1].strip(): line.split("|")[2].strip() for line in t4.splitlines()[2:]}
    assert set(rows) == set(study.RULES)
    for rule, passes in rows.items():
        assert passes == "– (ranking only)" if rule in study.RANKING_ONLY else passes.endswith("/ 2"), rule


def test_floor_table_bounds_the_directional_nrmse():
    """The exact linearized posterior never does worse than the prior (floor <= 1), and on Flooding
    M12 (16²) it sees every retained direction to better than delta / 2."""
    config = _config((("Flooding M12", "interface_transport", 12),), ("mlp",))
    text, out = study.floor_table(config)
    floor, retained = np.asarray(out["Flooding M12"]["floor"]), np.asarray(out["Flooding M12"]["retained"])
    assert floor.shape == (17,) and np.all((floor > 0) & (floor <= 1 + 1e-12))
    assert np.all(floor[retained] < 0.15)
    assert "| Flooding M12 | 13 / 4 | 13 / 13 |" in text
    assert 0 < out["Flooding M12"]["linearization_residual"] < 2


def test_linearization_residual_is_zero_for_a_linear_map_and_not_for_a_quadratic(x64):
    jac = np.array([[1.0, 2.0], [0.0, 1.0], [3.0, -1.0]])
    g = geo.from_jacobian(jac, noise_cov=0.5)
    c0 = np.array([0.3, -0.2])
    args, kwargs = (g, c0, 0.5), dict(prior_std=np.array([1.0, 0.5]), key=jr.key(0))
    linear = study.linearization_residual(lambda c: jnp.asarray(jac) @ c, *args, **kwargs)
    assert linear < 1e-12
    quad = study.linearization_residual(
        lambda c: jnp.asarray(jac) @ c + 0.5 * jnp.sum((c - c0) ** 2), *args, **kwargs
    )
    assert quad > 0.05
