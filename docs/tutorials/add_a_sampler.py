"""Add a sampler: write it, register it, check its contract, score it against the exact posterior.

    python docs/tutorials/add_a_sampler.py --workdir=/tmp/rml

The sampler is randomized maximum likelihood (RML, also called randomize-then-optimize) in the
prior's latent space. The prior of a task is a transform of a standard-normal latent,
x = T(z) (`task.prior.latent`, `task.prior.transform`). Each member draws a prior latent
z0 ~ N(0, I) and a perturbed observation y' = y_obs + sigma e, e ~ N(0, I), and minimizes

    J(z) = 0.5 ||(F(T(z)) - y') / sigma||^2 + 0.5 ||z - z0||^2

by `num_steps` steps of gradient descent (hyperparameter `step_size`). For a linear forward map
and a Gaussian prior (`poisson_fixed`) the minimizer is an exact posterior draw; with too few
steps the members stay near their prior draws. Three things make it a sampler of the package:

1. a subclass of `samplers.AbstractSampler` with `defaults` (its numeric hyperparameters,
   swept by vmap) and a pure `_sample(key, y_obs, num_samples, hparams) -> (N, C, H, W)`;
   structural options (here `num_steps`) are static fields;
2. a builder `build(task, **options)` registered with `samplers.register(name, build)`;
3. `testing.check_sampler` passing: jit, vmap over cases and hyperparameters, one
   compilation, determinism for a fixed key, dependence on key and data, named errors.

In the package this is `posteriorjax/samplers/<name>.py` with its `register` line beside
`build` (the package imports every module it holds) and a small config in
`tests/test_samplers_registry.py`; out of tree it is a plugin module (`--plugins=my_module`,
see "Extending"). The last step runs a sweep (`sweep.run`) with the new sampler beside the
built-in `prior` and `exact` samplers, on `poisson_fixed` at 16 x 16 with 8 sensors and noise
1e-2 (as `examples/plugin_sampler.py`'s variant), and prints its table.
"""

from __future__ import annotations

import argparse

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr

from posteriorjax import checks, samplers
from posteriorjax.samplers import AbstractSampler

NAME = "rml"
TASK_OPTIONS = {"resolution": 16, "num_sensors": 8, "noise_std": 1e-2}


class RandomizedMaximumLikelihood(AbstractSampler):
    """RML by gradient descent in the prior's latent; hyperparameter `step_size` (>= 0).

    Attributes:
      num_steps: gradient steps per member (static: a loop length).
    """

    num_steps: int = eqx.field(static=True)

    def _sample(self, key, y_obs, num_samples, hparams):
        task = self.task

        def objective(z, z0, y_pert):
            r = task.noise.whiten(task.forward(task.prior.transform(z)) - y_pert)
            return 0.5 * jnp.sum(r**2) + 0.5 * jnp.sum((z - z0) ** 2)

        def member(k):
            k_prior, k_noise = jr.split(k)
            z0 = task.prior.latent(k_prior)
            y_pert = y_obs + task.noise.sample(k_noise, y_obs.shape)  # a draw of the task's noise

            def step(z, _):
                return z - hparams["step_size"] * jax.grad(objective)(z, z0, y_pert), None

            z, _ = jax.lax.scan(step, z0, None, length=self.num_steps)
            return task.prior.transform(z)

        return jax.vmap(member)(jr.split(key, num_samples))


def build(task, num_steps: int = 200) -> RandomizedMaximumLikelihood:
    """`samplers.get("rml", task, num_steps=S)`; `step_size` defaults to 0.01."""
    num_steps = checks.positive_int("num_steps", num_steps)
    return RandomizedMaximumLikelihood(task, {"step_size": 0.01}, num_steps)


def register() -> None:
    """Register the sampler once (a second import of this module is a no-op)."""
    if NAME not in samplers.names():
        samplers.register(NAME, build)


def study_config(num_cases: int = 2, num_samples: int = 16, num_steps: int = 200):
    """A sweep: `rml` over two step sizes beside `prior` and `exact`, exact reference."""
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
    config.tasks = {"poisson_fixed": dict(TASK_OPTIONS)}
    config.reference = sweep.reference_config("exact", num_samples=64)
    config.samplers = {
        "prior": {},
        "exact": {},
        NAME: {"options": {"num_steps": num_steps}, "axes": {"step_size": (0.002, 0.01)}},
    }
    config.save_samples = 0
    config.figures = False
    return config


def main(workdir, *, num_steps: int = 200) -> str:
    """Register, check and sweep the sampler in `workdir`; returns the summary table."""
    from posteriorjax import sweep, tasks, testing
    from posteriorjax.report import records, tables

    register()
    task = tasks.get("poisson_fixed", **TASK_OPTIONS)
    # the contract every registered sampler meets (raises AssertionError naming a failed property)
    testing.check_sampler(NAME, task, config={"num_steps": 4}, hparams={"step_size": 0.005})
    sweep.run(study_config(num_steps=num_steps), workdir, progress=False)
    summary = tables.write_tables(workdir, records.load_records(f"{workdir}/results.jsonl"))
    print(summary)
    return summary


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", required=True, help="sweep workdir (created; an existing one resumes)")
    parser.add_argument("--num_steps", type=int, default=200, help="gradient steps per member")
    args = parser.parse_args()
    main(args.workdir, num_steps=args.num_steps)
