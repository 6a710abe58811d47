"""MCMC references in the prior's standard-normal latent: pCN (and MALA), many chains, diagnostics.

Every prior is x = transform(z) with z ~ N(0, I) (`prior.latent`,
`prior.transform`), so the posterior in latent space is
pi(z) ∝ exp(-Phi(z)) N(z; 0, I) with Phi(z) = -log p(y_obs | transform(z)).

* pCN (preconditioned Crank-Nicolson; Cotter, Roberts, Stuart & White 2013):
  z' = sqrt(1 - beta^2) z + beta xi, accepted with probability
  min(1, exp(Phi(z) - Phi(z'))). The proposal is reversible for the prior, so it
  needs no gradient and works through thresholded (Darcy) and log-normal
  transforms; its acceptance does not degrade with the grid size.
* gpCN (generalized pCN; Rudolf & Sprungk 2018, with the Gauss-Newton Laplace
  covariance of Pinski et al. 2015 / Cui et al. 2016): the pCN move about the
  Laplace approximation N(m, G) of the posterior instead of the prior,
  z' = m + sqrt(1 - beta^2) (z - m) + beta G^(1/2) xi, G = (I + H)^-1 with H the
  prior-whitened Gauss-Newton Hessian J^T J / sigma^2 at the MAP point m (found by
  damped Gauss-Newton). The proposal is reversible for N(m, G), so the acceptance
  is min(1, exp(Psi(z) - Psi(z'))), Psi(z) = Phi(z) + m.z - (z - m)^T H (z - m) / 2:
  exactly 1 on a linear-Gaussian task, where pCN needs beta ~ lambda_max^-1/2. H
  is exact (rank <= M, from the full Jacobian by M reverse-mode solves), so the
  cost per step is one forward solve plus O(M N). Needs Gaussian noise and a
  differentiable forward map and transform (not the thresholded Darcy prior).
* MALA: z' = z + h g(z) + sqrt(2h) xi, g = grad log pi, with the Metropolis-
  Hastings correction; needs a differentiable forward map and transform.

Chains are vmapped, steps run in `lax.scan`; pCN and MALA chains start from prior
draws, gpCN chains from draws of its Laplace approximation. During burn-in each chain adapts
its step size by Robbins-Monro on log(step): log s += t^-0.6 (a_t - target), a_t
the acceptance probability; it is frozen afterwards (so the kept draws are a
valid Markov chain). Convergence diagnostics per dimension follow Vehtari, Gelman,
Simpson, Carpenter & Bürkner (2021): `rank_rhat` (rank-normalized split R-hat, the
larger of the bulk and folded-tail values), `ess_bulk` and `ess_tail`; `diagnose`
reports them. `split_rhat` and `effective_sample_size` are the plain (not
rank-normalized) estimators, kept because heavy tails or a chain stuck in a
different scale fool them where the rank-normalized ones are not fooled.
"""

from __future__ import annotations

import dataclasses

import equinox as eqx
import jax
import jax.flatten_util
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import scipy.special
import scipy.stats

from posteriorjax import checks, rng
from posteriorjax.observations import GaussianNoise

METHODS = ("pcn", "gpcn", "mala")
TARGETS = {"pcn": 0.25, "gpcn": 0.25, "mala": 0.574}
STEPS = {"pcn": 0.1, "gpcn": 0.5, "mala": 1e-3}  # initial beta (pCN, gpCN) or h (MALA) of `run`


def _tree_normal(key, tree):
    leaves, treedef = jax.tree.flatten(tree)
    keys = jr.split(key, len(leaves))
    return jax.tree.unflatten(
        treedef, [rng.normal(k, x.shape, x.dtype) for k, x in zip(keys, leaves, strict=True)]
    )


def _axpby(a, x, b, y):
    return jax.tree.map(lambda u, v: a * u + b * v, x, y)


def _sqnorm(tree):
    return sum(jnp.sum(x**2) for x in jax.tree.leaves(tree))


