"""The V-shape, our guidance-sweep variant: samplers driven from under- to over-guidance.

    python -m experiments.sweep --config=configs/pointwise_vs_distributional_guidance.py --workdir=DIR

Not the paper's form (that is `configs/pointwise_vs_distributional.py`: one point per row of the
main table, pointwise error against one reference sample). Here, on Darcy and Poisson, the
guided samplers (our profiles) run over log grids of their guidance strength spanning weak
(under-conditioned, wide) to strong (over-concentrated) conditioning, beside ES-MDA, MC dropout
and the prior, so each sampler traces a curve. The sweep's own figures (`vshape_<task>.png`,
`experiments.report`) plot the relative L2 error of the ensemble mean against the true field
(`rel_l2_mean`) against the five posterior metrics, the points of a sampler joined in guidance
order; `python -m experiments.studies --study=pointwise_vs_distributional --workdir=DIR` draws the
same rows against one reference sample (``rel_l2_one_reference``, the paper's x axis). Reference:
the eps rule (eps = 3e-4) on a rotation-augmented pool, shared by both tasks (same noise, 1e-4).

Tiny: 16 x 16, 2 cases x 16 samples, three guidance values per sampler, eps = 3e-3.
"""

from configs import base

PUBLISHED_AXES = {
    "fundps": {"guidance": (100.0, 400.0, 1600.0, 4000.0, 16000.0, 64000.0)},
    "funddps": {"guidance": (10.0, 30.0, 100.0, 300.0, 1000.0, 3000.0)},
    "dps": {"guidance": (100.0, 400.0, 1600.0, 4000.0, 16000.0, 64000.0)},
    "ddis": {"weight": (0.1, 0.3, 1.0, 3.0, 10.0)},
}
TINY_AXES = {
    "fundps": {"guidance": (100.0, 1600.0, 16000.0)},
    "funddps": {"guidance": (10.0, 100.0, 1000.0)},
    "dps": {"guidance": (100.0, 1600.0, 16000.0)},
    "ddis": {"weight": (0.1, 1.0, 10.0)},
}
SAMPLERS = ("prior", "esmda", "mc_dropout", *PUBLISHED_AXES)


def get_config(arg: str | None = None):
    tiny = base.is_tiny(arg)
    res = 16 if tiny else 128
    reference = base.eps_rule_reference(tiny)
    return base.sweep(
        tiny,
        tasks={"darcy": {"resolution": res}, "poisson": {"resolution": res}},
        reference=reference,
        samplers=base.catalog(tiny, SAMPLERS, axes=TINY_AXES if tiny else PUBLISHED_AXES),
    )
