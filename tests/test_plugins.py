"""Out-of-tree extension: the plugin loader, the public conformance checks, the example end to end."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import plugin_example
from posteriorjax import diffusion, nn, plugins, samplers, sweep, tasks, testing, training
from posteriorjax.metrics import registry as metric_registry
from posteriorjax.metrics import suite
from posteriorjax.reference import registry as reference_registry
from posteriorjax.report import stage
from posteriorjax.samplers import AbstractSampler
from posteriorjax.training.data import TaskSource
from posteriorjax.training.run import NOISE_OPTIONS

PLUGIN = "examples.plugin_sampler"


@pytest.fixture(scope="module")
def loaded():
    new = plugins.load(PLUGIN)
    assert new == {PLUGIN: {"sampler": ["tempered_is"], "task": ["poisson_fixed_sparse"]}}
    assert plugins.load([PLUGIN]) == new  # loading again is a no-op
    yield tasks.get("poisson_fixed_sparse", resolution=16)
    plugins.unload(PLUGIN)  # the registry-wide tests see the built-in names only
    assert "tempered_is" not in samplers.names() and "poisson_fixed_sparse" not in tasks.names()


def test_example_plugin_passes_the_conformance_checks(loaded):
    testing.check_task(loaded)
    s = testing.check_sampler(
        "tempered_is", loaded, config={"num_proposals": 64}, hparams={"temperature": 0.0}
    )
    assert isinstance(s, AbstractSampler) and s.num_proposals == 64


class _KeyBlind(AbstractSampler):
    def _sample(self, key, y_obs, num_samples, hparams):
        return jnp.broadcast_to(hparams["scale"] * jnp.mean(y_obs), (num_samples, *self.task.unknown_shape))


def test_checker_names_the_failed_property(loaded):
    with pytest.raises(AssertionError, match="depends on the key"):
        testing.check_jit_vmap(_KeyBlind(loaded, {"scale": 1.0}), loaded)
    with pytest.raises(ValueError, match="sampler_or_builder"):
        testing.check_sampler(3, loaded)
    with pytest.raises(ValueError, match="config"):
        testing.build_sampler(_KeyBlind(loaded, {"scale": 1.0}), loaded, {"num_steps": 2})
    with pytest.raises(ValueError, match="task"):
        testing.check_task("poisson_fixed_sparse")


def test_loader_errors_name_the_module():
    with pytest.raises(ValueError, match="cannot import plugin module 'no_such_module_xyz'"):
        plugins.load("no_such_module_xyz")
    with pytest.raises(ValueError, match="'json' registered no new sampler, task"):
        plugins.load("json")
    assert plugins.parse(" a, ,b ") == ["a", "b"] and plugins.parse(None) == []


def test_unknown_names_in_a_workdir_name_the_recorded_plugins(tmp_path):
    config = {"tasks": {"poisson_fixed": {}}, "samplers": {"mine": {"sampler": "my_sampler"}, "exact": {}}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"sampler\(s\) \['my_sampler'\].*no plugin is recorded"):
        plugins.check_workdir(tmp_path)
    (tmp_path / "provenance.json").write_text(json.dumps({"plugins": ["my_pkg.samplers"]}))
    with pytest.raises(ValueError, match="--plugins=my_pkg.samplers"):
        plugins.check_workdir(tmp_path)
    ghost = plugin_example.get_config("tiny")
    ghost.samplers = {"ghost": {"sampler": "ghost_sampler"}}
    with pytest.raises(ValueError, match=r"\['ghost_sampler'\].*no plugin is recorded"):
        sweep.run(ghost, tmp_path / "new", progress=False)  # refused before anything is built
    assert not (tmp_path / "new").exists()


def test_plugin_sweep_end_to_end(loaded, tmp_path):
    records = sweep.run(plugin_example.get_config("tiny"), tmp_path, progress=False, plugins=[PLUGIN])
    grid = [(case, t) for case in (0, 1) for t in (0.0, 1.0)]
    assert sorted((r.case, r.hparams["temperature"]) for r in records) == grid
    assert {(r.task, r.sampler) for r in records} == {("poisson_fixed_sparse", "tempered_is")}
    assert json.loads((tmp_path / "provenance.json").read_text())["plugins"] == [PLUGIN]
    assert "tempered_is" in stage.write(tmp_path, figures=False, progress=False)[0]
    plugins.check_workdir(tmp_path)  # everything it needs is registered
    # weighting by the likelihood fits the data: at temperature 1 the members match y_obs
    # (whitened misfit about 1 or below), prior draws (temperature 0) do not on average
    misfit = {(r.case, r.hparams["temperature"]): r.metrics["obs_misfit"] for r in records}
    assert sum(misfit[(c, 1.0)] for c in (0, 1)) < sum(misfit[(c, 0.0)] for c in (0, 1))
    plugins.unload(PLUGIN)  # a resume or a report without the plugin names the one recorded
    for attempt in (
        lambda: sweep.run(plugin_example.get_config("tiny"), tmp_path),
        lambda: plugins.check_workdir(tmp_path),
    ):
        with pytest.raises(ValueError, match=f"tempered_is.*--plugins={PLUGIN}"):
            attempt()
    assert len((tmp_path / "results.jsonl").read_text().splitlines()) == 4  # nothing lost


REGISTRIES_PLUGIN = "examples.plugin_registries"


@pytest.fixture
def extras():
    new = plugins.load(REGISTRIES_PLUGIN)
    yield new
    plugins.unload(REGISTRIES_PLUGIN)
    assert "mean_abs_bias" not in metric_registry.METRICS and "prior_wide" not in training.kinds.names()
    assert "prior_draws" not in reference_registry.METHODS


def test_a_plugin_adds_a_metric_a_network_kind_and_a_reference_method(extras):
    assert extras == {
        REGISTRIES_PLUGIN: {"metric": ["mean_abs_bias"], "network kind": ["prior_wide"],
                            "reference method": ["prior_draws"]},
    }  # fmt: skip
    # the metric: recorded by the suite for every case; the known value of a shifted copy
    reference = jnp.asarray(np.random.default_rng(0).normal(size=(16, 1, 4, 4)), jnp.float32)
    out = suite.evaluate(reference + 0.5, reference)
    assert out["mean_abs_bias"] == pytest.approx(0.5, abs=1e-6) and "mean_error" in out
    assert metric_registry.HEADERS["mean_abs_bias"] == "Mean |bias|"
    # the network kind: a training config, a model and a finite loss on one tiny batch
    config = training.config("poisson_fixed", "prior_wide", "tiny")
    assert config.kind == "prior_wide" and config.model.options.width == 32
    task = tasks.get("poisson_fixed", resolution=16, num_sensors=6)
    spec = sweep.networks.parse_spec("networks.model", "prior_wide", "tiny", "poisson_fixed")
    assert spec.kind == "prior_wide"
    entry, x_norm, key = training.kinds.get("prior_wide"), nn.field_normalizer(task), jax.random.key(1)
    model = training.build_model(
        "prior_wide", *entry.models["tiny"], task, x_norm=x_norm, u_norm=None, key=key
    )
    batch = TaskSource(task, x_norm, None, "prior_wide", 2)(key)
    d = config.diffusion
    noise = diffusion.noise.get(d.noise, **NOISE_OPTIONS[d.noise](d))
    assert np.isfinite(float(entry.loss(task, noise, d)(model, key, batch)))
    # the reference method: a section, references of the right shape and weights, its rule
    section = reference_registry.section({"method": "prior_draws", "num_samples": 4}, "references")
    cases = task.cases(0, 2)
    samples, weights, info = reference_registry.build(section, task, cases, jax.random.key(0), None)
    assert samples.shape == (2, 4, *task.unknown_shape) and np.allclose(weights, 0.25)
    assert reference_registry.report(task, section, info)["rule"].startswith("prior draws")
    with pytest.raises(ValueError, match=r"name: reference method 'prior_draws' is already registered"):
        reference_registry.register("prior_draws", reference_registry.METHODS["prior_draws"])
