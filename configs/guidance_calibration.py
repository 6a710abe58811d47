r"""Guidance-weight calibration on Poisson: FunDPS over lambda in [0, 1000], one noise threshold a sweep.

    for eps in 3e-4 4e-4 5e-4 6e-4 7e-4 8e-4; do
      python -m experiments.sweep --config=configs/guidance_calibration.py \
          --config.noise_threshold=$eps --workdir=DIR/eps=$eps
    done
    python -m experiments.studies --study=guidance_calibration --workdir=DIR

(`scripts/reproduce.sh` runs the whole grid; `thresholds(tiny)` lists it.) The published study
(PosteriorBench Sec. 4.6, Fig. 7 and App. D.1, Fig. 8): FunDPS on Poisson source recovery, posterior
thresholds eps in {3, ..., 8} x 1e-4, guidance weights lambda in [0, 1000], the five posterior
metrics (mean, std, MMD, SWD, spectral), the reference threshold tied to the noise, eps = 3 sigma,
so the thresholds are the observation noise levels sigma = eps / 3 in {1, 1.33, ..., 2.67} x 1e-4
(Fig. 7's x axis is 1/sigma^2). One sweep is one threshold: the Poisson task simulates its
observations with `noise_std = noise_threshold / 3`, the reference is the published eps rule
(MAE <= eps, K = 100 kept, weights exp(-MAE^2 / (2 (eps/3)^2))) on a rotation-augmented pool of
1M candidates, and FunDPS at its published profile (the evaluation code's update and units, 500
steps, sigma 0.01 -> 10; the published joint ``ddpmpp-uno`` prior) runs on `PUBLISHED_GUIDANCE`
(11 weights over [0, 1000], including Fig. 9's 25, 250 and 1000). The paper's claims, tested by
`experiments.studies --study=guidance_calibration` (`report.studies.noise_optima_se`): the
optimum lambda*_m(sigma) = argmin over lambda of metric m's over-case mean grows with 1/sigma^2
for almost every metric, and differs between metrics at one sigma (notably mean vs std error).
The report gives each optimum with its across-case standard error (bootstrap over cases) and
each metric's Spearman correlation of lambda* with 1/sigma^2.

Tiny: 16 x 16, thresholds x 10 (3e-3 ... 8e-3: a 4096 x 4 candidate pool reaches no
published threshold at this size), 2 cases x 16 samples, 16-step FunDPS on a tiny joint
network, 5 guidance weights.

``medium_oracle`` (our variant, not the published protocol): the same thresholds, noise
sigma = eps / 3 and guidance grid, on ``poisson_fixed`` at 32 x 32 (a linear-Gaussian task: its
`exact` posterior, 1000 draws, is the reference, so no eps rule), FunDPS at its published
profile and units with the exact GRF prior score in place of the network (``prior="oracle"``:
the ``fundps_oracle`` row of `main_table.py:medium`), 100 steps and 10 cases x 64 samples as the
medium scale uses. It isolates the published guidance update from any learned prior: does its
optimum move with 1/sigma^2 when the prior is exact? `thresholds_medium_oracle()` lists its grid:

    for eps in 0.0003 0.0004 0.0005 0.0006 0.0007 0.0008; do
      python -m experiments.sweep --config=configs/guidance_calibration.py:medium_oracle \
          --config.noise_threshold=$eps --workdir=DIR/eps=$eps
    done
    python -m experiments.studies --study=guidance_calibration --workdir=DIR

(`scripts/reproduce.sh full ROOT guidance_calibration_medium_oracle` runs the same.)
"""

import ml_collections

from configs import base, main_table
from posteriorjax.report import split

PUBLISHED_THRESHOLDS = (3e-4, 4e-4, 5e-4, 6e-4, 7e-4, 8e-4)
PUBLISHED_GUIDANCE = (0.0, 10.0, 25.0, 50.0, 100.0, 175.0, 250.0, 375.0, 500.0, 750.0, 1000.0)
TINY_GUIDANCE = (0.0, 50.0, 200.0, 500.0, 1000.0)


def thresholds(tiny: bool) -> tuple[float, ...]:
    """The noise thresholds eps of the study (sigma = eps / 3)."""
    return tuple(round(10 * e, 12) for e in PUBLISHED_THRESHOLDS) if tiny else PUBLISHED_THRESHOLDS


def thresholds_medium_oracle() -> tuple[float, ...]:
    """The thresholds eps of the ``medium_oracle`` variant: the published ones (sigma = eps / 3)."""
    return PUBLISHED_THRESHOLDS


def poisson_at_threshold(tiny: bool, threshold: ml_collections.FieldReference):
    """`(tasks, reference)`: Poisson with noise eps / 3 and the eps-rule reference at eps (linked fields)."""
    tasks = {"poisson": {"resolution": 16 if tiny else 128, "noise_std": threshold / 3.0}}
    reference = base.eps_rule_reference(tiny)
    reference.eps = threshold  # linked: the reference follows --config.noise_threshold
    return tasks, reference


def medium_oracle_config() -> ml_collections.ConfigDict:
    """The ``medium_oracle`` variant (module docstring): the medium table's ``fundps_oracle`` entry,
    uncalibrated, over `PUBLISHED_GUIDANCE` on ``poisson_fixed`` at noise `noise_threshold` / 3."""
    threshold = ml_collections.FieldReference(thresholds_medium_oracle()[0])
    label = "fundps" + split.ORACLE_SUFFIX
    config = main_table.medium_config(("poisson_fixed",), label)
    entry = config.samplers[label].to_dict()
    entry.pop("calibrate")
    entry["axes"] = {"guidance": PUBLISHED_GUIDANCE}
    config.samplers = ml_collections.ConfigDict({label: entry})
    config.tasks.poisson_fixed.noise_std = threshold / 3.0
    config.noise_threshold = threshold
    return config


def get_config(arg: str | None = None):
    if arg == "medium_oracle":
        return medium_oracle_config()
    tiny = base.is_tiny(arg)
    threshold = ml_collections.FieldReference(thresholds(tiny)[0])
    tasks, reference = poisson_at_threshold(tiny, threshold)
    guidance = TINY_GUIDANCE if tiny else PUBLISHED_GUIDANCE
    samplers = base.catalog(tiny, ("fundps",), axes={"fundps": {"guidance": guidance}}, profile="published")
    config = base.sweep(tiny, tasks=tasks, reference=reference, samplers=samplers)
    config.noise_threshold = threshold
    return config