class Laplace(eqx.Module):
    """Gauss-Newton Laplace approximation N(mode, (I + H)^-1) of the latent posterior (flattened).

    `mode (N,)`; H = V diag(eigenvalues) V^T with `vectors (N, r)` orthonormal, `eigenvalues (r,)`.
    """

    mode: jax.Array
    vectors: jax.Array
    eigenvalues: jax.Array

    def sqrt_cov(self, v: jax.Array) -> jax.Array:
        """(I + H)^(-1/2) v for `v (N,)`."""
        shrink = jax.lax.rsqrt(1.0 + self.eigenvalues) - 1.0
        return v + self.vectors @ (shrink * (self.vectors.T @ v))

    def hessian_norm(self, v: jax.Array) -> jax.Array:
        """v^T H v."""
        return jnp.sum(self.eigenvalues * (self.vectors.T @ v) ** 2)


def laplace(task, y_obs, *, iterations: int = 12) -> Laplace:
    """The MAP point of the latent posterior by damped Gauss-Newton, and the GN Hessian there.

    Each iteration forms the whitened Jacobian J = d[(forward(transform(z)) - y) / sigma]/dz
    (M reverse-mode solves), solves (I + J^T J) d = -(J^T r + z) through the SVD of J, and
    takes the largest step in {1, 1/2, ..., 1/128} that lowers |r|^2/2 + |z|^2/2. Pure.
    """
    if not isinstance(task.noise, GaussianNoise):
        kind = type(task.noise).__name__
        raise ValueError(f"task: gpcn needs Gaussian noise, task {task.name!r} has {kind}")
    z0, unravel = jax.flatten_util.ravel_pytree(task.prior.latent(jr.key(0)))
    z0 = jnp.zeros_like(z0)  # the prior mean of the whitened latent

    def residual(z):
        return ((task.forward(task.prior.transform(unravel(z))) - y_obs) / task.noise.std).ravel()

    def objective(z):
        return 0.5 * jnp.sum(residual(z) ** 2) + 0.5 * jnp.sum(z**2)

    def linearize(z):
        r, vjp = jax.vjp(residual, z)
        jac = jax.vmap(lambda e: vjp(e)[0])(jnp.eye(r.size, dtype=r.dtype))  # (M, N)
        _, s, vt = jnp.linalg.svd(jac, full_matrices=False)
        return r, jac, s, vt

    def step(_, z):
        r, jac, s, vt = linearize(z)
        g = jac.T @ r + z
        d = -(g - vt.T @ (s**2 / (1.0 + s**2) * (vt @ g)))  # -(I + J^T J)^-1 g
        sizes = 0.5 ** jnp.arange(8.0)
        values = jax.vmap(lambda t: objective(z + t * d))(sizes)
        # a step out of the physics' domain gives NaN: never better; no better step keeps z
        better = jnp.isfinite(values) & (values < objective(z))
        t = jnp.where(jnp.any(better), sizes[jnp.argmax(better)], 0.0)
        return z + t * d

    mode = jax.lax.fori_loop(0, iterations, step, z0)
    _, _, s, vt = linearize(mode)
    return Laplace(mode, vt.T, s**2)


