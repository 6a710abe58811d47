"""Spectral layers (`SpectralConv`, the UNO's `TuckerSpectralConv`): the truncated-DFT matmul path
against the rfft2/irfft2 path, and the selector."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import jax.test_util
import numpy as np
import pytest

from posteriorjax import nn
from posteriorjax.nn import ddpmpp, layers

# (in grid, out grid, modes): square and odd grids, Nyquist row/column kept, UNO-style resampling
SHAPES = [
    ((16, 16), (16, 16), (8, 9)),
    ((15, 17), (15, 17), (7, 9)),
    ((32, 32), (16, 16), (4, 4)),
    ((8, 8), (16, 16), (4, 5)),
]


def _pair(key, in_size, out_size, modes, cin=3, cout=2):
    k1, k2 = jr.split(key)
    return nn.SpectralConv(cin, cout, modes, key=k1), jr.normal(k2, (cin, *in_size))


def _both_paths(ops, xs, out_sizes):
    """Outputs and gradients of every layer on both paths, in one compiled program."""

    def loss(ox, path):
        ys = [o(x, s, path=path) for o, x, s in zip(*ox, out_sizes, strict=True)]
        return sum(jnp.sum(jnp.sin(y) * y) for y in ys), ys

    grad = eqx.filter_value_and_grad(loss, has_aux=True)
    return eqx.filter_jit(lambda ox: (grad(ox, "fft"), grad(ox, "matmul")))((ops, xs))


def _assert_paths_agree(ops, xs, out_sizes):
    ((_, y_fft), g_fft), ((_, y_mm), g_mm) = _both_paths(ops, xs, out_sizes)
    for a, b, s in zip(y_mm, y_fft, out_sizes, strict=True):
        assert a.shape[-2:] == tuple(s)
        np.testing.assert_allclose(a, b, atol=2e-6 * float(jnp.max(jnp.abs(b))))
    for a, b in zip(jax.tree.leaves(g_mm), jax.tree.leaves(g_fft), strict=True):
        np.testing.assert_allclose(a, b, atol=5e-6 * float(jnp.max(jnp.abs(b))))


def test_matmul_path_equals_fft_path_with_gradients(key):
    pairs = [_pair(jr.fold_in(key, i), *shape) for i, shape in enumerate(SHAPES)]
    ops, xs = zip(*pairs, strict=True)
    _assert_paths_agree(ops, xs, [s[1] for s in SHAPES])


def test_two_product_mixing_equals_fft_path_with_gradients(key, monkeypatch):
    """The mixing form of layers above `BLOCK_MIXING_MAX_WEIGHTS` (full-size FNO and UNO)."""
    assert all(2 * 3 * 2 * m1 * m2 <= layers.BLOCK_MIXING_MAX_WEIGHTS for _, _, (m1, m2) in SHAPES)
    monkeypatch.setattr(layers, "BLOCK_MIXING_MAX_WEIGHTS", 0)
    pairs = [_pair(jr.fold_in(key, i), *shape) for i, shape in enumerate(SHAPES)]
    ops, xs = zip(*pairs, strict=True)
    _assert_paths_agree(ops, xs, [s[1] for s in SHAPES])


def _cpu_matmul_sizes(limit):
    return [
        n
        for n in range(12, limit + 1)
        if layers.spectral_path((n, n), (n, n), (6, 6), 4, 4, "cpu") == "matmul"
    ]


def test_sizes_the_cpu_selector_picks_matmul_for_agree(key):
    """Tiny-config (6 modes) grids where the CPU rule chooses matmul: the first ones, odd and even."""
    chosen = _cpu_matmul_sizes(64)
    assert chosen == list(range(12, 65))  # every grid that resolves 6 modes
    sizes = [12, 13, 32]
    pairs = [_pair(jr.fold_in(key, n), (n, n), (n, n), (6, 6), 4, 4) for n in sizes]
    ops, xs = zip(*pairs, strict=True)
    _assert_paths_agree(ops, xs, [(n, n) for n in sizes])


@pytest.mark.slow
def test_every_size_the_cpu_selector_picks_matmul_for_agrees(key):
    sizes = _cpu_matmul_sizes(160)
    pairs = [_pair(jr.fold_in(key, n), (n, n), (n, n), (6, 6), 4, 4) for n in sizes]
    ops, xs = zip(*pairs, strict=True)
    _assert_paths_agree(ops, xs, [(n, n) for n in sizes])


def test_shapes_near_the_cpu_threshold_agree(key):
    """The CPU rule's costliest matmul shapes: modes n/2 on small grids, resampling to twice the grid."""
    shapes = [((16, 16), (16, 16), (8, 8)), ((32, 32), (32, 32), (16, 16)), ((32, 32), (64, 64), (16, 16))]
    for in_size, out_size, modes in shapes:
        mm, fft = layers.spectral_cost(in_size, out_size, modes, 4, 4)
        assert 5 * fft < mm <= layers.MATMUL_COST_RATIO["cpu"] * fft
        assert layers.spectral_path(in_size, out_size, modes, 4, 4, "cpu") == "matmul"
    pairs = [_pair(jr.fold_in(key, i), *shape, cin=4, cout=4) for i, shape in enumerate(shapes)]
    ops, xs = zip(*pairs, strict=True)
    _assert_paths_agree(ops, xs, [s[1] for s in shapes])


