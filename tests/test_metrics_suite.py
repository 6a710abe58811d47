"""The metric suite on a duck-typed task, non-finite samples inside a sweep, and the diagnostics."""

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from posteriorjax.metrics import diagnostics as D
from posteriorjax.metrics import suite


def _rng(key):
    """NumPy generator seeded from a JAX key: test data without compiling JAX's PRNG for every shape."""
    return np.random.default_rng(np.asarray(jr.key_data(key)))


class BinaryTask:
    """Darcy-like stand-in: binary {3, 12} fields, scored after projection at 7.5, 6 point sensors."""

    field_stats = (7.5, 4.5)
    noise_std = 0.1
    evaluation_name = "binarized@7.5"

    def evaluation_field(self, x):
        return jnp.where(x >= 7.5, 12.0, 3.0)

    def forward(self, x):
        return x[0, 2, 1:7]


TASK = BinaryTask()  # one instance: evaluate's compiled program is cached per task


def _binary(key, n, h=16):
    return jnp.where(jnp.asarray(_rng(key).normal(size=(n, 1, h, h))) > 0, 12.0, 3.0)


def test_evaluate_on_task_binarizes_and_records(key):
    task = TASK
    ref = _binary(key, 12)
    truth = ref[0]
    noisy = ref + 0.5 * jnp.asarray(_rng(jr.fold_in(key, 1)).normal(size=ref.shape))  # projects back onto ref
    y_obs = task.forward(truth)
    rec = suite.evaluate(noisy, ref, None, task=task, truth=truth, y_obs=y_obs)
    assert rec["evaluation"] == "binarized@7.5" and rec["swd_normalization"] == "task"
    assert rec["spectral_dc"] == "auto" and rec["spectral_dc_excluded"] == 0
    assert rec["num_nonfinite"] == 0 and rec["num_samples"] == 12
    for k in ("mean_error", "std_error", "mmd", "swd"):
        assert rec[k] == pytest.approx(0.0, abs=1e-5), k
    assert rec["spectral_error"] < 1e-6  # float32 round-off floor
    assert rec["rel_l2_best"] == pytest.approx(0.0, abs=1e-6)
    assert len(rec["coverage"]) == 19 and 0 <= rec["coverage_error"] <= 1
    assert rec["obs_misfit"] > 1.0  # raw (un-projected) samples miss the data by ~0.5 / 0.1
    # marginal fidelity: the pooled values of all (projected) members against the truth's values
    import scipy.stats

    pooled, t = np.asarray(ref).ravel(), np.asarray(truth).ravel()
    assert rec["marginal_w1"] == pytest.approx(scipy.stats.wasserstein_distance(pooled, t), rel=1e-4)
    assert rec["variance_ratio"] == pytest.approx(pooled.var() / t.var(), rel=1e-4)  # total variance
    raw = suite.evaluate(noisy, ref, None, truth=truth)
    assert raw["evaluation"] == "identity" and raw["swd_normalization"] == "reference"
    assert raw["mean_error"] > 0.01 and "obs_misfit" not in raw


def test_nonfinite_samples_give_count_and_nan_record(key):
    ref = _binary(key, 12)
    bad = ref.at[2, 0, 3, 3].set(jnp.nan)
    # binarizing alone would hide the NaN
    rec = suite.evaluate(bad, ref, task=TASK, truth=ref[0], y_obs=TASK.forward(ref[0]))
    assert rec["num_nonfinite"] == 1 and rec["num_invalid"] == 1  # the default domain: finite values
    counts = ("num_samples", "num_nonfinite", "num_invalid", "spectral_dc_excluded")
    for k, v in rec.items():
        if k not in counts and not isinstance(v, str):
            assert np.all(np.isnan(v)), k
    # inside a vmapped sweep: one NaN case does not contaminate the others
    cases = jnp.stack([ref, bad])
    out = jax.jit(jax.vmap(lambda s, r: suite.compute(s, r, None, r[0], field_stats=(7.5, 4.5))))(
        cases, cases
    )
    assert out["num_nonfinite"].tolist() == [0, 1]
    assert np.isfinite(out["mmd"][0]) and np.isnan(out["mmd"][1]) and np.isnan(out["crps"][1])


