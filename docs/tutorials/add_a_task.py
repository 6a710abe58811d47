"""Add a task: physics, builder, registration, the task contract, and a sweep on it.

    python docs/tutorials/add_a_task.py --workdir=/tmp/helmholtz

The task: recover the source f of a damped Helmholtz problem, -lap(u) - k^2 u + d u = f with
u = 0 on the boundary of the unit square (`physics.helmholtz`, solved exactly in the sine
basis), from u at point sensors with Gaussian noise. The prior of f is the cosine Gaussian
random field of `poisson_fixed`, so prior, physics and observation are linear-Gaussian and the
exact posterior is available as the reference (`reference.exact` checks the linearity itself).

A task is a `tasks.Task`: a prior (`sample`, `latent`, `transform`), a physics module (an
`AbstractPhysics`: `__call__` maps the unknown `(C, H, W)` to the state, `residual` gives
the discrete PDE residual), an observation operator of the state, the noise, the prior
statistics of the evaluated field (the SWD z-score) and one named `Channel` with its unit per
channel. A builder takes keyword options and returns the task; `tasks.register(name,
builder)` makes it available to `tasks.get`, the sweep and the exports.
`posteriorjax.testing.check_task` runs the contract the registry-wide tests check for the
built-in tasks (shapes, channels, fixed cases, forward under jit and vmap, the noise).

In the package the builder goes in `posteriorjax/tasks/<name>.py` with its `register` line,
and `tests/test_tasks.py` fails until the registry-wide test has small options for it; out of
tree it is a plugin module (`--plugins=my_module`, see "Extending"). The last step sweeps the
`prior` and `exact` samplers on the new task (2 cases x 16 samples at 16 x 16).
"""

from __future__ import annotations

import argparse
import math

import equinox as eqx
import jax

from posteriorjax import random_fields, tasks
from posteriorjax.grids import Grid
from posteriorjax.observations import GaussianNoise
from posteriorjax.physics import helmholtz
from posteriorjax.tasks import AbstractPhysics, Channel, Task
from posteriorjax.tasks.base import check_options, sensors_or_pooled

NAME = "helmholtz_source"


class HelmholtzPhysics(AbstractPhysics):
    """`f (1, n, n) -> u (1, n, n)` solving -lap(u) - k^2 u + damping u = f, u = 0 on the boundary."""

    grid: Grid = eqx.field(static=True)
    k: float = eqx.field(static=True)
    damping: float = eqx.field(static=True)

    def __call__(self, x: jax.Array) -> jax.Array:
        return helmholtz.solve(x[0], self.grid, self.k, damping=self.damping)[None]

    def residual(self, x: jax.Array, u: jax.Array) -> jax.Array:
        return helmholtz.residual(x[0], u[0], self.grid, self.k, damping=self.damping)[None]


def build(
    resolution: int = 32,
    k: float = 4.0,
    damping: float = 1.0,
    num_sensors: int = 64,
    sensor_seed: int = 0,
    noise_std: float = 1e-3,
) -> Task:
    """The Helmholtz source task; `k` in radians per unit length (keep k / resolution well below 1)."""
    check_options(resolution=resolution, noise_std=noise_std, num_sensors=num_sensors, k=k)
    grid = Grid(resolution, 1.0, "dirichlet")
    helmholtz.check_resonance(grid, k, damping)  # a named error at an eigenvalue of -lap
    prior = random_fields.GaussianRandomField(resolution, 2.0, 3.0, "cosine")
    config = dict(
        resolution=resolution, k=k, damping=damping, num_sensors=num_sensors, sensor_seed=sensor_seed,
        noise_std=noise_std,
    )  # fmt: skip
    return Task(
        name=NAME,
        grid=grid,
        prior=prior,
        physics=HelmholtzPhysics(grid, float(k), float(damping)),
        observation=sensors_or_pooled(grid, "sensors", num_sensors=num_sensors, sensor_seed=sensor_seed),
        noise=GaussianNoise(noise_std),
        field_stats=(0.0, math.sqrt(prior.pointwise_variance())),
        config=tuple(sorted(config.items())),
        channels=(Channel("source f", "-"),),
    )


def register() -> None:
    """Register the task once (a second import of this module is a no-op)."""
    if NAME not in tasks.names():
        tasks.register(NAME, build)


def study_config(resolution: int = 16, num_cases: int = 2, num_samples: int = 16):
    """A sweep on the new task: the prior and the exact posterior against the exact reference."""
    import ml_collections

    from posteriorjax import sweep

    config = ml_collections.ConfigDict()
    config.seed = 0
    config.seeds = (0,)
    config.num_cases = num_cases
    config.num_samples = num_samples
    config.chunk_size = 8
    config.batch_size = 2
    config.overwrite = False
    config.tasks = {NAME: {"resolution": resolution, "num_sensors": 32}}
    config.reference = sweep.reference_config("exact", num_samples=64)
    config.samplers = {"prior": {}, "exact": {}}
    config.save_samples = 0
    config.figures = False
    return config


def main(workdir) -> str:
    """Register and check the task, then sweep it in `workdir`; returns the summary table."""
    from posteriorjax import sweep, testing
    from posteriorjax.report import records, tables

    register()
    task = tasks.get(NAME, resolution=16, num_sensors=32)
    testing.check_task(task)  # raises AssertionError naming the property that fails
    sweep.run(study_config(), workdir, progress=False)
    summary = tables.write_tables(workdir, records.load_records(f"{workdir}/results.jsonl"))
    print(summary)
    return summary


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", required=True, help="sweep workdir (created; an existing one resumes)")
    main(parser.parse_args().workdir)
