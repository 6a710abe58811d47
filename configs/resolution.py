"""Resolution generalization on Darcy: networks trained at 64, at 128 and at both, evaluated at 128.

    python -m experiments.sweep --config=configs/resolution.py --workdir=DIR

FunDPS (function-space joint prior: trained and sampled with GRF noise) against DiffusionPDE
(grid prior: its joint network trained and sampled with white noise), all evaluated on the
128 x 128 Darcy task (PosteriorBench Sec. 4.7, Table 4), with the joint network of each
trained three ways (the neural operators are resolution-independent, so a model trained at
64 x 64 runs at 128 x 128):
  ``<sampler>@64``    trained at 64 x 64 (`networks.model.task_options` resolution override);
  ``<sampler>@128``   trained at 128 x 128;
  ``<sampler>@multi`` multi-resolution fine-tuning: the ``@64`` network (the same training run,
                      shared through its hash) continued at 128 x 128 for a quarter of the
                      scale's default step count (`FINETUNE_FRACTION`), with a fresh warm-up and
                      cosine schedule. `config.training.num_steps` sets the 64 and 128 runs only.

Tiny: trained at 16, at 32 and at 16 then 32, evaluated at 32; 2 cases x 16 samples.
"""

from configs import base
from posteriorjax import training

SAMPLERS = ("fundps", "diffusionpde")
# the diffusion noise each sampler's network is trained with (its sampler's own noise)
TRAINING = {"fundps": {}, "diffusionpde": {"diffusion": {"noise": "white"}}}
FINETUNE_FRACTION = 0.25


def training_resolutions(tiny: bool) -> tuple[int, int]:
    """(lower training resolution, evaluation resolution)."""
    return (16, 32) if tiny else (64, 128)


def finetune_steps(tiny: bool) -> int:
    """Steps of the multi-resolution arm's fine-tuning at the evaluation resolution."""
    steps = training.config("darcy", "joint", "tiny" if tiny else "full").train.num_steps
    return max(1, round(FINETUNE_FRACTION * steps))


def get_config(arg: str | None = None):
    tiny = base.is_tiny(arg)
    low, high = training_resolutions(tiny)
    arms = {
        str(low): {"task_options": {"resolution": low}},
        str(high): {"task_options": {"resolution": high}},
        "multi": {
            "task_options": {"resolution": high},
            "num_steps": finetune_steps(tiny),
            "pretrain": {"task_options": {"resolution": low}},
        },
    }
    samplers = {
        f"{name}@{arm}": base.sampler(
            name,
            options=base.TINY_OPTIONS.get(name, {}) if tiny else {},
            networks={"model": {"kind": "joint", "training": TRAINING[name], **network}},
        )
        for name in SAMPLERS
        for arm, network in arms.items()
    }
    reference = base.eps_rule_reference(tiny)
    return base.sweep(tiny, tasks={"darcy": {"resolution": high}}, reference=reference, samplers=samplers)