def test_selector_keeps_the_fft_where_modes_approach_half_the_grid():
    path = layers.spectral_path
    assert path((64, 64), (64, 64), (6, 6), 16, 16, "cpu") == "matmul"
    assert path((64, 64), (64, 64), (32, 32), 16, 16, "cpu") == "fft"  # cost ratio 16: 0.94x
    assert path((64, 64), (64, 64), (32, 32), 64, 64, "cpu") == "fft"
    # a CPU takes matmuls up to cost ratio 10: the full-size FNO layer (8.4, 2.3x), 32^2 with
    # 16 modes (9.6, 1.3x)
    assert path((144, 144), (144, 144), (32, 32), 64, 64, "cpu") == "matmul"
    assert path((32, 32), (32, 32), (16, 16), 64, 64, "cpu") == "matmul"
    # on a GPU, two shapes of the H200 run: a UNO level where matmuls won (2.3x) and the
    # full-size FNO layer where the FFT did (matmuls 0.94x)
    assert path((64, 64), (128, 128), (16, 16), 256, 64, "gpu") == "matmul"
    assert path((144, 144), (144, 144), (32, 32), 64, 64, "gpu") == "fft"


def test_spectral_conv_rejects_an_unknown_path(key):
    op, x = _pair(key, (16, 16), (16, 16), (4, 4))
    with pytest.raises(ValueError, match="path"):
        op(x, path="dft")


