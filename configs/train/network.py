"""Train one network: `--config=configs/train/network.py:task=<task>,kind=<kind>[,tiny]`.

    python -m experiments.train \
        --config=configs/train/network.py:task=poisson_fixed,kind=joint,tiny --workdir=/tmp/joint

The argument is parsed like big_vision's `parse_arg`: comma-separated `key=value` pairs, a bare
`key` setting a flag to True. Keys: ``task`` (a registered task, default ``darcy``), ``kind``
(a registered network kind, `posteriorjax.training.kinds`, default ``joint``), ``tiny`` (16 x 16,
300 steps, about a minute on one CPU), ``medium`` (32 x 32, the published backbone shrunk by
`nn.published.scaled`, a 2-core CPU's tens of minutes); with neither, the full 128 x 128 model
for a GPU. The config
is `posteriorjax.training.config(task, kind, scale)`; a trained ``flow_fno`` flow samples with
``samplers.get("flow_fno", task, model=ema_model)``, an ``inverse`` network with ``mc_dropout``.
"""

from __future__ import annotations

from posteriorjax import tasks, training

DEFAULTS = {"task": "darcy", "kind": "joint", "tiny": False, "medium": False}


def parse_arg(arg: str | None, **defaults) -> dict:
    """`"a=x,b"` -> {**defaults, "a": "x", "b": True}; keys must be among `defaults` (else ValueError)."""
    values = dict(defaults)
    for item in filter(None, (arg or "").split(",")):
        key, sep, value = item.partition("=")
        key = key.strip()
        if key not in defaults:
            raise ValueError(
                f"config argument: unknown key {key!r} in {arg!r}; allowed keys: {sorted(defaults)}"
            )
        if isinstance(defaults[key], bool):
            if sep and value.strip().lower() not in ("true", "false"):
                raise ValueError(
                    f"config argument: {key} is a flag; expected {key} or {key}=true|false, got {item!r}"
                )
            values[key] = not sep or value.strip().lower() == "true"
        elif not sep:
            raise ValueError(f"config argument: {key} expects a value ({key}=...), got {item!r}")
        else:
            values[key] = type(defaults[key])(value.strip())
    return values


def get_config(arg=None):
    args = parse_arg(arg, **DEFAULTS)
    if args["task"] not in tasks.names():
        raise ValueError(
            f"config argument: task={args['task']!r} is not a registered task; allowed: {tasks.names()}"
        )
    if args["kind"] not in training.kinds.names():
        raise ValueError(
            f"config argument: kind={args['kind']!r} is not a network kind; allowed: {training.kinds.names()}"
        )
    if args["tiny"] and args["medium"]:
        raise ValueError(f"config argument: expected at most one of tiny and medium, got {arg!r}")
    scale = "tiny" if args["tiny"] else "medium" if args["medium"] else "full"
    return training.config(args["task"], args["kind"], scale)
