"""Dry run of the learned geometry study at a config's scale: what every (configuration, family)
block costs, nothing trained or simulated.

A block is one family on one learning configuration (`estimators.run_configuration`): its
`num_seeds x num_members` members trained as one vmapped program of `num_steps` steps of
`batch_size` examples. Per block, on abstract inputs (`jax.ShapeDtypeStruct`):

  * parameters of one member, and observations p / coefficients m of the configuration;
  * data: the train + calibration + test (+ OOD test) observation and coefficient vectors,
    float32, MiB;
  * memory: parameters + Adam moments of all members (3 float32 copies), MiB;
  * FLOPs per epoch (num_train / batch_size steps) and in all (`num_steps` steps):
    `sweep.sizing.jaxpr_flops` of one training step (forward and gradient of every member's
    loss; the optimizer update is not counted) -- the simulation of the data is not counted;
  * hours: the total FLOPs over the matmul roofline of every device kind with a recorded
    benchmark (`sweep.sizing.throughputs`): a lower bound.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr

from posteriorjax.nn.pdeobs import parameter_count
from posteriorjax.studies import estimators as est
from posteriorjax.studies.geometry import study
from posteriorjax.sweep import sizing


def block_costs(config, entry, family: str) -> dict:
    """Costs of `family` on the learning configuration `entry` of `config.learned` (module doc)."""
    cfg = config.learned
    label, name, frames, options = study.unpack(entry)
    task = study.build_task(name, frames, config.resolution, **options)
    lay = est.layout(task)
    p, m = task.num_observations, int(task.prior.std.shape[0])
    k = cfg.num_seeds * cfg.num_members
    opts = dict(cfg.options.get(family, {}))
    member = eqx.filter_eval_shape(lambda key: est.build(family, key, lay, m, **opts), jr.key(0))
    stacked = eqx.filter_eval_shape(
        lambda keys: eqx.filter_vmap(lambda key: est.build(family, key, lay, m, **opts))(keys),
        jr.split(jr.key(0), k),
    )
    params, static = eqx.partition(stacked, lambda a: isinstance(a, jax.ShapeDtypeStruct))

    def loss(prm, y, c):
        def one(mdl, yy, cc):
            value = jnp.mean((jax.vmap(mdl)(yy) - cc) ** 2)
            if hasattr(mdl, "alignment"):
                value = value + jnp.mean(jax.vmap(mdl.alignment)(yy))
            return value

        return jnp.sum(eqx.filter_vmap(one)(eqx.combine(prm, static), y, c))

    y = jax.ShapeDtypeStruct((k, cfg.batch_size, p), jnp.float32)
    c = jax.ShapeDtypeStruct((k, cfg.batch_size, m), jnp.float32)
    step_flops, _ = sizing.jaxpr_flops(jax.make_jaxpr(jax.grad(loss))(params, y, c))
    count = parameter_count(member)
    records = cfg.num_train + cfg.num_calibration + 2 * cfg.num_test  # ID and OOD test splits
    steps_per_epoch = max(1, cfg.num_train // cfg.batch_size)
    return {
        "configuration": label,
        "family": family,
        "observations": p,
        "coefficients": m,
        "members": k,
        "parameters": count,
        "data_mib": 4 * records * (p + m) / 2**20,
        "state_mib": k * 3 * 4 * count / 2**20,
        "step_flops": step_flops,
        "flops_per_epoch": step_flops * steps_per_epoch,
        "total_flops": step_flops * cfg.num_steps,
    }


def table(config, rates=None) -> str:
    """The Markdown table of every (configuration, family) block of `config.learned`, with
    device-hours for each device kind of `rates` (default `sizing.throughputs()`)."""
    rates = sizing.throughputs() if rates is None else rates
    devices = sorted(rates)
    cfg = config.learned
    lines = [
        "| configuration | family | p / m | members | parameters | data, MiB "
        "| members x (params + Adam), MiB | GFLOP / epoch | GFLOP in all | "
        + " | ".join(f"hours, {d}" for d in devices)
        + " |",
        "|" + "---|" * (9 + len(devices)),
    ]
    total = 0.0
    for entry in cfg.configurations:
        for family in cfg.estimators:
            b = block_costs(config, entry, family)
            total += b["total_flops"]
            hours = sizing.hours(b["total_flops"], rates)
            lines.append(
                f"| {b['configuration']} | {family} | {b['observations']} / {b['coefficients']} "
                f"| {b['members']} | {b['parameters']:,} | {b['data_mib']:.2f} | {b['state_mib']:.2f} "
                f"| {b['flops_per_epoch'] / 1e9:.2f} | {b['total_flops'] / 1e9:.1f} | "
                + " | ".join(f"{hours[d]:.3g}" for d in devices)
                + " |"
            )
    hours = sizing.hours(total, rates)
    lines += [
        "",
        f"{cfg.num_steps} steps of batch {cfg.batch_size}, "
        f"{cfg.num_train}/{cfg.num_calibration}/{cfg.num_test} records at {config.resolution}². "
        f"All blocks: {total / 1e12:.2f} TFLOP, "
        + ", ".join(f"{hours[d]:.3g} h on {d}" for d in devices)
        + " at the matmul roofline (a lower bound; the data simulation is not counted).",
    ]
    return "\n".join(lines)