def _kernel(task, y_obs, method: str, precond: Laplace | None = None, unravel=None):
    """`(init, propose)` of one method; gpCN needs its Laplace `precond` and the latent's `unravel`."""

    def potential(z):
        return -task.noise.log_likelihood(y_obs - task.forward(task.prior.transform(z)))

    if method == "gpcn":
        m = precond.mode

        def psi(z):
            # minus the log density of the posterior relative to the proposal's invariant measure
            # N(m, (I + H)^-1), up to a constant: potential + |v|^2 / 2 - (v - m)^T (I + H) (v - m) / 2
            v, _ = jax.flatten_util.ravel_pytree(z)
            return potential(z) + m @ v - 0.5 * precond.hessian_norm(v - m)

        def init(z):
            return psi(z), None

        def propose(key, z, psi_z, aux, step):
            # (also in pCN below) a given step may exceed 1 and an adapted one underflow to 0:
            # beta > 1 makes sqrt(1 - beta^2) NaN, beta = 0 a chain that never moves
            beta = jnp.clip(step, 1e-6, 1.0)
            v, _ = jax.flatten_util.ravel_pytree(z)
            xi = rng.normal(key, v.shape, v.dtype)
            zp = unravel(m + jnp.sqrt(1 - beta**2) * (v - m) + beta * precond.sqrt_cov(xi))
            psip = psi(zp)
            return zp, psip, None, jnp.minimum(0.0, jnp.where(jnp.isfinite(psip), psi_z - psip, -jnp.inf))

        return init, propose

    if method == "pcn":

        def init(z):
            return potential(z), None

        def propose(key, z, phi, aux, step):
            beta = jnp.clip(step, 1e-6, 1.0)
            zp = _axpby(jnp.sqrt(1 - beta**2), z, beta, _tree_normal(key, z))
            phip = potential(zp)
            return zp, phip, None, jnp.minimum(0.0, phi - phip)

        return init, propose

    def log_target(z):
        return -potential(z) - 0.5 * _sqnorm(z)

    value_and_grad = jax.value_and_grad(log_target)

    def init(z):
        lp, g = value_and_grad(z)
        return -lp, g

    def propose(key, z, neg_lp, grad, h):
        zp = jax.tree.map(lambda a, g, e: a + h * g + jnp.sqrt(2 * h) * e, z, grad, _tree_normal(key, z))
        lpp, gp = value_and_grad(zp)
        # the proposal is N(z + h grad, 2h I): log q(z | z') - log q(z' | z) = -(bwd - fwd) / (4h)
        fwd = _sqnorm(jax.tree.map(lambda b, a, g: b - a - h * g, zp, z, grad))
        bwd = _sqnorm(jax.tree.map(lambda a, b, g: a - b - h * g, z, zp, gp))
        log_a = lpp + neg_lp - (bwd - fwd) / (4 * h)
        return zp, -lpp, gp, jnp.minimum(0.0, jnp.where(jnp.isfinite(log_a), log_a, -jnp.inf))

    return init, propose


class ChainResult(eqx.Module):
    """`samples (chains, draws, C, H, W)`, `acceptance (chains,)` after burn-in, final `step (chains,)`."""

    samples: jax.Array
    acceptance: jax.Array
    step: jax.Array


