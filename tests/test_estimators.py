"""Learned estimators: training beats the mean on retained directions, vmapped ensembles equal
separately trained members, conformal widths cover at the nominal level, confidences are checked."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from posteriorjax import tasks
from posteriorjax.metrics import geometry as geo
from posteriorjax.studies import estimators as est

M, N_TRAIN, N_CAL, N_TEST = 6, 300, 200, 200
CONFIG = est.train_config(num_steps=200, batch_size=32, learning_rate=3e-3, weight_decay=0.0)
OPTIONS = {
    "mlp": dict(width=32, depth=2),
    "gru": dict(hidden=32),
    "fno": dict(modes=3, width=8, layers=2, projection=16),
    "deeponet": dict(width=8, conv_layers=2, basis=16, trunk_depth=2),
    "unipde": dict(width=32, depth=2, latent=16, align_weight=0.1),
    "unipde_noalign": dict(width=32, depth=2, latent=16),
}
FAST = ("mlp", "gru")  # the raster families train in the slow tier (compilation dominates)


@pytest.fixture(scope="module")
def problem():
    """Linear observations y = A c + noise of 2 frames x 8 sensors + 1 total on an 8 x 8 grid.

    A has 4 observed and 2 unobserved (zero) directions, so the geometry retains 4 of 6.
    """
    rng = np.random.default_rng(0)
    idx = tuple(int(i) for i in np.sort(rng.choice(64, 8, replace=False)))
    layout = est.Layout(frames=2, count=8, totals=1, shape=(8, 8), indices=idx)
    a = rng.standard_normal((layout.size, M)) * np.array([3.0, 2.0, 1.0, 0.7, 0.0, 0.0])
    n = N_TRAIN + N_CAL + N_TEST
    c = rng.standard_normal((n, M))
    y = c @ a.T + 0.1 * rng.standard_normal((n, layout.size))
    g = geo.from_jacobian(a, noise_cov=0.01)
    assert g.num_retained == 4
    y_std, c_std = est.Standardizer.fit(y[:N_TRAIN]), est.Standardizer.fit(c[:N_TRAIN])
    return dict(layout=layout, geometry=g, c=c, y=y_std.forward(y).astype(np.float32), c_std=c_std)


@pytest.fixture(scope="module")
def trained(problem):
    return {name: _train(problem, name, CONFIG) for name in FAST}


def _train(problem, name, config):
    y, c = problem["y"], problem["c_std"].forward(problem["c"]).astype(np.float32)
    keys = jr.split(jr.key(0), 2)
    models, losses = est.fit(
        keys, y[:N_TRAIN], c[:N_TRAIN], name=name, layout=problem["layout"], options=OPTIONS[name],
        config=config,
    )  # fmt: skip
    pred = problem["c_std"].inverse(np.asarray(est.predict(models, y[N_TRAIN:]), np.float64))
    return models, losses, pred


def _check_beats_the_mean(problem, losses, pred):
    g = problem["geometry"]
    assert np.all(np.isfinite(losses)) and np.all(losses[:, -20:].mean(1) < losses[:, :20].mean(1))
    truth = problem["c"][N_TRAIN + N_CAL :]
    e = geo.directional_nrmse(geo.project(g, pred[:, N_CAL:].mean(0)), geo.project(g, truth))
    # predicting the training mean has NRMSE ~1 in every direction
    assert np.all(e[g.retained] < 0.9) and np.mean(e[g.retained]) < 0.6, e
    # the unobserved directions cannot be recovered
    assert np.all(e[~g.retained] > 0.8), e


@pytest.mark.parametrize("name", FAST)
def test_estimator_beats_the_mean_on_retained_directions(problem, trained, name):
    _check_beats_the_mean(problem, *trained[name][1:])


@pytest.mark.slow
@pytest.mark.parametrize("name", ["fno", "deeponet", "unipde", "unipde_noalign"])
def test_slow_tier_estimator_beats_the_mean_on_retained_directions(problem, name):
    config = est.train_config(num_steps=600, batch_size=32, learning_rate=3e-3, weight_decay=0.0)
    _check_beats_the_mean(problem, *_train(problem, name, config)[1:])


def test_unipde_shapes_tokens_and_alignment(problem):
    layout, y = problem["layout"], jnp.asarray(problem["y"][:5])
    tokens = layout.tokens(y[0])
    # 2 frames + 1 total, each [8 sensor values, the total, one-hot of 3 channels]
    assert tokens.shape == (3, 8 + 1 + 3)
    np.testing.assert_array_equal(tokens[:2, :8], y[0, :16].reshape(2, 8))
    assert float(tokens[2, 8]) == float(y[0, 16]) and not np.any(np.asarray(tokens[2, :8]))
    np.testing.assert_array_equal(tokens[:, 9:], np.eye(3))
    key = jr.key(2)
    align = est.build("unipde", key, layout, M, **OPTIONS["unipde"])
    plain = est.build("unipde_noalign", key, layout, M, **OPTIONS["unipde_noalign"])
    y50 = jnp.asarray(problem["y"][:50])
    c50 = jnp.asarray(problem["c_std"].forward(problem["c"][:50]), jnp.float32)

    @eqx.filter_jit
    def probe(model):
        idx = jr.randint(jr.key(3), (16,), 0, 50)  # the batch `_mse` draws with this key
        mse = jnp.mean((jax.vmap(model)(y50[idx]) - c50[idx]) ** 2)
        loss = est._mse(y50, c50, 16)(model, jr.key(3))
        return jax.vmap(model)(y), model.embeddings(y[0]), model.alignment(y[0]), mse, loss

    out, h, a, mse, loss = probe(align)
    out_p, _, a_p, mse_p, loss_p = probe(plain)
    assert out.shape == (5, M) and bool(jnp.all(jnp.isfinite(out))) and h.shape == (3, 16)
    # same key, same weights: the two families differ only in the loss
    np.testing.assert_allclose(out, out_p, rtol=1e-5, atol=1e-7)
    h = np.asarray(h, np.float64)
    np.testing.assert_allclose(a, 0.1 * np.mean((h - h.mean(0)) ** 2), rtol=1e-5)
    assert float(a) > 0 and float(a_p) == 0.0
    np.testing.assert_allclose(loss_p, mse_p, rtol=1e-6)  # noalign: the MSE alone
    assert float(loss) > float(mse) * (1 + 1e-4)  # the alignment term adds to it
    with pytest.raises(ValueError, match="align_weight"):
        est.build("unipde_noalign", key, layout, M, align_weight=0.1)
    with pytest.raises(ValueError, match="align_weight"):
        est.build("unipde", key, layout, M, align_weight=-1.0)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["fno", "deeponet"])
def test_raster_estimators_map_observations_to_coefficients(problem, name):
    layout = problem["layout"]
    model = est.build(name, jr.key(1), layout, M, **OPTIONS[name])
    out = jax.vmap(model)(jnp.asarray(problem["y"][:3]))
    assert out.shape == (3, M) and bool(jnp.all(jnp.isfinite(out)))
    # the output depends on the sensor values (through the raster), not only on the mask
    assert float(jnp.max(jnp.abs(out[0] - out[1]))) > 0


def test_vmapped_ensemble_equals_separately_trained_members(problem, trained):
    y, c = problem["y"], problem["c_std"].forward(problem["c"]).astype(np.float32)
    models, losses, _ = trained["mlp"]
    keys = jr.split(jr.key(0), 2)
    single = eqx.filter_jit(est.fit_member)
    for i in range(2):
        model, loss = single(
            keys[i], jnp.asarray(y[:N_TRAIN]), jnp.asarray(c[:N_TRAIN]), name="mlp",
            layout=problem["layout"], options=OPTIONS["mlp"], config=CONFIG,
        )  # fmt: skip
        member = jax.tree.map(lambda x, i=i: x[i] if eqx.is_array(x) else x, models)
        np.testing.assert_allclose(loss, losses[i], rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(
            jax.vmap(model)(y[N_TRAIN:]), jax.vmap(member)(y[N_TRAIN:]), rtol=1e-4, atol=1e-5
        )


def test_conformal_halfwidths_cover_at_the_nominal_level():
    """4000 independent calibration sets of 50 heavy-tailed residuals, one exchangeable new residual each:
    split-conformal coverage lies in [level, level + 1/(n + 1)) up to Monte Carlo error."""
    rng = np.random.default_rng(1)
    reps, n, level = 4000, 50, 0.9
    draws = rng.standard_t(3, size=(n + 1, reps)) * rng.uniform(0.1, 10.0, size=reps)
    q = est.conformal_halfwidths(draws[:n], level)
    cover = np.mean(np.abs(draws[n]) <= q)
    mc = np.sqrt(level * (1 - level) / reps)
    assert level - 3 * mc <= cover <= level + 1 / (n + 1) + 3 * mc, cover
    with pytest.raises(ValueError, match="level"):
        est.conformal_halfwidths(draws[:n], 1.0)


def test_confidences_cover_held_out_data_and_have_the_right_length(problem, trained):
    g = problem["geometry"]
    pred = trained["mlp"][2]
    cal_truth, test_truth = problem["c"][N_TRAIN : N_TRAIN + N_CAL], problem["c"][N_TRAIN + N_CAL :]
    conf = est.confidences(g, pred[:, :N_CAL], cal_truth, level=0.9)
    assert set(conf) == set(est.CONFIDENCES)
    for rule, u in conf.items():
        assert u.shape == (M,) and np.all(np.isfinite(u)), rule
    # conformal half-widths from calibration residuals cover test residuals at ~90%
    d_cal = geo.project(g, pred[:, :N_CAL].mean(0)) - geo.project(g, cal_truth)
    d_test = geo.project(g, pred[:, N_CAL:].mean(0)) - geo.project(g, test_truth)
    q = est.conformal_halfwidths(d_cal, 0.9)
    scale = np.std(geo.project(g, cal_truth), axis=0)
    np.testing.assert_allclose(-conf["conformal"], 2 * q / scale, rtol=1e-10)
    cover = np.mean(np.abs(d_test) <= q)
    # per-direction thresholds vary with their calibration sets (sd ~ 0.02) and the test draws (~0.02)
    assert abs(cover - 0.9) < 0.06, cover
    # the calibration error ranks the observed directions first
    assert geo.auroc(conf["validation"], g.retained).value == 1.0
    ev = est.evaluate(g, pred[:, N_CAL:], test_truth, conf)
    assert ev["scrs_oracle"].value == 1.0 and ev["hits"] == 4
    assert ev["selection"]["oracle"].geometric_auroc.value == 1.0


def test_raw_confidences_rank_a_prior_pinned_unobserved_direction_first():
    """Two coefficients, only the first observed (J = [1, 0]); the unobserved one has a prior 50x
    tighter and is predicted at its prior mean. Normalized by the calibration std, its width is the
    widest (NRMSE 1), so the observed direction is claimed first; as raw widths, the prior-pinned
    direction is the narrowest and is claimed first (the paper's "prior ... leading to narrower
    intervals", Sec. 5.6)."""
    g = geo.from_jacobian(np.array([[1.0, 0.0]]), noise_cov=1.0)
    assert g.retained.tolist() == [True, False] and np.allclose(np.abs(g.V), np.eye(2))
    rng = np.random.default_rng(0)
    n = 400
    truth = rng.standard_normal((n, 2)) * np.array([1.0, 0.02])
    err = 0.2 * rng.standard_normal((2, n))  # two members, each 0.2 off on the observed coefficient
    pred = np.stack([np.stack([truth[:, 0] + e, np.zeros(n)], axis=1) for e in err])
    conf = est.confidences(g, pred, truth, level=0.9)
    d_true = geo.project(g, truth)
    resid = geo.project(g, pred.mean(0)) - d_true
    width = 2 * est.conformal_halfwidths(resid, 0.9)
    np.testing.assert_allclose(-conf["conformal_raw"], width, rtol=1e-12)
    np.testing.assert_allclose(-conf["conformal"], width / d_true.std(0), rtol=1e-12)
    rmse = np.sqrt(np.mean(resid**2, axis=0))
    np.testing.assert_allclose(-conf["validation_raw"], rmse, rtol=1e-12)
    np.testing.assert_allclose(-conf["spread_raw"], pred.std(0).mean(0) @ np.abs(g.V), rtol=1e-12)
    # widths: observed ~ 2 x 1.645 x 0.14 = 0.47 (std 1), unobserved ~ 2 x 1.645 x 0.02 = 0.066 (std 0.02)
    assert geo.auroc(conf["conformal"], g.retained).value == 1.0
    assert geo.auroc(conf["conformal_raw"], g.retained).value == 0.0
    assert geo.auroc(conf["validation_raw"], g.retained).value == 0.0
    # on one common scale (RMS of the two stds, ~0.71) the prior-pinned direction is within delta
    np.testing.assert_allclose(-conf["validation_global"], rmse / np.sqrt(np.mean(d_true.std(0) ** 2)))
    assert (-conf["validation_global"] <= 0.3).tolist() == [True, True]
    assert (-conf["validation"] <= 0.3).tolist() == [True, False]


def test_bad_confidences_are_rejected(problem, trained):
    g = problem["geometry"]
    pred = trained["mlp"][2]
    test_truth = problem["c"][N_TRAIN + N_CAL :]
    conf = est.confidences(g, pred[:, :N_CAL], problem["c"][N_TRAIN : N_TRAIN + N_CAL])
    hit = g.retained.copy()
    with pytest.raises(ValueError, match="confidence: expected shape"):
        geo.selection(conf["spread"][:-1], g.retained, hit)
    with pytest.raises(ValueError, match="confidence: expected finite"):
        geo.selection(np.where(np.arange(M) == 2, np.nan, conf["spread"]), g.retained, hit)
    with pytest.raises(ValueError, match="claimed"):
        geo.scrs(np.full(M - 1, 1.0), g.retained, hit)
    with pytest.raises(ValueError, match="validation"):
        est.evaluate(g, pred[:, N_CAL:], test_truth, {"validation": conf["validation"][:-1]})
    with pytest.raises(ValueError, match="K >= 2"):
        est.confidences(g, pred[:1, :N_CAL], problem["c"][N_TRAIN : N_TRAIN + N_CAL])
    with pytest.raises(ValueError, match="name"):
        est.build("transformer", jr.key(0), problem["layout"], M)
    with pytest.raises(ValueError, match="y: expected"):
        problem["layout"].history(jnp.zeros(5))


def test_layout_views_follow_the_task_observation():
    task = tasks.get("interface_transport", resolution=8, frames=1, num_sensors=6)
    layout = est.layout(task)
    assert (layout.frames, layout.count, layout.totals) == (2, task.observation.count, 0)
    x = task.prior.mean.reshape(task.unknown_shape)
    u, y = task.solve(x), task.forward(x)
    raster = layout.raster(y)
    mask = np.asarray(task.observation.mask)
    assert raster.shape == (3, 8, 8) and np.array_equal(np.asarray(raster[-1]) > 0, mask)
    for f in range(2):
        np.testing.assert_allclose(raster[f][mask], u[f][mask], rtol=1e-6)
        np.testing.assert_allclose(layout.history(y)[f], u[f][mask], rtol=1e-6)


@pytest.mark.slow
def test_geometry_experiment_runs_end_to_end_at_tiny_scale(tmp_path):
    from configs.geometry import get_config
    from posteriorjax.studies.geometry import study as experiment

    config = get_config("tiny")
    config.learned.estimators = ("mlp", "gru")
    config.learned.configurations = (("Flooding M2", "interface_transport", 2),)
    results = experiment.run(config, str(tmp_path))
    text = (tmp_path / "summary.md").read_text()
    for heading in ("Table 1", "Table 2", "Table 3", "Table 4", "Table 5", "Table 6", "fixed claim budgets"):
        assert heading in text
    assert set(results["reference"]) == {"Battery", "Melt-pool", "Flooding"}
    label = "Flooding M2"
    assert set(results["learned"][label]) == {"geometry", "ridge", "mlp", "gru"}
    assert results["learned"][label]["mlp"]["ood"]["field_nrmse"][0] > 0
    assert len(results["learned"][label]["mlp"]["ood"]["nrmse"]) == config.learned.num_seeds
    assert (tmp_path / "figures" / "learned_Flooding_M2_gru.png").exists()
    assert (tmp_path / "figures" / "spectra.png").exists()
    assert (tmp_path / "figures" / "budgets_conformal.png").exists()
    assert (
        len(results["learned"]["conformal"][f"{label} / mlp"]["geometric_auroc"]) == config.learned.num_seeds
    )
