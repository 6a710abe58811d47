"""The training layer's built-in network kinds: ``prior``, ``joint``, ``surrogate`` and ``inverse``.

The registry itself, the `Kind` fields and the pieces several kinds share live in
`posteriorjax.kinds` (below the samplers, so that a sampler module registers the kinds of its own
models there: ``flow``, ``flow_fno`` and FunDiff's three). This module registers the kinds built
from the training layer's losses and re-exports the registry's API, so `training.kinds.get`,
`names` and `register` are the registry's; importing `posteriorjax.training` imports the samplers
too, so every built-in kind is registered.

  ``prior``      EDM denoiser over the normalized unknown,
  ``joint``      EDM denoiser over the normalized (unknown, state) stack,
  ``surrogate``  FNO-type regressor unknown -> state,
  ``inverse``    regressor (masked observations on the grid, mask) -> unknown, with dropout.

A new kind is one `register(Kind(...))` beside the model it trains; `configs/train/network.py`
and the sweep's network specs read the registry, a sampler names the kinds it takes
(`samplers.networks`), and `tests/test_train.py` checks every registered kind's contract.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.random as jr

from posteriorjax import diffusion, nn
from posteriorjax import samplers as _samplers  # noqa: F401  (registers the samplers' own kinds)
from posteriorjax.kinds import (
    MEDIUM_STEPS,
    MEDIUM_STEPS_BY_MODEL,
    OBSERVATION_NOISE_OPTIONS,
    REGISTRY,
    SCALES,
    TINY_DENOISER,
    TINY_REGRESSOR,
    TINY_STEPS,
    Kind,
    Wrap,
    get,
    joint_example,
    loss_evaluation,
    medium_steps,
    names,
    register,
    state_example,
    training_task_options,
    u_channels,
    x_channels,
)
from posteriorjax.metrics import posterior
from posteriorjax.nn import published
from posteriorjax.training import losses


def _dsm_loss(task, noise, d):
    return losses.DiffusionLoss(noise, d.p_mean, d.p_std)


def _surrogate_evaluation(loss_fn, held_out, *, x_norm, u_norm, task, key):
    x_held, u_held = x_norm.denormalize(held_out[0]), u_norm.denormalize(held_out[1])
    return lambda m: {"eval_relative_l2": jnp.mean(posterior.relative_l2(jax.vmap(m)(x_held), u_held))}


def _inverse_evaluation(loss_fn, held_out, *, x_norm, u_norm, task, key):
    mask = task.observation.mask
    return lambda m: {
        "eval_relative_l2": jnp.mean(
            posterior.relative_l2(jax.vmap(lambda y: m(y, mask))(held_out[0]), held_out[1])
        )
    }


def _prior_example(task, x_norm, u_norm, key):
    return x_norm.normalize(task.prior.sample(jr.split(key)[0]))


def _inverse_example(task, x_norm, u_norm, key):
    k_prior, k_noise = jr.split(key)
    x = task.prior.sample(k_prior)
    u = task.physics(x)
    y = task.observation(u) + task.noise.sample(k_noise, (task.num_observations,))
    return task.observation.to_grid(y, leading=(u.shape[0],)), x


# Full-size backbones: the published PosteriorBench ones (`nn.published`, docs/samplers.md
# "Published backbones"): the FunDPS ``ddpmpp-uno`` prior (also the shared Fun-DDPS / DDIS target prior), the
# Fun-DDPS neuralop-FNO surrogate, the MC-dropout inverse FNO and the ECI velocity FNO. DiffusionPDE's
# ``ddpmpp`` and DDIS's ``fno_pad`` share a kind with another method: `nn.published.get(
# "diffusionpde_prior")` / `("ddis_surrogate")` give their entries for `config.model`.
_DDPMPP_UNO = published.get("fundps_prior")


def _edm_kind(name: str, channels, example, wrap, uses_state: bool = True) -> Kind:
    """An EDM denoiser kind: DSM loss and evaluation, the denoiser backbones, 200k steps at full scale."""
    return Kind(
        name,
        channels=channels,
        example=example,
        wrap=wrap,
        loss=_dsm_loss,
        evaluate=loss_evaluation("eval_dsm_loss"),
        models={"tiny": TINY_DENOISER, "full": _DDPMPP_UNO},
        steps={"tiny": TINY_STEPS, "full": 200_000},
        generative=True,
        edm=True,
        uses_state=uses_state,
        observation_noise=False,  # prior draws (and their physics) only
    )


register(
    _edm_kind(
        "prior",
        channels=lambda task: (x_channels(task), x_channels(task)),
        example=_prior_example,
        wrap=lambda net, x_norm, u_norm, cfg: diffusion.EDMDenoiser(net, x_norm, cfg.sigma_data),
        uses_state=False,
    )
)
register(
    _edm_kind(
        "joint",
        channels=lambda task: (x_channels(task) + u_channels(task),) * 2,
        example=joint_example,
        wrap=lambda net, x_norm, u_norm, cfg: diffusion.EDMDenoiser(
            net, x_norm.concat(u_norm), cfg.sigma_data
        ),
    )
)
register(
    Kind(
        "surrogate",
        channels=lambda task: (x_channels(task), u_channels(task)),
        example=state_example,
        wrap=lambda net, x_norm, u_norm, cfg: nn.Surrogate(net, x_norm, u_norm),
        loss=lambda task, noise, d: losses.surrogate_loss,
        evaluate=_surrogate_evaluation,
        models={
            "tiny": ("fno", TINY_REGRESSOR),
            "full": published.get("funddps_surrogate"),
        },
        steps={"tiny": TINY_STEPS, "full": 20_000},
        observation_noise=False,  # unknown -> noise-free state
    )
)
register(
    Kind(  # trained on noisy observations (`_inverse_example`): the noise stays in its identity
        "inverse",
        channels=lambda task: (u_channels(task) + 1, x_channels(task)),
        example=_inverse_example,
        wrap=lambda net, x_norm, u_norm, cfg: nn.InverseNet(net, x_norm, u_norm),
        loss=lambda task, noise, d: losses.InverseLoss(task.observation.mask),
        evaluate=_inverse_evaluation,
        models={
            "tiny": ("fno", {**TINY_REGRESSOR, "dropout": 0.1}),
            "full": published.get("mc_dropout_inverse"),
        },
        steps={"tiny": TINY_STEPS, "full": 20_000},
    )
)


__all__ = [
    "MEDIUM_STEPS",
    "MEDIUM_STEPS_BY_MODEL",
    "OBSERVATION_NOISE_OPTIONS",
    "REGISTRY",
    "SCALES",
    "TINY_STEPS",
    "Kind",
    "Wrap",
    "get",
    "medium_steps",
    "names",
    "register",
    "training_task_options",
]
