"""A trained network's own scores (`training.scores`): the Monte Carlo floor, a wrong prior, the
surrogate's per-channel error, `scores.json` written once and found stale, sweep records."""

import json
import types

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from posteriorjax import diffusion, nn, random_fields, sweep, tasks, training
from posteriorjax.report import networks as network_report
from posteriorjax.samplers.denoisers import build_prior
from posteriorjax.sweep.networks import NetworkSpec, network_config
from posteriorjax.sweep.plan import Plan
from posteriorjax.sweep.settings import settings
from posteriorjax.sweep.store import Record
from posteriorjax.training import scores

N = 64  # draws per set: the floors below are those of this many draws
FLOOR_SEEDS = range(8)
RANKED = ("std_error", "mmd", "spectral_error")  # the metrics that see the prior's smoothness


@pytest.fixture(scope="module")
def poisson():
    return tasks.get("poisson_fixed", resolution=16, num_sensors=6)


def _exact(task, joint=False):
    """A stand-in network sampler drawing exact prior samples (stacked on their physics if `joint`)."""

    def draw(model, key):
        x = task.prior.sample(key)
        return jnp.concatenate([x, task.physics(x)]) if joint else x

    return draw


@pytest.fixture(scope="module")
def floors(poisson):
    """Each metric's floor over independent seeds: (mean, std) of the two-exact-set values at N draws."""
    values = [scores.unconditional(poisson, _exact(poisson), N, seed).floor() for seed in FLOOR_SEEDS]
    return {k: (np.mean([v[k] for v in values]), np.std([v[k] for v in values])) for k in values[0]}


def _within(value, floor, k=4.0):
    mean, std = floor
    return value <= mean + k * std


def test_exact_draws_score_within_the_monte_carlo_floor(poisson, floors):
    """A 'network' that draws exact prior samples scores as two exact sets do: within 4 std of the
    floor's spread over seeds at the same number of draws (the bound shrinks with N as the floor)."""
    got = scores.unconditional(poisson, _exact(poisson), N, 100)(None)
    assert set(got) == set(scores.DISTRIBUTION)
    for name, value in got.items():
        assert np.isfinite(value) and _within(value, floors[name]), (name, value, floors[name])


def test_a_wrong_prior_scores_clearly_worse_than_the_floor(poisson, floors):
    """A smoother GRF (alpha 3 instead of 2) is far outside the floor on every smoothness metric."""
    wrong = random_fields.GaussianRandomField(16, 3.0, poisson.prior.tau)
    got = scores.unconditional(poisson, lambda model, key: wrong.sample(key), N, 100)(None)
    for name in RANKED:
        assert not _within(got[name], floors[name], k=4.0), (name, got[name], floors[name])
        assert got[name] > 2 * floors[name][0], name


def test_joint_scores_the_state_and_the_residual_of_exact_pairs(poisson, floors):
    """Exact (x, physics(x)) pairs: state channel within its floor, PDE residual at the solver's;
    a state off by 10 % has a residual orders of magnitude larger."""
    scorer = scores.unconditional(poisson, _exact(poisson, joint=True), 32, 3, joint=True)
    got, floor = scorer(None), scorer.floor()
    assert set(got) == set(floor)
    assert got["residual_rms"] < 1e-4 and floor["residual_rms"] < 1e-4
    for name in ("state_mmd", "state_std_error"):
        assert got[name] < 2.5 * floor[name], name

    def off(model, key):
        x = poisson.prior.sample(key)
        return jnp.concatenate([x, 1.1 * poisson.physics(x)])

    assert (
        scores.unconditional(poisson, off, 32, 3, joint=True)(None)["residual_rms"]
        > 1e3 * floor["residual_rms"]
    )


class _OracleDenoiser(eqx.Module):
    """The exact GRF denoiser with the interface `scores.edm_draw` uses (an `EDMDenoiser`'s)."""

    prior: eqx.Module

    @property
    def channels(self):
        return self.prior.channels

    def __call__(self, x, sigma):
        return self.prior.denoise(x, sigma)

    def denormalize(self, x):
        return self.prior.normalizer.denormalize(x)


def test_edm_sampler_with_the_exact_denoiser_scores_at_the_floor(poisson, floors):
    """The unconditional Heun sampler (16 steps, the tiny sweep's) driven by the exact denoiser of the
    GRF prior: a perfect prior network scores within the Monte Carlo floor."""
    prior = build_prior(poisson, "oracle", None, joint=False, noise="grf")
    draw = scores.edm_draw((16, 16), prior.noise, 16)
    got = scores.unconditional(poisson, draw, N, 100)(_OracleDenoiser(prior))
    for name in RANKED:
        assert _within(got[name], floors[name]), (name, got[name], floors[name])


