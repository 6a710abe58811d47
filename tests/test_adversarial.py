"""Bad input at every public boundary: a clear error naming the argument, never a silent result.

Each case is a call that must raise a given error type whose message names the argument
as the user wrote it. The inputs are tiny and every check is eager (before any compile of
the computation it guards), so the module stays fast; the one training case runs a few
steps of a two-parameter model.
"""

from __future__ import annotations

import math
import re

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from configs import sweep_tiny
from posteriorjax import samplers, tasks
from posteriorjax.metrics import calibration, mira, posterior, suite
from posteriorjax.reference import exact
from posteriorjax.sweep.settings import Settings
from posteriorjax.training import loop
from posteriorjax.training.settings import TrainConfig


def _raises(error, name: str, fn):
    """`fn()` raises `error` and its message names `name` (as a word, e.g. ``resolution:``)."""
    with pytest.raises(error) as info:
        fn()
    message = str(info.value)
    assert re.search(rf"(^|[\s(,.]){re.escape(name)}\b", message), f"{name!r} not named in: {message}"
    return message


# ----------------------------------------------------------------------------
# Task options


TASK_CASES = [
    ("darcy", {"low": 12.0, "high": 3.0}, "low, high"),  # swapped phases would invert every binarized field
    ("darcy", {"low": 3.0, "high": 3.0}, "low, high"),
    ("darcy", {"low": -1.0}, "low, high"),  # permeability is positive
    ("darcy", {"high": math.nan}, "low, high"),
    ("darcy", {"resolution": 1}, "resolution"),  # not `Grid: n`
    ("darcy", {"resolution": 16.5}, "resolution"),
    ("darcy", {"resolution": "16"}, "resolution"),
    ("darcy", {"noise_std": -1.0}, "noise_std"),
    ("darcy", {"noise_std": 0.0}, "noise_std"),
    ("darcy", {"noise_std": math.inf}, "noise_std"),
    ("darcy", {"num_sensors": 0}, "num_sensors"),
    ("darcy", {"alpha": 0.0}, "alpha"),
    ("darcy", {"tau": -3.0}, "tau"),
    ("darcy", {"source": -1.0}, "source"),
    ("poisson", {"alpha_range": (3.0, 1.5)}, "alpha_range"),
    ("poisson", {"tau_range": (-1.0, 2.0)}, "tau_range"),
    ("poisson", {"tau_range": 2.0}, "tau_range"),
    ("poisson_fixed", {"alpha": 0.0}, "alpha"),
    ("poisson_fixed", {"resolution": 0}, "resolution"),
    ("poisson_fixed", {"noise_std": -1e-4}, "noise_std"),
    ("poisson_field", {"resolution": 1}, "resolution"),
    ("poisson_field", {"noise_std": 0.0}, "noise_std"),
    ("ltmi", {"resolution": 1}, "resolution"),
    ("ltmi", {"albedo": 1.5}, "albedo"),
    ("ltmi", {"pooled_size": 0}, "pooled_size"),
    ("interface_potential", {"resolution": 1}, "resolution"),
    ("interface_potential", {"width": 0.0}, "width"),
    ("interface_potential", {"num_sensors": -1}, "num_sensors"),
    ("interface_potential", {"num_sensors": 0, "frames": 2}, "num_sensors"),  # 0: auxiliary alone
    ("ccs", {"nz": 0}, "nz"),
    ("ccs", {"rate": -0.36}, "rate"),
    ("ccs", {"noise_std": 0.0}, "noise_std"),
]


@pytest.mark.parametrize(("name", "options", "argument"), TASK_CASES, ids=lambda v: str(v))
def test_task_options(name, options, argument):
    _raises(ValueError, argument, lambda: tasks.get(name, **options))


def test_task_unknown_option_and_name():
    _raises(ValueError, "overrides", lambda: tasks.get("darcy", lows=3.0))
    _raises(ValueError, "name", lambda: tasks.get("darcyy"))


# ----------------------------------------------------------------------------
# Observations: finite y_obs at every eager entry point


@pytest.fixture(scope="module")
def tiny():
    """A linear-Gaussian task on 8 x 8 with 4 sensors, its truth and a finite observation."""
    task = tasks.get("poisson_fixed", resolution=8, num_sensors=4)
    cases = task.cases(0, 1)
    return task, cases.x_true[0], cases.y_obs[0]


