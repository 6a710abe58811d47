"""A training run from a config: `build` the task, model, loss, source and evaluation; `run` it.

`run(config, workdir, init=None)` builds them from an ml_collections config
(`settings.config`, on the command line `configs/train/network.py`) through the kind's
registry entry (`training.kinds`), starting from the parameters of `init` when given
(fine-tuning, e.g. a resolution-independent operator trained at 64 x 64 continued at
128 x 128), and trains with the checkpointed `loop.fit` in `workdir`. A kind with `inputs`
(trained networks its examples need, e.g. the FunDiff DiT's frozen encoders) takes them from
`inputs={role: model}` or loads them from the workdirs named in `config.inputs.<role>`
(`trained`); their parameter digests join the fingerprint. A finished run is scored on its own
(`scores`, the config's ``scores`` section): `workdir/scores.json`, recomputed only when stale,
and every `scores.every` steps into `metrics.jsonl`.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.random as jr
import ml_collections

from posteriorjax import diffusion, nn, tasks
from posteriorjax.files import parameter_digest
from posteriorjax.training import kinds, scores
from posteriorjax.training.checkpoints import initialized
from posteriorjax.training.data import PoolSource, TaskSource, build_pool
from posteriorjax.training.loop import fit
from posteriorjax.training.settings import train_config


@dataclasses.dataclass(frozen=True)
class Setup:
    """What `fit` needs for one configured run, plus the task and the description stored with it."""

    task: Any
    model: Any
    loss_fn: Any
    source: Any
    eval_fn: Any
    description: dict
    noise: Any = None  # the diffusion noise of `config.diffusion` (EDM kinds sample with it)
    inputs: dict = dataclasses.field(default_factory=dict)  # the trained inputs of the kind


# Options of each diffusion noise from a config's `diffusion` section.
NOISE_OPTIONS = {
    "white": lambda d: {},
    "grf": lambda d: dict(alpha=d.noise_alpha, tau=d.noise_tau),
    "rbf": lambda d: dict(scale=d.get("rbf_scale", 0.05), nugget_std=d.get("rbf_nugget_std", 0.01)),
    "matern": lambda d: dict(lengthscale=d.get("matern_lengthscale", 1e-3)),
}


def _plain(section) -> dict:
    return section.to_dict() if hasattr(section, "to_dict") else dict(section)


def build_model(
    kind: str,
    name: str,
    options: dict,
    task,
    *,
    x_norm,
    u_norm,
    key,
    sigma_data: float = 1.0,
    noise=None,
    inputs=None,
):
    """The model of `kind` with backbone `name` for `task` (channels from its unknown and state shapes).

    `noise`: the base noise generator of a ``flow_fno`` flow (default `diffusion.GRFNoise()`);
    `inputs`: the trained networks ({role: model}) of a kind with `inputs`.
    """
    entry = kinds.get(kind)
    inputs = dict(inputs or {})
    if set(inputs) != set(entry.inputs):
        raise ValueError(f"inputs: kind {kind!r} needs {sorted(entry.inputs)}, got {sorted(inputs)}")
    c_in, c_out = entry.channels(task, **inputs)
    net = nn.get(name, key, in_channels=c_in, out_channels=c_out, **options)
    return entry.wrap(net, x_norm, u_norm, kinds.Wrap(sigma_data, noise, inputs))


def trained(workdir):
    """The EMA model of the finished (or resumable) training run in `workdir` (its `config.json`)."""
    path = Path(workdir) / "config.json"
    if not path.exists():
        raise ValueError(f"workdir: expected a training run with a config.json, got {str(workdir)!r}")
    config = ml_collections.ConfigDict(json.loads(path.read_text()))
    config.train.progress = False
    return run(config, workdir)[1]


def _inputs(config, entry: kinds.Kind, inputs) -> dict:
    """The trained inputs of a run: `inputs` if given, else loaded from `config.inputs.<role>`."""
    if not entry.inputs:
        if inputs:
            raise ValueError(f"inputs: kind {entry.name!r} takes no trained inputs, got {sorted(inputs)}")
        return {}
    if inputs is not None:
        return dict(inputs)
    paths = _plain(config.get("inputs") or {})
    missing = [role for role in entry.inputs if not paths.get(role)]
    if missing:
        raise ValueError(
            f"config.inputs: kind {entry.name!r} needs the workdirs of its trained {dict(entry.inputs)}; "
            f"missing {missing}"
        )
    return {role: trained(paths[role]) for role in entry.inputs}


def _normalizers(config, entry: kinds.Kind, task):
    """(x_norm, u_norm) of a run; EDM kinds train on data of std `data_scale` (published: 0.5)."""
    x_norm = nn.field_normalizer(task)
    norm = config.normalization
    u_norm = nn.state_statistics(task, norm.num_draws, norm.seed) if entry.uses_state else None
    if entry.edm:
        scale = config.diffusion.get("data_scale", 1.0)
        x_norm = x_norm.rescaled(scale)
        u_norm = None if u_norm is None else u_norm.rescaled(scale)
    return x_norm, u_norm


def _source(config, task_source: TaskSource, workdir: Path | None, tag: str):
    """The configured data source (`config.data.source`: ``task`` or ``pool``)."""
    data = config.data
    if data.source == "task":
        return task_source
    if data.source == "pool":
        path = None if workdir is None else Path(workdir) / "pool.npz"
        return PoolSource(
            build_pool(task_source, data.pool_size, data.seed, path, tag), task_source.batch_size
        )
    raise ValueError(f"config.data.source: expected 'task' or 'pool', got {data.source!r}")


def build(config, workdir: Path | None = None, inputs=None) -> Setup:
    """Task, model, loss, data source and evaluation of a training config (`settings.config`);
    `inputs`: the trained networks of a kind with `inputs` (else loaded from `config.inputs`)."""
    kind = config.kind
    if kind not in kinds.names():
        raise ValueError(f"config.kind: expected one of {tuple(kinds.names())}, got {kind!r}")
    entry = kinds.get(kind)
    task = tasks.get(config.task, **_plain(config.task_options))
    x_norm, u_norm = _normalizers(config, entry, task)
    options = _plain(config.model.options)
    inputs = _inputs(config, entry, inputs)
    d = config.diffusion
    noise = diffusion.noise.get(d.noise, **NOISE_OPTIONS[d.noise](d))
    model = build_model(
        kind,
        config.model.name,
        options,
        task,
        x_norm=x_norm,
        u_norm=u_norm,
        key=jr.key(config.model.seed),
        sigma_data=d.sigma_data,
        noise=noise,
        inputs=inputs,
    )
    task_source = TaskSource(task, x_norm, u_norm, kind, config.train.batch_size, inputs)
    digests = {role: parameter_digest(m) for role, m in inputs.items()}
    tag = f"{task.config_hash()}:{kind}:{u_norm}" + (f":{digests}" if digests else "")
    source = _source(config, task_source, workdir, tag)
    held_out = TaskSource(task, x_norm, u_norm, kind, config.eval.num_examples, inputs)
    held_out = held_out(jr.key(config.eval.seed))
    loss_fn = entry.loss(task, noise, d)
    eval_key = jr.key(config.eval.seed + 1)
    evaluate = entry.evaluate(loss_fn, held_out, x_norm=x_norm, u_norm=u_norm, task=task, key=eval_key)
    description = {
        "kind": kind,
        "task": config.task,
        "task_config": task.config_dict(),
        "model": config.model.name,
        "options": options,
        "x_norm": [x_norm.mean, x_norm.std],
        "u_norm": None if u_norm is None else [u_norm.mean, u_norm.std],
    }
    if inputs:
        description["inputs"] = digests
    return Setup(task, model, loss_fn, source, eqx.filter_jit(evaluate), description, noise, inputs)


def _write_provenance(config, workdir: Path, description: dict) -> None:
    if jax.process_index() != 0:
        return
    (workdir / "config.json").write_text(config.to_json_best_effort(indent=2, sort_keys=True))
    provenance = {
        "description": description,
        "jax": jax.__version__,
        "devices": [str(d) for d in jax.devices()],
    }
    (workdir / "provenance.json").write_text(json.dumps(provenance, indent=2, default=str))


def run(config, workdir, *, init=None, inputs=None, stop_after: int | None = None):
    """Train the configured model in `workdir`, resuming from its checkpoints; returns (model, ema, setup).

    `init`: a trained model whose parameters start the run (fine-tuning, e.g. a network trained
    at a lower resolution continued at the config's); its `parameter_digest` joins the
    fingerprint, so a workdir holding a run from other initial parameters is refused.
    `inputs`: the trained networks ({role: model}) of a kind with `inputs` (default: loaded from
    the workdirs in `config.inputs`).
    """
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    cfg = train_config(config.train)
    setup = build(config, workdir, inputs)
    if init is not None:
        description = {**setup.description, "init_parameters": parameter_digest(init)}
        setup = dataclasses.replace(setup, model=initialized(setup.model, init), description=description)
    _write_provenance(config, workdir, setup.description)
    scorer = scores.scorer(config, setup)
    every = scores.settings(config.scores)["every"] if scorer is not None else 0
    model, ema, state = fit(
        setup.model,
        setup.loss_fn,
        setup.source,
        cfg,
        workdir,
        description=setup.description,
        eval_fn=setup.eval_fn,
        stop_after=stop_after,
        score_fn=scorer,
        score_every=every,
    )
    if int(state.step) == cfg.num_steps:  # finished: the network's scores (`scores.ensure`)
        scores.ensure(workdir, config, ema, scorer, cfg.num_steps)
    return model, ema, setup
