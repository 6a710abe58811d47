"""The networks a sampler entry asks for: their specs, training configs, and training.

A network spec (`NetworkSpec`, parsed from a config by `parse_spec`) names a kind, task
overrides, a step count, training-config overrides (for every task and per task) and an optional
network to fine-tune from;
`network_config` turns it into a training config with a hash, `network` trains (or resumes,
or loads) it under `workdir/networks/`, `network_record` says what it is and how it scores on
its own (`training.scores`), for the records of the samplers that use it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

from posteriorjax import files, training
from posteriorjax.checks import as_dict, positive_int
from posteriorjax.training import kinds as network_kinds  # (`training` is also an argument below)


@dataclasses.dataclass(frozen=True)
class NetworkSpec:
    """A network a sampler option receives: `kind`, training task overrides, optional step count.

    `training`: overrides of its training config (`posteriorjax.training.config`) by dotted
    path, e.g. ``{"diffusion.noise": "white"}`` (written nested in a config). `pretrain`: the
    spec of a network (same kind) trained first, whose parameters start this one's training
    (multi-resolution fine-tuning: pretrain at a lower resolution); it inherits the kind and
    the `training` overrides. `task_training`: {task: overrides} applied after `training` when the
    network is trained for that task (PosteriorBench's per-task configs, e.g. the Darcy prior's
    attention level); a `pretrain` spec inherits them too.
    """

    kind: str
    task_options: dict
    num_steps: int | None = None
    pretrain: NetworkSpec | None = None
    training: dict = dataclasses.field(default_factory=dict)
    task_training: dict = dataclasses.field(default_factory=dict)

    def overrides(self, task: str) -> dict:
        """The dotted training overrides of this network trained for `task`."""
        return {**self.training, **self.task_training.get(task, {})}


def parse_spec(
    where: str,
    spec,
    scale: str,
    task: str,
    *,
    kind=None,
    training: Mapping | None = None,
    task_training: Mapping | None = None,
) -> NetworkSpec:
    """Parse a network spec trained at `scale` for `task` (its training overrides are checked against
    that task's training config, each `task_training` entry against its task's); a `pretrain` spec
    inherits `kind`, `training` and `task_training`."""
    if isinstance(spec, str):
        spec = {"kind": spec}
    if not isinstance(spec, Mapping):
        raise ValueError(
            f"{where}: expected a kind {network_kinds.names()} or a dict with 'kind', got {spec!r}"
        )
    spec = dict(spec)
    unknown = sorted(
        set(spec) - {"kind", "task_options", "num_steps", "pretrain", "training", "task_training"}
    )
    if unknown:
        raise ValueError(
            f"{where}: unknown key(s) {unknown}; expected kind, task_options, num_steps, pretrain, training, "
            "task_training"
        )
    if kind is not None and spec.setdefault("kind", kind) != kind:
        raise ValueError(f"{where}.kind: expected the fine-tuned network's {kind!r}, got {spec['kind']!r}")
    if spec.get("kind") not in network_kinds.REGISTRY:
        raise ValueError(f"{where}.kind: expected one of {network_kinds.names()}, got {spec.get('kind')!r}")
    steps = spec.get("num_steps")
    if steps is not None:
        steps = positive_int(f"{where}.num_steps", steps)
    training = {**(training or {}), **_dotted(f"{where}.training", spec.get("training") or {})}
    _training_overrides(f"{where}.training", training, common_config(task, spec["kind"], scale))
    per_task = spec.get("task_training") or {}
    if not isinstance(per_task, Mapping):
        raise ValueError(f"{where}.task_training: expected {{task: training overrides}}, got {per_task!r}")
    per_task = {
        **{str(t): dict(v) for t, v in (task_training or {}).items()},
        **{str(t): _dotted(f"{where}.task_training.{t}", v) for t, v in as_dict(per_task).items()},
    }
    for name, overrides in per_task.items():
        cfg = common_config(name, spec["kind"], scale)
        _training_overrides(f"{where}.task_training.{name}", {**training, **overrides}, cfg)
    pretrain = spec.get("pretrain")
    if pretrain is not None:
        pretrain = parse_spec(
            f"{where}.pretrain",
            as_dict(pretrain),
            scale=scale,
            task=task,
            kind=spec["kind"],
            training=training,
            task_training=per_task,
        )
    return NetworkSpec(spec["kind"], as_dict(spec.get("task_options")), steps, pretrain, training, per_task)


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
    for name, value in as_dict(tree).items():
        whole = f"{prefix}{name}" in _WHOLE_SETTINGS and "name" in tree  # a new backbone: its own options
        if isinstance(value, Mapping) and not whole:
            out.update(_dotted(where, value, f"{prefix}{name}."))
        else:
            out[f"{prefix}{name}"] = value
    return out


# settings of the `train` section that change what is written, not the trained parameters
BOOKKEEPING = ("progress", "log_every", "eval_every", "checkpoint_every", "keep_checkpoints")


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


def network_config(task_name: str, task_options: Mapping, spec: NetworkSpec, scale: str, num_steps=None):
    """The training config of a network spec (`posteriorjax.training.config`) and its short hash.

    `task_options` are those of the sampler's task, updated by `spec.task_options`, less the
    noise options for a kind trained on noise-free data (`kinds.training_task_options`: its
    network is the same at every noise level, so the hash leaves the noise out); the training
    overrides `spec.overrides(task_name)`; the step count is `spec.num_steps`, else `num_steps`,
    else the config's, at the medium scale that of the backbone (`training.kinds.medium_steps`)
    (each of these step counts caps the warm-up at a fifth of it, unless both the step
    count and ``train.warmup_steps`` come from the spec). The hash
    covers the pretraining chain, so a fine-tuned network never shares a directory with one
    trained from scratch.
    """
    cfg = common_config(task_name, spec.kind, scale)
    cfg.task_options = network_kinds.training_task_options(
        spec.kind, {**dict(task_options), **spec.task_options}
    )
    overrides = spec.overrides(task_name)
    _training_overrides("training", overrides, cfg)
    steps = spec.num_steps if spec.num_steps is not None else num_steps
    if steps is None and scale == "medium":  # the spec's backbone may be another than the kind's
        steps = training.kinds.medium_steps(str(cfg.model.name))
    if steps is not None:
        cfg.train.num_steps = int(steps)
        if spec.num_steps is None or "train.warmup_steps" not in overrides:
            cfg.train.warmup_steps = min(cfg.train.warmup_steps, max(int(steps) // 5, 1))
    plain = cfg.to_dict()
    for key in BOOKKEEPING:  # how often it logs, evaluates and checkpoints is not what it is
        plain["train"].pop(key)
    plain.pop("scores")  # nor how the network is scored (`training.scores`)
    if spec.pretrain is not None:
        plain["pretrain"] = network_config(task_name, task_options, spec.pretrain, scale, num_steps)[1]
    for role, input_spec in input_specs(spec).items():
        plain.setdefault("inputs", {})[role] = network_config(
            task_name, task_options, input_spec, scale, num_steps
        )[1]
    return cfg, files.json_digest(plain, 12)


def _directory(workdir, task_name: str, kind: str, digest: str) -> Path:
    return Path(workdir) / "networks" / task_name / f"{kind}-{digest}"


def input_specs(spec: NetworkSpec) -> dict:
    """{role: spec} of the trained networks a kind with `inputs` trains on: each the default spec of
    its kind with the network's task overrides (the same networks a sampler gets for those kinds)."""
    kind = training.kinds.get(spec.kind)
    return {role: NetworkSpec(k, dict(spec.task_options)) for role, k in kind.inputs.items()}


