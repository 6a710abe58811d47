"""L-C2ST: the local classifier two-sample test (Linhart, Gramfort & Rodrigues, 2023).

Tests H0(x_o): q(theta | x_o) = p(theta | x_o) at one observation from
calibration pairs of the joint. A classifier d(theta, x) = P(C = 1 | theta, x)
is trained to tell the joint pairs (theta_i, x_i) ~ p(theta, x) (class 1) from
(theta_q_i, x_i), theta_q_i ~ q(. | x_i) (class 0); at x_o the statistic is the
mean squared distance of its prediction to chance over samples of the estimator,

    T(x_o) = (1 / n) sum_j (d(theta_j, x_o) - 1/2)^2,   theta_j ~ q(. | x_o)

(the paper's MSE statistic, sbi's `LC2ST.get_statistic_on_observed_data`).
Its null is the permutation method of the paper and of sbi: `num_null`
classifiers trained on the same 2M pairs with their class labels permuted,
each evaluated on the same theta_j; p = fraction of null statistics >= T
(sbi: `(T < T_null).mean()`), rejected when p < alpha.

The classifier is a ReLU MLP (Equinox) trained full batch with Adam (optax)
on the binary cross-entropy for a fixed number of steps; all 1 + num_null
classifiers train at once under `vmap`. sbi's default is scikit-learn's
MLPClassifier with two hidden layers of 10 dim(theta) units, Adam, up to 1000
epochs with early stopping on a 10 % validation split; width, depth, steps
and learning rate are arguments here, without early stopping.
"""

from __future__ import annotations

from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import optax

from posteriorjax import checks


class LC2STResult(NamedTuple):
    """`statistic (K,)` at each observation, `null (K, num_null)`, `p_value (K,)`."""

    statistic: jax.Array
    null: jax.Array
    p_value: jax.Array


def _fit_predict(key, inputs, labels, queries, *, width, depth, steps, learning_rate):
    """Train one classifier on `inputs (2M, D)` / `labels (2M,)`; P(class 1) at `queries (..., D)`."""
    model = eqx.nn.MLP(inputs.shape[-1], "scalar", width, depth, activation=jax.nn.relu, key=key)
    params, static = eqx.partition(model, eqx.is_array)
    opt = optax.adam(learning_rate)

    def loss(p):
        logits = jax.vmap(eqx.combine(p, static))(inputs)
        return optax.sigmoid_binary_cross_entropy(logits, labels).mean()

    def step(carry, _):
        p, state = carry
        grads = jax.grad(loss)(p)
        updates, state = opt.update(grads, state, p)
        return (optax.apply_updates(p, updates), state), None

    (params, _), _ = jax.lax.scan(step, (params, opt.init(params)), None, length=steps)
    net = eqx.combine(params, static)
    flat = queries.reshape(-1, queries.shape[-1])
    return jax.nn.sigmoid(jax.vmap(net)(flat)).reshape(queries.shape[:-1])


@eqx.filter_jit
def _fit_all(keys, inputs, all_labels, queries, *, width, depth, steps, learning_rate):
    """`_fit_predict` for every (key, labels) row at once -> (trials, K, n); one compilation per shape."""

    def fit(k, y):
        return _fit_predict(
            k, inputs, y, queries, width=width, depth=depth, steps=steps, learning_rate=learning_rate
        )

    return jax.vmap(fit)(keys, all_labels)


def lc2st(
    key,
    theta,
    x,
    theta_q,
    *,
    theta_o,
    x_o,
    num_null: int = 100,
    width: int = 64,
    depth: int = 2,
    steps: int = 500,
    learning_rate: float = 1e-3,
) -> LC2STResult:
    """L-C2ST statistic, permutation null and p-value at K observations.

    theta (M, d), x (M, m): calibration pairs of the joint; theta_q (M, d): one
    draw of the estimator q(. | x_i) per pair; theta_o (K, n, d) or (n, d):
    draws of q(. | x_o) at each observation x_o (K, m) or (m,). One classifier
    (and one per null trial) serves every observation: the test is amortized.
    Returns an `LC2STResult` (without the K axis for a single observation).
    """
    theta, x, theta_q = (jnp.asarray(a, jnp.float32) for a in (theta, x, theta_q))
    theta_o, x_o = jnp.asarray(theta_o, jnp.float32), jnp.asarray(x_o, jnp.float32)
    for name, a in (("theta", theta), ("x", x), ("theta_q", theta_q)):
        if a.ndim != 2:
            raise ValueError(f"{name}: expected a 2-d array (M, features), got shape {a.shape}")
    if not theta.shape[0] == x.shape[0] == theta_q.shape[0] or theta_q.shape != theta.shape:
        raise ValueError(
            "theta, x, theta_q: expected (M, d), (M, m), (M, d), "
            f"got {theta.shape}, {x.shape}, {theta_q.shape}"
        )
    single = theta_o.ndim == 2
    if single:
        theta_o, x_o = theta_o[None], x_o[None]
    expected_o = (
        theta_o.ndim == 3
        and theta_o.shape[-1] == theta.shape[1]
        and x_o.shape == (theta_o.shape[0], x.shape[1])
    )
    if not expected_o:
        raise ValueError(
            f"theta_o, x_o: expected (K, n, {theta.shape[1]}) and (K, {x.shape[1]}), "
            f"got {theta_o.shape} and {x_o.shape}"
        )
    num_null = checks.positive_int("num_null", num_null)
    width, depth, steps = (
        checks.positive_int(k, v) for k, v in (("width", width), ("depth", depth), ("steps", steps))
    )
    learning_rate = checks.positive("learning_rate", learning_rate)
    for name, a in (("theta", theta), ("x", x), ("theta_q", theta_q), ("theta_o", theta_o), ("x_o", x_o)):
        checks.finite(a, name)

    m = theta.shape[0]
    inputs = jnp.concatenate([jnp.concatenate([theta, x], 1), jnp.concatenate([theta_q, x], 1)])
    labels = jnp.concatenate([jnp.ones(m), jnp.zeros(m)])  # 1: (theta, x) of the joint, 0: (theta_q, x)
    queries = jnp.concatenate([theta_o, jnp.broadcast_to(x_o[:, None], (*theta_o.shape[:2], x.shape[1]))], -1)
    k_init, k_perm = jr.split(key)
    # a null trial refits on permuted labels, which carry no information whatever q is
    perms = jax.vmap(lambda k: jr.permutation(k, labels))(jr.split(k_perm, num_null))
    all_labels = jnp.concatenate([labels[None], perms])  # trial 0: the observed labels
    keys = jr.split(k_init, num_null + 1)

    probs = _fit_all(
        keys, inputs, all_labels, queries, width=width, depth=depth, steps=steps, learning_rate=learning_rate
    )
    stats = jnp.mean((probs - 0.5) ** 2, axis=-1)  # (1 + num_null, K)
    t, null = stats[0], stats[1:].T
    p = jnp.mean(null >= t[:, None], axis=-1)
    out = LC2STResult(t, null, p)
    return LC2STResult(*(v[0] for v in out)) if single else out
