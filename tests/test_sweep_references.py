"""Sweep references from a prior pool (eps rule and importance), cached in the workdir."""

import dataclasses
import json
import zlib

import jax
import numpy as np
import pytest

from configs import sweep_tiny
from posteriorjax import files, sweep, tasks
from posteriorjax.reference import exact, registry, store
from posteriorjax.reference.registry import published_eps
from posteriorjax.report import tables
from posteriorjax.sweep import migrate
from posteriorjax.sweep.statistics import stream_keys

RES = 8


@pytest.fixture(scope="module")
def problem():
    # noise large enough that a 4000-member prior pool gives the importance weights a useful ESS
    task = tasks.get("poisson_fixed", resolution=RES, num_sensors=6, noise_std=3e-3)
    return task, task.cases(0, 2)


def _rc(method, **options):
    return dict(sweep.reference_config(method, **options).to_dict())


KEY = stream_keys(0)["reference"]


def _build(task, cases, rc, workdir, *, overwrite=False):
    """The sweep's cache of a task's reference: `workdir/references/poisson_fixed/`."""
    return registry.load_or_build(
        rc, task, cases, KEY, workdir / "references" / "poisson_fixed", workdir=workdir,
        settings=json.dumps(rc, sort_keys=True), overwrite=overwrite,
    )  # fmt: skip


def test_importance_reference_matches_the_exact_posterior_and_is_cached(problem, tmp_path, monkeypatch):
    task, cases = problem
    rc = _rc("importance", num_samples=200, pool_size=4000, pool_chunk=2000)
    samples, weights, report = _build(task, cases, rc, tmp_path)
    assert samples.shape == (2, 200, 1, RES, RES)
    np.testing.assert_allclose(weights, 1.0 / 200)
    assert report["method"] == "importance" and len(report["cases"]) == 2
    for i, info in enumerate(report["cases"]):
        assert info["pool_size"] == 4000 and info["ess"] > 10
        mean, std = exact.posterior(task, cases.y_obs[i])
        assert np.linalg.norm(samples[i].mean(0) - mean) < 0.3 * np.linalg.norm(mean)
        assert 0.8 < np.mean(samples[i].std(0)) / np.mean(std) < 1.2
    manifest, stored = store.load_references(tmp_path / "references" / "poisson_fixed")  # checksummed
    assert set(stored) == {"ref_samples", "ref_weights", "x_true", "y_obs"}
    assert manifest["task_hash"] == task.config_hash() and manifest["method"] == "importance"
    np.testing.assert_array_equal(stored["x_true"], np.asarray(cases.x_true))

    # a rerun loads the file (building again would fail here) ...
    def refuse(*args):
        raise AssertionError("rebuilt a cached reference")

    monkeypatch.setitem(
        registry.METHODS._entries,
        "importance",
        dataclasses.replace(registry.METHODS["importance"], build=refuse),
    )
    again, _, again_report = _build(task, cases, rc, tmp_path)
    np.testing.assert_array_equal(again, samples)
    assert again_report["cases"] == report["cases"]
    # ... and a file built with other settings or for another task is refused unless overwriting
    with pytest.raises(ValueError, match="settings"):
        _build(task, cases, {**rc, "num_samples": 100}, tmp_path)
    other = tasks.get("poisson_fixed", resolution=RES, num_sensors=6, noise_std=4e-3)
    with pytest.raises(ValueError, match="task_hash"):
        _build(other, other.cases(0, 2), rc, tmp_path)

    # the eps rule reuses the same pool: the published K members with MAE weights
    rejection = _rc("rejection", num_samples=20, pool_size=4000, pool_chunk=2000, eps=5e-3)
    monkeypatch.undo()
    samples, weights, report = _build(task, cases, rejection, tmp_path, overwrite=True)
    assert len(list((tmp_path / "references" / "pools").iterdir())) == 1
    assert samples.shape == (2, 20, 1, RES, RES)
    np.testing.assert_allclose(weights.sum(axis=1), 1.0, rtol=1e-5)
    for info in report["cases"]:
        assert 0 < info["acceptance_rate"] <= 1 and info["eps"] == 5e-3
    with pytest.raises(ValueError, match="only .* candidates have"):
        _build(task, cases, {**rejection, "eps": 1e-5}, tmp_path, overwrite=True)


