r"""Observation-noise study on Poisson: the guided samplers at one noise level sigma per sweep.

    for s in 5e-5 1e-4 2e-4 4e-4 8e-4; do
      python -m experiments.sweep --config=configs/noise_levels.py --config.noise_std=$s \
          --workdir=DIR/noise=$s
    done

(`scripts/reproduce.sh` runs the grid; `noise_levels(tiny)` lists it.) The Poisson task
simulates observations with `noise_std` and the reference is the published eps rule at
eps = 3 sigma (PosteriorBench Sec. 3.2) on a rotation-augmented pool. FunDPS, Fun-DDPS,
DDIS, DPS and DiffusionPDE run at their published profiles with a coarse log grid of their
guidance strength around the published value (x 1/4, x 1, x 4), ES-MDA and MC dropout at
their defaults: a Gaussian likelihood's score scales with 1/sigma^2, so a calibrated
guidance would move with the noise, which the per-level optima show.

Tiny: 16 x 16, noise levels x 10 (the tiny pool reaches no published threshold), 2 cases x
16 samples, tiny networks and short schedules.
"""

import ml_collections

from configs import base, guidance_calibration

PUBLISHED_NOISE = (5e-5, 1e-4, 2e-4, 4e-4, 8e-4)
GUIDANCE_AXES = {
    "fundps": {"guidance": (400.0, 1600.0, 6400.0)},
    "funddps": {"guidance": (25.0, 100.0, 400.0)},
    "dps": {"guidance": (400.0, 1600.0, 6400.0)},
    "diffusionpde": {"guidance": (5000.0, 20000.0, 80000.0)},
    "ddis": {"weight": (0.25, 1.0, 4.0)},
}
SAMPLERS = ("esmda", "mc_dropout", *GUIDANCE_AXES)


def noise_levels(tiny: bool) -> tuple[float, ...]:
    """The observation noise std sigma of each sweep of the study."""
    return tuple(round(10 * s, 12) for s in PUBLISHED_NOISE) if tiny else PUBLISHED_NOISE


def get_config(arg: str | None = None):
    tiny = base.is_tiny(arg)
    noise = ml_collections.FieldReference(noise_levels(tiny)[1])
    tasks, reference = guidance_calibration.poisson_at_threshold(tiny, noise * 3.0)
    samplers = base.catalog(tiny, SAMPLERS, axes=GUIDANCE_AXES)
    config = base.sweep(tiny, tasks=tasks, reference=reference, samplers=samplers)
    config.noise_std = noise
    return config
