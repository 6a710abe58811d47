"""Training loop: bit-identical resume, checkpoint checks and fallbacks, config errors, surrogate accuracy."""

import dataclasses
import json
import os
import signal
import warnings
from pathlib import Path

import equinox as eqx
import jax
import numpy as np
import pytest

from configs.train import network
from posteriorjax import diffusion, nn, random_fields, samplers, tasks, training
from posteriorjax.training.checkpoints import Checkpoints, fingerprint, init_state
from posteriorjax.training.data import TaskSource
from posteriorjax.training.losses import surrogate_loss
from posteriorjax.training.run import NOISE_OPTIONS, build
from posteriorjax.training.settings import train_config


@pytest.fixture(scope="module")
def setup():
    task = tasks.get("poisson_fixed", resolution=16)
    x_norm = nn.field_normalizer(task)
    u_norm = nn.state_statistics(task, num_draws=16, seed=0)
    source = TaskSource(task, x_norm, u_norm, "surrogate", 4)
    return task, x_norm, u_norm, source


def _model(setup, width=8):
    task, x_norm, u_norm, _ = setup
    net = nn.FNO(1, 1, modes=4, width=width, layers=2, projection=8, key=jax.random.key(0))
    return nn.Surrogate(net, x_norm, u_norm)


CFG = training.TrainConfig(
    num_steps=6, batch_size=4, warmup_steps=2, log_every=1, eval_every=100, checkpoint_every=3, progress=False
)


def _equal(a, b):
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    return len(la) == len(lb) and all(np.array_equal(x, y) for x, y in zip(la, lb, strict=True))


def test_resume_after_interruption_is_bit_identical(setup, tmp_path, console_log):
    model, source = _model(setup), setup[3]
    shown_cfg = dataclasses.replace(CFG, progress=True)  # the console under CI: a line per stage
    loss = surrogate_loss
    full, full_ema, full_state = training.fit(model, loss, source, shown_cfg, tmp_path / "a")
    text = console_log.stream.getvalue()
    lines = [(line.split(" ", 1)[0], line.split("] ", 1)[1]) for line in text.splitlines()]  # level, message
    assert any("/orbax/" in path for path in console_log.dropped)  # orbax's checkpoint INFO, not shown
    shown = [message for _, message in lines if message.startswith("train ")]
    assert shown[0] == "train a: 6 of 6 steps to do" and shown[1].startswith("train a: 6 steps in ")
    assert len(shown) == 2
    # a third party's warning may show (orbax's "waiting for previous save" on a slow disk), its INFO never
    assert all(level != "INFO" for level, message in lines if not message.startswith("train "))
    training.fit(model, loss, source, CFG, tmp_path / "b", stop_after=4)  # killed after step 4
    lines = (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 2, 3, 4]
    resumed, resumed_ema, resumed_state = training.fit(model, loss, source, CFG, tmp_path / "b")
    assert int(resumed_state.step) == 6
    assert _equal(eqx.filter(full, eqx.is_array), eqx.filter(resumed, eqx.is_array))
    assert _equal(full_ema, resumed_ema)
    assert _equal(full_state.opt_state, resumed_state.opt_state)
    steps = [json.loads(line)["step"] for line in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4, 5, 6]  # the logged step 4 past checkpoint 3 is not duplicated
    assert not _equal(eqx.filter(model, eqx.is_array), eqx.filter(full, eqx.is_array))

    # a directory holding another model is refused
    with pytest.raises(ValueError, match="holds another model"):
        training.fit(_model(setup, width=12), surrogate_loss, source, CFG, tmp_path / "b")

    # a corrupt latest checkpoint falls back to the previous one with a warning
    for f in (tmp_path / "a" / "checkpoints" / "6" / "state").rglob("*"):
        if f.is_file():
            f.write_bytes(b"garbage")
    template = init_state(model, training.make_optimizer(CFG), CFG.seed)
    ckpt = Checkpoints(tmp_path / "a" / "checkpoints", fingerprint(model, {}))
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
    config = training.config("poisson_fixed", "surrogate", "tiny")
    config.model.name = "transformer"
    with pytest.raises(ValueError, match="unknown network"):
        build(config)
    config = training.config("poisson_fixed", "prior", "tiny")
    config.task = "heat"
    with pytest.raises(ValueError, match="unknown task"):
        build(config)
    config = training.config("poisson_fixed", "prior", "tiny")
    config.kind = "gan"
    with pytest.raises(ValueError, match="config.kind"):
        build(config)
    config = training.config("poisson_fixed", "prior", "tiny")
    config.model.options.modes = 12  # more modes than a 16 x 16 grid resolves
    setup = build(config)
    with pytest.raises(ValueError, match="resolves fewer Fourier modes"):
        setup.model(jax.numpy.zeros((1, 16, 16)), 1.0)
    with pytest.raises(ValueError, match="config.train: unknown key"):
        train_config({"num_steps": 3, "epochs": 2})
    with pytest.raises(ValueError, match="batch_size"):
        training.TrainConfig(batch_size=0)
    with pytest.raises(ValueError, match="scale: expected one of"):
        training.config("darcy", "prior", "huge")


