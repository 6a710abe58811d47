"""Scores of a trained network on its own, stored with it (`scores.json`) and logged while it trains.

A learned posterior row can be blamed on the method only if its network is known to be good.
Each scored kind has a `Scorer` (`scorer(config, setup)`): `scorer(model)` gives the network's
scores, `scorer.floor()` the same scores of what it should reproduce (empty where there is none):

  * generative priors (``prior``, ``joint``: EDM Heun steps over the Karras schedule, EDM Alg. 1,
    `diffusion.sample`; ``flow``: explicit Euler over t_n = n / N as the published ECI grid) draw
    `num_draws` unconditional samples with their own sampler, scored by the posterior metrics
    (`DISTRIBUTION`: `metrics.posterior` mean / std error, MMD, sliced Wasserstein, spectral error;
    the task's `evaluation_field` applied to the unknown) against `num_draws` exact prior draws
    (`task.prior`). The floor is the Monte Carlo one: the same metrics between two independent
    sets of `num_draws` exact draws, so a perfect network scores about the floor. Joint
    (unknown, state) priors also score their state channels (``state_*``) against the physics of
    the exact draws, and the RMS PDE residual `task.physics.residual(x, u)` of the generated pairs
    (``residual_rms``; floor: that of exact pairs, the solver's own residual);
  * the ``surrogate`` on `num_draws` held-out prior draws: relative L2 of each state channel,
    ``relative_l2_u<c>`` = mean_i ||G(x_i)_c - u_ic|| / ||u_ic||, and the observation RMSE in
    units of the noise std, ``observation_rmse`` = sqrt(mean((obs(G(x)) - obs(u))^2 / s^2));
  * conditional kinds (``inverse`` with MC dropout, ``flow_fno``, ``fundiff_dit``) through the
    sampler they serve (`Kind.samplers`) on `num_cases` held-out cases (`task.cases(seed, ...)`):
    ``mean_relative_l2``, the relative L2 of the mean of `num_samples` samples against the truth.

Settings: the training config's ``scores`` section (`defaults(kind, scale)`): `num_draws`,
`num_cases`, `num_samples`, `num_steps` (the sampler's step count; 0: its builder's default),
`seed`, `every` (log the scores to `metrics.jsonl` every so many steps; 0: only at the end). The
section is not part of a network's identity (the sweep's network hash leaves it out); the stored
`digest` covers it, the task, the kind and the EMA parameters, so `ensure` rescores only what is
stale.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np

from posteriorjax import checks, diffusion, files, random_fields, samplers
from posteriorjax.files import parameter_digest
from posteriorjax.metrics import posterior
from posteriorjax.nn.pdeobs import parameter_count
from posteriorjax.training import kinds

FILE = "scores.json"
FORMAT = 1
DISTRIBUTION = ("mean_error", "std_error", "mmd", "sliced_wasserstein", "spectral_error")
SIGMA_MIN, SIGMA_MAX = 0.002, 80.0  # the EDM schedule the guided samplers use
DRAW_BATCH = 64  # draws computed together (lax.map batch) to bound memory at full scale

CONDITIONAL = ("inverse", "flow_fno", "fundiff_dit")  # scored through the sampler they serve
# sampler steps per kind and scale: the EDM kinds take the tiny sweep's 16 Heun steps
# (`configs.base.TINY_OPTIONS`), the medium table's 100 and the guided builders' 500 at full
# scale; the flow takes 64 Euler steps at tiny scale, not the tiny ECI's 8 (with 8 the exact
# velocity of a GRF prior scores three times the Monte Carlo floor in std error: the Euler steps,
# not the network), the medium table's 100 and the published 200 at full scale; other kinds 0:
# their sampler builder's default
_STEPS = {
    "prior": {"tiny": 16, "medium": 100, "full": 500},
    "joint": {"tiny": 16, "medium": 100, "full": 500},
    "flow": {"tiny": 64, "medium": 100, "full": 200},
}
# draws, conditional cases x samples and frequency per scale: medium scores as often as the
# medium training evaluates (`settings._train_section`) at a CPU's cost
_SIZES = {
    "tiny": dict(num_draws=32, num_cases=4, num_samples=8, every=100),
    "medium": dict(num_draws=128, num_cases=16, num_samples=16, every=1000),
    "full": dict(num_draws=256, num_cases=32, num_samples=32, every=50_000),
}


def defaults(kind: str, scale: str) -> dict:
    """The ``scores`` section of a `kind` network's training config at `scale` (tiny: cheap)."""
    sizes = _SIZES[scale]
    return {
        "num_draws": sizes["num_draws"],
        "num_cases": sizes["num_cases"],
        "num_samples": sizes["num_samples"],
        "num_steps": _STEPS.get(kind, {}).get(scale, 0),
        "seed": 2024,
        "every": sizes["every"],
    }


