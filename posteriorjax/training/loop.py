"""The one optax training loop: a shared update, the checkpointed `fit`, and the in-memory scans.

`update` is the optimizer step every loop takes: loss and gradient of `loss_fn(model, x)` at the
parameters, `optimizer.update`, `eqx.apply_updates`. Three loops run it:

  * `fit(model, loss_fn, source, cfg, workdir)`: a resumable run. The data source is an Equinox
    module `source(key) -> batch` called *inside* the jitted step (`training.data`). Step s uses
    the key `fold_in(key(seed), s)` (split into data and loss keys), so a run resumed from the
    checkpoint of step s continues bit-identically. One jitted step does data, forward,
    gradient, clipping, AdamW with warm-up + cosine schedule (`settings.make_optimizer`), and
    the EMA update ema <- d ema + (1 - d) params (d capped early in the run, `ema_decay_at`).
    With several devices the batch is sharded over the `parallel.data_mesh()` axis (parameters
    replicated) and XLA inserts the gradient all-reduce. Checkpoints every `checkpoint_every`
    steps and at the end (`checkpoints`), and on SIGINT or SIGTERM (Ctrl-C, `kill`, a
    scheduler's time limit) after the step in progress; metrics go to `workdir/metrics.jsonl`
    (one JSON object per logged step; lines past the restored step are dropped on resume, so
    nothing is duplicated).
  * `scan(model, loss_fn, optimizer, xs)`: `len(xs)` steps in one `lax.scan` over in-memory
    data (step i sees `xs[i]`: a key or a batch of indices), for small studies.
  * `scan_ensemble(models, ...)`: the same for K stacked models at once (deep ensembles,
    pattern-specific models): the update is vmapped over the members, each with its own
    optimizer state and optional per-member data; the step inputs `xs` are per member or shared.
"""

from __future__ import annotations

import contextlib
import json
import signal
import threading
import time
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
import optax

from posteriorjax import console, parallel
from posteriorjax.training.checkpoints import Checkpoints, TrainState, fingerprint, init_state, truncate_log
from posteriorjax.training.settings import TrainConfig, make_optimizer, schedule


def update(params, static, opt_state, loss_fn, optimizer: optax.GradientTransformation, *args):
    """One optimizer step on `loss_fn(eqx.combine(params, static), *args)`; -> (params, opt_state, loss)."""
    loss, grads = jax.value_and_grad(lambda p: loss_fn(eqx.combine(p, static), *args))(params)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return eqx.apply_updates(params, updates), opt_state, loss


def ema_decay_at(step, ema_decay: float, ema_rampup: float):
    """The EMA decay of update number `step` (0, 1, ...): `ema_decay`, capped while the run is
    young so that the EMA's half-life is at most `ema_rampup` x the steps taken (EDM's
    `ema_rampup_ratio`, Karras et al. 2022, `training_loop.py`); `ema_rampup` 0: no cap.

    Without the cap, an EMA that starts at the initial parameters keeps ema_decay^T of them after
    T steps: 22 % after 1,500 steps at 0.999."""
    if ema_rampup == 0.0:
        return ema_decay
    half_life = ema_rampup * (step + 1.0)
    return jnp.minimum(ema_decay, 0.5 ** (1.0 / half_life))


def make_step(static, loss_fn, optimizer, ema_decay: float, *, mesh=None, ema_rampup: float = 0.0):
    """The jitted update `step(state, source) -> (state, loss)`; `static` is the model's non-array
    part; the EMA's decay per step is `ema_decay_at(step, ema_decay, ema_rampup)`."""
    sharding = None if mesh is None or mesh.devices.size == 1 else parallel.batch_sharding(mesh)

    @eqx.filter_jit
    def step(state: TrainState, source):
        # the stored key never changes; each step folds in its number, so a run resumed from a
        # checkpoint draws the same batches as one that never stopped
        k_data, k_loss = jr.split(jr.fold_in(state.key, state.step))
        batch = source(k_data)
        if sharding is not None:
            batch = jax.lax.with_sharding_constraint(batch, sharding)
        params, opt_state, loss = update(
            state.params, static, state.opt_state, loss_fn, optimizer, k_loss, batch
        )
        d = ema_decay_at(state.step, ema_decay, ema_rampup)
        ema = jax.tree.map(lambda e, p: d * e + (1.0 - d) * p, state.ema, params)
        return TrainState(params, ema, opt_state, state.step + 1, state.key), loss

    return step