# kinds whose full run (`run`, one step, checkpoint) is in the slow tier (the contract test below covers
# every kind; the surrogate runs in the resume and fine-tuning tests)
SLOW_RUNS = {"flow_fno", "flow", "prior", "joint", "surrogate", "fundiff_fae_target", "fundiff_dit"}


def _step_config(kind):
    config = training.config("darcy", kind, "tiny")
    config.normalization.num_draws = 8
    config.eval.num_examples = 4
    config.train.update(batch_size=2, num_steps=1, progress=False)
    config.scores.update(num_draws=4, num_cases=1, num_samples=2, num_steps=min(config.scores.num_steps, 2))
    return config


@pytest.mark.parametrize(
    "kind", [pytest.param(k, marks=pytest.mark.slow) if k in SLOW_RUNS else k for k in training.kinds.names()]
)
def test_every_kind_builds_and_takes_a_step(kind, tmp_path):
    config = _step_config(kind)
    for role, input_kind in training.kinds.get(kind).inputs.items():  # trained inputs, from their workdirs
        training.run(_step_config(input_kind), tmp_path / role)
        config.inputs[role] = str(tmp_path / role)
    tmp_path = tmp_path / "run"
    model, ema, setup = training.run(config, tmp_path)
    assert (tmp_path / "config.json").exists() and (tmp_path / "provenance.json").exists()
    record = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])
    assert np.isfinite(record["loss"]) and any(k.startswith("eval_") for k in record)
    stored = training.scores.read(tmp_path)  # the finished network's own scores (but the autoencoders')
    assert (stored is None) == kind.startswith("fundiff_fae")
    if stored is not None:
        assert stored["scores"] and all(np.isfinite(v) for v in stored["scores"].values())
        assert {f"score_{k}" for k in stored["scores"]} <= set(record)


def test_surrogate_reaches_documented_error(tmp_path):
    """The Poisson surrogate at 16 x 16 after 150 steps of batch 8 has held-out relative L2 error < 0.5.

    (The full tiny config, 300 steps of batch 16, reaches about 0.13: `test_tiny_surrogate_error`.)
    """
    config = training.config("poisson_fixed", "surrogate", "tiny")
    config.train.num_steps = 150
    config.train.batch_size = 8
    config.train.eval_every = 150
    config.train.progress = False
    config.normalization.num_draws = 64
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        training.run(config, tmp_path, stop_after=100)
        training.run(config, tmp_path)  # resumes from step 100
    records = [json.loads(line) for line in Path(tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["step"] == 150
    assert records[-1]["eval_relative_l2"] < 0.5


@pytest.mark.slow
def test_tiny_surrogate_error(tmp_path):
    """`network.py:task=poisson_fixed,kind=surrogate,tiny` reaches held-out relative L2 error < 0.2."""
    config = training.config("poisson_fixed", "surrogate", "tiny")
    config.train.progress = False
    training.run(config, tmp_path)
    record = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])
    assert record["eval_relative_l2"] < 0.2


