"""Exact Gaussian posteriors of linear-Gaussian tasks (and the hierarchical Poisson mixture).

For a task with a zero-mean GRF prior x ~ N(0, C), an affine forward map
F(x) = A x + b and Gaussian noise y = F(x) + eta, eta ~ N(0, Sigma = diag(sigma^2)),
the posterior is Gaussian with

    mean = C A^T S^-1 (y - b),            S = A C A^T + Sigma   (M x M),
    cov  = C - C A^T S^-1 A C,

and pathwise conditioning (Matheron's rule) turns prior draws into exact
posterior draws: x_post = x0 + C A^T S^-1 (y - b - A x0 - eta0), x0 ~ N(0, C),
eta0 ~ N(0, Sigma). Nothing of size N x N (N = H W) is formed: A^T e_m are M
adjoint solves (`jax.vjp` of `task.forward`), V = C A^T is M spectral
multiplications, the Gram matrix A V is M forward solves, and the M x M algebra
(Cholesky of S, log-determinant) runs in float64 NumPy. The pointwise prior
variance diag(C)_i = sum_k s_k^2 |T_ki|^2 comes from the separable basis T
(n transforms), so the posterior std is exact too.

Hierarchical GRF prior (the published Poisson prior, alpha ~ U, tau ~ U): given
(alpha, tau) the posterior is the Gaussian above with C = C(alpha, tau); the
hyperparameter posterior is p(alpha, tau | y) ∝ p(alpha, tau) N(y; b, S(alpha, tau)).
Gauss-Legendre quadrature on both ranges (`num_nodes` per axis) turns it into a
mixture of the nodes' conditional Gaussians with weights ∝ quadrature weight x
marginal likelihood — near exact when the hyperparameter posterior is smooth on
the node spacing (check by increasing `num_nodes`).
"""

from __future__ import annotations

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from posteriorjax import checks, random_fields, rng


def _basis_weights(prior) -> np.ndarray:
    """`A (n, n)` with A[k, i] = |T1[k, i]|^2 for the 1-D orthonormal factor T1 of the prior's basis."""
    n = prior.n
    e = np.zeros((n, n, n))
    e[np.arange(n), np.arange(n), 0] = 1.0  # image i: delta at (i, 0)
    q = random_fields.forward_transform(jnp.asarray(e), prior.basis)  # T1 e_i (T1 e_0)^T
    return np.asarray(jnp.sum(jnp.abs(q) ** 2, axis=-1)).T


def prior_pointwise_variance(prior: random_fields.GaussianRandomField, mode_std=None) -> np.ndarray:
    """diag(C) `(1, n, n)` of a fixed-hyperparameter GRF (exact, from the separable basis)."""
    a = _basis_weights(prior)
    s2 = np.asarray(prior.mode_std() if mode_std is None else mode_std, np.float64) ** 2
    return (a.T @ s2 @ a)[None]


def _spectral(x, multiplier, basis: str):
    """T^-1 (multiplier * T x) over the last two axes (C^(1/2) x or C x of a GRF)."""
    return random_fields.inverse_transform(
        random_fields.forward_transform(x, basis) * multiplier, basis
    ).astype(x.dtype)


@eqx.filter_jit
def adjoint_rows(task):
    """(b = F(0) `(M,)`, A^T e_m for every m `(M, C, H, W)`): M adjoint solves."""
    x0 = jnp.zeros(task.unknown_shape, jnp.result_type(float))
    offset, pullback = jax.vjp(task.forward, x0)
    return offset, jax.vmap(lambda e: pullback(e)[0])(jnp.eye(offset.shape[0], dtype=x0.dtype))


@eqx.filter_jit
def gram_matrix(task, at, offset, mode_std, basis):
    """(V = C A^T `(M, C, H, W)`, A C A^T `(M, M)`) for the GRF with per-mode std `mode_std`."""
    v = _spectral(at, mode_std.astype(at.dtype) ** 2, basis)
    return v, jax.vmap(task.forward)(v) - offset


