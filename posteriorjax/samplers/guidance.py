"""Guided probability-flow sampling shared by the DPS family (dps, fundps, funddps, diffusionpde).

One step from sigma_i to sigma_{i+1} of the EDM probability-flow ODE dx/dsigma = (x - D(x, sigma)) / sigma
(Heun, Euler on the last step), followed by a guidance correction (DiffusionPDE / FunDPS, Alg. 1):

    x0_hat = D(x_i, sigma_i),   g_i = grad_{x_i} L(x0_hat; i),   x_{i+1} <- x_{i+1}^{Heun} - g_i,

where the step-dependent loss L already carries the guidance weights. The gradient flows
through the denoiser (one vector-Jacobian product per step), so a step costs two denoiser
evaluations plus one backward pass; N steps cost 2N - 1 evaluations.

Readouts map a denoised normalized stack to predicted observations `(M,)`: the state channels
of a joint stack, the exact physics, or a learned surrogate of the physics.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp

from posteriorjax import diffusion

FORWARDS = ("joint", "exact", "surrogate")


def task_default(task, values: dict[str, float]) -> float:
    """Per-task default: the value for the first key that prefixes `task.name` (else ``"default"``)."""
    for prefix, v in values.items():
        if prefix != "default" and task.name.startswith(prefix):
            return v
    return values["default"]


def check_positive_int(name: str, value) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name}: expected a positive integer, got {value!r}")
    return value


def positive_domain(positive: tuple[str, ...]):
    """`check_domain` requiring > 0 for the names in `positive` and >= 0 for the others."""

    def check(self, name, value):
        if name in positive:
            return eqx.error_if(value, ~(value > 0), f"hparams: {name} must be > 0")
        return eqx.error_if(value, ~(value >= 0), f"hparams: {name} must be >= 0")

    return check


class Readout(eqx.Module):
    """Predicted observations `(M,)` of a denoised normalized stack, through `forward`.

    ``"joint"``: the stack's state channels; ``"exact"``: `task.physics` of the unknown;
    ``"surrogate"``: `surrogate` (an `nn.Surrogate`) of the unknown.
    """

    task: eqx.Module
    prior: eqx.Module
    surrogate: eqx.Module | None
    forward: str = eqx.field(static=True)

    def state(self, x_n: jax.Array) -> jax.Array:
        if self.forward == "joint":
            return self.prior.state(x_n)
        x = self.prior.unknown(x_n)
        return self.task.physics(x) if self.forward == "exact" else self.surrogate(x)

    def __call__(self, x_n: jax.Array) -> jax.Array:
        return self.task.observation(self.state(x_n))


def build_readout(task, prior, forward: str, surrogate=None) -> Readout:
    if forward not in FORWARDS:
        raise ValueError(f"forward: expected one of {FORWARDS}, got {forward!r}")
    if forward == "joint" and not prior.joint:
        forward = "exact"  # oracle joint prior: the state is the physics of the denoised unknown
    if forward == "surrogate":
        if surrogate is None:
            raise ValueError(f"surrogate: forward='surrogate' needs a trained nn.Surrogate for {task.name!r}")
        if not hasattr(surrogate, "u_norm"):
            raise ValueError(f"surrogate: expected an nn.Surrogate, got {type(surrogate).__name__}")
    return Readout(task, prior, surrogate if forward == "surrogate" else None, forward)


def relative_error(y_hat: jax.Array, y_obs: jax.Array) -> jax.Array:
    """||y_hat - y|| / ||y||: the normalized observation error of FunDPS."""
    return jnp.linalg.norm(y_hat - y_obs) / (jnp.linalg.norm(y_obs) + 1e-30)


def guidance_scale(sigma) -> jax.Array:
    """c_i = 1 if sigma_i > 1 else sigma_i (FunDPS)."""
    return jnp.where(sigma > 1, 1.0, sigma)


def guided_sample(key, prior, shape, sigmas: jax.Array, loss_fn) -> jax.Array:
    """One guided sample (normalized stack `shape`); `loss_fn(x0_hat, sigma, i) -> scalar` (weighted)."""
    x = sigmas[0] * prior.noise.sample(key, shape)
    n = sigmas.shape[0] - 1

    def body(x, inputs):
        sigma, sigma_next, i = inputs

        def loss(z):
            d = prior.denoise(z, sigma)
            return loss_fn(d, sigma, i), d

        (_, d), grad = jax.value_and_grad(loss, has_aux=True)(x)
        slope = (x - d) / sigma
        x_euler = x + (sigma_next - sigma) * slope
        safe = jnp.where(sigma_next > 0, sigma_next, 1.0)
        slope_next = (x_euler - prior.denoise(x_euler, safe)) / safe
        x_heun = x + (sigma_next - sigma) * 0.5 * (slope + slope_next)
        x_next = jnp.where(sigma_next > 0, x_heun, x_euler)
        return (x_next - grad).astype(x.dtype), None

    x, _ = jax.lax.scan(body, x, (sigmas[:-1], sigmas[1:], jnp.arange(n)))
    return x


def schedule(num_steps: int, sigma_min: float, sigma_max: float) -> jax.Array:
    """Karras sigmas `(num_steps + 1,)`, rho = 7."""
    return diffusion.karras_sigmas(num_steps, sigma_min, sigma_max)