def chains(
    key, task, y_obs, *, num_chains: int, num_draws: int, burn_in: int, thin: int, step, target, method: str
):
    """`num_chains` adaptive chains, as one pure function (no jit of its own).

    The building block of `run` for callers that compose it under their own `jit`/`vmap`
    (samplers, sweeps): `step` (initial beta for pCN, h for MALA) and `target` (acceptance
    aimed at during burn-in) may be traced scalars, so they can be vmapped; `num_chains`,
    `num_draws`, `burn_in`, `thin` and `method` are static. Chain c uses `split(key, num_chains)[c]`
    and starts from a prior draw (gpCN: a draw of its Laplace approximation);
    after `burn_in` adaptive steps each keeps every `thin`-th of `num_draws * thin` steps.

    Returns:
      `ChainResult` with samples `(num_chains, num_draws, *task.unknown_shape)`.
    """
    checks.in_choices("method", method, METHODS)
    for name, v in (("num_chains", num_chains), ("num_draws", num_draws), ("thin", thin)):
        checks.positive_int(name, v)
    if not isinstance(burn_in, int) or burn_in < 0:
        raise ValueError(f"burn_in: expected a non-negative integer, got {burn_in!r}")
    step0 = step
    precond = laplace(task, y_obs) if method == "gpcn" else None
    _, unravel = jax.flatten_util.ravel_pytree(task.prior.latent(jr.key(0)))
    init, propose = _kernel(task, y_obs, method, precond, unravel)

    def start(key):  # a prior draw, or for gpCN a draw of its Laplace approximation
        if precond is None:
            return task.prior.latent(key)
        xi = rng.normal(key, precond.mode.shape, precond.mode.dtype)
        return unravel(precond.mode + precond.sqrt_cov(xi))

    def chain(chain_key):
        k_init, ckey = jr.split(chain_key)
        z = start(k_init)
        phi, aux = init(z)

        def burn(carry, t):
            z, phi, aux, log_s = carry
            k_p, k_u = jr.split(jr.fold_in(ckey, t))
            zp, phip, auxp, log_a = propose(k_p, z, phi, aux, jnp.exp(log_s))
            acc = jnp.log(jr.uniform(k_u)) < log_a
            z, phi, aux = jax.tree.map(lambda a, b: jnp.where(acc, a, b), (zp, phip, auxp), (z, phi, aux))
            # Robbins-Monro on log step: the gain t^-0.6 sums to infinity, its squares do not
            log_s = log_s + (t + 1.0) ** -0.6 * (jnp.exp(log_a) - target)
            if method in ("pcn", "gpcn"):  # beta <= 1: adaptation past it would only slow a later decrease
                log_s = jnp.minimum(log_s, 0.0)
            return (z, phi, aux, log_s), None

        (z, phi, aux, log_s), _ = jax.lax.scan(burn, (z, phi, aux, jnp.log(step0)), jnp.arange(burn_in))
        step = jnp.exp(log_s)

        def move(carry, t):
            z, phi, aux, n_acc = carry
            k_p, k_u = jr.split(jr.fold_in(ckey, burn_in + t))  # step indices continue the burn-in's
            zp, phip, auxp, log_a = propose(k_p, z, phi, aux, step)
            acc = jnp.log(jr.uniform(k_u)) < log_a
            z, phi, aux = jax.tree.map(lambda a, b: jnp.where(acc, a, b), (zp, phip, auxp), (z, phi, aux))
            return (z, phi, aux, n_acc + acc), None

        def draw(carry, d):
            carry, _ = jax.lax.scan(move, carry, d * thin + jnp.arange(thin))
            return carry, task.prior.transform(carry[0])

        (_, _, _, n_acc), xs = jax.lax.scan(draw, (z, phi, aux, 0), jnp.arange(num_draws))
        return xs, n_acc / (num_draws * thin), step

    return ChainResult(*jax.vmap(chain)(jr.split(key, num_chains)))


_run = eqx.filter_jit(chains)


def run(
    key,
    task,
    y_obs,
    *,
    num_chains: int = 64,
    num_draws: int = 100,
    burn_in: int = 1000,
    thin: int = 10,
    method: str = "pcn",
    step: float | None = None,
    target_accept: float | None = None,
) -> ChainResult:
    """Run `num_chains` chains (see `chains`); `burn_in` adaptive steps, then `num_draws * thin` steps.

    Returns the thinned draws in field space. `step` is the initial beta (pCN, gpCN)
    or h (MALA); `target_accept` defaults to 0.25 (pCN, gpCN) / 0.574 (MALA).
    """
    checks.in_choices("method", method, METHODS)  # the integer arguments are checked by `chains`
    task.check_observation(y_obs)
    beta = method in ("pcn", "gpcn")
    step = STEPS[method] if step is None else float(step)
    if not (0 < step and (not beta or step <= 1)):
        raise ValueError(f"step: expected 0 < step{' <= 1' if beta else ''}, got {step}")
    target = TARGETS[method] if target_accept is None else float(target_accept)
    if not 0 < target < 1:
        raise ValueError(f"target_accept: expected a value in (0, 1), got {target}")
    y = jnp.asarray(y_obs)
    return _run(
        key,
        task,
        y,
        num_chains=num_chains,
        num_draws=num_draws,
        burn_in=burn_in,
        thin=thin,
        step=step,
        target=target,
        method=method,
    )


