"""Shared pieces of the study configs: the argument rule, the sweep skeleton and sampler entries.

Every study config is `get_config(arg)` with `arg` in ("", "tiny"): "" (or None) is the
published scale (128 x 128 where the task allows, published sampler profiles and case
counts, networks trained with `posteriorjax.training.config`'s full settings; meant for
accelerators), "tiny" runs on one CPU in minutes (16-32 x 32 grids, few steps and cases).
"""

from __future__ import annotations

import ml_collections

from posteriorjax import samplers

ARGS = ("", "tiny")


def is_tiny(arg: str | None) -> bool:
    """True for "tiny", False for "" / None; any other argument is an error."""
    arg = "" if arg is None else arg
    if arg not in ARGS:
        raise ValueError(f"config argument: expected '' or 'tiny', got {arg!r}")
    return arg == "tiny"


def sweep(tiny: bool, **fields) -> ml_collections.ConfigDict:
    """A sweep config with every top-level field of the schema (`posteriorjax.sweep.settings`).

    Defaults: published scale 50 cases x 100 samples, one sampler seed; tiny scale
    2 cases x 16 samples. `fields` override them (and must include `tasks`,
    `reference` and `samplers`).
    """
    c = ml_collections.ConfigDict()
    c.seed = 0
    c.seeds = (0,)
    c.num_cases = 2 if tiny else 50
    c.num_samples = 16 if tiny else 100
    c.chunk_size = 8 if tiny else 16
    c.batch_size = 2 if tiny else 1
    c.overwrite = False
    c.save_samples = 2
    c.figures = True
    c.references = {}
    c.diagnostics = ()
    c.training = ml_collections.ConfigDict({"scale": "tiny" if tiny else "full", "num_steps": None})
    for name, value in fields.items():
        setattr(c, name, value)
    missing = [k for k in ("tasks", "reference", "samplers") if k not in c]
    if missing:
        raise ValueError(f"fields: a sweep config needs {missing}")
    return c


def eps_rule_reference(tiny: bool, eps: float | None = None) -> ml_collections.ConfigDict:
    """The eps-rule reference (method ``"rejection"``) of the Poisson and Darcy studies.

    K = 100 members from an augmented pool of 1M candidates at eps = 3e-4 (the published
    threshold on 128 x 128 grids); tiny: K = 32 from 4096 candidates at eps = 3e-3, which a
    16 x 16 pool can fill. `eps` replaces the scale's threshold.
    """
    from posteriorjax import sweep

    return sweep.reference_config(
        "rejection",
        num_samples=32 if tiny else 100,
        pool_size=4096 if tiny else 1_000_000,
        pool_chunk=1024 if tiny else 10_000,
        augment=True,
        eps=(3e-3 if tiny else 3e-4) if eps is None else eps,
    )


def sampler(
    name: str,
    *,
    options: dict | None = None,
    axes: dict | None = None,
    networks: dict | None = None,
    task_options: dict | None = None,
    tasks: tuple[str, ...] | None = None,
) -> dict:
    """One `config.samplers.<label>` entry with every key present (`tasks=None`: all tasks)."""
    return {
        "sampler": name,
        "options": dict(options or {}),
        "axes": {k: tuple(float(v) for v in vals) for k, vals in (axes or {}).items()},
        "networks": dict(networks or {}),
        "task_options": dict(task_options or {}),
        "tasks": None if tasks is None else tuple(tasks),
    }


# Learned samplers whose builders default to white noise get the noise their networks are trained
# with (`posteriorjax.training.config`: GRF noise).
LEARNED_OPTIONS = {"dps": {"noise": "grf"}, "diffusionpde": {"noise": "grf"}}

# Step counts that keep the tiny studies to minutes on one CPU core (the full scale uses the
# samplers' published defaults).
TINY_OPTIONS = {
    "pcn": {"burn_in": 200, "num_steps": 200},
    "dps": {"num_steps": 16},
    "fundps": {"num_steps": 16},
    "funddps": {"num_steps": 16},
    "ddis": {"num_steps": 8, "ode_steps": 2, "langevin_steps": 8},
    "diffusionpde": {"num_steps": 16},
    "eci": {"num_steps": 8, "mixing": 1},
}


