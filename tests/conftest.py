"""Test configuration: the one place that sets JAX options for the suite.

The suite runs in float32 (the library default); tests that check numerics to
tight tolerances request the `x64` fixture, which enables float64 locally.

Test programs are small, so compilation dominates the suite's time: XLA's CPU
backend runs at optimization level 0 here (about 2x faster compiles; the
generated code is less optimized, the computation is the same). Benchmarks
never use this setting.
"""

import os
import zlib

os.environ.setdefault("JAX_PLATFORMS", "cpu")
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0"
    ).strip()

import jax  # noqa: E402
import jax.random as jr  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture
def key(request):
    """A fresh PRNG key, different per test and reproducible across runs."""
    return jr.key(zlib.crc32(request.node.nodeid.encode()))


@pytest.fixture
def x64():
    """Run the test body with float64 enabled."""
    with jax.enable_x64(True):
        yield