def _chains_by_dim(draws, name: str = "draws") -> np.ndarray:
    x = np.asarray(draws, np.float64)
    if x.ndim < 2 or x.shape[1] < 4:
        raise ValueError(f"{name}: expected shape (chains, n >= 4, ...), got {x.shape}")
    return x.reshape(x.shape[0], x.shape[1], -1)


def _split(x: np.ndarray) -> np.ndarray:
    """`(c, n, d) -> (2c, n // 2, d)`: first and last halves as chains (an odd n drops the middle draw)."""
    half = x.shape[1] // 2
    return np.concatenate([x[:, :half], x[:, x.shape[1] - half :]], axis=0)


def _rhat(x: np.ndarray) -> np.ndarray:
    """sqrt(var+ / W) per dimension of `x (m, n, d)`: var+ = (n - 1) / n W + B / n (Gelman et al. 2013)."""
    n = x.shape[1]
    w = x.var(axis=1, ddof=1).mean(axis=0)
    b = n * x.mean(axis=1).var(axis=0, ddof=1)
    return np.sqrt(((n - 1) / n * w + b / n) / np.where(w > 0, w, np.nan))  # constant dimension: NaN


def _z_scale(x: np.ndarray) -> np.ndarray:
    """Rank normalization (Vehtari et al. 2021, eq. 14): ranks over all chains and draws of each
    dimension (ties averaged) mapped by Phi^-1((r - 3/8) / (S + 1/4)), S = chains x draws."""
    m, n, d = x.shape
    ranks = scipy.stats.rankdata(x.reshape(m * n, d), method="average", axis=0).reshape(x.shape)
    return scipy.special.ndtri((ranks - 0.375) / (m * n + 0.25))


def split_rhat(draws) -> np.ndarray:
    """Plain split R-hat per dimension of `draws (chains, n, ...)` (n >= 4), no rank normalization."""
    x = _chains_by_dim(draws)
    return _rhat(_split(x)).reshape(np.shape(draws)[2:])


def rank_rhat(draws) -> np.ndarray:
    """Rank-normalized split R-hat per dimension of `draws (chains, n, ...)` (Vehtari et al. 2021, sec. 4.3).

    The larger of the bulk R-hat (split chains rank-normalized) and the tail R-hat (the same
    for |x - median(x)|); it flags chains that differ in scale or have heavy tails, which plain
    split R-hat misses. The same estimator as ArviZ's `rhat(method="rank")`.
    """
    x = _split(_chains_by_dim(draws))
    bulk = _rhat(_z_scale(x))
    tail = _rhat(_z_scale(np.abs(x - np.median(x.reshape(-1, x.shape[-1]), axis=0))))
    return np.maximum(bulk, tail).reshape(np.shape(draws)[2:])