def test_published_rule_and_k1000_variant_by_name(problem, tmp_path):
    """`published_eps`: eps = 3 x noise std, K = num_samples; `eps_k1000`: K = 1000, eps widened to fill K."""
    task, cases = problem
    eps = 3 * 3e-3
    assert published_eps(task) == pytest.approx(eps)
    pool = dict(pool_size=4000, pool_chunk=2000)
    samples, weights, report = _build(task, cases, _rc("published_eps", num_samples=20, **pool), tmp_path)
    assert samples.shape == (2, 20, 1, RES, RES) and report["method"] == "published_eps"
    assert "3 x noise std" in report["rule"] and report["settings"]["num_samples"] == 20
    for info in report["cases"]:
        assert info["eps"] == pytest.approx(eps) and info["accepted"] >= 20
        assert 1 <= info["kish_ess"] <= 20
    samples, weights, report = _build(
        task, cases, _rc("eps_k1000", num_samples=1000, **pool), tmp_path, overwrite=True
    )
    assert len(list((tmp_path / "references" / "pools").iterdir())) == 1  # the same pool
    assert samples.shape == (2, 1000, 1, RES, RES)
    np.testing.assert_allclose(weights.sum(axis=1), 1.0, rtol=1e-5)
    for info in report["cases"]:
        assert info["eps_requested"] == pytest.approx(eps) and info["eps"] >= info["eps_requested"]
        assert info["accepted"] >= 1000
        if info["eps"] > info["eps_requested"]:  # widened: exactly the 1000 nearest candidates pass
            assert info["accepted"] == 1000
    table = tables.reference_table({"poisson_fixed": report})
    assert "| poisson_fixed | eps_k1000 |" in table and "num_samples=1000" in table


def test_published_rule_settings_are_checked():
    config = sweep_tiny.get_config("tiny")
    task = next(iter(config.tasks))
    config.references = {task: sweep.reference_config("published_eps", eps=1e-3)}
    with pytest.raises(ValueError, match=r"references\.\w+\.eps: method 'published_eps' uses the published"):
        sweep.validate(config)
    config.references = {task: sweep.reference_config("eps_k1000", num_samples=100)}
    with pytest.raises(ValueError, match="keeps K = 1000"):
        sweep.validate(config)


# the tiny section of every registered method that needs no trained network; a method missing
# here fails the registry-wide test (`surrogate_rejection`, which needs a trained surrogate, is
# built through the registry in tests/test_reference_surrogate.py)
TINY = {
    "exact": dict(num_samples=4),
    "pcn": dict(num_samples=4, num_chains=2, burn_in=2, thin=1),
    "rejection": dict(num_samples=5, eps=5e-2, pool_size=1000, pool_chunk=500),
    "published_eps": dict(num_samples=2, pool_size=1000, pool_chunk=500),
    "eps_k1000": dict(num_samples=1000, pool_size=1000, pool_chunk=500),
    "importance": dict(num_samples=5, pool_size=1000, pool_chunk=500),
}


def test_every_registered_method_builds_a_reference(problem, tmp_path):
    task, cases = problem
    assert set(TINY) == set(registry.METHODS) - set(registry.surrogate_methods())
    for method, options in TINY.items():
        spec = registry.section(_rc(method, **options), method)
        registry.check_task(task, spec, method)
        samples, weights, info = registry.build(spec, task, cases, KEY, tmp_path)
        k = spec["num_samples"]
        assert samples.shape == (2, k, 1, RES, RES) and weights.shape == (2, k), method
        assert np.all(np.isfinite(samples)) and len(info) == 2, method
        np.testing.assert_allclose(weights.sum(axis=1), 1.0, rtol=1e-5, err_msg=method)
        assert registry.report(task, spec, info)["rule"] == registry.METHODS[method].rule
    assert len(list((tmp_path / "references" / "pools").iterdir())) == 1  # one pool for every method
    with pytest.raises(ValueError, match="spec.method: expected one of"):
        registry.build({**spec, "method": "oracle"}, task, cases, KEY, tmp_path)