def settings(section) -> dict:
    """The ``scores`` section as a dict, checked (ValueError naming the bad key and value)."""
    values = _plain(section)
    expected = set(defaults("prior", "tiny"))
    if set(values) != expected:
        raise ValueError(
            f"config.scores: expected the keys {sorted(expected)}; unknown {sorted(set(values) - expected)}, "
            f"missing {sorted(expected - set(values))}"
        )
    checks.integer_at_least("config.scores.num_draws", values["num_draws"], 2)
    for name in ("num_cases", "num_samples"):
        checks.positive_int(f"config.scores.{name}", values[name])
    for name in ("num_steps", "seed", "every"):
        checks.integer_at_least(f"config.scores.{name}", values[name], 0)
    return values


def distribution(samples, reference, *, field_stats=None) -> dict[str, float]:
    """The `DISTRIBUTION` metrics of `samples (N, C, H, W)` against `reference (M, C, H, W)`.

    `field_stats`: the sliced Wasserstein z-score (`posterior.sliced_wasserstein`); the spectral
    error drops a round-off DC bin (``include_dc="auto"``), as the sweep records it.
    """
    return {
        "mean_error": float(posterior.mean_error(samples, reference)),
        "std_error": float(posterior.std_error(samples, reference)),
        "mmd": float(posterior.mmd(samples, reference)),
        "sliced_wasserstein": float(
            posterior.sliced_wasserstein(samples, reference, field_stats=field_stats)
        ),
        "spectral_error": float(posterior.spectral_error(samples, reference, include_dc="auto")),
    }


def _batched(fn, xs):
    """`vmap(fn)` over the leading axis of `xs`, `DRAW_BATCH` at a time."""
    return jax.lax.map(fn, xs, batch_size=min(DRAW_BATCH, int(jax.tree.leaves(xs)[0].shape[0])))


class Scorer:
    """The scores of one network kind on one task (see the module doc).

    `prepare() -> (compute, floor)` draws what the scores compare against, on first use only (a
    resumed finished run with stored scores never pays for it); `compute(model)` and `floor()`
    (None: no floor) return {name: scalar}. `__call__(model)` caches its last result by parameter
    digest, so the final scores reuse the last logged ones.
    """

    def __init__(self, prepare: Callable):
        self._prepare, self._parts, self._last = prepare, None, (None, None)

    def _get(self):
        if self._parts is None:
            self._parts = self._prepare()
        return self._parts

    def __call__(self, model) -> dict[str, float]:
        digest = parameter_digest(model)
        if self._last[0] != digest:
            self._last = (digest, {k: float(v) for k, v in self._get()[0](model).items()})
        return dict(self._last[1])

    def floor(self) -> dict[str, float]:
        floor = self._get()[1]
        return {} if floor is None else {k: float(v) for k, v in floor().items()}


def unconditional(task, draw: Callable, num_draws: int, seed: int, *, joint: bool = False) -> Scorer:
    """A generative prior's `Scorer`: `draw(model, key) -> (C, H, W)` one physical sample of the
    unknown (``joint``: stacked on its state), against `num_draws` exact prior draws."""
    k_ref, k_floor, k_model = jr.split(jr.key(seed), 3)
    sample = eqx.filter_jit(lambda model, keys: _batched(lambda k: draw(model, k), keys))
    keys = jr.split(k_model, num_draws)

    def prepare():
        exact = [random_fields.sample_batch(task.prior, k, num_draws) for k in (k_ref, k_floor)]
        if joint:
            exact = [jnp.concatenate([x, _batched(task.physics, x)], axis=1) for x in exact]
        reference, other = exact
        scores = functools.partial(_prior_scores, task, reference, joint)
        return (lambda model: scores(sample(model, keys))), (lambda: scores(other))

    return Scorer(prepare)


