"""The reference study's estimators: MAE tail extrapolation and one-pass prefix importance moments."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from posteriorjax import tasks
from posteriorjax.reference import pool, rejection

_SPEC = importlib.util.spec_from_file_location(
    "reference_study", Path(__file__).resolve().parents[1] / "scripts" / "reference_study.py"
)
study = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(study)


def test_tail_extrapolation_recovers_a_power_law():
    n, d, e0 = 200_000, 4.0, 1e-2  # P(MAE <= e) = (e / e0)^d
    mae = e0 * ((np.arange(n) + 1.0) / n) ** (1 / d)  # k-th smallest at F = k / n
    out = study.tail_extrapolation(mae, 1e-4)
    assert out["tail_exponent"] == pytest.approx(d, rel=1e-6)
    assert out["rate_at_eps"] == pytest.approx((1e-4 / e0) ** d, rel=1e-4)
    acc = study.acceptance(mae, 1e-3)
    assert acc["accepted"] == int(np.sum(mae <= 1e-3)) and acc["pool_size"] == n
    assert acc["pool_for_K"] == pytest.approx(study.K * n / acc["accepted"])


def test_prefix_moments_match_direct_weights(tmp_path):
    task = tasks.get("poisson_fixed", resolution=8, num_sensors=5)
    p = pool.build(task, tmp_path, seed=3, num_chunks=4, chunk_size=6, augment=True, progress=False)
    y = np.asarray(task.cases(0, 1).y_obs[0])
    x = p.load("x").reshape(p.size, -1).astype(np.float64)
    sizes = [p.per_chunk, 4 * p.per_chunk]
    for s in (1e-3, 3e-2):
        rows = study._prefix_moments(p, [y], [s], sizes)[(0, s)]
        assert [r[0] for r in rows] == sizes
        for size, mean, std, ess in rows:
            lw = rejection.gaussian_log_weights(p.load("y")[:size], y, s)
            w, want_ess = rejection.normalize_log_weights(lw)
            want = w @ x[:size]
            np.testing.assert_allclose(mean, want, rtol=1e-6, atol=1e-12)
            np.testing.assert_allclose(std, np.sqrt(np.maximum(w @ x[:size] ** 2 - want**2, 0)), atol=1e-9)
            assert ess == pytest.approx(want_ess, rel=1e-9)


def test_command_line_defaults_per_command_and_clear_errors():
    from absl import app, flags

    fv = flags.FlagValues()
    study.define_flags(fv)

    def parse(*argv):
        fv.unparse_flags()
        return study.command_args(fv(["reference_study.py", *argv]), fv)

    args = parse("pcn", "--steps=100,400", "--noise_std=2e-3")
    assert (args.command, args.steps, args.noise_std, args.case_seed, args.method) == (
        "pcn",
        [100, 400],
        2e-3,
        0,
        "pcn",
    )
    args = parse("darcy", "--workdir=W", "--k=100,300")
    assert (args.k, args.cases, args.pcn_steps, args.case_seed) == ([100, 300], 2, 2000, 1234)
    assert parse("ltmi", "--workdir=W").pcn_steps == 200 and parse("poisson", "--workdir=W").cases == 3
    assert parse("info", "--noise=1e-4,1e-2").noise == [1e-4, 1e-2]
    for argv, match in (
        (("darcy",), "--workdir is required"),
        (("info", "--pcn_steps=3"), r"takes no flag\(s\) \['--pcn_steps'\]"),
        (("pcn", "--method=nuts"), "--method: expected one of"),
        (("pcn", "--steps=1e3"), "--steps: expected comma-separated int"),
        ((), "expected one command of"),
    ):
        with pytest.raises(app.UsageError, match=match):
            parse(*argv)
