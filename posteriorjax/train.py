"""One training loop for every network: optax, EMA, data parallelism, orbax checkpoints, resume.

The loop is generic over three things:
  * a model (an Equinox module; its inexact arrays are the trained parameters),
  * a loss `loss_fn(model, key, batch) -> scalar`,
  * a data source, an Equinox module `source(key) -> batch` (a pytree with a leading batch
    axis) called *inside* the jitted step: `TaskSource` draws prior samples and solves the
    physics on the fly, `PoolSource` indexes a stored pool.
Step s uses the key `fold_in(key(seed), s)` (split into data and loss keys), so a run
resumed from the checkpoint of step s continues bit-identically. One jitted step does
data, forward, gradient, clipping, AdamW with warm-up + cosine schedule, and the EMA
update ema <- d ema + (1 - d) params. With several devices the batch is sharded over the
`parallel.data_mesh()` axis (parameters replicated) and XLA inserts the gradient all-reduce.

Checkpoints (orbax `CheckpointManager`, every `checkpoint_every` steps and at the end)
hold parameters, EMA, optimizer state, step and PRNG key, plus a JSON fingerprint of the
model (name, configuration, parameter shapes). A run always resumes from the latest
checkpoint of its workdir; a fingerprint mismatch is an error (another model's directory),
and an unreadable latest checkpoint falls back to the previous one with a warning.
Metrics go to `workdir/metrics.jsonl` (one JSON object per logged step; lines past the
restored step are dropped on resume, so nothing is duplicated).

`run(config, workdir, init=None)` builds task, model, loss and source from an ml_collections
config (`configs/train/*.py`), starting from the parameters of `init` when given (fine-tuning,
e.g. a resolution-independent operator trained at 64 x 64 continued at 128 x 128), for the
five model kinds:
  ``prior``      EDM denoiser over the normalized unknown,
  ``joint``      EDM denoiser over the normalized (unknown, state) stack,
  ``surrogate``  FNO-type regressor unknown -> state,
  ``inverse``    regressor (masked observations on the grid, mask) -> unknown, with dropout,
  ``fundiff``    conditional flow-matching velocity (x_t, t | masked observations, mask) -> (C_x, H, W)
                 (`samplers.fundiff.ConditionalFlow`), trained on (x, task.simulate(key, x)) pairs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import time
import warnings
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import optax
import orbax.checkpoint as ocp

from posteriorjax import console, diffusion, nn, parallel, tasks
from posteriorjax.samplers import fundiff

KINDS = ("prior", "joint", "surrogate", "inverse", "fundiff")


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Optimization and bookkeeping settings (the `config.train` section)."""

    num_steps: int = 1000
    batch_size: int = 32
    learning_rate: float = 1e-3
    warmup_steps: int = 100
    end_learning_rate_factor: float = 0.01
    weight_decay: float = 1e-4
    clip_norm: float = 1.0
    ema_decay: float = 0.999
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
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: expected a positive integer, got {value!r}")
        if not 0.0 <= self.ema_decay < 1.0:
            raise ValueError(f"ema_decay: expected a number in [0, 1), got {self.ema_decay!r}")


def make_optimizer(cfg: TrainConfig) -> optax.GradientTransformation:
    """Global-norm clipping then AdamW with linear warm-up and cosine decay to `end_learning_rate_factor`."""
    schedule = optax.warmup_cosine_decay_schedule(
        0.0,
        cfg.learning_rate,
        cfg.warmup_steps,
        max(cfg.num_steps, cfg.warmup_steps + 1),
        end_value=cfg.learning_rate * cfg.end_learning_rate_factor,
    )
    return optax.chain(
        optax.clip_by_global_norm(cfg.clip_norm), optax.adamw(schedule, weight_decay=cfg.weight_decay)
    )


class TrainState(eqx.Module):
    """Everything a resumed run needs: parameters, EMA parameters, optimizer state, step, key."""

    params: Any
    ema: Any
    opt_state: Any
    step: jax.Array
    key: jax.Array


def init_state(model, optimizer: optax.GradientTransformation, seed: int) -> TrainState:
    params = eqx.filter(model, eqx.is_inexact_array)
    return TrainState(params, params, optimizer.init(params), jnp.zeros((), jnp.int32), jr.key(seed))


