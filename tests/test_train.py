"""Training loop: bit-identical resume, checkpoint checks and fallbacks, config errors, surrogate accuracy."""

import dataclasses
import json
import warnings
from pathlib import Path

import equinox as eqx
import jax
import numpy as np
import pytest

from configs.train import common
from posteriorjax import nn, random_fields, tasks, train


@pytest.fixture(scope="module")
def setup():
    task = tasks.get("poisson_fixed", resolution=16)
    x_norm = nn.field_normalizer(task)
    u_norm = nn.state_statistics(task, num_draws=16, seed=0)
    source = train.TaskSource(task, x_norm, u_norm, "surrogate", 4)
    return task, x_norm, u_norm, source


def _model(setup, width=8):
    task, x_norm, u_norm, _ = setup
    net = nn.FNO(1, 1, modes=4, width=width, layers=2, projection=8, key=jax.random.key(0))
    return nn.Surrogate(net, x_norm, u_norm)


CFG = train.TrainConfig(
    num_steps=6, batch_size=4, warmup_steps=2, log_every=1, eval_every=100, checkpoint_every=3, progress=False
)


def _equal(a, b):
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    return len(la) == len(lb) and all(np.array_equal(x, y) for x, y in zip(la, lb, strict=True))


def test_resume_after_interruption_is_bit_identical(setup, tmp_path, console_log):
    model, source = _model(setup), setup[3]
    shown_cfg = dataclasses.replace(CFG, progress=True)  # the console under CI: a line per stage
    full, full_ema, full_state = train.fit(model, train.surrogate_loss, source, shown_cfg, tmp_path / "a")
    shown = [line.split("] ", 1)[1] for line in console_log.stream.getvalue().splitlines()]
    assert any("/orbax/" in path for path in console_log.dropped)  # orbax's checkpoint INFO, not shown
    assert shown[0] == "train a: 6 of 6 steps to do" and shown[1].startswith("train a: 6 steps in ")
    assert len(shown) == 2
    train.fit(model, train.surrogate_loss, source, CFG, tmp_path / "b", stop_after=4)  # killed after step 4
    lines = (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 2, 3, 4]
    resumed, resumed_ema, resumed_state = train.fit(model, train.surrogate_loss, source, CFG, tmp_path / "b")
    assert int(resumed_state.step) == 6
    assert _equal(eqx.filter(full, eqx.is_array), eqx.filter(resumed, eqx.is_array))
    assert _equal(full_ema, resumed_ema)
    assert _equal(full_state.opt_state, resumed_state.opt_state)
    steps = [json.loads(line)["step"] for line in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4, 5, 6]  # the logged step 4 past checkpoint 3 is not duplicated
    assert not _equal(eqx.filter(model, eqx.is_array), eqx.filter(full, eqx.is_array))

    # a directory holding another model is refused
    with pytest.raises(ValueError, match="holds another model"):
        train.fit(_model(setup, width=12), train.surrogate_loss, source, CFG, tmp_path / "b")

    # a corrupt latest checkpoint falls back to the previous one with a warning
    for f in (tmp_path / "a" / "checkpoints" / "6" / "state").rglob("*"):
        if f.is_file():
            f.write_bytes(b"garbage")
    template = train.init_state(model, train.make_optimizer(CFG), CFG.seed)
    ckpt = train.Checkpoints(tmp_path / "a" / "checkpoints", train.fingerprint(model, {}))
    with pytest.warns(UserWarning, match="checkpoint 6"):
        state = ckpt.restore_latest(template)
    ckpt.close()
    assert int(state.step) == 3


def test_console_filter_levels_and_ci(monkeypatch):
    import logging

    from absl import logging as absl_logging

    from posteriorjax import console

    def record(path, level=logging.INFO):
        return logging.LogRecord("absl", level, path, 1, "message", None, None)

    own = str(Path(console.__file__))
    orbax = "/site-packages/orbax/checkpoint/checkpoint_manager.py"
    assert console._FILTER.filter(record(own)) and not console._FILTER.filter(record(orbax))
    assert console._FILTER.filter(record(orbax, logging.WARNING))
    verbosity = absl_logging.get_verbosity()
    try:
        console.setup_logging(1)  # --verbosity=1: everything shown
        assert console._FILTER not in absl_logging.get_absl_logger().filters
        assert logging.getLogger("orbax").level == logging.NOTSET
        console.setup_logging(0)
        assert console._FILTER in absl_logging.get_absl_logger().filters
        assert logging.getLogger("jax").level == logging.WARNING
    finally:
        absl_logging.get_absl_logger().removeFilter(console._FILTER)
        console.setup_logging(verbosity)
        for name in console.THIRD_PARTY_LOGGERS:
            logging.getLogger(name).setLevel(logging.NOTSET)
    monkeypatch.setenv("CI", "true")
    assert not console.interactive()
    assert [console.duration(s) for s in (4.4, 125, 7260)] == ["4 s", "2 min 05 s", "2 h 01 min"]


