"""Light transport through two stacked participating layers: two-stream columns, adding, lateral spread.

Geometry. Two horizontal layers of geometric thickness `thickness` (so optical
thickness tau = sigma * thickness) are stacked along the viewing direction; each is
described by an extinction field sigma_l `(H, W)` (pixel columns). A collimated beam
of unit flux falls on the top layer at cosine `mu0`; outputs are the reflectance R
(diffuse flux leaving the top) and the transmittance T (direct plus diffuse flux
leaving the bottom), `(H, W)` each, as fractions of the incident flux.

Columns. Each layer is a homogeneous plane-parallel slab per pixel, solved by the
two-stream approximation with delta-Eddington scaling (f = g^2):
tau' = (1 - w f) tau, w' = (1 - f) w / (1 - w f), g' = g / (1 + g); hemispheric-mean
coefficients gamma1 = 2 - w'(1 + g'), gamma2 = w'(1 - g') for the diffuse field (so
reflectances stay >= 0 for any albedo) and the Eddington backscatter fraction
gamma3 = (2 - 3 g' mu0) / 4, gamma4 = 1 - gamma3 for the scattered direct beam:

    dF_up/dtau = gamma1 F_up - gamma2 F_dn - gamma3 w' I / mu0,
    dF_dn/dtau = gamma2 F_up - gamma1 F_dn + gamma4 w' I / mu0,   I = exp(-tau / mu0).

Exact slab solutions (k^2 = gamma1^2 - gamma2^2): diffuse reflectance and transmittance
r = gamma2 tau th / (1 + gamma1 tau th), t = sech(k tau) / (1 + gamma1 tau th),
th = tanh(k tau) / (k tau); the direct-beam responses follow from the particular
solution (A, B) exp(-tau / mu0) plus the homogeneous response to its boundary values:
s_r = A - r B - t A e, s_t = B e - t B - r A e, e = exp(-tau' / mu0). (At the resonance
k mu0 = 1, mu0 is moved by 1e-4 relative, for all terms alike.) With w = 1 the slab
conserves energy exactly; with w = 0, R = 0 and T = exp(-tau / mu0).

Adding with lateral spread. Light scattered inside layer l spreads sideways by a
conservative diffusion B_l (no-flux image edges) of width s_l = spread (1 - exp(-tau_l))
pixels: `spread` steps of `div(D grad u)` with D = s^2 / 2, so each B_l is symmetric,
doubly stochastic and the identity where tau_l = 0. The interface fluxes satisfy

    D = B1 (s1_t + r1 U),   U = B2 (s2_r e1 + r2 D),
    R = B1 (s1_r + t1 U),   T = e1 e2 + B2 (s2_t e1 + t2 D),

solved for D by Richardson iteration preconditioned by the pixelwise 1 / (1 - r1 r2)
(exact in one step without spread; contraction factor <= max r1 r2 < 1), inside
`jax.lax.custom_linear_solve` for implicit derivatives; without spread (spread = 0) it
is the pixelwise adding formula D = (s1_t + r1 s2_r e1) / (1 - r1 r2). Energy is conserved over the image:
mean(R + T + absorption) = 1, and per pixel for uniform layers.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from posteriorjax import checks
from posteriorjax.physics import linear

EXTINCTION_RANGE = (0.01, 5.0)


class Slab(NamedTuple):
    """Per-pixel two-stream response of one layer: diffuse `r`, `t`; direct-beam `s_r`, `s_t`; direct `e`."""

    r: jax.Array
    t: jax.Array
    s_r: jax.Array
    s_t: jax.Array
    e: jax.Array


class Radiance(NamedTuple):
    """`reflectance (H, W)`, `transmittance (H, W)`, `absorption (2, H, W)` per layer."""

    reflectance: jax.Array
    transmittance: jax.Array
    absorption: jax.Array


def _check_optics(albedo, asymmetry, mu0, thickness, spread):
    for name, value, lo, hi in (
        ("albedo", albedo, 0.0, 1.0),
        ("asymmetry", asymmetry, -1.0, 1.0),
    ):
        if not (isinstance(value, (int, float)) and lo <= value <= hi):
            raise ValueError(f"{name}: expected a number in [{lo}, {hi}], got {value!r}")
    if not (isinstance(mu0, (int, float)) and 0 < mu0 <= 1):
        raise ValueError(f"mu0: expected a number in (0, 1], got {mu0!r}")
    checks.positive("thickness", thickness)
    if not (isinstance(spread, (int, float)) and math.isfinite(spread) and spread >= 0):
        raise ValueError(f"spread: expected a finite number >= 0 (pixels), got {spread!r}")


def _coefficients(albedo: float, asymmetry: float, mu0: float):
    """Delta-scaled (w', g'), gammas, k and the (possibly de-resonated) mu0; static floats."""
    f = asymmetry**2
    w = (1 - f) * albedo / (1 - albedo * f) if albedo * f < 1 else 1.0
    g = asymmetry / (1 + asymmetry)
    g1, g2 = 2 - w * (1 + g), w * (1 - g)
    g3 = (2 - 3 * g * mu0) / 4
    k = math.sqrt(max(g1 * g1 - g2 * g2, 0.0))
    if abs(1 - (k * mu0) ** 2) < 1e-4:
        mu0 = mu0 * (1 - 1e-4) if mu0 * (1 - 1e-4) > 0 else mu0 * (1 + 1e-4)
        g3 = (2 - 3 * g * mu0) / 4
    return w, g, g1, g2, g3, 1 - g3, k, mu0, f


def _tanhc(x):
    small = x < 1e-3
    xs = jnp.where(small, 1.0, x)
    return jnp.where(small, 1 - x * x / 3, jnp.tanh(xs) / xs)


def _sech(x):
    ex = jnp.exp(-x)
    return 2 * ex / (1 + ex * ex)


def slab(tau, albedo: float, asymmetry: float, mu0: float = 1.0) -> Slab:
    """Two-stream (delta-Eddington) response of homogeneous slabs of optical thickness `tau` (any shape)."""
    w, _, g1, g2, g3, g4, k, mu0, f = _coefficients(albedo, asymmetry, mu0)
    tau_s = (1 - albedo * f) * tau
    th = _tanhc(k * tau_s)
    den = 1 + g1 * tau_s * th
    r = g2 * tau_s * th / den
    t = _sech(k * tau_s) / den
    det = 1 / mu0**2 - k * k
    a = -(w / mu0) * (g3 * (g1 - 1 / mu0) + g2 * g4) / det
    b = -(w / mu0) * (g4 * (g1 + 1 / mu0) + g2 * g3) / det
    e = jnp.exp(-tau_s / mu0)
    s_r = a - r * b - t * a * e
    s_t = b * e - t * b - r * a * e
    return Slab(r, t, s_r, s_t, e)


def spread_steps(spread: float) -> int:
    """Explicit diffusion steps of the lateral spread (stable: 4 D dt <= 1)."""
    return max(1, math.ceil(2 * spread**2))


def lateral_spread(u, tau, spread: float):
    """B u: conservative diffusion of `u (H, W)` with width spread (1 - exp(-tau)) pixels.

    `steps` explicit steps of u += dt div(D grad u), D = s^2 / 2 on cells, arithmetic
    face means, no flux through the image edges: symmetric, doubly stochastic, >= 0.
    """
    if spread == 0:
        return u
    steps = spread_steps(spread)
    d = 0.5 * (spread * (1 - jnp.exp(-tau))) ** 2
    dy, dx = 0.5 * (d[:-1] + d[1:]), 0.5 * (d[:, :-1] + d[:, 1:])
    dt = 1.0 / steps

    def step(v, _):
        fy = dy * (v[1:] - v[:-1])
        fx = dx * (v[:, 1:] - v[:, :-1])
        div = jnp.pad(fy, ((0, 1), (0, 0))) - jnp.pad(fy, ((1, 0), (0, 0)))
        div = div + jnp.pad(fx, ((0, 0), (0, 1))) - jnp.pad(fx, ((0, 0), (1, 0)))
        return v + dt * div, None

    return jax.lax.scan(step, u, None, length=steps)[0]


def _richardson(matvec, b, diag, tol, maxiter=200):
    """Preconditioned Richardson x <- x + (b - A x) / diag until ||b - A x|| <= tol ||b||."""
    bnorm = jnp.sqrt(jnp.sum(b * b))

    def cond(state):
        _, rnorm, k = state
        return (rnorm > tol * bnorm) & (k < maxiter)

    def body(state):
        x, _, k = state
        x = x + (b - matvec(x)) / diag
        r = b - matvec(x)
        return x, jnp.sqrt(jnp.sum(r * r)), k + 1

    x0 = b / diag
    r0 = b - matvec(x0)
    return jax.lax.while_loop(cond, body, (x0, jnp.sqrt(jnp.sum(r0 * r0)), 0))[0]


def _solve_interface(matvec, rhs, diag, tol):
    """(I - R1 R2)^-1 rhs with implicit derivatives; converges at rate <= max r1 r2 (< 1)."""
    # diag only preconditions the iteration; custom_linear_solve differentiates the solution
    # implicitly, so no derivative should flow through it
    diag = jax.lax.stop_gradient(diag)

    def solve(mv, b):
        return _richardson(mv, b, diag, tol)

    return jax.lax.custom_linear_solve(matvec, rhs, solve, transpose_solve=solve)


def _check_extinction(sigma):
    if jnp.ndim(sigma) != 3 or jnp.shape(sigma)[0] != 2 or min(jnp.shape(sigma)[1:]) < 2:
        raise ValueError(f"sigma: expected shape (2, H, W) (two layers, H, W >= 2), got {jnp.shape(sigma)}")
    if linear.is_concrete(sigma):
        s = np.asarray(sigma)
        bad = ~np.isfinite(s) | (s < 0)
        if bad.any():
            raise ValueError(
                f"sigma: expected non-negative, finite extinction, got {int(bad.sum())} negative or "
                "non-finite entries"
            )


def transport(
    sigma,
    *,
    albedo: float = 0.9,
    asymmetry: float = 0.5,
    mu0: float = 1.0,
    thickness: float = 1.0,
    spread: float = 1.5,
    rtol: float | None = None,
) -> Radiance:
    """Reflectance, transmittance and per-layer absorption of the two-layer medium.

    Args:
      sigma: extinction `(2, H, W)` (layer 0 on top), >= 0 and finite, per unit thickness.
      albedo: single-scattering albedo in [0, 1] (static).
      asymmetry: asymmetry parameter g in [-1, 1] (static).
      mu0: cosine of the incidence angle.
      thickness: layer thickness (tau = sigma * thickness).
      spread: maximum lateral width (pixels) of the in-layer diffusion kernel; 0 disables.
      rtol: relative tolerance of the inter-layer solve (default 1e-10 float64, 1e-6 float32).

    Returns `Radiance`; jit/vmap/grad/jacfwd-able.
    """
    _check_optics(albedo, asymmetry, mu0, thickness, spread)
    _check_extinction(sigma)
    sigma = jnp.asarray(sigma, linear.float_dtype(sigma))
    return _transport(
        sigma, float(albedo), float(asymmetry), float(mu0), float(thickness), float(spread), rtol
    )


@functools.partial(jax.jit, static_argnums=(1, 2, 3, 4, 5, 6))
def _transport(sigma, albedo, asymmetry, mu0, thickness, spread, rtol) -> Radiance:
    sigma = checks.error_if(
        sigma, ~jnp.all(jnp.isfinite(sigma) & (sigma >= 0)), "sigma: expected non-negative, finite extinction"
    )
    tau = sigma * thickness
    one, two = slab(tau[0], albedo, asymmetry, mu0), slab(tau[1], albedo, asymmetry, mu0)
    b1 = lambda u: lateral_spread(u, tau[0], spread)  # noqa: E731
    b2 = lambda u: lateral_spread(u, tau[1], spread)  # noqa: E731
    rhs = b1(one.s_t + one.r * b2(two.s_r * one.e))
    diag = 1 - one.r * two.r
    if spread == 0:
        down = rhs / diag
    else:
        tol = (1e-10 if jnp.finfo(sigma.dtype).bits >= 64 else 1e-6) if rtol is None else rtol

        def matvec(x):
            return x - b1(one.r * b2(two.r * x))

        down = _solve_interface(matvec, rhs, diag, tol)
    up = b2(two.s_r * one.e + two.r * down)
    refl = b1(one.s_r + one.t * up)
    trans = one.e * two.e + b2(two.s_t * one.e + two.t * down)
    a1 = (1 - one.s_r - one.s_t - one.e) + (1 - one.r - one.t) * up
    a2 = (1 - two.s_r - two.s_t - two.e) * one.e + (1 - two.r - two.t) * down
    return Radiance(refl, trans, jnp.stack([a1, a2]))


def solve(sigma, **options) -> jax.Array:
    """Reflectance and transmittance `(2, H, W)` of the extinction `sigma (2, H, W)` (see `transport`)."""
    out = transport(sigma, **options)
    return jnp.stack([out.reflectance, out.transmittance])


def residual(sigma, u, **options) -> jax.Array:
    """Energy residual `(1, H, W)`: 1 - R - T - absorption, pixelwise, with R, T from `u (2, H, W)`.

    Zero for uniform layers; in general its image mean vanishes (lateral spread
    moves energy between pixels).
    """
    out = transport(sigma, **options)
    return (1 - u[0] - u[1] - out.absorption.sum(0))[None]


__all__ = [
    "EXTINCTION_RANGE",
    "Radiance",
    "Slab",
    "lateral_spread",
    "residual",
    "slab",
    "solve",
    "spread_steps",
    "transport",
]