def make_step(static, loss_fn, optimizer, ema_decay: float, mesh=None):
    """The jitted update `step(state, source) -> (state, loss)`; `static` is the model's non-array part."""
    sharding = None if mesh is None or mesh.devices.size == 1 else parallel.batch_sharding(mesh)

    @eqx.filter_jit
    def step(state: TrainState, source):
        k_data, k_loss = jr.split(jr.fold_in(state.key, state.step))
        batch = source(k_data)
        if sharding is not None:
            batch = jax.lax.with_sharding_constraint(batch, sharding)

        def objective(params):
            return loss_fn(eqx.combine(params, static), k_loss, batch)

        loss, grads = jax.value_and_grad(objective)(state.params)
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        params = eqx.apply_updates(state.params, updates)
        ema = jax.tree.map(lambda e, p: ema_decay * e + (1.0 - ema_decay) * p, state.ema, params)
        return TrainState(params, ema, opt_state, state.step + 1, state.key), loss

    return step


# -- checkpoints --------------------------------------------------------------------------------


def _leaves(state: TrainState) -> dict:
    state = eqx.tree_at(lambda s: s.key, state, jr.key_data(state.key))
    return {f"{i:05d}": x for i, x in enumerate(jax.tree.leaves(state))}


def _from_leaves(template: TrainState, leaves: dict) -> TrainState:
    plain = eqx.tree_at(lambda s: s.key, template, jr.key_data(template.key))
    treedef = jax.tree.structure(plain)
    state = jax.tree.unflatten(treedef, [leaves[k] for k in sorted(leaves)])
    return eqx.tree_at(lambda s: s.key, state, jr.wrap_key_data(state.key))


def parameter_digest(model) -> str:
    """Hash of a model's parameter values (shapes, dtypes and bytes of its inexact arrays)."""
    h = hashlib.sha256()
    for x in jax.tree.leaves(eqx.filter(model, eqx.is_inexact_array)):
        x = np.asarray(x)
        h.update(f"{x.shape}{x.dtype}".encode())
        h.update(np.ascontiguousarray(x).tobytes())
    return h.hexdigest()[:16]


def initialized(model, init):
    """`model` with the parameters of `init` (fine-tuning): same parameter paths, shapes and dtypes.

    Only the inexact arrays are taken from `init`; everything static (normalizers, which depend
    on the task the model is trained on) stays `model`'s.
    """
    params, static = eqx.partition(model, eqx.is_inexact_array)
    new = eqx.filter(init, eqx.is_inexact_array)

    def spec(tree):
        leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
        return [(jax.tree_util.keystr(path), x.shape, x.dtype) for path, x in leaves]

    if spec(new) != spec(params):
        mismatch = next((a, b) for a, b in itertools.zip_longest(spec(params), spec(new)) if a != b)
        raise ValueError(
            "init: expected a model with the parameter paths, shapes and dtypes of the configured model; "
            f"first difference: expected {mismatch[0]}, got {mismatch[1]}"
        )
    values = jax.tree.unflatten(jax.tree.structure(params), jax.tree.leaves(new))
    return eqx.combine(values, static)


def fingerprint(model, description: dict) -> dict:
    """JSON fingerprint of a model: its description and a hash of its parameter shapes and dtypes."""
    shapes = [
        (tuple(x.shape), str(x.dtype)) for x in jax.tree.leaves(eqx.filter(model, eqx.is_inexact_array))
    ]
    digest = hashlib.sha256(
        json.dumps([description, shapes], sort_keys=True, default=str).encode()
    ).hexdigest()
    return {"description": json.loads(json.dumps(description, default=str)), "params": digest[:16]}


