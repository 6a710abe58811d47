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
"""

import ml_collections

from configs import base

PUBLISHED_THRESHOLDS = (3e-4, 4e-4, 5e-4, 6e-4, 7e-4, 8e-4)
PUBLISHED_GUIDANCE = (0.0, 10.0, 25.0, 50.0, 100.0, 175.0, 250.0, 375.0, 500.0, 750.0, 1000.0)
TINY_GUIDANCE = (0.0, 50.0, 200.0, 500.0, 1000.0)


def thresholds(tiny: bool) -> tuple[float, ...]:
    """The noise thresholds eps of the study (sigma = eps / 3)."""
    return tuple(round(10 * e, 12) for e in PUBLISHED_THRESHOLDS) if tiny else PUBLISHED_THRESHOLDS


def poisson_at_threshold(tiny: bool, threshold: ml_collections.FieldReference):
    """`(tasks, reference)`: Poisson with noise eps / 3 and the eps-rule reference at eps (linked fields)."""
    tasks = {"poisson": {"resolution": 16 if tiny else 128, "noise_std": threshold / 3.0}}
    reference = base.eps_rule_reference(tiny)
    reference.eps = threshold  # linked: the reference follows --config.noise_threshold
    return tasks, reference


def get_config(arg: str | None = None):
    tiny = base.is_tiny(arg)
    threshold = ml_collections.FieldReference(thresholds(tiny)[0])
    tasks, reference = poisson_at_threshold(tiny, threshold)
    guidance = TINY_GUIDANCE if tiny else PUBLISHED_GUIDANCE
    samplers = base.catalog(tiny, ("fundps",), axes={"fundps": {"guidance": guidance}}, profile="published")
    config = base.sweep(tiny, tasks=tasks, reference=reference, samplers=samplers)
    config.noise_threshold = threshold
    return config