def _prior_scores(task, reference, joint: bool, stack) -> dict:
    """The scores of physical draws `stack (N, C, H, W)` against `reference` (`unconditional`)."""
    cx = task.unknown_shape[0]
    x, u = stack[:, :cx], stack[:, cx:]
    ev = jax.vmap(task.evaluation_field)
    out = distribution(ev(x), ev(reference[:, :cx]), field_stats=task.field_stats)
    if joint:
        out.update({f"state_{k}": v for k, v in distribution(u, reference[:, cx:]).items()})
        residual = _batched(lambda p: task.physics.residual(p[:cx], p[cx:]), stack)
        rms = jnp.sqrt(jnp.mean(residual.reshape(residual.shape[0], -1) ** 2, axis=1))
        out["residual_rms"] = float(jnp.mean(rms))
    return out


def edm_draw(shape, noise, num_steps: int) -> Callable:
    """`draw(denoiser, key)`: Heun steps of the probability-flow ODE (`diffusion.sample`) over the
    Karras schedule (`SIGMA_MIN`, `SIGMA_MAX`, rho 7) from `noise`, denormalized."""
    sigmas = diffusion.karras_sigmas(num_steps, SIGMA_MIN, SIGMA_MAX)

    def draw(model, key):
        x_n = diffusion.sample(key, model, (model.channels, *shape), sigmas, noise=noise, method="heun")
        return model.denormalize(x_n)

    return draw


def flow_draw(shape, num_steps: int) -> Callable:
    """`draw(velocity, key)`: explicit Euler x <- x + (t' - t) v(x, t) over t_n = n / N from the
    velocity's base noise (the published ECI grid without the constraint), denormalized."""
    ts = jnp.arange(num_steps + 1) / num_steps

    def draw(model, key):
        x = model.noise.sample(key, (model.channels, *shape))
        ts_ = ts.astype(x.dtype)

        def step(x, pair):
            return (x + (pair[1] - pair[0]) * model(x, pair[0])).astype(x.dtype), None

        x, _ = jax.lax.scan(step, x, jnp.stack([ts_[:-1], ts_[1:]], axis=1))
        return model.normalizer.denormalize(x)

    return draw


def surrogate(task, num_draws: int, seed: int) -> Scorer:
    """The surrogate's `Scorer` on `num_draws` held-out prior draws (module doc); no floor."""
    apply = eqx.filter_jit(lambda model, x: _batched(model, x))

    def prepare():
        x = random_fields.sample_batch(task.prior, jr.key(seed), num_draws)
        u = _batched(task.physics, x)
        return (lambda model: surrogate_scores(apply(model, x), u, task)), None

    return Scorer(prepare)


def surrogate_scores(predicted, truth, task) -> dict[str, float]:
    """Per-channel relative L2 and the noise-unit observation RMSE of states `predicted (N, C_u, H, W)`
    against `truth` (module doc)."""
    predicted, truth = jnp.asarray(predicted), jnp.asarray(truth)
    out = {
        f"relative_l2_u{c}": float(jnp.mean(posterior.relative_l2(predicted[:, c], truth[:, c])))
        for c in range(truth.shape[1])
    }
    residual = jax.vmap(task.observation)(predicted) - jax.vmap(task.observation)(truth)
    white = jax.vmap(task.noise.whiten)(residual)
    out["observation_rmse"] = float(jnp.sqrt(jnp.mean(white**2)))
    return out


def conditional(task, build: Callable, num_cases: int, num_samples: int, seed: int) -> Scorer:
    """A conditional network's `Scorer`: `build(model)` the sampler it serves, run on `num_cases`
    held-out cases; ``mean_relative_l2`` of the ensemble mean against the truth; no floor."""
    keys = jr.split(jr.key(seed + 1), num_cases)

    @eqx.filter_jit
    def means(sampler, y_obs):
        hp = sampler.hparams()
        one = lambda k, y: jnp.mean(sampler.sample_traced(k, y, num_samples, hp), axis=0)  # noqa: E731
        return jax.vmap(one)(keys, y_obs)

    def prepare():
        cases = task.cases(seed, num_cases)

        def compute(model):
            mean = means(build(model), cases.y_obs)
            return {"mean_relative_l2": jnp.mean(posterior.relative_l2(mean, cases.x_true))}

        return compute, None

    return Scorer(prepare)