class Checkpoints:
    """Orbax checkpoints of a `TrainState` in `directory`, tagged with a model fingerprint."""

    def __init__(self, directory, fingerprint: dict, keep: int = 3):
        self.fingerprint = fingerprint
        self.manager = ocp.CheckpointManager(
            Path(directory).absolute(),
            options=ocp.CheckpointManagerOptions(max_to_keep=keep, create=True),
            item_names=("state", "meta"),
        )

    def save(self, state: TrainState) -> None:
        step = int(state.step)
        args = ocp.args.Composite(
            state=ocp.args.StandardSave(_leaves(state)), meta=ocp.args.JsonSave(self.fingerprint)
        )
        self.manager.save(step, args=args, force=True)
        self.manager.wait_until_finished()

    def restore_latest(self, template: TrainState) -> TrainState | None:
        """The state of the newest readable checkpoint, or None when there is none.

        Raises ValueError when the directory holds checkpoints of another model.
        """
        abstract = jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=getattr(x, "sharding", None)),
            _leaves(template),
        )
        for step in sorted(self.manager.all_steps(), reverse=True):
            try:
                meta = self.manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))[
                    "meta"
                ]
            except Exception as err:  # any unreadable checkpoint falls back
                warnings.warn(
                    f"checkpoint {step} is unreadable ({type(err).__name__}); trying an older one",
                    stacklevel=2,
                )
                continue
            if meta != self.fingerprint:
                raise ValueError(
                    f"workdir: the checkpoint directory {self.manager.directory} holds another model: "
                    f"expected {self.fingerprint}, found {meta}"
                )
            try:
                restored = self.manager.restore(
                    step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract))
                )
                return _from_leaves(template, dict(restored["state"]))
            except Exception as err:
                warnings.warn(
                    f"checkpoint {step} is corrupt or partial ({type(err).__name__}: {err}); falling back",
                    stacklevel=2,
                )
        return None

    def close(self) -> None:
        self.manager.close()


# -- the loop -----------------------------------------------------------------------------------


def _truncate_log(path: Path, step: int) -> None:
    if not path.exists():
        return
    lines = [
        line for line in path.read_text().splitlines() if line.strip() and json.loads(line)["step"] <= step
    ]
    path.write_text("".join(line + "\n" for line in lines))


def fit(
    model,
    loss_fn,
    source,
    cfg: TrainConfig,
    workdir,
    *,
    description: dict | None = None,
    eval_fn=None,
    stop_after: int | None = None,
    mesh=None,
):
    """Train `model` for `cfg.num_steps` steps, resuming from `workdir/checkpoints` if possible.

    Args:
      model: Equinox module; loss_fn(model, key, batch) -> scalar; source(key) -> batch.
      description: JSON-able description of the model (name, options, task) for the fingerprint.
      eval_fn: optional `eval_fn(ema_model) -> dict[str, float]`, run every `cfg.eval_every` steps.
      stop_after: stop after this many steps in this call (an interruption; tests resume from it).
      mesh: device mesh for data parallelism (default `parallel.data_mesh()`).

    Returns:
      (model, ema_model, state).
    """
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    mesh = parallel.data_mesh() if mesh is None else mesh
    if cfg.batch_size % mesh.devices.size:
        raise ValueError(
            f"batch_size: expected a multiple of the device count {mesh.devices.size}, got {cfg.batch_size}"
        )
    optimizer = make_optimizer(cfg)
    params, static = eqx.partition(model, eqx.is_inexact_array)
    state = init_state(model, optimizer, cfg.seed)
    checkpoints = Checkpoints(
        workdir / "checkpoints", fingerprint(model, description or {}), cfg.keep_checkpoints
    )
    restored = checkpoints.restore_latest(state)
    log_path = workdir / "metrics.jsonl"
    if restored is not None:
        state = restored
        _truncate_log(log_path, int(state.step))
    elif log_path.exists():
        log_path.unlink()
    state = jax.device_put(state, parallel.replicated(mesh))
    step_fn = make_step(static, loss_fn, optimizer, cfg.ema_decay, mesh)
    start = int(state.step)
    end = cfg.num_steps if stop_after is None else min(cfg.num_steps, start + stop_after)
    schedule = optax.warmup_cosine_decay_schedule(
        0.0, cfg.learning_rate, cfg.warmup_steps, max(cfg.num_steps, cfg.warmup_steps + 1),
        end_value=cfg.learning_rate * cfg.end_learning_rate_factor,
    )  # fmt: skip
    tick, tick_step = time.perf_counter(), start
    stage = console.Stage(f"train {workdir.name}", end, "steps", initial=start, enabled=cfg.progress)
    with log_path.open("a") as log, stage as bar:
        for step in range(start + 1, end + 1):
            state, loss = step_fn(state, source)
            record = None
            if step % cfg.log_every == 0 or step == end:
                loss = float(loss)
                now = time.perf_counter()
                record = {"step": step, "loss": loss, "learning_rate": float(schedule(step - 1))}
                record["steps_per_second"] = (step - tick_step) / max(now - tick, 1e-9)
                tick, tick_step = now, step
                if not np.isfinite(loss):
                    warnings.warn(f"non-finite training loss {loss} at step {step}", stacklevel=2)
            if eval_fn is not None and (step % cfg.eval_every == 0 or step == cfg.num_steps):
                record = record or {"step": step}
                record.update({k: float(v) for k, v in eval_fn(eqx.combine(state.ema, static)).items()})
            if record is not None:
                log.write(json.dumps(record) + "\n")
                log.flush()
            if step % cfg.checkpoint_every == 0 or step == end:
                checkpoints.save(state)
            bar.update(1, **({"loss": f"{record['loss']:.4g}"} if record and "loss" in record else {}))
    checkpoints.close()
    return eqx.combine(state.params, static), eqx.combine(state.ema, static), state


