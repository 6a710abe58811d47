"""From a sweep config to what its programs need: validated settings, references, networks.

`settings(config)` checks every field of the schema (errors name the field) before any
compute; `load_or_build_reference` builds or reuses each task's cached reference in the
workdir; `network` trains (or resumes, or loads) the networks a sampler entry asks for.
`posteriorjax.sweep` re-exports the public names.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import math
from collections.abc import Callable, Mapping
from pathlib import Path

import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from posteriorjax import training
from posteriorjax.tasks.base import Cases, Task

DIAGNOSTICS = ("pde_residual", "alpha")


def stream_keys(seed: int) -> dict[str, jax.Array]:
    """Independent named key streams of a sweep seed: sampler, reference, tarp, mira."""
    k = jr.split(jr.key(int(seed)), 4)
    return {"sampler": k[0], "reference": k[1], "tarp": k[2], "mira": k[3]}


def _grf_alpha_spec(prior) -> tuple[str, float]:
    """(basis, tau) for `estimate_grf_alpha` of a GRF-type prior (ValueError otherwise)."""
    bases = {"cosine": "dct", "sine": "dst"}
    basis = getattr(prior, "basis", None)
    if basis not in bases or not (hasattr(prior, "tau") or hasattr(prior, "tau_range")):
        raise ValueError(
            f"diagnostics: 'alpha' needs a GRF prior with a cosine or sine basis, got {type(prior).__name__}"
            + (f" ({basis} basis)" if basis else "")
        )
    tau = float(prior.tau) if hasattr(prior, "tau") else 0.5 * sum(prior.tau_range)
    return bases[basis], tau


def _write_npz(path: Path, arrays: Mapping[str, np.ndarray]) -> None:
    from posteriorjax.reference import store

    store.write_arrays(path, dict(arrays))


# ----------------------------------------------------------------------------
# The whole study: config -> workdir


# ----------------------------------------------------------------------------
# Settings: the config schema


SAMPLER_KEYS = ("sampler", "options", "axes", "networks", "task_options", "tasks")
NETWORK_KINDS = tuple(training.kinds.names())
REFERENCE_DEFAULTS = {
    "method": "exact",
    "num_samples": 100,
    # pcn: chains of `mcmc_method` (pcn | gpcn | mala, `reference.mcmc`)
    "mcmc_method": "pcn",
    "num_chains": 16,
    "burn_in": 2000,
    "thin": 10,
    # rejection / importance (prior pool)
    "pool_size": 100_000,
    "pool_chunk": 5000,
    "augment": False,
    "eps": 3e-4,
    "sigma": 0.0,
    "per_point": False,
}


@dataclasses.dataclass(frozen=True)
class NetworkSpec:
    """A network a sampler option receives: `kind`, training task overrides, optional step count.

    `training`: overrides of its training config (`posteriorjax.training.config`) by dotted
    path, e.g. ``{"diffusion.noise": "white"}`` (written nested in a config). `pretrain`: the
    spec of a network (same kind) trained first, whose parameters start this one's training
    (multi-resolution fine-tuning: pretrain at a lower resolution); it inherits the kind and
    the `training` overrides.
    """

    kind: str
    task_options: dict
    num_steps: int | None = None
    pretrain: NetworkSpec | None = None
    training: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class SamplerEntry:
    """One `config.samplers.<label>` entry."""

    label: str
    sampler: str
    options: dict
    axes: dict
    networks: dict[str, NetworkSpec]
    task_options: dict
    tasks: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Settings:
    """The typed sweep config (see `settings` for the schema)."""

    seed: int
    seeds: tuple[int, ...]
    num_cases: int
    num_samples: int
    chunk_size: int
    batch_size: int
    overwrite: bool
    tasks: dict[str, dict]
    reference: dict
    references: dict[str, dict]
    samplers: tuple[SamplerEntry, ...]
    training_scale: str
    training_steps: int | None
    diagnostics: tuple[str, ...]
    save_samples: int
    figures: bool


def _as_dict(section) -> dict:
    if section is None:
        return {}
    return section.to_dict() if hasattr(section, "to_dict") else dict(section)


def _positive_int(name: str, value, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name}: expected an integer >= {minimum}, got {value!r}")
    return int(value)


def _sampler_options(name: str) -> list[str]:
    from posteriorjax import samplers

    return list(inspect.signature(samplers._BUILDERS[name]).parameters)[1:]


def _network_spec(
    where: str, spec, scale: str, task: str, kind=None, training: Mapping | None = None
) -> NetworkSpec:
    """Parse a network spec trained at `scale` for `task`; a `pretrain` inherits `kind` and `training`."""
    if isinstance(spec, str):
        spec = {"kind": spec}
    if not isinstance(spec, Mapping):
        raise ValueError(f"{where}: expected a kind {NETWORK_KINDS} or a dict with 'kind', got {spec!r}")
    spec = dict(spec)
    unknown = sorted(set(spec) - {"kind", "task_options", "num_steps", "pretrain", "training"})
    if unknown:
        raise ValueError(
            f"{where}: unknown key(s) {unknown}; expected kind, task_options, num_steps, pretrain, training"
        )
    if kind is not None and spec.setdefault("kind", kind) != kind:
        raise ValueError(f"{where}.kind: expected the fine-tuned network's {kind!r}, got {spec['kind']!r}")
    if spec.get("kind") not in NETWORK_KINDS:
        raise ValueError(f"{where}.kind: expected one of {NETWORK_KINDS}, got {spec.get('kind')!r}")
    steps = spec.get("num_steps")
    if steps is not None:
        steps = _positive_int(f"{where}.num_steps", steps)
    training = {**(training or {}), **_dotted(f"{where}.training", spec.get("training") or {})}
    _training_overrides(f"{where}.training", training, common_config(task, spec["kind"], scale))
    pretrain = spec.get("pretrain")
    if pretrain is not None:
        pretrain = _network_spec(f"{where}.pretrain", _as_dict(pretrain), scale, task, spec["kind"], training)
    return NetworkSpec(spec["kind"], _as_dict(spec.get("task_options")), steps, pretrain, training)


# mapping-valued training settings a network spec replaces whole when it also names a new backbone
# (`{"model": {"name": "unet", "options": {...}}}`); otherwise their keys are overridden one by one
_WHOLE_SETTINGS = ("model.options",)

# keys of a training config that a network spec sets through its own fields
_SPEC_FIELDS = {"task": "the sampler's task", "kind": "kind", "task_options": "task_options"}


def _dotted(where: str, tree, prefix: str = "") -> dict:
    """A nested mapping of settings as {"section.key": value}."""
    if not isinstance(tree, Mapping):
        raise ValueError(f"{where}: expected a mapping of training-config settings, got {tree!r}")
    out = {}
    for name, value in _as_dict(tree).items():
        whole = f"{prefix}{name}" in _WHOLE_SETTINGS and "name" in tree  # a new backbone: its own options
        if isinstance(value, Mapping) and not whole:
            out.update(_dotted(where, value, f"{prefix}{name}."))
        else:
            out[f"{prefix}{name}"] = value
    return out


def common_config(task_name: str, kind: str, scale: str):
    """The training config (`training.config`) of a network at `scale` ("tiny" | "full")."""
    return training.config(task_name, kind, scale)


def _training_overrides(where: str, overrides: Mapping, cfg):
    """Set dotted `overrides` in the training config `cfg` (ValueError naming a bad key or value)."""
    for dotted, value in overrides.items():
        path = str(dotted).split(".")
        if path[0] in _SPEC_FIELDS or dotted == "train.num_steps":
            field = _SPEC_FIELDS.get(path[0], "num_steps")
            raise ValueError(f"{where}: {dotted!r} is set by the network spec's {field}, not here")
        section = cfg
        for name in path[:-1]:
            section = section.get(name) if hasattr(section, "get") else None
        whole = dotted in _WHOLE_SETTINGS
        is_mapping = hasattr(section, "keys") and path[-1] in section and hasattr(section[path[-1]], "keys")
        if not hasattr(section, "keys") or path[-1] not in section or is_mapping != whole:
            raise ValueError(f"{where}: {dotted!r} is not a setting of the training config")
        if whole and not isinstance(value, Mapping):
            raise ValueError(f"{where}: {dotted!r} expects a mapping of backbone options, got {value!r}")
        try:
            section[path[-1]] = value
        except (TypeError, ValueError) as err:
            raise ValueError(f"{where}: {dotted!r} = {value!r} has the wrong type ({err})") from None


def _task_variant(name: str, options: Mapping, where: str) -> Task:
    from posteriorjax import tasks

    try:
        return tasks.get(name, **options)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{where}: cannot build task {name!r} with options {dict(options)}: {e}") from e


def settings(config) -> Settings:
    """Validate a sweep config and convert it to `Settings` (ValueError naming the field; no compute).

    Schema (defaults in brackets):
      seed, seeds (sampler seeds), num_cases, num_samples, chunk_size, batch_size, overwrite;
      tasks: {task_name: {task options}};
      reference: `reference_config(...)` (method exact | pcn | rejection | published_eps |
                 eps_k1000 | importance), the
                 reference of every task not named in `references`;
      references [{}]: {task_name: reference_config(...)}, a task's own reference section, in
                 place of `reference` (a whole section: keys it omits take `reference_config`'s
                 defaults, not `reference`'s values); e.g. `exact` for a linear-Gaussian task
                 beside the eps rule for a nonlinear one. `Settings.references` holds the
                 effective section of every task; the cached reference of a task is checked
                 against it;
      samplers: {label: {sampler [label], options [{}], axes [{}], networks [{}],
                 task_options [{}], tasks [all tasks]}}; a network spec is a kind
                 (`training.kinds.names()`) or {kind, task_options [{}], num_steps [None],
                 training [{}], pretrain [None]}; `training` holds overrides of the training
                 config (nested, e.g. {"diffusion": {"noise": "white"}}); `pretrain` is a spec of the
                 same kind trained first, whose parameters start this network's training
                 (fine-tuning; it inherits kind and `training`);
      training: {scale ["tiny"] | "full", num_steps [None]};
      diagnostics [()]: subset of ("pde_residual", "alpha");
      save_samples [2]: store samples of configurations with case < save_samples;
      figures [True]: render figures at the end.
    A network is trained for the sampler's task (the sweep task's options updated by
    the sampler's `task_options`), updated by the spec's `task_options`.
    """
    from posteriorjax import samplers

    task_map = _as_dict(config.tasks)
    if not task_map:
        raise ValueError("config.tasks: expected at least one task")
    sampler_map = _as_dict(config.samplers)
    if not sampler_map:
        raise ValueError("config.samplers: expected at least one sampler")
    built = {name: _task_variant(name, options, f"config.tasks.{name}") for name, options in task_map.items()}
    for field in ("num_cases", "num_samples", "chunk_size", "batch_size"):
        _positive_int(f"config.{field}", config[field])
    seeds = tuple(int(s) for s in config.seeds)
    if not seeds:
        raise ValueError("config.seeds: expected at least one sampler seed, got none")

    training = _as_dict(config.training) if "training" in config else {}
    unknown = sorted(set(training) - {"scale", "num_steps"})
    if unknown:
        raise ValueError(f"config.training: unknown key(s) {unknown}; expected scale, num_steps")
    scale = training.get("scale", "tiny")
    if scale not in ("tiny", "full"):
        raise ValueError(f"config.training.scale: expected 'tiny' or 'full', got {scale!r}")
    steps = training.get("num_steps")
    steps = None if steps is None else _positive_int("config.training.num_steps", steps)

    diag = tuple(config.diagnostics) if "diagnostics" in config else ()
    bad = sorted(set(diag) - set(DIAGNOSTICS))
    if bad:
        raise ValueError(
            f"config.diagnostics: unknown diagnostic(s) {bad}; expected a subset of {DIAGNOSTICS}"
        )
    if "alpha" in diag:
        for name, task in built.items():
            try:
                _grf_alpha_spec(task.prior)
            except ValueError as e:
                raise ValueError(f"config.diagnostics: task {name!r}: {e}") from e
    save = _positive_int("config.save_samples", config.save_samples, 0) if "save_samples" in config else 2
    figures = bool(config.figures) if "figures" in config else True

    entries = []
    for label, raw in sampler_map.items():
        where = f"config.samplers.{label}"
        raw = _as_dict(raw)
        unknown = sorted(set(raw) - set(SAMPLER_KEYS))
        if unknown:
            raise ValueError(f"{where}: unknown key(s) {unknown}; expected a subset of {SAMPLER_KEYS}")
        name = raw.get("sampler", label)
        if name not in samplers.names():
            raise ValueError(f"{where}: unknown sampler {name!r}; registered: {samplers.names()}")
        allowed = _sampler_options(name)
        options = _as_dict(raw.get("options"))
        unknown = sorted(set(options) - set(allowed))
        if unknown:
            raise ValueError(
                f"{where}.options: sampler {name!r} has no option(s) {unknown}; options: {allowed}"
            )
        axes = {k: tuple(v) for k, v in _as_dict(raw.get("axes")).items()}
        for axis, values in axes.items():
            if len(values) == 0:
                raise ValueError(f"{where}.axes.{axis}: axis has no values")
        networks = {}
        for option, spec in _as_dict(raw.get("networks")).items():
            if option not in allowed:
                raise ValueError(
                    f"{where}.networks: sampler {name!r} has no option {option!r} to receive a network; "
                    f"options: {allowed}"
                )
            if option in options:
                raise ValueError(f"{where}.networks.{option}: also given in options; give it once")
            networks[option] = _network_spec(f"{where}.networks.{option}", spec, scale, next(iter(task_map)))
        on = tuple(raw["tasks"]) if raw.get("tasks") is not None else tuple(task_map)
        unknown = sorted(set(on) - set(task_map))
        if unknown:
            raise ValueError(f"{where}.tasks: unknown task(s) {unknown}; the config has {sorted(task_map)}")
        overrides = _as_dict(raw.get("task_options"))
        if overrides:
            for task_name in on:
                true = built[task_name]
                variant = _task_variant(
                    task_name, {**task_map[task_name], **overrides}, f"{where}.task_options"
                )
                if (variant.unknown_shape, variant.num_observations) != (
                    true.unknown_shape,
                    true.num_observations,
                ):
                    raise ValueError(
                        f"{where}.task_options: the sampler's task {task_name!r} has unknown shape "
                        f"{variant.unknown_shape} and {variant.num_observations} observations; the true task "
                        f"has {true.unknown_shape} and {true.num_observations}"
                    )
        entries.append(SamplerEntry(label, name, options, axes, networks, overrides, on))

    reference = _reference_section(config.reference, "config.reference")
    overrides = _as_dict(config.references) if "references" in config else {}
    unknown = sorted(set(overrides) - set(task_map))
    if unknown:
        raise ValueError(f"config.references: unknown task(s) {unknown}; the config has {sorted(task_map)}")
    references = {}
    for name, task in built.items():
        if name in overrides:
            references[name] = _reference_section(overrides[name], f"config.references.{name}")
        else:
            references[name] = reference
        where = f"config.references.{name}" if name in overrides else "config.reference"
        _check_reference_method(task, references[name], where)
    return Settings(
        seed=int(config.seed),
        seeds=seeds,
        num_cases=int(config.num_cases),
        num_samples=int(config.num_samples),
        chunk_size=int(config.chunk_size),
        batch_size=int(config.batch_size),
        overwrite=bool(config.overwrite),
        tasks=task_map,
        reference=reference,
        references=references,
        samplers=tuple(entries),
        training_scale=scale,
        training_steps=steps,
        diagnostics=diag,
        save_samples=save,
        figures=figures,
    )


def validate(config) -> None:
    """Check a sweep config before any compute (ValueError naming the field); see `settings`."""
    settings(config)


def _reference_section(section, where: str) -> dict:
    """A reference section filled with `REFERENCE_DEFAULTS` and checked (errors name `where`)."""
    values = _as_dict(section)
    unknown = sorted(set(values) - set(REFERENCE_DEFAULTS))
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown}; expected {sorted(REFERENCE_DEFAULTS)}")
    rc = {**REFERENCE_DEFAULTS, **values}
    if rc["method"] not in REFERENCE_METHODS:
        raise ValueError(f"{where}.method: expected one of {sorted(REFERENCE_METHODS)}, got {rc['method']!r}")
    if rc["mcmc_method"] not in ("pcn", "gpcn", "mala"):
        raise ValueError(f"{where}.mcmc_method: expected 'pcn', 'gpcn' or 'mala', got {rc['mcmc_method']!r}")
    for key in ("num_samples", "num_chains", "thin", "pool_size", "pool_chunk"):
        _positive_int(f"{where}.{key}", rc[key])
    _positive_int(f"{where}.burn_in", rc["burn_in"], 0)
    if rc["method"] == "pcn" and rc["num_samples"] % rc["num_chains"]:
        raise ValueError(
            f"{where}.num_samples: expected a multiple of num_chains={rc['num_chains']}, "
            f"got {rc['num_samples']}"
        )
    if not (isinstance(rc["eps"], (int, float)) and rc["eps"] > 0):
        raise ValueError(f"{where}.eps: expected a number > 0, got {rc['eps']!r}")
    if not (isinstance(rc["sigma"], (int, float)) and rc["sigma"] >= 0):
        raise ValueError(f"{where}.sigma: expected a number >= 0 (0 = eps / 3), got {rc['sigma']!r}")
    return rc


def _check_reference_method(task: Task, rc: Mapping, where: str) -> None:
    """The exact posterior needs a Gaussian (or hierarchical Gaussian) prior: refuse others up front;
    the published-rule methods set eps themselves (3 x the task's noise std)."""
    from posteriorjax import random_fields

    method = rc["method"]
    if method in ("published_eps", "eps_k1000") and rc["eps"] != REFERENCE_DEFAULTS["eps"]:
        raise ValueError(
            f"{where}.eps: method {method!r} uses the published eps = 3 x noise std "
            f"({published_eps(task):g} for task {task.name!r}); leave eps unset, or use method "
            f"'rejection' for eps={rc['eps']!r}"
        )
    if method == "eps_k1000" and rc["num_samples"] != EPS_K1000:
        raise ValueError(
            f"{where}.num_samples: method 'eps_k1000' keeps K = {EPS_K1000}, got {rc['num_samples']}; "
            "use 'published_eps' or 'rejection' for another K"
        )
    if method == "eps_k1000" and rc["pool_size"] < EPS_K1000:
        raise ValueError(
            f"{where}.pool_size: method 'eps_k1000' keeps K = {EPS_K1000}, got a pool of {rc['pool_size']}"
        )

    if method == "exact" and not isinstance(
        task.prior, (random_fields.GaussianRandomField, random_fields.HierarchicalGRF)
    ):
        raise ValueError(
            f"{where}.method: 'exact' needs a linear-Gaussian task (a Gaussian random field prior); "
            f"task {task.name!r} has a {type(task.prior).__name__} prior; use 'rejection', "
            "'importance' or 'pcn' for it"
        )


def reference_config(method: str = "exact", num_samples: int = 100, **options):
    """The `config.reference` section with every key present.

    Keys: `method` (``"exact"``: linear-Gaussian tasks; ``"pcn"``: pCN chains;
    ``"rejection"``: the eps rule on a prior pool at `eps`; ``"published_eps"``: the published
    rule, eps = 3 x the task's noise std (3e-4 on Darcy/Poisson), K = `num_samples`;
    ``"eps_k1000"``: our validated variant, K = 1000 at the same eps, widened to fill K;
    ``"importance"``:
    Bayesian importance weights on a prior pool, resampled), `num_samples`
    (members per case: K of the eps rule, the resample size of importance),
    pCN `mcmc_method` (``"pcn"``, ``"gpcn"``: Laplace-preconditioned, for differentiable
    tasks with Gaussian noise; ``"mala"``), `num_chains`, `burn_in`, `thin`; pool `pool_size` (candidates),
    `pool_chunk` (draws per pool chunk), `augment` (rotations, x4 per chunk);
    eps rule `eps` (MAE threshold, observation units) and `sigma` (weight
    width, 0 = eps / 3); importance `per_point` (CCS-style normalized likelihood).
    """
    import ml_collections

    unknown = sorted(set(options) - set(REFERENCE_DEFAULTS))
    if unknown:
        raise ValueError(
            f"options: unknown reference key(s) {unknown}; expected {sorted(REFERENCE_DEFAULTS)}"
        )
    return ml_collections.ConfigDict(
        {**REFERENCE_DEFAULTS, "method": method, "num_samples": num_samples, **options}
    )


# ----------------------------------------------------------------------------
# References


def _uniform(samples) -> tuple[np.ndarray, np.ndarray]:
    samples = np.asarray(samples)
    return samples, np.full(samples.shape[:2], 1.0 / samples.shape[1], samples.dtype)


def _exact_reference(task: Task, cases: Cases, rc: Mapping, key, workdir=None, progress=False):
    """Exact posterior samples (linear-Gaussian tasks), uniform weights."""
    from posteriorjax.reference import exact

    num = int(rc["num_samples"])
    samples = [exact.sample(jr.fold_in(key, i), task, y, num) for i, y in enumerate(np.asarray(cases.y_obs))]
    return (*_uniform(np.stack(samples)), [{} for _ in samples])


def _pcn_reference(task: Task, cases: Cases, rc: Mapping, key, workdir=None, progress=False):
    """MCMC chains (`mcmc_method`) on the prior latent; `num_samples` draws over `num_chains` chains."""
    from posteriorjax.reference import mcmc

    chains = int(rc["num_chains"])
    samples, info = [], []
    for i, y in enumerate(np.asarray(cases.y_obs)):
        result = mcmc.run(
            jr.fold_in(key, i),
            task,
            jnp.asarray(y),
            num_chains=chains,
            num_draws=int(rc["num_samples"]) // chains,
            burn_in=int(rc["burn_in"]),
            thin=int(rc["thin"]),
            method=str(rc["mcmc_method"]),
        )
        samples.append(np.asarray(result.samples).reshape(-1, *task.unknown_shape))
        if result.samples.shape[1] >= 4:  # acceptance, rank-normalized R-hat, bulk/tail ESS
            info.append(vars(mcmc.diagnose(result)))
        else:  # too few draws per chain for R-hat
            info.append({"acceptance": float(np.mean(np.asarray(result.acceptance)))})
    return (*_uniform(np.stack(samples)), info)


def _pool(task: Task, rc: Mapping, key, workdir: Path, progress: bool = False):
    """The prior pool of a task under `workdir/references/pools/` (built or resumed)."""
    from posteriorjax.reference import pool

    per_chunk = int(rc["pool_chunk"]) * (4 if rc["augment"] else 1)
    seed = int(jr.randint(key, (), 0, 2**31 - 1))
    directory = Path(workdir) / "references" / "pools" / f"{task.name}-{task.config_hash()}-{seed}"
    return pool.build(
        task,
        directory,
        seed=seed,
        num_chunks=math.ceil(int(rc["pool_size"]) / per_chunk),
        chunk_size=int(rc["pool_chunk"]),
        augment=bool(rc["augment"]),
        store_state=False,
        progress=progress,
    )


def _case_seed(key, case: int) -> int:
    return int(jr.randint(jr.fold_in(key, case), (), 0, 2**31 - 1))


def published_eps(task: Task) -> float:
    """The published threshold eps = 3 sigma of the task's observation noise (PosteriorBench Sec. 3.2).

    3e-4 for Darcy and Poisson (noise 1e-4, Table 5), 0.03 for LTMI (noise 0.01).
    """
    y = np.zeros(task.num_observations)
    return 3.0 * float(np.max(np.asarray(task.noise.variance(y.shape[0]), np.float64) ** 0.5))


# K of our validated eps-rule variant (`eps_k1000`): the published K = 100 fails the GT1/GT2
# check on Darcy, K = 1000 passes it (README, "What the references cost").
EPS_K1000 = 1000


def _eps_reference(task: Task, cases: Cases, rc: Mapping, key, workdir: Path, eps, num, fill, progress=False):
    from posteriorjax.reference import rejection

    k_pool, k_case = jr.split(key)
    p = _pool(task, rc, k_pool, workdir, progress)
    sigma = float(rc["sigma"]) or None
    refs = [
        rejection.eps_rule(p, y, seed=_case_seed(k_case, i), eps=eps, num=num, sigma=sigma, fill=fill)
        for i, y in enumerate(np.asarray(cases.y_obs))
    ]
    return _stack_references(refs)


def _rejection_reference(task: Task, cases: Cases, rc: Mapping, key, workdir: Path, progress=False):
    """The eps rule (`rejection.eps_rule`) at the section's `eps` and K = `num_samples`, per case."""
    return _eps_reference(
        task, cases, rc, key, workdir, float(rc["eps"]), int(rc["num_samples"]), False, progress
    )


def _published_eps_reference(task: Task, cases: Cases, rc: Mapping, key, workdir: Path, progress=False):
    """The published rule: MAE <= eps = 3 x noise std, K = `num_samples` (100), w ∝ exp(-MAE^2 / 2 (eps/3)^2).

    Strict: a pool with fewer than K candidates under eps is an error (the published search
    continues until K are accepted).
    """
    return _eps_reference(
        task, cases, rc, key, workdir, published_eps(task), int(rc["num_samples"]), False, progress
    )


def _eps_k1000_reference(task: Task, cases: Cases, rc: Mapping, key, workdir: Path, progress=False):
    """Our validated variant of the published rule: K = 1000 at eps = 3 x noise std, eps widened
    to the 1000-th smallest MAE in a case whose pool has fewer than 1000 under it (recorded)."""
    return _eps_reference(task, cases, rc, key, workdir, published_eps(task), EPS_K1000, True, progress)


def _importance_reference(task: Task, cases: Cases, rc: Mapping, key, workdir: Path, progress=False):
    """Bayesian importance weights over a prior pool (`rejection.importance`), resampled, per case."""
    from posteriorjax.reference import rejection

    k_pool, k_case = jr.split(key)
    p = _pool(task, rc, k_pool, workdir, progress)
    y_all = np.asarray(cases.y_obs)
    std = np.asarray(task.noise.variance(y_all.shape[1]), np.float64) ** 0.5
    refs = [
        rejection.importance(
            p,
            y,
            std,
            seed=_case_seed(k_case, i),
            num=int(rc["num_samples"]),
            per_point=bool(rc["per_point"]),
        )
        for i, y in enumerate(y_all)
    ]
    return _stack_references(refs)


def _stack_references(refs):
    samples = np.stack([np.asarray(r.samples) for r in refs])
    weights = np.stack([np.asarray(r.weights) for r in refs]).astype(samples.dtype)
    return samples, weights, [dict(r.info) for r in refs]


REFERENCE_METHODS: dict[str, Callable] = {
    "exact": _exact_reference,
    "pcn": _pcn_reference,
    "rejection": _rejection_reference,
    "published_eps": _published_eps_reference,
    "eps_k1000": _eps_k1000_reference,
    "importance": _importance_reference,
}

# One line per method, written with the references (`references.json`, `summary.md`).
REFERENCE_RULES = {
    "exact": "exact Gaussian posterior (pathwise samples)",
    "pcn": "MCMC chains on the prior latent",
    "rejection": "eps rule on a prior pool at the configured eps, K = num_samples",
    "published_eps": "published eps rule: MAE <= 3 x noise std, K = num_samples, "
    "w ∝ exp(-MAE^2 / 2 (eps/3)^2)",
    "eps_k1000": "eps rule at 3 x noise std with K = 1000, eps widened to fill K where needed (our variant)",
    "importance": "Gaussian-likelihood importance weights over a prior pool, resampled",
}


_POOL_KEYS = ("pool_size", "pool_chunk", "augment")
_REFERENCE_KEYS = {
    "exact": ("num_samples",),
    "pcn": ("num_samples", "mcmc_method", "num_chains", "burn_in", "thin"),
    "rejection": ("num_samples", "eps", "sigma", *_POOL_KEYS),
    "published_eps": ("num_samples", "sigma", *_POOL_KEYS),
    "eps_k1000": ("num_samples", "sigma", *_POOL_KEYS),
    "importance": ("num_samples", "per_point", *_POOL_KEYS),
}


def reference_path(workdir: Path, task_name: str) -> Path:
    return Path(workdir) / "references" / f"{task_name}.npz"


def load_or_build_reference(
    task: Task,
    cases: Cases,
    rc: Mapping,
    *,
    seed: int,
    workdir: Path,
    path: Path,
    overwrite: bool = False,
    progress: bool = False,
) -> tuple[np.ndarray, np.ndarray, dict]:
    """The reference of every case, reused from `path` when it was built by the same settings.

    `path` (`.npz`, written atomically) holds `ref_samples (K, M, C, H, W)`,
    `ref_weights (K, M)`, `x_true (K, C, H, W)`, `y_obs (K, M_obs)`,
    `task_hash`, `method`, `settings` (JSON of the reference section, seed and
    case count) and `info` (JSON, per case: acceptance rate, ESS, ...). A file
    built for another task config, method or settings is an error unless
    `overwrite` (then it is rebuilt). Returns (samples, weights, report).
    """
    key = stream_keys(seed)["reference"]
    spec = {"reference": dict(rc), "seed": seed, "num_cases": int(cases.y_obs.shape[0])}
    spec = json.dumps(spec, sort_keys=True)
    if path.exists():
        with np.load(path) as z:
            stored = {k: z[k] for k in z.files}
        mismatch = [
            name
            for name, same in (
                ("task_hash", str(stored["task_hash"]) == task.config_hash()),
                ("method", str(stored["method"]) == rc["method"]),
                ("settings", str(stored["settings"]) == spec),
                ("y_obs", np.allclose(stored["y_obs"], np.asarray(cases.y_obs))),
            )
            if not same
        ]
        if not mismatch:
            info = json.loads(str(stored["info"]))
            return stored["ref_samples"], stored["ref_weights"], _reference_report(task, rc, info)
        if not overwrite:
            raise ValueError(
                f"reference: {path} was built with another {', '.join(mismatch)}; use another workdir "
                "or pass --config.overwrite=True to rebuild it"
            )
    samples, weights, info = REFERENCE_METHODS[rc["method"]](task, cases, rc, key, workdir, progress=progress)
    _write_npz(
        path,
        {
            "ref_samples": np.asarray(samples),
            "ref_weights": np.asarray(weights),
            "x_true": np.asarray(cases.x_true),
            "y_obs": np.asarray(cases.y_obs),
            "task_hash": np.asarray(task.config_hash()),
            "method": np.asarray(rc["method"]),
            "settings": np.asarray(spec),
            "info": np.asarray(json.dumps(info)),
        },
    )
    return np.asarray(samples), np.asarray(weights), _reference_report(task, rc, info)


def _reference_report(task: Task, rc: Mapping, info: list[dict]) -> dict:
    rule = REFERENCE_RULES[rc["method"]]
    if rc["method"] == "importance" and rc["per_point"]:
        rule += " (per-point likelihood exp(-||y_j - y_obs||^2 / (2 sigma^2 M)), the CCS rule's form)"
    return {
        "method": rc["method"],
        "rule": rule,
        "settings": {k: rc[k] for k in _REFERENCE_KEYS[rc["method"]]},
        "task_hash": task.config_hash(),
        "task": task.config_dict(),
        "cases": info,
    }


# ----------------------------------------------------------------------------
# Networks


def network_config(task_name: str, task_options: Mapping, spec: NetworkSpec, scale: str, num_steps=None):
    """The training config of a network spec (`posteriorjax.training.config`) and its short hash.

    `task_options` are those of the sampler's task, updated by `spec.task_options`;
    the step count is `spec.num_steps`, else `num_steps`, else the config's. The hash
    covers the pretraining chain, so a fine-tuned network never shares a directory with one
    trained from scratch.
    """
    cfg = common_config(task_name, spec.kind, scale)
    cfg.task_options = {**dict(task_options), **spec.task_options}
    _training_overrides("training", spec.training, cfg)
    steps = spec.num_steps if spec.num_steps is not None else num_steps
    if steps is not None:
        cfg.train.num_steps = int(steps)
        cfg.train.warmup_steps = min(cfg.train.warmup_steps, max(int(steps) // 5, 1))
    plain = cfg.to_dict()
    plain["train"].pop("progress")
    if spec.pretrain is not None:
        plain["pretrain"] = network_config(task_name, task_options, spec.pretrain, scale, num_steps)[1]
    digest = hashlib.sha256(json.dumps(plain, sort_keys=True, default=str).encode()).hexdigest()[:12]
    return cfg, digest


def network(
    workdir: Path,
    task_name: str,
    task_options: Mapping,
    spec: NetworkSpec,
    scale: str,
    num_steps: int | None = None,
    *,
    progress: bool = True,
):
    """Train (or resume, or load) a network with `training.run`; returns its EMA model.

    Workdir: `workdir/networks/<task>/<kind>-<hash of the training config>/`, so
    every sampler asking for the same network shares it and a rerun reuses it. A spec
    with `pretrain` first gets that network (trained or loaded the same way) and
    fine-tunes its EMA parameters.
    """
    init = None
    if spec.pretrain is not None:
        init = network(workdir, task_name, task_options, spec.pretrain, scale, num_steps, progress=progress)
    cfg, digest = network_config(task_name, task_options, spec, scale, num_steps)
    cfg.train.progress = bool(progress)
    directory = Path(workdir) / "networks" / task_name / f"{spec.kind}-{digest}"
    _, ema, _ = training.run(cfg, directory, init=init)
    return ema
