"""Every sampler's per-task published values against PosteriorBench's evaluation configs.

`YAML` transcribes, by hand, the values `configs/evaluations/<method>_<dataset>.yaml` sets for
each of the four datasets (darcy, poisson, ccs, light_transport = our ltmi); the tests compare
the table (`samplers.tuned.PUBLISHED`) and builder defaults our published profiles read. MC
dropout's configs set no sampling value per dataset (`dropout_active: true` only), so it has no
table.
"""

import functools
import inspect
import logging
import types

import jax
import numpy as np
import pytest

from posteriorjax import samplers, tasks
from posteriorjax.samplers import ddis, diffusionpde, eci, funddps, fundps, tuned
from posteriorjax.tasks import poisson

DATASETS = ("darcy", "poisson", "ccs", "ltmi")

# configs/evaluations/*.yaml (light_transport -> ltmi)
YAML = {
    "fundps": {  # iterations, sigma_min, sigma_max, field_weights of the observed state
        "darcy": (500, 0.002, 80.0, 4000.0),
        "poisson": (500, 0.01, 10.0, 1600.0),
        "ccs": (500, 0.002, 80.0, 300.0),
        "ltmi": (500, 0.002, 80.0, 3000.0),
    },
    "funddps": {  # iterations, sigma_min, sigma_max, field_weights
        "darcy": (500, 0.002, 80.0, 1000.0),
        "poisson": (500, 0.002, 80.0, 100.0),
        "ccs": (500, 0.002, 80.0, 17.5),
        "ltmi": (500, 0.002, 80.0, 400.0),
    },
    "diffusionpde": {  # iterations, sigma_min, sigma_max, field_weights
        "darcy": (2000, 0.002, 80.0, 40000.0),
        "poisson": (2000, 0.002, 80.0, 20000.0),
        "ccs": (2000, 0.002, 80.0, 1000.0),
        "ltmi": (2000, 0.002, 80.0, 400.0),
    },
    "ddis": {  # annealing num_steps, langevin num_steps, lr, eta, field_weights, observation scale
        "darcy": (200, 10, 1e-4, 0.1, 10.0, 1.0),
        "poisson": (100, 35, 7e-5, 0.25, 2.0, 0.5),
        "ccs": (100, 20, 1e-4, 0.1, 0.4, 1.0),
        "ltmi": (100, 20, 1e-4, 0.1, 3.0, 1.0),
    },
    "esmda": {  # ensemble_size, inflation (constant: num_assimilations x num_assimilations), scale
        "darcy": (128, (2.0, 2.0), 10.0),
        "poisson": (512, (1.0,), 100.0),
        "ccs": (256, (4.0, 4.0, 4.0, 4.0), 2.0),
        "ltmi": (1024, (1.0,), 1.0),
    },
    "eci": {  # n_step, n_mix, resample_step
        "darcy": (200, 5, 1),
        "poisson": (200, 1, 1),
        "ccs": (200, 1, 5),
        "ltmi": (200, 1, 5),
    },
    "fundiff": {"darcy": 20, "poisson": 20, "ccs": 100, "ltmi": 20},  # sampling.num_steps
}
# postprocess.discrete_values, the same in every method's config of a dataset ({} elsewhere)
DISCRETE_VALUES = {"darcy": (3.0, 12.0), "poisson": None, "ccs": None, "ltmi": None}
# every published profile's DDIS schedule (all four configs): annealing sigma 10 -> 0.01, rho 7;
# clean estimate 5 steps to 0.001; lr_min_ratio 0.01, lr_rho 1, tau 1e-3
DDIS_SCHEDULE = {"sigma_max": 10.0, "sigma_min": 0.01, "ode_steps": 5, "ode_sigma_min": 0.001, "tau": 1e-3}


def default(build, name):
    return inspect.signature(build).parameters[name].default


def test_every_published_dataset_has_a_task():
    assert set(tuned.PUBLISHED) == {entry.dataset for entry in tuned.TASKS.values()} == set(DATASETS)
    assert all(tuned.TASKS[d].dataset == d for d in DATASETS)


@pytest.mark.parametrize("dataset", DATASETS)
def test_guided_samplers_match_the_evaluation_configs(dataset):
    steps, smin, smax, weight = YAML["fundps"][dataset]
    assert default(fundps.build, "num_steps") == steps
    table = tuned.PUBLISHED[dataset]
    assert table["fundps"] == {"guidance": weight, "sigma_min": smin, "sigma_max": smax}
    steps, smin, smax, weight = YAML["funddps"][dataset]
    assert (default(funddps.build, "num_steps"), default(funddps.build, "sigma_min")) == (steps, smin)
    assert (default(funddps.build, "sigma_max"), table["funddps"]) == (smax, {"guidance": weight})
    steps, smin, smax, weight = YAML["diffusionpde"][dataset]
    assert (default(diffusionpde.build, "num_steps"), table["diffusionpde"]) == (steps, {"guidance": weight})


@pytest.mark.parametrize("dataset", DATASETS)
def test_ddis_esmda_eci_fundiff_match_the_evaluation_configs(dataset):
    keys = ("num_steps", "langevin_steps", "step_size", "temperature", "weight", "obs_scale")
    table = tuned.PUBLISHED[dataset]
    assert table["ddis"] == dict(zip(keys, YAML["ddis"][dataset], strict=True))
    assert ddis.PUBLISHED_SCHEDULE == DDIS_SCHEDULE and ddis.LR_MIN_RATIO == 0.01
    size, alphas, scale = YAML["esmda"][dataset]
    assert table["esmda"] == {"ensemble_size": size, "alphas": alphas, "obs_std_scale": scale}
    n_step, n_mix, resample = YAML["eci"][dataset]
    assert default(eci.build, "num_steps") == n_step
    assert table["eci"] == {"mixing": n_mix, "resample_step": resample}
    assert table["fundiff"] == {"num_steps": YAML["fundiff"][dataset]}


