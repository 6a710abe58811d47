import json
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import jax.random as jr
import ml_collections
import numpy as np
import pytest

from posteriorjax import random_fields, sweep, tasks
from posteriorjax.samplers.base import AbstractSampler

RES = 8


class ShrunkPrior(AbstractSampler):
    """Test sampler: prior draws pulled towards zero by a numeric hyperparameter."""

    def _sample(self, key, y_obs, num_samples, hparams):
        x = jax.vmap(self.task.prior.sample)(jr.split(key, num_samples))
        return x / (1.0 + hparams["shrink"]) + 0.0 * y_obs.sum()


@pytest.fixture(scope="module")
def setup():
    task = tasks.get("poisson_fixed", resolution=RES, num_sensors=6)
    sampler = ShrunkPrior(task, {"shrink": 0.0})
    cases = task.cases(0, 2)
    ref = jnp.stack([random_fields.sample_batch(task.prior, jr.key(i), 12) for i in range(2)])
    weights = jnp.full((2, 12), 1.0 / 12)
    return task, sampler, cases, (ref, weights)


def test_expand_is_the_full_product_and_validates():
    grid = sweep.expand(2, {"shrink": [0.0, 1.0, 3.0]}, [0, 5], {"shrink": 0.0, "other": 2.0})
    assert grid.size == 2 * 3 * 2
    assert set(zip(grid.case.tolist(), grid.hparams["shrink"].tolist(), grid.seed.tolist(), strict=True)) == {
        (c, s, d) for c in (0, 1) for s in (0.0, 1.0, 3.0) for d in (0, 5)
    }
    np.testing.assert_array_equal(grid.hparams["other"], 2.0)
    assert len(set(grid.ids())) == grid.size
    with pytest.raises(ValueError, match="no values"):
        sweep.expand(2, {"shrink": []}, [0], {"shrink": 0.0})
    with pytest.raises(ValueError, match="unknown hyperparameter"):
        sweep.expand(2, {"guidance": [1.0]}, [0], {"shrink": 0.0})


GRID_AXES = {"shrink": [0.0, 2.0]}
SEEDS = [0, 1]
KWARGS = dict(num_samples=6, seed=0, batch_size=2)


@pytest.fixture(scope="module")
def full(setup):
    task, sampler, cases, reference = setup
    grid = sweep.expand(2, GRID_AXES, SEEDS, sampler.defaults)
    return grid, sweep.run_pair(task, sampler, cases, reference, grid, chunk_size=3, **KWARGS)


def test_one_program_equals_per_configuration_loop(setup, full):
    task, sampler, cases, reference = setup
    grid, records = full
    assert len(records) == grid.size == 8
    assert len({r["compile_time_s"] for r in records}) == 1  # one compilation for the whole axis
    one = jax.jit(sweep.case_program(task, sampler, 6, base_key=jr.key(0)))
    data = {
        "y_obs": cases.y_obs,
        "x_true": cases.x_true,
        "ref_samples": reference[0],
        "ref_weights": reference[1],
    }
    for i, rec in enumerate(records):
        config = {
            "case": grid.case[i],
            "seed": grid.seed[i],
            "hparams": {"shrink": grid.hparams["shrink"][i]},
        }
        expected = one(data, config)
        for name in ("mean_error", "mmd", "swd", "crps"):
            np.testing.assert_allclose(rec["metrics"][name], expected[name], rtol=2e-5)
    # the hyperparameter acts: shrinking the prior moves the ensemble spread away from the reference
    by_shrink = {
        s: np.mean([r["metrics"]["std_error"] for r in records if r["hparams"]["shrink"] == s])
        for s in (0, 2)
    }
    assert by_shrink[2.0] > by_shrink[0.0]


def test_chunk_size_does_not_change_results(setup, full):
    task, sampler, cases, reference = setup
    grid, records = full
    other = sweep.run_pair(task, sampler, cases, reference, grid, chunk_size=8, **KWARGS)
    for ra, rb in zip(records, other, strict=True):
        assert ra["config_id"] == rb["config_id"]
        np.testing.assert_allclose(ra["metrics"]["mmd"], rb["metrics"]["mmd"], rtol=1e-6)


