"""Out-of-distribution prior ranges on Poisson: Fun-DDPS with priors trained on three alpha ranges.

    python -m experiments.sweep --config=configs/ood_prior_range.py[:tiny|:medium] --workdir=DIR
    python -m experiments.studies --study=ood_prior_range --workdir=DIR

PosteriorBench Sec. 4.5, Table 3: Fun-DDPS at its published profile (`profile="published"`: the
evaluation code's update and Poisson guidance 100, `base.PUBLISHED_OPTIONS`) with the published
networks (`base.PUBLISHED_NETWORKS`: the shared unknown-only ``ddpmpp-uno`` target prior and the FNO
surrogate 16 / 48 / 4), the prior trained on GRF smoothness alpha = 2.25 (single), alpha in [1.875,
2.625] (narrow) or alpha in [1.5, 3.0] (full) through `networks.model.task_options.alpha_range` (the
full arm is the task's own prior and sets no option, so its network is the one the main table's
Fun-DDPS row trains). The surrogate is trained on the full range in every arm (one spec, one shared
training run), so the study isolates prior-training coverage. Evaluation is on the full-range
Poisson task with the published eps-rule reference (eps = 3e-4, K = 100, rotation-augmented pool).
Table 3's columns are the pointwise relative L2 against one reference sample
(``rel_l2_one_reference``) and the five posterior metrics (`posteriorjax.report.studies.STUDIES`);
the records also carry Fig. 6's diagnostics, the PDE residual of each sample's surrogate state and
the recovered GRF exponent alpha (DCT-domain spectral likelihood) beside the truth's.

Tiny: 16 x 16, 2 cases x 16 samples, the tiny published networks, eps = 3e-3.

Medium (``:medium``): the medium main table's Poisson part (`main_table.medium_config`: 32 x 32,
its 10 test cases x 64 samples, its eps-rule reference with K = 1000 from a 524,288-candidate
pool, the networks scaled by `SCALE_RULES["medium"]` and trained 1,500 / 6,000 steps, 100 Fun-DDPS
steps) with every arm at one guidance weight, `MEDIUM_GUIDANCE`: the weight the main table's
Fun-DDPS row calibrated on its validation cases (the published study runs every arm at the
published 100). Its full arm repeats that row: the same networks, guidance, cases and sampler keys.
"""

import copy

import ml_collections

from configs import base, main_table

# the arms' GRF smoothness ranges; "full" is the Poisson task's own (`tasks.poisson`'s default)
ALPHA_RANGES = {"single": (2.25, 2.25), "narrow": (1.875, 2.625), "full": (1.5, 3.0)}
# the Fun-DDPS guidance `configs/main_table.py:medium:poisson` calibrated (0.1 x the published
# 100; results/main_table_medium/poisson_learned_funddps/calibration/poisson/funddps.json)
MEDIUM_GUIDANCE = 10.0


def arms(entry: dict) -> dict:
    """{"funddps_<arm>": `entry` with its prior trained on the arm's alpha range} (module doc)."""
    out = {}
    for arm, alpha in ALPHA_RANGES.items():
        arm_entry = copy.deepcopy(entry)
        if arm != "full":
            arm_entry["networks"]["model"]["task_options"] = {"alpha_range": alpha}
        out[f"funddps_{arm}"] = arm_entry
    return out


def medium_config() -> ml_collections.ConfigDict:
    """The ``:medium`` study (module docstring)."""
    config = main_table.medium_config(("poisson",), "funddps")
    entry = config.samplers.funddps.to_dict()
    entry.pop("calibrate")
    entry["axes"] = {"guidance": [MEDIUM_GUIDANCE]}  # as the row's calibrated test grid
    config.samplers = ml_collections.ConfigDict(arms(entry))
    config.diagnostics = ("pde_residual", "alpha")
    return config


def get_config(arg: str | None = None):
    if arg == "medium":
        return medium_config()
    tiny = base.is_tiny(arg)
    samplers = arms(base.catalog(tiny, ("funddps",), profile="published")["funddps"])
    reference = base.eps_rule_reference(tiny)
    config = base.sweep(
        tiny, tasks={"poisson": {"resolution": 16 if tiny else 128}}, reference=reference, samplers=samplers
    )
    config.diagnostics = ("pde_residual", "alpha")
    return config