# The published profiles (`profile="published"`, the PosteriorBench evaluation code): the sampler
# options, and the networks their samplers receive as PosteriorBench's training configs give them.
PUBLISHED_OPTIONS = {
    "fundps": {"profile": "published"},
    "funddps": {"profile": "published"},
    "ddis": {"profile": "published"},
    "esmda": {"profile": "published"},
    "diffusionpde": {"profile": "published", "noise": "white"},
    "eci": {"profile": "published"},
}

# {sampler: {builder option: (kind, published backbone)}} (`nn.published`, `configs/training/*.yml`):
# FunDPS's joint ``ddpmpp-uno`` prior (`<task>_fundps_*`); Fun-DDPS and DDIS share the unknown-only
# target prior (`<task>_shared_target_prior_*`, the same backbone) and take each its own surrogate
# (`<task>_funddps_surrogate_128`: FNO 16 / 48 / 4; `<task>_ddis_surrogate_128`: ``fno_pad`` 64 / 64 /
# 4); DiffusionPDE the joint ``ddpmpp`` U-Net (`<task>_diffusionpde_128`); ECI the FNO velocity
# (`<task>_eci_128`); MC dropout the inverse FNO (`<task>_mcdropout_fno_drop020`). The spec's
# `training.model` selects the backbone within the kind, so two samplers asking for different
# backbones of one kind train different networks (the directory hash covers the whole config).
PUBLISHED_NETWORKS = {
    "fundps": {"model": ("joint", "fundps_prior")},
    "funddps": {"model": ("prior", "fundps_prior"), "surrogate": ("surrogate", "funddps_surrogate")},
    "ddis": {"model": ("prior", "fundps_prior"), "surrogate": ("surrogate", "ddis_surrogate")},
    "diffusionpde": {"model": ("joint", "diffusionpde_prior")},
    "eci": {"model": ("flow", "eci_velocity")},
    "mc_dropout": {"model": ("inverse", "mc_dropout_inverse")},
}

# What the published models are trained on, at every scale: the EDM priors on data normalized to
# std 0.5 with sigma_data 0.5 (`normalization_scale: 0.5`) and the noise they sample with (the RBF
# kernel of scale 0.05 for FunDPS, Fun-DDPS and DDIS, white noise for DiffusionPDE); ECI's flow on
# std 0.5 with Matern-1/2 base noise (lengthscale 1e-3, our `MaternNoise` default). The surrogates
# and the inverse FNO are trained at `normalization_scale: 1.0`, our standardization (no setting).
_RBF_PRIOR = {"noise": "rbf", "rbf_scale": 0.05, "data_scale": 0.5, "sigma_data": 0.5}
PUBLISHED_DATA = {
    "fundps_prior": {"diffusion": _RBF_PRIOR},
    "diffusionpde_prior": {"diffusion": {"noise": "white", "data_scale": 0.5, "sigma_data": 0.5}},
    "eci_velocity": {"diffusion": {"noise": "matern", "data_scale": 0.5}},
}


def _onecycle(lr, steps, weight_decay):
    """torch's OneCycleLR (10 % warm-up, final lr = lr / (25 x 1e4)) as our warm-up + cosine."""
    warmup = round(0.1 * steps)
    return {
        "learning_rate": lr,
        "warmup_steps": warmup,
        "end_learning_rate_factor": 1 / (25 * 1e4),
        "weight_decay": weight_decay,
        "clip_norm": 0.0,
        "ema_decay": 0.0,
    }


def _constant(lr, batch):
    """Adam at a constant `lr`, no weight decay, clipping or EMA."""
    return {
        "batch_size": batch,
        "learning_rate": lr,
        "warmup_steps": 0,
        "end_learning_rate_factor": 1.0,
        "weight_decay": 0.0,
        "clip_norm": 0.0,
        "ema_decay": 0.0,
    }


def _edm(lr, rampup_mimg, ema_mimg, batch=32):
    """EDM's training loop (`training_*/training_loop.py`): Adam at `lr` after a linear ramp-up over
    `rampup_mimg` million images, constant after it, EMA half-life `ema_mimg` million images
    (decay 0.5 ** (batch / half-life) per step), no weight decay or clipping."""
    return {
        "batch_size": batch,
        "learning_rate": lr,
        "warmup_steps": round(rampup_mimg * 1e6 / batch),
        "end_learning_rate_factor": 1.0,
        "weight_decay": 0.0,
        "clip_norm": 0.0,
        "ema_decay": 0.5 ** (batch / (ema_mimg * 1e6)),
    }