class _ExactVelocity(eqx.Module):
    """The exact flow-matching velocity of the GRF prior in normalized units under white base noise
    (a `FlowVelocity`'s interface): per mode of variance s^2, x_t = t x_1 + (1 - t) eps gives
    v(x_t, t) = E[x_1 - eps | x_t] = (t s^2 - (1 - t)) / (t^2 s^2 + (1 - t)^2) x_t."""

    normalizer: nn.Normalizer
    noise: eqx.Module
    variance: jax.Array  # s^2 per mode, (n, n) in the prior's basis
    basis: str = eqx.field(static=True)
    channels: int = eqx.field(static=True, default=1)

    def __call__(self, x, t):
        c = random_fields.forward_transform(x, self.basis)
        s2 = self.variance.astype(x.dtype)
        gain = (t * s2 - (1 - t)) / (t**2 * s2 + (1 - t) ** 2)
        return random_fields.inverse_transform(gain * c, self.basis).astype(x.dtype)


def test_flow_sampler_with_the_exact_velocity_scores_at_the_floor(poisson, floors):
    """Euler steps of the exact velocity, at the tiny config's step count: within the floor; at the
    tiny ECI's 8 steps the discretization alone is far outside it (why the scores take more)."""
    norm = nn.field_normalizer(poisson)
    variance = (poisson.prior.mode_std() / float(norm.std[0])) ** 2
    velocity = _ExactVelocity(norm, diffusion.WhiteNoise(), variance, poisson.prior.basis)
    steps = training.config("poisson_fixed", "flow", "tiny").scores.num_steps
    got = scores.unconditional(poisson, scores.flow_draw((16, 16), steps), N, 100)(velocity)
    for name in RANKED:
        assert _within(got[name], floors[name]), (name, got[name], floors[name])
    coarse = scores.unconditional(poisson, scores.flow_draw((16, 16), 8), N, 100)(velocity)
    assert not _within(coarse["std_error"], floors["std_error"])


def _fake_task(std):
    """A task-like stand-in: observes cells (0, 1) and (2, 3) of every state channel, noise std `std`."""
    observe = lambda u: u[:, [0, 2], [1, 3]].reshape(-1)  # noqa: E731
    return types.SimpleNamespace(observation=observe, noise=types.SimpleNamespace(whiten=lambda r: r / std))


def test_surrogate_scores_against_hand_computed_values():
    """Per-channel relative L2 (mean over examples of ||p - u|| / ||u||) and the RMSE of the observed
    residual in noise stds, from arrays whose values are known."""
    rng = np.random.default_rng(0)
    truth = rng.normal(size=(3, 2, 4, 4)).astype(np.float32)
    predicted = truth.copy()
    predicted[:, 0] *= 1.1  # channel 0 off by 10 % everywhere: relative L2 exactly 0.1
    predicted[:, 1] += 0.5  # channel 1 shifted by 0.5 everywhere: 0.5 * 4 / ||u_i1||
    got = scores.surrogate_scores(predicted, truth, _fake_task(0.25))
    expected_1 = np.mean([0.5 * 4 / np.linalg.norm(truth[i, 1]) for i in range(3)])
    observed = truth[:, :, [0, 2], [1, 3]]  # (3, 2 channels, 2 cells)
    residual = np.stack([0.1 * observed[:, 0], np.full_like(observed[:, 1], 0.5)], axis=1) / 0.25
    assert got["relative_l2_u0"] == pytest.approx(0.1, rel=1e-5)
    assert got["relative_l2_u1"] == pytest.approx(expected_1, rel=1e-5)
    assert got["observation_rmse"] == pytest.approx(np.sqrt(np.mean(residual**2)), rel=1e-5)


def test_surrogate_scorer_on_the_task(poisson):
    """Through the task: the exact physics scores 0, the physics scaled by 1.1 scores 0.1 and an RMSE
    of 0.1 |y| / noise std."""
    exact = scores.surrogate(poisson, 8, 0)
    assert exact(poisson.physics) == pytest.approx({"relative_l2_u0": 0.0, "observation_rmse": 0.0}, abs=1e-6)
    got = scores.surrogate(poisson, 8, 0)(lambda x: 1.1 * poisson.physics(x))
    x = random_fields.sample_batch(poisson.prior, jax.random.key(0), 8)
    y = np.asarray(jax.vmap(poisson.forward)(x))
    assert got["relative_l2_u0"] == pytest.approx(0.1, rel=1e-4)
    expected = np.sqrt(np.mean((0.1 * y / float(poisson.noise_std)) ** 2))
    assert got["observation_rmse"] == pytest.approx(expected, rel=1e-4)


def _surrogate_config():
    c = training.config("poisson_fixed", "surrogate", "tiny")
    c.task_options.num_sensors = 6
    c.normalization.num_draws = 8
    c.eval.num_examples = 4
    c.train.update(batch_size=2, num_steps=4, warmup_steps=1, eval_every=4, progress=False)
    c.scores.update(num_draws=4, every=2)
    return c


