"""Every sampler's per-task published values against PosteriorBench's evaluation configs.

`YAML` transcribes, by hand, the values `configs/evaluations/<method>_<dataset>.yaml` sets for
each of the four datasets (darcy, poisson, ccs, light_transport = our ltmi); the tests compare
the tables and builder defaults our published profiles read. MC dropout's configs set no
sampling value per dataset (`dropout_active: true` only), so it has no table.
"""

import inspect

import pytest

from posteriorjax.samplers import ddis, diffusionpde, eci, esmda, funddps, fundiff, fundps, guidance

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
# every published profile's DDIS schedule (all four configs): annealing sigma 10 -> 0.01, rho 7;
# clean estimate 5 steps to 0.001; lr_min_ratio 0.01, lr_rho 1, tau 1e-3
DDIS_SCHEDULE = {"sigma_max": 10.0, "sigma_min": 0.01, "ode_steps": 5, "ode_sigma_min": 0.001, "tau": 1e-3}


def default(build, name):
    return inspect.signature(build).parameters[name].default


def test_every_published_dataset_has_a_task():
    assert set(guidance.PUBLISHED_DATASET.values()) == set(DATASETS)
    assert all(guidance.PUBLISHED_DATASET[d] == d for d in DATASETS)


@pytest.mark.parametrize("dataset", DATASETS)
def test_guided_samplers_match_the_evaluation_configs(dataset):
    steps, smin, smax, weight = YAML["fundps"][dataset]
    assert default(fundps.build, "num_steps") == steps
    assert fundps.PUBLISHED[dataset] == {"guidance": weight, "sigma_min": smin, "sigma_max": smax}
    steps, smin, smax, weight = YAML["funddps"][dataset]
    assert (default(funddps.build, "num_steps"), default(funddps.build, "sigma_min")) == (steps, smin)
    assert (default(funddps.build, "sigma_max"), funddps.PUBLISHED[dataset]) == (smax, weight)
    steps, smin, smax, weight = YAML["diffusionpde"][dataset]
    assert (default(diffusionpde.build, "num_steps"), diffusionpde.PUBLISHED[dataset]) == (steps, weight)


@pytest.mark.parametrize("dataset", DATASETS)
def test_ddis_esmda_eci_fundiff_match_the_evaluation_configs(dataset):
    keys = ("num_steps", "langevin_steps", "step_size", "temperature", "weight", "obs_scale")
    assert ddis.PUBLISHED[dataset] == dict(zip(keys, YAML["ddis"][dataset], strict=True))
    assert ddis.PUBLISHED_SCHEDULE == DDIS_SCHEDULE and ddis.LR_MIN_RATIO == 0.01
    size, alphas, scale = YAML["esmda"][dataset]
    assert esmda.PUBLISHED[dataset] == {"ensemble_size": size, "alphas": alphas, "obs_std_scale": scale}
    n_step, n_mix, resample = YAML["eci"][dataset]
    assert (default(eci.build, "num_steps"), eci.MIXING[dataset], eci.RESAMPLE[dataset]) == (
        n_step,
        n_mix,
        resample,
    )
    assert fundiff.PUBLISHED_STEPS[dataset] == YAML["fundiff"][dataset]