def test_resume_after_interruption_completes_without_duplicates(setup, full, tmp_path):
    task, sampler, cases, reference = setup
    grid, records = full
    path = tmp_path / "results.jsonl"
    sweep.ResultsFile(path).append(records[:3])  # the first chunk finished before the kill ...
    with open(path, "a") as f:
        f.write(json.dumps(records[3])[:40])  # ... and the second was torn mid-write
    resumed = sweep.ResultsFile(path)
    assert len(resumed.records) == 3
    new = sweep.run_pair(task, sampler, cases, reference, grid, results=resumed, chunk_size=3, **KWARGS)
    assert len(new) == grid.size - 3
    stored = [json.loads(line) for line in path.read_text().splitlines()]
    assert sorted(r["config_id"] for r in stored) == sorted(r["config_id"] for r in records)
    by_id = {r["config_id"]: r for r in records}
    for r in stored:
        np.testing.assert_allclose(r["metrics"]["mmd"], by_id[r["config_id"]]["metrics"]["mmd"], rtol=1e-6)


def _tiny_config(**overrides):
    config = ml_collections.ConfigDict()
    config.seed = 0
    config.seeds = (0,)
    config.num_cases = 2
    config.num_samples = 4
    config.chunk_size = 4
    config.batch_size = 2
    config.overwrite = False
    config.tasks = {"poisson_fixed": {"resolution": RES, "num_sensors": 6}}
    config.reference = sweep.reference_config("exact", num_samples=8)
    config.samplers = {"prior": {"options": {}, "axes": {}}}
    config.update(overrides)
    return config


def test_bad_configs_fail_before_compute(tmp_path):
    with pytest.raises(ValueError, match="unknown task"):
        sweep.validate(_tiny_config(tasks={"nope": {}}))
    with pytest.raises(ValueError, match="unknown sampler"):
        sweep.validate(_tiny_config(samplers={"nope": {}}))
    with pytest.raises(ValueError, match="reference.method"):
        sweep.validate(
            _tiny_config(reference=ml_collections.ConfigDict({"method": "oracle", "num_samples": 1}))
        )
    config = _tiny_config()
    sweep.prepare_workdir(tmp_path, config)
    other = _tiny_config(num_samples=5)
    with pytest.raises(ValueError, match="different config"):
        sweep.prepare_workdir(tmp_path, other)
    sweep.prepare_workdir(tmp_path, config)  # the same config resumes


def test_run_writes_tables_and_resumes(tmp_path):
    config = _tiny_config()
    first = sweep.run(config, tmp_path, progress=False)
    assert {p.name for p in tmp_path.iterdir()} >= {
        "results.jsonl",
        "results.csv",
        "summary.md",
        "config.json",
        "provenance.json",
    }
    assert "| prior |" in (tmp_path / "summary.md").read_text()
    again = sweep.run(config, tmp_path, progress=False)
    assert len(again) == len(first) == 2


def test_same_numbers_on_four_devices(full):
    """The sharded program on 4 fake CPU devices reproduces the 1-device records."""
    grid, records = full
    script = textwrap.dedent(
        f"""
        import json, sys
        import jax, jax.random as jr, jax.numpy as jnp
        from posteriorjax import random_fields, sweep, tasks
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from test_sweep import GRID_AXES, KWARGS, SEEDS, ShrunkPrior
        task = tasks.get("poisson_fixed", resolution={RES}, num_sensors=6)
        sampler = ShrunkPrior(task, {{"shrink": 0.0}})
        cases = task.cases(0, 2)
        ref = jnp.stack([random_fields.sample_batch(task.prior, jr.key(i), 12) for i in range(2)])
        w = jnp.full((2, 12), 1.0 / 12)
        grid = sweep.expand(2, GRID_AXES, SEEDS, sampler.defaults)
        recs = sweep.run_pair(task, sampler, cases, (ref, w), grid, chunk_size=3, **KWARGS)
        print(json.dumps({{"devices": jax.device_count(), "mmd": [r["metrics"]["mmd"] for r in recs]}}))
        """
    )
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4", "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["devices"] == 4
    np.testing.assert_allclose(out["mmd"], [r["metrics"]["mmd"] for r in records], rtol=1e-5)
