"""Observation geometry: forward-mode Jacobian + full SVD vs a finite-difference Jacobian, same run.

* ``geometry_interface``: `metrics.geometry.analyze` on the 17-coefficient
  ``interface_transport`` task (64 x 64 grid, 2 history frames) — `jax.jacfwd`
  through the solver, then the SVD — against a central-difference Jacobian
  (2 x 17 jitted forward solves, one at a time, as a loop-based FD code would do) + the same SVD.
* ``geometry_field``: a 32 x 32 field unknown (m = 1024) observed through the
  Darcy solve at 64 point sensors: chunked forward-mode JVPs (`jacobian(...,
  chunk_size=128)`) vs central differences batched the same way (2 m solves).

Throughput unit: Jacobian + SVD analyses per second (higher is better).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from bench.common import best_time, record
from posteriorjax import observations, tasks
from posteriorjax.grids import Grid
from posteriorjax.metrics import geometry as geo
from posteriorjax.physics import darcy
from posteriorjax.tasks import interface


def _fd_jacobian(fn, c0, h, batch_size=None):
    flat = c0.ravel()
    eye = jnp.eye(flat.size, dtype=flat.dtype)

    def col(e):
        return (fn(flat + h * e) - fn(flat - h * e)) / (2 * h)

    if batch_size is None:
        return jnp.stack([col(e) for e in eye], axis=1)
    return jax.lax.map(col, eye, batch_size=batch_size).T


def bench_interface(args):
    task = tasks.get("interface_transport", resolution=64, frames=2)
    fn, c0, cov = interface.observation_map(task)
    fn = jax.jit(fn)
    c0 = jnp.asarray(c0)

    def ours():
        return geo.analyze(fn, c0, noise_cov=cov).singular_values

    jac = jax.jit(jax.jacfwd(fn))

    def ours_jit():
        return geo.from_jacobian(jac(c0), noise_cov=cov).singular_values

    def baseline():
        return geo.from_jacobian(_fd_jacobian(fn, c0, 1e-3), noise_cov=cov).singular_values

    t_ours = best_time(ours_jit, repeats=3)
    t_base = best_time(baseline, repeats=3)
    return [
        record(
            "geometry_interface_m17",
            "analyses/s",
            1 / t_ours,
            1 / t_base,
            "central FD Jacobian (34 solves)",
            m=17,
            p=task.num_observations,
            grid=64,
        ),
    ]


def bench_field(args):
    n, m_side = 32, 32
    grid = Grid(n)
    sensors = observations.point_sensors(grid, 64, seed=0)

    def fn(a_flat):
        return sensors(darcy.solve(jnp.exp(a_flat.reshape(n, n)), grid))

    c0 = jnp.zeros(m_side * m_side, jnp.float32)
    jac = jax.jit(lambda c: geo.jacobian(fn, c, chunk_size=128))
    fd = jax.jit(lambda c: _fd_jacobian(fn, c, 1e-2, batch_size=128))

    def ours():
        return geo.from_jacobian(np.asarray(jac(c0), np.float64), noise_cov=1e-8).singular_values

    def baseline():
        return geo.from_jacobian(np.asarray(fd(c0), np.float64), noise_cov=1e-8).singular_values

    t_ours = best_time(ours, repeats=2)
    t_base = best_time(baseline, repeats=2)
    return [
        record(
            "geometry_field_32x32",
            "analyses/s",
            1 / t_ours,
            1 / t_base,
            "central FD Jacobian (2048 solves)",
            m=m_side * m_side,
            p=64,
            chunk=128,
        ),
    ]


BENCHMARKS = {"geometry_interface": bench_interface, "geometry_field": bench_field}
