r"""Reference-posterior validation (GT1/GT2): two independent eps-rule ensembles per case.

    python -m experiments.reference --config=configs/reference_validation.py --workdir=DIR
    python -m experiments.reference --config=configs/reference_validation.py --config.task=poisson \
        --workdir=DIR

A config for the reference pipeline (`posteriorjax.reference.pipeline`), not the sweep: a
sweep holds one reference per task, while the check needs two built from independent pools
(the named key streams `pool_a`, `pool_b` of `seed`) at the same budget. For every case the published eps rule
(eps = 3e-4, K = 100, sigma = eps / 3) is applied to each pool (GT1, GT2); prior draws and
pCN chains are scored against both and `report.json` holds, per metric, the worst ratio
r_m = max(m_GT1 / m_GT2, m_GT2 / m_GT1) (PosteriorBench App. C, Table 6: all close to 1,
< 1.08 for the non-spectral metrics) with the acceptance rates. 128 x 128, 8 cases, two
rotation-augmented pools of 200 x 5000 x 4 candidates each (`--config.task=poisson` for
the Poisson task). Resumable.

Tiny: the 16 x 16 settings of `configs/reference/darcy.py:tiny` with eps = 3e-3 (so that
the 2400-candidate pools of either task accept K = 20; seconds).
"""

from configs import base
from configs.reference import darcy


def get_config(arg: str | None = None):
    tiny = base.is_tiny(arg)
    c = darcy.get_config("tiny" if tiny else None)
    c.validation.two_ensemble = True
    c.eps_rule.enabled = True
    if tiny:
        c.eps_rule.eps = 3e-3
    else:
        c.task_options.resolution = 128
        c.cases.num = 8
        c.pool.num_chunks, c.pool.chunk_size = 200, 5000
        c.eps_rule.eps, c.eps_rule.num = 3e-4, 100
    return c
