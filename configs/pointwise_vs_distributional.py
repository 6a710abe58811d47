"""Pointwise vs distributional accuracy (the V-shape, PosteriorBench Sec. 4.3, Fig. 4): the main table.

    python -m experiments.sweep --config=configs/main_table.py --workdir=DIR
    python -m experiments.studies --study=pointwise_vs_distributional --workdir=DIR

The paper draws one point per (method, task) of its main table (Table 2): the pointwise relative
L2 error against ONE reference sample on x, each of the five posterior metrics (mean, std, MMD,
SWD, spectral) on y. So this study's sweep IS the main table: `get_config(arg)` returns
`configs/main_table.py`'s config at the same argument ("", "medium", "tiny"; one workdir serves
both), and the V-shape is a report of its records (`posteriorjax.report.studies`): per row the
over-case mean and standard error of ``rel_l2_one_reference`` (the registry metric: mean over
members of ||x_i - r_0|| / ||r_0||, r_0 the first member of the case's stored reference ensemble,
a uniformly random accepted candidate under the eps rule) and of each posterior metric, drawn as
`vshape.png` (colour per sampler, marker per task) with the table `pointwise_vs_distributional.md`
(and per metric the Spearman correlation on the low and the high half of the pointwise axis).

Our variant, which drives the guided samplers from under- to over-guidance and plots pointwise
error against the truth, is `configs/pointwise_vs_distributional_guidance.py`.
"""

from configs import main_table


def get_config(arg: str | None = None):
    return main_table.get_config(arg)
