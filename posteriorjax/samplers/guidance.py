"""Pieces the guided and annealed samplers share: readouts and argument checks.

Readouts map a denoised normalized stack to predicted observations `(M,)`: the state channels
of a joint stack, the exact physics, or a learned surrogate of the physics. The per-task tuned
values the builders read are one table, `samplers.tuned`.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp

from posteriorjax import checks
from posteriorjax.samplers import precision

FORWARDS = ("joint", "exact", "surrogate")


def positive_domain(positive: tuple[str, ...]):
    """`check_domain` requiring > 0 for the names in `positive` and >= 0 for the others."""

    def check(self, name, value):
        # ~(value > 0) rather than value <= 0: a NaN fails the check too
        if name in positive:
            return checks.error_if(value, ~(value > 0), f"hparams: {name} must be > 0", value=value)
        return checks.error_if(value, ~(value >= 0), f"hparams: {name} must be >= 0", value=value)

    return check


class Readout(eqx.Module):
    """Predicted observations `(M,)` of a denoised normalized stack, through `forward`.

    ``"joint"``: the stack's state channels; ``"exact"``: `task.physics` of the unknown;
    ``"surrogate"``: `surrogate` (an `nn.Surrogate`) of the unknown, evaluated in the dtype of its
    parameters (float32 when trained) and its output cast to the unknown's.

    The exact physics is undefined outside its domain (`task.physics.valid`: e.g. a non-positive
    Darcy permeability, which a denoised estimate can be). There the state is NaN, and so is the
    gradient through it, so a sample that needed it ends non-finite and is counted as such by the
    metric suite, instead of the solver's domain error stopping the whole program.
    """

    task: eqx.Module
    prior: eqx.Module
    surrogate: eqx.Module | None
    forward: str = eqx.field(static=True)

    def state(self, x_n: jax.Array) -> jax.Array:
        if self.forward == "joint":
            return self.prior.state(x_n)
        x = self.prior.unknown(x_n)
        if self.forward == "surrogate":  # in its own parameters' dtype, as the published surrogates
            net = precision.network_dtype(self.surrogate, x.dtype)
            return self.surrogate(x.astype(net)).astype(x.dtype)
        valid = self.task.physics.valid(x)
        fallback = jnp.full_like(x, self.task.field_stats[0])  # a valid field, never read back
        poison = jnp.where(valid, 0.0, jnp.nan) * jnp.sum(x)  # NaN value and gradient where invalid
        return self.task.physics(jnp.where(valid, x, fallback)) + poison

    def __call__(self, x_n: jax.Array) -> jax.Array:
        return self.task.observation(self.state(x_n))


def build_readout(task, prior, forward: str, surrogate=None) -> Readout:
    checks.in_choices("forward", forward, FORWARDS)
    if forward == "joint" and not prior.joint:
        forward = "exact"  # oracle joint prior: the state is the physics of the denoised unknown
    if forward == "surrogate":
        if surrogate is None:
            raise ValueError(f"surrogate: forward='surrogate' needs a trained nn.Surrogate for {task.name!r}")
        if not hasattr(surrogate, "u_norm"):
            raise ValueError(f"surrogate: expected an nn.Surrogate, got {type(surrogate).__name__}")
    return Readout(task, prior, surrogate if forward == "surrogate" else None, forward)
