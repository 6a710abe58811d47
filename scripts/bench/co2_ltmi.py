"""CO2 injection and two-layer light transport: jitted, vmapped float32 forward solves/second
beside a NumPy implementation of the same scheme in the same run.

* ``co2``: `posteriorjax.physics.co2.simulate` (IMPES: block-tridiagonal pressure solve,
  adaptive CFL-limited hybrid-upwind saturation substeps) vs the same algorithm in NumPy
  (dense Cholesky blocks with `numpy.linalg`, a Python loop over substeps), float64. CPU
  size: 16 x 60 cells to 20 km, 2 years, 8 pressure steps; `--device`: the published
  64 x 200, 30 years. Also reports the substeps one sample needs.
* ``ltmi``: `posteriorjax.physics.radiative.solve` on 64 x 64 two-layer prior samples vs
  the same slab formulas, lateral spread and Richardson interface solve in NumPy, per sample.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from bench.common import best_time, record
from posteriorjax.physics import co2
from posteriorjax.physics import radiative as rt
from posteriorjax.tasks import ltmi

# ----------------------------------------------------------------------------
# NumPy CO2 (same discretization and time stepping)


def _np_faces(a, axis):
    return 0.5 * (a[:-1] + a[1:]) if axis == 0 else 0.5 * (a[:, :-1] + a[:, 1:])


def _np_block_solve(diag, c_r, c_z, b):
    nz, nr = diag.shape
    ws, ys = [], []
    for i in range(nr):
        s = np.diag(diag[:, i]) - np.diag(c_z[:, i], 1) - np.diag(c_z[:, i], -1)
        y = b[:, i].copy()
        if i:
            c = -c_r[:, i - 1]
            s -= c[:, None] * ws[-1] * c[None, :]
            y -= c * (ws[-1] @ ys[-1])
        chol = np.linalg.cholesky(s)
        inv = np.linalg.inv(chol)
        ws.append(inv.T @ inv)
        ys.append(y)
    x = np.zeros_like(b)
    x[:, -1] = ws[-1] @ ys[-1]
    for i in range(nr - 2, -1, -1):
        x[:, i] = ws[i] @ (ys[i] + c_r[:, i] * x[:, i + 1])
    return x


def numpy_co2(perm_md, porosity, grid: co2.RadialGrid, cfg: co2.CO2Config):
    perm = perm_md * co2.MILLIDARCY
    t_r, t_out, t_z = (np.asarray(a) for a in co2.transmissibilities(jnp.asarray(perm), grid, cfg.anisotropy))
    pv = porosity * grid.volumes()
    fmax, hmax = cfg.derivative_bounds()
    dt_p = cfg.duration / cfg.pressure_steps
    grav = t_z * (cfg.rho_w - cfg.rho_g) * cfg.gravity * grid.dz

    def mob(s):
        sw = np.clip((1 - s - cfg.swr) / (1 - cfg.swr), 0, 1)
        sg = np.clip((s - cfg.sgc) / (1 - cfg.swr - cfg.sgc), 0, 1)
        return sw**cfg.nw / cfg.mu_w, sg**cfg.ng / cfg.mu_g

    def frac(s):
        lw, lg = mob(s)
        return lg / (lw + lg)

    def net(v_r, v_z, v_out):
        out = np.pad(v_r, ((0, 0), (0, 1))) - np.pad(v_r, ((0, 0), (1, 0)))
        out += np.pad(v_z, ((0, 1), (0, 0))) - np.pad(v_z, ((1, 0), (0, 0)))
        out[:, -1] += v_out
        return out

    s = np.zeros(grid.shape)
    total = 0
    for _ in range(cfg.pressure_steps):
        lw, lg = mob(s)
        lt = lw + lg
        c_r, c_z, c_out = t_r * _np_faces(lt, 1), t_z * _np_faces(lt, 0), t_out * lt[:, -1]
        well = perm[:, 0] * lt[:, 0]
        q = cfg.volume_rate * well / well.sum()
        gz = _np_faces(lg, 0) * grav
        rhs = np.pad(gz, ((0, 1), (0, 0))) - np.pad(gz, ((1, 0), (0, 0)))
        rhs[:, 0] += q
        diag = np.zeros(grid.shape)
        diag[:, :-1] += c_r
        diag[:, 1:] += c_r
        diag[:-1] += c_z
        diag[1:] += c_z
        diag[:, -1] += c_out
        phi = _np_block_solve(diag, c_r, c_z, rhs)
        v_r, v_z, v_out = (
            c_r * (phi[:, :-1] - phi[:, 1:]),
            c_z * (phi[:-1] - phi[1:]) - gz,
            c_out * phi[:, -1],
        )
        imb = net(v_r, v_z, v_out)
        imb[:, 0] -= q
        carried = np.cumsum(imb, axis=1)
        v_r, v_out = v_r - carried[:, :-1], v_out - carried[:, -1]
        pos = lambda a: np.maximum(a, 0)  # noqa: E731
        out = np.pad(pos(v_r), ((0, 0), (0, 1))) + np.pad(pos(-v_r), ((0, 0), (1, 0)))
        out += np.pad(pos(v_z), ((0, 1), (0, 0))) + np.pad(pos(-v_z), ((1, 0), (0, 0)))
        out[:, -1] += pos(v_out)
        g = np.pad(grav, ((0, 1), (0, 0))) + np.pad(grav, ((1, 0), (0, 0)))
        limit = np.min(pv / np.maximum(fmax * out + hmax * g, 1e-300))
        n = max(int(np.ceil(dt_p / (cfg.cfl * limit))), 1)
        dt = dt_p / n
        total += n
        for _ in range(n):
            lw, lg = mob(s)
            f_r = frac(np.where(v_r > 0, s[:, :-1], s[:, 1:])) * v_r
            den = lg[1:] + lw[:-1]
            h = np.where(den > 0, lg[1:] * lw[:-1] / np.where(den > 0, den, 1), 0)
            f_z = frac(np.where(v_z > 0, s[:-1], s[1:])) * v_z - h * grav
            o = net(f_r, f_z, frac(s[:, -1]) * pos(v_out))
            o[:, 0] -= q
            s = s - dt * o / pv
    return s, total


def _co2_setup(args):
    if getattr(args, "device", False):
        return co2.RadialGrid(), co2.CO2Config(), 8
    return (
        co2.RadialGrid(16, 60, outer_radius=2.0e4, first_cell=10.0),
        co2.CO2Config(years=2.0, pressure_steps=8),
        4,
    )


def bench_co2(args) -> list[dict]:
    grid, cfg, batch = _co2_setup(args)
    rng = np.random.default_rng(0)
    perms = np.exp(rng.normal(np.log(150.0), 0.8, (batch, *grid.shape)))
    run = jax.jit(jax.vmap(lambda k: co2.simulate(k, 0.2, grid=grid, config=cfg)))
    ks = jnp.asarray(perms, jnp.float32)
    sol = run(ks)
    ours = batch / best_time(run, ks, repeats=2)
    steps = np.asarray(sol.substeps).sum(axis=1)
    base_time = best_time(lambda: numpy_co2(perms[0], 0.2, grid, cfg), repeats=1, warmup=0)
    s_np, _ = numpy_co2(perms[0], 0.2, grid, cfg)
    diff = float(np.abs(np.asarray(sol.saturation[0]) - s_np).max())
    return [
        record(
            f"co2 {grid.nz}x{grid.nr} {cfg.years:g}y",
            "solves/s",
            ours,
            1.0 / base_time,
            "numpy same scheme",
            batch=batch,
            pressure_steps=cfg.pressure_steps,
            substeps_median=float(np.median(steps)),
            max_abs_diff_vs_numpy=diff,
        ),
    ]


# ----------------------------------------------------------------------------
# NumPy light transport


def numpy_transport(sigma, albedo, asymmetry, spread, tol=1e-6):
    w, _, g1, g2, g3, g4, k, mu0, f = rt._coefficients(albedo, asymmetry, 1.0)
    tau = sigma * (1 - albedo * f)

    def slab(t):
        x = k * t
        th = np.where(x < 1e-3, 1 - x * x / 3, np.tanh(np.maximum(x, 1e-3)) / np.maximum(x, 1e-3))
        den = 1 + g1 * t * th
        r, tr = g2 * t * th / den, (2 * np.exp(-x) / (1 + np.exp(-2 * x))) / den
        det = 1 / mu0**2 - k * k
        a = -(w / mu0) * (g3 * (g1 - 1 / mu0) + g2 * g4) / det
        b = -(w / mu0) * (g4 * (g1 + 1 / mu0) + g2 * g3) / det
        e = np.exp(-t / mu0)
        return r, tr, a - r * b - tr * a * e, b * e - tr * b - r * a * e, e

    def blur(u, t):
        steps = rt.spread_steps(spread)
        d = 0.5 * (spread * (1 - np.exp(-t / (1 - albedo * f)))) ** 2
        dy, dx = 0.5 * (d[:-1] + d[1:]), 0.5 * (d[:, :-1] + d[:, 1:])
        for _ in range(steps):
            fy, fx = dy * np.diff(u, axis=0), dx * np.diff(u, axis=1)
            div = np.pad(fy, ((0, 1), (0, 0))) - np.pad(fy, ((1, 0), (0, 0)))
            div += np.pad(fx, ((0, 0), (0, 1))) - np.pad(fx, ((0, 0), (1, 0)))
            u = u + div / steps
        return u

    (r1, t1, sr1, st1, e1), (r2, t2, sr2, st2, e2) = slab(tau[0]), slab(tau[1])
    rhs = blur(st1 + r1 * blur(sr2 * e1, tau[1]), tau[0])
    diag = 1 - r1 * r2
    x = rhs / diag
    for _ in range(200):
        res = rhs - (x - blur(r1 * blur(r2 * x, tau[1]), tau[0]))
        if np.linalg.norm(res) <= tol * np.linalg.norm(rhs):
            break
        x = x + res / diag
    up = blur(sr2 * e1 + r2 * x, tau[1])
    return blur(sr1 + t1 * up, tau[0]), e1 * e2 + blur(st2 * e1 + t2 * x, tau[1])


def bench_ltmi(args) -> list[dict]:
    n, batch = (64, 1024) if getattr(args, "device", False) else (64, 32)
    prior = ltmi.LayeredMorphology(n)
    sigma = jax.vmap(lambda i: prior.sample(jax.random.fold_in(jax.random.key(0), i)))(jnp.arange(batch))
    run = jax.jit(jax.vmap(rt.solve))
    out = run(sigma)
    ours = batch / best_time(run, sigma, repeats=3)
    sig_np = np.asarray(sigma, np.float64)
    base = best_time(lambda: [numpy_transport(s, 0.9, 0.5, 1.5) for s in sig_np[:8]], repeats=2, warmup=0)
    ref = numpy_transport(sig_np[0], 0.9, 0.5, 1.5)
    diff = float(np.abs(np.asarray(out[0, 1]) - ref[1]).max())
    return [
        record(
            f"ltmi two-layer {n}x{n}",
            "solves/s",
            ours,
            8 / base,
            "numpy same scheme",
            batch=batch,
            max_abs_diff_vs_numpy=diff,
        ),
    ]


BENCHMARKS = {"co2": bench_co2, "ltmi": bench_ltmi}