def test_point_estimate_and_bad_inputs(key):
    ref = _binary(key, 8)
    w = jnp.full(8, 1 / 8)
    rec = suite.evaluate(ref[:1], ref, w, truth=ref[1])
    assert np.isnan(rec["std_error"]) and np.isnan(rec["crps_fair"])  # N = 1: NaN with the reason
    assert "std_error: needs N >= 2" in rec["undefined"]
    assert rec["crps"] == pytest.approx(float(jnp.mean(jnp.abs(ref[0] - ref[1]))), rel=1e-5)  # CRPS = MAE
    with pytest.raises(ValueError, match="ref_samples.*members of shape"):
        suite.evaluate(ref, ref[:, :, :8])
    with pytest.raises(ValueError, match="ref_weights.*sum"):
        suite.evaluate(ref, ref, w * 2)
    with pytest.raises(ValueError, match="ref_weights.*>= 0"):
        suite.evaluate(ref, ref, w.at[0].set(-0.1).at[1].set(0.35))
    with pytest.raises(ValueError, match="truth: expected shape"):
        suite.evaluate(ref, ref, truth=ref[0, 0])
    with pytest.raises(ValueError, match="ref_samples: expected finite"):
        suite.evaluate(ref, ref.at[0, 0, 0, 0].set(jnp.inf))


def test_spectral_dc_auto_on_zero_mean_fields(key):
    x = 100.0 * jnp.asarray(_rng(key).normal(size=(8, 1, 16, 16)))
    x = x - x.mean(axis=(-2, -1), keepdims=True)
    rec = suite.evaluate(x + 1e-3, x, field_stats=(0.0, 100.0))
    assert rec["spectral_dc_excluded"] == 1 and rec["swd_normalization"] == "given"
    assert rec["spectral_error_published"] > 1.1 * rec["spectral_error"]


def test_observation_misfit_and_pde_residual(key):
    x = jnp.asarray(_rng(key).normal(size=(200, 1, 4, 4)))
    truth = x[0]
    sigma = 0.2
    y = truth.ravel() + sigma * jnp.asarray(_rng(jr.fold_in(key, 1)).normal(size=(16,)))
    misfit = D.observation_misfit(lambda s: s.ravel(), truth[None] + 0 * x[:1], y, sigma)
    assert misfit.shape == (1,) and float(misfit[0]) == pytest.approx(1.0, abs=0.8)
    far = D.observation_misfit(lambda s: s.ravel(), x[1:3], y, sigma)
    assert np.all(np.asarray(far) > 10)

    def residual(a, u):  # -(a u')' = 1 on a 1-D periodic grid, manufactured: u = cos, a = 1, f = cos
        return -(jnp.roll(u, -1) - 2 * u + jnp.roll(u, 1)) / h**2 - a * jnp.cos(s)

    n = 64
    h = 2 * np.pi / n
    s = jnp.arange(n) * h
    exact, wrong = D.pde_residual(residual, 1.0, jnp.cos(s)), D.pde_residual(residual, 1.0, jnp.sin(s))
    assert float(exact) < 1e-3 < float(wrong)


@pytest.mark.parametrize("basis", ["dct", "dst"])
def test_grf_alpha_recovery(key, basis):
    h = 32
    noise = jnp.asarray(_rng(key).normal(size=(2, 4, h, h)))

    def grf(xi, alpha):
        if basis == "dct":
            ky, kx = jnp.arange(h)[:, None], jnp.arange(h)[None, :]
        else:
            ky, kx = jnp.arange(1, h + 1)[:, None], jnp.arange(1, h + 1)[None, :]
        coef = 3.0 ** (alpha - 1) * (jnp.pi**2 * (kx**2 + ky**2) + 9.0) ** (-alpha / 2)
        c = h * coef * xi
        if basis == "dct":
            return jax.scipy.fft.idctn(c.at[0, 0].set(0.0), type=2, norm="ortho")
        from posteriorjax import grids

        return grids.dst1(c)

    est = jax.jit(jax.vmap(jax.vmap(lambda f: D.estimate_grf_alpha(f, tau=3.0, basis=basis))))
    fields = jnp.stack(
        [jax.vmap(lambda xi: grf(xi, 2.0))(noise[0]), jax.vmap(lambda xi: grf(xi, 3.0))(noise[1])]
    )
    alphas = np.asarray(est(fields))
    np.testing.assert_allclose(alphas[0], 2.0, atol=0.15)  # ~1000 modes: std ~0.05
    np.testing.assert_allclose(alphas[1], 3.0, atol=0.15)
    fixed = D.estimate_grf_alpha(fields[0, 0], tau=3.0, basis=basis, fit_scale=False)
    assert float(fixed) == pytest.approx(2.0, abs=0.1)
