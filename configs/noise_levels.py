r"""Observation noise on Poisson: the paper's guided samplers at published profiles, one noise level a sweep.

    for s in $(python -c "from configs import noise_levels as m; print(*m.noise_levels(False))"); do
      python -m experiments.sweep --config=configs/noise_levels.py --config.noise_std=$s \
          --workdir=DIR/noise=$s
    done
    python -m experiments.studies --study=noise_levels --workdir=DIR

(`scripts/reproduce.sh` runs the grid.) Noise levels: the paper's, sigma = eps / 3 for its
thresholds eps in {3, ..., 8} x 1e-4 (PosteriorBench Sec. 4.6, App. D.1), the grid of
`guidance_calibration.py`, so the two studies meet at the same sigma. The Poisson task simulates
its observations with `noise_std` = sigma and the reference is the published eps rule at
eps = 3 sigma (Sec. 3.2) on a rotation-augmented pool (`guidance_calibration.poisson_at_threshold`).
Samplers: the paper's guided samplers FunDPS, Fun-DDPS, DDIS and DiffusionPDE at their
published profiles (`profile="published"`: PosteriorBench's evaluation code, its networks) with
their guidance strength on a coarse log grid around the published Poisson value (`GUIDANCE_AXES`:
x 1/4, x 1, x 4 of FunDPS 1600, Fun-DDPS 100, DiffusionPDE 20000, DDIS weight 2), and the
paper's ES-MDA (published profile) and MC dropout as unguided baselines. A Gaussian likelihood's
score scales with 1/sigma^2, so a guidance calibrated to the noise would move its optimum with
1/sigma^2; the per-level optima (`experiments.studies`) show whether it does. The paper ran this
calibration for FunDPS only (Fig. 7); extending it to the other guided samplers is ours.

Tiny: 16 x 16, noise levels x 10 (the tiny pool reaches no published threshold), 2 cases x
16 samples, tiny networks and short schedules.

``medium_oracle`` (our variant, not the published study): the same noise levels on
``poisson_fixed`` at 32 x 32 against its exact linear-Gaussian posterior (1000 draws), with the
exact GRF prior score in place of every prior network: the medium table's oracle rows
``fundps_oracle``, ``diffusionpde_oracle`` (published profiles) and ``dps_oracle`` (ours: DPS has
no published profile) over x 1/4, x 1, x 4 of their Poisson value (`ORACLE_AXES`; DPS: our 1600),
uncalibrated, 100 steps, beside ES-MDA (published profile, no network); 10 cases x 64 samples.
The networks-free samplers of the study, so it runs on a CPU now:

    for s in $(python -c "from configs import noise_levels as m; print(*m.noise_levels_medium_oracle())"); do
      python -m experiments.sweep --config=configs/noise_levels.py:medium_oracle \
          --config.noise_std=$s --workdir=DIR/noise=$s
    done
    python -m experiments.studies --study=noise_levels --workdir=DIR

(`scripts/reproduce.sh full ROOT noise_levels_medium_oracle` runs the same.)
"""

import ml_collections

from configs import base, guidance_calibration, main_table
from posteriorjax.report import split
from posteriorjax.samplers import tuned

FACTORS = (0.25, 1.0, 4.0)
# the published Poisson value of each guided sampler's guidance strength (its evaluation profile)
PUBLISHED_POISSON = {
    "fundps": ("guidance", tuned.PUBLISHED["poisson"]["fundps"]["guidance"]),
    "funddps": ("guidance", tuned.PUBLISHED["poisson"]["funddps"]["guidance"]),
    "diffusionpde": ("guidance", tuned.PUBLISHED["poisson"]["diffusionpde"]["guidance"]),
    "ddis": ("weight", tuned.PUBLISHED["poisson"]["ddis"]["weight"]),
}
GUIDANCE_AXES = {name: {axis: tuple(f * v for f in FACTORS)} for name, (axis, v) in PUBLISHED_POISSON.items()}
SAMPLERS = ("esmda", "mc_dropout", *GUIDANCE_AXES)
# ``medium_oracle``: the oracle twins of the guided samplers without a surrogate network, x 1/4, x 1,
# x 4 of their Poisson value (DPS: our default, `tuned.DEFAULTS`; it has no published profile)
ORACLE_AXES = {
    name + split.ORACLE_SUFFIX: {"guidance": tuple(f * value for f in FACTORS)}
    for name, value in (
        ("fundps", PUBLISHED_POISSON["fundps"][1]),
        ("dps", tuned.DEFAULTS["dps"]["guidance"]),
        ("diffusionpde", PUBLISHED_POISSON["diffusionpde"][1]),
    )
}


def noise_levels(tiny: bool) -> tuple[float, ...]:
    """The observation noise std sigma of each sweep: eps / 3 over `guidance_calibration.thresholds`."""
    return tuple(round(eps / 3.0, 12) for eps in guidance_calibration.thresholds(tiny))


def noise_levels_medium_oracle() -> tuple[float, ...]:
    """The noise levels of the ``medium_oracle`` variant: the published ones, `noise_levels(False)`."""
    return noise_levels(False)


def medium_oracle_config():
    """The ``medium_oracle`` variant (module docstring) at noise std `noise_std`."""
    noise = ml_collections.FieldReference(noise_levels_medium_oracle()[0])
    config = main_table.medium_config(("poisson_fixed",), ",".join(["esmda", *ORACLE_AXES]))
    samplers = {}
    for label, entry in config.samplers.to_dict().items():
        entry.pop("calibrate", None)
        entry["axes"] = ORACLE_AXES.get(label, {})
        samplers[label] = entry
    config.samplers = ml_collections.ConfigDict(samplers)
    config.tasks.poisson_fixed.noise_std = noise
    config.noise_std = noise
    return config


def get_config(arg: str | None = None):
    if arg == "medium_oracle":
        return medium_oracle_config()
    tiny = base.is_tiny(arg)
    noise = ml_collections.FieldReference(noise_levels(tiny)[0])
    tasks, reference = guidance_calibration.poisson_at_threshold(tiny, noise * 3.0)
    samplers = base.catalog(tiny, SAMPLERS, axes=GUIDANCE_AXES, profile="published")
    config = base.sweep(tiny, tasks=tasks, reference=reference, samplers=samplers)
    config.noise_std = noise
    return config
