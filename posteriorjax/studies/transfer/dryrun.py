"""Dry run of the full observation-pattern scale: every learned model built at the published
settings, its size and (optionally) the XLA memory of one nine-view training step.

For each of the seven learned models (`models.MODELS`) and both tasks (recovery: one output
channel; forecasting: `models.network_layout`, one channel rolled out three times under the
published protocol) the networks are built abstractly (`eqx.filter_eval_shape`, nothing
allocated): the parameter count, the parameter and Adam-state memory of the nine vmapped views
(float32, 3 copies) and the published batch. `compile_step` also lowers and compiles one
training step of the nine-view program and reads XLA's memory analysis (argument, output and
temporary bytes): minutes per model on a CPU, meant for the accelerator the full scale runs on.
"""

import time

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr

from posteriorjax import nn
from posteriorjax.nn.pdeobs import parameter_count
from posteriorjax.studies.transfer import models


def _step_memory(name: str, cfg, c_out: int, n: int) -> str:
    def build(k):
        return nn.get(models.NETWORK[name], k, in_channels=2, out_channels=c_out, **dict(cfg.model))

    nets = eqx.filter_vmap(build)(jr.split(jr.key(0), 9))
    params, static = eqx.partition(nets, eqx.is_inexact_array)

    def loss(p, x, y):
        net = eqx.combine(p, static)
        pred = eqx.filter_vmap(lambda m, xv: jax.vmap(m)(xv))(net, x)
        return jnp.mean((pred - y) ** 2)

    x = jax.ShapeDtypeStruct((9, cfg.batch_size, 2, n, n), jnp.float32)
    y = jax.ShapeDtypeStruct((9, cfg.batch_size, c_out, n, n), jnp.float32)
    p = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), params)
    compiled = jax.jit(jax.grad(loss)).lower(p, x, y).compile()
    mem = compiled.memory_analysis()
    if mem is None:
        return "n/a"
    total = mem.argument_size_in_bytes + mem.output_size_in_bytes + mem.temp_size_in_bytes
    return f"{total / 2**30:.2f} GiB (temp {mem.temp_size_in_bytes / 2**30:.2f})"


def table(resolution: int = 128, compile_step: bool = False) -> str:
    """The Markdown table: per model and task, parameters, nine-view state memory, batch and (with
    `compile_step`) the XLA memory of one compiled nine-view training step at `resolution`."""
    n = resolution
    lines = [
        "| model | task | parameters | 9 views x (params + Adam), GiB | batch | one step, XLA memory |",
        "|---|---|---|---|---|---|",
    ]
    for name in models.MODELS:
        for task, frames, forecast in (("recovery", 1, False), ("forecasting", 3, True)):
            cfg = models.fit_config(name, forecast=forecast)
            c_out, _ = models.network_layout(cfg, frames, forecast=forecast)
            net = eqx.filter_eval_shape(
                lambda k, cfg=cfg, c_out=c_out, name=name: nn.get(
                    models.NETWORK[name], k, in_channels=2, out_channels=c_out, **dict(cfg.model)
                ),
                jr.key(0),
            )
            count = parameter_count(net)
            state = 9 * 3 * 4 * count / 2**30
            memory = "—"
            if compile_step:
                start = time.perf_counter()
                memory = _step_memory(name, cfg, c_out, n)
                memory += f", compiled in {time.perf_counter() - start:.0f} s"
            lines.append(f"| {name} | {task} | {count:,} | {state:.2f} | {cfg.batch_size} | {memory} |")
    return "\n".join(lines)