@eqx.filter_jit
def _pathwise(task, key, idx, *, v, s_inv, y, std, mode_std, basis, batch_size):
    def one(i):
        k_x, k_eta = jr.split(jr.fold_in(key, i))
        x0 = _spectral(rng.normal(k_x, v.shape[1:], v.dtype), mode_std.astype(v.dtype), basis)
        r = y - task.forward(x0) - std * rng.normal(k_eta, y.shape, v.dtype)
        # Matheron's rule: x0 + C A^T S^-1 (y - F(x0) - eta) is an exact posterior draw
        return x0 + jnp.tensordot(s_inv @ r, v, axes=1)

    return jax.lax.map(one, idx, batch_size=batch_size)


@eqx.filter_jit
def _linearity_defect(task):
    k1, k2 = jr.split(jr.key(1234))
    x1, x2 = task.prior.sample(k1), task.prior.sample(k2)
    b = task.forward(jnp.zeros_like(x1))
    lhs = task.forward(x1 + x2) - b
    rhs = (task.forward(x1) - b) + (task.forward(x2) - b)
    return jnp.linalg.norm(lhs - rhs) / (jnp.linalg.norm(rhs) + 1e-30)  # a zero map is linear: 0, not NaN


def check_linear(task, rtol: float = 1e-3) -> None:
    """Raise unless the forward map of `task` is linear: the relative defect of F(x1 + x2) - b against
    (F(x1) - b) + (F(x2) - b), at two prior draws, at most `rtol`."""
    err = float(_linearity_defect(task))
    if not err <= rtol:
        raise ValueError(f"task: the forward map of {task.name!r} is not linear (relative defect {err:.2e})")


@dataclasses.dataclass(frozen=True)
class GaussianPosterior:
    """The exact posterior of one (prior C, observation y) pair.

    Attributes: `v` = C A^T `(M, C, H, W)`; `s_inv` = S^-1 `(M, M)`; `offset` b `(M,)`;
    `mean`, `std` `(C, H, W)`; `log_evidence` log N(y; b, S); `noise_std` `(M,)`; `prior`.
    """

    v: jax.Array
    s_inv: np.ndarray
    offset: jax.Array
    mean: np.ndarray
    std: np.ndarray
    log_evidence: float
    noise_std: np.ndarray
    mode_std: jax.Array
    basis: str
    y_obs: np.ndarray

    def kl_from_prior(self) -> float:
        """KL(posterior || prior) in nats, from M x M quantities only.

        With S = A C A^T + Sigma, r = y - b and lambda_k the `misfit_spectrum` eigenvalues:
        KL = 1/2 [sum_k log(1 + lambda_k) - sum_k lambda_k / (1 + lambda_k) + m^T C^-1 m], where
        sum log(1 + lambda) = log det S - log det Sigma, sum lambda / (1 + lambda) = M - tr(Sigma S^-1)
        and m^T C^-1 m = r^T S^-1 (S - Sigma) S^-1 r. A prior-proposal importance (or rejection)
        reference needs a pool of about exp(KL) candidates (Chatterjee & Diaconis 2018).
        """
        s_inv = np.asarray(self.s_inv, np.float64)
        var = np.asarray(self.noise_std, np.float64) ** 2
        r = np.asarray(self.y_obs, np.float64) - np.asarray(self.offset, np.float64)
        logdet = -np.linalg.slogdet(s_inv)[1] - np.sum(np.log(var))
        trace = s_inv.shape[0] - np.sum(var * np.diag(s_inv))
        a = s_inv @ r
        return float(0.5 * (logdet - trace + r @ a - a @ (var * a)))

    def sample(self, key, task, num: int, *, batch_size: int = 256) -> jax.Array:
        """`num` exact posterior draws `(num, C, H, W)` by pathwise conditioning; draw i uses fold_in(key, i).

        x0 = C^(1/2) xi (the prior's own square root), so the draws are exact for any `num`.
        """
        dtype = self.v.dtype
        return _pathwise(
            task,
            key,
            jnp.arange(num),
            v=self.v,
            s_inv=jnp.asarray(self.s_inv, dtype),
            y=jnp.asarray(self.y_obs, dtype),
            std=jnp.asarray(self.noise_std, dtype),
            mode_std=self.mode_std,
            basis=self.basis,
            batch_size=batch_size,
        )