def test_fine_tuning_starts_from_the_given_parameters(tmp_path):
    """`run(init=...)`: a network trained at 16 x 16 continues at 24 x 24 from its parameters."""

    def config(resolution):
        c = training.config("poisson_fixed", "surrogate", "tiny")
        c.task_options.resolution = resolution
        c.normalization.num_draws = 8
        c.eval.num_examples = 4
        c.train.update(batch_size=2, num_steps=2, warmup_steps=1, progress=False)
        return c

    _, coarse, _ = training.run(config(16), tmp_path / "coarse")
    fine = config(24)
    start, _, setup = training.run(fine, tmp_path / "fine", init=coarse, stop_after=0)
    assert _equal(eqx.filter(start, eqx.is_inexact_array), eqx.filter(coarse, eqx.is_inexact_array))
    assert start.u_norm == setup.model.u_norm != coarse.u_norm  # normalization of the 24 x 24 task
    tuned, _, _ = training.run(fine, tmp_path / "fine", init=coarse)
    assert not _equal(eqx.filter(tuned, eqx.is_inexact_array), eqx.filter(coarse, eqx.is_inexact_array))
    fields = random_fields.sample_batch(setup.task.prior, jax.random.key(0), 2)
    assert np.isfinite(jax.vmap(tuned)(fields)).all()
    with pytest.raises(ValueError, match="holds another model"):  # trained from other parameters
        training.run(fine, tmp_path / "fine")
    wider = config(16)
    wider.model.options.width = 12
    with pytest.raises(ValueError, match="init: expected a model with the parameter paths"):
        training.run(wider, tmp_path / "wider", init=coarse)


# -- the registry of network kinds: every registered kind must pass this contract ---------------


@pytest.fixture(scope="module")
def darcy8():
    """A 8 x 8 Darcy task and cheap normalizers (the state one fixed, not estimated)."""
    task = tasks.get("darcy", resolution=8, num_sensors=6)
    c_u = task.state_shape[0]
    return task, nn.field_normalizer(task), nn.Normalizer((0.0,) * c_u, (1.0,) * c_u)


def _untrained_inputs(entry, task, x_norm, u_norm) -> dict:
    """The trained networks a kind's examples need (the FunDiff DiT's encoders), untrained here."""
    return {
        role: training.build_model(
            k,
            *training.kinds.get(k).models["tiny"],
            task,
            x_norm=x_norm,
            u_norm=u_norm,
            key=jax.random.key(2),
        )
        for role, k in entry.inputs.items()
    }


@pytest.mark.parametrize("kind", training.kinds.names())
def test_a_kind_declares_whether_its_examples_carry_the_observation_noise(kind, darcy8):
    """`Kind.observation_noise` is what the kind's examples do: one key gives the same example on
    two tasks differing only in `noise_std` exactly when the kind declares them noise-free (so its
    network directory, which then leaves the noise out, is shared across noise levels)."""
    task, x_norm, u_norm = darcy8
    entry = training.kinds.get(kind)
    u_norm = u_norm if entry.uses_state else None
    loud = tasks.get("darcy", resolution=8, num_sensors=6, noise_std=0.3)
    inputs = _untrained_inputs(entry, task, x_norm, u_norm)
    a, b = (entry.example(t, x_norm, u_norm, jax.random.key(3), **inputs) for t in (task, loud))
    same = all(np.array_equal(p, q) for p, q in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True))
    assert same == (not entry.observation_noise)


@pytest.mark.parametrize("kind", training.kinds.names())
def test_every_registered_kind_meets_the_contract(kind, darcy8):
    """Tiny model of each kind in one compiled program: example shapes, finite loss, gradient, evaluation."""
    task, x_norm, u_norm = darcy8
    entry = training.kinds.get(kind)
    u_norm = u_norm if entry.uses_state else None
    config = training.config("darcy", kind, "tiny")
    name, options = entry.models["tiny"]
    small = {"modes": 3, "width": 4, "layers": 1, "projection": 4, "depth": 1, "dec_depth": 1}
    options = {**options, **{k: v for k, v in small.items() if k in options}}
    inputs = _untrained_inputs(entry, task, x_norm, u_norm)
    model = training.build_model(
        kind, name, options, task, x_norm=x_norm, u_norm=u_norm, key=jax.random.key(0), inputs=inputs
    )
    d = config.diffusion
    loss_fn = entry.loss(task, diffusion.noise.get(d.noise, **NOISE_OPTIONS[d.noise](d)), d)

    @eqx.filter_jit
    def check(model, source, key):
        batch = source(key)
        loss, grads = eqx.filter_value_and_grad(loss_fn)(model, key, batch)
        return (
            batch,
            loss,
            grads,
            entry.evaluate(loss_fn, batch, x_norm=x_norm, u_norm=u_norm, task=task, key=key)(model),
        )

    batch, loss, grads, metrics = check(
        model, TaskSource(task, x_norm, u_norm, kind, 2, inputs), jax.random.key(1)
    )
    for leaf in jax.tree.leaves(batch):  # (batch, channels, H, W), or latent tokens (batch, L, D); finite
        shape = inputs["target"].net.latent_shape if inputs else task.unknown_shape[1:]
        assert leaf.shape[0] == 2 and leaf.shape[-len(shape) :] == shape and np.isfinite(leaf).all()
    assert np.isfinite(float(loss))
    assert all(np.isfinite(g).all() for g in jax.tree.leaves(eqx.filter(grads, eqx.is_array)))
    assert metrics and all(k.startswith("eval_") and np.isfinite(float(v)) for k, v in metrics.items())
    assert min(entry.channels(task, **inputs)) >= 1 and set(entry.models) == set(entry.steps) == set(
        training.kinds.SCALES
    )
    assert config.train.num_steps == entry.steps["tiny"]
    assert training.config("darcy", kind).train.num_steps == entry.steps["full"]


