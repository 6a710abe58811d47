"""The registry of network kinds: everything the training layer knows about one kind of network.

A kind is one `Kind` entry (registered with `register`, looked up with `get`, listed by `names`):

  channels(task) -> (in, out)         backbone channels from the task's unknown / state shapes;
  example(task, x_norm, u_norm, key)  one training example drawn from the task prior (physics
                                      solved when needed), a pytree of arrays;
  wrap(net, x_norm, u_norm, cfg)      the trained model around the backbone `net` (`cfg`: `Wrap`);
  loss(task, noise, diffusion)        the loss `loss_fn(model, key, batch) -> scalar`;
  evaluate(loss_fn, held_out, x_norm, u_norm, task, key) -> eval_fn(model) -> {name: scalar};
  models, steps                       default backbones {"tiny" | "full": (nn name, options)} and
                                      step counts {"tiny" | "full": steps}; the ``medium``
                                      backbone is the full one shrunk by `nn.published.scaled`
                                      unless given, its step count `MEDIUM_STEPS` unless given;
  generative                          trained like a generative model (learning rate, EMA);
  edm                                 the data are rescaled to `diffusion.data_scale` (EDM priors);
  uses_state                          needs the state normalization (`u_norm`);
  samplers                            {sampler name: builder option} of the samplers that take it;
  inputs                              {role: kind} of trained networks the examples need (frozen:
                                      the data source carries them, `example(..., **inputs)`,
                                      `channels(task, **inputs)`; `training.run(inputs=...)` or
                                      the config's `inputs.<role>` workdirs provide them).

Built-in kinds:
  ``prior``      EDM denoiser over the normalized unknown,
  ``joint``      EDM denoiser over the normalized (unknown, state) stack,
  ``surrogate``  FNO-type regressor unknown -> state,
  ``inverse``    regressor (masked observations on the grid, mask) -> unknown, with dropout,
  ``flow``       flow-matching velocity over the normalized (unknown, state) stack (`samplers.eci.
                 FlowVelocity`, the published ECI model; data rescaled to `diffusion.data_scale`),
  ``flow_fno``   conditional flow-matching velocity (x_t, t | masked observations, mask) -> (C_x, H, W)
                 (`samplers.flow_fno.ConditionalFlow`), trained on (x, task.simulate(key, x)) pairs;
  ``fundiff_fae_target``, ``fundiff_fae_condition``, ``fundiff_dit``  the published FunDiff's
                 two function autoencoders and its latent DiT (`samplers.fundiff`); the DiT
                 trains on latents of the two frozen encoders (its `inputs`).

A new kind is one `register(Kind(...))` (here, beside the built-in ones, so that importing
`training` registers it); `configs/train/network.py`, the sweep's network specs and
`configs/base.NETWORKS` derive from the registry, and `tests/test_train.py` checks every
registered kind's contract.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import jax.random as jr

from posteriorjax import diffusion, nn
from posteriorjax.files import parameter_digest
from posteriorjax.metrics import posterior
from posteriorjax.nn import published
from posteriorjax.samplers import eci, flow_fno, fundiff
from posteriorjax.training import losses

SCALES = ("tiny", "medium", "full")
TINY_STEPS = 300  # about a minute on one CPU at 16 x 16
MEDIUM_STEPS = 6000


@dataclasses.dataclass(frozen=True)
class Wrap:
    """Options of a kind's model wrapper: EDM `sigma_data`, the flow's base `noise` (None: GRF) and
    the trained `inputs` ({role: model}) of a kind that has them."""

    sigma_data: float = 1.0
    noise: Any = None
    inputs: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Kind:
    """One network kind (see the module docstring for the fields)."""

    name: str
    channels: Callable
    example: Callable
    wrap: Callable
    loss: Callable
    evaluate: Callable
    models: Mapping[str, tuple[str, dict]]
    steps: Mapping[str, int]
    generative: bool = False
    edm: bool = False
    uses_state: bool = True
    samplers: Mapping[str, str] = dataclasses.field(default_factory=dict)
    inputs: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        if "medium" not in self.models and "full" in self.models:
            medium = published.scaled(self.models["full"], "medium")
            object.__setattr__(self, "models", {**self.models, "medium": medium})
        if "medium" not in self.steps:
            object.__setattr__(self, "steps", {**self.steps, "medium": MEDIUM_STEPS})
        for field in ("models", "steps"):
            if set(getattr(self, field)) != set(SCALES):
                raise ValueError(
                    f"{field}: expected entries for the scales {SCALES}, got {sorted(getattr(self, field))}"
                )


_KINDS: dict[str, Kind] = {}


def register(kind: Kind) -> None:
    """Add `kind` to the registry (ValueError if its name is taken)."""
    if kind.name in _KINDS:
        raise ValueError(f"kind: {kind.name!r} is already registered")
    _KINDS[kind.name] = kind


def names() -> list[str]:
    """Registered kind names, in registration order."""
    return list(_KINDS)


def get(name: str) -> Kind:
    """The registered kind `name` (ValueError listing the registered ones otherwise)."""
    if name not in _KINDS:
        raise ValueError(f"kind: expected one of {tuple(_KINDS)}, got {name!r}")
    return _KINDS[name]


def networks() -> dict[str, dict[str, str]]:
    """{sampler: {builder option: kind}} over every registered kind's `samplers`."""
    out: dict[str, dict[str, str]] = {}
    for kind in _KINDS.values():
        for sampler, option in kind.samplers.items():
            out.setdefault(sampler, {})[option] = kind.name
    return out