# -- data sources -------------------------------------------------------------------------------


def _example(kind: str, task, x_norm, u_norm, key):
    """One training example of `kind` drawn from the task prior (physics solved when needed)."""
    k_prior, k_noise = jr.split(key)
    x = task.prior.sample(k_prior)
    if kind == "prior":
        return x_norm.normalize(x)
    if kind == "fundiff":
        y = task.simulate(k_noise, x)
        return x_norm.normalize(x), task.observation.to_grid(y, leading=(task.state_shape[0],))
    u = task.physics(x)
    if kind == "joint":
        return jnp.concatenate([x_norm.normalize(x), u_norm.normalize(u)])
    if kind == "surrogate":
        return x_norm.normalize(x), u_norm.normalize(u)
    y = task.observation(u) + task.noise.sample(k_noise, (task.num_observations,))
    return task.observation.to_grid(y, leading=(u.shape[0],)), x


class TaskSource(eqx.Module):
    """On-the-fly batches: `batch_size` prior draws (and physics solves) per call, key `fold_in`-split."""

    task: Any
    x_norm: nn.Normalizer
    u_norm: nn.Normalizer | None
    kind: str = eqx.field(static=True)
    batch_size: int = eqx.field(static=True)

    def example(self, key):
        return _example(self.kind, self.task, self.x_norm, self.u_norm, key)

    def __call__(self, key):
        return jax.vmap(self.example)(jr.split(key, self.batch_size))


class PoolSource(eqx.Module):
    """Batches drawn uniformly with replacement from a stored pool (pytree with leading axis N)."""

    pool: Any
    batch_size: int = eqx.field(static=True)

    def __call__(self, key):
        size = jax.tree.leaves(self.pool)[0].shape[0]
        idx = jr.randint(key, (self.batch_size,), 0, size)
        return jax.tree.map(lambda a: a[idx], self.pool)


def build_pool(source: TaskSource, size: int, seed: int, path: Path | None = None, tag: str = ""):
    """`size` examples of `source` (example i from `fold_in(key(seed), i)`), cached at `path` (.npz).

    A cached pool is reused only if its stored `tag` (task and normalization hash) matches.
    """
    if path is not None and path.exists():
        data = np.load(path, allow_pickle=False)
        if str(data["tag"]) == tag and int(data["size"]) == size:
            leaves = [jnp.asarray(data[f"leaf{i}"]) for i in range(int(data["num_leaves"]))]
            return jax.tree.unflatten(jax.tree.structure(source.example(jr.key(0))), leaves)
        warnings.warn(f"pool {path} was built for another configuration; rebuilding", stacklevel=2)
    base = jr.key(seed)
    pool = jax.jit(lambda i: jax.lax.map(lambda j: source.example(jr.fold_in(base, j)), i, batch_size=64))(
        jnp.arange(size)
    )
    if path is not None:
        leaves = jax.tree.leaves(pool)
        arrays = {f"leaf{i}": np.asarray(x) for i, x in enumerate(leaves)}
        np.savez(path, tag=tag, size=size, num_leaves=len(leaves), **arrays)
    return pool


# -- losses -------------------------------------------------------------------------------------


class DiffusionLoss(eqx.Module):
    """EDM denoising score matching (`diffusion.dsm_loss`) on batches of normalized fields."""

    noise: Any
    p_mean: float = eqx.field(static=True, default=-1.2)
    p_std: float = eqx.field(static=True, default=1.2)

    def __call__(self, model, key, batch):
        return diffusion.dsm_loss(model, key, batch, noise=self.noise, p_mean=self.p_mean, p_std=self.p_std)


