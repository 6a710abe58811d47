"""Over-case calibration aggregated from sweep records equals MIRA / TARP computed directly.

One sweep of the exact posterior sampler on `poisson_fixed` (16 x 16, 16 cases) feeds every test;
its TARP curve must lie near the diagonal.
"""

import math

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from posteriorjax import files, random_fields, samplers, sweep, tasks
from posteriorjax.metrics import calibration, mira
from posteriorjax.report import tables
from posteriorjax.sweep.program import expand, sample_program
from posteriorjax.sweep.statistics import stream_keys

RES = 16
NUM_CASES = 16
NUM_SAMPLES = 16
SEED = 5


@pytest.fixture(scope="module")
def sweep_records():
    task = tasks.get("poisson_fixed", resolution=RES, num_sensors=8)
    sampler = samplers.get("exact", task)
    cases = task.cases(0, NUM_CASES)
    ref = jnp.stack([random_fields.sample_batch(task.prior, jr.key(i), 4) for i in range(NUM_CASES)])
    reference = (ref, jnp.full((NUM_CASES, 4), 0.25))
    grid = expand(NUM_CASES, {}, [3], sampler.defaults)
    records = sweep.run_pair(
        task,
        sampler,
        cases,
        reference,
        grid,
        num_samples=NUM_SAMPLES,
        seed=SEED,
        chunk_size=NUM_CASES,
        batch_size=8,
        labels={"sampler": "exact"},
    )
    one = sample_program(sampler, NUM_SAMPLES, seed=SEED)
    samples = jax.jit(jax.vmap(one, in_axes=(None, 0)))(
        {"y_obs": cases.y_obs}, grid.take(np.arange(grid.size))
    )
    return task, cases, records, samples


def test_aggregated_calibration_equals_direct_mira_and_tarp(sweep_records):
    task, cases, records, samples = sweep_records
    (row,) = tables.calibration_rows(records)
    assert row["num_conditions"] == NUM_CASES and row["num_samples"] == NUM_SAMPLES
    keys = stream_keys(SEED)

    # MIRA: the records' statistics are mira.mira's per-condition values with the sweep's MIRA stream
    direct = mira.mira(keys["mira"], samples, cases.x_true, normalization="with_truth")  # the sweep's default
    per_record = [r["metrics"]["mira_statistic"] for r in sorted(records, key=lambda r: r["case"])]
    # a float32 distance tie can move one region's count by one of the N + 1 candidates between the two
    # compiled programs: at most 1 / (regions (N + 1)) per condition, in at most one condition
    flip = 1.0 / (100 * (NUM_SAMPLES + 1)) + 1e-6
    diff = np.abs(np.asarray(per_record) - np.asarray(direct.per_condition))
    assert diff.max() <= flip and int(np.sum(diff > 1e-6)) <= 1, diff
    np.testing.assert_allclose(row["mira"], direct.score, atol=flip / NUM_CASES)
    np.testing.assert_allclose(row["mira_expected"], direct.expected_mean, rtol=1e-6)
    np.testing.assert_allclose(row["mira_se"], direct.standard_error, rtol=1e-6)
    np.testing.assert_allclose(
        row["mira_z"], direct.z, atol=flip / NUM_CASES / float(direct.standard_error) + 1e-4
    )
    # bootstrap se of a mean of L values: close to their std / sqrt(L)
    assert row["mira_se_boot"] == pytest.approx(np.std(per_record) / math.sqrt(NUM_CASES), rel=0.15)
    assert row["mira_z_boot"] == pytest.approx((row["mira"] - row["mira_expected"]) / row["mira_se_boot"])

    # TARP: reference point of case c = a prior draw from fold_in(tarp stream, c); samples, truths and
    # points standardized by the task's field statistics; calibration.tarp on them gives the same curve
    points = jnp.stack([task.prior.sample(jr.fold_in(keys["tarp"], c)) for c in range(NUM_CASES)])
    mean, std = task.field_stats
    ecp, alpha = calibration.tarp(
        jr.key(0),
        (samples - mean) / std,
        (cases.x_true - mean) / std,
        references=(points - mean) / std,
        normalize=None,
    )
    np.testing.assert_allclose(row["tarp_ecp"], ecp, atol=1e-7)
    np.testing.assert_allclose(row["tarp_alpha"], alpha, atol=1e-7)
    summary = calibration.tarp_summary(ecp, alpha)
    for name in ("atc", "area", "ks"):
        np.testing.assert_allclose(row[f"tarp_{name}"], summary[name], atol=1e-6)
    assert len(row["tarp_ecp"]) == NUM_CASES // 10 + 1