def test_finished_run_stores_its_scores_once(tmp_path, monkeypatch):
    """Scores logged every `every` steps and stored at the end; a resumed finished run neither trains
    nor rescores; other score settings rescore without retraining; no section (old runs): none."""
    config = _surrogate_config()
    training.run(config, tmp_path)
    log = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log if "score_relative_l2_u0" in r] == [2, 4]
    stored = scores.read(tmp_path)
    assert stored["kind"] == "surrogate" and stored["training_steps"] == 4 and stored["floor"] == {}
    assert stored["scores"] == {k[len("score_") :]: v for k, v in log[-1].items() if k.startswith("score_")}
    assert stored["settings"]["num_draws"] == 4 and stored["num_parameters"] > 0
    text = (tmp_path / "metrics.jsonl").read_text()

    def refuse(*args):
        raise AssertionError("rescored")

    with monkeypatch.context() as m:
        m.setattr(scores.Scorer, "__call__", refuse)
        training.run(config, tmp_path)  # finished and scored: nothing to do
    assert scores.read(tmp_path) == stored
    config.scores.num_draws = 6
    training.run(config, tmp_path)
    assert (tmp_path / "metrics.jsonl").read_text() == text  # not trained again
    rescored = scores.read(tmp_path)
    assert rescored["digest"] != stored["digest"] and rescored["settings"]["num_draws"] == 6
    del config["scores"]
    assert scores.scorer(config, None) is None


def test_the_sweep_hash_leaves_the_score_settings_out():
    """How a network is scored is not what it is: the sweep finds the same network directory."""
    spec = NetworkSpec("prior", {})
    cfg, digest = network_config("poisson_fixed", {"resolution": 16}, spec, "tiny")
    assert cfg.scores.num_steps == 16 and cfg.scores.num_draws == 32
    other = NetworkSpec("prior", {}, training={"scores.num_draws": 8})
    assert network_config("poisson_fixed", {"resolution": 16}, other, "tiny")[1] == digest


def test_records_and_summary_carry_the_network_scores(tmp_path):
    """`Plan.network_records` reads each network's `scores.json`; the summary lists it per task."""
    config = _mcd_config()
    s = settings(config)
    plan = Plan.build(s)
    (entry,) = s.samplers
    options = {**s.tasks["poisson_fixed"], **entry.task_options}
    spec = entry.networks["model"]
    digest = network_config("poisson_fixed", options, spec, "tiny", s.training_steps)[1]
    directory = tmp_path / "networks" / "poisson_fixed" / f"inverse-{digest}"
    report = {"parameters": "abc", "num_parameters": 1234, "training_steps": 20,
              "scores": {"mean_relative_l2": 0.25}, "floor": {}}  # fmt: skip
    directory.mkdir(parents=True)
    (directory / scores.FILE).write_text(json.dumps(report))
    got = plan.network_records("poisson_fixed", entry, tmp_path)
    assert got == {"model": {"kind": "inverse", "network": directory.name, **report}}
    record = Record(
        task="poisson_fixed", sampler="mcd", config_id="case=0;seed=0", index=0, case=0, seed=0, hparams={},
        num_samples=4, metrics={"mmd": 0.5}, wall_time_s=1.0, compile_time_s=1.0, networks=got,
    )  # fmt: skip
    assert Record.from_json(record.to_json()) == record
    plain = {k: v for k, v in record.to_dict().items() if k != "networks"}  # a line before networks
    assert "networks" not in Record.from_dict(plain).to_dict()  # old lines stay as they were
    table = network_report.network_table([record])
    assert "## Networks" in table and "### poisson_fixed" in table
    assert f"| {directory.name} | inverse | mcd.model | 1,234 | 20 | mean_relative_l2 0.25 |" in table
    assert network_report.network_table([Record.from_dict(plain)]) == ""


def _mcd_config():
    import ml_collections

    config = ml_collections.ConfigDict()
    config.seed, config.seeds, config.num_cases, config.num_samples = 0, (0,), 2, 4
    config.chunk_size, config.batch_size, config.overwrite = 4, 2, False
    config.tasks = {"poisson_fixed": {"resolution": 16, "num_sensors": 6}}
    config.reference = sweep.reference_config("exact", num_samples=8)
    config.samplers = {"mcd": {"sampler": "mc_dropout", "networks": {"model": "inverse"}}}
    config.training = {"scale": "tiny", "num_steps": 20}
    return config


def test_scored_kinds_and_defaults():
    """Every built-in kind but the autoencoders is scored; the tiny sampler steps are the tiny sweep's."""
    from configs import base

    assert training.config("darcy", "prior", "tiny").scores.num_steps == base.TINY_OPTIONS["dps"]["num_steps"]
    assert training.config("darcy", "flow", "tiny").scores.num_steps == 64  # see the flow test
    assert training.config("darcy", "joint", "full").scores.num_steps == 500
    assert scores.CONDITIONAL == ("inverse", "flow_fno", "fundiff_dit")


def test_bad_score_settings_name_the_key():
    config = training.config("poisson_fixed", "prior", "tiny")
    config.scores.num_draws = 1
    with pytest.raises(ValueError, match="config.scores.num_draws"):
        scores.scorer(config, None)
    config = training.config("poisson_fixed", "prior", "tiny")
    config.scores.every = -1
    with pytest.raises(ValueError, match="config.scores.every"):
        scores.scorer(config, None)
    config.scores = {**scores.defaults("prior", "tiny"), "draws": 3}
    with pytest.raises(ValueError, match=r"config.scores: expected the keys .* unknown \['draws'\]"):
        scores.scorer(config, None)