def test_every_sampler_network_is_a_registered_kind():
    """Each sampler names the kind of every network option it takes (`samplers.register(networks=)`)."""
    taken = {kind for name in samplers.names() for kind in samplers.networks(name).values()}
    assert taken and taken <= set(training.kinds.names())
    assert samplers.networks("funddps") == {"model": "prior", "surrogate": "surrogate"}
    assert samplers.networks("pcn") == {}


def test_network_config_argument():
    """`configs/train/network.py:task=...,kind=...,tiny`: the library's config; errors name the key."""
    config = network.get_config("task=poisson_fixed,kind=joint,tiny")
    assert config == training.config("poisson_fixed", "joint", "tiny")
    assert network.get_config("kind=inverse") == training.config("darcy", "inverse", "full")
    assert network.get_config("tiny=false,task=poisson") == training.config("poisson", "joint", "full")
    assert network.get_config("medium,kind=prior") == training.config("darcy", "prior", "medium")
    allowed = r"allowed keys: \['kind', 'medium', 'task', 'tiny'\]"
    with pytest.raises(ValueError, match=r"unknown key 'size'.*" + allowed):
        network.get_config("task=darcy,size=3")
    with pytest.raises(ValueError, match="at most one of tiny and medium"):
        network.get_config("tiny,medium")
    with pytest.raises(ValueError, match=r"kind='gan' is not a network kind; allowed: \['flow', 'flow_fno'"):
        network.get_config("kind=gan")
    with pytest.raises(ValueError, match=r"task='heat' is not a registered task; allowed: \["):
        network.get_config("task=heat,tiny")
    with pytest.raises(ValueError, match="tiny is a flag"):
        network.get_config("tiny=3")
    with pytest.raises(ValueError, match=r"task expects a value \(task=...\)"):
        network.get_config("task")


def test_scan_and_scan_ensemble_follow_gradient_descent():
    """SGD (rate r) on 0.5 ||w - t||^2: w_k = t + (1 - r)^k (w_0 - t); the ensemble equals its members."""
    import optax

    rate, steps = 0.1, 7
    targets = jax.numpy.array([[1.0, -2.0], [0.5, 3.0], [-1.0, 0.0]])  # one per member
    w0 = jax.numpy.array([[0.0, 0.0], [2.0, 1.0], [1.0, 1.0]])

    def loss(w, step, target):
        return 0.5 * jax.numpy.sum((w - target) ** 2) + 0.0 * step

    xs = jax.numpy.arange(steps)
    sgd = optax.sgd(rate)
    stacked, _, losses = training.scan_ensemble(w0, loss, sgd, xs, targets, shared=True)
    expected = targets + (1 - rate) ** steps * (w0 - targets)
    np.testing.assert_allclose(stacked, expected, rtol=1e-5)
    for k in range(3):
        alone, _, member_losses = training.scan(w0[k], loss, sgd, xs, targets[k])
        np.testing.assert_allclose(alone, stacked[k], rtol=1e-6)
        np.testing.assert_allclose(member_losses, losses[k], rtol=1e-6)
    first = 0.5 * np.sum((np.asarray(w0) - np.asarray(targets)) ** 2, axis=1)
    np.testing.assert_allclose(losses[:, 0], first, rtol=1e-6)


