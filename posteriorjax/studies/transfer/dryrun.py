"""Dry run of the full observation-pattern scale: what every (family, model) block costs, nothing trained.

A block is one (family, model) program: the nine single-view models and the MIX model, vmapped
(`models.fit_views`), trained `epochs` passes over `num_train` records. For each of the seven
learned models (`models.MODELS`) at the published settings (`models.fit_config`, PDE-OBS
Tables 6-7) and both tasks (recovery: one network call; forecasting: the published free rollout,
`models.network_layout`), on abstract inputs (`jax.ShapeDtypeStruct`, nothing allocated):

  * parameters of one network (`nn.pdeobs.parameter_count`);
  * data: the training inputs of the ten views `(10, N, 2, H, W)` and the targets
    `(N, C_out, H, W)` in float32, GiB;
  * memory: parameters + Adam moments of the ten models (3 float32 copies), GiB, and with
    `compile_step` XLA's memory analysis of one compiled training step (minutes per model on a
    CPU; meant for the accelerator);
  * FLOPs per epoch: `sweep.sizing.jaxpr_flops` of one training step (forward and gradient of
    the relative-L2 loss of the ten models on one batch; the optimizer update and PINO's
    residual term are not counted) times the steps of an epoch (N // batch);
  * hours: FLOPs per epoch x epochs x the block's families / the matmul roofline of every device
    kind with a recorded benchmark (`sizing.throughputs`, `results/benchmarks/`): a lower bound.
"""

from __future__ import annotations

import time

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr

from posteriorjax import nn
from posteriorjax.metrics import posterior
from posteriorjax.nn.pdeobs import parameter_count
from posteriorjax.studies.transfer import data, models
from posteriorjax.sweep import sizing

TASKS = (("recovery", 1, False, data.RECOVERY), ("forecasting", 3, True, data.FORECAST))
NUM_MODELS = len(data.VIEWS) + 1  # nine views and MIX in one program


def _abstract_models(name: str, cfg: models.FitConfig, net_out: int, rollout: int):
    def build(k):
        net = nn.get(models.NETWORK[name], k, in_channels=2, out_channels=net_out, **dict(cfg.model))
        return models.TransferModel(net, jnp.ones(()), jnp.ones((net_out,)), rollout)

    return eqx.filter_eval_shape(lambda keys: eqx.filter_vmap(build)(keys), jr.split(jr.key(0), NUM_MODELS))


def step_function(name: str, cfg: models.FitConfig, frames: int, forecast: bool, n: int):
    """(loss-gradient function, abstract arguments) of one training step of a block's ten models."""
    net_out, rollout = models.network_layout(cfg, frames, forecast=forecast)
    stacked = _abstract_models(name, cfg, net_out, rollout)
    params, static = eqx.partition(stacked, lambda a: isinstance(a, jax.ShapeDtypeStruct))

    def loss(p, x, y):
        mdl = eqx.combine(p, static)
        per_model = eqx.filter_vmap(lambda m, xv: jnp.mean(posterior.relative_l2(jax.vmap(m)(xv), y)))(mdl, x)
        return jnp.sum(per_model)

    x = jax.ShapeDtypeStruct((NUM_MODELS, cfg.batch_size, 2, n, n), jnp.float32)
    y = jax.ShapeDtypeStruct((cfg.batch_size, frames, n, n), jnp.float32)
    return jax.grad(loss), (params, x, y)