def condition(task, y_obs, prior=None, *, mode_std=None, adjoint=None) -> GaussianPosterior:
    """Exact Gaussian posterior of `task` given `y_obs (M,)`, for a fixed-hyperparameter GRF `prior`

    (default `task.prior`; `mode_std` overrides its per-mode std). M adjoint + M
    forward solves (`adjoint` = precomputed `adjoint_rows(task)`); float64 M x M algebra.
    """
    prior = task.prior if prior is None else prior
    if not isinstance(prior, random_fields.GaussianRandomField | random_fields.HierarchicalGRF):
        raise ValueError(
            f"task: expected a fixed-hyperparameter GaussianRandomField prior, got {type(prior).__name__}"
        )
    if mode_std is None:
        if not isinstance(prior, random_fields.GaussianRandomField):
            raise ValueError("mode_std: required for a hierarchical prior (use condition_hierarchical)")
        mode_std = prior.mode_std()
    task.check_observation(y_obs)
    y = np.asarray(y_obs, np.float64)
    m = y.shape[0]
    offset, at = adjoint_rows(task) if adjoint is None else adjoint
    mode_std = jnp.asarray(mode_std, at.dtype)
    v, gram = gram_matrix(task, at, offset, mode_std, prior.basis)
    # float64 from here: S = A C A^T + Sigma of a smooth prior and a small noise is ill-conditioned,
    # and the solves computed A C A^T only up to round-off symmetry
    gram = np.asarray(gram, np.float64)
    gram = 0.5 * (gram + gram.T)
    noise_var = np.asarray(task.noise.variance(m), np.float64)
    chol = np.linalg.cholesky(gram + np.diag(noise_var))
    eye = np.eye(m)
    l_inv = np.linalg.solve(chol, eye)
    s_inv = l_inv.T @ l_inv
    r = y - np.asarray(offset, np.float64)
    v64 = np.asarray(v, np.float64).reshape(m, -1)
    mean = (v64.T @ (s_inv @ r)).reshape(task.unknown_shape)
    w = l_inv @ v64
    # diag(C - C A^T S^-1 A C), the second term as the column norms of L^-1 A C
    var = prior_pointwise_variance(prior, mode_std).reshape(-1) - np.sum(w**2, axis=0)
    z = l_inv @ r
    log_ev = -0.5 * z @ z - np.sum(np.log(np.diag(chol))) - 0.5 * m * np.log(2 * np.pi)
    return GaussianPosterior(
        v=v,
        s_inv=s_inv,
        offset=offset,
        mean=mean,
        std=np.sqrt(np.maximum(var, 0.0)).reshape(task.unknown_shape),  # round-off can dip below 0
        log_evidence=float(log_ev),
        noise_std=np.sqrt(noise_var),
        mode_std=mode_std,
        basis=prior.basis,
        y_obs=y,
    )


def misfit_spectrum(task, prior=None) -> np.ndarray:
    """Eigenvalues `(M,)`, descending, of the prior-preconditioned data-misfit Hessian.

    H = C^(1/2) A^T Sigma^-1 A C^(1/2) has the same nonzero eigenvalues as the M x M matrix
    Sigma^(-1/2) A C A^T Sigma^(-1/2); along eigenvector k the posterior variance (in the prior's
    whitened latent) is 1 / (1 + lambda_k). `sum_k lambda_k / (1 + lambda_k)` counts the
    data-informed directions; `lambda_max` and `sum_k lambda_k` set how small a pCN or MALA step
    must be. Fixed-hyperparameter GRF priors and linear forward maps only (as `condition`).
    """
    prior = task.prior if prior is None else prior
    if not isinstance(prior, random_fields.GaussianRandomField):
        raise ValueError(f"task: expected a GaussianRandomField prior, got {type(prior).__name__}")
    offset, at = adjoint_rows(task)
    _, gram = gram_matrix(task, at, offset, jnp.asarray(prior.mode_std(), at.dtype), prior.basis)
    gram = np.asarray(gram, np.float64)
    scale = 1.0 / np.sqrt(np.asarray(task.noise.variance(gram.shape[0]), np.float64))
    return np.linalg.eigvalsh(0.5 * (gram + gram.T) * np.outer(scale, scale))[::-1]


