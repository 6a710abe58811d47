"""The executable tutorials of docs/tutorials/: their pieces against known answers (default suite)
and each script end to end at its tiny size (slow; `.ci/run` runs them after the docs build)."""

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

TUTORIALS = Path(__file__).resolve().parents[1] / "docs" / "tutorials"


def _load(name):
    spec = importlib.util.spec_from_file_location(f"tutorial_{name}", TUTORIALS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses (equinox modules) look their module up there
    spec.loader.exec_module(module)
    return module


def test_numpy_gaussian_sampler_matches_the_closed_form_posterior():
    """score_your_own_sampler's NumPy sampler on a 2 x 2 linear problem with a known posterior."""
    t = _load("score_your_own_sampler")
    jac = np.array([[1.0, 0.0, 0.0, 0.0], [0.5, 0.5, 0.0, 0.0], [0.0, 0.0, 2.0, -1.0]])
    sigma, m, s = 0.3, 0.2, 1.5
    cases = {
        "y_obs": np.array([[1.0, 0.4, -0.7]]),
        "noise_std": np.float32(sigma),
        "field_mean": np.float32(m),
        "field_std": np.float32(s),
        "observation_mask": np.zeros((2, 2), bool),
    }
    samples = t.gaussian_sampler(cases, lambda x: x.reshape(len(x), -1) @ jac.T, 200_000)
    assert samples.shape == (1, 200_000, 1, 2, 2)
    cov = np.linalg.inv(jac.T @ jac / sigma**2 + np.eye(4) / s**2)
    mean = cov @ (jac.T @ cases["y_obs"][0] / sigma**2 + m / s**2)
    flat = samples[0].reshape(-1, 4).astype(np.float64)
    np.testing.assert_allclose(flat.mean(0), mean, atol=0.01)
    np.testing.assert_allclose(np.cov(flat.T), cov, atol=0.01)


def test_add_a_metric_tutorial_runs_and_leaves_the_registry_as_it_was():
    from posteriorjax.metrics import registry

    before = registry.names()
    out = _load("add_a_metric").main()
    assert registry.names() == before and "log_spread_ratio" not in registry.METRICS
    assert out["good"] == pytest.approx(0.0, abs=1e-6)
    assert out["bad"] == pytest.approx(np.log(0.5), abs=1e-5)  # 0.5 x reference: spread halved
    # an independent ensemble half as wide: log 0.5 up to Monte Carlo error of 32 and 64 members
    assert out["log_spread_ratio"] == pytest.approx(np.log(0.5), abs=0.1)


def test_add_a_task_tutorial_task_meets_the_contract_and_solves_its_pde():
    import jax.numpy as jnp
    import jax.random as jr

    from posteriorjax import grids, tasks, testing

    t = _load("add_a_task")
    t.register()
    try:
        task = tasks.get(t.NAME, resolution=16, num_sensors=32)
        testing.check_task(task)
        x = task.prior.sample(jr.key(0))
        residual = task.physics.residual(x, task.physics(x))
        assert float(jnp.max(jnp.abs(residual))) < 1e-4 * float(jnp.max(jnp.abs(x)))
        resonant = float(np.sqrt(grids.dirichlet_laplacian_eigenvalues(16, 1.0).min()))  # k^2 = lambda_11
        with pytest.raises(ValueError, match=r"k: expected k\^2 - damping away"):
            tasks.get(t.NAME, resolution=16, k=resonant, damping=0.0)
    finally:
        tasks.unregister(t.NAME)


@pytest.mark.slow
def test_add_a_task_tutorial_end_to_end(tmp_path):
    """On the new linear-Gaussian task the exact sampler beats the prior on every posterior metric."""
    from posteriorjax import tasks

    t = _load("add_a_task")
    try:
        t.main(tmp_path)
    finally:
        tasks.unregister(t.NAME)
    records = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    for metric in ("mean_error", "std_error", "mmd", "swd", "spectral_error"):
        exact = np.mean([r["metrics"][metric] for r in records if r["sampler"] == "exact"])
        prior = np.mean([r["metrics"][metric] for r in records if r["sampler"] == "prior"])
        assert exact < prior, metric


@pytest.mark.slow
def test_score_your_own_sampler_tutorial_end_to_end(tmp_path):
    t = _load("score_your_own_sampler")
    table = t.main(tmp_path, num_samples=8, figures=False)
    assert "numpy_gauss" in table
    records = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert [r["sampler"] for r in records] == ["numpy_gauss", "numpy_gauss"]
    assert all(np.isfinite(r["metrics"]["mean_error"]) and r["num_samples"] == 8 for r in records)


@pytest.mark.slow
def test_add_a_sampler_tutorial_end_to_end(tmp_path):
    """RML with enough steps is an exact sampler on poisson_fixed: it scores as `exact` does;
    the read-outputs tutorial on the same workdir finds step size 0.01 best."""
    t = _load("add_a_sampler")
    try:
        t.main(tmp_path)
        records = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    finally:
        from posteriorjax import samplers

        samplers.unregister(t.NAME)

    def mean(sampler, metric, step_size=None):  # hyperparameters are recorded as float32 values
        rows = [r for r in records if r["sampler"] == sampler]
        if step_size is not None:
            rows = [r for r in rows if np.isclose(r["hparams"]["step_size"], step_size)]
        assert len(rows) == 2, (sampler, step_size)
        return np.mean([r["metrics"][metric] for r in rows])

    for metric in ("mmd", "swd"):
        converged = mean("rml", metric, step_size=0.01)
        assert converged < mean("prior", metric)
        assert converged < 1.25 * mean("exact", metric)
    read = _load("read_outputs").main(tmp_path)["poisson_fixed"]
    assert set(read["optima"]) == {("rml", "step_size")}
    assert read["optima"][("rml", "step_size")]["mmd"] == pytest.approx(0.01)
    [row] = [v for (sampler, h), v in read["means"].items() if sampler == "rml" and np.isclose(h[0][1], 0.01)]
    assert row["mmd"] == pytest.approx(mean("rml", "mmd", step_size=0.01))


@pytest.mark.slow
def test_run_on_devices_tutorial_gives_the_one_device_numbers(tmp_path):
    """run_on_devices: the study on 4 CPU devices equals the study on one, record by record."""
    t = _load("run_on_devices")
    assert t.main(tmp_path, devices=4) == []
    one = json.loads((tmp_path / "devices-1.json").read_text())
    assert len(one) == 12  # 2 cases x (prior, exact, 4 DPS weights)
    # the comparison can fail: a metric moved beyond rounding is named
    moved = {rid: {**m, "mmd": m["mmd"] * (1 + 1e-3)} for rid, m in one.items()}
    assert len(t.differences(moved, one)) == len(one)
