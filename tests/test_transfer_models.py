"""Transfer-experiment models: published defaults, vmapped nine-view training, PINO residual."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from posteriorjax.studies.transfer import data, models
from posteriorjax.tasks import fields

RES = 16
TINY_FNO = dict(scale="tiny", steps=3, batch_size=4, model=dict(width=4, modes=3, layers=1))


def synthetic_dataset(family, n_train=8, n_test=4, c_out=1, seed=0):
    """A `data.Dataset` of random fields (no solver): enough for training mechanics."""
    n = n_train + n_test
    rng = np.random.default_rng(seed)
    target = rng.standard_normal((n, c_out, RES, RES)).astype(np.float32)
    return data.Dataset(
        family,
        RES,
        0,
        np.arange(n, dtype=np.int64),
        np.arange(n, dtype=np.int64) % 3,
        (np.arange(n) >= n_train).astype(np.int64),
        rng.standard_normal((n, 1, RES, RES)).astype(np.float32),
        target,
        target[:, :1],
        target,
    )


def view_stack(dataset, num_views):
    rng = np.random.default_rng(1)
    masks = rng.random((num_views, dataset.num_records, RES, RES)) < 0.5
    return np.stack([data.masked_inputs(dataset.observed, m) for m in masks])


def test_defaults_follow_the_published_settings():
    fno = models.fit_config("fno")
    assert dict(fno.model) == dict(width=32, modes=12, layers=4)
    assert (fno.optimizer, fno.weight_decay, fno.batch_size, fno.schedule, fno.clip) == (
        "adam",
        1e-4,
        8,
        "step",
        1.0,
    )
    assert fno.steps == 500 * (1800 // 8)
    pino = models.fit_config("pino")
    assert dict(pino.model) == dict(width=64, modes=20, layers=5) and pino.pino_weight == pytest.approx(0.2)
    ts = models.fit_config("transolver"), models.fit_config("transolver", forecast=True)
    assert (dict(ts[0].model)["hidden"], ts[0].batch_size, ts[0].clip) == (128, 4, 0.1)
    assert (dict(ts[1].model)["hidden"], ts[1].batch_size, ts[1].clip) == (256, 2, 0.0)
    assert models.fit_config("gnot").schedule == "onecycle" and models.fit_config("cno").optimizer == "adamw"
    tiny = models.fit_config("deeponet", {"scale": "tiny", "steps": 7, "model": {"latent": 4}})
    assert tiny.steps == 7 and dict(tiny.model)["latent"] == 4 and dict(tiny.model)["grid"] == 4
    assert dict(models.fit_config("ufno").model) == dict(width=36, modes=12, padding=8)
    gnot = models.fit_config("gnot")
    assert (gnot.div_factor, gnot.final_div_factor, gnot.warmup) == (1e4, 1e4, 0.2)
    all_models = set(models.MODELS + models.VARIANTS)
    assert all_models == set(models.DEFAULTS["full"]) == set(models.DEFAULTS["tiny"])
    with pytest.raises(ValueError, match="config: unknown keys"):
        models.fit_config("fno", {"epochs": 3})
    with pytest.raises(ValueError, match="model_name"):
        models.fit_config("unet")
    with pytest.raises(ValueError, match="schedule"):
        models.fit_config("fno", {"schedule": "cosine"})


def test_vmapped_nine_view_training_equals_nine_separate_trainings(key):
    dataset = synthetic_dataset("darcy_field")
    train = dataset.train
    inputs = view_stack(train, len(data.VIEWS))
    test_inputs = data.masked_inputs(dataset.test.observed, np.ones((4, RES, RES), bool))
    stacked, losses = models.fit_views(
        key, "fno", inputs, train.target, config=TINY_FNO, dataset=dataset, return_losses=True
    )
    assert losses.shape == (3, 9) and bool(jnp.all(jnp.isfinite(losses)))
    joint = models.predict(stacked, test_inputs)
    assert joint.shape == (9, 4, 1, RES, RES) and bool(jnp.all(jnp.isfinite(joint)))
    stacked_leaves = jax.tree.leaves(eqx.filter(stacked, eqx.is_array))
    for v in range(9):
        alone = models.fit_views(
            key, "fno", inputs[v : v + 1], train.target, config=TINY_FNO, dataset=dataset, views=[v]
        )
        for a, b in zip(jax.tree.leaves(eqx.filter(alone, eqx.is_array)), stacked_leaves, strict=True):
            # float32: the GroupNorm of the PDE-OBS FNO and Adam's sign-like first updates amplify
            # reduction-order differences, to 2e-4 of a leaf's largest entry on one x86 CPU
            np.testing.assert_allclose(a[0], b[v], rtol=1e-4, atol=1e-3 * float(np.abs(b[v]).max()))
    # the nine models really differ (own init key and own view)
    assert not jnp.allclose(joint[0], joint[1], atol=1e-4)
    with pytest.raises(ValueError, match="dataset: expected 4 training records"):
        models.fit_views(key, "fno", inputs[:, :4], train.target[:4], config=TINY_FNO, dataset=dataset)
    with pytest.raises(ValueError, match="inputs: expected finite"):
        models.fit_views(key, "fno", inputs * np.nan, train.target, config=TINY_FNO, dataset=dataset)
    with pytest.raises(ValueError, match="inputs: expected \\(N, 2, H, W\\)"):
        models.predict(stacked, test_inputs[:, :1])


def _recovery_record(family, regime, key):
    task = fields.build(family, resolution=RES, regime=fields.REGIMES[regime])
    b = task.prior.sample(key)
    return b, task.physics(b)


def test_pino_residual_recovery_vanishes_on_the_solver_solution(key):
    residual = models.PinoResidual("poisson_field", RES)
    b, u = _recovery_record("poisson_field", 2, key)
    preds = jnp.stack([u, jr.normal(jr.fold_in(key, 1), u.shape), u])
    regimes = jnp.array([2, 2, 0])  # the last with source amplitude 0.5 instead of 2
    exact, noise, wrong_regime = jax.jit(jax.vmap(residual, (0, None, 0)))(preds, b, regimes)
    assert exact < 1e-8 and noise > 0.1 and wrong_regime > 1e3 * exact


@pytest.mark.parametrize("family", ["heat_field", pytest.param("burgers_field", marks=pytest.mark.slow)])
def test_pino_residual_forecast_small_on_solver_frames(family, key):
    regime = 1
    task = fields.build(family, resolution=RES, regime=fields.REGIMES[regime])
    frames = task.physics(task.prior.sample(key))[1:]  # predicted frames 1..3
    residual = models.PinoResidual(family, RES)
    preds = jnp.stack([frames, jr.normal(jr.fold_in(key, 1), frames.shape)])

    @jax.jit
    def values_and_grad(p):
        values = jax.vmap(lambda f: residual(f, f[:1], jnp.asarray(regime)))(p)
        return values, jax.grad(lambda f: residual(f, f[:1], jnp.asarray(regime)))(p[0] + 0.1)

    (exact, noisy), grad = values_and_grad(preds)
    assert exact < 1e-3 and noisy > 0.1
    assert bool(jnp.all(jnp.isfinite(grad)))


@pytest.mark.parametrize("name", models.MODELS)
def test_parameter_counts_equal_table_6_at_the_published_settings(name):
    """Abstract (shape-only) builds of the full-size networks; counts within 1 % of Table 6."""
    from posteriorjax import nn
    from posteriorjax.nn import pdeobs

    cfg = models.fit_config(name)
    net = eqx.filter_eval_shape(
        lambda k: nn.get(models.NETWORK[name], k, in_channels=2, out_channels=1, **dict(cfg.model)), jr.key(0)
    )
    count = pdeobs.parameter_count(net)
    # PINO's count is not printed in the paper: its FNO backbone at width 64, 20 modes, 5 layers
    published = models.PUBLISHED_PARAMETERS.get(name, 32_798_273)
    assert abs(count - published) <= 0.01 * published, (name, count, published)


@pytest.mark.slow
def test_pdeobs_networks_map_tiny_fields(key):
    x = jnp.stack([jr.normal(key, (RES, RES)), jnp.ones((RES, RES))])
    for name in models.MODELS:
        cfg = models.fit_config(name, {"scale": "tiny"}, forecast=True)
        net = __import__("posteriorjax").nn.get(
            models.NETWORK[name], key, in_channels=2, out_channels=3, **dict(cfg.model)
        )
        y = net(x)
        assert y.shape == (3, RES, RES) and bool(jnp.all(jnp.isfinite(y))), name


def test_pino_weight_decay_is_the_published_zero():
    # PDE-OBS configs/method/all_pde_source_faithful_registry.yaml, settings.pino.optimizer:
    # {name: adam, learning_rate: 0.001, weight_decay: 0.0, batch_size: 4}
    for scale in ("full", "tiny"):
        pino = models.fit_config("pino", {"scale": scale}, forecast=True)
        assert (pino.optimizer, pino.weight_decay, pino.learning_rate) == ("adam", 0.0, 1e-3)
    assert models.fit_config("pino").batch_size == 4


def test_forecasting_is_the_published_free_rollout_of_a_one_frame_model(key):
    """t1 = net(masked t0, mask), t2 = net(t1, ones), t3 = net(t2, ones): written out here."""
    from posteriorjax import nn

    dataset = synthetic_dataset("heat_field", c_out=3)
    train = dataset.train
    inputs = view_stack(train, 2)
    fitted = models.fit_views(key, "fno", inputs, train.target, config=TINY_FNO, dataset=dataset)
    assert models.fit_config("fno", TINY_FNO, forecast=True).forecast_mode == "rollout"
    assert fitted.rollout == 3 and fitted.out_scale.shape == (2, 1)
    one = jax.tree.map(lambda a: a[0] if eqx.is_array(a) else a, fitted)
    net = nn.get("pdeobs_fno", key, in_channels=2, out_channels=1, **TINY_FNO["model"])
    assert jax.tree.structure(eqx.filter(one.net, eqx.is_array)) == jax.tree.structure(
        eqx.filter(net, eqx.is_array)
    )  # a one-output-channel network
    x = data.masked_inputs(dataset.test.observed, np.random.default_rng(3).random((4, RES, RES)) < 0.5)
    s_in, s_out = float(one.in_scale), float(one.out_scale[0])
    expected = []
    for record in x:
        value, mask, frames = record[0], record[1], []
        for _ in range(3):
            value = one.net(jnp.stack([value / s_in, mask]))[0] * s_out
            mask = jnp.ones_like(mask)
            frames.append(value)
        expected.append(jnp.stack(frames))
    pred = models.predict(fitted, x)
    assert pred.shape == (2, 4, 3, RES, RES)
    np.testing.assert_allclose(pred[0], jnp.stack(expected), rtol=1e-5, atol=1e-5)
    # the out scale is one number for every frame: the RMS over all target frames
    rms = np.sqrt(np.mean(np.square(train.target, dtype=np.float64)))
    np.testing.assert_allclose(s_out, rms, rtol=1e-5)


def test_joint_forecast_is_a_labelled_variant(key):
    dataset = synthetic_dataset("heat_field", c_out=3)
    train = dataset.train
    config = {**TINY_FNO, "forecast_mode": "joint_variant"}
    fitted = models.fit_views(key, "fno", view_stack(train, 1), train.target, config=config, dataset=dataset)
    assert fitted.rollout == 0 and fitted.out_scale.shape == (1, 3)
    with pytest.raises(ValueError, match="forecast_mode: expected one of \\('rollout', 'joint_variant'\\)"):
        models.fit_config("fno", {"forecast_mode": "joint"})
    # recovery is one call whatever the mode
    cfg = models.fit_config("fno", forecast=False)
    assert models.network_layout(cfg, 1, forecast=False) == (1, 0)
    assert models.network_layout(cfg, 3, forecast=True) == (1, 3)