def test_bad_configs(tmp_path):
    config = common.config("poisson_fixed", "surrogate", "tiny")
    config.model.name = "transformer"
    with pytest.raises(ValueError, match="unknown network"):
        train.build(config)
    config = common.config("poisson_fixed", "prior", "tiny")
    config.task = "heat"
    with pytest.raises(ValueError, match="unknown task"):
        train.build(config)
    config = common.config("poisson_fixed", "prior", "tiny")
    config.kind = "gan"
    with pytest.raises(ValueError, match="config.kind"):
        train.build(config)
    config = common.config("poisson_fixed", "prior", "tiny")
    config.model.options.modes = 12  # more modes than a 16 x 16 grid resolves
    setup = train.build(config)
    with pytest.raises(ValueError, match="resolves fewer Fourier modes"):
        setup.model(jax.numpy.zeros((1, 16, 16)), 1.0)
    with pytest.raises(ValueError, match="config.train: unknown key"):
        train.train_config({"num_steps": 3, "epochs": 2})
    with pytest.raises(ValueError, match="batch_size"):
        train.TrainConfig(batch_size=0)
    with pytest.raises(ValueError, match="config argument"):
        common.config("darcy", "prior", "huge")


@pytest.mark.parametrize(
    "kind",
    [
        "surrogate",
        "inverse",
        pytest.param("fundiff", marks=pytest.mark.slow),
        pytest.param("prior", marks=pytest.mark.slow),
        pytest.param("joint", marks=pytest.mark.slow),
    ],
)
def test_every_kind_builds_and_takes_a_step(kind, tmp_path):
    config = common.config("darcy", kind, "tiny")
    config.normalization.num_draws = 8
    config.eval.num_examples = 4
    config.train.batch_size = 2
    config.train.num_steps = 1
    config.train.progress = False
    model, ema, setup = train.run(config, tmp_path)
    assert (tmp_path / "config.json").exists() and (tmp_path / "provenance.json").exists()
    record = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])
    assert np.isfinite(record["loss"]) and any(k.startswith("eval_") for k in record)


def test_surrogate_reaches_documented_error(tmp_path):
    """The Poisson surrogate at 16 x 16 after 150 steps of batch 8 has held-out relative L2 error < 0.5.

    (The full tiny config, 300 steps of batch 16, reaches about 0.13: `test_tiny_surrogate_error`.)
    """
    config = common.config("poisson_fixed", "surrogate", "tiny")
    config.train.num_steps = 150
    config.train.batch_size = 8
    config.train.eval_every = 150
    config.train.progress = False
    config.normalization.num_draws = 64
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        train.run(config, tmp_path, stop_after=100)
        train.run(config, tmp_path)  # resumes from step 100
    records = [json.loads(line) for line in Path(tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["step"] == 150
    assert records[-1]["eval_relative_l2"] < 0.5


@pytest.mark.slow
def test_tiny_surrogate_error(tmp_path):
    """`configs/train/poisson_fixed_surrogate.py:tiny` reaches held-out relative L2 error < 0.2."""
    config = common.config("poisson_fixed", "surrogate", "tiny")
    config.train.progress = False
    train.run(config, tmp_path)
    record = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])
    assert record["eval_relative_l2"] < 0.2


def test_fine_tuning_starts_from_the_given_parameters(tmp_path):
    """`run(init=...)`: a network trained at 16 x 16 continues at 24 x 24 from its parameters."""

    def config(resolution):
        c = common.config("poisson_fixed", "surrogate", "tiny")
        c.task_options.resolution = resolution
        c.normalization.num_draws = 8
        c.eval.num_examples = 4
        c.train.update(batch_size=2, num_steps=2, warmup_steps=1, progress=False)
        return c

    _, coarse, _ = train.run(config(16), tmp_path / "coarse")
    fine = config(24)
    start, _, setup = train.run(fine, tmp_path / "fine", init=coarse, stop_after=0)
    assert _equal(eqx.filter(start, eqx.is_inexact_array), eqx.filter(coarse, eqx.is_inexact_array))
    assert start.u_norm == setup.model.u_norm != coarse.u_norm  # normalization of the 24 x 24 task
    tuned, _, _ = train.run(fine, tmp_path / "fine", init=coarse)
    assert not _equal(eqx.filter(tuned, eqx.is_inexact_array), eqx.filter(coarse, eqx.is_inexact_array))
    fields = random_fields.sample_batch(setup.task.prior, jax.random.key(0), 2)
    assert np.isfinite(jax.vmap(tuned)(fields)).all()
    with pytest.raises(ValueError, match="holds another model"):  # trained from other parameters
        train.run(fine, tmp_path / "fine")
    wider = config(16)
    wider.model.options.width = 12
    with pytest.raises(ValueError, match="init: expected a model with the parameter paths"):
        train.run(wider, tmp_path / "wider", init=coarse)