# -- pieces shared by several kinds -------------------------------------------------------------


def _x_channels(task):
    return task.unknown_shape[0]


def _u_channels(task):
    return task.state_shape[0]


def _dsm_loss(task, noise, d):
    return losses.DiffusionLoss(noise, d.p_mean, d.p_std)


def _flow_loss(task, noise, d):
    return losses.FlowMatchingLoss(task.observation.mask)


def _loss_evaluation(name):
    def evaluate(loss_fn, held_out, x_norm, u_norm, task, key):
        return lambda m: {name: loss_fn(m, key, held_out)}

    return evaluate


def _surrogate_evaluation(loss_fn, held_out, x_norm, u_norm, task, key):
    x_held, u_held = x_norm.denormalize(held_out[0]), u_norm.denormalize(held_out[1])
    return lambda m: {"eval_relative_l2": jnp.mean(posterior.relative_l2(jax.vmap(m)(x_held), u_held))}


def _inverse_evaluation(loss_fn, held_out, x_norm, u_norm, task, key):
    mask = task.observation.mask
    return lambda m: {
        "eval_relative_l2": jnp.mean(
            posterior.relative_l2(jax.vmap(lambda y: m(y, mask))(held_out[0]), held_out[1])
        )
    }


# -- examples -----------------------------------------------------------------------------------


def _prior_example(task, x_norm, u_norm, key):
    return x_norm.normalize(task.prior.sample(jr.split(key)[0]))


def _state_example(task, x_norm, u_norm, key):
    """(normalized x, normalized u = physics(x)); x from the first half of `split(key)`, as in every kind."""
    x = task.prior.sample(jr.split(key)[0])
    return x_norm.normalize(x), u_norm.normalize(task.physics(x))


def _joint_example(task, x_norm, u_norm, key):
    return jnp.concatenate(_state_example(task, x_norm, u_norm, key))


def _inverse_example(task, x_norm, u_norm, key):
    k_prior, k_noise = jr.split(key)
    x = task.prior.sample(k_prior)
    u = task.physics(x)
    y = task.observation(u) + task.noise.sample(k_noise, (task.num_observations,))
    return task.observation.to_grid(y, leading=(u.shape[0],)), x


def _flow_fno_example(task, x_norm, u_norm, key):
    k_prior, k_noise = jr.split(key)
    x = task.prior.sample(k_prior)
    y = task.simulate(k_noise, x)
    return x_norm.normalize(x), task.observation.to_grid(y, leading=(task.state_shape[0],))


# -- the built-in kinds -------------------------------------------------------------------------

# Full-size backbones: the published PosteriorBench ones (`nn.published`, README "Published
# backbones"): the FunDPS ``ddpmpp-uno`` prior (also the shared Fun-DDPS / DDIS target prior), the
# Fun-DDPS neuralop-FNO surrogate, the MC-dropout inverse FNO and the ECI velocity FNO. DiffusionPDE's
# ``ddpmpp`` and DDIS's ``fno_pad`` share a kind with another method: `nn.published.get(
# "diffusionpde_prior")` / `("ddis_surrogate")` give their entries for `config.model`.
_DDPMPP_UNO = published.get("fundps_prior")
_TINY_DENOISER = ("fno", dict(modes=6, width=16, layers=3, embed_dim=32, projection=32))
_TINY_REGRESSOR = dict(modes=6, width=16, layers=3, padding=0.25, projection=32)