def _nan_obs(y):
    return y.at[1].set(jnp.nan)


OBSERVATION_CASES = {
    "log_likelihood": lambda t, x, y, k: t.log_likelihood(x, _nan_obs(y)),
    "misfit": lambda t, x, y, k: t.misfit(x, y.at[0].set(jnp.inf)),
    "sampler.sample": lambda t, x, y, k: samplers.get("prior", t).sample(k, _nan_obs(y), 2, {}),
    "exact.sample": lambda t, x, y, k: exact.sample(k, t, _nan_obs(y), 2),
    "exact.posterior": lambda t, x, y, k: exact.posterior(t, _nan_obs(y)),
    "evaluate": lambda t, x, y, k: suite.evaluate(
        x[None].repeat(2, 0), x[None].repeat(2, 0), task=t, y_obs=_nan_obs(y)
    ),
    "evaluate without task": lambda t, x, y, k: suite.evaluate(
        x[None].repeat(2, 0), x[None].repeat(2, 0), y_obs=_nan_obs(y)
    ),
    "shape": lambda t, x, y, k: exact.sample(k, t, y[:3], 2),
}


@pytest.mark.parametrize("where", list(OBSERVATION_CASES))
def test_nonfinite_or_misshapen_observation(tiny, key, where):
    task, x, y = tiny
    _raises(ValueError, "y_obs", lambda: OBSERVATION_CASES[where](task, x, y, key))


def test_nonfinite_unknown_in_forward(tiny):
    task, x, _ = tiny
    _raises(ValueError, "x", lambda: task.forward(x.at[0, 0, 0].set(jnp.nan)))


# ----------------------------------------------------------------------------
# Samplers: construction and hyperparameters


@pytest.mark.parametrize("task", [None, "poisson_fixed", {"name": "poisson_fixed"}], ids=repr)
def test_sampler_needs_a_task(task):
    _raises(TypeError, "task", lambda: samplers.get("prior", task))


@pytest.mark.parametrize(
    "value",
    [[0.1, 0.2], (0.1,), np.array([0.1, 0.2]), jnp.ones(3), np.array("0.1"), "0.1", None, True],
    ids=["list", "tuple", "numpy vector", "jax vector", "string array", "string", "None", "bool"],
)
def test_vector_string_and_list_hyperparameters(tiny, key, value):
    task, _, y = tiny
    sampler = samplers.get("pcn", task)
    name = sorted(sampler.defaults)[0]
    _raises(TypeError, name, lambda: sampler.hparams(**{name: value}))
    hp = {**sampler.hparams(), name: value}
    _raises(TypeError, name, lambda: sampler.sample(key, y, 2, hp))


def test_sampler_counts(tiny, key):
    task, _, y = tiny
    sampler = samplers.get("prior", task)
    _raises(ValueError, "num_samples", lambda: sampler.sample(key, y, 0, {}))
    _raises(ValueError, "hparams", lambda: sampler.hparams(step=0.1))
    _raises(ValueError, "config", lambda: samplers.get("prior", task, steps=3))


# ----------------------------------------------------------------------------
# Training options and a diverging run


@pytest.mark.parametrize(
    ("options", "argument"),
    [
        ({"learning_rate": -1.0}, "learning_rate"),
        ({"learning_rate": 0.0}, "learning_rate"),
        ({"learning_rate": math.nan}, "learning_rate"),
        ({"learning_rate": "1e-3"}, "learning_rate"),
        ({"num_steps": 0}, "num_steps"),
        ({"num_steps": 10.5}, "num_steps"),
        ({"batch_size": -2}, "batch_size"),
        ({"warmup_steps": -1}, "warmup_steps"),
        ({"warmup_steps": 2.5}, "warmup_steps"),
        ({"ema_decay": 1.0}, "ema_decay"),
        ({"clip_norm": -1.0}, "clip_norm"),
        ({"weight_decay": math.nan}, "weight_decay"),
        ({"seed": -1}, "seed"),
        ({"progress": "yes"}, "progress"),
    ],
    ids=lambda v: str(v),
)
def test_train_options(options, argument):
    _raises(ValueError, argument, lambda: TrainConfig(**options))


class _Source(eqx.Module):
    def __call__(self, key):
        return jr.normal(key, (4,))


