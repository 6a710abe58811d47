"""The pressure solve of an IMPES step: the SPD system of the brine potential solved exactly by
block-tridiagonal elimination (`_block_factor`, `_block_solve`, each Schur complement inverted by
`_mmatrix_inverse`) inside `custom_linear_solve`, and one pressure step's total face fluxes and
well sources (`_pressure_step`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from posteriorjax.physics.co2._model import CO2Config

REFINEMENTS = 1  # steps of iterative refinement of each pressure solve (in the working precision)


def _mmatrix_inverse(off, g):
    """Inverse `(n, n)` of the symmetric M-matrix with off-diagonal part `off` (<= 0, zero diagonal)
    and row sums `g` (>= 0), by Gaussian elimination that never forms a difference.

    The GTH form of elimination (Grassmann, Taksar & Heyman 1985; for M-matrices given by their
    off-diagonal entries and row sums, O'Cinneide 1993, Alfa, Xue & Ye 2002): each pivot is the
    remaining row sum plus the magnitudes of the remaining off-diagonal entries, d_k = g_k -
    sum_{j>k} off_kj, each update adds quantities of one sign (off_jl -= off_jk off_kl / d_k, g_j
    -= off_jk g_k / d_k), and S = L D L^T with unit lower L <= 0 off the diagonal, so L^-1 >= 0 and
    S^-1 = L^-T D^-1 L^-1 are sums of non-negative terms: every entry to high relative accuracy
    however small the row sums are next to the diagonal. (A Cholesky factorization of the same
    matrix in float32 breaks down once the diagonal dominance falls below about 1e-7 relative.)
    """
    n = off.shape[0]
    idx = jnp.arange(n)
    offdiag = 1.0 - jnp.eye(n, dtype=off.dtype)

    def step(k, carry):
        off, g, low, d = carry
        row = jnp.where(idx > k, off[k], 0.0)  # off_kj, j > k (<= 0)
        dk = g[k] - jnp.sum(row)
        off = (off - jnp.outer(row, row) / dk) * offdiag
        g = g - row * (g[k] / dk)
        return off, g, low.at[:, k].set(row / dk), d.at[k].set(dk)

    init = (off * offdiag, g, jnp.zeros_like(off), jnp.zeros_like(g))
    _, _, low, d = jax.lax.fori_loop(0, n, step, init)
    eye = jnp.eye(n, dtype=off.dtype)
    m = jax.scipy.linalg.solve_triangular(low + eye, eye, lower=True, unit_diagonal=True)  # >= 0
    return (m.T / d) @ m


def _block_factor(off_z, off_r, c_out):
    """Inverse Schur complements `(nr, nz, nz)` of the block-tridiagonal pressure matrix.

    Block i is tridiag(off_z[:, i], ., off_z[:, i]) with its diagonal set by the row sums; blocks
    i, i+1 couple through diag(off_r[:, i]) (`off_*` <= 0, minus the face conductances). The
    matrix is a graph Laplacian of the conductances plus `c_out` on the last column (the outer
    Dirichlet face), so eliminating columns 0 .. i-1 leaves a Laplacian (Kron reduction) whose
    block i has row sums -off_r[:, i] (c_out for the last block): the Schur complement
    S_i = B_i - C W_{i-1} C is formed from its off-diagonal part, which has no cancellation, and
    these row sums, and inverted by `_mmatrix_inverse`. The row sums are the radial conductances,
    up to 1e8 times smaller than the vertical ones on the outer cells of coarse grids, so the
    usual diagonal B_i - (C W C)_kk is lost to rounding in float32 there.
    """
    grounded = jnp.concatenate([-off_r, c_out[:, None]], axis=1)  # (nz, nr) row sums of S_i

    def block_off(i):
        e = jnp.diag(off_z[:, i], 1)
        return e + e.T

    def step(w_prev, i):
        c = off_r[:, i - 1]
        w = _mmatrix_inverse(block_off(i) - c[:, None] * w_prev * c[None, :], grounded[:, i])
        return w, w

    w0 = _mmatrix_inverse(block_off(0), grounded[:, 0])
    _, ws = jax.lax.scan(step, w0, jnp.arange(1, off_r.shape[1] + 1))
    return jnp.concatenate([w0[None], ws], axis=0)


def _block_solve(w, off_r, b):
    """Solve with the factor from `_block_factor` (forward elimination, back substitution)."""

    def fwd(y_prev, inputs):
        wi_prev, c, bi = inputs
        y = bi - c * (wi_prev @ y_prev)
        return y, y

    y0 = b[:, 0]
    _, ys = jax.lax.scan(fwd, y0, (w[:-1], off_r.T, b[:, 1:].T))
    y = jnp.concatenate([y0[None], ys], axis=0)  # (nr, nz)

    def bwd(x_next, inputs):
        wi, c, yi = inputs
        x = wi @ (yi - c * x_next)
        return x, x

    x_last = w[-1] @ y[-1]
    _, xs = jax.lax.scan(bwd, x_last, (w[:-1], off_r.T, y[:-1]), reverse=True)
    return jnp.concatenate([xs, x_last[None]], axis=0).T


def _pressure_operator(c_r, c_out, c_z):
    """Matrix-free `Phi -> A Phi` with face conductances c_r, c_z and the outer Dirichlet c_out."""

    def matvec(p):
        fr = c_r * (p[:, :-1] - p[:, 1:])
        fz = c_z * (p[:-1] - p[1:])
        out = jnp.pad(fr, ((0, 0), (0, 1))) - jnp.pad(fr, ((0, 0), (1, 0)))
        out = out + jnp.pad(fz, ((0, 1), (0, 0))) - jnp.pad(fz, ((1, 0), (0, 0)))
        return out.at[:, -1].add(c_out * p[:, -1])

    return matvec


def _solve_pressure(c_r, c_out, c_z, rhs):
    """Phi solving the SPD pressure system exactly; implicit derivatives."""
    matvec = _pressure_operator(c_r, c_out, c_z)
    factor = jax.lax.stop_gradient(_block_factor(-c_z, -c_r, c_out))
    off_r = jax.lax.stop_gradient(-c_r)

    def solve(_, b):
        x = _block_solve(factor, off_r, b)
        for _ in range(REFINEMENTS):
            x = x + _block_solve(factor, off_r, b - matvec(x))
        return x

    return jax.lax.custom_linear_solve(matvec, rhs, solve, symmetric=True)


# ----------------------------------------------------------------------------
# One pressure step: total face fluxes and well sources


def _face_mean(a, axis):
    if axis == 0:
        return 0.5 * (a[:-1] + a[1:])
    return 0.5 * (a[:, :-1] + a[:, 1:])


def _pressure_step(s, perm, t, cfg: CO2Config, dz: float):
    """Total face fluxes, well sources and the CFL limit for saturation `s`."""
    t_r, t_out, t_z = t
    lw, lg = cfg.mobilities(s)
    lt = lw + lg
    grav = t_z * ((cfg.rho_w - cfg.rho_g) * cfg.gravity * dz)  # G of each vertical face
    c_r = t_r * _face_mean(lt, 1)
    c_z = t_z * _face_mean(lt, 0)
    c_out = t_out * lt[:, -1]
    lg_z = _face_mean(lg, 0)
    well = perm[:, 0] * lt[:, 0]
    q = cfg.volume_rate * well / jnp.sum(well)
    rhs = jnp.zeros_like(s).at[:, 0].add(q)
    gz = lg_z * grav
    rhs = rhs + jnp.pad(gz, ((0, 1), (0, 0))) - jnp.pad(gz, ((1, 0), (0, 0)))
    phi = _solve_pressure(c_r, c_out, c_z, rhs)
    v_r = c_r * (phi[:, :-1] - phi[:, 1:])
    v_z = c_z * (phi[:-1] - phi[1:]) - gz
    v_out = c_out * phi[:, -1]
    # Close the discrete mass balance exactly (rounding of the solve, largest in float32):
    # cell (k, i)'s imbalance is moved to its outer radial face, cumulatively, ending at
    # the far boundary; the transport then sees divergence-consistent fluxes.
    imbalance = _net_outflow(v_r, v_z, v_out) - jnp.zeros_like(s).at[:, 0].add(q)
    carried = jnp.cumsum(imbalance, axis=1)
    v_r = v_r - carried[:, :-1]
    v_out = v_out - carried[:, -1]
    return phi, v_r, v_z, v_out, q, grav


def _net_outflow(v_r, v_z, v_out):
    out = jnp.pad(v_r, ((0, 0), (0, 1))) - jnp.pad(v_r, ((0, 0), (1, 0)))
    out = out + jnp.pad(v_z, ((0, 1), (0, 0))) - jnp.pad(v_z, ((1, 0), (0, 0)))
    return out.at[:, -1].add(v_out)