def test_named_streams_are_distinct_and_change_the_reference(problem, tmp_path):
    """`stream(root, name)`: fold_in by name; distinct names give distinct keys and references."""
    task, cases = problem
    root = jax.random.key(0)
    names = ["eps_rule_a", "eps_rule_b", "importance", "exact", "mcmc", "pool_a", "pool_b"]
    keys = {tuple(np.asarray(jax.random.key_data(registry.stream(root, n))).tolist()) for n in names}
    assert len(keys) == len(names)
    assert np.array_equal(
        jax.random.key_data(registry.stream(root, "exact")),
        jax.random.key_data(jax.random.fold_in(root, zlib.crc32(b"exact"))),
    )
    spec = registry.section(_rc("exact", num_samples=4), "exact")
    a, _, _ = registry.build(spec, task, cases, registry.stream(root, "a"), tmp_path)
    again, _, _ = registry.build(spec, task, cases, registry.stream(root, "a"), tmp_path)
    b, _, _ = registry.build(spec, task, cases, registry.stream(root, "b"), tmp_path)
    np.testing.assert_array_equal(a, again)
    assert not np.allclose(a, b)
    # case i uses fold_in(key, i): the reference of a case does not depend on the number of cases
    one, _, _ = registry.build(spec, task, task.cases(0, 1), registry.stream(root, "a"), tmp_path)
    np.testing.assert_array_equal(one[0], a[0])


def test_a_reference_in_the_old_single_file_form_is_migrated_not_rebuilt(problem, tmp_path, monkeypatch):
    """Workdirs written before the checksummed set keep their references: `sweep.migrate` lists the
    single file as an earlier format and moves it into the set, which then loads as built."""
    task, cases = problem
    rc = _rc("exact", num_samples=4)
    samples, weights, info = registry.build(rc, task, cases, KEY, tmp_path)
    legacy = tmp_path / "references" / "poisson_fixed.npz"
    identity = json.dumps(rc, sort_keys=True)
    files.write_arrays(
        legacy,
        {
            "ref_samples": samples, "ref_weights": weights, "x_true": np.asarray(cases.x_true),
            "y_obs": np.asarray(cases.y_obs), "task_hash": np.asarray(task.config_hash()),
            "method": np.asarray("exact"), "settings": np.asarray(identity),
            "info": np.asarray(json.dumps(info)),
        },
    )  # fmt: skip
    fail = dataclasses.replace(
        registry.METHODS["exact"], build=lambda *a: pytest.fail("rebuilt a stored reference")
    )
    monkeypatch.setitem(registry.METHODS._entries, "exact", fail)
    directory = tmp_path / "references" / "poisson_fixed"
    assert migrate.earlier_formats(tmp_path) == [f"{legacy}: a reference in the single-file form"]
    with pytest.raises(ValueError, match=r"python -m experiments.migrate --workdir="):
        migrate.check(tmp_path)
    other = tasks.get("poisson_fixed", resolution=8, num_sensors=5)
    assert not migrate.move_reference(legacy, other) and legacy.exists()  # built for another config
    assert migrate.move_reference(legacy, task)
    assert not legacy.exists() and (directory / files.MANIFEST).exists()
    assert migrate.earlier_formats(tmp_path) == []
    got, got_w, report = registry.load_or_build(
        rc, task, cases, KEY, directory, workdir=tmp_path, settings=identity
    )
    np.testing.assert_array_equal(got, samples)
    np.testing.assert_array_equal(got_w, weights)
    # a corrupted set fails its checksum: set aside with a warning and rebuilt
    (directory / "references.npz").write_bytes(b"corrupt")
    monkeypatch.undo()
    with pytest.warns(UserWarning, match=r"references.npz: checksum mismatch.*poisson_fixed.corrupt-0"):
        rebuilt, _, _ = registry.load_or_build(
            rc, task, cases, KEY, directory, workdir=tmp_path, settings=identity
        )
    np.testing.assert_array_equal(rebuilt, samples)
    assert (directory.parent / "poisson_fixed.corrupt-0" / "references.npz").read_bytes() == b"corrupt"