def test_exact_posterior_tarp_curve_is_near_the_diagonal(sweep_records):
    """With prior reference points the exact posterior's credibilities are uniform (16 cases, 256 dims).

    Reference points uniform in the box spanned by the truths (the earlier rule, `normalize="truth"`)
    push the credibilities towards 0: their mean is 0.3 on these 16 cases, and with 4 cases (the
    `sweep_tiny` study) every credibility is below 0.1 even for the exact posterior.
    """
    task, cases, records, samples = sweep_records
    f = np.asarray([r["metrics"]["tarp_credibility"] for r in sorted(records, key=lambda r: r["case"])])
    ecp, alpha = calibration.expected_coverage(jnp.asarray(f, jnp.float32), 8)
    assert float(calibration.tarp_summary(ecp, alpha)["ks"]) < 0.33, f  # 5% KS bound for 16 draws
    assert abs(f.mean() - 0.5) < 2 * math.sqrt(1 / (12 * NUM_CASES)), f  # 2 standard errors of U(0, 1)
    key = stream_keys(SEED)["tarp"]
    x, t = samples.reshape(NUM_CASES, NUM_SAMPLES, -1), cases.x_true.reshape(NUM_CASES, -1)
    for n, limit in ((4, 0.1), (NUM_CASES, 0.35)):
        low, width = t[:n].min(0), t[:n].max(0) - t[:n].min(0) + 1e-10
        u = jnp.stack([jr.uniform(jr.fold_in(key, c), (t.shape[1],)) for c in range(n)])
        old = calibration.tarp_credibility((x[:n] - low) / width, (t[:n] - low) / width, u)
        assert float(old.mean()) < limit, (n, np.asarray(old))


def test_calibration_table_marks_band_and_nan(sweep_records):
    records = sweep_records[2]
    broken = [dict(r, sampler="diverged", metrics={**r["metrics"], "mira_statistic": None}) for r in records]
    rows = {r["sampler"]: r for r in tables.calibration_rows(records + broken)}
    assert math.isnan(rows["diverged"]["mira"]) and math.isfinite(rows["diverged"]["tarp_atc"])
    table = tables.calibration_table(list(rows.values()))
    assert f"| diverged | - | {NUM_CASES} | NaN |" in table
    ok = rows["exact"]
    # fewer than 20 conditions: no dagger whatever the band says, and the legend says why
    assert NUM_CASES < tables.MIRA_FLAG_MIN_CONDITIONS and not tables.mira_flagged(ok)
    assert f"| exact | - | {NUM_CASES} | {ok['mira']:.4f} | {ok['mira_expected']:.4f} ± " in table
    assert f"MIRA: † only from 20 conditions (L = {NUM_CASES}" in table
    # fewer than 20 cases: a one-bin ECP curve, whose ATC and KS say nothing, is shown as "-"
    assert ok["tarp_bins"] == 1 and f"| - | {ok['tarp_ks_p']:.3g} | - |" in table
    assert 0.0 <= ok["tarp_ks_p"] <= 1.0


def _record(task, case, evaluation, rng):
    metrics = {k: float(rng.uniform(0.1, 1.0)) for k, _ in tables.TABLE_METRICS}
    metrics.update(mira_statistic=float(rng.uniform(0.5, 0.8)), tarp_credibility=float(rng.uniform()))
    return {
        "task": task, "sampler": "prior", "hparams": {}, "case": case, "seed": 0, "num_samples": 32,
        "metrics": metrics, "wall_time_s": 0.1, "evaluation": evaluation,
    }  # fmt: skip


def test_summary_opens_with_a_header_and_every_table_has_a_legend(tmp_path):
    import json

    rng = np.random.default_rng(0)
    records = [_record("darcy", c, "binarized@7.5", rng) for c in range(3)]
    records += [_record("poisson_fixed", c, "identity", rng) for c in range(3)]
    config = {"name": "quickstart", "num_cases": 3}
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "provenance.json").write_text(json.dumps(files.provenance({"seed": 0})))
    rejection = {"eps": 1e-3, "sigma": 0.0, "num_samples": 32, "pool_size": 4096, "augment": True}
    references = {
        "darcy": {"method": "rejection", "settings": rejection,
                  "cases": [{"pool_size": 16384, "accepted": a} for a in (40, 75, 120)]},
        "poisson_fixed": {"method": "exact", "settings": {"num_samples": 64}, "cases": [{}, {}, {}]},
    }  # fmt: skip
    (tmp_path / "references.json").write_text(json.dumps(references))
    summary = tables.write_tables(tmp_path, records)
    assert (tmp_path / "summary.md").read_text() == summary + "\n"
    lines = summary.splitlines()
    digest = __import__("hashlib").sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:12]
    assert lines[0] == "# Study `quickstart`"
    assert lines[2].startswith(f"- config `config.json`, sha256 `{digest}`; run 20")
    assert lines[3].startswith("- machine: ") and "CPU core(s); JAX devices: 1 x cpu" in lines[3]
    assert lines[4] == (
        "- `darcy`: 3 case(s) x 1 seed(s) x 32 samples per configuration; reference: published eps rule on a "
        "prior pool of 16,384 candidates (rotation-augmented): MAE <= eps = 0.001, K = 32 kept, weights "
        "exp(-MAE² / 2 sigma²) with sigma = eps / 3; accepted per case 40–120"
    )
    assert lines[5].endswith("reference: exact posterior, 64 draws per case")
    legends = [line for line in lines if line.startswith("Lower is better")]
    assert len(legends) == 2 and "Fields scored after `binarized@7.5`" in legends[0]
    assert "Fields as sampled" in legends[1]
    calibration = [line for line in lines if line.startswith("L = conditions")]
    needed = tables.mira_conditions_needed(32)
    assert len(calibration) == 2 and all(f"about {needed} conditions at N = 32" in c for c in calibration)
    assert all("with L = 3 the band is ±0." in c and "TARP: '-' = fewer than 20" in c for c in calibration)
    # the number of conditions named is the smallest whose ±2 se band is within the shift
    _, var = mira.expected_moments(31)
    assert 2 * math.sqrt(var / needed) <= tables.MIRA_RESOLVED_SHIFT < 2 * math.sqrt(var / (needed - 1))


