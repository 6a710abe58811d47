"""The out-of-tree example (`examples/plugin_sampler.py`) in a tiny sweep.

    python -m experiments.sweep --plugins=examples.plugin_sampler \\
        --config=configs/plugin_example.py --workdir=/tmp/plugin-example

`poisson_fixed_sparse` (registered by the plugin) at 16 x 16, 2 cases x 8 samples, scored
against its exact posterior: the prior, the exact sampler and the plugin's `tempered_is`
over two temperatures. Without `--plugins` the sweep stops with an error naming the
unknown sampler and task. 61 s wall on the 2-core CPU shared with parallel work (mostly
compilation).
`get_config("tiny")` (the test) keeps only `tempered_is`, at temperatures 0 (prior
draws) and 1 (the posterior target).
"""

import ml_collections

from configs import base
from posteriorjax import sweep


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    tiny = base.is_tiny(arg)
    config = ml_collections.ConfigDict()
    config.seed = 0
    config.seeds = (0,)
    config.num_cases = 2
    config.num_samples = 8
    config.chunk_size = 4
    config.batch_size = 2
    config.overwrite = False
    config.tasks = {"poisson_fixed_sparse": {"resolution": 16}}
    config.reference = sweep.reference_config("exact", num_samples=32)
    config.references = {}
    plugin = {"options": {"num_proposals": 256}, "axes": {"temperature": (0.0, 1.0) if tiny else (0.5, 1.0)}}
    config.samplers = {"tempered_is": plugin} if tiny else {"prior": {}, "exact": {}, "tempered_is": plugin}
    config.training = {"scale": "tiny"}
    config.diagnostics = ()
    config.save_samples = 0
    config.figures = False
    return config