def test_diverging_run_stops_before_a_checkpoint(tmp_path):
    """A learning rate of 1e30 overflows the quadratic loss after one step: an error, no checkpoint."""
    model = jnp.ones(2)

    def loss_fn(p, key, batch):
        del key
        return jnp.sum(p**2) * jnp.mean(batch**2)

    cfg = TrainConfig(num_steps=6, batch_size=4, learning_rate=1e30, warmup_steps=0, clip_norm=0.0,
                      log_every=1, eval_every=6, checkpoint_every=2, progress=False)  # fmt: skip
    _raises(loop.DivergedError, "loss", lambda: loop.fit(model, loss_fn, _Source(), cfg, tmp_path))
    saved = [p for p in (tmp_path / "checkpoints").glob("*") if p.name.isdigit()]
    assert saved == [], f"a diverged state was checkpointed: {saved}"


# ----------------------------------------------------------------------------
# Metric options and shapes

X = jnp.asarray(np.random.default_rng(0).normal(size=(6, 3)), jnp.float32)
Y = jnp.asarray(np.random.default_rng(1).normal(size=(5, 3)), jnp.float32)
C = jnp.asarray(np.random.default_rng(2).normal(size=(4, 6, 3)), jnp.float32)  # (L, N, d)
T = jnp.asarray(np.random.default_rng(3).normal(size=(4, 3)), jnp.float32)  # (L, d)
K = jr.key(0)

METRIC_CASES = {
    "mmd bandwidth < 0": (ValueError, "bandwidth", lambda: posterior.mmd(X, Y, bandwidth=-1.0)),
    "mmd bandwidth 0": (ValueError, "bandwidth", lambda: posterior.mmd(X, Y, bandwidth=0.0)),
    "mmd bandwidth nan": (ValueError, "bandwidth", lambda: posterior.mmd(X, Y, bandwidth=math.nan)),
    "mmd bandwidth vector": (TypeError, "bandwidth", lambda: posterior.mmd(X, Y, bandwidth=[1.0, 2.0])),
    "mmd scales empty": (ValueError, "scales", lambda: posterior.mmd(X, Y, scales=())),
    "mmd scales negative": (ValueError, "scales", lambda: posterior.mmd(X, Y, scales=(1.0, -1.0))),
    "mira num_regions 0": (ValueError, "num_regions", lambda: mira.mira(K, C, T, num_regions=0)),
    "mira num_bootstrap 0": (ValueError, "num_bootstrap", lambda: mira.mira(K, C, T, num_bootstrap=0)),
    "mira batch_size 0": (ValueError, "batch_size", lambda: mira.mira(K, C, T, batch_size=0)),
    "mira num_regions float": (ValueError, "num_regions", lambda: mira.mira(K, C, T, num_regions=2.5)),
    "mira L = 0": (ValueError, "samples", lambda: mira.mira(K, C[:0], T[:0])),
    "tarp num_alpha_bins 0": (
        ValueError, "num_alpha_bins", lambda: calibration.tarp(K, C, T, num_alpha_bins=0)
    ),
    "tarp NaN references": (
        ValueError, "references", lambda: calibration.tarp(K, C, T, references=T.at[0, 0].set(jnp.nan))
    ),
    "tarp references shape": (ValueError, "references", lambda: calibration.tarp(K, C, T, references=T[:3])),
    "tarp L = 0": (ValueError, "samples", lambda: calibration.tarp(K, C[:0], T[:0])),
    "tarp_bootstrap num_bootstrap 0": (
        ValueError, "num_bootstrap", lambda: calibration.tarp_bootstrap(K, C, T, num_bootstrap=0)
    ),
    "tarp_bootstrap references shape": (
        ValueError, "references", lambda: calibration.tarp_bootstrap(K, C, T, references=T[:, :2])
    ),
    "coverage level 1.5": (ValueError, "levels", lambda: calibration.coverage(X, Y[0], levels=(0.5, 1.5))),
    "coverage level 0": (ValueError, "levels", lambda: calibration.coverage(X, Y[0], levels=(0.0,))),
    "coverage level 1": (ValueError, "levels", lambda: calibration.coverage(X, Y[0], levels=1.0)),
    "coverage no levels": (ValueError, "levels", lambda: calibration.coverage(X, Y[0], levels=())),
    "coverage string levels": (ValueError, "levels", lambda: calibration.coverage(X, Y[0], levels="0.9")),
    "conformal level 1.5": (ValueError, "level", lambda: calibration.conformal_quantile(jnp.ones(5), 1.5)),
    "conformal_scale level 0": (ValueError, "level", lambda: calibration.conformal_scale(C, T, 0.0)),
    "mean_relative_l2 zero truth": (
        ValueError, "truth", lambda: posterior.mean_relative_l2(X, jnp.zeros(3))
    ),
    "relative_l2 zero truth": (ValueError, "truth", lambda: posterior.relative_l2(X, jnp.zeros((6, 3)))),
    "wasserstein_1d empty u": (ValueError, "u", lambda: posterior.wasserstein_1d(jnp.zeros(0), jnp.ones(3))),
    "wasserstein_1d empty v": (ValueError, "v", lambda: posterior.wasserstein_1d(jnp.ones(3), jnp.zeros(0))),
    "wasserstein_1d 2-D": (ValueError, "u", lambda: posterior.wasserstein_1d(jnp.ones((3, 2)), jnp.ones(3))),
}  # fmt: skip


