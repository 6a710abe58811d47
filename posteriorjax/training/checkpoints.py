"""What a resumable run saves: its `TrainState`, orbax `Checkpoints` tagged with a model fingerprint.

Checkpoints (orbax `CheckpointManager`) hold parameters, EMA, optimizer state, step and PRNG
key, plus a JSON fingerprint of the model (name, configuration, parameter shapes). A run always
resumes from the latest checkpoint of its workdir; a fingerprint mismatch is an error (another
model's directory), and an unreadable latest checkpoint is set aside (`<step>.corrupt-<n>`, with a
warning) and the run falls back to the previous one, so the step is saved afresh when reached.
"""

from __future__ import annotations

import itertools
import json
import warnings
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import optax
import orbax.checkpoint as ocp

from posteriorjax import files


class TrainState(eqx.Module):
    """Everything a resumed run needs: parameters, EMA parameters, optimizer state, step, key."""

    params: Any
    ema: Any
    opt_state: Any
    step: jax.Array
    key: jax.Array


def init_state(model, optimizer: optax.GradientTransformation, seed: int) -> TrainState:
    """The state before step 1: parameters = EMA = `model`'s inexact arrays, key `key(seed)`."""
    params = eqx.filter(model, eqx.is_inexact_array)
    return TrainState(params, params, optimizer.init(params), jnp.zeros((), jnp.int32), jr.key(seed))


def _leaves(state: TrainState) -> dict:
    # orbax stores plain arrays, not typed PRNG keys: the key goes in as its raw key data. The
    # names are zero-padded so that `_from_leaves` restores the leaf order by sorting them.
    state = eqx.tree_at(lambda s: s.key, state, jr.key_data(state.key))
    return {f"{i:05d}": x for i, x in enumerate(jax.tree.leaves(state))}


def _from_leaves(template: TrainState, leaves: dict) -> TrainState:
    plain = eqx.tree_at(lambda s: s.key, template, jr.key_data(template.key))
    treedef = jax.tree.structure(plain)
    state = jax.tree.unflatten(treedef, [leaves[k] for k in sorted(leaves)])
    return eqx.tree_at(lambda s: s.key, state, jr.wrap_key_data(state.key))


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


def read_log(path, step: int | None = None) -> list[dict]:
    """The records of a training `metrics.jsonl` (up to `step` when given); a torn or garbled
    line (a kill mid-write) is skipped with a warning naming the file and line."""
    path, out = Path(path), []
    if not path.exists():
        return out
    for i, line in enumerate(path.read_text(errors="replace").splitlines()):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            keep = isinstance(record, dict) and isinstance(record["step"], int)
        except (json.JSONDecodeError, KeyError) as err:
            keep, record = False, err
        if not keep:
            warnings.warn(f"{path}: line {i + 1} is not a metrics record; skipped", stacklevel=2)
            continue
        if step is None or record["step"] <= step:
            out.append(record)
    return out


def truncate_log(path, step: int) -> None:
    """Rewrite `metrics.jsonl` atomically with its records up to `step` (bad lines dropped, `read_log`)."""
    path = Path(path)
    if path.exists():
        files.atomic_write_lines(path, [json.dumps(r) for r in read_log(path, step)])


def fingerprint(model, description: dict) -> dict:
    """JSON fingerprint of a model: its description and a hash of its parameter shapes and dtypes."""
    shapes = [
        (tuple(x.shape), str(x.dtype)) for x in jax.tree.leaves(eqx.filter(model, eqx.is_inexact_array))
    ]
    digest = files.json_digest([description, shapes], 16)
    return {"description": json.loads(json.dumps(description, default=str)), "params": digest}


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
        if step in self.manager.all_steps():  # never saved twice by a run; only a leftover can be here
            self.manager.delete(step)
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
                self._set_aside(step, f"unreadable ({type(err).__name__}); trying an older one")
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
                self._set_aside(step, f"corrupt or partial ({type(err).__name__}: {err}); falling back")
        return None

    def _set_aside(self, step: int, reason: str) -> None:
        """Rename a bad step's directory to `<step>.corrupt-<n>` (kept for inspection), with a warning."""
        path = Path(self.manager.directory) / str(step)
        n = 0
        while (aside := path.with_name(f"{step}.corrupt-{n}")).exists():
            n += 1
        if path.exists():
            path.rename(aside)
        self.manager.reload()
        warnings.warn(f"checkpoint {step} ({path}) is {reason}; set aside as {aside.name}", stacklevel=3)

    def close(self) -> None:
        self.manager.close()