# The published optimization at the full scale ({backbone: (steps, `config.train` overrides)}),
# from the Darcy / Poisson configs (50k records, 5000 held out: 45,000 training records per
# epoch). Published lengths: ``duration`` million images / batch, epochs x ceil(45,000 / batch),
# ``max_steps`` or ``max_images`` / batch. The medium and tiny scales keep their own optimizer
# settings (`posteriorjax.training.config`). Departures: the FunDPS / shared priors pretrain 10 Mimg
# at 64 x 64 before 15 Mimg at 128 x 128 (ours: the 15 Mimg at the task's grid from scratch); EDM's
# EMA ramp-up (half-life <= 0.05 x images seen) and OneCycle's start at lr / 25 are not modelled.
PUBLISHED_TRAINING = {
    "fundps_prior": (468_750, _edm(1e-4, 5, 0.5)),  # duration 15, lr 1e-4, lr_rampup 5, ema 0.5
    "diffusionpde_prior": (468_750, _edm(1e-3, 10, 0.05)),  # duration 15, lr 1e-3, lr_rampup 10, ema 0.05
    "funddps_surrogate": (140_700, {"batch_size": 32, **_onecycle(1e-3, 140_700, 2e-2)}),  # 100 epochs
    "ddis_surrogate": (562_500, _constant(1e-4, 40)),  # 500 epochs, Adam, scheduler "none"
    "eci_velocity": (58_594, _constant(3e-4, 256)),  # max_steps 58594, AdamW weight decay 0, no scheduler
    "mc_dropout_inverse": (234_375, {"batch_size": 64, **_onecycle(5e-4, 234_375, 2e-2)}),  # 15M images
}


def published_network(kind: str, backbone: str, scale: str) -> dict:
    """The network spec of a published backbone at `scale` (``full``, ``medium``, ``tiny``): the
    kind, the backbone (`nn.published.get(backbone, scale)`; its per-task options,
    `nn.published.TASK_OPTIONS`, under `task_training`), the published data settings, and at full
    scale the published optimization and length (`PUBLISHED_TRAINING`)."""
    from posteriorjax.nn import published

    def model(task=None):
        name, options = published.get(backbone, scale, task)
        return {"name": name, "options": options}

    spec = {"kind": kind, "training": {**PUBLISHED_DATA.get(backbone, {}), "model": model()}}
    per_task = {t: {"model": model(t)} for t in published.TASK_OPTIONS if model(t) != model()}
    if per_task:
        spec["task_training"] = per_task
    if scale == "full":
        steps, train = PUBLISHED_TRAINING[backbone]
        spec["num_steps"], spec["training"]["train"] = steps, dict(train)
    return spec


def _networks(name: str, scale: str, published: bool) -> dict | None:
    if published and name in PUBLISHED_NETWORKS:
        return {
            option: published_network(kind, backbone, scale)
            for option, (kind, backbone) in PUBLISHED_NETWORKS[name].items()
        }
    # the networks the sampler receives ({builder option: kind}, as it registered them)
    return (samplers.networks(name) or None) if name in samplers.REGISTRY else None


def catalog(
    tiny: bool,
    names,
    *,
    tasks: dict | None = None,
    axes: dict | None = None,
    profile: str = "ours",
    scale: str | None = None,
    options: dict | None = None,
) -> dict:
    """Sampler entries labelled by registry name, learned ones with their networks.

    `tasks`: {name: task names it runs on}; `axes`: {name: {hparam: values}}; `profile`:
    ``"published"`` gives the samplers of `PUBLISHED_OPTIONS` their published profile and the
    samplers of `PUBLISHED_NETWORKS` the published networks (`published_network`) at the training
    `scale` (default "tiny" if `tiny`, else "full"); `options`: {name: options} laid over the
    scale's (e.g. the medium step counts).
    """
    if profile not in ("ours", "published"):
        raise ValueError(f"profile: expected 'ours' or 'published', got {profile!r}")
    tasks, axes, extra = tasks or {}, axes or {}, options or {}
    published = profile == "published"
    scale = ("tiny" if tiny else "full") if scale is None else scale
    return {
        n: sampler(
            n,
            options={
                **LEARNED_OPTIONS.get(n, {}),
                **(PUBLISHED_OPTIONS.get(n, {}) if published else {}),
                **(TINY_OPTIONS.get(n, {}) if tiny else {}),
                **extra.get(n, {}),
            },
            axes=axes.get(n),
            networks=_networks(n, scale, published),
            tasks=tasks.get(n),
        )
        for n in names
    }
