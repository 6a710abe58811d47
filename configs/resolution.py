"""Resolution generalization on Darcy: networks trained at 64 and at 128, evaluated at 128.

    python -m experiments.sweep --config=configs/resolution.py --workdir=DIR

FunDPS (function-space joint prior, GRF noise) against DiffusionPDE (white-noise joint
prior), each with its joint network trained at 64 x 64 (`networks.model.task_options`
resolution override: the neural operators are resolution-independent, so a 64 x 64 model
runs at 128 x 128) and at 128 x 128, all evaluated on the 128 x 128 Darcy task (PosteriorBench
Sec. 4.7, Table 4). The published multi-resolution training arm is not included: the
training loop (`posteriorjax.train`) trains at one task resolution.

Tiny: trained at 16 and at 32, evaluated at 32; 2 cases x 16 samples.
"""

from configs import base
from posteriorjax import sweep

SAMPLERS = ("fundps", "diffusionpde")


def training_resolutions(tiny: bool) -> tuple[int, int]:
    """(lower training resolution, evaluation resolution)."""
    return (16, 32) if tiny else (64, 128)


def get_config(arg: str | None = None):
    tiny = base.is_tiny(arg)
    low, high = training_resolutions(tiny)
    samplers = {}
    for name in SAMPLERS:
        for res in (low, high):
            samplers[f"{name}@{res}"] = base.sampler(
                name,
                options=base.TINY_OPTIONS.get(name, {}) if tiny else {},
                networks={"model": {"kind": "joint", "task_options": {"resolution": res}, "num_steps": None}},
            )
    reference = sweep.reference_config(
        "rejection",
        num_samples=32 if tiny else 100,
        pool_size=4096 if tiny else 1_000_000,
        pool_chunk=1024 if tiny else 10_000,
        augment=True,
        eps=3e-3 if tiny else 3e-4,
    )
    return base.sweep(tiny, tasks={"darcy": {"resolution": high}}, reference=reference, samplers=samplers)
