"""Test configuration: the one place that sets JAX options for the suite.

The suite runs in float32 (the library default); tests that check numerics to
tight tolerances request the `x64` fixture, which enables float64 locally.
"""

import os
import zlib

os.environ.setdefault("JAX_PLATFORMS", "cpu")

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