@pytest.mark.parametrize("how", ["SIGINT", "SIGTERM"])
def test_an_interrupt_keeps_the_steps_done_and_resumes_bit_identically(setup, tmp_path, how):
    """Ctrl-C (or `timeout -s INT`), or SIGTERM (`kill`, a scheduler's time limit), between
    checkpoints saves the state of the last finished step, so a resumed run loses nothing and
    ends where an uninterrupted one ends; the SIGTERM handler is the caller's again after."""
    model, source = _model(setup), setup[3]
    cfg = dataclasses.replace(CFG, checkpoint_every=100)  # no checkpoint before the end
    full, full_ema, _ = training.fit(model, surrogate_loss, source, cfg, tmp_path / "a")
    step_fn = training.loop.make_step
    handler = signal.getsignal(signal.SIGTERM)

    def interrupted_after(n):
        def make_step(*args, **kwargs):
            step, calls = step_fn(*args, **kwargs), [0]

            def interrupted(state, src):
                calls[0] += 1
                if calls[0] > n:
                    if how == "SIGTERM":
                        os.kill(os.getpid(), signal.SIGTERM)  # the handler raises here
                    raise KeyboardInterrupt
                return step(state, src)

            return interrupted

        return make_step

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(training.loop, "make_step", interrupted_after(4))
        with pytest.raises(KeyboardInterrupt):
            training.fit(model, surrogate_loss, source, cfg, tmp_path / "b")
    saved = sorted(int(p.name) for p in (tmp_path / "b" / "checkpoints").iterdir() if p.name.isdigit())
    assert saved == [4]
    assert signal.getsignal(signal.SIGTERM) is handler
    resumed, resumed_ema, state = training.fit(model, surrogate_loss, source, cfg, tmp_path / "b")
    assert int(state.step) == 6 and _equal(full_ema, resumed_ema)
    assert _equal(eqx.filter(full, eqx.is_array), eqx.filter(resumed, eqx.is_array))


def test_the_last_checkpoint_is_written_before_the_final_scores(setup, tmp_path):
    """A process killed while scoring the finished network (minutes for a diffusion prior) keeps
    its training: the checkpoint of the last step is on disk before the scores start."""
    model, source = _model(setup), setup[3]
    cfg = dataclasses.replace(CFG, checkpoint_every=100)  # the last step's checkpoint only

    def killed_while_scoring(_):
        assert (tmp_path / "checkpoints" / "6").is_dir()
        raise SystemExit("killed")

    with pytest.raises(SystemExit):
        training.fit(
            model, surrogate_loss, source, cfg, tmp_path, score_fn=killed_while_scoring, score_every=100
        )
    _, _, state = training.fit(model, surrogate_loss, source, cfg, tmp_path)  # nothing left to train
    assert int(state.step) == 6


class _Weight(eqx.Module):
    w: jax.Array


class _Zeros(eqx.Module):
    def __call__(self, key):
        return jax.numpy.zeros(())


def test_the_ema_of_a_run_keeps_none_of_the_initial_parameters():
    """After 1,500 steps at decay 0.999 a plain EMA still holds 0.999^1500 = 22 % of the initial
    parameters; with EDM's rampup (half-life at most 5 % of the steps taken) none is left. SGD at
    rate 1 on 0.5 (w - 3)^2 puts the parameters at 3 after the first step."""
    import optax

    from posteriorjax.training.loop import ema_decay_at, make_step

    model = _Weight(jax.numpy.zeros(()))
    params, static = eqx.partition(model, eqx.is_inexact_array)
    optimizer = optax.sgd(1.0)
    loss = lambda m, key, batch: 0.5 * (m.w - 3.0) ** 2 + batch  # noqa: E731

    def ema_after(steps, rampup):
        step = make_step(static, loss, optimizer, 0.999, ema_rampup=rampup)
        state = init_state(model, optimizer, 0)
        for _ in range(steps):
            state, _ = step(state, _Zeros())
        return float(state.ema.w)

    np.testing.assert_allclose(ema_after(1500, 0.0), 3.0 * (1 - 0.999**1500), rtol=1e-3)  # 2.33
    np.testing.assert_allclose(ema_after(1500, 0.05), 3.0, rtol=1e-5)
    assert float(ema_decay_at(10**6, 0.999, 0.05)) == pytest.approx(0.999)
    assert float(ema_decay_at(99, 0.999, 0.05)) == pytest.approx(0.5 ** (1 / 5))  # half-life 5 steps
    assert ema_decay_at(0, 0.999, 0.0) == 0.999