def scan(model, loss_fn, optimizer: optax.GradientTransformation, xs, *member, opt_state=None):
    """`len(xs)` optimizer steps in one `lax.scan`, step i on `loss_fn(model, xs[i], *member)`.

    `opt_state`: continue from this optimizer state (default: `optimizer.init`).
    Returns (model, opt_state, losses (len(xs),)).
    """
    params, static = eqx.partition(model, eqx.is_inexact_array)
    opt_state = optimizer.init(params) if opt_state is None else opt_state

    def step(carry, x):
        p, s = carry
        p, s, loss = update(p, static, s, loss_fn, optimizer, x, *member)
        return (p, s), loss

    (params, opt_state), losses = jax.lax.scan(step, (params, opt_state), xs)
    return eqx.combine(params, static), opt_state, losses


def scan_ensemble(models, loss_fn, optimizer, xs, *member, opt_state=None, shared: bool = False):
    """`scan` of K stacked `models` (leading member axis on every array) vmapped over the members.

    `member`: per-member arrays (leading axis K) passed to `loss_fn` after the step input;
    `shared`: every member sees the same step inputs `xs (steps, ...)` (else `xs (K, steps, ...)`);
    `opt_state`: stacked states to continue from (default: one `optimizer.init` per member).
    Returns (models, opt_state, losses (K, steps)).
    """
    params, static = eqx.partition(models, eqx.is_inexact_array)
    opt_state = jax.vmap(optimizer.init)(params) if opt_state is None else opt_state

    def one(p, x, s, *m):
        out, s, losses = scan(eqx.combine(p, static), loss_fn, optimizer, x, *m, opt_state=s)
        return eqx.filter(out, eqx.is_inexact_array), s, losses

    in_axes = (0, None if shared else 0, 0) + (0,) * len(member)
    params, opt_state, losses = jax.vmap(one, in_axes=in_axes)(params, xs, opt_state, *member)
    return eqx.combine(params, static), opt_state, losses


# -- the checkpointed loop ----------------------------------------------------------------------


def _truncate_log(path: Path, step: int) -> None:
    truncate_log(path, step)  # torn lines skipped (checkpoints.read_log)


def _resume(model, optimizer, cfg: TrainConfig, workdir: Path, description: dict):
    """(state, checkpoints, log path) of a run in `workdir`: the latest checkpoint or a fresh start."""
    state = init_state(model, optimizer, cfg.seed)
    checkpoints = Checkpoints(workdir / "checkpoints", fingerprint(model, description), cfg.keep_checkpoints)
    restored = checkpoints.restore_latest(state)
    log_path = workdir / "metrics.jsonl"
    if restored is not None:
        state = restored
        # the steps logged after this checkpoint run again from it: drop their lines so the
        # log holds each step once
        _truncate_log(log_path, int(state.step))
    elif log_path.exists():
        log_path.unlink()
    return state, checkpoints, log_path


class _Logger:
    """The `metrics.jsonl` record of a step: loss, learning rate, speed, evaluation (or None)."""

    def __init__(self, cfg: TrainConfig, start: int, eval_fn, static, score_fn=None, score_every: int = 0):
        self.cfg, self.eval_fn, self.static = cfg, eval_fn, static
        self.score_fn, self.score_every = score_fn, score_every
        self.schedule = schedule(cfg)
        self.tick, self.tick_step = time.perf_counter(), start

    def record(self, step: int, end: int, loss) -> dict | None:
        """The loss line of `step` (None off the logging steps)."""
        if not (step % self.cfg.log_every == 0 or step == end):
            return None
        now = time.perf_counter()
        # optax counts updates from 0: step s (1-based) ran at schedule(s - 1)
        record = {"step": step, "loss": float(loss), "learning_rate": float(self.schedule(step - 1))}
        record["steps_per_second"] = (step - self.tick_step) / max(now - self.tick, 1e-9)
        self.tick, self.tick_step = now, step
        return record

    def evaluate(self, step: int, state: TrainState, record: dict | None) -> dict | None:
        """`record` with the evaluation and scores of `step` added where they are due."""
        cfg = self.cfg
        if self.eval_fn is not None and (step % cfg.eval_every == 0 or step == cfg.num_steps):
            record = record or {"step": step}
            ema = eqx.combine(state.ema, self.static)
            record.update({k: float(v) for k, v in self.eval_fn(ema).items()})
        if (
            self.score_fn is not None
            and self.score_every
            and (step % self.score_every == 0 or step == cfg.num_steps)
        ):
            record = record or {"step": step}
            ema = eqx.combine(state.ema, self.static)
            record.update({f"score_{k}": v for k, v in self.score_fn(ema).items()})
        return record