def network(
    workdir: Path,
    task_name: str,
    task_options: Mapping,
    spec: NetworkSpec,
    scale: str,
    *,
    num_steps: int | None = None,
    progress: bool = True,
):
    """Train (or resume, or load) a network with `training.run`; returns its EMA model.

    Workdir: `workdir/networks/<task>/<kind>-<hash of the training config>/`, so
    every sampler asking for the same network shares it and a rerun reuses it. A spec
    with `pretrain` first gets that network (trained or loaded the same way) and
    fine-tunes its EMA parameters; a kind with `inputs` first gets those networks (`input_specs`).
    """
    init = None
    if spec.pretrain is not None:
        init = network(
            workdir, task_name, task_options, spec.pretrain, scale, num_steps=num_steps, progress=progress
        )
    inputs = {
        role: network(workdir, task_name, task_options, s, scale, num_steps=num_steps, progress=progress)
        for role, s in input_specs(spec).items()
    }
    cfg, digest = network_config(task_name, task_options, spec, scale, num_steps)
    cfg.train.progress = bool(progress)
    directory = _directory(workdir, task_name, spec.kind, digest)
    for role, s in input_specs(spec).items():  # recorded in config.json (`training.run.trained`)
        input_digest = network_config(task_name, task_options, s, scale, num_steps)[1]
        cfg.inputs[role] = str(_directory(workdir, task_name, s.kind, input_digest))
    _, ema, _ = training.run(cfg, directory, init=init, inputs=inputs or None)
    return ema


def network_record(
    workdir: Path, task_name: str, task_options: Mapping, spec: NetworkSpec, scale: str, *, num_steps=None
) -> dict:
    """What a sweep record says about the trained network of `spec` (`network`): its kind, its
    directory name under `workdir/networks/<task>/`, and from its `scores.json` (`training.scores`)
    its parameter digest and count, training steps, scores and their floor (None without one)."""
    digest = network_config(task_name, task_options, spec, scale, num_steps)[1]
    directory = _directory(workdir, task_name, spec.kind, digest)
    report = training.scores.read(directory) or {}
    fields = ("parameters", "num_parameters", "training_steps", "scores", "floor")
    return {"kind": spec.kind, "network": directory.name, **{k: report.get(k) for k in fields}}
