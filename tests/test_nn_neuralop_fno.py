"""`NeuralopFNO`'s cropped evaluation equals its earlier full-grid form (kept below, as written then).

Since the early crop, the per-point tail of the network (the last block after its spectral
convolution, and the projection) runs on the kept window only: the DDIS ``fno_pad`` crop, or the
unpadded grid. Outputs and parameter gradients must equal the full-grid form to float32 rounding;
with dropout active the mask is drawn over the whole grid, as before, so the draws match too.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import jax.test_util
import numpy as np
import pytest
import scipy.special

from posteriorjax import nn
from posteriorjax.nn import neuralop_fno


def _full_grid_call(net, x, t=None, *, key=None):
    """`NeuralopFNO.__call__` before the early crop: every layer on the whole (padded) grid."""
    h, w = x.shape[-2:]
    if net.reflect_pad:
        x = jnp.pad(x, ((0, 0), (h // 2, h // 2), (w // 2, w // 2)), mode="reflect")
    if net.time_channels:
        emb = neuralop_fno.time_embedding(t, net.time_channels).astype(x.dtype)
        x = jnp.concatenate([x, jnp.broadcast_to(emb[:, None, None], (emb.shape[0], *x.shape[1:]))])
    x = jnp.concatenate([x, neuralop_fno.grid_embedding(x.shape[-2:], x.dtype)])
    v = net.lift(x)
    hh, ww = v.shape[-2:]
    v = jnp.pad(v, ((0, 0), (0, round(net.padding * hh)), (0, round(net.padding * ww))))
    n = len(net.spectral)
    keys = [None] * n if key is None else list(jr.split(key, n))
    for i in range(n):
        skip = jnp.einsum("oi,ihw->ohw", net.skip_weights[i], v)
        z = net.spectral[i](v) + net.biases[i][:, None, None] + skip
        z = neuralop_fno.gelu(z) if i < n - 1 else z
        z = net.mlps[i](z, key=keys[i]) + net.gates[i][:, None, None] * v
        v = neuralop_fno.gelu(z) if i < n - 1 else z
    y = net.project(v[:, :hh, :ww])
    if net.reflect_pad:
        y = y[:, h // 2 : h // 2 + h, w // 2 : w // 2 + w]
    return y


def _trained_like(net, key):
    """`net` with every parameter moved off its initial value, as training moves it: no gate
    is one and no bias zero (XLA folds such constants, and a test of them tests less)."""
    leaves, tree = jax.tree.flatten(eqx.filter(net, eqx.is_array))
    keys = jr.split(key, len(leaves))
    moved = [a + 0.1 * jr.normal(k, a.shape, a.dtype) for a, k in zip(leaves, keys, strict=True)]
    return eqx.combine(jax.tree.unflatten(tree, moved), net)


CASES = {
    "fno_pad": (dict(reflect_pad=True), (1, 12, 10), None),
    "padding": (dict(padding=0.25), (1, 8, 12), None),
    "time": (dict(time_channels=4, padding=0.25), (2, 8, 8), 0.3),
    "plain_lift": (dict(lifting_ratio=0, reflect_pad=True), (1, 8, 8), None),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_cropped_forward_and_gradient_equal_the_full_grid_form(case):
    options, shape, t = CASES[case]
    net = neuralop_fno.NeuralopFNO(shape[0], 2, modes=4, width=6, layers=2, key=jr.key(1), **options)
    net = _trained_like(net, jr.key(8))
    x = jr.normal(jr.key(2), (3, *shape))
    new = lambda m, x: jax.vmap(lambda u: m(u, t))(x)  # noqa: E731
    old = lambda m, x: jax.vmap(lambda u: _full_grid_call(m, u, t))(x)  # noqa: E731
    np.testing.assert_allclose(new(net, x), old(net, x), rtol=1e-5, atol=1e-6)
    assert new(net, x).shape == (3, 2, *shape[1:])
    loss = lambda f: eqx.filter_grad(lambda m, x: jnp.sum(jnp.sin(f(m, x))))(net, x)  # noqa: E731
    for got, want in zip(jax.tree.leaves(loss(new)), jax.tree.leaves(loss(old)), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * float(jnp.max(jnp.abs(want))))


def test_dropout_draws_equal_the_full_grid_form():
    net = nn.get("fno_pad", jr.key(3), in_channels=1, out_channels=1, modes=4, width=6, layers=2, dropout=0.3)
    x = jr.normal(jr.key(4), (1, 8, 8))
    key = jr.key(5)
    got, want = net(x, key=key), _full_grid_call(net, x, key=key)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert not np.allclose(got, net(x))  # the dropout is active


def test_crop_changes_no_parameter():
    net = nn.get("fno_pad", jr.key(0), in_channels=1, out_channels=1, modes=16, width=16, layers=4)
    leaves = jax.tree_util.tree_leaves_with_path(eqx.filter(net, eqx.is_array))
    names = [jax.tree_util.keystr(p) for p, _ in leaves]
    assert names[:3] == [".lift.fc1.weight", ".lift.fc1.bias", ".lift.fc2.weight"]
    assert sum(a.size for _, a in leaves) == 298_417


def _neuralop_forward(net, x: np.ndarray) -> np.ndarray:
    """neuraloperator's `FNO.forward` (postactivation FNO blocks), written from its source in
    float64 NumPy with our parameters: `GridEmbeddingND` channels appended, the lifting
    `ChannelMLP`, per block `x = gelu(conv(x) + fno_skip(x)); x = gelu(channel_mlp(x) + gate * x)`
    (no GELU after the last block), the projection `ChannelMLP`. `F.gelu` is the exact
    x Phi(x); the spectral convolution keeps k_y in [-m/2, m/2) and 0 <= k_x <= m/2, our
    (unnormalized forward, 1 / HW inverse) scaling."""
    p = lambda a: np.asarray(a, np.float64)  # noqa: E731
    gelu = lambda v: 0.5 * v * (1 + scipy.special.erf(v / np.sqrt(2)))  # noqa: E731
    linear = lambda layer, v: np.einsum("oi,ihw->ohw", p(layer.weight), v) + p(layer.bias)[:, None, None]  # noqa: E731
    mlp = lambda m, v: linear(m.fc2, gelu(linear(m.fc1, v)))  # noqa: E731
    h, w = x.shape[-2:]
    grid = np.stack(np.meshgrid(np.arange(h) / h, np.arange(w) / w, indexing="ij"))
    v = mlp(net.lift, np.concatenate([p(x), grid]))
    n = len(net.spectral)
    for i, conv in enumerate(net.spectral):
        m1, m2 = conv.modes
        weight = p(conv.weight_re) + 1j * p(conv.weight_im)  # (2, out, in, m1, m2)
        f = np.fft.rfft2(v)
        out = np.zeros((weight.shape[1], h, w // 2 + 1), complex)
        out[:, :m1, :m2] = np.einsum("oixy,ixy->oxy", weight[0], f[:, :m1, :m2])
        out[:, h - m1 :, :m2] = np.einsum("oixy,ixy->oxy", weight[1], f[:, h - m1 :, :m2])
        z = np.fft.irfft2(out, s=(h, w)) + p(net.biases[i])[:, None, None]
        z = z + np.einsum("oi,ihw->ohw", p(net.skip_weights[i]), v)
        z = gelu(z) if i < n - 1 else z
        z = mlp(net.mlps[i], z) + p(net.gates[i])[:, None, None] * v
        v = gelu(z) if i < n - 1 else z
    return mlp(net.project, v)


def test_the_network_is_neuralops_fno_with_its_exact_gelu():
    """The forward pass equals a NumPy transcription of neuraloperator's FNO, whose activation is
    torch's exact GELU (the tanh approximation differs by up to 5e-4 per activation)."""
    net = _trained_like(neuralop_fno.NeuralopFNO(3, 2, modes=8, width=12, layers=3, key=jr.key(6)), jr.key(9))
    x = 2.0 * jr.normal(jr.key(7), (3, 16, 16))
    want = _neuralop_forward(net, np.asarray(x))
    np.testing.assert_allclose(net(x), want, rtol=1e-4, atol=1e-5 * np.max(np.abs(want)))


