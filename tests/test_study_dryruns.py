"""Dry runs of the geometry and pattern-transfer studies: sizes and FLOPs on abstract inputs."""

import equinox as eqx
import jax.random as jr
import pytest

from configs import geometry as geometry_config
from posteriorjax import nn
from posteriorjax.nn.pdeobs import parameter_count
from posteriorjax.studies import estimators as est
from posteriorjax.studies.geometry import dryrun as geometry_dryrun
from posteriorjax.studies.geometry import study
from posteriorjax.studies.transfer import dryrun as transfer_dryrun
from posteriorjax.studies.transfer import models

TINY_FNO = {"scale": "tiny", "model": {"width": 4, "modes": 3, "layers": 1}}


def test_transfer_block_costs_count_the_rollout_and_the_epoch():
    kw = dict(resolution=16, num_train=40, epochs=3, config=TINY_FNO)
    rec = transfer_dryrun.block_costs("fno", "recovery", **kw)
    fc = transfer_dryrun.block_costs("fno", "forecasting", **kw)
    joint = transfer_dryrun.block_costs(
        "fno", "forecasting", **kw | {"config": TINY_FNO | {"forecast_mode": "joint_variant"}}
    )
    cfg = models.fit_config("fno", TINY_FNO)
    net = nn.get("pdeobs_fno", jr.key(0), in_channels=2, out_channels=1, **dict(cfg.model))
    assert rec["parameters"] == fc["parameters"] == parameter_count(net)
    assert (rec["rollout"], fc["rollout"], joint["rollout"]) == (0, 3, 0)
    assert rec["flops_per_epoch"] == rec["step_flops"] * (40 // cfg.batch_size)
    assert (
        fc["total_flops"] == fc["flops_per_epoch"] * 3 * 4
        and rec["total_flops"] == rec["flops_per_epoch"] * 3 * 3
    )
    # three network calls per record against one (the joint variant: one call, three output channels)
    assert 2.7 < fc["step_flops"] / rec["step_flops"] < 3.3
    assert 0.9 < joint["step_flops"] / rec["step_flops"] < 1.5
    assert rec["data_gib"] == pytest.approx(4 * (10 * 40 * 2 + 40) * 256 / 2**30)
    assert rec["state_gib"] == pytest.approx(10 * 3 * 4 * rec["parameters"] / 2**30)
    with pytest.raises(ValueError, match="task: expected one of"):
        transfer_dryrun.block_costs("fno", "inverse", **kw)


def test_geometry_block_costs_and_table():
    config = geometry_config.get_config("tiny")
    lc = config.learned
    lc.configurations = (("Flooding M12", "interface_transport", 12),)
    lc.estimators = ("mlp", "gru")
    b = geometry_dryrun.block_costs(config, lc.configurations[0], "mlp")
    task = study.build_task("interface_transport", 12, config.resolution)
    member = eqx.filter_eval_shape(
        lambda k: est.build("mlp", k, est.layout(task), 17, **dict(lc.options.mlp)), jr.key(0)
    )
    assert b["parameters"] == parameter_count(member) and b["observations"] == task.num_observations
    k = lc.num_seeds * lc.num_members
    assert b["members"] == k
    # an MLP step: forward 2 x parameters per example, the gradient about twice that again
    assert 0.8 < b["step_flops"] / (6 * b["parameters"] * lc.batch_size * k) < 1.3
    assert b["flops_per_epoch"] == b["step_flops"] * (lc.num_train // lc.batch_size)
    assert b["total_flops"] == b["step_flops"] * lc.num_steps
    text = geometry_dryrun.table(config, rates={"dev": {"flops_per_s": 1e9, "source": "test"}})
    assert text.count("| Flooding M12 |") == 2 and "hours, dev" in text
    hours = b["total_flops"] / 1e9 / 3600
    assert f"| {hours:.3g} |" in text.splitlines()[2]
