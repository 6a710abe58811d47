"""Over-case calibration aggregated from sweep records equals MIRA / TARP computed directly."""

import math

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from posteriorjax import random_fields, results, sweep, tasks
from posteriorjax.metrics import calibration, mira
from posteriorjax.samplers.base import AbstractSampler

RES = 8
NUM_CASES = 20
NUM_SAMPLES = 6


class WidePrior(AbstractSampler):
    """Test sampler: prior draws scaled by (1 + spread), ignoring the data."""

    def _sample(self, key, y_obs, num_samples, hparams):
        x = jax.vmap(self.task.prior.sample)(jr.split(key, num_samples))
        return x * (1.0 + hparams["spread"]) + 0.0 * y_obs.sum()


@pytest.fixture(scope="module")
def sweep_records():
    task = tasks.get("poisson_fixed", resolution=RES, num_sensors=6)
    sampler = WidePrior(task, {"spread": 0.0})
    cases = task.cases(0, NUM_CASES)
    ref = jnp.stack([random_fields.sample_batch(task.prior, jr.key(i), 4) for i in range(NUM_CASES)])
    reference = (ref, jnp.full((NUM_CASES, 4), 0.25))
    grid = sweep.expand(NUM_CASES, {}, [3], sampler.defaults)
    records = sweep.run_pair(
        task,
        sampler,
        cases,
        reference,
        grid,
        num_samples=NUM_SAMPLES,
        seed=5,
        chunk_size=NUM_CASES,
        batch_size=4,
    )
    one = sweep.sample_program(sampler, NUM_SAMPLES, seed=5)
    samples = jax.jit(jax.vmap(one, in_axes=(None, 0)))(
        {"y_obs": cases.y_obs}, grid.take(np.arange(grid.size))
    )
    return task, cases, reference, records, samples


def test_aggregated_calibration_equals_direct_mira_and_tarp(sweep_records):
    task, cases, reference, records, samples = sweep_records
    (row,) = results.calibration_rows(records)
    assert row["num_conditions"] == NUM_CASES and row["num_samples"] == NUM_SAMPLES
    keys = sweep.stream_keys(5)

    # MIRA: the records' statistics are mira.mira's per-condition values with the sweep's MIRA stream
    direct = mira.mira(keys["mira"], samples, cases.x_true)
    per_record = [r["metrics"]["mira_statistic"] for r in sorted(records, key=lambda r: r["case"])]
    np.testing.assert_allclose(per_record, direct.per_condition, rtol=1e-6)
    np.testing.assert_allclose(row["mira"], direct.score, rtol=1e-6)
    np.testing.assert_allclose(row["mira_expected"], direct.expected_mean, rtol=1e-6)
    np.testing.assert_allclose(row["mira_se"], direct.standard_error, rtol=1e-6)
    np.testing.assert_allclose(row["mira_z"], direct.z, rtol=1e-4)

    # TARP: the sweep's reference point of case c, mapped to the data space, gives calibration.tarp's curve
    data = sweep.program_data(task, cases, reference)
    low, width = data["tarp_low"], data["tarp_width"]
    points = jnp.stack([sweep.tarp_reference_point(keys["tarp"], c, low.shape[0]) for c in range(NUM_CASES)])
    ecp, alpha = calibration.tarp(jr.key(0), samples, cases.x_true, references=low + points * width)
    np.testing.assert_allclose(row["tarp_ecp"], ecp, atol=1e-7)
    np.testing.assert_allclose(row["tarp_alpha"], alpha, atol=1e-7)
    summary = calibration.tarp_summary(ecp, alpha)
    for name in ("atc", "area", "ks"):
        np.testing.assert_allclose(row[f"tarp_{name}"], summary[name], atol=1e-6)
    assert len(row["tarp_ecp"]) == NUM_CASES // 10 + 1


def test_calibration_table_marks_band_and_nan(sweep_records):
    records = sweep_records[3]
    broken = [dict(r, sampler="diverged", metrics={**r["metrics"], "mira_statistic": None}) for r in records]
    rows = {r["sampler"]: r for r in results.calibration_rows(records + broken)}
    assert math.isnan(rows["diverged"]["mira"]) and math.isfinite(rows["diverged"]["tarp_atc"])
    table = results.calibration_table(list(rows.values()))
    assert "| diverged | spread=0 | 20 | NaN |" in table
    ok = rows["WidePrior"]
    lo, hi = ok["mira_expected"] - 2 * ok["mira_se"], ok["mira_expected"] + 2 * ok["mira_se"]
    mark = "" if lo <= ok["mira"] <= hi else " †"
    assert f"| WidePrior | spread=0 | 20 | {ok['mira']:.4f}{mark} |" in table