def test_gelu_is_torchs_exact_gelu_with_its_derivative(x64):
    """`gelu` (torch's erf formula, hand-written derivative) equals jax's exact GELU and its
    gradient to float64 rounding, and passes `check_grads` in both modes."""
    x = jnp.linspace(-9.0, 9.0, 301)
    np.testing.assert_allclose(
        neuralop_fno.gelu(x), jax.nn.gelu(x, approximate=False), rtol=1e-13, atol=1e-15
    )
    slope = jax.vmap(jax.grad(neuralop_fno.gelu))(x)
    want = jax.vmap(jax.grad(lambda v: jax.nn.gelu(v, approximate=False)))(x)
    np.testing.assert_allclose(slope, want, rtol=1e-13, atol=1e-15)
    jax.test_util.check_grads(neuralop_fno.gelu, (x,), order=2, modes=("fwd", "rev"), eps=1e-6)


def test_soft_gate_is_a_per_channel_scale(x64):
    """`soft_gate` (a product with diag(gate), for speed) equals the broadcast multiply and
    passes `check_grads` in both modes."""
    gate, v = jr.normal(jr.key(10), (5,)), jr.normal(jr.key(11), (5, 7, 6))
    np.testing.assert_allclose(neuralop_fno.soft_gate(gate, v), gate[:, None, None] * v, rtol=1e-14)
    jax.test_util.check_grads(neuralop_fno.soft_gate, (gate, v), order=2, modes=("fwd", "rev"))
