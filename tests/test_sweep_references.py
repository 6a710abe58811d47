"""Sweep references from a prior pool (eps rule and importance), cached in the workdir."""

import numpy as np
import pytest

from configs import sweep_tiny
from posteriorjax import results, sweep, tasks
from posteriorjax.reference import exact

RES = 8


@pytest.fixture(scope="module")
def problem():
    # noise large enough that a 4000-member prior pool gives the importance weights a useful ESS
    task = tasks.get("poisson_fixed", resolution=RES, num_sensors=6, noise_std=3e-3)
    return task, task.cases(0, 2)


def _rc(method, **options):
    return dict(sweep.reference_config(method, **options).to_dict())


def test_importance_reference_matches_the_exact_posterior_and_is_cached(problem, tmp_path, monkeypatch):
    task, cases = problem
    rc = _rc("importance", num_samples=200, pool_size=4000, pool_chunk=2000)
    path = tmp_path / "references" / "poisson_fixed.npz"
    samples, weights, report = sweep.load_or_build_reference(
        task, cases, rc, seed=0, workdir=tmp_path, path=path
    )
    assert samples.shape == (2, 200, 1, RES, RES)
    np.testing.assert_allclose(weights, 1.0 / 200)
    assert report["method"] == "importance" and len(report["cases"]) == 2
    for i, info in enumerate(report["cases"]):
        assert info["pool_size"] == 4000 and info["ess"] > 10
        mean, std = exact.posterior(task, cases.y_obs[i])
        assert np.linalg.norm(samples[i].mean(0) - mean) < 0.3 * np.linalg.norm(mean)
        assert 0.8 < np.mean(samples[i].std(0)) / np.mean(std) < 1.2
    stored = np.load(path)
    assert set(stored.files) >= {"ref_samples", "ref_weights", "x_true", "y_obs", "task_hash", "method"}
    assert str(stored["task_hash"]) == task.config_hash() and str(stored["method"]) == "importance"
    np.testing.assert_array_equal(stored["x_true"], np.asarray(cases.x_true))

    # a rerun loads the file (building again would fail here) ...
    def refuse(*args):
        raise AssertionError("rebuilt a cached reference")

    monkeypatch.setitem(sweep.REFERENCE_METHODS, "importance", refuse)
    again, _, again_report = sweep.load_or_build_reference(
        task, cases, rc, seed=0, workdir=tmp_path, path=path
    )
    np.testing.assert_array_equal(again, samples)
    assert again_report["cases"] == report["cases"]
    # ... and a file built with other settings or for another task is refused unless overwriting
    with pytest.raises(ValueError, match="settings"):
        sweep.load_or_build_reference(
            task, cases, {**rc, "num_samples": 100}, seed=0, workdir=tmp_path, path=path
        )
    other = tasks.get("poisson_fixed", resolution=RES, num_sensors=6, noise_std=4e-3)
    with pytest.raises(ValueError, match="task_hash"):
        sweep.load_or_build_reference(other, other.cases(0, 2), rc, seed=0, workdir=tmp_path, path=path)

    # the eps rule reuses the same pool: the published K members with MAE weights
    rejection = _rc("rejection", num_samples=20, pool_size=4000, pool_chunk=2000, eps=5e-3)
    samples, weights, report = sweep.load_or_build_reference(
        task, cases, rejection, seed=0, workdir=tmp_path, path=path, overwrite=True
    )
    assert len(list((tmp_path / "references" / "pools").iterdir())) == 1
    assert samples.shape == (2, 20, 1, RES, RES)
    np.testing.assert_allclose(weights.sum(axis=1), 1.0, rtol=1e-5)
    for info in report["cases"]:
        assert 0 < info["acceptance_rate"] <= 1 and info["eps"] == 5e-3
    with pytest.raises(ValueError, match="only .* candidates have"):
        sweep.load_or_build_reference(
            task, cases, {**rejection, "eps": 1e-5}, seed=0, workdir=tmp_path, path=path, overwrite=True
        )


def test_published_rule_and_k1000_variant_by_name(problem, tmp_path):
    """`published_eps`: eps = 3 x noise std, K = num_samples; `eps_k1000`: K = 1000, eps widened to fill K."""
    task, cases = problem
    eps = 3 * 3e-3
    assert sweep.published_eps(task) == pytest.approx(eps)
    path = tmp_path / "references" / "poisson_fixed.npz"
    pool = dict(pool_size=4000, pool_chunk=2000)
    samples, weights, report = sweep.load_or_build_reference(
        task, cases, _rc("published_eps", num_samples=20, **pool), seed=0, workdir=tmp_path, path=path
    )
    assert samples.shape == (2, 20, 1, RES, RES) and report["method"] == "published_eps"
    assert "3 x noise std" in report["rule"] and report["settings"]["num_samples"] == 20
    for info in report["cases"]:
        assert info["eps"] == pytest.approx(eps) and info["accepted"] >= 20
        assert 1 <= info["kish_ess"] <= 20
    samples, weights, report = sweep.load_or_build_reference(
        task, cases, _rc("eps_k1000", num_samples=1000, **pool), seed=0, workdir=tmp_path, path=path,
        overwrite=True,
    )  # fmt: skip
    assert len(list((tmp_path / "references" / "pools").iterdir())) == 1  # the same pool
    assert samples.shape == (2, 1000, 1, RES, RES)
    np.testing.assert_allclose(weights.sum(axis=1), 1.0, rtol=1e-5)
    for info in report["cases"]:
        assert info["eps_requested"] == pytest.approx(eps) and info["eps"] >= info["eps_requested"]
        assert info["accepted"] >= 1000
        if info["eps"] > info["eps_requested"]:  # widened: exactly the 1000 nearest candidates pass
            assert info["accepted"] == 1000
    table = results.reference_table({"poisson_fixed": report})
    assert "| poisson_fixed | eps_k1000 |" in table and "num_samples=1000" in table


def test_published_rule_settings_are_checked():
    config = sweep_tiny.get_config("tiny")
    task = next(iter(config.tasks))
    config.references = {task: sweep.reference_config("published_eps", eps=1e-3)}
    with pytest.raises(ValueError, match=r"references\.\w+\.eps: method 'published_eps' uses the published"):
        sweep.settings(config)
    config.references = {task: sweep.reference_config("eps_k1000", num_samples=100)}
    with pytest.raises(ValueError, match="keeps K = 1000"):
        sweep.settings(config)