def _ess(x: np.ndarray) -> np.ndarray:
    """Multi-chain ESS per dimension of `x (m, n, d)` (Vehtari et al. 2021, eqs. 10-11).

    Autocorrelations rho_t = 1 - (W - mean_chains acov_t) / var+ are summed in pairs
    P_k = rho_2k + rho_2k+1 up to the first non-positive pair (Geyer's initial positive
    sequence, at most lag n - 3), made monotone (Geyer's initial monotone sequence), and the
    stopping pair's first autocorrelation is added once where positive:
    tau = -1 + 2 sum_k P_k + rho_2K, ESS = m n / max(tau, 1 / log10(m n)).
    A constant dimension has ESS m n.
    """
    m, n, d = x.shape
    xc = x - x.mean(axis=1, keepdims=True)
    f = np.fft.rfft(xc, n=2 * n, axis=1)
    acov = np.fft.irfft(f * np.conj(f), n=2 * n, axis=1)[:, :n] / n  # (m, n, d)
    w = acov[:, 0].mean(axis=0) * n / (n - 1)
    var_plus = w * (n - 1) / n + (x.mean(axis=1).var(axis=0, ddof=1) if m > 1 else 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        rho = 1.0 - (w - acov.mean(axis=0)) / var_plus  # (n, d)
    rho[0] = 1.0
    num_pairs = len(range(1, n - 3, 2))  # pairs k = 1..num_pairs are examined
    pairs = rho[2 : 2 * num_pairs + 2].reshape(num_pairs, 2, d).sum(axis=1)  # P_1..P_num_pairs
    head = np.concatenate([(rho[0] + rho[1])[None], pairs], axis=0)  # P_0..P_num_pairs
    first = np.argmax(np.concatenate([pairs <= 0, np.ones((1, d), bool)]), axis=0)
    stop = np.where(head[0] <= 0, 0, np.minimum(first + 1, num_pairs))  # K per dimension
    kept = np.arange(num_pairs + 1)[:, None] < stop[None, :]  # pairs 0..K-1
    monotone = np.minimum.accumulate(np.where(kept, head, np.inf), axis=0)
    even = np.take_along_axis(rho, 2 * stop[None, :], axis=0)[0]  # rho_2K
    last_pair = np.take_along_axis(head, stop[None, :], axis=0)[0]
    last = np.where((even > 0) | (last_pair >= 0), even, 0.0)
    tau = -1.0 + 2.0 * np.where(kept, monotone, 0.0).sum(axis=0) + last
    ess = m * n / np.maximum(tau, 1.0 / np.log10(m * n))
    ess = np.where(np.isnan(rho).any(axis=0), np.nan, ess)
    return np.where(np.ptp(x, axis=(0, 1)) < np.finfo(float).resolution, float(m * n), ess)


def effective_sample_size(draws) -> np.ndarray:
    """Plain multi-chain ESS per dimension of `draws (chains, n, ...)` (`_ess` on the chains as drawn)."""
    return _ess(_chains_by_dim(draws)).reshape(np.shape(draws)[2:])


def ess_bulk(draws) -> np.ndarray:
    """Bulk ESS per dimension of `draws (chains, n, ...)`: ESS of the rank-normalized split chains
    (Vehtari et al. 2021, sec. 4.2); ArviZ's `ess(method="bulk")`."""
    return _ess(_z_scale(_split(_chains_by_dim(draws)))).reshape(np.shape(draws)[2:])


def ess_tail(draws) -> np.ndarray:
    """Tail ESS per dimension of `draws (chains, n, ...)`: the smaller ESS of the split-chain indicators
    x <= q_0.05 and x <= q_0.95 (Vehtari et al. 2021, sec. 4.3); ArviZ's `ess(method="tail")`."""
    x = _chains_by_dim(draws)
    flat = x.reshape(-1, x.shape[-1])
    ess = [_ess(_split((x <= np.quantile(flat, q, axis=0)).astype(np.float64))) for q in (0.05, 0.95)]
    return np.minimum(*ess).reshape(np.shape(draws)[2:])


@dataclasses.dataclass(frozen=True)
class Diagnostics:
    """Worst/median rank-normalized R-hat, bulk and tail ESS over the dimensions, and mean acceptance.

    Vehtari et al. (2021) recommend R-hat < 1.01 and bulk and tail ESS > 100 per quantity.
    """

    rhat_max: float
    rhat_median: float
    ess_bulk_min: float
    ess_bulk_median: float
    ess_tail_min: float
    ess_tail_median: float
    acceptance: float


def diagnose(result: ChainResult) -> Diagnostics:
    samples = np.asarray(result.samples)
    r, bulk, tail = rank_rhat(samples), ess_bulk(samples), ess_tail(samples)
    return Diagnostics(
        float(np.nanmax(r)),
        float(np.nanmedian(r)),
        float(np.nanmin(bulk)),
        float(np.nanmedian(bulk)),
        float(np.nanmin(tail)),
        float(np.nanmedian(tail)),
        float(np.mean(np.asarray(result.acceptance))),
    )