def _write(log, record: dict | None) -> None:
    if record is not None:
        log.write(json.dumps(record) + "\n")
        log.flush()


class DivergedError(FloatingPointError):
    """A training run whose loss became non-finite; no checkpoint of the diverged state is saved."""


def _check_loss(loss, step: int, cfg: TrainConfig) -> None:
    """Raise `DivergedError` if the loss of `step` is NaN or inf (checked on log and checkpoint steps)."""
    value = float(loss)
    if not np.isfinite(value):
        raise DivergedError(
            f"loss: expected a finite training loss, got {value} at step {step} (the run diverged; "
            f"lower learning_rate={cfg.learning_rate:g} or clip_norm={cfg.clip_norm:g}); "
            f"the last checkpoint saved is the one before it"
        )


@contextlib.contextmanager
def _terminate_as_interrupt():
    """SIGTERM raises KeyboardInterrupt while the block runs (as SIGINT does), so `fit` saves
    the steps done before the process ends. A job started in the background by a shell ignores
    SIGINT, and schedulers stop jobs with SIGTERM; only the main thread can install a handler."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


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
    score_fn=None,
    score_every: int = 0,
):
    """Train `model` for `cfg.num_steps` steps, resuming from `workdir/checkpoints` if possible.

    Args:
      model: Equinox module; loss_fn(model, key, batch) -> scalar; source(key) -> batch.
      description: JSON-able description of the model (name, options, task) for the fingerprint.
      eval_fn: optional `eval_fn(ema_model) -> dict[str, float]`, run every `cfg.eval_every` steps.
      score_fn: optional `score_fn(ema_model) -> dict[str, float]` (`scores.Scorer`), logged as
        ``score_<name>`` every `score_every` steps and at the last step (`score_every` 0: never).
      stop_after: stop after this many steps in this call (an interruption; tests resume from it).
      mesh: device mesh for data parallelism (default `parallel.data_mesh()`).

    Returns:
      (model, ema_model, state).

    Raises `DivergedError` at the first log or checkpoint step whose loss is non-finite,
    before a checkpoint of that state is written (the metrics line of the step is kept).
    """
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    mesh = parallel.data_mesh() if mesh is None else mesh
    if cfg.batch_size % mesh.devices.size:
        raise ValueError(
            f"batch_size: expected a multiple of the device count {mesh.devices.size}, got {cfg.batch_size}"
        )
    optimizer = make_optimizer(cfg)
    static = eqx.filter(model, eqx.is_inexact_array, inverse=True)
    state, checkpoints, log_path = _resume(model, optimizer, cfg, workdir, description or {})
    state = jax.device_put(state, parallel.replicated(mesh))
    step_fn = make_step(static, loss_fn, optimizer, cfg.ema_decay, mesh=mesh, ema_rampup=cfg.ema_rampup)
    start = int(state.step)
    end = cfg.num_steps if stop_after is None else min(cfg.num_steps, start + stop_after)
    logger = _Logger(cfg, start, eval_fn, static, score_fn, score_every)
    stage = console.Stage(f"train {workdir.name}", end, "steps", initial=start, enabled=cfg.progress)
    saved = start
    try:
        with _terminate_as_interrupt(), log_path.open("a") as log, stage as bar:
            for step in range(start + 1, end + 1):
                state, loss = step_fn(state, source)
                record = logger.record(step, end, loss)
                save = step % cfg.checkpoint_every == 0 or step == end
                if (save or record is not None) and not np.isfinite(float(loss)):
                    _write(log, record)  # the diverged step's line is kept
                    _check_loss(loss, step, cfg)
                if save:  # before the evaluation: an interruption there keeps the steps
                    checkpoints.save(state)
                    saved = step
                record = logger.evaluate(step, state, record)
                _write(log, record)
                bar.update(1, **({"loss": f"{record['loss']:.4g}"} if record and "loss" in record else {}))
    except KeyboardInterrupt:  # SIGINT or SIGTERM: keep the steps done so far
        if int(state.step) > saved and np.isfinite(float(loss)):
            checkpoints.save(state)
        checkpoints.close()
        raise
    checkpoints.close()
    return eqx.combine(state.params, static), eqx.combine(state.ema, static), state
