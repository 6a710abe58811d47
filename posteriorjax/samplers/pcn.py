"""Preconditioned Crank-Nicolson MCMC in the prior latent as a sampler (`reference.mcmc`).

Sample j is the final state of chain j: the chain starts from a prior draw of the latent z,
runs `burn_in` steps adapting its step beta by Robbins-Monro towards acceptance `target`,
then `num_steps` steps with beta frozen,

    z' = sqrt(1 - beta^2) z + beta xi,   accepted with prob. min(1, exp(Phi(z) - Phi(z'))),

Phi(z) = -log p(y | transform(z)); the chains are `reference.mcmc.chains` (pure). Hyperparameters:
``step`` (the initial beta in (0, 1]; with `burn_in=0` it is the step used) and ``target``
(acceptance aimed at while adapting, in (0, 1)). Works for every prior with a latent
(thresholded Darcy, hierarchical, log-normal); needs no gradient.

``method="gpcn"`` runs generalized pCN instead: the same move about the Gauss-Newton Laplace
approximation N(m, (I + H)^-1) of the posterior (`reference.mcmc.laplace`; chains start from
its draws). On linear-Gaussian tasks it accepts nearly every move at beta = 1; it needs
Gaussian noise and a differentiable forward map and prior transform (not thresholded Darcy).

Mixing: at noise std 1e-4 with 128 sensors the posterior is far narrower than the prior and
the adapted beta is tiny, so chains need very many steps (docs/studies/references.md, "pCN
against the exact posterior");
the finite-chain bias shows up as a too-wide ensemble, which the tables report.
Cost per sample: burn_in + num_steps forward solves.
"""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp

from posteriorjax import checks
from posteriorjax.reference import mcmc
from posteriorjax.samplers.base import AbstractSampler, register


class PCNSampler(AbstractSampler):
    """Final states of `num_samples` pCN chains (see module doc)."""

    burn_in: int = eqx.field(static=True)
    num_steps: int = eqx.field(static=True)
    method: str = eqx.field(static=True, default="pcn")

    @property
    def evaluations_per_sample(self) -> int:
        return self.burn_in + self.num_steps

    def check_domain(self, name, value):
        lo_ok = value > 0
        hi_ok = value <= 1 if name == "step" else value < 1
        bound = "(0, 1]" if name == "step" else "(0, 1)"
        return checks.error_if(value, ~(lo_ok & hi_ok), f"hparams: {name} must be in {bound}", value=value)

    def _sample(self, key, y_obs, num_samples, hparams):
        dtype = jnp.result_type(float)
        step, target = (jnp.asarray(hparams[k], dtype) for k in ("step", "target"))
        result = mcmc.chains(
            key,
            self.task,
            y_obs,
            num_chains=num_samples,
            num_draws=1,  # one draw thinned by num_steps: each chain's state after its last step
            burn_in=self.burn_in,
            thin=self.num_steps,
            step=step,
            target=target,
            method=self.method,
        )
        return result.samples[:, 0]


def build(
    task,
    *,
    burn_in: int = 2000,
    num_steps: int = 2000,
    step: float = 0.1,
    target: float = 0.25,
    method: str = "pcn",
) -> PCNSampler:
    if not isinstance(burn_in, int) or burn_in < 0:
        raise ValueError(f"burn_in: expected a non-negative integer, got {burn_in!r}")
    num_steps = checks.positive_int("num_steps", num_steps)
    if method not in ("pcn", "gpcn"):
        raise ValueError(f"method: expected 'pcn' or 'gpcn', got {method!r}")
    return PCNSampler(task, {"step": float(step), "target": float(target)}, burn_in, num_steps, method)


register("pcn", build)
