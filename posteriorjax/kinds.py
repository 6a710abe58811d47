"""The registry of network kinds: everything the training layer knows about one kind of network.

A kind is one `Kind` entry, registered beside the model it trains (`register(Kind(...))`),
looked up with `get` and listed by `names`:

  channels(task) -> (in, out)         backbone channels from the task's unknown / state shapes;
  example(task, x_norm, u_norm, key)  one training example drawn from the task prior (physics
                                      solved when needed), a pytree of arrays;
  wrap(net, x_norm, u_norm, cfg)      the trained model around the backbone `net` (`cfg`: `Wrap`);
  loss(task, noise, diffusion)        the loss `loss_fn(model, key, batch) -> scalar`;
  evaluate(loss_fn, held_out, *, x_norm, u_norm, task, key) -> eval_fn(model) -> {name: scalar};
  models, steps                       default backbones {"tiny" | "full": (nn name, options)} and
                                      step counts {"tiny" | "full": steps}; the ``medium``
                                      backbone is the full one shrunk by `nn.published.scaled`
                                      unless given, its step count `medium_steps` unless given;
  generative                          trained like a generative model (learning rate, EMA);
  edm                                 the data are rescaled to `diffusion.data_scale` (EDM priors);
  uses_state                          needs the state normalization (`u_norm`);
  inputs                              {role: kind} of trained networks the examples need (frozen:
                                      the data source carries them, `example(..., **inputs)`,
                                      `channels(task, **inputs)`; `training.run(inputs=...)` or
                                      the config's `inputs.<role>` workdirs provide them);
  observation_noise                   the examples carry the task's observation noise (default);
                                      False for a kind trained on noise-free prior draws and
                                      physics: its training task leaves out `OBSERVATION_NOISE_OPTIONS`
                                      (`training_task_options`), so one trained network, in one
                                      directory, serves every noise level.

Which samplers take a kind is said by each sampler (`samplers.register(name, build,
networks={option: kind})`), not here. This module sits below the samplers, so that a sampler
module can register the kinds of its own models: ``prior``, ``joint``, ``surrogate`` and
``inverse`` are registered in `training.kinds`; ``flow`` in `samplers.eci`, ``flow_fno`` in
`samplers.flow_fno`, and FunDiff's ``fundiff_fae_target``, ``fundiff_fae_condition`` and
``fundiff_dit`` in `samplers.fundiff`. Importing `posteriorjax.training` registers them all.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import jax.numpy as jnp
import jax.random as jr

from posteriorjax.nn import published
from posteriorjax.registry import Registry

SCALES = ("tiny", "medium", "full")
TINY_STEPS = 300  # about a minute on one CPU at 16 x 16
# Medium training length: 6000 steps, or for a backbone whose step is slow on a CPU what about 30
# minutes of a 2-core CPU trains at batch 32 (the step timings are in docs/networks.md);
# `medium_steps` is the one place that decides it.
MEDIUM_STEPS = 6000
MEDIUM_STEPS_BY_MODEL = {"ddpmpp_uno": 1500, "ddpmpp": 250, "fno_pad": 1500}
# the task options that set the observation noise only (`tasks.*`: its std, the interface task's floor)
OBSERVATION_NOISE_OPTIONS = ("noise_std", "noise_floor")


def medium_steps(model_name: str) -> int:
    """Training steps of a medium-scale network with the backbone `model_name` (an `nn` name)."""
    return MEDIUM_STEPS_BY_MODEL.get(model_name, MEDIUM_STEPS)


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
    inputs: Mapping[str, str] = dataclasses.field(default_factory=dict)
    observation_noise: bool = True

    def __post_init__(self):
        if "medium" not in self.models and "full" in self.models:
            medium = published.scaled(self.models["full"], "medium")
            object.__setattr__(self, "models", {**self.models, "medium": medium})
        if "medium" not in self.steps:
            steps = medium_steps(self.models["medium"][0])
            object.__setattr__(self, "steps", {**self.steps, "medium": steps})
        for field in ("models", "steps"):
            if set(getattr(self, field)) != set(SCALES):
                raise ValueError(
                    f"{field}: expected entries for the scales {SCALES}, got {sorted(getattr(self, field))}"
                )


REGISTRY: Registry[Kind] = Registry("network kind", Kind)


def register(kind: Kind) -> Kind:
    """Add `kind` to the registry under `kind.name` (ValueError if the name is taken)."""
    return REGISTRY.register(getattr(kind, "name", None), kind)


def training_task_options(kind: str, options: Mapping) -> dict:
    """The task options the training data of `kind` depend on: `options` without `OBSERVATION_NOISE_OPTIONS`
    for a kind without `observation_noise` (its examples never draw the noise, so the task's
    default noise builds the same data), else all of them."""
    if get(kind).observation_noise:
        return dict(options)
    return {name: value for name, value in options.items() if name not in OBSERVATION_NOISE_OPTIONS}


def names() -> list[str]:
    """Registered kind names, sorted (registration order depends on which module is imported first)."""
    return sorted(REGISTRY.names())


def get(name: str) -> Kind:
    """The registered kind `name` (ValueError listing the registered ones otherwise)."""
    return REGISTRY.get(name)


# -- pieces shared by the kinds of several modules ----------------------------------------------

# tiny backbones: an FNO denoiser and an FNO regressor
TINY_DENOISER = ("fno", dict(modes=6, width=16, layers=3, embed_dim=32, projection=32))
TINY_REGRESSOR = dict(modes=6, width=16, layers=3, padding=0.25, projection=32)


def x_channels(task) -> int:
    return task.unknown_shape[0]


def u_channels(task) -> int:
    return task.state_shape[0]


def loss_evaluation(name: str) -> Callable:
    """An `evaluate` reporting the loss itself on the held-out batch as `name`."""

    def evaluate(loss_fn, held_out, *, x_norm, u_norm, task, key):
        return lambda m: {name: loss_fn(m, key, held_out)}

    return evaluate


def state_example(task, x_norm, u_norm, key):
    """(normalized x, normalized u = physics(x)); x from the first half of `split(key)`, as in every kind."""
    x = task.prior.sample(jr.split(key)[0])
    return x_norm.normalize(x), u_norm.normalize(task.physics(x))


def joint_example(task, x_norm, u_norm, key):
    """The normalized (unknown, state) stack `(C_x + C_u, H, W)`."""
    return jnp.concatenate(state_example(task, x_norm, u_norm, key))