@pytest.mark.parametrize("case", list(METRIC_CASES))
def test_metric_options(case):
    error, argument, fn = METRIC_CASES[case]
    _raises(error, argument, fn)


def test_evaluate_point_estimate_records_nan_with_a_reason():
    """N = 1: the metrics that need N >= 2 are NaN with the reason, not silently left out."""
    ref = jnp.asarray(np.random.default_rng(4).normal(size=(8, 3)), jnp.float32)
    rec = suite.evaluate(ref[:1], ref, truth=ref[1])
    for name in ("std_error", "crps_fair", "coverage", "coverage_error", "conformal_inside"):
        assert name in rec and np.all(np.isnan(rec[name])), name
        assert f"{name}: needs N >= 2" in rec["undefined"]
    assert len(rec["coverage"]) == len(calibration.DEFAULT_LEVELS)
    assert np.isfinite(rec["mean_error"]) and np.isfinite(rec["crps"])
    assert (
        suite.too_small(ref[:2], ref, None, ref[1], kwargs={}, present=set()) == {}
    )  # N = 2: nothing is undefined


def test_sweep_scoring_of_a_point_estimate_records_nan_not_a_missing_key():
    """The sweep's `score_program` (jitted) keeps every key at N = 1: NaN where N >= 2 is needed."""
    import jax

    from posteriorjax.sweep import program, statistics

    task = tasks.get("poisson_fixed", resolution=8, num_sensors=16)
    cases = task.cases(0, 1)
    ref = jax.vmap(task.prior.sample)(jr.split(jr.key(0), 4))
    data = statistics.program_data(task, cases, (np.asarray(ref)[None], np.full((1, 4), 0.25)), seed=0)
    score = program.score_program(task, seed=0)
    point, pair = (jax.jit(lambda d, x: score(d, 0, x))(data, ref[:n]) for n in (1, 2))
    assert set(point) == set(pair)
    for name in ("std_error", "crps_fair", "coverage"):
        assert np.all(np.isnan(np.asarray(point[name]))) and np.all(np.isfinite(np.asarray(pair[name]))), name
    assert np.isfinite(point["mean_error"]) and np.isfinite(point["crps"])


# ----------------------------------------------------------------------------
# Sweep config: task names and sampler labels become file names


@pytest.mark.parametrize(
    ("section", "key"),
    [
        ("samplers", "/tmp/evil"),
        ("samplers", "../outside"),
        ("samplers", "a/b"),
        ("samplers", "a\\b"),
        ("samplers", ".."),
        ("samplers", "~user"),
        ("samplers", "C:x"),
        ("samplers", ""),
        ("samplers", "line\nbreak"),
        ("tasks", "/abs"),
        ("tasks", "../poisson_fixed"),
    ],
    ids=repr,
)
def test_sweep_names_used_in_paths(section, key):
    config = sweep_tiny.get_config().to_dict()  # a plain dict: ConfigDict itself refuses dotted keys
    config[section] = {key: {"sampler": "prior"} if section == "samplers" else {"resolution": 16}}
    message = _raises(ValueError, f"config.{section}", lambda: Settings.parse(config))
    assert repr(key) in message


def test_sweep_labels_differing_only_in_case():
    config = sweep_tiny.get_config()
    config.samplers = {"Prior": {"sampler": "prior"}, "prior": {}}
    _raises(ValueError, "config.samplers", lambda: Settings.parse(config))
