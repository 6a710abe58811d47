"""The one interface of every posterior sampler.

`sampler.sample(key, y_obs, num_samples, hparams) -> (num_samples, C, H, W)`:
pure and vmappable over cases (`y_obs`) and over numeric hyperparameters
(`hparams`, a dict of scalar arrays); `num_samples` and everything structural
(step counts, networks, the task) are static. Trained state (networks) is a
pytree field of the sampler, never a global.
"""

from __future__ import annotations

import abc
import dataclasses
import inspect
from collections.abc import Callable, Mapping

import equinox as eqx
import jax
import jax.numpy as jnp

from posteriorjax import checks
from posteriorjax.registry import Registry
from posteriorjax.tasks.base import Task, binary_projection


class AbstractSampler(eqx.Module):
    """Base class: subclasses set `defaults` and implement `_sample`.

    Attributes:
      task: the inverse problem (its prior, forward map, observation, noise).
      defaults: static mapping of every numeric hyperparameter name to its default.
      discrete_values: `(low, high)`: every output member is `binary_projection`-ed onto the two
        values, as a published evaluation profile does on a binary prior (PosteriorBench's
        `postprocess.discrete_values`, Darcy {3, 12}: `tuned.published_discrete_values`); None
        (default): the output as sampled. Keyword-only, static.
    """

    task: Task
    defaults: Mapping[str, float] = eqx.field(static=True)
    discrete_values: tuple[float, float] | None = eqx.field(static=True, default=None, kw_only=True)

    @property
    def name(self) -> str:
        return type(self).__name__

    def hparams(self, **overrides) -> dict[str, jax.Array]:
        """The defaults with `overrides`, as float32 scalars (validated)."""
        unknown = sorted(set(overrides) - set(self.defaults))
        if unknown:
            raise ValueError(
                f"hparams: {self.name} has no hyperparameter(s) {unknown}; it has {sorted(self.defaults)}"
            )
        for k, v in overrides.items():
            checks.real_scalar(f"hparams: {k}", v)
        values = {**self.defaults, **overrides}
        return {k: jnp.asarray(v, jnp.float32) for k, v in values.items()}

    def check_hparams(self, hparams: Mapping[str, jax.Array]) -> dict[str, jax.Array]:
        """Validate names (static) and domains (`checks.error_if`, so it works under jit/vmap: concrete
        values raise ValueError at once, traced ones at run time, naming the value)."""
        if set(hparams) != set(self.defaults):
            raise ValueError(
                f"hparams: {self.name} expects exactly {sorted(self.defaults)}, got {sorted(hparams)}"
            )
        return {k: self.check_domain(k, jnp.asarray(v)) for k, v in hparams.items()}

    def check_domain(self, name: str, value: jax.Array) -> jax.Array:
        """Hyperparameter domain check; the default requires values >= 0."""
        return checks.error_if(value, ~(value >= 0), f"hparams: {name} must be >= 0", value=value)

    def sample(self, key, y_obs: jax.Array, num_samples: int, hparams: Mapping[str, jax.Array]) -> jax.Array:
        """Posterior samples `(num_samples, *task.unknown_shape)` given observations `y_obs (M,)`.

        Eager checks (ValueError/TypeError naming the argument): `num_samples` a positive
        integer, `y_obs` of the task's shape and finite, every hyperparameter one real
        scalar (vmap the call for a sweep over values); domains are `check_domain`'s.

        Compiled once per sampler structure and `num_samples` (`eqx.filter_jit`): repeated
        calls with new keys, observations or hyperparameter values reuse the program.
        """
        num_samples = checks.positive_int("num_samples", num_samples)
        self.task.check_observation(y_obs)
        if set(hparams) != set(self.defaults):
            self.check_hparams(hparams)  # raises the naming error
        for k, v in hparams.items():
            checks.real_scalar(f"hparams: {k}", v)
        hparams = {k: jnp.asarray(v, jnp.float32) for k, v in hparams.items()}  # as `hparams()`: traced
        return _compiled_sample(self, key, jnp.asarray(y_obs), num_samples, hparams)

    def sample_traced(
        self, key, y_obs: jax.Array, num_samples: int, hparams: Mapping[str, jax.Array], *, finish=True
    ) -> jax.Array:
        """`sample` inside a traced program (jit, vmap, shard_map): no host-side checks of `y_obs`;
        hyperparameter names and domains are checked by `check_hparams` (`checks.error_if`).
        `finish=False`: the samples before `finish` (a caller that applies it itself)."""
        samples = self._sample(key, y_obs, num_samples, self.check_hparams(hparams))
        return self.finish(samples) if finish else samples

    def finish(self, samples: jax.Array) -> jax.Array:
        """The output of `_sample`, `(N, C, H, W)`, as the sampler returns it: projected onto
        `discrete_values` where set."""
        if self.discrete_values is None:
            return samples
        return binary_projection(samples, self.discrete_values)

    @abc.abstractmethod
    def _sample(self, key, y_obs: jax.Array, num_samples: int, hparams: dict[str, jax.Array]) -> jax.Array:
        """Implementation of `sample` on validated inputs."""


@eqx.filter_jit
def _compiled_sample(sampler: AbstractSampler, key, y_obs, num_samples: int, hparams) -> jax.Array:
    return sampler.finish(sampler._sample(key, y_obs, num_samples, sampler.check_hparams(hparams)))


@dataclasses.dataclass(frozen=True)
class Builder:
    """A registered sampler: `build(task, **options) -> AbstractSampler` and the trained networks it
    takes, `networks` {builder option: network kind} (e.g. ``{"model": "prior"}``; `training.kinds`)."""

    build: Callable[..., AbstractSampler]
    networks: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        if not callable(self.build):
            raise TypeError(f"build: expected a callable build(task, **options), got {self.build!r:.80}")
        options = list(inspect.signature(self.build).parameters)[1:]
        unknown = sorted(set(self.networks) - set(options))
        if unknown:
            raise ValueError(f"networks: {unknown} are not options of the builder; its options: {options}")

    @property
    def options(self) -> list[str]:
        """The structural options (the builder's keywords after the task)."""
        return list(inspect.signature(self.build).parameters)[1:]


REGISTRY: Registry[Builder] = Registry("sampler", Builder)
"""The sampler registry: name -> `Builder` (the build function, its options and network kinds)."""


def register(name: str, build: Callable[..., AbstractSampler], networks: Mapping[str, str] | None = None):
    """Register `build(task, **options)` under `name`, with the network kind of each option that takes a
    trained network (`networks`, {option: kind}). Returns `build`."""
    REGISTRY.register(name, Builder(build, dict(networks or {})))
    return build
