"""The ``precision`` option of the published FunDPS, Fun-DDPS and DDIS samplers and the sweep's x64 scope.

The float64 updates themselves are pinned against float64 NumPy transcriptions of the published
loops in `test_guided.py` (to 1e-12); here: validation, defaults, the dtypes a sampler integrates
in, and a sweep pair that asks for float64 running in JAX's x64 mode (and only it).
"""

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from posteriorjax import samplers, sweep, tasks
from posteriorjax.samplers import precision
from posteriorjax.sweep.program import expand, sample_program

OPTIONS = {  # tiny published runs with the exact prior and forward map
    "fundps": {"num_steps": 3},
    "funddps": {"num_steps": 3, "forward": "exact"},
    "ddis": {"num_steps": 3, "ode_steps": 2, "langevin_steps": 2, "forward": "exact"},
}


@pytest.fixture(scope="module")
def task():
    return tasks.get("poisson_fixed", resolution=8, num_sensors=6, noise_std=1e-2)


def build(task, name, **options):
    return samplers.get(name, task, prior="oracle", profile="published", **OPTIONS[name], **options)


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_a_bad_precision_is_an_error_naming_the_option(task, name):
    with pytest.raises(ValueError, match="precision"):
        build(task, name, precision="float16")


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_defaults_are_the_published_table_and_float32_for_ours(task, name):
    assert build(task, name).precision == precision.PUBLISHED[name]
    ours = samplers.get(name, task, prior="oracle", **{k: v for k, v in OPTIONS[name].items()})
    assert ours.precision == "float32"
    assert samplers.get("diffusionpde", task, prior="oracle", profile="published").precision == "float32"


def test_float64_outside_x64_mode_is_an_error_naming_the_option(task):
    s = build(task, "fundps", precision="float64")
    y = task.cases(0, 1).y_obs[0]
    with jax.enable_x64(False), pytest.raises(ValueError, match="precision: 'float64'.*x64"):
        s.sample(jr.key(0), y, 1, s.hparams())


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_float64_integrates_in_float64_and_float32_in_float32(task, name):
    """Same keys and float32 noise draws: the two precisions differ at float32 round-off, not more."""
    y = task.cases(0, 1).y_obs[0]
    out = {}
    for p in precision.PRECISIONS:
        s = build(task, name, precision=p)
        with precision.scope(s):
            out[p] = s.sample(jr.key(1), y, 2, s.hparams())
    assert out["float32"].dtype == jnp.float32 and out["float64"].dtype == jnp.float64
    a, b = (np.asarray(out[p], np.float64) for p in precision.PRECISIONS)
    rel = np.abs(a - b).max() / np.abs(b).max()
    assert 1e-9 < rel < 1e-3, rel


def test_the_scope_enters_x64_for_a_float64_sampler_only(task):
    assert not jax.config.jax_enable_x64
    for p, x64 in (("float32", False), ("float64", True)):
        with precision.scope(build(task, "ddis", precision=p)):
            assert jax.config.jax_enable_x64 == x64
    assert not jax.config.jax_enable_x64


def test_a_float64_sweep_pair_runs_in_x64_and_writes_float_records(task):
    """`run_pair` of a float64 sampler outside x64 mode would fail (`state_dtype`); it runs, its
    metrics are finite floats that differ from the float32 pair's at float32 round-off."""
    cases = task.cases(0, 2)
    ref = jnp.stack([task.prior.sample(jr.key(i)) for i in range(8)])[None].repeat(2, axis=0)
    reference = (ref, jnp.full((2, 8), 1 / 8))
    metrics = {}
    for p in precision.PRECISIONS:
        s = build(task, "fundps", precision=p)
        grid = expand(2, {}, [3], s.defaults)
        records = sweep.run_pair(
            task, s, cases, reference, grid, num_samples=4, seed=0, chunk_size=2, batch_size=2,
            labels={"sampler": f"fundps_{p}"},
        )  # fmt: skip
        assert not jax.config.jax_enable_x64  # the scope ends with the pair
        metrics[p] = [r.metrics for r in sorted(records, key=lambda r: r.case)]
        with precision.scope(s):  # the samples the pair scored, by the same program's keys
            one = jax.vmap(sample_program(s, 4, seed=0), in_axes=(None, 0))
            xs = jax.jit(one)({"y_obs": cases.y_obs}, grid.take(np.arange(grid.size)))
        assert xs.dtype == {"float32": jnp.float32, "float64": jnp.float64}[p]
    for m32, m64 in zip(metrics["float32"], metrics["float64"], strict=True):
        for name in ("mean_error", "std_error", "mmd"):
            assert isinstance(m64[name], float) and np.isfinite(m64[name])
            assert m64[name] == pytest.approx(m32[name], rel=1e-3)
    assert any(m32 != m64 for m32, m64 in zip(metrics["float32"], metrics["float64"], strict=True))
