"""Dense DCT-II / DST-I matrix transforms against the FFT-based ones (and SciPy)."""

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest
import scipy.fft

from posteriorjax import grids, random_fields


def test_transform_matrices_match_scipy():
    x = np.random.default_rng(0).normal(size=(9, 9))
    np.testing.assert_allclose(grids.cosine_matrix(9) @ x, scipy.fft.dct(x, type=2, norm="ortho", axis=0))
    np.testing.assert_allclose(grids.sine_matrix(9) @ x, scipy.fft.dst(x, type=1, norm="ortho", axis=0))


@jax.jit
def _both_paths(fields):
    """Forward and inverse transforms of every field on both methods (one compiled program)."""
    out = {}
    for basis in ("cosine", "sine"):
        for x in fields:
            fwd = {m: random_fields.forward_transform(x, basis, method=m) for m in ("matmul", "fft")}
            inv = {m: random_fields.inverse_transform(fwd["fft"], basis, method=m) for m in ("matmul", "fft")}
            out[basis, x.shape[-1]] = (x, fwd, inv)
    return out


def test_matmul_transforms_equal_fft_transforms(key):
    fields = [jr.normal(jr.fold_in(key, n), (2, 1, n, n)) for n in (16, 17)]
    for x, fwd, inv in _both_paths(fields).values():
        np.testing.assert_allclose(fwd["matmul"], fwd["fft"], atol=2e-6)
        np.testing.assert_allclose(inv["matmul"], inv["fft"], atol=2e-6)
        np.testing.assert_allclose(inv["matmul"], x, atol=2e-6)


def test_grf_sample_is_the_same_on_both_paths(key):
    grf = random_fields.GaussianRandomField(24, 2.0, 3.0, "cosine")

    @jax.jit
    def both(k):
        xi = grf.latent(k)
        c = random_fields.forward_transform(xi, "cosine", method="fft") * grf.mode_std()
        return grf.sample(k), random_fields.inverse_transform(c, "cosine", method="fft")

    got, ref = both(key)
    np.testing.assert_allclose(got, ref, atol=1e-5 * float(jnp.max(jnp.abs(ref))))


def test_transform_bad_options(key):
    x = jr.normal(key, (8, 8))
    with pytest.raises(ValueError, match="method"):
        random_fields.forward_transform(x, "cosine", method="dct")
    with pytest.raises(ValueError, match="method"):
        random_fields.forward_transform(x, "fourier", method="matmul")
    with pytest.raises(ValueError, match="square"):
        random_fields.forward_transform(jnp.ones((8, 6)), "sine", method="matmul")
    auto = jax.eval_shape(lambda: random_fields.forward_transform(jnp.ones((8, 6)), "sine"))
    assert auto.shape == (8, 6)  # "auto" falls back to the FFT transform on non-square fields
