"""Training settings: the `TrainConfig` dataclass, its optimizer, and each kind's default config.

`config(task, kind, scale)` is the full ml_collections config of one network (task, backbone,
diffusion noise, normalization, data, evaluation, `train` section) that `training.run` trains;
`configs/train/network.py` exposes it on the command line and the sweep trains its networks
from it. The backbone and step count come from the kind's registry entry (`training.kinds`).
``tiny`` trains in about a minute on one CPU at 16 x 16; ``medium`` is the published backbone
shrunk to 32 x 32 by `nn.published.scaled` (a 2-core CPU trains one in tens of minutes);
``full`` is sized like the published benchmark networks at 128 x 128 and is meant for a GPU. The state
normalization is estimated from `normalization.num_draws` prior draws (seed
`normalization.seed`) when the run starts and stored in the model and `provenance.json`.
"""

from __future__ import annotations

import copy
import dataclasses

import ml_collections
import optax

from posteriorjax import checks
from posteriorjax.tasks import ccs
from posteriorjax.training import kinds, scores


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Optimization and bookkeeping settings (the `config.train` section).

    The optimizer (`make_optimizer`): global-norm clipping at `clip_norm` (0: none), then AdamW
    with `weight_decay` under a linear warm-up over `warmup_steps` (0: none) and a cosine decay
    to `end_learning_rate_factor` x `learning_rate` at `num_steps`. The in-memory loops
    (`loop.scan`) read the optimizer settings, `num_steps` and `batch_size`; `fit` also the
    EMA, logging, evaluation, checkpoint, seed and progress settings. The EMA of the parameters
    decays by `ema_decay` per step, capped while the run is young so that its half-life is at
    most `ema_rampup` x the steps taken (EDM's rampup; `loop.ema_decay_at`).
    """

    num_steps: int = 1000
    batch_size: int = 32
    learning_rate: float = 1e-3
    warmup_steps: int = 100
    end_learning_rate_factor: float = 0.01
    weight_decay: float = 1e-4
    clip_norm: float = 1.0
    ema_decay: float = 0.999
    ema_rampup: float = 0.05
    log_every: int = 50
    eval_every: int = 500
    checkpoint_every: int = 500
    keep_checkpoints: int = 3
    seed: int = 0
    progress: bool = True

    def __post_init__(self):
        for name in (
            "num_steps",
            "batch_size",
            "log_every",
            "eval_every",
            "checkpoint_every",
            "keep_checkpoints",
        ):
            checks.positive_int(name, getattr(self, name))
        checks.positive("learning_rate", self.learning_rate)
        checks.integer_at_least("warmup_steps", self.warmup_steps, 0)
        checks.integer_at_least("seed", self.seed, 0)
        if not isinstance(self.progress, bool):
            raise ValueError(f"progress: expected True or False, got {self.progress!r}")
        if not 0.0 <= checks.positive("ema_decay", self.ema_decay, allow_zero=True) < 1.0:
            raise ValueError(f"ema_decay: expected a number in [0, 1), got {self.ema_decay!r}")
        for name in ("end_learning_rate_factor", "weight_decay", "clip_norm", "ema_rampup"):
            checks.positive(name, getattr(self, name), allow_zero=True)


def schedule(cfg: TrainConfig) -> optax.Schedule:
    """Linear warm-up to `learning_rate`, then cosine decay to `end_learning_rate_factor` of it."""
    return optax.warmup_cosine_decay_schedule(
        0.0,
        cfg.learning_rate,
        cfg.warmup_steps,
        max(cfg.num_steps, cfg.warmup_steps + 1),
        end_value=cfg.learning_rate * cfg.end_learning_rate_factor,
    )


def make_optimizer(cfg: TrainConfig) -> optax.GradientTransformation:
    """Global-norm clipping (unless `clip_norm` is 0) then AdamW under `schedule(cfg)`."""
    clip = [optax.clip_by_global_norm(cfg.clip_norm)] if cfg.clip_norm > 0 else []
    return optax.chain(*clip, optax.adamw(schedule(cfg), weight_decay=cfg.weight_decay))


def train_config(section) -> TrainConfig:
    """`TrainConfig` from the `config.train` section; unknown keys are an error."""
    values = section.to_dict() if hasattr(section, "to_dict") else dict(section)
    known = {f.name for f in dataclasses.fields(TrainConfig)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"config.train: unknown key(s) {unknown}; expected a subset of {sorted(known)}")
    return TrainConfig(**values)


def config(task: str, kind: str, scale: str = "full") -> ml_collections.ConfigDict:
    """The training config of a `kind` network (`training.kinds`) for `task` at `scale` (`kinds.SCALES`)."""
    if scale not in kinds.SCALES:
        raise ValueError(f"scale: expected one of {kinds.SCALES}, got {scale!r}")
    entry = kinds.get(kind)
    tiny = scale == "tiny"
    c = ml_collections.ConfigDict()
    c.task = task
    c.task_options = ml_collections.ConfigDict(_task_options(task, scale))
    c.kind = kind
    name, options = copy.deepcopy(entry.models[scale])
    c.model = ml_collections.ConfigDict({"name": name, "options": options, "seed": 0})
    c.diffusion = ml_collections.ConfigDict(
        {
            "noise": "grf",
            "noise_alpha": 2.0,
            "noise_tau": 3.0,
            "p_mean": -1.2,
            "p_std": 1.2,
            "sigma_data": 1.0,
            "data_scale": 1.0,
            "rbf_scale": 0.05,
            "rbf_nugget_std": 0.01,
        }
    )
    c.normalization = ml_collections.ConfigDict({"num_draws": 256, "seed": 0})
    c.data = ml_collections.ConfigDict({"source": "task", "pool_size": 1024, "seed": 1})
    c.eval = ml_collections.ConfigDict({"num_examples": 64 if tiny else 256, "seed": 12345})
    c.train = ml_collections.ConfigDict(_train_section(entry, scale))
    c.scores = ml_collections.ConfigDict(scores.defaults(kind, scale))  # the network's own scores
    if entry.inputs:  # the workdirs of the trained networks the kind's examples need (`run.trained`)
        c.inputs = ml_collections.ConfigDict({role: "" for role in entry.inputs})
    return c


def _task_options(task: str, scale: str) -> dict:
    """The task options of a scale: 16 x 16 / 32 x 32 / 128 x 128 for the square-grid tasks; CCS:
    its `TINY` / `MEDIUM` scale / the published 64 x 200 grid (the defaults)."""
    if task == "ccs":
        return {"tiny": dict(ccs.TINY), "medium": dict(ccs.MEDIUM)}.get(scale, {})
    return {"resolution": {"tiny": 16, "medium": 32}.get(scale, 128)}


def _train_section(entry: kinds.Kind, scale: str) -> dict:
    """Optimization settings per scale. The published networks train 20k-200k steps at 2e-4
    (generative) with EMA 0.9999; the medium scale's few thousand steps need a larger rate and a
    shorter EMA to converge, the tiny scale's few hundred larger still."""
    generative = entry.generative
    by_scale = {
        "tiny": dict(batch_size=16, learning_rate=3e-3, warmup_steps=20, ema_decay=0.99, log_every=25,
                     eval_every=100),
        "medium": dict(batch_size=32, learning_rate=1e-3 if generative else 2e-3, warmup_steps=200,
                       ema_decay=0.999, log_every=50, eval_every=250),
        "full": dict(batch_size=32, learning_rate=2e-4 if generative else 1e-3, warmup_steps=1000,
                     ema_decay=0.9999 if generative else 0.999, log_every=200, eval_every=5000),
    }[scale]  # fmt: skip
    return {
        "num_steps": entry.steps[scale],
        **by_scale,
        "end_learning_rate_factor": 0.01,
        "ema_rampup": 0.05,
        "weight_decay": 1e-4,
        "clip_norm": 1.0,
        "checkpoint_every": by_scale["eval_every"],
        "keep_checkpoints": 3,
        "seed": 0,
        "progress": True,
    }
