"""Out-of-distribution prior ranges on Poisson: Fun-DDPS with priors trained on three alpha ranges.

    python -m experiments.sweep --config=configs/ood_prior_range.py --workdir=DIR
    python -m experiments.studies --study=ood_prior_range --workdir=DIR

PosteriorBench Sec. 4.5, Table 3: Fun-DDPS at its published profile (`profile="published"`:
the evaluation code's update and Poisson guidance 100, `base.PUBLISHED_OPTIONS`) with the
published networks (`base.PUBLISHED_NETWORKS`: the shared unknown-only ``ddpmpp-uno`` target
prior and the FNO surrogate 16 / 48 / 4), the prior trained on GRF smoothness alpha = 2.25
(single), alpha in [1.875, 2.625] (narrow) or alpha in [1.5, 3.0] (full, the task's prior)
through `networks.model.task_options.alpha_range`. The surrogate is trained on the full range in
every arm (one spec, one shared training run), so the study isolates prior-training coverage.
Evaluation is on the full-range Poisson task with the published eps-rule reference (eps = 3e-4,
K = 100, rotation-augmented pool). Table 3's columns are the pointwise relative L2 against one
reference sample (``rel_l2_one_reference``) and the five posterior metrics
(`posteriorjax.report.studies.STUDIES`); the records also carry Fig. 6's diagnostics, the PDE
residual of each sample's surrogate state and the recovered GRF exponent alpha (DCT-domain
spectral likelihood) beside the truth's.

Tiny: 16 x 16, 2 cases x 16 samples, the tiny published networks, eps = 3e-3.
"""

import copy

from configs import base

ALPHA_RANGES = {"single": (2.25, 2.25), "narrow": (1.875, 2.625), "full": (1.5, 3.0)}


def get_config(arg: str | None = None):
    tiny = base.is_tiny(arg)
    published = base.catalog(tiny, ("funddps",), profile="published")["funddps"]
    samplers = {}
    for arm, alpha in ALPHA_RANGES.items():
        entry = copy.deepcopy(published)
        entry["networks"]["model"]["task_options"] = {"alpha_range": alpha}
        samplers[f"funddps_{arm}"] = entry
    reference = base.eps_rule_reference(tiny)
    config = base.sweep(
        tiny, tasks={"poisson": {"resolution": 16 if tiny else 128}}, reference=reference, samplers=samplers
    )
    config.diagnostics = ("pde_residual", "alpha")
    return config
