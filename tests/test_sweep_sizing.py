"""The dry run's sizing (`sweep.sizing`): counts, network sizes, FLOPs, memory, hours, pilot fill."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import ml_collections
import numpy as np
import pytest

from posteriorjax import nn, sweep, tasks
from posteriorjax.nn import published
from posteriorjax.nn.pdeobs import parameter_count
from posteriorjax.reference import rejection
from posteriorjax.sweep import plan as plan_module
from posteriorjax.sweep import sizing, statistics
from posteriorjax.sweep.settings import settings


def _config(**fields):
    c = ml_collections.ConfigDict()
    c.seed, c.seeds, c.num_cases, c.num_samples = 0, (0, 1), 3, 4
    c.chunk_size, c.batch_size, c.overwrite = 4, 2, False
    c.tasks = {"poisson_fixed": {"resolution": 16}}
    c.reference = sweep.reference_config("exact", num_samples=8)
    c.references = {}
    c.samplers = {
        "prior": {},
        "esmda": {
            "axes": {"noise_inflation": (1.0, 4.0)},
            "options": {"alphas": (2.0, 2.0), "ensemble_size": 8},
        },
    }
    for k, v in fields.items():
        setattr(c, k, v)
    return c


def test_counts_are_cases_times_grid_times_seeds():
    c = sizing.counts(settings(_config()))
    # prior: 3 cases x 1 x 2 seeds; esmda: 3 cases x 2 inflations x 2 seeds
    assert c["pairs"] == {"poisson_fixed/prior": 6, "poisson_fixed/esmda": 12}
    assert (c["programs"], c["configurations"], c["calibration_configurations"]) == (2, 18, 0)
    cal = {"hparam": "noise_inflation", "grid": (1.0, 2.0, 3.0), "num_cases": 5}
    samplers = {
        "prior": {},
        "esmda": {"calibrate": cal, "options": {"alphas": (2.0, 2.0), "ensemble_size": 8}},
    }
    c = sizing.counts(settings(_config(samplers=samplers)))
    assert c["calibration_configurations"] == 5 * 3 * 2  # validation cases x grid x seeds


def test_jaxpr_flops_count_products_and_multiply_loops_by_their_trip_counts():
    a = jax.ShapeDtypeStruct((8, 16), jnp.float32)
    b = jax.ShapeDtypeStruct((16, 4), jnp.float32)
    flops, unknown = sizing.jaxpr_flops(jax.make_jaxpr(jnp.matmul)(a, b))
    assert (flops, unknown) == (2 * 8 * 16 * 4, 0)
    # XLA agrees on a loop-free product
    xla = jax.jit(jnp.matmul).lower(a, b).compile().cost_analysis()
    assert float(xla["flops"]) == flops
    sq = jax.ShapeDtypeStruct((8, 8), jnp.float32)
    loop = jax.make_jaxpr(lambda x: jax.lax.fori_loop(0, 10, lambda i, y: y @ y, x))(sq)
    # 10 x (the product + the loop counter's add); XLA's cost analysis counts one step
    assert sizing.jaxpr_flops(loop) == (10 * (2 * 8**3 + 1), 0)
    n = jnp.int32(3)
    dynamic = jax.make_jaxpr(lambda x, n: jax.lax.fori_loop(0, n, lambda i, y: y @ y, x))(sq, n)
    flops, unknown = sizing.jaxpr_flops(dynamic)
    assert unknown == 1 and flops >= 2 * 8**3  # a run-time trip count: the body once, reported
    branches = jax.make_jaxpr(lambda p, x: jax.lax.cond(p, lambda y: y @ y, lambda y: y + 1, x))(True, sq)
    assert sizing.jaxpr_flops(branches)[0] == 2 * 8**3 + 1  # the costliest branch (+ the index cast)


def test_abstract_data_matches_the_program_data():
    task = tasks.get("poisson_fixed", resolution=16)
    cases = task.cases(0, 2)
    ref = (np.zeros((2, 5, *task.unknown_shape), np.float32), np.full((2, 5), 0.2, np.float32))
    data = statistics.program_data(task, cases, ref, seed=0)
    want = {k: (v.shape, v.dtype) for k, v in data.items()}
    got = {k: (v.shape, v.dtype) for k, v in sizing.abstract_data(task, 2, 5, 0).items()}
    assert got == want


def test_full_scale_prior_network_has_the_published_size():
    """The FunDPS joint prior of the full main table, built abstractly, is the published ddpmpp-uno
    (54.1 M): the same count as `nn.published`'s backbone with the joint's channels."""
    from configs import main_table

    s = settings(main_table.get_config(""))
    entry = next(e for e in s.samplers if e.label == "fundps")
    spec = entry.networks["model"]
    model = sizing.abstract_network("darcy", s.tasks["darcy"], spec, "full")
    name, options = published.get("fundps_prior")
    backbone = eqx.filter_eval_shape(
        lambda: nn.get(name, jr.key(0), in_channels=2, out_channels=2, **options)
    )
    assert parameter_count(model) == parameter_count(backbone)
    assert 54.0e6 < parameter_count(model) < 54.2e6


def test_program_cost_compiles_on_abstract_inputs():
    """Memory and FLOPs of a pair from a compile on abstract inputs (no reference, no sample)."""
    s = settings(_config())
    plan = plan_module.Plan.build(s)
    entry = next(e for e in s.samplers if e.label == "esmda")
    cost = sizing.program_cost(plan, "poisson_fixed", entry, {}, compile=True)
    assert cost["memory_bytes"] > 0 and cost["flops_per_sample"] > 0 and cost["xla_flops_per_sample"] > 0
    assert cost["flops_per_configuration"] == pytest.approx(cost["flops_per_sample"] * s.num_samples)
    assert cost["chunk"] == 4 and cost["reference_size"] == 8


def test_throughputs_read_the_matmul_roofline_of_the_newest_file(tmp_path):
    record = {"name": "roofline matmul 1024", "unit": "GFLOP/s", "ours": 100.0}
    (tmp_path / "cpu_2026-01-01.json").write_text(f"[{__import__('json').dumps(record)}]")
    (tmp_path / "cpu_2026-02-01.json").write_text(f"[{__import__('json').dumps({**record, 'ours': 200.0})}]")
    (tmp_path / "gpu_h200_2026-01-01.json").write_text(
        f"[{__import__('json').dumps({**record, 'name': 'roofline matmul 4096', 'ours': 4e4})}]"
    )
    rates = sizing.throughputs(tmp_path)
    assert rates["cpu"] == {"flops_per_s": 200e9, "source": "results/benchmarks/cpu_2026-02-01.json"}
    assert rates["gpu_h200"]["flops_per_s"] == 4e13
    assert sizing.hours(3600 * 200e9, rates)["cpu"] == pytest.approx(1.0)
    assert set(sizing.throughputs()) >= {"cpu", "gpu_h200"}  # the committed benchmarks


def _eps_section(eps, **kw):
    section = dict(
        sweep.reference_config("rejection", num_samples=100, pool_size=10_000, pool_chunk=1000, eps=eps)
    )
    return {**section, **kw}


def test_pilot_fill_predicts_the_extremes_and_the_acceptance_rate():
    task = tasks.get("poisson", resolution=16)
    y = np.asarray(task.cases(0, 2).y_obs)
    key = jr.key(3)
    wide = sizing.pilot_fill(task, _eps_section(1e6), y, key, 64)  # every candidate is under eps
    assert wide["fills"] and wide["verdict"] == "fills"
    assert [c["pilot_rate"] for c in wide["cases"]] == [1.0, 1.0] and wide["worst_expected"] == 10_000
    narrow = sizing.pilot_fill(task, _eps_section(1e-12), y, key, 64)  # none is
    assert not narrow["fills"] and narrow["verdict"].startswith("will not fill (expected ")
    assert "by a tail fit below 469" in narrow["verdict"]  # the rule-of-three bound 3 x 10,000 / 64
    assert narrow["cases"][0]["expected_below"] == pytest.approx(3 * 10_000 / 64)
    assert narrow["cases"][0]["expected_from"] == "tail fit" and narrow["worst_expected"] < 1e-3
    # in between: the rate is the pilot's fraction of MAE <= eps, expected = rate x pool size
    from posteriorjax.reference import pool

    y_pool = np.concatenate([np.asarray(pool.draw_candidates(task, jr.fold_in(key, 0), jnp.arange(64))[2])])
    mae = rejection.mean_absolute_error(y_pool[:, None, :], y)
    sorted_mae = np.sort(mae[:, 0])
    eps = float(0.5 * (sorted_mae[31] + sorted_mae[32]))  # halfway between two candidates: 32 pass
    mid = sizing.pilot_fill(task, _eps_section(eps, num_samples=9000), y, key, 64)
    assert mid["cases"][0]["pilot_rate"] == 0.5
    assert mid["cases"][0]["expected"] == pytest.approx(5000)
    worst = mid["worst_case"]
    short = sum(c["expected"] < 9000 for c in mid["cases"])
    k = mid["worst_expected"]
    assert short >= 1
    assert (
        mid["verdict"] == f"will not fill (expected {k:.3g} of 9000; case {worst}; {short} of 2 cases short)"
    )
    assert mid["worst_expected"] <= 5000
    # the eps a pool of 10,000 needs for K = 9000 is the 0.9 quantile of the pilot MAEs
    assert mid["cases"][0]["eps_needed"] == pytest.approx(np.quantile(mae[:, 0], 0.9))


def test_tail_fit_recovers_a_power_law_cdf():
    """MAEs with F(m) = (m / 2)^3 on [0, 2]: the fit's exponent is 3 and it extrapolates F far
    below the fitted tail."""
    u = np.random.default_rng(0).uniform(size=200_000)
    a, b = sizing.tail_fit(2.0 * u ** (1 / 3))
    assert b == pytest.approx(3.0, rel=0.1)
    # 2.7 decades below the fitted tail: an order-of-magnitude estimate (within a factor 3)
    assert abs(a + b * np.log(1e-3) - 3 * np.log(1e-3 / 2)) < np.log(3)


def test_dry_run_keeps_its_keys_and_adds_the_sizing():
    out = sweep.dry_run(_config(), sizing=True, compile=False, pilot_draws=16)
    assert {"tasks", "num_cases", "num_samples", "training_scale", "sizing"} <= set(out)
    sz = out["sizing"]
    assert sz["counts"]["configurations"] == 18 and sz["networks"] == {}
    assert all(p["flops_per_sample"] > 0 and "memory_bytes" not in p for p in sz["programs"].values())
    assert set(sz["hours"]) == set(sz["throughputs"])
    assert out["tasks"]["poisson_fixed"]["fill"].startswith("not an eps rule (exact)")


def test_dry_run_without_a_pilot_pool_says_so():
    """--dry_run_pilot=0 skips the fill estimate of an eps-rule reference instead of failing."""
    eps = sweep.reference_config("published_eps", num_samples=8, pool_size=64, pool_chunk=32)
    out = sweep.dry_run(_config(tasks={"darcy": {"resolution": 16}}, reference=eps), sizing=True,
                        compile=False, pilot_draws=0)  # fmt: skip
    assert out["tasks"]["darcy"]["fill"].startswith("not estimated (no pilot pool")


def test_sweep_dry_run_flag_prints_the_sizing():
    """The entry point in its own process (absl flags are process-global)."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    flags = ["--dry_run", "--dry_run_compile=false", "--dry_run_pilot=16"]
    out = subprocess.run(
        [sys.executable, "-m", "experiments.sweep", f"--config={root / 'configs' / 'sweep_tiny.py'}", *flags],
        capture_output=True, text=True, cwd=root, timeout=600, check=True,
    )  # fmt: skip
    plan = json.loads(out.stdout)
    assert plan["sizing"]["counts"]["programs"] == 4 and plan["sizing"]["counts"]["configurations"] == 20
    assert "[reference] poisson_fixed: exact: not an eps rule" in out.stderr
