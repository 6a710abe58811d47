"""Transfer-experiment operators: CNO (anti-aliased), Transolver and GNOT (tokens), DeepONet conv branch."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import pytest

from posteriorjax import nn

SMALL = {
    "cno": dict(width=4, depth=1, res_blocks=1),
    "transolver": dict(hidden=8, layers=1, heads=2, slices=4),
    "gnot": dict(hidden=8, layers=1, heads=2, experts=2),
    "deeponet": dict(branch="conv", width=4, conv_layers=2, grid=4, hidden=8, basis=8),
}


@eqx.filter_jit
def _forward_and_grad(net, x):
    """One compiled program: a single field, the vmapped batch, and the loss gradient."""

    def loss_fn(m):
        y = jax.vmap(m)(x)
        return jnp.mean(y**2), y

    (loss, batched), grads = eqx.filter_value_and_grad(loss_fn, has_aux=True)(net)
    return net(x[0]), batched, loss, grads


@pytest.mark.parametrize("name", sorted(SMALL))
def test_operator_shapes_jit_vmap_grad(name, key):
    k_model, k_x = jr.split(key)
    net = nn.get(name, k_model, in_channels=2, out_channels=3, **SMALL[name])
    x = jr.normal(k_x, (2, 2, 16, 16))
    single, batched, loss, grads = _forward_and_grad(net, x)
    assert single.shape == (3, 16, 16) and single.dtype == jnp.float32 and batched.shape == (2, 3, 16, 16)
    np.testing.assert_allclose(batched[0], single, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(loss, jnp.mean(batched**2), rtol=1e-4)
    leaves = jax.tree.leaves(eqx.filter(grads, eqx.is_inexact_array))
    assert all(bool(jnp.all(jnp.isfinite(g))) for g in leaves)
    assert sum(float(jnp.sum(jnp.abs(g))) for g in leaves) > 0
    with pytest.raises(ValueError, match="x: expected a field"):
        net(x[0, :1])


def test_aa_activation_removes_the_aliased_harmonic():
    """cos(2 pi 5 y)^2 = 1/2 + cos(2 pi 10 y)/2: mode 10 exceeds the 16-grid's Nyquist (8).

    Pointwise squaring on the grid folds it onto mode 6; the activation applied at 2x
    resolution and low-pass filtered back leaves exactly the resolvable part, 1/2.
    """
    y = np.arange(16) / 16
    v = np.broadcast_to(np.cos(2 * np.pi * 5 * y)[:, None], (1, 16, 16)).astype(np.float32)
    low = np.broadcast_to(np.cos(2 * np.pi * 3 * y)[:, None], (1, 16, 16)).astype(np.float32)

    @jax.jit
    def resampled(v, low):
        identity = lambda a: a  # noqa: E731
        return (
            nn.aa_activation(v, (16, 16), jnp.square),
            nn.aa_activation(v, (8, 8), identity),
            nn.aa_activation(low, (8, 8), identity),
        )

    filtered, coarse, coarse_low = resampled(v, low)
    np.testing.assert_allclose(filtered, 0.5, atol=1e-5)
    assert np.max(np.abs(np.square(v) - 0.5)) > 0.4  # the alias the filter removes
    # down-sampling: mode 5 > Nyquist 4 of the 8-grid is filtered out; mode 3 is kept exactly
    assert float(jnp.max(jnp.abs(coarse))) < 1e-5
    np.testing.assert_allclose(coarse_low, low[:, ::2, ::2], atol=1e-5)


@pytest.mark.parametrize("name", ["transolver", "gnot"])
def test_token_operators_are_permutation_equivariant(name, key):
    k_model, k_x, k_p = jr.split(key, 3)
    net = nn.get(name, k_model, in_channels=2, out_channels=2, **SMALL[name])
    x = jr.normal(k_x, (2, 8, 8))
    tokens = nn.grid_tokens(x)
    assert tokens.shape == (64, 4)
    perm = jr.permutation(k_p, 64)
    # positions are features: moving the values without their coordinates changes the output
    moved = tokens.at[:, :2].set(tokens[perm, :2])
    out, permuted, moved_out = eqx.filter_jit(
        lambda m: jax.vmap(m.apply_tokens)(jnp.stack([tokens, tokens[perm], moved]))
    )(net)
    np.testing.assert_allclose(permuted, out[perm], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(tokens[:, -2:].reshape(8, 8, 2)[:, 0, 0], (jnp.arange(8) + 0.5) / 8)
    assert not jnp.allclose(moved_out, out[perm], atol=1e-3)


@pytest.mark.slow
def test_deeponet_conv_branch_sees_where_observations_are(key):
    net = nn.DeepONet(1, 1, key=key, **{k: v for k, v in SMALL["deeponet"].items()})
    pool = nn.DeepONet(1, 1, key=key, branch="pool", width=4, conv_layers=2, basis=8, hidden=8)
    blob = jnp.zeros((1, 16, 16)).at[0, 2:5, 2:5].set(1.0)
    fields = jnp.stack([blob, jnp.roll(blob, (8, 8), axis=(-2, -1))])
    a, b = eqx.filter_jit(lambda n, p: (jax.vmap(n)(fields), jax.vmap(p)(fields)))(net, pool)
    # global pooling of shift-equivariant features barely notices the move; the grid layout does
    assert jnp.linalg.norm(a[0] - a[1]) > 10 * jnp.linalg.norm(b[0] - b[1])
    with pytest.raises(ValueError, match="branch"):
        nn.DeepONet(1, 1, key=key, branch="dense")
    with pytest.raises(ValueError, match="divisible"):
        net(jnp.zeros((1, 12, 12)))


def test_operator_bad_arguments(key):
    with pytest.raises(ValueError, match="heads"):
        eqx.filter_eval_shape(nn.Transolver, 1, 1, hidden=10, heads=3, key=key)
    with pytest.raises(ValueError, match="depth"):
        nn.CNO(1, 1, depth=0, key=key)
    cno = eqx.filter_eval_shape(nn.CNO, 1, 1, width=4, depth=2, key=key)  # checks precede any compute
    with pytest.raises(ValueError, match="divisible by 2\\^depth"):
        cno(jnp.zeros((1, 18, 18)))
    with pytest.raises(ValueError, match="t: expected None"):
        cno(jnp.zeros((1, 16, 16)), jnp.array(0.0))
    gnot = eqx.filter_eval_shape(nn.GNOT, 1, 1, hidden=8, layers=1, heads=1, key=key)
    with pytest.raises(ValueError, match="tokens"):
        gnot.apply_tokens(jnp.zeros((10, 2)))
