"""Out-of-distribution prior ranges on Poisson: Fun-DDPS with priors trained on three alpha ranges.

    python -m experiments.sweep --config=configs/ood_prior_range.py --workdir=DIR

The Fun-DDPS prior is trained on GRF smoothness alpha = 2.25 (single), alpha in
[1.875, 2.625] (narrow) or alpha in [1.5, 3.0] (full, the task's prior) through
`networks.model.task_options.alpha_range`; the surrogate is trained on the full range in
every arm, so the study isolates prior-training coverage (PosteriorBench Sec. 4.5,
Table 3). Evaluation is on the full-range Poisson task with the published eps-rule
reference; the records carry the PDE-residual diagnostic of each sample's surrogate state
and the recovered GRF exponent alpha (DCT-domain spectral likelihood) beside the truth's.

Tiny: 16 x 16, 2 cases x 16 samples, tiny networks, eps = 3e-3.
"""

from configs import base

ALPHA_RANGES = {"single": (2.25, 2.25), "narrow": (1.875, 2.625), "full": (1.5, 3.0)}


def get_config(arg: str | None = None):
    tiny = base.is_tiny(arg)
    samplers = {
        f"funddps_{arm}": base.sampler(
            "funddps",
            options=base.TINY_OPTIONS["funddps"] if tiny else {},
            networks={
                "model": {"kind": "prior", "task_options": {"alpha_range": alpha}, "num_steps": None},
                "surrogate": "surrogate",
            },
        )
        for arm, alpha in ALPHA_RANGES.items()
    }
    reference = base.eps_rule_reference(tiny)
    config = base.sweep(
        tiny, tasks={"poisson": {"resolution": 16 if tiny else 128}}, reference=reference, samplers=samplers
    )
    config.diagnostics = ("pde_residual", "alpha")
    return config