def _edm_kind(name: str, channels, example, wrap, samplers: dict, uses_state: bool = True) -> Kind:
    """An EDM denoiser kind: DSM loss and evaluation, the denoiser backbones, 200k steps at full scale."""
    return Kind(
        name,
        channels=channels,
        example=example,
        wrap=wrap,
        loss=_dsm_loss,
        evaluate=_loss_evaluation("eval_dsm_loss"),
        models={"tiny": _TINY_DENOISER, "full": _DDPMPP_UNO},
        steps={"tiny": TINY_STEPS, "full": 200_000},
        generative=True,
        edm=True,
        uses_state=uses_state,
        samplers=samplers,
    )


register(
    _edm_kind(
        "prior",
        channels=lambda task: (_x_channels(task), _x_channels(task)),
        example=_prior_example,
        wrap=lambda net, x_norm, u_norm, cfg: diffusion.EDMDenoiser(net, x_norm, cfg.sigma_data),
        samplers={"dps": "model", "funddps": "model", "ddis": "model"},
        uses_state=False,
    )
)
register(
    _edm_kind(
        "joint",
        channels=lambda task: (_x_channels(task) + _u_channels(task),) * 2,
        example=_joint_example,
        wrap=lambda net, x_norm, u_norm, cfg: diffusion.EDMDenoiser(
            net, x_norm.concat(u_norm), cfg.sigma_data
        ),
        samplers={"fundps": "model", "diffusionpde": "model", "eci": "model"},
    )
)
register(
    Kind(
        "surrogate",
        channels=lambda task: (_x_channels(task), _u_channels(task)),
        example=_state_example,
        wrap=lambda net, x_norm, u_norm, cfg: nn.Surrogate(net, x_norm, u_norm),
        loss=lambda task, noise, d: losses.surrogate_loss,
        evaluate=_surrogate_evaluation,
        models={
            "tiny": ("fno", _TINY_REGRESSOR),
            "full": published.get("funddps_surrogate"),
        },
        steps={"tiny": TINY_STEPS, "full": 20_000},
        samplers={"funddps": "surrogate", "ddis": "surrogate"},
    )
)
register(
    Kind(
        "inverse",
        channels=lambda task: (_u_channels(task) + 1, _x_channels(task)),
        example=_inverse_example,
        wrap=lambda net, x_norm, u_norm, cfg: nn.InverseNet(net, x_norm, u_norm),
        loss=lambda task, noise, d: losses.InverseLoss(task.observation.mask),
        evaluate=_inverse_evaluation,
        models={
            "tiny": ("fno", {**_TINY_REGRESSOR, "dropout": 0.1}),
            "full": published.get("mc_dropout_inverse"),
        },
        steps={"tiny": TINY_STEPS, "full": 20_000},
        samplers={"mc_dropout": "model"},
    )
)
register(
    Kind(
        "flow_fno",
        channels=lambda task: (_x_channels(task) + _u_channels(task) + 1, _x_channels(task)),
        example=_flow_fno_example,
        wrap=lambda net, x_norm, u_norm, cfg: flow_fno.ConditionalFlow(
            net, x_norm, u_norm, diffusion.GRFNoise() if cfg.noise is None else cfg.noise
        ),
        loss=_flow_loss,
        evaluate=_loss_evaluation("eval_flow_matching_loss"),
        models={
            "tiny": ("fno", {**_TINY_REGRESSOR, "embed_dim": 32}),
            "full": ("fno", dict(modes=32, width=64, layers=4, padding=0.125, embed_dim=128)),
        },
        steps={"tiny": TINY_STEPS, "full": 100_000},
        generative=True,
        samplers={"flow_fno": "model"},
    )
)

# The published ECI velocity (`training_eci/flow.py`, `configs/training/*_eci_*.yml`): neuralop's FNO
# with 32 modes, 128 hidden channels, 6 layers, lifting / projection ratio 4, domain padding 0.1 and
# a 32-channel sinusoidal embedding of t concatenated to the input (`nn.published` "eci_velocity"),
# trained for 58594 steps on data of std 0.5 with Matern 1/2 base noise (set `diffusion.noise =
# "matern"`, `data_scale = 0.5`).
register(
    Kind(
        "flow",
        channels=lambda task: (_x_channels(task) + _u_channels(task),) * 2,
        example=_joint_example,
        wrap=lambda net, x_norm, u_norm, cfg: eci.FlowVelocity(
            net,
            x_norm.concat(u_norm),
            diffusion.MaternNoise() if cfg.noise is None else cfg.noise,
            x_norm.channels,
        ),
        loss=lambda task, noise, d: eci.FlowMatchingLoss(),
        evaluate=_loss_evaluation("eval_flow_matching_loss"),
        models={
            "tiny": _TINY_DENOISER,
            "full": published.get("eci_velocity"),
        },
        steps={"tiny": TINY_STEPS, "full": 58_594},
        generative=True,
        edm=True,  # rescaled to `data_scale` like the EDM kinds (published 0.5)
    )
)


