"""Registry-wide property suite: every registered sampler jits, vmaps over cases and
hyperparameters, is deterministic for a fixed key, and rejects bad input with clear errors."""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from posteriorjax import nn, observations, samplers, tasks, testing, training


@functools.cache
def _setup():
    task = tasks.get("poisson_fixed", resolution=8, num_sensors=12, noise_std=1e-3)
    x_norm, u_norm = nn.field_normalizer(task), nn.state_statistics(task, 8)
    net = dict(modes=3, width=4, layers=1, projection=4)
    build = functools.partial(training.build_model, task=task, x_norm=x_norm, u_norm=u_norm)
    models = {
        "joint": build("joint", "fno", {**net, "embed_dim": 4}, key=jr.key(1)),
        "prior": build("prior", "fno", {**net, "embed_dim": 4}, key=jr.key(2)),
        "surrogate": build("surrogate", "fno", net, key=jr.key(3)),
        "inverse": build("inverse", "fno", {**net, "dropout": 0.2}, key=jr.key(4)),
        "flow_fno": build("flow_fno", "fno", {**net, "embed_dim": 4}, key=jr.key(5)),
    }
    return task, models


def _config(name):
    _, m = _setup()
    return {
        "prior": {},
        "exact": {},
        "pcn": dict(burn_in=4, num_steps=4),
        "esmda": dict(alphas=(2.0, 2.0)),
        "dps": dict(prior="oracle", num_steps=3),
        "fundps": dict(model=m["joint"], num_steps=3),
        "funddps": dict(model=m["prior"], surrogate=m["surrogate"], num_steps=3),
        "ddis": dict(prior="oracle", forward="exact", num_steps=2, ode_steps=2, langevin_steps=2),
        "diffusionpde": dict(model=m["joint"], num_steps=3),
        "eci": dict(model=m["joint"], num_steps=3, mixing=2),
        "mc_dropout": dict(model=m["inverse"]),
        "flow_fno": dict(model=m["flow_fno"], num_steps=2),
    }[name]


NEEDS_MODEL = {"fundps", "funddps", "diffusionpde", "eci", "mc_dropout", "flow_fno"}
# samplers whose jit / vmap / bad-input contract needs their own trained networks and is tested in
# their own file: fundiff (three networks, tests/test_fundiff.py)
ELSEWHERE = {"fundiff"}
NAMES = [n for n in samplers.names() if n not in ELSEWHERE]


def test_every_registered_sampler_is_covered():
    assert set(samplers.names()) == set(NAMES) | ELSEWHERE
    for name in NAMES:
        _config(name)


@functools.cache
def _sampler(name):
    task, _ = _setup()
    return samplers.get(name, task, **_config(name))


@pytest.mark.parametrize("name", NAMES)
def test_jit_vmap_deterministic(name):
    task, _ = _setup()
    # shape, finite, one compilation, fixed key -> identical samples, another key -> others,
    # cases differ -> (data-aware) samples differ
    testing.check_jit_vmap(_sampler(name), task, data_aware=name != "prior")


@pytest.mark.parametrize("name", NAMES)
def test_bad_input(name):
    task, _ = _setup()
    testing.check_bad_input(_sampler(name), task)  # y_obs, num_samples, unknown and negative hparams
    if name in NEEDS_MODEL:
        with pytest.raises(ValueError, match="model"):
            samplers.get(name, task, **{**_config(name), "model": None})


@pytest.mark.parametrize(
    "name,hp", [("ddis", "step_size"), ("ddis", "tau"), ("pcn", "step"), ("esmda", "noise_inflation")]
)
def test_non_positive_step_sizes_are_errors(name, hp):
    task, _ = _setup()
    s = _sampler(name)
    y = task.cases(3, 1).y_obs[0]
    with pytest.raises(Exception, match=hp):
        jax.block_until_ready(s.sample(jr.key(0), y, 2, s.hparams(**{hp: 0.0})))


def test_oracle_and_model_errors():
    task, m = _setup()
    with pytest.raises(ValueError, match="model"):
        samplers.get("dps", task, prior="oracle", model=m["prior"])
    with pytest.raises(ValueError, match="model"):
        samplers.get("fundps", task, model=m["prior"])  # unknown-only denoiser for a joint sampler
    with pytest.raises(ValueError, match="surrogate"):
        samplers.get("funddps", task, prior="oracle")
    with pytest.raises(ValueError, match="prior"):
        samplers.get("eci", task, prior="oracle")
    with pytest.raises(ValueError, match="prior"):
        samplers.get("dps", tasks.get("poisson", resolution=8, num_sensors=12), prior="oracle")
    with pytest.raises(ValueError, match="num_steps"):
        samplers.get("dps", task, prior="oracle", num_steps=0)
    with pytest.raises(ValueError, match="config"):
        samplers.get("dps", task, prior="oracle", steps=3)
    with pytest.raises(ValueError, match="model"):
        samplers.get("flow_fno", task, model=m["inverse"])  # a regressor, not a conditional flow
    darcy = tasks.get("darcy", resolution=8, num_sensors=12)
    wrong = training.build_model(
        "flow_fno", "fno", dict(modes=3, width=4, layers=1, projection=4, embed_dim=4), darcy,
        x_norm=nn.Normalizer((0.0, 0.0), (1.0, 1.0)), u_norm=nn.Normalizer((0.0,), (1.0,)), key=jr.key(0),
    )  # fmt: skip
    with pytest.raises(ValueError, match="channels"):
        samplers.get("flow_fno", darcy, model=wrong)  # two unknown channels for a one-channel task
    with pytest.raises(ValueError, match="temperature"):
        samplers.get("flow_fno", task, model=m["flow_fno"], temperature=-1.0)


def test_eci_reproduces_observed_entries_exactly():
    task, m = _setup()
    s = samplers.get("eci", task, model=m["joint"], num_steps=2, mixing=1)
    y = task.cases(3, 1).y_obs[0]
    joint = s.sample_joint(jr.key(0), y, 4)
    u = jax.vmap(s.prior.state)(joint)
    np.testing.assert_allclose(
        jax.vmap(task.observation)(u), np.broadcast_to(y, (4, y.size)), rtol=1e-5, atol=1e-7
    )


class RowSums(observations.AbstractObservation):
    """A linear observation ECI has no hard constraint for (sums over rows)."""

    shape: tuple[int, int]

    @property
    def count(self):
        return self.shape[0]

    @property
    def mask(self):
        return jnp.ones(self.shape, dtype=bool)

    def _observe(self, fields):
        return fields.sum(axis=-1)

    def _fill(self, values):
        return jnp.repeat(values[..., None], self.shape[1], axis=-1)


def test_eci_needs_a_constrainable_observation():
    task, m = _setup()
    other = eqx.tree_at(lambda t: t.observation, task, RowSums(task.observation.shape))
    with pytest.raises(ValueError, match="needs point values, well columns or block averages.*RowSums"):
        samplers.get("eci", other, model=m["joint"], num_steps=3)
