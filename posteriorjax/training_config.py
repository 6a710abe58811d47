"""Shared training configuration: `config(task, kind, arg)` for every task and model kind
(`configs/train/common.py` re-exports it; the sweep trains its networks from it).

    python -m experiments.train --config=configs/train/<task>_<kind>.py[:tiny] --workdir=DIR

Kinds: ``prior`` (EDM denoiser over the unknown), ``joint`` (over the (unknown, state) stack),
``surrogate`` (FNO unknown -> state), ``inverse`` (FNO with channel-MLP dropout, masked
observations + mask -> unknown), ``fundiff`` (FNO velocity of a conditional flow over the
unknown, conditioned on masked observations + mask; its base noise is the ``diffusion``
section's noise). ``tiny`` trains in about a minute on one CPU at 16 x 16;
the default (full) variant is sized like the published benchmark networks at 128 x 128 and is
meant for a GPU. The state normalization is estimated from `normalization.num_draws` prior draws
(seed `normalization.seed`) when the run starts and stored in the model and `provenance.json`.
"""

from __future__ import annotations

import ml_collections

# Published network sizes (PosteriorBench configs): Fun-DDPS surrogate FNO 16 modes / 48 channels /
# 4 layers; MC-dropout inverse FNO 32 modes / 128 channels / 6 layers / dropout 0.2.
FULL_MODELS = {
    "prior": ("uno", dict(modes=32, width=64, depth=3, embed_dim=128)),
    "joint": ("uno", dict(modes=32, width=64, depth=3, embed_dim=128)),
    "surrogate": ("fno", dict(modes=16, width=48, layers=4, padding=0.125)),
    "inverse": ("fno", dict(modes=32, width=128, layers=6, padding=0.125, dropout=0.2)),
    "fundiff": ("fno", dict(modes=32, width=64, layers=4, padding=0.125, embed_dim=128)),
}
TINY_MODELS = {
    "prior": ("fno", dict(modes=6, width=16, layers=3, embed_dim=32, projection=32)),
    "joint": ("fno", dict(modes=6, width=16, layers=3, embed_dim=32, projection=32)),
    "surrogate": ("fno", dict(modes=6, width=16, layers=3, padding=0.25, projection=32)),
    "inverse": ("fno", dict(modes=6, width=16, layers=3, padding=0.25, dropout=0.1, projection=32)),
    "fundiff": ("fno", dict(modes=6, width=16, layers=3, padding=0.25, embed_dim=32, projection=32)),
}
FULL_STEPS = {"prior": 200_000, "joint": 200_000, "surrogate": 20_000, "inverse": 20_000, "fundiff": 100_000}
GENERATIVE = ("prior", "joint", "fundiff")


def config(task: str, kind: str, arg: str | None = None) -> ml_collections.ConfigDict:
    if arg not in (None, "", "tiny"):
        raise ValueError(f"config argument: expected '' or 'tiny', got {arg!r}")
    tiny = arg == "tiny"
    c = ml_collections.ConfigDict()
    c.task = task
    c.task_options = ml_collections.ConfigDict({"resolution": 16 if tiny else 128})
    c.kind = kind
    name, options = (TINY_MODELS if tiny else FULL_MODELS)[kind]
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
    c.train = ml_collections.ConfigDict(
        {
            "num_steps": 300 if tiny else FULL_STEPS[kind],
            "batch_size": 16 if tiny else 32,
            "learning_rate": 3e-3 if tiny else 2e-4 if kind in GENERATIVE else 1e-3,
            "warmup_steps": 20 if tiny else 1000,
            "end_learning_rate_factor": 0.01,
            "weight_decay": 1e-4,
            "clip_norm": 1.0,
            "ema_decay": 0.99 if tiny else 0.9999 if kind in GENERATIVE else 0.999,
            "log_every": 25 if tiny else 200,
            "eval_every": 100 if tiny else 5000,
            "checkpoint_every": 100 if tiny else 5000,
            "keep_checkpoints": 3,
            "seed": 0,
            "progress": True,
        }
    )
    return c
