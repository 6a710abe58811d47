"""Training: the registry of network kinds, one optax loop, its settings, checkpoints and data.

kinds        the registry (`kinds.get`, `kinds.names`, `kinds.register`; `posteriorjax.kinds`):
             per kind its channels, training example, model wrapper, loss, evaluation, and
             default backbones and steps per scale (a sampler names the kinds it takes);
settings     `TrainConfig` (the `config.train` section), `make_optimizer`, and `config(task,
             kind, scale)`, the full default config of one network;
loop         `update` (the optimizer step), the checkpointed, resumable `fit`, and the
             in-memory `scan` / `scan_ensemble` (deep ensembles, stacked per-view models);
checkpoints  `TrainState`, orbax `Checkpoints` with a model fingerprint;
data         `TaskSource` (on-the-fly prior draws), `PoolSource`, `build_pool`;
losses       the kinds' losses and the held-out relative L2 error;
run          `build(config)`, `run(config, workdir, init=None, inputs=None)` and `trained(workdir)`;
scores       a trained network's own scores (`scores.json`, logged while it trains): generative
             priors against exact prior draws beside the Monte Carlo floor, the surrogate's
             per-channel error, the conditional kinds' held-out error.
"""

from posteriorjax.training import kinds
from posteriorjax.training.loop import fit, make_step, scan, scan_ensemble, update
from posteriorjax.training.run import build_model, run, trained
from posteriorjax.training.settings import TrainConfig, config, make_optimizer

__all__ = [
    "TrainConfig",
    "build_model",
    "config",
    "fit",
    "kinds",
    "make_optimizer",
    "make_step",
    "run",
    "scan",
    "scan_ensemble",
    "trained",
    "update",
]