# -- FunDiff as published (`samplers.fundiff`; PosteriorBench `configs/training/*_fundiff_*.yml`) --
# Function autoencoders at full size as published; tiny: patch 2 at 16 x 16 (the same 8 x 8 patch
# grid as 16 at 128), widths and depths cut down. The DiT trains on latents of the frozen encoders.
_FAE = {
    "full": dict(patch_size=16, grid_size=128, emb_dim=256, num_latents=64, depth=8, num_heads=8,
                 mlp_ratio=2, fourier_freq=10.0, period=False, dec_depth=4, dec_num_heads=8,
                 dec_emb_dim=256, dec_mlp_ratio=2, num_mlp_layers=2),
    "tiny": dict(patch_size=2, grid_size=16, emb_dim=32, num_latents=16, depth=2, num_heads=4,
                 mlp_ratio=2, fourier_freq=10.0, period=False, dec_depth=1, dec_num_heads=4,
                 dec_emb_dim=32, dec_mlp_ratio=2, num_mlp_layers=2),
}  # fmt: skip
_DIT = {
    "full": dict(emb_dim=384, depth=16, num_heads=8, mlp_ratio=2.0),
    "tiny": dict(emb_dim=48, depth=2, num_heads=4, mlp_ratio=2.0),
}


def _fae_kind(name: str, channels, example, wrap, downsampling, option: str, uses_state: bool) -> Kind:
    return Kind(
        name,
        channels=channels,
        example=example,
        wrap=wrap,
        loss=lambda task, noise, d: fundiff.AutoencoderLoss(downsampling),
        evaluate=_loss_evaluation("eval_reconstruction_mse"),
        models={scale: ("fae", options) for scale, options in _FAE.items()},
        steps={"tiny": TINY_STEPS, "full": 100_000},
        uses_state=uses_state,
        samplers={"fundiff": option},
    )


register(
    _fae_kind(
        "fundiff_fae_target",
        channels=lambda task: (_x_channels(task), _x_channels(task)),
        example=fundiff.target_example,
        wrap=lambda net, x_norm, u_norm, cfg: fundiff.TargetAutoencoder(net, fundiff.scaled(x_norm)),
        downsampling=fundiff.TARGET_DOWNSAMPLING,
        option="target",
        uses_state=False,
    )
)
register(
    _fae_kind(
        "fundiff_fae_condition",
        channels=lambda task: (_u_channels(task) + 1, _u_channels(task)),
        example=fundiff.condition_example,
        wrap=lambda net, x_norm, u_norm, cfg: fundiff.ConditionAutoencoder(net, fundiff.scaled(u_norm)),
        downsampling=fundiff.CONDITION_DOWNSAMPLING,
        option="condition",
        uses_state=True,
    )
)


def _dit_channels(task, *, target, condition):
    if target.net.latent_shape != condition.net.latent_shape:
        raise ValueError(
            f"inputs: the target and condition latents must have one shape (the DiT adds them token by "
            f"token), got {target.net.latent_shape} and {condition.net.latent_shape}"
        )
    return (target.net.latent_shape[1],) * 2


register(
    Kind(
        "fundiff_dit",
        channels=_dit_channels,
        example=fundiff.dit_example,
        wrap=lambda net, x_norm, u_norm, cfg: fundiff.LatentFlow(
            net, parameter_digest(cfg.inputs["target"]), parameter_digest(cfg.inputs["condition"])
        ),
        loss=lambda task, noise, d: fundiff.RectifiedFlowLoss(),
        evaluate=_loss_evaluation("eval_flow_matching_loss"),
        models={scale: ("dit", options) for scale, options in _DIT.items()},
        steps={"tiny": TINY_STEPS, "full": 117_188},  # published learning rate 1e-3 and no EMA: not
        # `generative` (learning rate 1e-3, EMA 0.999 at full scale)
        uses_state=True,
        samplers={"fundiff": "model"},
        inputs={"target": "fundiff_fae_target", "condition": "fundiff_fae_condition"},
    )
)
