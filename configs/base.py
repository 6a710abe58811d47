"""Shared pieces of the study configs: the argument rule, the sweep skeleton and sampler entries.

Every study config is `get_config(arg)` with `arg` in ("", "tiny"): "" (or None) is the
published scale (128 x 128 where the task allows, published sampler profiles and case
counts, networks trained with `posteriorjax.training.config`'s full settings; meant for
accelerators), "tiny" runs on one CPU in minutes (16-32 x 32 grids, few steps and cases).
"""

from __future__ import annotations

import ml_collections

from posteriorjax import training

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


# The networks each learned sampler receives ({sampler: {builder option: kind}}, from the kinds registry).
NETWORKS = training.kinds.networks()

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
# options and what their diffusion priors are trained as. The published models are trained on data
# normalized to std 0.5 with EDM sigma_data 0.5 and the noise they sample with: the RBF kernel for
# FunDPS, Fun-DDPS and DDIS, white noise (and a grid U-Net) for DiffusionPDE.
_PUBLISHED_DATA = {"data_scale": 0.5, "sigma_data": 0.5}
UNET = {
    "tiny": {"channels": (16, 32), "blocks": 1, "embed_dim": 32},
    "full": {"channels": (128, 256, 256), "blocks": 2, "embed_dim": 128},
}
PUBLISHED_OPTIONS = {
    "fundps": {"profile": "published"},
    "funddps": {"profile": "published"},
    "ddis": {"profile": "published"},
    "esmda": {"profile": "published"},
    "diffusionpde": {"profile": "published", "noise": "white"},
    "eci": {"profile": "published"},
}
# Published samplers whose networks are another kind than ours: ECI's is a flow-matching velocity.
PUBLISHED_KINDS = {"eci": {"model": "flow"}}


def published_training(name: str, tiny: bool) -> dict:
    """Training overrides of the diffusion prior of sampler `name` under its published profile."""
    if name == "diffusionpde":
        unet = {"name": "unet", "options": UNET["tiny" if tiny else "full"]}
        return {"diffusion": {"noise": "white", **_PUBLISHED_DATA}, "model": unet}
    if name == "eci":  # Matern 1/2 base noise, lengthscale 1e-3; data std 0.5 (no EDM sigma_data)
        return {"diffusion": {"noise": "matern", "data_scale": 0.5}}
    return {"diffusion": {"noise": "rbf", **_PUBLISHED_DATA}}


def _networks(name: str, tiny: bool, published: bool) -> dict | None:
    networks = NETWORKS.get(name)
    if not published or name not in PUBLISHED_OPTIONS or networks is None:
        return networks
    networks = {**networks, **PUBLISHED_KINDS.get(name, {})}
    return {
        option: {"kind": kind, "training": published_training(name, tiny)} if option == "model" else kind
        for option, kind in networks.items()
    }


def catalog(
    tiny: bool, names, *, tasks: dict | None = None, axes: dict | None = None, profile: str = "ours"
) -> dict:
    """Sampler entries labelled by registry name, learned ones with their networks.

    `tasks`: {name: task names it runs on}; `axes`: {name: {hparam: values}}; `profile`:
    ``"published"`` gives the samplers of `PUBLISHED_OPTIONS` their published profile and
    networks trained as published (`published_training`).
    """
    if profile not in ("ours", "published"):
        raise ValueError(f"profile: expected 'ours' or 'published', got {profile!r}")
    tasks, axes = tasks or {}, axes or {}
    published = profile == "published"
    return {
        n: sampler(
            n,
            options={
                **LEARNED_OPTIONS.get(n, {}),
                **(PUBLISHED_OPTIONS.get(n, {}) if published else {}),
                **(TINY_OPTIONS.get(n, {}) if tiny else {}),
            },
            axes=axes.get(n),
            networks=_networks(n, tiny, published),
            tasks=tasks.get(n),
        )
        for n in names
    }