def block_costs(
    name: str,
    task: str,
    *,
    resolution: int = 128,
    num_train: int = models.PUBLISHED_TRAIN,
    epochs: int = models.PUBLISHED_EPOCHS,
    compile_step: bool = False,
    config=None,
) -> dict:
    """Costs of one (task, model) block at `resolution` (module doc); `config` updates the
    published settings (`models.fit_config`)."""
    spec = {t[0]: t for t in TASKS}
    if task not in spec:
        raise ValueError(f"task: expected one of {tuple(spec)}, got {task!r}")
    _, frames, forecast, families = spec[task]
    cfg = models.fit_config(name, config, forecast=forecast)
    net_out, rollout = models.network_layout(cfg, frames, forecast=forecast)
    n = resolution
    count = parameter_count(
        eqx.filter_eval_shape(
            lambda k: nn.get(models.NETWORK[name], k, in_channels=2, out_channels=net_out, **dict(cfg.model)),
            jr.key(0),
        )
    )
    grad, args = step_function(name, cfg, frames, forecast, n)
    step_flops, _ = sizing.jaxpr_flops(jax.make_jaxpr(grad)(*args))
    steps_per_epoch = num_train // cfg.batch_size
    out = {
        "model": name,
        "task": task,
        "families": len(families),
        "parameters": count,
        "rollout": rollout,
        "batch": cfg.batch_size,
        "data_gib": 4 * (NUM_MODELS * num_train * 2 + num_train * frames) * n * n / 2**30,
        "state_gib": NUM_MODELS * 3 * 4 * count / 2**30,
        "step_flops": step_flops,
        "flops_per_epoch": step_flops * steps_per_epoch,
        "epochs": epochs,
    }
    out["total_flops"] = out["flops_per_epoch"] * epochs * len(families)
    if compile_step:
        start = time.perf_counter()
        mem = jax.jit(grad).lower(*args).compile().memory_analysis()
        out["compile_seconds"] = time.perf_counter() - start
        if mem is not None:
            out["step_gib"] = (
                mem.argument_size_in_bytes + mem.output_size_in_bytes + mem.temp_size_in_bytes
            ) / 2**30
    return out


def table(resolution: int = 128, compile_step: bool = False, rates=None) -> str:
    """The Markdown table of every (model, task) block at `resolution`, with device-hours for each
    device kind of `rates` (default: `sizing.throughputs()` from `results/benchmarks/`)."""
    rates = sizing.throughputs() if rates is None else rates
    devices = sorted(rates)
    head = (
        "| model | task (families) | parameters | forward calls | batch | data, GiB "
        "| 10 x (params + Adam), GiB | one step, XLA, GiB | TFLOP / epoch | "
        + " | ".join(f"hours, {d} (its families)" for d in devices)
        + " |"
    )
    lines = [head, "|" + "---|" * (9 + len(devices))]
    total = 0.0
    for name in models.MODELS:
        for task, *_ in TASKS:
            c = block_costs(name, task, resolution=resolution, compile_step=compile_step)
            total += c["total_flops"]
            hours = sizing.hours(c["total_flops"], rates)
            lines.append(
                f"| {name} | {task} ({c['families']}) | {c['parameters']:,} | {max(1, c['rollout'])} "
                f"| {c['batch']} | {c['data_gib']:.2f} | {c['state_gib']:.2f} | "
                + (f"{c['step_gib']:.2f}" if "step_gib" in c else "—")
                + f" | {c['flops_per_epoch'] / 1e12:.1f} | "
                + " | ".join(f"{hours[d]:.2f}" for d in devices)
                + " |"
            )
    hours = sizing.hours(total, rates)
    sources = "; ".join(
        f"{d}: {rates[d]['flops_per_s'] / 1e12:.2f} TFLOP/s ({rates[d]['source']})" for d in devices
    )
    lines += [
        "",
        f"Every block: {models.PUBLISHED_EPOCHS} epochs of {models.PUBLISHED_TRAIN} records at "
        f"{resolution} x {resolution}, ten models (nine views + MIX). "
        f"All 49 pairs: {total / 1e15:.1f} PFLOP, "
        + ", ".join(f"{hours[d]:.1f} h on {d}" for d in devices)
        + f" at the matmul roofline (a lower bound; {sources or 'no benchmark recorded'}).",
    ]
    return "\n".join(lines)