@pytest.mark.slow
def test_observation_dependent_statistics_flag_the_prior(sweep_records):
    """A sampler returning the prior: blind uniform MIRA centres and prior TARP references, caught by
    centres and references at the reference posterior mean m(y) (MIRA App. E.4), the exact one passes."""
    task, cases, _, _ = sweep_records
    exact = samplers.get("exact", task)
    grid = expand(NUM_CASES, {}, [3], exact.defaults)
    ref = jax.jit(jax.vmap(sample_program(exact, 32, seed=SEED + 1), in_axes=(None, 0)))(
        {"y_obs": cases.y_obs}, grid.take(np.arange(grid.size))
    )
    reference = (ref, jnp.full((NUM_CASES, 32), 1 / 32))
    rows = {}
    for mode in ("blind", "observation"):
        options = {"mira_centres": "observation", "tarp_reference": "observation"} if mode != "blind" else {}
        for name in ("exact", "prior"):
            recs = sweep.run_pair(
                task, samplers.get(name, task), cases, reference, grid, num_samples=NUM_SAMPLES, seed=SEED,
                chunk_size=NUM_CASES, batch_size=8, labels={"sampler": name}, calibration_options=options,
            )  # fmt: skip
            (rows[mode, name],) = tables.calibration_rows(recs)
    assert abs(rows["blind", "prior"]["mira_z_boot"]) < 3, rows["blind", "prior"]
    assert rows["observation", "prior"]["mira_z_boot"] < -4, rows["observation", "prior"]
    assert abs(rows["observation", "exact"]["mira_z_boot"]) < 3, rows["observation", "exact"]
    assert rows["observation", "prior"]["tarp_ks_p"] < 1e-3 < rows["observation", "exact"]["tarp_ks_p"]
    with pytest.raises(ValueError, match="config.calibration.mira_centres"):
        sweep.calibration_settings({"mira_centres": "data"})
    with pytest.raises(ValueError, match="unknown key"):
        sweep.calibration_settings({"mira_width": 1.0})


def test_split_conformal_over_held_out_cases(key):
    """Per-case grids from `suite.compute`, calibrated on half the cases and tested on the other half."""
    from posteriorjax.metrics import suite

    num, n, d = 200, 20, 30
    rng = np.random.default_rng(3)
    theta = rng.normal(size=(num, d))
    samples = jnp.asarray(theta[:, None] + rng.normal(size=(num, n, d)), jnp.float32)
    noise = rng.normal(size=(num, d))
    compute = jax.jit(jax.vmap(lambda s, t: suite.compute(s, s, None, t)))
    rows = {}
    for name, spread in (("calibrated", 1.0), ("overconfident", 2.0)):
        metrics = compute(samples, jnp.asarray(theta + spread * noise, jnp.float32))
        records = [
            {"task": "toy", "sampler": name, "hparams": {}, "case": c, "seed": 0, "num_samples": n,
             "metrics": {k: np.asarray(v[c]).tolist() for k, v in metrics.items()}}
            for c in range(num)
        ]  # fmt: skip
        (rows[name],) = tables.calibration_rows(records, num_bootstrap=10)
    ok, over = rows["calibrated"], rows["overconfident"]
    assert 0.8 <= ok["conformal_scale"] <= 1.25 and abs(ok["conformal_coverage"] - 0.9) < 0.03, ok
    assert over["conformal_raw_coverage"] < 0.7 and over["conformal_scale"] > 1.6, over
    assert abs(over["conformal_coverage"] - 0.9) < 0.03
    assert over["conformal_width"] > 1.6 * ok["conformal_width"]
