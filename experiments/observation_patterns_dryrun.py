"""Dry run of the full observation-pattern scale: build every learned model at 128 x 128, report sizes.

    python -m experiments.observation_patterns_dryrun [--resolution=128] [--compile]

For each of the seven learned models (`transfer.models.MODELS`) and both tasks (recovery:
one output channel; forecasting: three) at the published settings, the networks are built
abstractly (`eqx.filter_eval_shape`, nothing allocated) and the table gives the parameter
count, the parameter and Adam-state memory of the nine vmapped views (float32, 3 copies) and
the published batch. With `--compile` one training step of the nine-view program is also
lowered and compiled and XLA's memory analysis (argument, output and temporary bytes) is
printed: minutes per model on a CPU, meant for the accelerator the full scale runs on.
"""

import time

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
from absl import app, flags

from posteriorjax import nn
from posteriorjax.nn.pdeobs import parameter_count
from posteriorjax.studies.transfer import models

_RESOLUTION = flags.DEFINE_integer("resolution", 128, "Grid points per axis.")
_COMPILE = flags.DEFINE_bool("compile", False, "Also compile one nine-view training step per model.")


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


def main(argv):
    del argv
    n = _RESOLUTION.value
    print("| model | task | parameters | 9 views x (params + Adam), GiB | batch | one step, XLA memory |")
    print("|---|---|---|---|---|---|")
    for name in models.MODELS:
        for task, c_out, forecast in (("recovery", 1, False), ("forecasting", 3, True)):
            cfg = models.fit_config(name, forecast=forecast)
            net = eqx.filter_eval_shape(
                lambda k, cfg=cfg, c_out=c_out, name=name: nn.get(
                    models.NETWORK[name], k, in_channels=2, out_channels=c_out, **dict(cfg.model)
                ),
                jr.key(0),
            )
            count = parameter_count(net)
            state = 9 * 3 * 4 * count / 2**30
            memory = "—"
            if _COMPILE.value:
                start = time.perf_counter()
                memory = (
                    _step_memory(name, cfg, c_out, n) + f", compiled in {time.perf_counter() - start:.0f} s"
                )
            print(f"| {name} | {task} | {count:,} | {state:.2f} | {cfg.batch_size} | {memory} |", flush=True)


if __name__ == "__main__":
    app.run(main)