def surrogate_loss(model, key, batch):
    """Mean squared error in normalized state units."""
    x_n, u_n = batch
    pred = jax.vmap(lambda x, k: model.normalized(x, key=k))(x_n, jr.split(key, x_n.shape[0]))
    return jnp.mean((pred - u_n) ** 2)


class InverseLoss(eqx.Module):
    """Mean squared error of the inverse network in normalized unknown units, dropout on."""

    mask: jax.Array

    def __call__(self, model, key, batch):
        y_grid, x = batch
        keys = jr.split(key, x.shape[0])
        pred = jax.vmap(lambda y, k: model.normalized(y, self.mask, key=k))(y_grid, keys)
        return jnp.mean((pred - model.x_norm.normalize(x)) ** 2)


class FlowMatchingLoss(eqx.Module):
    """Conditional flow-matching loss (`samplers.fundiff.flow_matching_loss`) averaged over a batch."""

    mask: jax.Array

    def __call__(self, model, key, batch):
        x_n, y_grid = batch
        keys = jr.split(key, x_n.shape[0])
        per = jax.vmap(lambda x, y, k: fundiff.flow_matching_loss(model, k, x, y, self.mask))
        return jnp.mean(per(x_n, y_grid, keys))


def relative_l2(pred: jax.Array, truth: jax.Array) -> jax.Array:
    """Mean over the batch of ||pred - truth||_2 / ||truth||_2 (per sample, all channels)."""
    axes = tuple(range(1, truth.ndim))
    return jnp.mean(jnp.sqrt(jnp.sum((pred - truth) ** 2, axes) / jnp.sum(truth**2, axes)))


# -- building a run from a config ---------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Setup:
    """What `fit` needs for one configured run, plus the task and the description stored with it."""

    task: Any
    model: Any
    loss_fn: Any
    source: Any
    eval_fn: Any
    description: dict


# Options of each diffusion noise from a config's `diffusion` section.
NOISE_OPTIONS = {
    "white": lambda d: {},
    "grf": lambda d: dict(alpha=d.noise_alpha, tau=d.noise_tau),
    "rbf": lambda d: dict(scale=d.get("rbf_scale", 0.05), nugget_std=d.get("rbf_nugget_std", 0.01)),
}


def _plain(section) -> dict:
    return section.to_dict() if hasattr(section, "to_dict") else dict(section)


def build_model(
    kind: str, name: str, options: dict, task, x_norm, u_norm, key, *, sigma_data: float = 1.0, noise=None
):
    """The model of `kind` with backbone `name` for `task` (channels from its unknown and state shapes).

    `noise`: the base noise generator of a ``fundiff`` flow (default `diffusion.GRFNoise()`).
    """
    cx, cu = task.unknown_shape[0], task.state_shape[0]
    if kind == "prior":
        return diffusion.EDMDenoiser(
            nn.get(name, key, in_channels=cx, out_channels=cx, **options), x_norm, sigma_data
        )
    if kind == "joint":
        net = nn.get(name, key, in_channels=cx + cu, out_channels=cx + cu, **options)
        return diffusion.EDMDenoiser(net, x_norm.concat(u_norm), sigma_data)
    if kind == "surrogate":
        return nn.Surrogate(nn.get(name, key, in_channels=cx, out_channels=cu, **options), x_norm, u_norm)
    if kind == "inverse":
        return nn.InverseNet(
            nn.get(name, key, in_channels=cu + 1, out_channels=cx, **options), x_norm, u_norm
        )
    if kind == "fundiff":
        net = nn.get(name, key, in_channels=cx + cu + 1, out_channels=cx, **options)
        return fundiff.ConditionalFlow(net, x_norm, u_norm, diffusion.GRFNoise() if noise is None else noise)
    raise ValueError(f"kind: expected one of {KINDS}, got {kind!r}")