@dataclasses.dataclass(frozen=True)
class MixturePosterior:
    """Quadrature mixture over hyperparameter nodes: `components`, `weights (K,)`, `nodes (K, 2)`."""

    components: tuple[GaussianPosterior, ...]
    weights: np.ndarray
    nodes: np.ndarray

    @property
    def mean(self) -> np.ndarray:
        return sum(w * c.mean for w, c in zip(self.weights, self.components, strict=True))

    @property
    def std(self) -> np.ndarray:
        second = sum(w * (c.std**2 + c.mean**2) for w, c in zip(self.weights, self.components, strict=True))
        return np.sqrt(np.maximum(second - self.mean**2, 0.0))

    def sample(self, key, task, num: int) -> jax.Array:
        k_comp, k_draw = jr.split(key)
        comp = np.asarray(jr.choice(k_comp, len(self.weights), (num,), p=jnp.asarray(self.weights)))
        out = None
        for j in np.unique(comp):
            sel = np.flatnonzero(comp == j)
            draws = self.components[j].sample(jr.fold_in(k_draw, int(j)), task, sel.size)
            out = jnp.zeros((num,) + draws.shape[1:], draws.dtype) if out is None else out
            out = out.at[sel].set(draws)
        return out


def condition_hierarchical(task, y_obs, *, num_nodes: int = 8) -> MixturePosterior:
    """Near-exact posterior of a `HierarchicalGRF` task: Gauss-Legendre mixture over (alpha, tau)."""
    prior = task.prior
    if not isinstance(prior, random_fields.HierarchicalGRF):
        raise ValueError(f"task: expected a HierarchicalGRF prior, got {type(prior).__name__}")
    num_nodes = checks.positive_int("num_nodes", num_nodes)
    t, w = np.polynomial.legendre.leggauss(num_nodes)
    u, w = 0.5 * (t + 1.0), 0.5 * w
    (a0, a1), (t0, t1) = prior.alpha_range, prior.tau_range
    adjoint = adjoint_rows(task)
    comps, logw, nodes = [], [], []
    for i in range(num_nodes):
        for j in range(num_nodes):
            alpha, tau = a0 + (a1 - a0) * u[i], t0 + (t1 - t0) * u[j]
            s = random_fields.grf_mode_std(
                prior.n, alpha, tau, prior.basis, length=prior.length, sigma=prior.sigma
            )
            post = condition(task, y_obs, prior, mode_std=s, adjoint=adjoint)
            comps.append(post)
            logw.append(np.log(w[i] * w[j]) + post.log_evidence)
            nodes.append((alpha, tau))
    logw = np.asarray(logw)
    weights = np.exp(logw - logw.max())  # shifted by the max: no overflow, the ratios unchanged
    return MixturePosterior(tuple(comps), weights / weights.sum(), np.asarray(nodes))


def _conditioned(task, y_obs, num_nodes: int):
    if isinstance(task.prior, random_fields.HierarchicalGRF):
        post = condition_hierarchical(task, y_obs, num_nodes=num_nodes)
    else:
        post = condition(task, y_obs)
    check_linear(task)
    return post


def posterior(task, y_obs, *, num_nodes: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """Exact posterior `(mean, std)`, each `(C, H, W)`, of a linear-Gaussian task given `y_obs (M,)`.

    Hierarchical GRF priors give the quadrature mixture's mean and std.
    ValueError for other priors or a nonlinear forward map.
    """
    post = _conditioned(task, y_obs, num_nodes)
    return post.mean, post.std


def sample(key, task, y_obs, num: int, *, num_nodes: int = 8) -> jax.Array:
    """`num` exact posterior samples `(num, C, H, W)` by pathwise conditioning."""
    num = checks.positive_int("num", num)
    return _conditioned(task, y_obs, num_nodes).sample(key, task, num)
