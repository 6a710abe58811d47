"""The persistent compilation cache: what `parallel.enable_compilation_cache` writes, and its limit."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(script: str, cache: Path) -> dict:
    """Run `script` in a fresh process (the cache is configured before anything compiles)."""
    prelude = f"""
        import json, sys
        sys.path[:0] = [{str(ROOT)!r}, {str(ROOT / "scripts")!r}]
        from posteriorjax import parallel
        parallel.enable_compilation_cache({str(cache)!r}, min_compile_time_s=0.0)
        import jax, jax.numpy as jnp
        import equinox as eqx
    """
    code = textwrap.dedent(prelude) + textwrap.dedent(script)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _entries(cache: Path, prefix: str) -> list[str]:
    return [p.name for p in cache.iterdir() if p.name.startswith(prefix + "-")]


def test_cache_writes_programs_but_not_those_with_host_callbacks(tmp_path):
    _run(
        """
        from posteriorjax import checks, deferred
        def plain(x):
            return jnp.sin(x) @ x
        def checked(x):
            return eqx.error_if(x, jnp.any(x < 0), "x: negative") @ x
        def ours(x):
            return checks.error_if(x, jnp.any(x < 0), "x: negative") @ x
        jax.jit(plain)(jnp.ones((8, 8)))
        jax.jit(checked)(jnp.ones((8, 8)))
        jax.jit(ours)(jnp.ones((8, 8)))
        failure, _ = jax.jit(deferred.functionalize(ours))(jnp.ones((8, 8)))
        deferred.raise_failure(failure)
        print(json.dumps({}))
        """,
        tmp_path,
    )
    assert _entries(tmp_path, "jit_plain")
    # JAX's limit: a traced eqx.error_if is a jax.pure_callback, and no program holding one is written
    assert not _entries(tmp_path, "jit_checked")
    # checks.error_if is that callback unless the program is functionalized: then the check is an output
    assert len(_entries(tmp_path, "jit_ours")) == 1


SWEEP = """
    import jax.random as jr
    from posteriorjax import samplers, sweep, tasks
    from posteriorjax.sweep.program import expand
    task = tasks.get({task!r}, resolution={n}, num_sensors=8)
    sampler = samplers.get({sampler!r}, task, **{options!r})
    cases = task.cases(0, 2)
    ref = jnp.stack([jax.vmap(task.prior.sample)(jr.split(jr.key(i), 4)) for i in range(2)])
    grid = expand(2, {axes!r}, [0], sampler.defaults)
    records = sweep.run_pair(
        task, sampler, cases, (ref, jnp.full((2, 4), 0.25)), grid, num_samples=4, seed=0, chunk_size=2,
        batch_size=2,
    )
    print(json.dumps({{"configurations": len(records)}}))
"""


def test_sweep_program_is_written_to_the_cache(tmp_path):
    """The per-configuration sweep program (`sweep.run_pair`: DPS with the oracle prior over a guidance
    axis, the metric suite, calibration statistics; hyperparameter and reference-weight checks in it)
    at 8^2: written, so a rerun in a fresh process does not compile it."""
    sweep = SWEEP.format(
        task="poisson_fixed", n=8, sampler="dps", options={"prior": "oracle", "num_steps": 2},
        axes={"guidance": [10.0, 100.0]},
    )  # fmt: skip
    assert _run(sweep, tmp_path)["configurations"] == 4
    assert len(_entries(tmp_path, "jit_sweep_chunk")) == 1


def test_cache_can_be_switched_off(monkeypatch):
    from posteriorjax import parallel

    monkeypatch.setenv(parallel.CACHE_VARIABLE, "off")
    assert parallel.enable_compilation_cache() is None


@pytest.mark.slow
def test_darcy_sweep_program_is_written_to_the_cache(tmp_path):
    """ES-MDA on Darcy at 16^2: the solver's coefficient checks inside the sampler and the scoring."""
    sweep = SWEEP.format(task="darcy", n=16, sampler="esmda", options={}, axes={})
    assert _run(sweep, tmp_path)["configurations"] == 2
    assert len(_entries(tmp_path, "jit_sweep_chunk")) == 1
