"""Resolution generalization on Darcy: networks trained at 64, at 128 and at both, evaluated at 128.

    python -m experiments.sweep --config=configs/resolution.py --workdir=DIR
    python -m experiments.studies --study=resolution --workdir=DIR

PosteriorBench Sec. 4.7, Table 4: FunDPS against DiffusionPDE, both at their published profiles
(`profile="published"`: the evaluation code's update, Darcy guidance, step counts and noise, RBF
kernel noise for FunDPS, white noise for DiffusionPDE) with their published joint networks
(`base.PUBLISHED_NETWORKS`: the ``ddpmpp-uno`` prior, the ``ddpmpp`` U-Net), all evaluated on the
128 x 128 Darcy task with the published eps-rule reference, the five posterior metrics as Table 4's
columns. Each joint network is trained three ways (the networks are resolution-independent: a
model trained at 64 x 64 runs at 128 x 128):
  ``<sampler>@64``    trained at 64 x 64 (`networks.model.task_options` resolution override) for
                      the published length S (15 M images / batch 32 at full scale);
  ``<sampler>@128``   trained at 128 x 128 for S;
  ``<sampler>@multi`` the published multi-resolution schedule of FunDPS
                      (`darcy_fundps_64_pretrain.yml`, `darcy_fundps_128_finetune.yml`): pretrained
                      at 64 x 64 for 10/15 S (10 M images), then continued at 128 x 128 to 15 M
                      images (5/15 S more) with no second warm-up (EDM's ramp-up counts the images
                      seen, and 10 M is past it), the network's nominal resolution kept; the same
                      total S as the single-resolution arms. The paper's multi-resolution DiffusionPDE row
                      has no published config; it gets the same schedule.
Every arm sets its own step counts, so `config.training.num_steps` changes none of them.

Tiny: trained at 16, at 32 and at 16 then 32, evaluated at 32; 2 cases x 16 samples; S the tiny
training length (`posteriorjax.training.config(..., "tiny")`).
"""

import copy

from configs import base
from posteriorjax import training

SAMPLERS = ("fundps", "diffusionpde")
# the published multi-resolution schedule: 10 M images at 64, then to 15 M images at 128
PRETRAIN_FRACTION = 10 / 15
FINETUNE_FRACTION = 5 / 15


def training_resolutions(tiny: bool) -> tuple[int, int]:
    """(lower training resolution, evaluation resolution)."""
    return (16, 32) if tiny else (64, 128)


def training_steps(spec: dict, tiny: bool) -> int:
    """S, the single-resolution arms' length: the published spec's, else the scale's default."""
    if spec.get("num_steps") is not None:
        return int(spec["num_steps"])
    return training.config("darcy", spec["kind"], "tiny" if tiny else "full").train.num_steps


def warmup_steps(spec: dict, tiny: bool, steps: int) -> int:
    """The warm-up of a run of `steps` with `spec`: the published one where the spec sets it, else the
    scale's default capped at a fifth of the run (`sweep.networks.network_config`'s rule)."""
    given = spec.get("training", {}).get("train", {}).get("warmup_steps")
    if given is not None:
        return int(given)
    default = training.config("darcy", spec["kind"], "tiny" if tiny else "full").train.warmup_steps
    return min(default, max(steps // 5, 1))


def multi_steps(steps: int) -> tuple[int, int]:
    """(pretraining steps at the lower resolution, fine-tuning steps at the evaluation resolution)."""
    return max(1, round(PRETRAIN_FRACTION * steps)), max(1, round(FINETUNE_FRACTION * steps))


def get_config(arg: str | None = None):
    tiny = base.is_tiny(arg)
    low, high = training_resolutions(tiny)
    samplers = {}
    for name, entry in base.catalog(tiny, SAMPLERS, profile="published").items():
        spec = entry["networks"]["model"]
        steps = training_steps(spec, tiny)
        pre, fine = multi_steps(steps)
        published = copy.deepcopy(spec.get("training", {}))
        arms = {
            str(low): {"task_options": {"resolution": low}, "num_steps": steps},
            str(high): {"task_options": {"resolution": high}, "num_steps": steps},
            "multi": {  # the continuation keeps the learning rate reached: no second warm-up
                "task_options": {"resolution": high},
                "num_steps": fine,
                "training": {**published, "train": {**published.get("train", {}), "warmup_steps": 0}},
                "pretrain": {
                    "task_options": {"resolution": low},
                    "num_steps": pre,
                    "training": {"train": {"warmup_steps": warmup_steps(spec, tiny, pre)}},
                },
            },
        }
        for arm, network in arms.items():
            armed = copy.deepcopy(entry)
            armed["networks"]["model"] = {**copy.deepcopy(spec), **network}
            samplers[f"{name}@{arm}"] = armed
    reference = base.eps_rule_reference(tiny)
    return base.sweep(tiny, tasks={"darcy": {"resolution": high}}, reference=reference, samplers=samplers)