def scorer(config, setup) -> Scorer | None:
    """The `Scorer` of a training config (`settings.config`) and its built `run.Setup`; None for a
    kind without one (the autoencoders, out-of-tree kinds) or a config without a ``scores`` section
    (a run written before it existed)."""
    section = config.get("scores")
    if section is None:
        return None
    s, task, kind = settings(section), setup.task, config.kind
    shape = tuple(task.unknown_shape[1:])
    if kind in _STEPS and s["num_steps"] < 1:
        raise ValueError(f"config.scores.num_steps: kind {kind!r} samples with at least 1 step, got 0")
    if kind in ("prior", "joint"):
        draw = edm_draw(shape, setup.noise, s["num_steps"])
        return unconditional(task, draw, s["num_draws"], s["seed"], joint=kind == "joint")
    if kind == "flow":
        return unconditional(task, flow_draw(shape, s["num_steps"]), s["num_draws"], s["seed"], joint=True)
    if kind == "surrogate":
        return surrogate(task, s["num_draws"], s["seed"])
    if kind not in CONDITIONAL:
        return None
    # the sampler it serves: the first registered one taking the kind (a built-in before a plugin's)
    name, option = next(
        (n, o) for n, b in samplers.REGISTRY.items() for o, k in b.networks.items() if k == kind
    )
    option_of = {k: o for o, k in samplers.networks(name).items()}
    options = {option_of[k]: setup.inputs[role] for role, k in kinds.get(kind).inputs.items()}
    if s["num_steps"] and "num_steps" in samplers.options(name):
        options["num_steps"] = s["num_steps"]
    build = lambda model: samplers.get(name, task, **{option: model}, **options)  # noqa: E731
    return conditional(task, build, s["num_cases"], s["num_samples"], s["seed"])


def digest(config, model) -> str:
    """What the stored scores depend on: the kind, the task, the ``scores`` settings and the
    EMA parameters (SHA-256, 16 hex digits)."""
    plain = {
        "format": FORMAT,
        "kind": config.kind,
        "task": config.task,
        "task_options": _plain(config.task_options),
        "scores": _plain(config.scores),
        "parameters": parameter_digest(model),
    }
    return files.json_digest(plain, 16)


def _plain(section) -> dict:
    return section.to_dict() if hasattr(section, "to_dict") else dict(section)


def read(workdir) -> dict | None:
    """The stored `scores.json` of a network's workdir, or None (none, or unreadable)."""
    path = Path(workdir) / FILE
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def ensure(workdir, config, model, scorer_: Scorer | None, steps: int) -> dict | None:
    """The scores of the finished run in `workdir` (EMA `model` after `steps` steps): the stored
    ones when their digest matches, else computed and written atomically (process 0)."""
    if scorer_ is None:
        return None
    key = digest(config, model)
    stored = read(workdir)
    if stored is not None and stored.get("digest") == key:
        return stored
    report = {
        "format": FORMAT,
        "digest": key,
        "kind": config.kind,
        "task": config.task,
        "parameters": parameter_digest(model),
        "num_parameters": int(parameter_count(eqx.filter(model, eqx.is_inexact_array))),
        "training_steps": int(steps),
        "settings": _plain(config.scores),
        "scores": scorer_(model),
        "floor": scorer_.floor(),
    }
    report = _finite(report)
    if jax.process_index() == 0:
        files.atomic_write_json(Path(workdir) / FILE, report)
    return report


def _finite(report: dict) -> dict:
    """Non-finite scores as None (JSON has no NaN)."""
    out = dict(report)
    for part in ("scores", "floor"):
        out[part] = {k: (v if np.isfinite(v) else None) for k, v in report[part].items()}
    return out


def describe(report: Mapping) -> str:
    """One line per score, ``name  value  (floor value)``, for the console."""
    floor = report.get("floor") or {}
    lines = []
    for name, value in report["scores"].items():
        text = f"  {name:<28s} {_number(value)}"
        if name in floor:
            text += f"  (floor {_number(floor[name])})"
        lines.append(text)
    return "\n".join(lines)


def _number(value) -> str:
    return "NaN" if value is None or not np.isfinite(value) else f"{value:.4g}"