def build(config, workdir: Path | None = None) -> Setup:
    """Task, model, loss, data source and evaluation of a `configs/train/*.py` config."""
    kind = config.kind
    if kind not in KINDS:
        raise ValueError(f"config.kind: expected one of {KINDS}, got {kind!r}")
    task = tasks.get(config.task, **_plain(config.task_options))
    x_norm = nn.field_normalizer(task)
    norm = config.normalization
    u_norm = None if kind == "prior" else nn.state_statistics(task, norm.num_draws, norm.seed)
    options = _plain(config.model.options)
    d = config.diffusion
    if kind in ("prior", "joint"):  # EDM priors train on data of std `data_scale` (published: 0.5)
        x_norm = x_norm.rescaled(d.get("data_scale", 1.0))
        u_norm = None if u_norm is None else u_norm.rescaled(d.get("data_scale", 1.0))
    noise = diffusion.noise.get(d.noise, **NOISE_OPTIONS[d.noise](d))
    model = build_model(
        kind, config.model.name, options, task, x_norm, u_norm, jr.key(config.model.seed),
        sigma_data=d.sigma_data, noise=noise,
    )  # fmt: skip
    batch_size = config.train.batch_size
    task_source = TaskSource(task, x_norm, u_norm, kind, batch_size)
    if config.data.source == "task":
        source = task_source
    elif config.data.source == "pool":
        path = None if workdir is None else Path(workdir) / "pool.npz"
        tag = f"{task.config_hash()}:{kind}:{u_norm}"
        source = PoolSource(
            build_pool(task_source, config.data.pool_size, config.data.seed, path, tag), batch_size
        )
    else:
        raise ValueError(f"config.data.source: expected 'task' or 'pool', got {config.data.source!r}")
    held_out = TaskSource(task, x_norm, u_norm, kind, config.eval.num_examples)(jr.key(config.eval.seed))
    if kind in ("prior", "joint"):
        loss_fn = DiffusionLoss(noise, d.p_mean, d.p_std)
        eval_key = jr.key(config.eval.seed + 1)
        eval_fn = eqx.filter_jit(lambda m: {"eval_dsm_loss": loss_fn(m, eval_key, held_out)})
    elif kind == "fundiff":
        loss_fn = FlowMatchingLoss(task.observation.mask)
        eval_key = jr.key(config.eval.seed + 1)
        eval_fn = eqx.filter_jit(lambda m: {"eval_flow_matching_loss": loss_fn(m, eval_key, held_out)})
    elif kind == "surrogate":
        loss_fn = surrogate_loss
        x_held, u_held = x_norm.denormalize(held_out[0]), u_norm.denormalize(held_out[1])
        eval_fn = eqx.filter_jit(lambda m: {"eval_relative_l2": relative_l2(jax.vmap(m)(x_held), u_held)})
    else:
        mask = task.observation.mask
        loss_fn = InverseLoss(mask)
        eval_fn = eqx.filter_jit(
            lambda m: {
                "eval_relative_l2": relative_l2(jax.vmap(lambda y: m(y, mask))(held_out[0]), held_out[1])
            }
        )
    description = {
        "kind": kind,
        "task": config.task,
        "task_config": task.config_dict(),
        "model": config.model.name,
        "options": options,
        "x_norm": [x_norm.mean, x_norm.std],
        "u_norm": None if u_norm is None else [u_norm.mean, u_norm.std],
    }
    return Setup(task, model, loss_fn, source, eval_fn, description)


def train_config(section) -> TrainConfig:
    """`TrainConfig` from the `config.train` section; unknown keys are an error."""
    values = _plain(section)
    known = {f.name for f in dataclasses.fields(TrainConfig)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"config.train: unknown key(s) {unknown}; expected a subset of {sorted(known)}")
    return TrainConfig(**values)


def run(config, workdir, *, init=None, stop_after: int | None = None):
    """Train the configured model in `workdir`, resuming from its checkpoints; returns (model, ema, setup).

    `init`: a trained model whose parameters start the run (fine-tuning, e.g. a network trained
    at a lower resolution continued at the config's); its `parameter_digest` joins the
    fingerprint, so a workdir holding a run from other initial parameters is refused.
    """
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    cfg = train_config(config.train)
    setup = build(config, workdir)
    if init is not None:
        description = {**setup.description, "init_parameters": parameter_digest(init)}
        setup = dataclasses.replace(setup, model=initialized(setup.model, init), description=description)
    if jax.process_index() == 0:
        (workdir / "config.json").write_text(config.to_json_best_effort(indent=2, sort_keys=True))
        provenance = {
            "description": setup.description,
            "jax": jax.__version__,
            "devices": [str(d) for d in jax.devices()],
        }
        (workdir / "provenance.json").write_text(json.dumps(provenance, indent=2, default=str))
    model, ema, _ = fit(
        setup.model, setup.loss_fn, setup.source, cfg, workdir,
        description=setup.description, eval_fn=setup.eval_fn, stop_after=stop_after,
    )  # fmt: skip
    return model, ema, setup
