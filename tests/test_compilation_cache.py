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
        def plain(x):
            return jnp.sin(x) @ x
        def checked(x):
            return eqx.error_if(x, jnp.any(x < 0), "x: negative") @ x
        jax.jit(plain)(jnp.ones((8, 8)))
        jax.jit(checked)(jnp.ones((8, 8)))
        print(json.dumps({}))
        """,
        tmp_path,
    )
    assert _entries(tmp_path, "jit_plain")
    # the documented limit: a traced eqx.error_if is a jax.pure_callback, which JAX never caches
    assert not _entries(tmp_path, "jit_checked")


def test_cache_can_be_switched_off(monkeypatch):
    from posteriorjax import parallel

    monkeypatch.setenv(parallel.CACHE_VARIABLE, "off")
    assert parallel.enable_compilation_cache() is None


@pytest.mark.slow
def test_sweep_program_is_written_to_the_cache(tmp_path):
    """The per-configuration sweep program (DPS, oracle prior, + metric suite) at 16^2."""
    found = _run(
        """
        from bench import sweep as bs
        task, sampler, cases, reference, grid = bs._setup(16, "dps_oracle")
        one, args, _ = bs._loop(task, sampler, cases, reference, grid, 0)
        lowered = one.lower(*args(0))
        lowered.compile()
        print(json.dumps({"callbacks": lowered.as_text().count("python_cpu_callback")}))
        """,
        tmp_path,
    )
    if found["callbacks"]:
        pytest.skip(
            f"the sweep program holds {found['callbacks']} host callbacks (traced eqx.error_if checks); "
            "JAX does not write such programs to the persistent cache (parallel.enable_compilation_cache)"
        )
    assert _entries(tmp_path, "jit_one")