def test_dft_matrices_reproduce_numpy_rfft2(key):
    """fw/fh give the kept rfft2 coefficients; eh/pw invert a Hermitian half spectrum like irfft2."""
    h, w, m1, m2 = 12, 10, 3, 6
    fw, fh, eh, pw = layers.dft_matrices((h, w), (h, w), layers.spectral_rows(m1), m2)
    x = np.asarray(jr.normal(key, (h, w)), np.float64)
    g = fh @ (x @ fw)
    f = (g[: 2 * m1, :m2] - g[2 * m1 :, m2:]) + 1j * (g[: 2 * m1, m2:] + g[2 * m1 :, :m2])
    ref = np.fft.rfft2(x)
    rows = np.r_[0:m1, h - m1 : h]
    np.testing.assert_allclose(f, ref[rows, :m2], atol=1e-12)
    z = np.concatenate([np.concatenate([f.real, f.imag], 1), np.concatenate([f.imag, -f.real], 1)], 0)
    spec = np.zeros((h, w // 2 + 1), complex)
    spec[rows, :m2] = f
    np.testing.assert_allclose(eh @ z @ pw * (h * w), np.fft.irfft2(spec, s=(h, w)) * (h * w), atol=1e-10)


# (in grid, out grid, n_modes, rank): n1 rows k_y = -n1/2 ... n1/2 - 1 and n2 // 2 + 1 columns; even
# and odd row counts, every row and the Nyquist column kept, UNO-style down- and up-sampling; dense
# (rank 1) and Tucker-factored weights
TUCKER_SHAPES = [
    ((16, 16), (16, 16), (8, 8), 1.0),
    ((15, 17), (15, 17), (7, 9), 0.5),
    ((16, 16), (16, 16), (16, 16), 0.5),
    ((32, 32), (16, 16), (8, 8), 0.3),
    ((16, 16), (8, 8), (7, 8), 1.0),
    ((8, 8), (16, 16), (8, 8), 1.0),
    ((9, 9), (18, 18), (5, 9), 0.5),
]


def _tucker(key, in_size, out_size, n_modes, rank, cin=3, cout=2):
    k1, k2 = jr.split(key)
    return ddpmpp.TuckerSpectralConv(cin, cout, n_modes, rank, key=k1), jr.normal(k2, (cin, *in_size))


def test_tucker_matmul_path_equals_fft_path_with_gradients(key):
    pairs = [_tucker(jr.fold_in(key, i), *shape) for i, shape in enumerate(TUCKER_SHAPES)]
    assert [bool(op.factors) for op, _ in pairs] == [rank < 1 for *_, rank in TUCKER_SHAPES]
    ops, xs = zip(*pairs, strict=True)
    _assert_paths_agree(ops, xs, [s[1] for s in TUCKER_SHAPES])


def test_tucker_two_product_mixing_equals_fft_path(key, monkeypatch):
    """The mixing form of the full-size published UNO's layers (above `BLOCK_MIXING_MAX_WEIGHTS`)."""
    monkeypatch.setattr(layers, "BLOCK_MIXING_MAX_WEIGHTS", 0)
    shapes = TUCKER_SHAPES[1:2] + TUCKER_SHAPES[5:6]
    pairs = [_tucker(jr.fold_in(key, i), *shape) for i, shape in enumerate(shapes)]
    ops, xs = zip(*pairs, strict=True)
    _assert_paths_agree(ops, xs, [s[1] for s in shapes])


@pytest.mark.parametrize("rank", [1.0, 0.5])
def test_tucker_matmul_path_gradients_check_in_float64(key, x64, rank):
    op, x = _tucker(key, (9, 8), (12, 10), (5, 6), rank, cin=2, cout=2)
    op, x = jax.tree.map(lambda a: a.astype(jnp.float64), (op, x))
    assert op.core.dtype == x.dtype == jnp.float64
    jax.test_util.check_grads(
        lambda o, v: o(v, (12, 10), path="matmul"),
        (op, x),
        order=1,
        modes=("fwd", "rev"),
        atol=1e-6,
        rtol=1e-6,
    )


def test_tucker_auto_path_follows_the_cost_rule(key):
    """`path="auto"` traces the FFT exactly where `spectral_path` (n1 / 2 as m1) says "fft"."""
    cases = [((32, 32), (16, 16), (8, 8), 16, 16), ((16, 16), (16, 16), (16, 16), 2, 2)]
    cases.append(((64, 64), (64, 64), (64, 64), 1, 1))  # every mode kept on 64^2: the FFT's
    chosen = []
    for i, (in_size, out_size, n_modes, cin, cout) in enumerate(cases):
        op, x = _tucker(jr.fold_in(key, i), in_size, out_size, n_modes, 1.0, cin, cout)
        rule = layers.spectral_path(in_size, out_size, (n_modes[0] / 2, op.modes[1]), cin, cout)
        jaxpr = str(jax.make_jaxpr(lambda v, op=op, s=out_size: op(v, s))(x))
        chosen.append("fft" if "fft" in jaxpr else "matmul")
        assert chosen[-1] == rule
    assert chosen == ["matmul", "matmul", "fft"]


def test_tucker_rejects_an_unknown_path(key):
    op, x = _tucker(key, (16, 16), (16, 16), (8, 8), 1.0)
    with pytest.raises(ValueError, match="path"):
        op(x, path="dft")