# Our profile's values before they moved into one table: (Darcy at both resolutions, every other task)
OURS = {"dps": (4000.0, 1600.0), "fundps": (4000.0, 1600.0), "funddps": (1000.0, 100.0),
        "diffusionpde": (40000.0, 20000.0)}  # fmt: skip


@pytest.mark.parametrize("name", sorted(tuned.TASKS))
def test_our_values_by_exact_task_name(name):
    task = types.SimpleNamespace(name=name)
    darcy = name in ("darcy", "darcy_lowres")
    for sampler, (on_darcy, elsewhere) in OURS.items():
        assert tuned.ours(task, sampler) == {"guidance": on_darcy if darcy else elsewhere}
    assert tuned.ours(task, "ddis") == {"num_steps": 200 if darcy else 100}


@pytest.mark.parametrize("name", sorted(tuned.TASKS))
def test_published_output_projection_by_dataset(name):
    """Every published profile of a dataset projects its output onto the config's discrete values
    (the task's own binary values: Darcy's {3, 12}); our profile never does."""
    task = tasks.get(name, **({"resolution": 16} if name not in ("ccs", "ltmi", "ltmi_full") else {}))
    assert tuned.PUBLISHED_DISCRETE_VALUES == {d: v for d, v in DISCRETE_VALUES.items() if v is not None}
    expected = DISCRETE_VALUES[tuned.TASKS[name].dataset]
    assert tuned.published_discrete_values(task) == expected
    assert tuned.profile_discrete_values(task, "published") == expected
    assert tuned.profile_discrete_values(task, "ours") is None
    assert tuned.resolve_discrete_values(task, "published") == expected
    assert tuned.resolve_discrete_values(task, None) is None
    assert tuned.resolve_discrete_values(task, (1, 2)) == (1.0, 2.0)
    for bad in ("round", (2.0, 1.0), (1.0,), 3.0):
        with pytest.raises(ValueError, match="discrete_values"):
            tuned.resolve_discrete_values(task, bad)


@pytest.fixture
def new_task(monkeypatch):
    """A task under a name the table does not have (a prefix of one it has does not count)."""
    monkeypatch.setattr(tuned, "_WARNED", set())
    tasks.register("poisson_fixed_new", functools.partial(poisson.build_fixed, "poisson_fixed_new"))
    try:
        yield tasks.get("poisson_fixed_new", resolution=8, num_sensors=6)
    finally:
        tasks.unregister("poisson_fixed_new")


def test_a_new_task_gets_an_error_or_a_logged_default(new_task, caplog):
    with pytest.raises(ValueError, match="fundps has no published values for task 'poisson_fixed_new'.*pass"):
        samplers.get("fundps", new_task, prior="oracle", profile="published")
    with pytest.raises(ValueError, match="eci has no published values for task 'poisson_fixed_new'.*mixing"):
        tuned.published(new_task, "eci", "mixing")
    with caplog.at_level(logging.WARNING):
        dps = samplers.get("dps", new_task, prior="oracle")
        samplers.get("dps", new_task, prior="oracle")  # logged once per task and sampler
        esmda = samplers.get("esmda", new_task)
    assert dps.defaults["guidance"] == tuned.DEFAULTS["dps"]["guidance"] == 1600.0
    assert esmda.alphas == tuned.DEFAULTS["esmda"]["alphas"] == (1.0,)
    logged = [r.getMessage() for r in caplog.records if "poisson_fixed_new" in r.getMessage()]
    assert len(logged) == 2, logged
    assert "'dps'" in logged[0] and "1600" in logged[0] and "tuned.py" in logged[0]
    assert "'esmda'" in logged[1] and "published" in logged[1]
    # a given value needs no table entry: nothing more is logged
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        given = samplers.get("funddps", new_task, prior="oracle", forward="exact", guidance_weight=5.0)
    assert given.defaults["guidance"] == 5.0
    assert not [r for r in caplog.records if "poisson_fixed_new" in r.getMessage()]


def test_published_darcy_output_is_projected_as_published():
    """A published profile's Darcy output is its raw output projected onto {3, 12} on both entry
    points (`sample`, `sample_traced`); our profile's is left as sampled (our ES-MDA updates the
    prior's latent, so its members are binary already)."""
    task = tasks.get("darcy", resolution=8, num_sensors=6)
    y = task.cases(3, 1).y_obs[0]
    published = samplers.get("esmda", task, profile="published", ensemble_size=16)
    ours = samplers.get("esmda", task, ensemble_size=16)
    assert (published.discrete_values, ours.discrete_values) == ((3.0, 12.0), None)
    key, hp = jax.random.key(0), published.hparams()
    raw = published._sample(key, y, 16, published.check_hparams(hp))
    assert len(np.unique(np.asarray(raw))) > 2  # the ensemble update leaves the two levels
    expected = np.where(np.asarray(raw) > 7.5, 12.0, 3.0)
    np.testing.assert_array_equal(published.sample(key, y, 16, hp), expected)
    traced = jax.jit(lambda k: published.sample_traced(k, y, 16, hp))(key)
    np.testing.assert_array_equal(traced, expected)
    hp = ours.hparams()
    np.testing.assert_array_equal(
        ours.sample(key, y, 16, hp), ours._sample(key, y, 16, ours.check_hparams(hp))
    )
