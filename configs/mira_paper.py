"""The MIRA paper's synthetic experiments (Sec. 5.1, App. E.2.2, E.3.4, E.4) at CPU scale.

    python -m experiments.mira_paper --config=configs/mira_paper.py --workdir=DIR

Sections and their sizes: `posteriorjax.studies.mira_paper.default_config` (the paper's L and N
where CPU time allows; E.2.2 at the E.5 scale N = 400, L = 500). Writes DIR/mira_paper.md
and DIR/mira_paper.json. Tiny: fewer conditions and repeats (a smoke run in about a minute).
"""

import ml_collections

from configs import base
from posteriorjax.studies import mira_paper


def get_config(arg: str | None = None):
    tiny = base.is_tiny(arg)
    c = mira_paper.default_config()
    if tiny:
        c["sec5_1"].update(num_conditions=200, num_samples=200)
        c["e4"].update(num_conditions=200, num_samples=300)
        c["e3_4"].update(num_conditions=(200,), repeats=2)
        c["e3_4"]["lc2st"].update(repeats=1, observations=4, num_null=10, steps=100)
        c["e2_2"].update(dims=(2,), shifts=(0.0, 1.0), num_conditions=100, num_samples=100)
    return ml_collections.ConfigDict(c)
